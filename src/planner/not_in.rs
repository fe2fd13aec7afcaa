//! `x NOT IN (SELECT y FROM r)`: DataFusion's null-aware anti join, planned from the
//! operators views already have.
//!
//! PostgreSQL's rule: a row passes when `r` is empty; otherwise it is dropped when `x` is
//! NULL, when some `y` equals `x`, or when some `y` is NULL (the comparison is unknown).
//! So the rows that pass are those of the plain anti join on `x = y`, kept while a
//! global aggregate over `r` — its row count and its count of non-NULL `y` — says
//! `r` has no NULL `y`, and, for a NULL `x`, that `r` is empty:
//!
//! ```text
//! SELECT l.* FROM (l ANTI JOIN r ON x = y) CROSS JOIN
//!   (SELECT count(*) AS rows, count(y) AS keys FROM r)
//! WHERE rows = keys AND (x IS NOT NULL OR rows = 0)
//! ```
//!
//! The cross join runs in one subtask; when the counts change, the rows they admit or
//! drop are emitted then.

use super::{Node, PlanContext, unsupported, visit};
use crate::error::Result;
use datafusion::common::Column;
use datafusion::functions_aggregate::expr_fn::count;
use datafusion::logical_expr::logical_plan::Join;
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, lit};
use std::sync::Arc;

const ROWS: &str = "__eddy_not_in_rows";
const KEYS: &str = "__eddy_not_in_keys";

pub(super) fn null_aware_anti_join(join: &Join, ctx: &PlanContext) -> Result<Node> {
    let [(left_key, right_key)] = join.on.as_slice() else {
        return Err(unsupported("NOT IN with several columns"));
    };
    if join.filter.is_some() {
        return Err(unsupported(
            "NOT IN over a correlated subquery (use NOT EXISTS)",
        ));
    }
    let mut anti = join.clone();
    anti.null_aware = false;
    let counts = LogicalPlanBuilder::from(Arc::clone(&join.right))
        .aggregate(
            Vec::<Expr>::new(),
            vec![
                count(lit(1)).alias(ROWS),
                count(right_key.clone()).alias(KEYS),
            ],
        )?
        .build()?;
    let rows = || Expr::Column(Column::from_name(ROWS));
    let keys = Expr::Column(Column::from_name(KEYS));
    let admitted = rows()
        .eq(keys)
        .and(left_key.clone().is_not_null().or(rows().eq(lit(0i64))));
    let left_columns: Vec<Expr> = join
        .left
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    let plan: LogicalPlan = LogicalPlanBuilder::from(LogicalPlan::Join(anti))
        .join_on(counts, datafusion::common::JoinType::Inner, [admitted])?
        .project(left_columns)?
        .build()?;
    visit(&plan, ctx)?.finish()
}
