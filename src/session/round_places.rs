//! `round(x, 2)` keeps one type from planning to execution.
//!
//! DataFusion types a decimal `round` by its places when they are a literal
//! (`round(1.234, 2)` is a `decimal(4, 2)`). The SQL literal `2` is an `Int64`, which type
//! coercion casts to the `Int32` the function takes: no longer a literal when the types
//! around the call are worked out (so the call keeps the input's scale there), yet folded
//! back into one later, which changes the call's type under the comparisons already typed
//! for the other (`round(x, 2) = 1.23` failed with "Invalid comparison operation", and a
//! view's rounded column did not match the same query in batch). Run before type
//! coercion, this rule makes integer literal places `Int32` literals, so every stage sees
//! the same type.

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::optimizer::AnalyzerRule;

#[derive(Debug, Default)]
pub struct RoundPlaces;

impl AnalyzerRule for RoundPlaces {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        crate::plan_helpers::rewrite_expressions(plan, int32_places).map(|t| t.data)
    }

    fn name(&self) -> &str {
        "eddy_round_places"
    }
}

fn int32_places(expr: Expr, _schema: &DFSchema) -> Result<Transformed<Expr>> {
    let Expr::ScalarFunction(mut call) = expr else {
        return Ok(Transformed::no(expr));
    };
    if call.name() != "round" || call.args.len() != 2 {
        return Ok(Transformed::no(Expr::ScalarFunction(call)));
    }
    let places = match &call.args[1] {
        Expr::Literal(ScalarValue::Int64(Some(v)), _) => i32::try_from(*v).ok(),
        Expr::Literal(ScalarValue::Int16(Some(v)), _) => Some(i32::from(*v)),
        Expr::Literal(ScalarValue::Int8(Some(v)), _) => Some(i32::from(*v)),
        _ => None,
    };
    let Some(places) = places else {
        return Ok(Transformed::no(Expr::ScalarFunction(call)));
    };
    call.args[1] = Expr::Literal(ScalarValue::Int32(Some(places)), None);
    Ok(Transformed::yes(Expr::ScalarFunction(call)))
}
