//! `EXISTS (subquery)` in a select list (`SELECT EXISTS (SELECT 1 FROM t WHERE ...)`,
//! `SELECT id, EXISTS (...) FROM s`): DataFusion plans `EXISTS` only in filters, where it
//! becomes a semi join. Elsewhere a plain subquery (no grouping, `DISTINCT`, `LIMIT` or
//! aggregates) is rewritten into the scalar subquery `(SELECT count(*) > 0 FROM ... WHERE
//! ...)`, which DataFusion decorrelates like any other scalar subquery (also in views):
//! it is true exactly when the subquery has a row, and never NULL.

use datafusion::sql::sqlparser::ast::{
    Expr, GroupByExpr, Ident, Query, Select, SelectItem, SetExpr, UnaryOperator, VisitorMut,
    visit_expressions_mut,
};
use std::ops::ControlFlow;

pub(super) struct ExistsInSelect;

impl VisitorMut for ExistsInSelect {
    type Break = ();

    fn pre_visit_select(&mut self, select: &mut Select) -> ControlFlow<()> {
        for item in select.projection.iter_mut() {
            // `SELECT EXISTS (...)` keeps PostgreSQL's name for the column.
            if let SelectItem::UnnamedExpr(expr @ Expr::Exists { negated: false, .. }) = item {
                let expr = expr.clone();
                *item = SelectItem::ExprWithAlias {
                    expr,
                    alias: Ident::new("exists"),
                };
            }
            let expr = match item {
                SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
                _ => continue,
            };
            let _ = visit_expressions_mut(expr, |e| {
                if let Expr::Exists { subquery, negated } = e
                    && let Some(counted) = counted(subquery)
                {
                    let scalar = Expr::Subquery(Box::new(counted));
                    *e = if *negated {
                        Expr::UnaryOp {
                            op: UnaryOperator::Not,
                            expr: Box::new(scalar),
                        }
                    } else {
                        scalar
                    };
                }
                ControlFlow::<()>::Continue(())
            });
        }
        ControlFlow::Continue(())
    }
}

/// The subquery with `count(*) > 0` as its only output, if its rows are its `FROM` and
/// `WHERE` alone.
fn counted(query: &Query) -> Option<Query> {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let plain = select.distinct.is_none()
        && matches!(&select.group_by, GroupByExpr::Expressions(keys, _) if keys.is_empty())
        && select.having.is_none()
        && select.qualify.is_none()
        && query.limit_clause.is_none()
        && query.fetch.is_none()
        && query.with.is_none()
        && !select.projection.iter().any(has_aggregate);
    if !plain {
        return None;
    }
    let mut counted = query.clone();
    let count = super::sql_rewrite::parse_expr("count(*) > 0").ok()?;
    if let SetExpr::Select(select) = counted.body.as_mut() {
        select.projection = vec![SelectItem::UnnamedExpr(count)];
    }
    counted.order_by = None;
    Some(counted)
}

/// Whether a select item calls an aggregate (its subquery would have one row, always).
fn has_aggregate(item: &SelectItem) -> bool {
    let text = item.to_string().to_ascii_lowercase();
    [
        "count(",
        "sum(",
        "min(",
        "max(",
        "avg(",
        "array_agg(",
        "string_agg(",
        "bool_and(",
        "bool_or(",
    ]
    .iter()
    .any(|f| text.contains(f))
}
