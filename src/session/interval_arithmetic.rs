//! `interval * number`, `number * interval` and `interval / number`, which PostgreSQL
//! allows and DataFusion does not plan. An interval literal (`INTERVAL '90 minutes'` or a
//! cast to `INTERVAL`) multiplied or divided by anything becomes
//! `eddy_interval_mul(interval, factor)`, computed as PostgreSQL does: the fraction of the
//! scaled months spills into days (30 a month), the fraction of the days into time (24
//! hours a day), and time is kept to the microsecond.
//!
//! Expressions of interval type that are not literals are scaled by
//! [`IntervalProducts`], and intervals are compared by their span by
//! [`IntervalComparisons`]: both are expression planners, which see the operands' types.

use arrow::array::{Array, AsArray, IntervalMonthDayNanoArray};
use arrow::datatypes::{DataType, IntervalMonthDayNano, IntervalUnit};
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{
    ColumnarValue, Expr as PlanExpr, ExprSchemable, Operator, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility, binary_expr, lit,
};
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, CastKind, DataType as SqlType, Expr, VisitorMut,
};
use std::ops::ControlFlow;
use std::sync::{Arc, LazyLock};

pub const INTERVAL_MUL: &str = "eddy_interval_mul";

/// Rewrites interval arithmetic in parsed SQL (see the module doc).
pub struct IntervalArithmetic;

fn is_interval(expr: &Expr) -> bool {
    match expr {
        Expr::Interval(_) => true,
        Expr::Cast { data_type, .. } => matches!(data_type, SqlType::Interval { .. }),
        Expr::Nested(inner) => is_interval(inner),
        _ => false,
    }
}

fn call(interval: Expr, factor: Expr) -> Expr {
    let factor =
        super::sql_rewrite::cast_to(Expr::Nested(Box::new(factor)), SqlType::DoublePrecision);
    super::sql_rewrite::function_call(INTERVAL_MUL, vec![interval, factor])
}

impl VisitorMut for IntervalArithmetic {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let Expr::BinaryOp { left, op, right } = expr else {
            return ControlFlow::Continue(());
        };
        let rewritten = match op {
            BinaryOperator::Multiply if is_interval(left) && !is_interval(right) => {
                Some(call((**left).clone(), (**right).clone()))
            }
            BinaryOperator::Multiply if is_interval(right) && !is_interval(left) => {
                Some(call((**right).clone(), (**left).clone()))
            }
            BinaryOperator::Divide if is_interval(left) && !is_interval(right) => {
                let one_over = Expr::BinaryOp {
                    left: Box::new(Expr::value(datafusion::sql::sqlparser::ast::Value::Number(
                        "1.0".into(),
                        false,
                    ))),
                    op: BinaryOperator::Divide,
                    right: Box::new(Expr::Cast {
                        kind: CastKind::Cast,
                        expr: right.clone(),
                        data_type: SqlType::DoublePrecision,
                        array: false,
                        format: None,
                    }),
                };
                Some(call((**left).clone(), one_over))
            }
            _ => None,
        };
        if let Some(new) = rewritten {
            *expr = new;
        }
        ControlFlow::Continue(())
    }
}

/// `eddy_interval_mul(interval, factor)`.
/// The same products and quotients where the interval is not a literal but any
/// expression of interval type (a column, an `avg`, `ts - ts`), which the rewrite of the
/// SQL text cannot see. DataFusion types `interval * number` as an error while it plans
/// the SQL, so this is a planner of binary operators, which sees the operands' types.
/// A difference of timestamps is still a `Duration` here; the analyzer rule
/// [`super::timestamp_difference::TimestampDifference`] later makes it an interval.
#[derive(Debug)]
pub struct IntervalProducts;

impl ExprPlanner for IntervalProducts {
    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawBinaryExpr>> {
        let is_interval = |e: &PlanExpr| {
            matches!(
                e.get_type(schema),
                Ok(DataType::Interval(_) | DataType::Duration(_))
            )
        };
        let is_number = |e: &PlanExpr| e.get_type(schema).is_ok_and(|t| t.is_numeric());
        let as_float = |e: &PlanExpr| e.clone().cast_to(&DataType::Float64, schema);
        let (interval, factor) = match expr.op {
            BinaryOperator::Multiply if is_interval(&expr.left) && is_number(&expr.right) => {
                (expr.left.clone(), as_float(&expr.right)?)
            }
            BinaryOperator::Multiply if is_number(&expr.left) && is_interval(&expr.right) => {
                (expr.right.clone(), as_float(&expr.left)?)
            }
            BinaryOperator::Divide if is_interval(&expr.left) && is_number(&expr.right) => {
                (expr.left.clone(), lit(1.0_f64) / as_float(&expr.right)?)
            }
            _ => return Ok(PlannerResult::Original(expr)),
        };
        Ok(PlannerResult::Planned(PlanExpr::ScalarFunction(
            ScalarFunction::new_udf(Arc::new(udf()), vec![interval, factor]),
        )))
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct IntervalMul {
    signature: Signature,
}

pub fn udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(IntervalMul {
        signature: Signature::any(2, Volatility::Immutable),
    })
}

/// PostgreSQL's interval times a factor.
pub fn scale(v: IntervalMonthDayNano, factor: f64) -> IntervalMonthDayNano {
    crate::interval_math::scale_parts(
        f64::from(v.months),
        f64::from(v.days),
        v.nanoseconds as f64,
        factor,
    )
}

impl ScalarUDFImpl for IntervalMul {
    fn name(&self) -> &str {
        INTERVAL_MUL
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Interval(IntervalUnit::MonthDayNano))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let interval =
            arrow::compute::cast(&arrays[0], &DataType::Interval(IntervalUnit::MonthDayNano))?;
        let factor = arrow::compute::cast(&arrays[1], &DataType::Float64)?;
        let interval = interval.as_primitive::<arrow::datatypes::IntervalMonthDayNanoType>();
        let factor = factor.as_primitive::<arrow::datatypes::Float64Type>();
        let result: IntervalMonthDayNanoArray = (0..rows.max(interval.len()))
            .map(|i| {
                (interval.is_valid(i) && factor.is_valid(i))
                    .then(|| scale(interval.value(i), factor.value(i)))
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(result)))
    }
}

/// Comparisons of intervals as PostgreSQL makes them: by their whole span, a month
/// counting 30 days and a day 24 hours (`interval '36 hours' > interval '1 day'`, and
/// `'24 hours' = '1 day'`). Arrow compares months, then days, then time. Text compared
/// with an interval is read as an interval.
#[derive(Debug)]
pub struct IntervalComparisons;

impl ExprPlanner for IntervalComparisons {
    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawBinaryExpr>> {
        let op = match expr.op {
            BinaryOperator::Eq => Operator::Eq,
            BinaryOperator::NotEq => Operator::NotEq,
            BinaryOperator::Lt => Operator::Lt,
            BinaryOperator::LtEq => Operator::LtEq,
            BinaryOperator::Gt => Operator::Gt,
            BinaryOperator::GtEq => Operator::GtEq,
            _ => return Ok(PlannerResult::Original(expr)),
        };
        let type_of = |e: &PlanExpr| e.get_type(schema).ok();
        let is_interval =
            |t: &Option<DataType>| matches!(t, Some(DataType::Interval(_) | DataType::Duration(_)));
        let is_text = |t: &Option<DataType>| {
            matches!(
                t,
                Some(DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8)
            )
        };
        let (left, right) = (type_of(&expr.left), type_of(&expr.right));
        let comparable = (is_interval(&left) && (is_interval(&right) || is_text(&right)))
            || (is_text(&left) && is_interval(&right));
        if !comparable {
            return Ok(PlannerResult::Original(expr));
        }
        let span = |e: PlanExpr| -> Result<PlanExpr> {
            let interval = e.cast_to(&DataType::Interval(IntervalUnit::MonthDayNano), schema)?;
            Ok(PlanExpr::ScalarFunction(ScalarFunction::new_udf(
                span_udf(),
                vec![interval],
            )))
        };
        Ok(PlannerResult::Planned(binary_expr(
            span(expr.left)?,
            op,
            span(expr.right)?,
        )))
    }
}

/// An interval's span in nanoseconds (30-day months, 24-hour days), the key PostgreSQL
/// compares intervals by.
pub fn span_udf() -> Arc<ScalarUDF> {
    static UDF: LazyLock<Arc<ScalarUDF>> = LazyLock::new(|| {
        Arc::new(ScalarUDF::new_from_impl(IntervalSpan {
            signature: Signature::exact(
                vec![DataType::Interval(IntervalUnit::MonthDayNano)],
                Volatility::Immutable,
            ),
        }))
    });
    UDF.clone()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct IntervalSpan {
    signature: Signature,
}

const NANOS_PER_DAY: i128 = 86_400_000_000_000;

pub fn span(v: IntervalMonthDayNano) -> i128 {
    (v.months as i128 * 30 + v.days as i128) * NANOS_PER_DAY + v.nanoseconds as i128
}

impl ScalarUDFImpl for IntervalSpan {
    fn name(&self) -> &str {
        "eddy_interval_span"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Decimal128(38, 0))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let intervals = arrays[0].as_primitive::<arrow::datatypes::IntervalMonthDayNanoType>();
        let spans: arrow::array::Decimal128Array = intervals.unary(span);
        Ok(ColumnarValue::Array(Arc::new(
            spans.with_precision_and_scale(38, 0)?,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_count_30_day_months_and_24_hour_days() {
        let day = IntervalMonthDayNano::new(0, 1, 0);
        let hours_24 = IntervalMonthDayNano::new(0, 0, 86_400_000_000_000);
        assert_eq!(span(day), span(hours_24));
        assert_eq!(
            span(IntervalMonthDayNano::new(1, 0, 0)),
            span(IntervalMonthDayNano::new(0, 30, 0))
        );
        assert!(span(IntervalMonthDayNano::new(0, 0, 90_000_000_000_000)) > span(day));
        assert!(span(IntervalMonthDayNano::new(0, -1, 0)) < span(hours_24));
    }

    #[test]
    fn scales_as_postgresql_does() {
        let hour = IntervalMonthDayNano::new(0, 0, 3_600_000_000_000);
        assert_eq!(
            scale(hour, 3.0),
            IntervalMonthDayNano::new(0, 0, 10_800_000_000_000)
        );
        // 1 mon * 1.5 = 1 mon 15 days; 1 day * 0.5 = 12:00:00.
        assert_eq!(
            scale(IntervalMonthDayNano::new(1, 0, 0), 1.5),
            IntervalMonthDayNano::new(1, 15, 0)
        );
        assert_eq!(
            scale(IntervalMonthDayNano::new(0, 1, 0), 0.5),
            IntervalMonthDayNano::new(0, 0, 43_200_000_000_000)
        );
        assert_eq!(
            scale(IntervalMonthDayNano::new(0, 0, 1_000), -2.0),
            IntervalMonthDayNano::new(0, 0, -2_000)
        );
        // Kept to the microsecond, as PostgreSQL keeps intervals.
        assert_eq!(
            scale(IntervalMonthDayNano::new(0, 0, 1_000), 0.4),
            IntervalMonthDayNano::new(0, 0, 0)
        );
    }
}
