//! `jsonb_agg(value [ORDER BY ...])` and `jsonb_object_agg(key, value)`.
//!
//! Each row becomes its JSON text (with its `ORDER BY` key, memcomparable, when the call
//! orders its rows); the result joins them in key order, input order among equal keys.
//! Partial states are those rows, merged by concatenation. In a view these run as
//! general aggregates (each group keeps its rows, see `hash_agg::GeneralAgg`), so
//! retractions need nothing from here.

use super::text;
use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Field, FieldRef};
use arrow::row::RowConverter;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility,
};
use serde_json::Value;
use std::sync::Arc;

pub fn all() -> Vec<AggregateUDF> {
    [Kind::Array, Kind::Object]
        .into_iter()
        .map(|kind| {
            AggregateUDF::from(JsonbAgg {
                kind,
                signature: Signature::variadic_any(Volatility::Immutable),
            })
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    /// `jsonb_agg(value)`: an array of every row's value, NULL as `null`.
    Array,
    /// `jsonb_object_agg(key, value)`: an object; a repeated key keeps its last value.
    Object,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonbAgg {
    kind: Kind,
    signature: Signature,
}

impl AggregateUDFImpl for JsonbAgg {
    fn name(&self) -> &str {
        match self.kind {
            Kind::Array => "jsonb_agg",
            Kind::Object => "jsonb_object_agg",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn return_field(&self, arg_fields: &[FieldRef]) -> Result<FieldRef> {
        let wanted = match self.kind {
            Kind::Array => 1,
            Kind::Object => 2,
        };
        if arg_fields.len() != wanted {
            return datafusion::common::plan_err!(
                "{} takes {wanted} argument(s), not {}",
                self.name(),
                arg_fields.len()
            );
        }
        Ok(Arc::new(super::jsonb_field(self.name())))
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let order = crate::plan_helpers::ordering_codec(&args)?;
        Ok(Box::new(Rows {
            kind: self.kind,
            fields: args.expr_fields.to_vec(),
            order,
            rows: Vec::new(),
        }))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let list = |name: &str, item: DataType| {
            Arc::new(Field::new(
                format_state_name(args.name, name),
                DataType::new_list(item, true),
                true,
            ))
        };
        Ok(vec![
            list("keys", DataType::Utf8),
            list("values", DataType::Utf8),
            list("order_keys", DataType::Binary),
        ])
    }
}

/// The rows seen: the object key (for `jsonb_object_agg`), the value's JSON text and
/// the ordering key.
#[derive(Debug)]
struct Rows {
    kind: Kind,
    /// The arguments' fields: whether a string argument is a `jsonb` value.
    fields: Vec<FieldRef>,
    order: Option<RowConverter>,
    rows: Vec<(Option<String>, String, Vec<u8>)>,
}

impl Accumulator for Rows {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let arguments = match self.kind {
            Kind::Array => 1,
            Kind::Object => 2,
        };
        let keys = match (&self.order, values.len() > arguments) {
            (Some(order), true) => Some(order.convert_columns(&values[arguments..])?),
            _ => None,
        };
        let value_column = arguments - 1;
        let value_field = self.fields.get(value_column).cloned().unwrap_or_else(|| {
            Arc::new(Field::new(
                "v",
                values[value_column].data_type().clone(),
                true,
            ))
        });
        let object_keys = match self.kind {
            Kind::Object => Some(arrow::compute::cast(&values[0], &DataType::Utf8)?),
            Kind::Array => None,
        };
        for i in 0..values[value_column].len() {
            let key = match &object_keys {
                Some(k) if k.is_null(i) => continue,
                Some(k) => Some(k.as_string::<i32>().value(i).to_string()),
                None => None,
            };
            let value = super::value_of(values[value_column].as_ref(), &value_field, i)
                .map_err(crate::error::EddyError::into_datafusion)?;
            let order_key = keys
                .as_ref()
                .map(|k| k.row(i).as_ref().to_vec())
                .unwrap_or_default();
            self.rows.push((key, text::render(&value), order_key));
        }
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let (keys, values, orders) = (
            states[0].as_list::<i32>(),
            states[1].as_list::<i32>(),
            states[2].as_list::<i32>(),
        );
        for state in 0..values.len() {
            if values.is_null(state) {
                continue;
            }
            let (k, v, o) = (keys.value(state), values.value(state), orders.value(state));
            let (k, v, o) = (
                k.as_string::<i32>(),
                v.as_string::<i32>(),
                o.as_binary::<i32>(),
            );
            for i in 0..v.len() {
                let key = (!k.is_null(i)).then(|| k.value(i).to_string());
                self.rows
                    .push((key, v.value(i).to_string(), o.value(i).to_vec()));
            }
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let keys: Vec<_> = self
            .rows
            .iter()
            .map(|r| ScalarValue::Utf8(r.0.clone()))
            .collect();
        let values: Vec<_> = self
            .rows
            .iter()
            .map(|r| ScalarValue::Utf8(Some(r.1.clone())))
            .collect();
        let orders: Vec<_> = self
            .rows
            .iter()
            .map(|r| ScalarValue::Binary(Some(r.2.clone())))
            .collect();
        Ok(vec![
            ScalarValue::List(ScalarValue::new_list_nullable(&keys, &DataType::Utf8)),
            ScalarValue::List(ScalarValue::new_list_nullable(&values, &DataType::Utf8)),
            ScalarValue::List(ScalarValue::new_list_nullable(&orders, &DataType::Binary)),
        ])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        if self.rows.is_empty() {
            return Ok(ScalarValue::Utf8(None));
        }
        // A stable sort: rows with equal keys keep their input order.
        self.rows.sort_by(|a, b| a.2.cmp(&b.2));
        let parse = |t: &str| serde_json::from_str::<Value>(t).unwrap_or(Value::Null);
        let result = match self.kind {
            Kind::Array => Value::Array(self.rows.iter().map(|r| parse(&r.1)).collect()),
            Kind::Object => Value::Object(
                self.rows
                    .iter()
                    .map(|r| (r.0.clone().unwrap_or_default(), parse(&r.1)))
                    .collect(),
            ),
        };
        Ok(ScalarValue::Utf8(Some(text::render(&result))))
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self)
            + self
                .rows
                .iter()
                .map(|r| {
                    r.0.as_ref().map_or(0, String::capacity) + r.1.capacity() + r.2.capacity() + 64
                })
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{BooleanArray, Int32Array, StringArray};

    fn rows(kind: Kind, fields: Vec<Field>) -> Rows {
        Rows {
            kind,
            fields: fields.into_iter().map(Arc::new).collect(),
            order: None,
            rows: Vec::new(),
        }
    }

    #[test]
    fn arrays_keep_nulls_and_objects_keep_the_last_value() {
        let mut a = rows(Kind::Array, vec![Field::new("v", DataType::Boolean, true)]);
        let values: ArrayRef = Arc::new(BooleanArray::from(vec![Some(false), None]));
        a.update_batch(&[values]).unwrap();
        assert_eq!(
            a.evaluate().unwrap(),
            ScalarValue::Utf8(Some("[false, null]".into()))
        );

        let mut o = rows(
            Kind::Object,
            vec![
                Field::new("k", DataType::Utf8, true),
                super::super::jsonb_field("v"),
            ],
        );
        let keys: ArrayRef = Arc::new(StringArray::from(vec!["bbb", "ccc", "bbb"]));
        let values: ArrayRef = Arc::new(StringArray::from(vec![None, Some("null"), Some("999")]));
        o.update_batch(&[keys, values]).unwrap();
        assert_eq!(
            o.evaluate().unwrap(),
            ScalarValue::Utf8(Some(r#"{"bbb": 999, "ccc": null}"#.into()))
        );
    }

    #[test]
    fn partial_states_merge() {
        let field = || Field::new("v", DataType::Int32, true);
        let mut a = rows(Kind::Array, vec![field()]);
        a.update_batch(&[Arc::new(Int32Array::from(vec![1])) as ArrayRef])
            .unwrap();
        let mut b = rows(Kind::Array, vec![field()]);
        b.update_batch(&[Arc::new(Int32Array::from(vec![2])) as ArrayRef])
            .unwrap();
        let state: Vec<ArrayRef> = b
            .state()
            .unwrap()
            .iter()
            .map(|s| s.to_array().unwrap())
            .collect();
        a.merge_batch(&state).unwrap();
        assert_eq!(
            a.evaluate().unwrap(),
            ScalarValue::Utf8(Some("[1, 2]".into()))
        );
    }
}
