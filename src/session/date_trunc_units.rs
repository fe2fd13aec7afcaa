//! The units PostgreSQL's `date_trunc` takes that DataFusion's does not: plural names
//! (`'microseconds'`, `'hours'`, ...) and the `decade`, `century` and `millennium` of a
//! timestamp. Plurals become DataFusion's singular names; the three long units truncate
//! to the year first and then move back to the first year of the decade (2202 → 2200),
//! century (→ 2201: PostgreSQL's centuries start at year 1) or millennium (→ 2001).
//! Intervals are truncated too (`2333 years 4 mons` to the quarter is `2333 years 3
//! mons`), by a `date_trunc` registered in place of DataFusion's that hands it
//! timestamps and times.

use arrow::array::{
    Array, ArrayRef, AsArray, IntervalMonthDayNanoArray, TimestampMicrosecondArray,
};
use arrow::compute::cast;
use arrow::datatypes::{
    DataType, Field, FieldRef, IntervalMonthDayNano, IntervalMonthDayNanoType, IntervalUnit,
    TimeUnit, TimestampMicrosecondType,
};
use chrono::{DateTime, Datelike, NaiveDate};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::sort_properties::{ExprProperties, SortProperties};
use datafusion::logical_expr::type_coercion::functions::fields_with_udf;
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use std::sync::Arc;

/// What a `date_trunc` unit asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TruncUnit {
    /// A unit DataFusion's `date_trunc` knows, by its name there.
    Native(String),
    /// Years grouped by this many (10, 100, 1000), PostgreSQL's way.
    Years(YearGroup),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum YearGroup {
    Decade,
    Century,
    Millennium,
}

/// The unit `text` names (case-insensitive, singular or plural).
pub fn unit_of(text: &str) -> TruncUnit {
    let lower = text.trim().to_ascii_lowercase();
    match lower.as_str() {
        "decade" | "decades" => TruncUnit::Years(YearGroup::Decade),
        "century" | "centuries" => TruncUnit::Years(YearGroup::Century),
        "millennium" | "millennia" | "millenniums" => TruncUnit::Years(YearGroup::Millennium),
        "microseconds" | "milliseconds" | "seconds" | "minutes" | "hours" | "days" | "weeks"
        | "months" | "quarters" | "years" => {
            TruncUnit::Native(lower.trim_end_matches('s').to_string())
        }
        _ => TruncUnit::Native(lower),
    }
}

impl YearGroup {
    /// The first year of the group holding `year` (years after 1 BC).
    fn first_year(self, year: i32) -> i32 {
        match self {
            YearGroup::Decade => year.div_euclid(10) * 10,
            YearGroup::Century => (year + 99).div_euclid(100) * 100 - 99,
            YearGroup::Millennium => (year + 999).div_euclid(1000) * 1000 - 999,
        }
    }
}

/// `values` (timestamps, any unit and zone, or dates) truncated to the first instant of
/// their decade, century or millennium, as `return_type`.
pub fn truncate_years(
    values: &ArrayRef,
    group: YearGroup,
    return_type: &DataType,
) -> Result<ArrayRef> {
    let micros_type = DataType::Timestamp(TimeUnit::Microsecond, None);
    let as_micros = match values.data_type() {
        DataType::Timestamp(_, _) | DataType::Date32 | DataType::Date64 => {
            cast(values, &micros_type)?
        }
        other => return exec_err!("date_trunc('{group:?}', ...) is not defined for {other}"),
    };
    let micros = as_micros.as_primitive::<TimestampMicrosecondType>();
    let out: TimestampMicrosecondArray = micros
        .iter()
        .map(|v| {
            let v = v?;
            let year = DateTime::from_timestamp_micros(v)?.naive_utc().year();
            let start = NaiveDate::from_ymd_opt(group.first_year(year), 1, 1)?;
            Some(start.and_hms_opt(0, 0, 0)?.and_utc().timestamp_micros())
        })
        .collect();
    // The instants are UTC's; a result with a zone keeps them.
    let out: ArrayRef = match return_type {
        DataType::Timestamp(_, Some(zone)) => Arc::new(out.with_timezone(zone.clone())),
        _ => Arc::new(out),
    };
    Ok(cast(&out, return_type)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_year_groups() {
        assert_eq!(unit_of("Hours"), TruncUnit::Native("hour".into()));
        assert_eq!(
            unit_of("microseconds"),
            TruncUnit::Native("microsecond".into())
        );
        assert_eq!(unit_of("day"), TruncUnit::Native("day".into()));
        assert_eq!(unit_of("s"), TruncUnit::Native("s".into()));
        assert_eq!(unit_of("CENTURY"), TruncUnit::Years(YearGroup::Century));
        assert_eq!(YearGroup::Decade.first_year(2202), 2200);
        assert_eq!(YearGroup::Century.first_year(2202), 2201);
        assert_eq!(YearGroup::Century.first_year(2000), 1901);
        assert_eq!(YearGroup::Millennium.first_year(2202), 2001);
        assert_eq!(YearGroup::Millennium.first_year(2000), 1001);
    }
}

/// `date_trunc` taking intervals too, as PostgreSQL's does; timestamps and times go to
/// DataFusion's function (registered in its place, under its name).
pub fn udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(PgDateTrunc {
        inner: datafusion::functions::datetime::date_trunc(),
        signature: Signature::user_defined(Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct PgDateTrunc {
    /// DataFusion's `date_trunc`.
    inner: Arc<ScalarUDF>,
    signature: Signature,
}

fn is_interval(t: &DataType) -> bool {
    matches!(t, DataType::Interval(_))
}

impl ScalarUDFImpl for PgDateTrunc {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        if let [_, value] = arg_types
            && is_interval(value)
        {
            return Ok(vec![
                DataType::Utf8,
                DataType::Interval(IntervalUnit::MonthDayNano),
            ]);
        }
        let fields: Vec<FieldRef> = arg_types
            .iter()
            .map(|t| Arc::new(Field::new("arg", t.clone(), true)))
            .collect();
        Ok(fields_with_udf(&fields, self.inner.as_ref())?
            .iter()
            .map(|f| f.data_type().clone())
            .collect())
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(arg_types[1].clone())
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if !is_interval(&args.args[1].data_type()) {
            return self.inner.invoke_with_args(args);
        }
        let ColumnarValue::Scalar(ScalarValue::Utf8(Some(unit))) = &args.args[0] else {
            return exec_err!("date_trunc of an interval takes a constant unit");
        };
        let unit = unit_of(unit);
        let scalar = matches!(args.args[1], ColumnarValue::Scalar(_));
        let values = args.args[1].to_array(args.number_rows)?;
        let values = values.as_primitive::<IntervalMonthDayNanoType>();
        let out: IntervalMonthDayNanoArray = values
            .iter()
            .map(|v| v.map(|v| truncate_interval(v, &unit)).transpose())
            .collect::<Result<_>>()?;
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(Arc::new(out))
        })
    }

    fn output_ordering(&self, input: &[ExprProperties]) -> Result<SortProperties> {
        self.inner.output_ordering(input)
    }
}

/// An interval truncated as PostgreSQL's `interval_trunc` does: its years, months, days
/// and time, every part below `unit` zeroed (toward zero, as the parts keep their signs).
fn truncate_interval(v: IntervalMonthDayNano, unit: &TruncUnit) -> Result<IntervalMonthDayNano> {
    const NANOS_PER: [(&str, i64); 5] = [
        ("hour", 3_600_000_000_000),
        ("minute", 60_000_000_000),
        ("second", 1_000_000_000),
        ("millisecond", 1_000_000),
        ("microsecond", 1_000),
    ];
    let years_of = |months: i32, group: i32| (months / 12 / group) * group * 12;
    Ok(match unit {
        TruncUnit::Years(group) => {
            let group = match group {
                YearGroup::Decade => 10,
                YearGroup::Century => 100,
                YearGroup::Millennium => 1000,
            };
            IntervalMonthDayNano::new(years_of(v.months, group), 0, 0)
        }
        TruncUnit::Native(unit) => match unit.as_str() {
            "year" => IntervalMonthDayNano::new(years_of(v.months, 1), 0, 0),
            "quarter" => {
                IntervalMonthDayNano::new(years_of(v.months, 1) + (v.months % 12) / 3 * 3, 0, 0)
            }
            "month" => IntervalMonthDayNano::new(v.months, 0, 0),
            "day" => IntervalMonthDayNano::new(v.months, v.days, 0),
            "week" => {
                return exec_err!(
                    "interval units \"week\" not supported because months usually have fractional weeks"
                );
            }
            other => match NANOS_PER.iter().find(|(name, _)| *name == other) {
                Some((_, step)) => {
                    IntervalMonthDayNano::new(v.months, v.days, v.nanoseconds / step * step)
                }
                None => return exec_err!("interval units \"{other}\" not recognized"),
            },
        },
    })
}
