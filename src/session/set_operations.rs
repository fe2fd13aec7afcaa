//! `EXCEPT ALL` and `INTERSECT ALL` with PostgreSQL's counting: a row present `m` times
//! on the left and `n` times on the right appears `max(m - n, 0)` times in `EXCEPT ALL`
//! and `min(m, n)` times in `INTERSECT ALL`. DataFusion plans both as plain anti and semi
//! joins, which keep all `m` copies or none.
//!
//! The SQL rewrite marks the right input of each such operation with a derived table
//! named [`EXCEPT_ALL_MARK`] or [`INTERSECT_ALL_MARK`]; here, before optimisation, the
//! anti or semi join over a marked input is rebuilt so that each side numbers the copies
//! of each row (`row_number() OVER (PARTITION BY every column)`) and the join matches the
//! copy numbers too: copy `k` of a left row survives `EXCEPT ALL` iff the right has fewer
//! than `k` copies, and `INTERSECT ALL` iff it has at least `k`. Batch queries and views
//! both go through it (in a view the numbering is a window function over partitions of
//! identical rows).

use crate::error::Result;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{Column, JoinType, NullEquality};
use datafusion::functions_window::expr_fn::row_number;
use datafusion::logical_expr::expr_fn::ExprFunctionExt;
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, col};

pub const EXCEPT_ALL_MARK: &str = "__eddy_except_all";
pub const INTERSECT_ALL_MARK: &str = "__eddy_intersect_all";

/// The column numbering copies of equal rows.
const COPY: &str = "__eddy_copy";

pub fn rewrite(plan: LogicalPlan) -> Result<LogicalPlan> {
    Ok(plan
        .transform_up_with_subqueries(|node| {
            let LogicalPlan::Join(join) = &node else {
                return Ok(Transformed::no(node));
            };
            let wanted = match join.join_type {
                JoinType::LeftAnti => EXCEPT_ALL_MARK,
                JoinType::LeftSemi => INTERSECT_ALL_MARK,
                _ => return Ok(Transformed::no(node)),
            };
            if !is_marked(&join.right, wanted) {
                return Ok(Transformed::no(node));
            }
            counted_join(&join.left, &join.right, join.join_type)
                .map(Transformed::yes)
                .map_err(|e| e.into_datafusion())
        })?
        .data)
}

/// Whether `plan` is the marked derived table (under projections).
fn is_marked(plan: &LogicalPlan, mark: &str) -> bool {
    match plan {
        LogicalPlan::SubqueryAlias(a) => a.alias.table() == mark,
        LogicalPlan::Projection(p) => is_marked(&p.input, mark),
        _ => false,
    }
}

/// `plan` with its copies of each row numbered, as relation `alias` with columns
/// `c0, c1, ...` (the sides' own names may differ or repeat).
fn numbered(plan: &LogicalPlan, alias: &str) -> Result<LogicalPlan> {
    let renamed: Vec<Expr> = plan
        .schema()
        .columns()
        .into_iter()
        .enumerate()
        .map(|(i, c)| Expr::Column(c).alias(format!("c{i}")))
        .collect();
    let columns: Vec<Expr> = (0..renamed.len()).map(|i| col(format!("c{i}"))).collect();
    let copy = row_number().partition_by(columns).build()?.alias(COPY);
    Ok(LogicalPlanBuilder::from(plan.clone())
        .project(renamed)?
        .window(vec![copy])?
        .alias(alias)?
        .build()?)
}

fn counted_join(
    left: &LogicalPlan,
    right: &LogicalPlan,
    join_type: JoinType,
) -> Result<LogicalPlan> {
    // The join's output keeps the left side's qualified names, which the plan above it
    // refers to.
    let names: Vec<(Option<datafusion::common::TableReference>, String)> = left
        .schema()
        .iter()
        .map(|(q, f)| (q.cloned(), f.name().clone()))
        .collect();
    let keys = |side: &str| -> Vec<Column> {
        (0..names.len())
            .map(|i| Column::new(Some(side), format!("c{i}")))
            .chain(std::iter::once(Column::new(Some(side), COPY)))
            .collect()
    };
    let output: Vec<Expr> = names
        .iter()
        .enumerate()
        .map(|(i, (qualifier, name))| {
            Expr::Column(Column::new(Some("__eddy_left"), format!("c{i}")))
                .alias_qualified(qualifier.clone(), name)
        })
        .collect();
    Ok(LogicalPlanBuilder::from(numbered(left, "__eddy_left")?)
        .join_detailed(
            numbered(right, "__eddy_right")?,
            join_type,
            (keys("__eddy_left"), keys("__eddy_right")),
            None,
            NullEquality::NullEqualsNull,
        )?
        .project(output)?
        .build()?)
}

#[cfg(test)]
mod tmp_tests {
    #[tokio::test]
    async fn correlated() {
        let ctx = datafusion::prelude::SessionContext::new();
        ctx.sql("CREATE TABLE items AS VALUES (1, 1), (2, 2)")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        ctx.sql("CREATE TABLE limits AS VALUES (10, 1), (20, 1)")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let sql = "SELECT column1, (SELECT max(l.column1) FROM limits l WHERE l.column2 = items.column2) AS m FROM items";
        let state = ctx.state();
        for (name, f) in [("none", 0), ("pg", 1), ("setops", 2)] {
            let plan = state.create_logical_plan(sql).await.unwrap();
            let plan = match f {
                1 => super::super::pg_semantics::rewrite(plan).unwrap(),
                2 => super::rewrite(plan).unwrap(),
                _ => plan,
            };
            let df = datafusion::dataframe::DataFrame::new(state.clone(), plan);
            let r = df.collect().await.unwrap();
            println!(
                "{name}\n{}",
                arrow::util::pretty::pretty_format_batches(&r).unwrap()
            );
        }
    }
}
