//! The `jsonb` operators: DataFusion parses them but has no meaning for them over
//! strings, so this planner turns each into a call of its function
//! ([`super::functions`]). Operators over other types (`@>` and `||` on arrays, `-` on
//! numbers) are left to DataFusion.

use super::functions::udf;
use arrow::datatypes::DataType;
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{Expr, ExprSchemable};
use datafusion::sql::sqlparser::ast::BinaryOperator;

#[derive(Debug)]
pub struct JsonbOperators;

impl ExprPlanner for JsonbOperators {
    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawBinaryExpr>> {
        let (left, right) = (
            expr.left.to_field(schema)?.1,
            expr.right.to_field(schema)?.1,
        );
        let textual = |t: &DataType| {
            matches!(
                t,
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null
            )
        };
        // A cast keeps its input's metadata, but `j::varchar` is text, not jsonb.
        let is_cast = |e: &Expr| matches!(e, Expr::Cast(_) | Expr::TryCast(_));
        let json_left = super::is_jsonb(&left) && !is_cast(&expr.left);
        let json_right = super::is_jsonb(&right) && !is_cast(&expr.right);
        let both_text = textual(left.data_type()) && textual(right.data_type());
        let name = match expr.op {
            BinaryOperator::Arrow if textual(left.data_type()) => "jsonb_access",
            BinaryOperator::LongArrow if textual(left.data_type()) => "jsonb_access_text",
            BinaryOperator::HashArrow if textual(left.data_type()) => "jsonb_extract_path_op",
            BinaryOperator::HashLongArrow if textual(left.data_type()) => {
                "jsonb_extract_path_text_op"
            }
            BinaryOperator::AtArrow if both_text => "jsonb_contains",
            BinaryOperator::ArrowAt if both_text => "jsonb_contained",
            BinaryOperator::Question if textual(left.data_type()) => "jsonb_exists",
            BinaryOperator::QuestionPipe if textual(left.data_type()) => "jsonb_exists_any",
            BinaryOperator::QuestionAnd if textual(left.data_type()) => "jsonb_exists_all",
            BinaryOperator::StringConcat if (json_left || json_right) && both_text => {
                "jsonb_concat"
            }
            BinaryOperator::Minus if json_left => "jsonb_delete",
            _ => return Ok(PlannerResult::Original(expr)),
        };
        Ok(PlannerResult::Planned(Expr::ScalarFunction(
            ScalarFunction::new_udf(udf(name), vec![expr.left, expr.right]),
        )))
    }
}
