//! `interval * number`, `number * interval` and `interval / number`, which PostgreSQL
//! allows and DataFusion does not plan. An interval literal (`INTERVAL '90 minutes'` or a
//! cast to `INTERVAL`) multiplied or divided by anything becomes
//! `eddy_interval_mul(interval, factor)`, computed as PostgreSQL does: the fraction of the
//! scaled months spills into days (30 a month), the fraction of the days into time (24
//! hours a day), and time is kept to the microsecond.

use arrow::array::{Array, AsArray, IntervalMonthDayNanoArray};
use arrow::datatypes::{DataType, IntervalMonthDayNano, IntervalUnit};
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{
    ColumnarValue, Expr as PlanExpr, ExprSchemable, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility, lit,
};
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, CastKind, DataType as SqlType, Expr, Function, FunctionArg, FunctionArgExpr,
    FunctionArgumentList, FunctionArguments, Ident, ObjectName, VisitorMut,
};
use std::ops::ControlFlow;
use std::sync::Arc;

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
    let arg = |e: Expr| FunctionArg::Unnamed(FunctionArgExpr::Expr(e));
    let factor = Expr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(Expr::Nested(Box::new(factor))),
        data_type: SqlType::DoublePrecision,
        array: false,
        format: None,
    };
    Expr::Function(Function {
        name: ObjectName::from(vec![Ident::new(INTERVAL_MUL)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: vec![arg(interval), arg(factor)],
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
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

#[cfg(test)]
mod tests {
    use super::*;

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
