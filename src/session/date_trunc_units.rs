//! The units PostgreSQL's `date_trunc` takes that DataFusion's does not: plural names
//! (`'microseconds'`, `'hours'`, ...) and the `decade`, `century` and `millennium` of a
//! timestamp. Plurals become DataFusion's singular names; the three long units truncate
//! to the year first and then move back to the first year of the decade (2202 → 2200),
//! century (→ 2201: PostgreSQL's centuries start at year 1) or millennium (→ 2001).

use arrow::array::{Array, ArrayRef, AsArray, TimestampMicrosecondArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, TimeUnit, TimestampMicrosecondType};
use chrono::{DateTime, Datelike, NaiveDate};
use datafusion::common::{Result, exec_err};

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
        DataType::Timestamp(_, Some(zone)) => std::sync::Arc::new(out.with_timezone(zone.clone())),
        _ => std::sync::Arc::new(out),
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
