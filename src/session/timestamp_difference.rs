//! `timestamp - timestamp` is an `interval` of days and time, as in PostgreSQL
//! (`'2022-08-10 12:31:22' - '2022-07-19 12:31:23'` is `21 days 23:59:59`).
//!
//! DataFusion types the difference as an Arrow `Duration`, which shows as `PT1900799S`,
//! compares wrongly with an `interval` (`> interval '7 days'` was false) and has no
//! PostgreSQL type. Run before type coercion, this rule makes every such difference
//! `justify_hours(CAST(a - b AS interval))`: whole days of 24 hours and the rest as time,
//! both with the difference's sign, which is what PostgreSQL's `timestamp_mi` gives.

use super::justify_functions::justify_hours_udf;
use arrow::datatypes::{DataType, IntervalUnit};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNodeRecursion};
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{BinaryExpr, Cast, Expr, ExprSchemable, LogicalPlan, Operator};
use datafusion::optimizer::AnalyzerRule;

#[derive(Debug, Default)]
pub struct TimestampDifference;

impl AnalyzerRule for TimestampDifference {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        crate::plan_helpers::rewrite_expressions_top_down(plan, as_interval).map(|t| t.data)
    }

    fn name(&self) -> &str {
        "eddy_timestamp_difference"
    }
}

const INTERVAL: DataType = DataType::Interval(IntervalUnit::MonthDayNano);

fn as_interval(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    // A difference this rule already made an interval (the rule may see its own output).
    if let Expr::Cast(Cast { expr: inner, field }) = &expr
        && field.data_type() == &INTERVAL
        && is_difference(inner)
    {
        return Ok(Transformed::new(expr, false, TreeNodeRecursion::Jump));
    }
    if !is_difference(&expr) || !matches!(expr.get_type(schema), Ok(DataType::Duration(_))) {
        return Ok(Transformed::no(expr));
    }
    let interval = Expr::Cast(Cast::new(Box::new(expr), INTERVAL));
    Ok(Transformed::new(
        Expr::ScalarFunction(ScalarFunction::new_udf(justify_hours_udf(), vec![interval])),
        true,
        TreeNodeRecursion::Jump,
    ))
}

fn is_difference(expr: &Expr) -> bool {
    matches!(
        expr,
        Expr::BinaryExpr(BinaryExpr {
            op: Operator::Minus,
            ..
        })
    )
}
