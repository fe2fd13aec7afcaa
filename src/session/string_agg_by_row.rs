//! `string_agg(value, delimiter)` whose delimiter is not a constant
//! (`string_agg(a, b::varchar ORDER BY b)`): PostgreSQL puts each row's own delimiter
//! before its value (the first row's is dropped). DataFusion's `string_agg` takes only a
//! literal delimiter, so such calls are renamed to this aggregate
//! ([`super::sql_rewrite`]); calls with a literal delimiter stay DataFusion's.
//!
//! With `ORDER BY` the rows are kept with their ordering key (memcomparable, so the
//! order is the query's) and joined in that order when evaluated; partial states are
//! those rows, merged by concatenation.

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Field, FieldRef};
use arrow::row::RowConverter;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility,
};
use std::sync::Arc;

/// The aggregate's name in rewritten queries.
pub const NAME: &str = "eddy_string_agg";

pub fn udaf() -> AggregateUDF {
    AggregateUDF::from(StringAggByRow {
        signature: Signature::exact(vec![DataType::Utf8, DataType::Utf8], Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct StringAggByRow {
    signature: Signature,
}

impl AggregateUDFImpl for StringAggByRow {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        Ok(vec![DataType::Utf8; args.len()])
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let order = crate::plan_helpers::ordering_codec(&args)?;
        Ok(Box::new(Joined {
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
            list("values", DataType::Utf8),
            list("delimiters", DataType::Utf8),
            list("order_keys", DataType::Binary),
        ])
    }
}

/// The non-NULL values seen, each with its delimiter and ordering key.
#[derive(Debug)]
struct Joined {
    /// Encodes the `ORDER BY` columns; `None` without `ORDER BY` (input order).
    order: Option<RowConverter>,
    rows: Vec<(String, Option<String>, Vec<u8>)>,
}

impl Accumulator for Joined {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let texts = arrow::compute::cast(&values[0], &DataType::Utf8)?;
        let delimiters = arrow::compute::cast(&values[1], &DataType::Utf8)?;
        let (texts, delimiters) = (texts.as_string::<i32>(), delimiters.as_string::<i32>());
        // The ordering columns follow the arguments when the query orders the rows.
        let keys = match (&self.order, values.len() > 2) {
            (Some(order), true) => Some(order.convert_columns(&values[2..])?),
            _ => None,
        };
        for i in 0..texts.len() {
            if texts.is_null(i) {
                continue;
            }
            let delimiter = (!delimiters.is_null(i)).then(|| delimiters.value(i).to_string());
            let key = keys
                .as_ref()
                .map(|k| k.row(i).as_ref().to_vec())
                .unwrap_or_default();
            self.rows.push((texts.value(i).to_string(), delimiter, key));
        }
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let (values, delimiters, keys) = (
            states[0].as_list::<i32>(),
            states[1].as_list::<i32>(),
            states[2].as_list::<i32>(),
        );
        for state in 0..values.len() {
            if values.is_null(state) {
                continue;
            }
            let (v, d, k) = (
                values.value(state),
                delimiters.value(state),
                keys.value(state),
            );
            let (v, d, k) = (
                v.as_string::<i32>(),
                d.as_string::<i32>(),
                k.as_binary::<i32>(),
            );
            for i in 0..v.len() {
                let delimiter = (!d.is_null(i)).then(|| d.value(i).to_string());
                self.rows
                    .push((v.value(i).to_string(), delimiter, k.value(i).to_vec()));
            }
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let values: Vec<ScalarValue> = self
            .rows
            .iter()
            .map(|r| ScalarValue::Utf8(Some(r.0.clone())))
            .collect();
        let delimiters: Vec<ScalarValue> = self
            .rows
            .iter()
            .map(|r| ScalarValue::Utf8(r.1.clone()))
            .collect();
        let keys: Vec<ScalarValue> = self
            .rows
            .iter()
            .map(|r| ScalarValue::Binary(Some(r.2.clone())))
            .collect();
        Ok(vec![
            ScalarValue::List(ScalarValue::new_list_nullable(&values, &DataType::Utf8)),
            ScalarValue::List(ScalarValue::new_list_nullable(&delimiters, &DataType::Utf8)),
            ScalarValue::List(ScalarValue::new_list_nullable(&keys, &DataType::Binary)),
        ])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        // A stable sort: rows with equal keys keep their input order.
        self.rows.sort_by(|a, b| a.2.cmp(&b.2));
        let mut text: Option<String> = None;
        for (value, delimiter, _) in &self.rows {
            match &mut text {
                None => text = Some(value.clone()),
                Some(t) => {
                    t.push_str(delimiter.as_deref().unwrap_or(""));
                    t.push_str(value);
                }
            }
        }
        Ok(ScalarValue::Utf8(text))
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self)
            + self
                .rows
                .iter()
                .map(|r| {
                    r.0.capacity() + r.1.as_ref().map_or(0, String::capacity) + r.2.capacity() + 64
                })
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::StringArray;
    use arrow::row::SortField;

    #[test]
    fn each_row_brings_its_own_delimiter_and_partials_join() {
        let unordered = || Joined {
            order: None,
            rows: Vec::new(),
        };
        let mut a = unordered();
        let values: ArrayRef = Arc::new(StringArray::from(vec![Some("a"), None, Some("c")]));
        let delimiters: ArrayRef = Arc::new(StringArray::from(vec!["1", "x", "2"]));
        a.update_batch(&[values, delimiters]).unwrap();
        assert_eq!(a.evaluate().unwrap(), ScalarValue::Utf8(Some("a2c".into())));

        let mut b = unordered();
        let values: ArrayRef = Arc::new(StringArray::from(vec!["d"]));
        let delimiters: ArrayRef = Arc::new(StringArray::from(vec!["-"]));
        b.update_batch(&[values, delimiters]).unwrap();
        let state: Vec<ArrayRef> = b
            .state()
            .unwrap()
            .iter()
            .map(|s| s.to_array().unwrap())
            .collect();
        a.merge_batch(&state).unwrap();
        assert_eq!(
            a.evaluate().unwrap(),
            ScalarValue::Utf8(Some("a2c-d".into()))
        );
    }

    #[test]
    fn ordering_columns_decide_the_order() {
        let order = RowConverter::new(vec![SortField::new_with_options(
            DataType::Int32,
            arrow::compute::SortOptions {
                descending: true,
                nulls_first: true,
            },
        )])
        .unwrap();
        let mut a = Joined {
            order: Some(order),
            rows: Vec::new(),
        };
        let values: ArrayRef = Arc::new(StringArray::from(vec!["a", "b", "c"]));
        let delimiters: ArrayRef = Arc::new(StringArray::from(vec!["1", "4", "2"]));
        let keys: ArrayRef = Arc::new(arrow::array::Int32Array::from(vec![1, 4, 2]));
        a.update_batch(&[values, delimiters, keys]).unwrap();
        assert_eq!(
            a.evaluate().unwrap(),
            ScalarValue::Utf8(Some("b2c1a".into()))
        );
    }
}
