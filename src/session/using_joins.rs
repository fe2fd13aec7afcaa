//! PostgreSQL's merged columns of `JOIN ... USING (c)`.
//!
//! In PostgreSQL, `a JOIN b USING (k)` has one column `k`: `a.k` for inner and left
//! joins, `b.k` for right joins and `COALESCE(a.k, b.k)` for full joins, and a further
//! `JOIN c USING (k)` joins on that merged column. DataFusion resolves an unqualified `k`
//! to the left input's column (NULL for a full join's right-only rows) and finds it
//! ambiguous once three inputs share it. So, before planning, every unqualified reference
//! to a merged column in a select list, `WHERE`, `GROUP BY` and `HAVING` becomes the
//! merged expression (a bare select item keeps the name `k`), and a `USING` whose left
//! column is not the first relation's (a right join's key, a full join's `COALESCE`,
//! another input's column) becomes the `ON` condition it means. A plain `*`
//! over such joins is spelled out as PostgreSQL expands it — each join's merged columns
//! first, then its left input's other columns, then its right input's — when the
//! catalog knows every relation's columns.
//!
//! What cannot be told is left to DataFusion: a `USING` column of a chain's left side
//! that no merge named before and whose input the catalog cannot tell, `NATURAL` joins
//! of relations whose columns are not known, and joins in parentheses. A subquery's own
//! references are its own scope.

use super::ddl::ident_name;
use crate::catalog::Catalog;
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr, GroupByExpr, Ident, JoinConstraint, JoinOperator, ObjectName, Query,
    Select, SelectItem, SetExpr, Statement, TableFactor, TableWithJoins, VisitMut, VisitorMut,
};
use std::collections::HashSet;
use std::ops::ControlFlow;

/// Rewrites every query of `statement`.
pub fn rewrite(statement: &mut Statement, catalog: &Catalog) {
    let mut names = CteNames(HashSet::new());
    let _ = statement.visit(&mut names);
    let _ = statement.visit(&mut MergedUsingColumns {
        columns: &|table: &str| {
            if names.0.contains(table) {
                return None;
            }
            let relation = catalog.get(table)?;
            Some(
                relation
                    .columns
                    .iter()
                    .filter(|c| !c.hidden)
                    .map(|c| c.name.clone())
                    .collect(),
            )
        },
    });
}

/// The names `WITH` gives anywhere in a statement: a table of that name may be the CTE.
struct CteNames(HashSet<String>);

impl VisitorMut for CteNames {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        if let Some(with) = &query.with {
            for cte in &with.cte_tables {
                self.0.insert(ident_name(&cte.alias.name));
            }
        }
        ControlFlow::Continue(())
    }
}

/// A catalog table's visible columns, by name (`None`: not known).
type ColumnsOf<'a> = &'a dyn Fn(&str) -> Option<Vec<String>>;

struct MergedUsingColumns<'a> {
    columns: ColumnsOf<'a>,
}

impl VisitorMut for MergedUsingColumns<'_> {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        rewrite_set_expr(&mut query.body, self.columns);
        ControlFlow::Continue(())
    }
}

fn rewrite_set_expr(body: &mut SetExpr, columns: ColumnsOf<'_>) {
    match body {
        SetExpr::Select(select) => rewrite_select(select, columns),
        SetExpr::SetOperation { left, right, .. } => {
            rewrite_set_expr(left, columns);
            rewrite_set_expr(right, columns);
        }
        _ => {}
    }
}

fn rewrite_select(select: &mut Select, columns: ColumnsOf<'_>) {
    let mut merged: Vec<(String, Expr)> = Vec::new();
    // What a plain `*` stands for, while every relation's columns are known.
    let mut star: Option<Vec<(Ident, Expr)>> = Some(Vec::new());
    for from in &mut select.from {
        let columns_here = merge_using_columns(from, &mut merged, columns);
        star = star.zip(columns_here).map(|(mut all, more)| {
            all.extend(more);
            all
        });
    }
    if merged.is_empty() {
        return;
    }
    if let Some(star) = star {
        spell_out_star(&mut select.projection, star);
    }
    let mut replacer = Replacer {
        merged: &merged,
        depth: 0,
    };
    for item in &mut select.projection {
        match item {
            SelectItem::UnnamedExpr(Expr::Identifier(id)) => {
                if let Some(expr) = replacer.merged_expr(id) {
                    let alias = id.clone();
                    *item = SelectItem::ExprWithAlias { expr, alias };
                }
            }
            SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } => {
                let _ = expr.visit(&mut replacer);
            }
            _ => {}
        }
    }
    if let Some(selection) = &mut select.selection {
        let _ = selection.visit(&mut replacer);
    }
    if let GroupByExpr::Expressions(exprs, _) = &mut select.group_by {
        for expr in exprs {
            let _ = expr.visit(&mut replacer);
        }
    }
    if let Some(having) = &mut select.having {
        let _ = having.visit(&mut replacer);
    }
}

/// Replaces a plain `*` (no qualifier, no options) with `star`'s columns.
fn spell_out_star(projection: &mut Vec<SelectItem>, star: Vec<(Ident, Expr)>) {
    let plain = |item: &SelectItem| {
        matches!(item, SelectItem::Wildcard(o)
            if o.opt_exclude.is_none() && o.opt_except.is_none()
                && o.opt_replace.is_none() && o.opt_rename.is_none() && o.opt_ilike.is_none())
    };
    if !projection.iter().any(plain) {
        return;
    }
    let mut items = Vec::with_capacity(projection.len() + star.len());
    for item in std::mem::take(projection) {
        if plain(&item) {
            items.extend(star.iter().map(|(name, expr)| match expr {
                Expr::CompoundIdentifier(parts) if parts.last() == Some(name) => {
                    SelectItem::UnnamedExpr(expr.clone())
                }
                _ => SelectItem::ExprWithAlias {
                    expr: expr.clone(),
                    alias: name.clone(),
                },
            }));
        } else {
            items.push(item);
        }
    }
    *projection = items;
}

/// A `FROM` item's columns, qualified by its binding (`None`: not known).
fn relation_columns(
    factor: &TableFactor,
    binding: &Option<Ident>,
    columns: ColumnsOf<'_>,
) -> Option<Vec<(Ident, Expr)>> {
    let TableFactor::Table {
        name, args: None, ..
    } = factor
    else {
        return None;
    };
    let [part] = name.0.as_slice() else {
        return None;
    };
    let binding = binding.as_ref()?;
    let names = columns(&ident_name(part.as_ident()?))?;
    Some(
        names
            .into_iter()
            .map(|n| {
                let column = Ident::with_quote('"', n);
                (column.clone(), qualified(binding, &column))
            })
            .collect(),
    )
}

/// The name a `FROM` item is referred to by: its alias, or a table's own name.
fn binding(factor: &TableFactor) -> Option<Ident> {
    match factor {
        TableFactor::Table { alias: Some(a), .. } | TableFactor::Derived { alias: Some(a), .. } => {
            Some(a.name.clone())
        }
        TableFactor::Table {
            name, alias: None, ..
        } => name.0.last().and_then(|p| p.as_ident()).cloned(),
        _ => None,
    }
}

/// Follows `from`'s joins, adding each `USING` column's merged expression to `merged`;
/// returns the columns of the whole (`None` when some relation's are not known).
fn merge_using_columns(
    from: &mut TableWithJoins,
    merged: &mut Vec<(String, Expr)>,
    columns: ColumnsOf<'_>,
) -> Option<Vec<(Ident, Expr)>> {
    let first = binding(&from.relation);
    let mut star = relation_columns(&from.relation, &first, columns);
    for (index, join) in from.joins.iter_mut().enumerate() {
        let right = binding(&join.relation);
        let right_columns = relation_columns(&join.relation, &right, columns);
        if let (Some(left), Some(right)) = (&star, &right_columns) {
            natural_as_using(&mut join.join_operator, left, right);
        }
        let spelled = spelled_out(&join.join_operator);
        let using = using_keys(&join.join_operator);
        // The left input's column of each key: merged before, the first relation's,
        // or the one column of that name the left input has.
        let left_of = |key: &str, name: &Ident| -> Option<Expr> {
            if let Some((_, expr)) = merged.iter().find(|(k, _)| k == key) {
                return Some(expr.clone());
            }
            if index == 0 {
                return first.as_ref().map(|f| qualified(f, name));
            }
            let mut found = star.as_ref()?.iter().filter(|(n, _)| ident_name(n) == key);
            match (found.next(), found.next()) {
                (Some((_, expr)), None) => Some(expr.clone()),
                _ => None,
            }
        };
        let lefts: Option<Vec<Expr>> = using
            .iter()
            .flatten()
            .map(|(key, name)| left_of(key, name))
            .collect();
        if let (Some(lefts), Some(right)) = (lefts, &right) {
            // DataFusion joins a `USING` on the first relation's column of that name;
            // any other left column (a right join's, a full join's COALESCE, another
            // input's) needs the `ON` it means.
            let as_on = using.iter().flatten().zip(&lefts).any(|((_, name), left)| {
                first.as_ref().is_none_or(|f| *left != qualified(f, name))
            });
            merge_one_join(join, &lefts, right, merged, as_on);
        }
        star = match (star, right_columns, spelled) {
            (Some(left), Some(right_columns), true) => match &using {
                None => Some(left.into_iter().chain(right_columns).collect()),
                Some(keys) => {
                    let merged_now: Option<Vec<(Ident, Expr)>> = keys
                        .iter()
                        .map(|(key, name)| {
                            let (_, e) = merged.iter().find(|(m, _)| m == key)?;
                            Some((name.clone(), e.clone()))
                        })
                        .collect();
                    let is_key = |(name, _): &(Ident, Expr)| {
                        keys.iter().any(|(key, _)| *key == ident_name(name))
                    };
                    merged_now.map(|merged_now| {
                        merged_now
                            .into_iter()
                            .chain(left.into_iter().filter(|c| !is_key(c)))
                            .chain(right_columns.into_iter().filter(|c| !is_key(c)))
                            .collect()
                    })
                }
            },
            _ => None,
        };
    }
    star
}

/// A `NATURAL` join of inputs whose columns are known: `USING` the names they share,
/// in the left input's order (none shared: a cross join), as PostgreSQL defines it.
fn natural_as_using(operator: &mut JoinOperator, left: &[(Ident, Expr)], right: &[(Ident, Expr)]) {
    let (JoinOperator::Join(c)
    | JoinOperator::Inner(c)
    | JoinOperator::Left(c)
    | JoinOperator::LeftOuter(c)
    | JoinOperator::Right(c)
    | JoinOperator::RightOuter(c)
    | JoinOperator::FullOuter(c)) = operator
    else {
        return;
    };
    if !matches!(c, JoinConstraint::Natural) {
        return;
    }
    let mut shared: Vec<Ident> = Vec::new();
    for (name, _) in left {
        let key = ident_name(name);
        if right.iter().any(|(r, _)| ident_name(r) == key)
            && !shared.iter().any(|s| ident_name(s) == key)
        {
            shared.push(name.clone());
        }
    }
    *c = if shared.is_empty() {
        JoinConstraint::On(Expr::value(
            datafusion::sql::sqlparser::ast::Value::Boolean(true),
        ))
    } else {
        JoinConstraint::Using(
            shared
                .into_iter()
                .map(|name| ObjectName::from(vec![name]))
                .collect(),
        )
    };
}

/// Whether a join's columns are its inputs' side by side (semi, anti, `NATURAL`,
/// lateral and other joins are not spelled out).
fn spelled_out(operator: &JoinOperator) -> bool {
    match operator {
        JoinOperator::Join(c)
        | JoinOperator::Inner(c)
        | JoinOperator::Left(c)
        | JoinOperator::LeftOuter(c)
        | JoinOperator::Right(c)
        | JoinOperator::RightOuter(c)
        | JoinOperator::FullOuter(c)
        | JoinOperator::CrossJoin(c) => !matches!(c, JoinConstraint::Natural),
        _ => false,
    }
}

/// A join's `USING` columns (key, as written); `None` for other joins.
fn using_keys(operator: &JoinOperator) -> Option<Vec<(String, Ident)>> {
    let (JoinOperator::Join(JoinConstraint::Using(columns))
    | JoinOperator::Inner(JoinConstraint::Using(columns))
    | JoinOperator::Left(JoinConstraint::Using(columns))
    | JoinOperator::LeftOuter(JoinConstraint::Using(columns))
    | JoinOperator::Right(JoinConstraint::Using(columns))
    | JoinOperator::RightOuter(JoinConstraint::Using(columns))
    | JoinOperator::FullOuter(JoinConstraint::Using(columns))) = operator
    else {
        return None;
    };
    columns
        .iter()
        .map(|c| {
            let name = c.0.last()?.as_ident()?;
            Some((ident_name(name), name.clone()))
        })
        .collect()
}

/// Adds one `USING` join's merged columns to `merged`, given the left input's column of
/// each key; `as_on` turns the `USING` into the `ON` it means.
fn merge_one_join(
    join: &mut datafusion::sql::sqlparser::ast::Join,
    lefts: &[Expr],
    right: &Ident,
    merged: &mut Vec<(String, Expr)>,
    as_on: bool,
) {
    let Some(keys) = using_keys(&join.join_operator) else {
        return;
    };
    let (constraint, full, right_wins) = match &mut join.join_operator {
        JoinOperator::Join(c)
        | JoinOperator::Inner(c)
        | JoinOperator::Left(c)
        | JoinOperator::LeftOuter(c) => (c, false, false),
        JoinOperator::Right(c) | JoinOperator::RightOuter(c) => (c, false, true),
        JoinOperator::FullOuter(c) => (c, true, false),
        _ => return,
    };
    if as_on {
        let on = keys
            .iter()
            .zip(lefts)
            .map(|((_, name), left)| Expr::BinaryOp {
                left: Box::new(left.clone()),
                op: BinaryOperator::Eq,
                right: Box::new(qualified(right, name)),
            })
            .reduce(|a, b| Expr::BinaryOp {
                left: Box::new(a),
                op: BinaryOperator::And,
                right: Box::new(b),
            })
            .expect("USING names a column");
        *constraint = JoinConstraint::On(on);
    }
    for ((key, name), left) in keys.into_iter().zip(lefts) {
        let right_column = qualified(right, &name);
        let expr = if full {
            coalesce(left.clone(), right_column)
        } else if right_wins {
            right_column
        } else {
            left.clone()
        };
        match merged.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = expr,
            None => merged.push((key, expr)),
        }
    }
}

fn qualified(binding: &Ident, column: &Ident) -> Expr {
    Expr::CompoundIdentifier(vec![binding.clone(), column.clone()])
}

fn coalesce(left: Expr, right: Expr) -> Expr {
    super::sql_rewrite::function_call("coalesce", vec![left, right])
}

/// Replaces unqualified references to merged columns, outside subqueries.
struct Replacer<'a> {
    merged: &'a [(String, Expr)],
    depth: usize,
}

impl Replacer<'_> {
    fn merged_expr(&self, id: &Ident) -> Option<Expr> {
        let key = ident_name(id);
        self.merged
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, e)| e.clone())
    }
}

impl VisitorMut for Replacer<'_> {
    type Break = ();

    fn pre_visit_query(&mut self, _: &mut Query) -> ControlFlow<()> {
        self.depth += 1;
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _: &mut Query) -> ControlFlow<()> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if self.depth == 0
            && let Expr::Identifier(id) = expr
            && let Some(merged) = self.merged_expr(id)
        {
            *expr = merged;
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    /// Tables `a (k, x)`, `b (y, k)`, `c (k, z)`; others unknown.
    fn columns_of(table: &str) -> Option<Vec<String>> {
        let names: &[&str] = match table {
            "a" => &["k", "x"],
            "b" => &["y", "k"],
            "c" => &["k", "z"],
            _ => return None,
        };
        Some(names.iter().map(|n| n.to_string()).collect())
    }

    fn rewritten(sql: &str) -> String {
        let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap();
        let _ = statements[0].visit(&mut MergedUsingColumns { columns: &|_| None });
        statements[0].to_string()
    }

    fn with_stars(sql: &str) -> String {
        let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap();
        let _ = statements[0].visit(&mut MergedUsingColumns {
            columns: &columns_of,
        });
        statements[0].to_string()
    }

    #[test]
    fn natural_joins_use_the_shared_columns() {
        assert_eq!(
            with_stars("SELECT * FROM a NATURAL FULL JOIN c"),
            r#"SELECT coalesce(a."k", c."k") AS "k", a."x", c."z" FROM a FULL JOIN c USING("k")"#
        );
        assert_eq!(
            with_stars("SELECT * FROM c NATURAL JOIN a"),
            r#"SELECT c."k", c."z", a."x" FROM c JOIN a USING("k")"#
        );
        // Unknown columns: left to DataFusion.
        assert_eq!(
            with_stars("SELECT * FROM a NATURAL JOIN d"),
            "SELECT * FROM a NATURAL JOIN d"
        );
    }

    #[test]
    fn stars_are_spelled_out_as_postgresql_expands_them() {
        assert_eq!(
            with_stars("SELECT * FROM a FULL JOIN b USING (k)"),
            r#"SELECT coalesce(a.k, b.k) AS k, a."x", b."y" FROM a FULL JOIN b USING(k)"#
        );
        assert_eq!(
            with_stars("SELECT * FROM b JOIN c USING (k) JOIN a ON a.x = c.z"),
            r#"SELECT b.k, b."y", c."z", a."k", a."x" FROM b JOIN c USING(k) JOIN a ON a.x = c.z"#
        );
        // A relation the catalog does not know leaves the star to DataFusion.
        assert_eq!(
            with_stars("SELECT * FROM a JOIN d USING (k)"),
            "SELECT * FROM a JOIN d USING(k)"
        );
        // The key of a chain is found in the one left input that has it.
        assert_eq!(
            with_stars("SELECT k FROM a JOIN c ON a.x = c.z JOIN b USING (y)"),
            "SELECT k FROM a JOIN c ON a.x = c.z JOIN b USING(y)"
        );
    }

    #[test]
    fn full_joins_merge_with_coalesce() {
        assert_eq!(
            rewritten("SELECT k, x FROM a FULL JOIN b USING (k) WHERE k > 1 ORDER BY k"),
            "SELECT coalesce(a.k, b.k) AS k, x FROM a FULL JOIN b USING(k) \
             WHERE coalesce(a.k, b.k) > 1 ORDER BY k"
        );
    }

    #[test]
    fn chains_join_on_the_merged_column() {
        assert_eq!(
            rewritten("SELECT k FROM a AS p JOIN b USING (k) JOIN c USING (k)"),
            "SELECT p.k AS k FROM a AS p JOIN b USING(k) JOIN c USING(k)"
        );
        assert_eq!(
            rewritten("SELECT count(k) FROM a FULL JOIN b USING (k) RIGHT JOIN c USING (k)"),
            "SELECT count(c.k) FROM a FULL JOIN b USING(k) RIGHT JOIN c ON coalesce(a.k, b.k) = c.k"
        );
    }

    #[test]
    fn a_right_joins_key_is_joined_on_by_the_next_using() {
        assert_eq!(
            rewritten("SELECT k FROM a RIGHT JOIN b USING (k) LEFT JOIN c USING (k)"),
            "SELECT b.k AS k FROM a RIGHT JOIN b USING(k) LEFT JOIN c ON b.k = c.k"
        );
    }

    #[test]
    fn qualified_references_and_subqueries_are_left_alone() {
        assert_eq!(
            rewritten(
                "SELECT a.k, (SELECT max(k) FROM c) FROM a LEFT JOIN b USING (k) GROUP BY k, a.k"
            ),
            "SELECT a.k, (SELECT max(k) FROM c) FROM a LEFT JOIN b USING(k) GROUP BY a.k, a.k"
        );
        assert_eq!(
            rewritten("SELECT k FROM a JOIN b ON a.k = b.k"),
            "SELECT k FROM a JOIN b ON a.k = b.k"
        );
    }
}
