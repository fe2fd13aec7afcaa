//! Session windows as two window functions, `session_start(ts, gap)` and
//! `session_end(ts, gap)` `OVER (PARTITION BY ... ORDER BY ts)`: rows of a partition
//! belong to one session while each follows the one before it by less than `gap`; a
//! session starts at its first row's time and ends `gap` after its last row's.
//!
//! `SESSION(...)` in `FROM` (Flink's `TABLE(SESSION(TABLE t [PARTITION BY k],
//! DESCRIPTOR(ts), gap))`) is planned as them (`planner::window_tvf`), so batch queries
//! and views plan session windows alike; in a view the window functions are kept up to date like any other
//! (a row that bridges two sessions moves every row of both into the merged one).

use arrow::array::{Array, ArrayRef, AsArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, FieldRef, TimeUnit, TimestampMicrosecondType};
use datafusion::common::{Result, ScalarValue, plan_err};
use datafusion::logical_expr::function::{PartitionEvaluatorArgs, WindowUDFFieldArgs};
use datafusion::logical_expr::{
    PartitionEvaluator, Signature, Volatility, WindowUDF, WindowUDFImpl,
};
use std::sync::Arc;

pub fn functions() -> Vec<WindowUDF> {
    [false, true]
        .into_iter()
        .map(|end| {
            WindowUDF::new_from_impl(SessionBound {
                end,
                signature: Signature::any(2, Volatility::Immutable),
            })
        })
        .collect()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct SessionBound {
    /// `session_end` (else `session_start`).
    end: bool,
    signature: Signature,
}

impl WindowUDFImpl for SessionBound {
    fn name(&self) -> &str {
        if self.end {
            "session_end"
        } else {
            "session_start"
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn partition_evaluator(
        &self,
        _args: PartitionEvaluatorArgs,
    ) -> Result<Box<dyn PartitionEvaluator>> {
        Ok(Box::new(SessionEvaluator { end: self.end }))
    }

    fn field(&self, args: WindowUDFFieldArgs) -> Result<FieldRef> {
        let Some(time) = args.get_input_field(0) else {
            return plan_err!("{} needs a time and a gap", self.name());
        };
        if !matches!(time.data_type(), DataType::Timestamp(..)) {
            return plan_err!("a session window needs a timestamp column");
        }
        Ok(Arc::new(Field::new(
            args.name(),
            time.data_type().clone(),
            true,
        )))
    }
}

#[derive(Debug)]
struct SessionEvaluator {
    end: bool,
}

impl PartitionEvaluator for SessionEvaluator {
    fn evaluate_all(&mut self, values: &[ArrayRef], num_rows: usize) -> Result<ArrayRef> {
        let [times, gaps] = values else {
            return plan_err!("a session window needs a time and a gap");
        };
        let gap = gap_micros(gaps)?;
        let output_type = times.data_type().clone();
        let micros =
            arrow::compute::cast(times, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
        let micros = micros.as_primitive::<TimestampMicrosecondType>();
        // Per row, its session's first and last row (rows are in time order, NULLs last).
        let mut bounds: Vec<Option<i64>> = vec![None; num_rows];
        let mut first = 0;
        for i in 0..=num_rows {
            let breaks = i == num_rows
                || micros.is_null(i)
                || (i > first && micros.value(i) - micros.value(i - 1) >= gap);
            if breaks && i > first {
                let value = if self.end {
                    micros.value(i - 1) + gap
                } else {
                    micros.value(first)
                };
                bounds[first..i].fill(Some(value));
                first = i;
            }
            if i < num_rows && micros.is_null(i) {
                first = i + 1;
            }
        }
        let out: ArrayRef = Arc::new(TimestampMicrosecondArray::from(bounds));
        Ok(arrow::compute::cast(&out, &output_type)?)
    }
}

/// The gap in microseconds: a positive, fixed interval.
fn gap_micros(gaps: &ArrayRef) -> Result<i64> {
    if gaps.is_empty() {
        return Ok(1);
    }
    let gap = ScalarValue::try_from_array(gaps, 0)?;
    match gap.cast_to(&DataType::Interval(
        arrow::datatypes::IntervalUnit::MonthDayNano,
    ))? {
        ScalarValue::IntervalMonthDayNano(Some(i)) if i.months == 0 => {
            let micros = i.days as i64 * 86_400_000_000 + i.nanoseconds / 1000;
            if micros > 0 {
                Ok(micros)
            } else {
                plan_err!("the gap of a SESSION window must be positive")
            }
        }
        _ => plan_err!(
            "the gap of a SESSION window must be a fixed interval (days, hours, minutes, seconds)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evaluate(end: bool, times: &[Option<i64>], gap_micros: i64) -> Vec<Option<i64>> {
        let times: ArrayRef = Arc::new(TimestampMicrosecondArray::from(times.to_vec()));
        let gap = ScalarValue::IntervalMonthDayNano(Some(
            arrow::datatypes::IntervalMonthDayNano::new(0, 0, gap_micros * 1000),
        ))
        .to_array_of_size(times.len())
        .unwrap();
        let out = SessionEvaluator { end }
            .evaluate_all(&[times.clone(), gap], times.len())
            .unwrap();
        out.as_primitive::<TimestampMicrosecondType>()
            .iter()
            .collect()
    }

    #[test]
    fn rows_closer_than_the_gap_share_a_session() {
        let times = [Some(0), Some(3), Some(12), Some(13), Some(30), None];
        assert_eq!(
            evaluate(false, &times, 10),
            vec![Some(0), Some(0), Some(0), Some(0), Some(30), None]
        );
        assert_eq!(
            evaluate(true, &times, 10),
            vec![Some(23), Some(23), Some(23), Some(23), Some(40), None]
        );
        // A gap of exactly `gap` starts a new session.
        assert_eq!(
            evaluate(false, &[Some(0), Some(10)], 10),
            vec![Some(0), Some(10)]
        );
    }
}
