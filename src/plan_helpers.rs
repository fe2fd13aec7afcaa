//! Small pieces shared by Eddy's DataFusion extensions (analyzer rules, aggregates).

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::function::AccumulatorArgs;
use datafusion::logical_expr::{Expr, LogicalPlan};

/// Rewrites every expression of `plan` (subqueries included) bottom-up with `rewrite`,
/// which gets the schema of the node's inputs; output columns keep their names.
pub fn rewrite_expressions(
    plan: LogicalPlan,
    rewrite: impl Fn(Expr, &DFSchema) -> Result<Transformed<Expr>>,
) -> Result<Transformed<LogicalPlan>> {
    rewrite_each_expression(plan, |e, schema| e.transform_up(|e| rewrite(e, schema)))
}

/// As [`rewrite_expressions`], visiting each expression before its children, so a rewrite
/// can stop the descent into what it made (`TreeNodeRecursion::Jump`).
pub fn rewrite_expressions_top_down(
    plan: LogicalPlan,
    rewrite: impl Fn(Expr, &DFSchema) -> Result<Transformed<Expr>>,
) -> Result<Transformed<LogicalPlan>> {
    rewrite_each_expression(plan, |e, schema| e.transform_down(|e| rewrite(e, schema)))
}

/// Applies `apply` to each whole expression of every node, with the node's input schema,
/// restoring the expression's output name.
fn rewrite_each_expression(
    plan: LogicalPlan,
    apply: impl Fn(Expr, &DFSchema) -> Result<Transformed<Expr>>,
) -> Result<Transformed<LogicalPlan>> {
    plan.transform_up_with_subqueries(|node| {
        let mut schema = DFSchema::empty();
        for input in node.inputs() {
            schema.merge(input.schema());
        }
        let names = NamePreserver::new(&node);
        node.map_expressions(|e| {
            let name = names.save(&e);
            Ok(apply(e, &schema)?.update_data(|e| name.restore(e)))
        })
    })
}

/// The memcomparable encoding of an aggregate call's `ORDER BY` keys (`None` without
/// one): accumulators that keep their rows sort them by it.
pub fn ordering_codec(args: &AccumulatorArgs) -> Result<Option<arrow::row::RowConverter>> {
    if args.order_bys.is_empty() {
        return Ok(None);
    }
    let fields = args
        .order_bys
        .iter()
        .map(|o| {
            Ok(arrow::row::SortField::new_with_options(
                o.expr.data_type(args.schema)?,
                o.options,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(arrow::row::RowConverter::new(fields)?))
}

/// Whether every argument of a scalar function call is one value (the result is then one
/// value too: see [`columnar_result`]).
pub fn all_scalar(args: &[datafusion::logical_expr::ColumnarValue]) -> bool {
    args.iter()
        .all(|a| matches!(a, datafusion::logical_expr::ColumnarValue::Scalar(_)))
}

/// A scalar function's result: one value when every argument was one (`scalar`), else
/// the whole column.
pub fn columnar_result(
    array: arrow::array::ArrayRef,
    scalar: bool,
) -> Result<datafusion::logical_expr::ColumnarValue> {
    use datafusion::logical_expr::ColumnarValue;
    Ok(if scalar {
        ColumnarValue::Scalar(datafusion::common::ScalarValue::try_from_array(&array, 0)?)
    } else {
        ColumnarValue::Array(array)
    })
}
