//! `justify_hours`, `justify_days` and `justify_interval`: PostgreSQL's normalisation of an
//! interval's parts — 24 hours to a day, 30 days to a month — keeping every part's sign
//! the same, as PostgreSQL's `interval_justify_*` do.

use arrow::array::{AsArray, IntervalMonthDayNanoArray};
use arrow::datatypes::{DataType, IntervalMonthDayNano, IntervalMonthDayNanoType, IntervalUnit};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{ColumnarValue, ScalarUDF, Volatility, create_udf};
use std::sync::Arc;

const NANOS_PER_DAY: i64 = 86_400_000_000_000;
const DAYS_PER_MONTH: i32 = 30;

/// `justify_hours`, for rules that call it.
pub fn justify_hours_udf() -> Arc<ScalarUDF> {
    Arc::new(
        udfs()
            .into_iter()
            .find(|f| f.name() == "justify_hours")
            .expect("justify_hours is one of the justify functions"),
    )
}

pub fn udfs() -> Vec<ScalarUDF> {
    [
        (
            "justify_hours",
            justify_hours as fn(IntervalMonthDayNano) -> IntervalMonthDayNano,
        ),
        ("justify_days", justify_days),
        ("justify_interval", justify_interval),
    ]
    .into_iter()
    .map(|(name, justify)| {
        create_udf(
            name,
            vec![DataType::Interval(IntervalUnit::MonthDayNano)],
            DataType::Interval(IntervalUnit::MonthDayNano),
            Volatility::Immutable,
            Arc::new(move |args: &[ColumnarValue]| {
                let values = args[0].to_array(1)?;
                let values = values.as_primitive::<IntervalMonthDayNanoType>();
                let out: IntervalMonthDayNanoArray =
                    values.iter().map(|v| v.map(justify)).collect();
                Ok(match &args[0] {
                    ColumnarValue::Scalar(_) => {
                        ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
                    }
                    ColumnarValue::Array(_) => ColumnarValue::Array(Arc::new(out)),
                })
            }),
        )
    })
    .collect()
}

/// Gives a smaller part the sign of the larger one (`1 day -1 hour` is `23:00:00`) by
/// moving one `unit` of it across.
fn balance(large: &mut i64, small: &mut i64, unit: i64) {
    if *large > 0 && *small < 0 {
        *small += unit;
        *large -= 1;
    } else if *large < 0 && *small > 0 {
        *small -= unit;
        *large += 1;
    }
}

fn justify_hours(v: IntervalMonthDayNano) -> IntervalMonthDayNano {
    let mut days = i64::from(v.days) + v.nanoseconds / NANOS_PER_DAY;
    let mut nanos = v.nanoseconds % NANOS_PER_DAY;
    balance(&mut days, &mut nanos, NANOS_PER_DAY);
    IntervalMonthDayNano::new(v.months, days as i32, nanos)
}

fn justify_days(v: IntervalMonthDayNano) -> IntervalMonthDayNano {
    let mut months = i64::from(v.months) + i64::from(v.days / DAYS_PER_MONTH);
    let mut days = i64::from(v.days % DAYS_PER_MONTH);
    balance(&mut months, &mut days, i64::from(DAYS_PER_MONTH));
    IntervalMonthDayNano::new(months as i32, days as i32, v.nanoseconds)
}

fn justify_interval(v: IntervalMonthDayNano) -> IntervalMonthDayNano {
    let mut nanos = v.nanoseconds % NANOS_PER_DAY;
    let days = i64::from(v.days) + v.nanoseconds / NANOS_PER_DAY;
    let mut months = i64::from(v.months) + days / i64::from(DAYS_PER_MONTH);
    let mut days = days % i64::from(DAYS_PER_MONTH);
    // A whole month goes back to days when the days (or, without days, the time) are of
    // the other sign; then the days and the time are balanced.
    let against_months = if days == 0 {
        nanos.signum()
    } else {
        days.signum()
    };
    if months.signum() * against_months < 0 {
        days += i64::from(DAYS_PER_MONTH) * months.signum();
        months -= months.signum();
    }
    balance(&mut days, &mut nanos, NANOS_PER_DAY);
    IntervalMonthDayNano::new(months as i32, days as i32, nanos)
}
