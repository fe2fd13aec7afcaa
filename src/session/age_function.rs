//! `age(a, b)` and `age(a)`: PostgreSQL's "symbolic" difference of two timestamps, in
//! years, months and days rather than a count of days (`age('2024-03-01', '2024-01-01')`
//! is `2 mons`); `age(a)` is measured from midnight today. Fields are subtracted one by
//! one and a negative one borrows from the next larger, a month lending the days of the
//! month the earlier timestamp is in, as PostgreSQL's `timestamp_age` does. A
//! `timestamptz` is taken in UTC, Eddy's one time zone.

use arrow::array::{Array, AsArray, IntervalMonthDayNanoBuilder};
use arrow::datatypes::{DataType, IntervalMonthDayNano, TimeUnit, TimestampMicrosecondType};
use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, Timelike};
use datafusion::common::{Result, ScalarValue, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

pub fn udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(Age {
        signature: Signature::variadic_any(Volatility::Stable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Age {
    signature: Signature,
}

impl ScalarUDFImpl for Age {
    fn name(&self) -> &str {
        "age"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        if !(1..=2).contains(&args.len()) {
            return plan_err!("age takes one or two timestamps");
        }
        for arg in args {
            if !matches!(
                arg,
                DataType::Timestamp(..) | DataType::Date32 | DataType::Date64 | DataType::Null
            ) {
                return plan_err!("function age({arg}) does not exist: it takes timestamps");
            }
        }
        Ok(DataType::Interval(
            arrow::datatypes::IntervalUnit::MonthDayNano,
        ))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let micros = |value: &ColumnarValue| -> Result<arrow::array::ArrayRef> {
            let array = value.to_array(rows)?;
            let naive = match array.data_type() {
                // The UTC instant, read as a local time in UTC.
                DataType::Timestamp(unit, Some(_)) => {
                    arrow::compute::cast(&array, &DataType::Timestamp(*unit, None))?
                }
                _ => array,
            };
            Ok(arrow::compute::cast(
                &naive,
                &DataType::Timestamp(TimeUnit::Microsecond, None),
            )?)
        };
        let later = micros(&args.args[0])?;
        let earlier = match args.args.get(1) {
            Some(b) => micros(b)?,
            None => {
                let midnight = chrono::Utc::now()
                    .date_naive()
                    .and_hms_opt(0, 0, 0)
                    .expect("midnight exists")
                    .and_utc()
                    .timestamp_micros();
                ScalarValue::TimestampMicrosecond(Some(midnight), None).to_array_of_size(rows)?
            }
        };
        // `age(a)` is `age(midnight today, a)`.
        let (a, b) = if args.args.len() == 1 {
            (earlier, later)
        } else {
            (later, earlier)
        };
        let a = a.as_primitive::<TimestampMicrosecondType>();
        let b = b.as_primitive::<TimestampMicrosecondType>();
        let mut out = IntervalMonthDayNanoBuilder::with_capacity(rows);
        for i in 0..rows {
            if a.is_null(i) || b.is_null(i) {
                out.append_null();
                continue;
            }
            match (datetime(a.value(i)), datetime(b.value(i))) {
                (Some(a), Some(b)) => out.append_value(age(a, b)),
                _ => out.append_null(),
            }
        }
        let result = std::sync::Arc::new(out.finish()) as arrow::array::ArrayRef;
        Ok(
            if args
                .args
                .iter()
                .all(|a| matches!(a, ColumnarValue::Scalar(_)))
            {
                ColumnarValue::Scalar(ScalarValue::try_from_array(&result, 0)?)
            } else {
                ColumnarValue::Array(result)
            },
        )
    }
}

fn datetime(micros: i64) -> Option<NaiveDateTime> {
    DateTime::from_timestamp_micros(micros).map(|d| d.naive_utc())
}

/// `a - b` field by field, borrowing as PostgreSQL does.
fn age(a: NaiveDateTime, b: NaiveDateTime) -> IntervalMonthDayNano {
    let negative = a < b;
    let (later, earlier) = if negative { (b, a) } else { (a, b) };
    let mut usec = i64::from(later.nanosecond() / 1000) - i64::from(earlier.nanosecond() / 1000);
    let mut sec = i64::from(later.second()) - i64::from(earlier.second());
    let mut min = i64::from(later.minute()) - i64::from(earlier.minute());
    let mut hour = i64::from(later.hour()) - i64::from(earlier.hour());
    let mut day = i64::from(later.day()) - i64::from(earlier.day());
    let mut month = i64::from(later.month()) - i64::from(earlier.month());
    let mut year = i64::from(later.year()) - i64::from(earlier.year());
    borrow(&mut usec, &mut sec, 1_000_000);
    borrow(&mut sec, &mut min, 60);
    borrow(&mut min, &mut hour, 60);
    borrow(&mut hour, &mut day, 24);
    while day < 0 {
        day += days_in_month(earlier.year(), earlier.month());
        month -= 1;
    }
    while month < 0 {
        month += 12;
        year -= 1;
    }
    let sign = if negative { -1 } else { 1 };
    let nanos = ((hour * 60 + min) * 60 + sec) * 1_000_000_000 + usec * 1000;
    IntervalMonthDayNano::new(
        (sign * (year * 12 + month)) as i32,
        (sign * day) as i32,
        sign * nanos,
    )
}

fn days_in_month(year: i32, month: u32) -> i64 {
    let first = NaiveDate::from_ymd_opt(year, month, 1).expect("a month's first day");
    let next = if month == 12 {
        NaiveDate::from_ymd_opt(year + 1, 1, 1)
    } else {
        NaiveDate::from_ymd_opt(year, month + 1, 1)
    }
    .expect("the next month's first day");
    (next - first).num_days()
}

/// A negative difference of one field borrows one unit of the next larger field (of
/// `base` units), as in subtraction by hand.
fn borrow(field: &mut i64, larger: &mut i64, base: i64) {
    if *field < 0 {
        *field += base;
        *larger -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S").unwrap()
    }

    #[test]
    fn differences_in_years_months_and_days_as_postgresql_gives_them() {
        // PostgreSQL: age('2001-04-10', '1957-06-13') = 43 years 9 mons 27 days.
        assert_eq!(
            age(at("2001-04-10 00:00:00"), at("1957-06-13 00:00:00")),
            IntervalMonthDayNano::new(43 * 12 + 9, 27, 0)
        );
        // Days borrowed from the earlier timestamp's month (January: 31).
        assert_eq!(
            age(at("2024-03-01 00:00:00"), at("2024-01-31 12:00:00")),
            IntervalMonthDayNano::new(1, 0, 12 * 3_600_000_000_000)
        );
        // Negative when the first is earlier.
        assert_eq!(
            age(at("2024-01-01 00:00:00"), at("2024-03-01 00:00:00")),
            IntervalMonthDayNano::new(-2, 0, 0)
        );
    }
}
