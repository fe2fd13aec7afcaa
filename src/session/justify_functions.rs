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

fn justify_hours(v: IntervalMonthDayNano) -> IntervalMonthDayNano {
    let whole_days = v.nanoseconds / NANOS_PER_DAY;
    let mut days = v.days + whole_days as i32;
    let mut nanos = v.nanoseconds - whole_days * NANOS_PER_DAY;
    if days > 0 && nanos < 0 {
        nanos += NANOS_PER_DAY;
        days -= 1;
    } else if days < 0 && nanos > 0 {
        nanos -= NANOS_PER_DAY;
        days += 1;
    }
    IntervalMonthDayNano::new(v.months, days, nanos)
}

fn justify_days(v: IntervalMonthDayNano) -> IntervalMonthDayNano {
    let whole_months = v.days / DAYS_PER_MONTH;
    let mut months = v.months + whole_months;
    let mut days = v.days - whole_months * DAYS_PER_MONTH;
    if months > 0 && days < 0 {
        days += DAYS_PER_MONTH;
        months -= 1;
    } else if months < 0 && days > 0 {
        days -= DAYS_PER_MONTH;
        months += 1;
    }
    IntervalMonthDayNano::new(months, days, v.nanoseconds)
}

fn justify_interval(v: IntervalMonthDayNano) -> IntervalMonthDayNano {
    let whole_days = v.nanoseconds / NANOS_PER_DAY;
    let mut nanos = v.nanoseconds - whole_days * NANOS_PER_DAY;
    let days = v.days + whole_days as i32;
    let whole_months = days / DAYS_PER_MONTH;
    let mut days = days - whole_months * DAYS_PER_MONTH;
    let mut months = v.months + whole_months;
    if months > 0 && (days < 0 || (days == 0 && nanos < 0)) {
        days += DAYS_PER_MONTH;
        months -= 1;
    } else if months < 0 && (days > 0 || (days == 0 && nanos > 0)) {
        days -= DAYS_PER_MONTH;
        months += 1;
    }
    if days > 0 && nanos < 0 {
        nanos += NANOS_PER_DAY;
        days -= 1;
    } else if days < 0 && nanos > 0 {
        nanos -= NANOS_PER_DAY;
        days += 1;
    }
    IntervalMonthDayNano::new(months, days, nanos)
}
