//! `date - date` is PostgreSQL's `integer` number of days; DataFusion gives a `bigint`.
//! An expression planner (it sees the operands' types while the SQL is planned) casts
//! the difference.

use arrow::datatypes::DataType;
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{Cast, Expr, ExprSchemable, Operator, binary_expr};
use datafusion::sql::sqlparser::ast::BinaryOperator;

#[derive(Debug)]
pub struct DateDifference;

impl ExprPlanner for DateDifference {
    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawBinaryExpr>> {
        let is_date = |e: &Expr| matches!(e.get_type(schema), Ok(DataType::Date32));
        if !matches!(expr.op, BinaryOperator::Minus)
            || !is_date(&expr.left)
            || !is_date(&expr.right)
        {
            return Ok(PlannerResult::Original(expr));
        }
        let days = binary_expr(expr.left, Operator::Minus, expr.right);
        Ok(PlannerResult::Planned(Expr::Cast(Cast::new(
            Box::new(days),
            DataType::Int32,
        ))))
    }
}
