//! `to_timestamp(text, template)` with PostgreSQL's template patterns (`YYYY-MM-DD
//! HH24:MI:SS`), returning a timestamp with time zone as PostgreSQL and RisingWave do;
//! DataFusion's own `to_timestamp` takes chrono's `%Y-%m-%d` and gives one without. With
//! one argument (a number of seconds, or text in ISO form) DataFusion's function answers.

use arrow::array::{Array, ArrayRef, AsArray, TimestampMicrosecondBuilder};
use arrow::datatypes::{DataType, TimeUnit};
use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use std::sync::Arc;

pub fn udf(config: &datafusion::config::ConfigOptions) -> ScalarUDF {
    ScalarUDF::new_from_impl(ToTimestamp {
        signature: Signature::variadic_any(Volatility::Immutable),
        fallback: datafusion::functions::datetime::to_timestamp(config),
        date: false,
    })
}

/// `to_date(text, template)`: the same reading, the date of the result.
pub fn to_date_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(ToTimestamp {
        signature: Signature::variadic_any(Volatility::Immutable),
        fallback: datafusion::functions::datetime::to_date(),
        date: true,
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ToTimestamp {
    signature: Signature,
    fallback: Arc<ScalarUDF>,
    /// `to_date`: the result is the date of the timestamp read.
    date: bool,
}

fn utc_micros() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))
}

impl ScalarUDFImpl for ToTimestamp {
    fn name(&self) -> &str {
        if self.date { "to_date" } else { "to_timestamp" }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args.len() {
            2 if self.date => Ok(DataType::Date32),
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
                    return exec_err!("{}: template \"{template}\" is not supported", self.name());
                };
                format = Some((template.to_string(), chrono));
            }
            let chrono = &format.as_ref().expect("set above").1;
            let text = texts.value(i).trim();
            let Some(micros) = parse(text, chrono) else {
                return exec_err!(
                    "invalid value \"{text}\" for template \"{template}\" in {}",
                    self.name()
                );
            };
            out.append_value(micros);
        }
        let mut array: ArrayRef = Arc::new(out.finish().with_timezone("+00:00"));
        if self.date {
            array = arrow::compute::cast(&array, &DataType::Date32)?;
        }
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&array, 0)?)
        } else {
            ColumnarValue::Array(array)
        })
    }
}

/// Microseconds since the epoch (UTC) of `text` read with chrono's `format`. A negative
/// year is a year BC, as in PostgreSQL (`-2022` is 2022 BC, the year before 2021 BC;
/// chrono counts years astronomically, where 2022 BC is -2021).
fn parse(text: &str, format: &str) -> Option<i64> {
    let micros = parse_astronomical(text, format)?;
    let t = DateTime::from_timestamp_micros(micros)?;
    if t.year() >= 0 {
        return Some(micros);
    }
    Some(t.with_year(t.year() + 1)?.timestamp_micros())
}

/// [`parse`] with chrono's years: with a zone offset, a date and time, or a date alone
/// (midnight).
fn parse_astronomical(text: &str, format: &str) -> Option<i64> {
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
