//! SQL values as JSON, as PostgreSQL's `to_jsonb` turns them: numbers and booleans as
//! themselves, text as a JSON string (a `jsonb` value as its JSON), arrays as arrays,
//! structs as objects, everything else as the string PostgreSQL would print.

use super::text;
use crate::error::Result;
use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, Field};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::common::ScalarValue;
use serde_json::{Number, Value};

/// The JSON of row `row` of `array`; `field` says whether strings are `jsonb` values.
pub fn value_of(array: &dyn Array, field: &Field, row: usize) -> Result<Value> {
    if array.is_null(row) || array.data_type() == &DataType::Null {
        return Ok(Value::Null);
    }
    Ok(match array.data_type() {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            let s = string_at(array, row);
            if super::is_jsonb(field) {
                text::parse(&s).map_err(super::invalid_json)?
            } else {
                Value::String(s)
            }
        }
        DataType::List(item) | DataType::LargeList(item) | DataType::FixedSizeList(item, _) => {
            let values = match array.data_type() {
                DataType::List(_) => array.as_list::<i32>().value(row),
                DataType::LargeList(_) => array.as_list::<i64>().value(row),
                _ => array.as_fixed_size_list().value(row),
            };
            Value::Array(
                (0..values.len())
                    .map(|i| value_of(values.as_ref(), item, i))
                    .collect::<Result<_>>()?,
            )
        }
        DataType::Struct(fields) => {
            let s = array.as_struct();
            let mut object = serde_json::Map::new();
            for (f, column) in fields.iter().zip(s.columns()) {
                object.insert(f.name().clone(), value_of(column.as_ref(), f, row)?);
            }
            Value::Object(object)
        }
        _ => scalar(&ScalarValue::try_from_array(array, row)?, array, row),
    })
}

fn scalar(value: &ScalarValue, array: &dyn Array, row: usize) -> Value {
    let number = |n: Option<Number>| n.map(Value::Number);
    let from_f64 = |f: f64| {
        number(Number::from_f64(f))
            .unwrap_or_else(|| Value::String(f.to_string().replace("inf", "Infinity")))
    };
    match value {
        ScalarValue::Boolean(Some(b)) => Value::Bool(*b),
        ScalarValue::Int8(Some(n)) => (*n).into(),
        ScalarValue::Int16(Some(n)) => (*n).into(),
        ScalarValue::Int32(Some(n)) => (*n).into(),
        ScalarValue::Int64(Some(n)) => (*n).into(),
        ScalarValue::UInt8(Some(n)) => (*n).into(),
        ScalarValue::UInt16(Some(n)) => (*n).into(),
        ScalarValue::UInt32(Some(n)) => (*n).into(),
        ScalarValue::UInt64(Some(n)) => (*n).into(),
        ScalarValue::Float32(Some(f)) => from_f64(*f as f64),
        ScalarValue::Float64(Some(f)) => from_f64(*f),
        ScalarValue::Decimal128(Some(_), _, _) | ScalarValue::Decimal256(Some(_), _, _) => {
            let shown = display(array, row);
            serde_json::from_str::<Number>(&shown)
                .map(Value::Number)
                .unwrap_or(Value::String(shown))
        }
        _ => Value::String(display(array, row)),
    }
}

fn string_at(array: &dyn Array, row: usize) -> String {
    match array.data_type() {
        DataType::Utf8 => array.as_string::<i32>().value(row).to_string(),
        DataType::LargeUtf8 => array.as_string::<i64>().value(row).to_string(),
        _ => array.as_string_view().value(row).to_string(),
    }
}

/// The string PostgreSQL's `to_jsonb` gives a value JSON has no type for: its output
/// text, with a timestamp in ISO 8601's form (`2024-01-01T10:00:00+00:00`). Arrow's
/// display already matches it for the other types (`1.50`, `2024-01-01`).
fn display(array: &dyn Array, row: usize) -> String {
    if !matches!(
        array.data_type(),
        DataType::Timestamp(..) | DataType::Interval(_) | DataType::Binary | DataType::LargeBinary
    ) {
        return ArrayFormatter::try_new(array, &FormatOptions::default())
            .map(|f| f.value(row).to_string())
            .unwrap_or_default();
    }
    let one = arrow::array::make_array(array.to_data()).slice(row, 1);
    let postgres = crate::pg_text::text_column(&one)
        .ok()
        .filter(|text| text.is_valid(0))
        .map(|text| text.value(0).to_string());
    match (postgres, array.data_type()) {
        (Some(text), DataType::Timestamp(..)) => text.replacen(' ', "T", 1),
        (Some(text), _) => text,
        (None, _) => ArrayFormatter::try_new(array, &FormatOptions::default())
            .map(|f| f.value(row).to_string())
            .unwrap_or_default(),
    }
}
