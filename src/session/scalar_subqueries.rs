//! Uncorrelated scalar subqueries in a view's query (`WHERE price > (SELECT avg(price)
//! FROM bid)`): DataFusion leaves them to a batch operator that runs the subquery once;
//! a view needs them as a stream. A subquery that is an aggregate without `GROUP BY` has
//! exactly one row, so the query joins it in (a join with no condition, the subquery's
//! one row on the right) and reads its value as a column: when the aggregate changes,
//! the join retracts and re-emits the rows it affects. Other uncorrelated subqueries
//! are left alone (and refused by the stream planner).

use crate::error::Result;
use datafusion::common::Column;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder};

pub fn rewrite(plan: LogicalPlan) -> Result<LogicalPlan> {
    let mut next = 0usize;
    Ok(plan
        .transform_up(|node| {
            let (input, exprs) = match &node {
                LogicalPlan::Filter(f) => (f.input.clone(), vec![f.predicate.clone()]),
                LogicalPlan::Projection(p) => (p.input.clone(), p.expr.clone()),
                _ => return Ok(Transformed::no(node)),
            };
            if !exprs.iter().any(has_one_row_subquery) {
                return Ok(Transformed::no(node));
            }
            let original: Vec<Expr> = input
                .schema()
                .columns()
                .into_iter()
                .map(Expr::Column)
                .collect();
            let mut joined = input.as_ref().clone();
            let mut rewritten = Vec::with_capacity(exprs.len());
            for e in exprs {
                let e = e.transform_up(|e| match &e {
                    Expr::ScalarSubquery(sq)
                        if sq.outer_ref_columns.is_empty() && one_row(&sq.subquery) =>
                    {
                        next += 1;
                        let alias = format!("__eddy_scalar_{next}");
                        let sub = LogicalPlanBuilder::from(without_limit(&sq.subquery))
                            .alias(alias.clone())?
                            .build()?;
                        let name = sub.schema().field(0).name().clone();
                        joined = LogicalPlanBuilder::from(joined.clone())
                            .cross_join(sub)?
                            .build()?;
                        Ok(Transformed::yes(Expr::Column(Column::new(
                            Some(alias),
                            name,
                        ))))
                    }
                    _ => Ok(Transformed::no(e)),
                })?;
                rewritten.push(e.data);
            }
            let plan = match node {
                LogicalPlan::Filter(_) => LogicalPlanBuilder::from(joined)
                    .filter(rewritten.pop().expect("one predicate"))?
                    .project(original)?
                    .build()?,
                LogicalPlan::Projection(p) => {
                    // Keep the output names the projection had.
                    let named = rewritten
                        .into_iter()
                        .zip(p.schema.iter())
                        .map(|(e, (qualifier, field))| {
                            e.alias_qualified(qualifier.cloned(), field.name())
                        })
                        .collect::<Vec<_>>();
                    LogicalPlanBuilder::from(joined).project(named)?.build()?
                }
                other => other,
            };
            Ok(Transformed::yes(plan))
        })?
        .data)
}

fn has_one_row_subquery(expr: &Expr) -> bool {
    expr.exists(|e| {
        Ok(matches!(e, Expr::ScalarSubquery(sq)
            if sq.outer_ref_columns.is_empty() && one_row(&sq.subquery)))
    })
    .unwrap_or(false)
}

/// A one-row plan without the `LIMIT 1` over it (a view refuses limits without order).
fn without_limit(plan: &LogicalPlan) -> LogicalPlan {
    match plan {
        LogicalPlan::Limit(l) => without_limit(&l.input),
        other => other.clone(),
    }
}

/// Whether the plan always has exactly one row: an aggregate without `GROUP BY`, under
/// projections, aliases and limits that skip nothing.
fn one_row(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Aggregate(a) => a.group_expr.is_empty(),
        LogicalPlan::Projection(p) => one_row(&p.input),
        LogicalPlan::SubqueryAlias(a) => one_row(&a.input),
        // The `LIMIT 1` DataFusion may put over a scalar subquery.
        LogicalPlan::Limit(l) => {
            matches!(
                l.get_skip_type(),
                Ok(datafusion::logical_expr::SkipType::Literal(0))
            ) && one_row(&l.input)
        }
        _ => false,
    }
}
