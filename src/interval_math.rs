//! PostgreSQL's arithmetic on intervals that both the planner's functions and the views'
//! aggregates need: scaling an interval by a factor, and the average of intervals.

use arrow::datatypes::IntervalMonthDayNano;

const NANOS_PER_DAY: f64 = 86_400e9;
const NANOS_PER_MICRO: f64 = 1e3;
const DAYS_PER_MONTH: f64 = 30.0;

/// An interval of `months`, `days` and `nanos` (which may be sums too large for an
/// interval's own fields) times `factor`, as PostgreSQL computes it: the fraction of the
/// scaled months spills into days (30 a month), the fraction of the days into time, and
/// time is kept to the microsecond.
pub fn scale_parts(months: f64, days: f64, nanos: f64, factor: f64) -> IntervalMonthDayNano {
    spill(months * factor, days * factor, nanos * factor)
}

/// An interval from parts already scaled, each possibly with a fraction: a month's
/// fraction becomes days, a day's fraction time.
fn spill(months: f64, days: f64, nanos: f64) -> IntervalMonthDayNano {
    let whole_months = months.trunc();
    let days = days + (months - whole_months) * DAYS_PER_MONTH;
    let whole_days = days.trunc();
    let nanos = nanos + (days - whole_days) * NANOS_PER_DAY;
    let nanos = (nanos / NANOS_PER_MICRO).round() * NANOS_PER_MICRO;
    IntervalMonthDayNano::new(whole_months as i32, whole_days as i32, nanos as i64)
}

/// PostgreSQL's `avg` of `count` intervals whose parts add up to `parts` (months, days,
/// nanoseconds): their sum divided by the count (divided, not multiplied by its inverse,
/// as PostgreSQL's `interval_div` does, so fractions round the same way).
pub fn average(parts: [i128; 3], count: i64) -> IntervalMonthDayNano {
    let count = count as f64;
    spill(
        parts[0] as f64 / count,
        parts[1] as f64 / count,
        parts[2] as f64 / count,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn averages_spill_fractions_downwards() {
        // (1 mon + 2 days) / 2 = 16 days (half a month is 15 days), as PostgreSQL gives.
        assert_eq!(average([1, 2, 0], 2), IntervalMonthDayNano::new(0, 16, 0));
        // (1 day + 1 hour) / 2 = 12:30:00.
        let hour = 3_600_000_000_000i128;
        assert_eq!(
            average([0, 1, hour], 2),
            IntervalMonthDayNano::new(0, 0, 12 * 3_600_000_000_000 + 1_800_000_000_000)
        );
        // A negative average keeps its sign in every part.
        assert_eq!(
            average([0, -3, 0], 2),
            IntervalMonthDayNano::new(0, -1, -43_200_000_000_000)
        );
    }
}
