//! `to_timestamp(text, template)` with PostgreSQL's template patterns (`YYYY-MM-DD
//! HH24:MI:SS`), returning a timestamp with time zone as PostgreSQL and RisingWave do;
//! DataFusion's own `to_timestamp` takes chrono's `%Y-%m-%d` and gives one without. With
//! one argument (a number of seconds, or text in ISO form) DataFusion's function answers.

use arrow::array::{Array, ArrayRef, AsArray, TimestampMicrosecondBuilder};
use arrow::datatypes::{DataType, TimeUnit};
use chrono::{DateTime, NaiveDate, NaiveDateTime};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use std::sync::Arc;

pub fn udf(config: &datafusion::config::ConfigOptions) -> ScalarUDF {
    ScalarUDF::new_from_impl(ToTimestamp {
        signature: Signature::variadic_any(Volatility::Immutable),
        fallback: datafusion::functions::datetime::to_timestamp(config),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ToTimestamp {
    signature: Signature,
    fallback: Arc<ScalarUDF>,
}

fn utc_micros() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))
}

impl ScalarUDFImpl for ToTimestamp {
    fn name(&self) -> &str {
        "to_timestamp"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args.len() {
            2 => Ok(utc_micros()),
            _ => self.fallback.return_type(args),
        }
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        match args.len() {
            2 => Ok(vec![DataType::Utf8, DataType::Utf8]),
            _ => Ok(args.to_vec()),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if args.args.len() != 2 {
            return self.fallback.invoke_with_args(args);
        }
        let rows = args.number_rows;
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let texts = arrow::compute::cast(&args.args[0].to_array(rows)?, &DataType::Utf8)?;
        let texts = texts.as_string::<i32>();
        let templates = arrow::compute::cast(&args.args[1].to_array(rows)?, &DataType::Utf8)?;
        let templates = templates.as_string::<i32>();
        let mut format: Option<(String, String)> = None;
        let mut out = TimestampMicrosecondBuilder::with_capacity(rows);
        for i in 0..rows {
            if texts.is_null(i) || templates.is_null(i) {
                out.append_null();
                continue;
            }
            let template = templates.value(i);
            if format.as_ref().is_none_or(|(t, _)| t != template) {
                let Some(chrono) = super::to_char::chrono_format(template) else {
                    return exec_err!("to_timestamp: template \"{template}\" is not supported");
                };
                format = Some((template.to_string(), chrono));
            }
            let chrono = &format.as_ref().expect("set above").1;
            let text = texts.value(i).trim();
            let Some(micros) = parse(text, chrono) else {
                return exec_err!(
                    "invalid value \"{text}\" for template \"{template}\" in to_timestamp"
                );
            };
            out.append_value(micros);
        }
        let array: ArrayRef = Arc::new(out.finish().with_timezone("+00:00"));
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&array, 0)?)
        } else {
            ColumnarValue::Array(array)
        })
    }
}

/// Microseconds since the epoch (UTC) of `text` read with chrono's `format`: with a zone
/// offset, a date and time, or a date alone (midnight).
fn parse(text: &str, format: &str) -> Option<i64> {
    if let Ok(t) = DateTime::parse_from_str(text, format) {
        return Some(t.timestamp_micros());
    }
    if let Ok(t) = NaiveDateTime::parse_from_str(text, format) {
        return Some(t.and_utc().timestamp_micros());
    }
    NaiveDate::parse_from_str(text, format).ok().map(|d| {
        d.and_time(chrono::NaiveTime::MIN)
            .and_utc()
            .timestamp_micros()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_of_postgresql_read_dates_and_times() {
        let f = crate::session::to_char::chrono_format("YYYY-MM-DD HH24:MI:SS").unwrap();
        assert_eq!(
            parse("2024-01-01 01:30:02", &f),
            Some(1_704_072_602_000_000)
        );
        let f = crate::session::to_char::chrono_format("DD/MM/YYYY").unwrap();
        assert_eq!(parse("02/01/2024", &f), Some(1_704_153_600_000_000));
        assert_eq!(parse("not a date", &f), None);
    }
}
