//! A `LATERAL` subquery that aggregates rows correlated with the outer row by any
//! condition — `FROM o LEFT JOIN LATERAL (SELECT sum(t.x) AS s FROM t WHERE t.k = o.k AND
//! t.ts >= o.ts) AS b ON TRUE` — which DataFusion decorrelates only when every
//! correlation is an equality it can pull above the aggregate.
//!
//! Rewritten before planning into the join PostgreSQL's semantics amount to: the
//! distinct values of the outer columns the subquery reads (the domain), each joined
//! (left) with the subquery's rows matching it and aggregated per domain row, then joined
//! back to the outer rows on those columns (`IS NOT DISTINCT FROM`):
//!
//! ```text
//! o LEFT JOIN (
//!     SELECT d.k AS __eddy_outer_0, d.ts AS __eddy_outer_1,
//!            sum(t.x) FILTER (WHERE t.__eddy_present) AS s
//!     FROM (SELECT DISTINCT o.k AS k, o.ts AS ts FROM o) AS d
//!     LEFT JOIN (SELECT *, TRUE AS __eddy_present FROM t) AS t ON t.k = d.k AND t.ts >= d.ts
//!     GROUP BY d.k, d.ts
//! ) AS b ON o.k IS NOT DISTINCT FROM b.__eddy_outer_0 AND o.ts IS NOT DISTINCT FROM ...
//! ```
//!
//! Every domain row has a group, so every outer row finds its one aggregate row, and the
//! `FILTER` keeps the row the left join pads with NULLs out of every aggregate: over no
//! matching rows `count` is 0 and the others NULL, as for the subquery itself. Both
//! joins are equi-joins where the correlation has an equality, so views run them as
//! streaming joins.
//!
//! Taken only where the result is the same: the lateral subquery is the first join of
//! its `FROM` item, reads one table or subquery, aggregates without `GROUP BY`, `HAVING`,
//! window functions or `LIMIT`, names outer columns with the outer relation's name, and
//! the outer select list has no bare `*` (which would show the added columns).
//! Anything else is left to DataFusion.

use datafusion::sql::sqlparser::ast::{
    Expr, GroupByExpr, Ident, Join, JoinConstraint, JoinOperator, Query, Select, SelectItem,
    SetExpr, TableFactor, TableWithJoins, VisitorMut, visit_expressions, visit_expressions_mut,
};
use std::ops::ControlFlow;

pub struct LateralAggregates;

impl VisitorMut for LateralAggregates {
    type Break = ();

    fn post_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        decorrelate_selects(&mut query.body);
        ControlFlow::Continue(())
    }
}

/// Every select of a query's body, also the sides of set operations (nested queries are
/// visited on their own).
fn decorrelate_selects(body: &mut SetExpr) {
    match body {
        SetExpr::Select(select) => decorrelate_select(select),
        SetExpr::SetOperation { left, right, .. } => {
            decorrelate_selects(left);
            decorrelate_selects(right);
        }
        _ => {}
    }
}

const DOMAIN: &str = "__eddy_domain";
const PRESENT: &str = "__eddy_present";

/// Aggregate functions (PostgreSQL's and RisingWave's) whose rows the rewrite filters.
const AGGREGATES: &[&str] = &[
    "count",
    "sum",
    "avg",
    "min",
    "max",
    "bool_and",
    "bool_or",
    "every",
    "bit_and",
    "bit_or",
    "bit_xor",
    "string_agg",
    "array_agg",
    "jsonb_agg",
    "jsonb_object_agg",
    "stddev",
    "stddev_pop",
    "stddev_samp",
    "variance",
    "var_pop",
    "var_samp",
    "first_value",
    "last_value",
    "approx_count_distinct",
    "percentile_cont",
    "percentile_disc",
    "mode",
    "median",
];

fn function_name(f: &datafusion::sql::sqlparser::ast::Function) -> String {
    f.name.to_string().to_ascii_lowercase()
}

fn is_aggregate(expr: &Expr) -> bool {
    matches!(expr, Expr::Function(f) if f.over.is_none() && AGGREGATES.contains(&function_name(f).as_str()))
}

fn decorrelate_select(select: &mut Select) {
    if select
        .projection
        .iter()
        .any(|item| matches!(item, SelectItem::Wildcard(_)))
    {
        return;
    }
    // `FROM o, LATERAL (...) b` is `FROM o CROSS JOIN LATERAL (...) b`.
    let mut i = 1;
    while i < select.from.len() {
        let lateral = matches!(
            select.from[i].relation,
            TableFactor::Derived { lateral: true, .. }
        );
        if lateral && select.from[i].joins.is_empty() && select.from[i - 1].joins.is_empty() {
            let item = select.from.remove(i);
            select.from[i - 1].joins.push(Join {
                relation: item.relation,
                global: false,
                join_operator: JoinOperator::CrossJoin(JoinConstraint::None),
            });
        } else {
            i += 1;
        }
    }
    for from in &mut select.from {
        if let Some(join) = decorrelated_first_join(from) {
            from.joins[0] = join;
        }
    }
}

/// The name a relation is referred to by: its alias, else its table's name.
fn reference_name(factor: &TableFactor) -> Option<Ident> {
    match factor {
        TableFactor::Table { alias: Some(a), .. } | TableFactor::Derived { alias: Some(a), .. } => {
            a.columns.is_empty().then(|| a.name.clone())
        }
        TableFactor::Table {
            name,
            alias: None,
            args: None,
            ..
        } => name.0.last().and_then(|part| part.as_ident()).cloned(),
        _ => None,
    }
}

fn same_name(a: &Ident, b: &Ident) -> bool {
    match (a.quote_style, b.quote_style) {
        (None, None) => a.value.eq_ignore_ascii_case(&b.value),
        _ => a.value == b.value,
    }
}

fn decorrelated_first_join(from: &TableWithJoins) -> Option<Join> {
    let join = from.joins.first()?;
    let TableFactor::Derived {
        lateral: true,
        subquery,
        alias: Some(lateral_alias),
        ..
    } = &join.relation
    else {
        return None;
    };
    if !lateral_alias.columns.is_empty() {
        return None;
    }
    let lateral_alias = &lateral_alias.name;
    // The join's kind and its extra condition beyond `ON TRUE`.
    let (kind, condition) = match &join.join_operator {
        JoinOperator::Left(c) | JoinOperator::LeftOuter(c) => ("LEFT", on_condition(c)?),
        JoinOperator::Inner(c) | JoinOperator::Join(c) => ("INNER", on_condition(c)?),
        JoinOperator::CrossJoin(JoinConstraint::None) => ("INNER", None),
        _ => return None,
    };
    let outer = reference_name(&from.relation)?;
    let sub = aggregating_select(subquery)?;
    let inner_relation = &sub.from[0].relation;
    let inner = reference_name(inner_relation)?;
    if same_name(&inner, &outer) {
        return None;
    }
    let columns = outer_columns(subquery, &outer);
    if columns.is_empty() {
        return None; // not correlated: DataFusion plans it
    }
    let mut sub = sub.clone();
    let domain = Ident::new(DOMAIN);
    for item in &mut sub.projection {
        // A call keeps the name PostgreSQL gives it (`sum`) once a filter is added.
        if let SelectItem::UnnamedExpr(Expr::Function(f)) = item {
            *item = SelectItem::ExprWithAlias {
                alias: Ident::new(function_name(f)),
                expr: Expr::Function(f.clone()),
            };
        }
        let SelectItem::ExprWithAlias { expr, .. } = item else {
            return None; // another unnamed column would be named differently
        };
        let _ = visit_expressions_mut(expr, |e: &mut Expr| {
            if let Expr::Function(f) = e
                && is_aggregate(&Expr::Function(f.clone()))
            {
                let present = Expr::CompoundIdentifier(vec![inner.clone(), Ident::new(PRESENT)]);
                f.filter = Some(Box::new(match f.filter.take() {
                    Some(old) => Expr::BinaryOp {
                        left: Box::new(Expr::Nested(old)),
                        op: datafusion::sql::sqlparser::ast::BinaryOperator::And,
                        right: Box::new(present),
                    },
                    None => present,
                }));
            }
            ControlFlow::<()>::Continue(())
        });
    }
    let mut correlated_where = sub.selection.clone();
    for expr in sub
        .projection
        .iter_mut()
        .filter_map(|item| match item {
            SelectItem::ExprWithAlias { expr, .. } => Some(expr),
            _ => None,
        })
        .chain(correlated_where.as_mut())
    {
        let _ = visit_expressions_mut(expr, |e: &mut Expr| {
            if let Expr::CompoundIdentifier(parts) = e
                && parts.len() == 2
                && same_name(&parts[0], &outer)
            {
                parts[0] = domain.clone();
            }
            ControlFlow::<()>::Continue(())
        });
    }

    let outer_cols =
        |prefix: &str| -> Vec<String> { columns.iter().map(|c| format!("{prefix}.{c}")).collect() };
    let keys: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{DOMAIN}.{c} AS __eddy_outer_{i}"))
        .collect();
    let items: Vec<String> = sub.projection.iter().map(ToString::to_string).collect();
    let inner_input = match inner_relation {
        TableFactor::Table { name, .. } => {
            format!("(SELECT *, TRUE AS {PRESENT} FROM {name}) AS {inner}")
        }
        TableFactor::Derived { subquery, .. } => {
            format!("(SELECT *, TRUE AS {PRESENT} FROM ({subquery}) AS {inner}) AS {inner}")
        }
        _ => return None,
    };
    let domain_query = format!(
        "(SELECT DISTINCT {} FROM {}) AS {DOMAIN}",
        columns
            .iter()
            .map(|c| format!("{outer}.{c} AS {c}"))
            .collect::<Vec<_>>()
            .join(", "),
        from.relation
    );
    let aggregated = format!(
        "SELECT {}, {} FROM {domain_query} LEFT JOIN {inner_input} ON {} GROUP BY {}",
        keys.join(", "),
        items.join(", "),
        correlated_where.map_or("TRUE".to_string(), |w| w.to_string()),
        outer_cols(DOMAIN).join(", "),
    );
    let mut on: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            // Parenthesized: the parser reads `IS NOT DISTINCT FROM x AND ...` as one
            // comparison with the whole conjunction.
            format!("({outer}.{c} IS NOT DISTINCT FROM {lateral_alias}.__eddy_outer_{i})")
        })
        .collect();
    if let Some(condition) = condition {
        on.push(format!("({condition})"));
    }
    let text = format!(
        "SELECT 1 FROM {} {kind} JOIN ({aggregated}) AS {lateral_alias} ON {}",
        from.relation,
        on.join(" AND ")
    );
    let parsed = super::sql_rewrite::parse_query(&text).ok()?;
    let SetExpr::Select(select) = *parsed.body else {
        return None;
    };
    select.from.into_iter().next()?.joins.into_iter().next()
}

/// `ON TRUE` gives no extra condition; `ON c` gives `c`; anything else is not taken.
fn on_condition(constraint: &JoinConstraint) -> Option<Option<Expr>> {
    match constraint {
        JoinConstraint::On(Expr::Value(v)) if v.to_string().eq_ignore_ascii_case("true") => {
            Some(None)
        }
        JoinConstraint::On(condition) => Some(Some(condition.clone())),
        _ => None,
    }
}

/// The subquery's select when it aggregates one relation into one row.
fn aggregating_select(query: &Query) -> Option<&Select> {
    if query.with.is_some() || query.order_by.is_some() || query.limit_clause.is_some() {
        return None;
    }
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let no_grouping =
        matches!(&select.group_by, GroupByExpr::Expressions(e, m) if e.is_empty() && m.is_empty());
    if !no_grouping
        || select.having.is_some()
        || select.distinct.is_some()
        || select.from.len() != 1
        || !select.from[0].joins.is_empty()
    {
        return None;
    }
    let mut aggregates = false;
    let mut windowed = false;
    let _ = visit_expressions(&select.projection, |e: &Expr| {
        aggregates |= is_aggregate(e);
        windowed |= matches!(e, Expr::Function(f) if f.over.is_some());
        ControlFlow::<()>::Continue(())
    });
    (aggregates && !windowed).then_some(select)
}

/// The outer relation's columns the subquery names (`outer.column`), each once.
fn outer_columns(query: &Query, outer: &Ident) -> Vec<Ident> {
    let mut columns: Vec<Ident> = Vec::new();
    let _ = visit_expressions(query, |e: &Expr| {
        if let Expr::CompoundIdentifier(parts) = e
            && parts.len() == 2
            && same_name(&parts[0], outer)
            && !columns.iter().any(|c| same_name(c, &parts[1]))
        {
            columns.push(parts[1].clone());
        }
        ControlFlow::<()>::Continue(())
    });
    columns
}

#[cfg(test)]
mod tests {
    use datafusion::sql::sqlparser::ast::VisitMut;

    fn rewritten(sql: &str) -> String {
        let mut query = super::super::sql_rewrite::parse_query(sql).expect("parses");
        let _ = query.visit(&mut super::LateralAggregates);
        query.to_string()
    }

    #[test]
    fn correlated_aggregates_join_their_domain() {
        let out = rewritten(
            "SELECT o.id, b.s FROM o LEFT JOIN LATERAL (SELECT sum(t.x) AS s, count(*) FROM t WHERE t.k = o.k AND t.ts >= o.ts) AS b ON TRUE",
        );
        assert!(!out.contains("LATERAL"), "{out}");
        assert!(
            out.contains("SELECT DISTINCT o.k AS k, o.ts AS ts FROM o"),
            "{out}"
        );
        assert!(
            out.contains("sum(t.x) FILTER (WHERE t.__eddy_present) AS s"),
            "{out}"
        );
        // An unnamed call keeps PostgreSQL's name for it.
        assert!(
            out.contains("FILTER (WHERE t.__eddy_present) AS count"),
            "{out}"
        );
        assert!(
            out.contains("(o.ts IS NOT DISTINCT FROM b.__eddy_outer_1)"),
            "{out}"
        );
        // The comma form is a cross join of the same kind.
        let comma = rewritten(
            "SELECT o.id, b.s FROM o, LATERAL (SELECT max(t.x) AS s FROM t WHERE t.k > o.k) b",
        );
        assert!(
            comma.contains("INNER JOIN (SELECT __eddy_domain.k"),
            "{comma}"
        );
    }

    #[test]
    fn other_laterals_are_left_to_datafusion() {
        for sql in [
            // grouped, so several rows per outer row
            "SELECT o.id FROM o LEFT JOIN LATERAL (SELECT t.g, sum(t.x) AS s FROM t WHERE t.k = o.k GROUP BY t.g) AS b ON TRUE",
            // not an aggregate
            "SELECT o.id FROM o LEFT JOIN LATERAL (SELECT t.x FROM t WHERE t.k = o.k) AS b ON TRUE",
            // not correlated
            "SELECT o.id FROM o LEFT JOIN LATERAL (SELECT sum(t.x) AS s FROM t) AS b ON TRUE",
            // a bare star would show the added columns
            "SELECT * FROM o LEFT JOIN LATERAL (SELECT sum(t.x) AS s FROM t WHERE t.k = o.k) AS b ON TRUE",
        ] {
            let out = rewritten(sql);
            assert!(!out.contains("__eddy"), "{sql} became {out}");
        }
    }
}
