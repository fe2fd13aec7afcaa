//! RisingWave's hidden columns: a materialized view grouped by a column it does not
//! select (`SELECT sum(v1) FROM t GROUP BY v3`) keeps that column, readable by name
//! (`SELECT v3 FROM mv`) but left out of `SELECT *`, and `DESCRIBE` marks it hidden.
//!
//! The view's query gets the missing `GROUP BY` columns appended to its select list
//! ([`add_group_keys`]) before it is planned and stored, so the view's table has them;
//! queries that read such a view with `*` get the star spelled out as the visible
//! columns ([`expand_stars`]), wherever the star's relations are all known.

use crate::catalog::Catalog;
use datafusion::sql::sqlparser::ast::{
    Expr, GroupByExpr, Ident, ObjectName, Query, Select, SelectItem,
    SelectItemQualifiedWildcardKind, SetExpr, Statement, TableFactor, VisitMut, VisitorMut,
};
use std::ops::ControlFlow;

/// Appends to a grouped query's select list each plain `GROUP BY` column it does not
/// select; returns their names (the view's hidden columns, last in its schema).
pub fn add_group_keys(query: &mut Query) -> Vec<String> {
    let SetExpr::Select(select) = query.body.as_mut() else {
        return vec![];
    };
    let GroupByExpr::Expressions(keys, _) = &select.group_by else {
        return vec![];
    };
    if keys.is_empty() || select.distinct.is_some() {
        return vec![];
    }
    let mut selected = Vec::new();
    // A key selected under another name (`a.id AS auction_id`) is in the view already.
    let mut selected_keys = Vec::new();
    for item in &select.projection {
        match item {
            SelectItem::UnnamedExpr(e) => {
                if let Some(name) = column_name(e) {
                    selected.push(name);
                }
            }
            SelectItem::ExprWithAlias { alias, expr } => {
                selected.push(alias.value.to_lowercase());
                selected_keys.push(expr.clone());
            }
            // `*` with GROUP BY selects every grouped column already.
            _ => return vec![],
        }
    }
    let mut hidden = Vec::new();
    for key in keys.clone() {
        let Some(name) = column_name(&key) else {
            continue;
        };
        if selected.contains(&name) || hidden.contains(&name) || selected_keys.contains(&key) {
            continue;
        }
        select.projection.push(SelectItem::UnnamedExpr(key));
        hidden.push(name);
    }
    hidden
}

/// The output name of a plain column reference.
fn column_name(expr: &Expr) -> Option<String> {
    let ident = match expr {
        Expr::Identifier(i) => i,
        Expr::CompoundIdentifier(parts) => parts.last()?,
        _ => return None,
    };
    Some(match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    })
}

/// Spells out `*` (and `name.*`) over relations with hidden columns as their visible
/// columns, in every query of the statement.
pub fn expand_stars(statement: &mut Statement, catalog: &Catalog) {
    let mut visitor = Stars { catalog };
    let _ = statement.visit(&mut visitor);
}

/// [`expand_stars`] over a query's text: the rewritten text, or `None` when nothing
/// changed (or the text does not parse here; the planner then reports it).
pub fn expand_stars_in(sql: &str, catalog: &Catalog) -> Option<String> {
    let mut statements = crate::sql::star_except::parse(sql).ok()?;
    let [statement] = statements.as_mut_slice() else {
        return None;
    };
    let before = statement.to_string();
    expand_stars(statement, catalog);
    let after = statement.to_string();
    (after != before).then_some(after)
}

struct Stars<'a> {
    catalog: &'a Catalog,
}

/// A relation of a `FROM`: the name its columns are qualified by, and its columns
/// (`None` when not a catalog relation, such as a subquery).
type FromItem = (String, Option<Vec<(String, bool)>>);

impl Stars<'_> {
    fn relation_in_from(&self, factor: &TableFactor) -> FromItem {
        match factor {
            TableFactor::Table { name, alias, .. } => {
                let table = object_last(name);
                let qualifier = alias
                    .as_ref()
                    .map(|a| a.name.value.to_lowercase())
                    .unwrap_or_else(|| table.clone());
                let columns = self.catalog.get(&table).map(|rel| {
                    rel.columns
                        .iter()
                        .map(|c| (c.name.clone(), c.hidden))
                        .collect()
                });
                (qualifier, columns)
            }
            TableFactor::Derived { alias, .. } => (
                alias
                    .as_ref()
                    .map(|a| a.name.value.to_lowercase())
                    .unwrap_or_default(),
                None,
            ),
            _ => (String::new(), None),
        }
    }
}

fn object_last(name: &ObjectName) -> String {
    name.0
        .last()
        .and_then(|p| p.as_ident())
        .map(|i| match i.quote_style {
            Some(_) => i.value.clone(),
            None => i.value.to_lowercase(),
        })
        .unwrap_or_default()
}

/// The visible columns of a relation, qualified, as select items.
fn visible(qualifier: &str, columns: &[(String, bool)]) -> Vec<SelectItem> {
    columns
        .iter()
        .filter(|(_, hidden)| !hidden)
        .map(|(name, _)| {
            SelectItem::UnnamedExpr(Expr::CompoundIdentifier(vec![
                Ident::with_quote('"', qualifier),
                Ident::with_quote('"', name),
            ]))
        })
        .collect()
}

impl VisitorMut for Stars<'_> {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        self.expand_in(query.body.as_mut());
        ControlFlow::Continue(())
    }
}

impl Stars<'_> {
    /// The stars of a query's body: its select, or each branch of a set operation
    /// (`SELECT * FROM mv EXCEPT ...`), whose branches are not queries of their own.
    fn expand_in(&self, body: &mut SetExpr) {
        match body {
            SetExpr::Select(select) => self.expand_select(select),
            SetExpr::SetOperation { left, right, .. } => {
                self.expand_in(left);
                self.expand_in(right);
            }
            _ => {}
        }
    }

    fn expand_select(&self, select: &mut Select) {
        let mut items: Vec<FromItem> = Vec::new();
        for from in &select.from {
            items.push(self.relation_in_from(&from.relation));
            for join in &from.joins {
                items.push(self.relation_in_from(&join.relation));
            }
        }
        let any_hidden = items
            .iter()
            .any(|(_, c)| c.as_ref().is_some_and(|c| c.iter().any(|(_, h)| *h)));
        if !any_hidden {
            return;
        }
        let mut projection = Vec::with_capacity(select.projection.len());
        for item in std::mem::take(&mut select.projection) {
            match &item {
                // A plain star: every relation in order, if each one's columns are known.
                SelectItem::Wildcard(options)
                    if options.opt_exclude.is_none()
                        && options.opt_except.is_none()
                        && options.opt_replace.is_none()
                        && options.opt_rename.is_none()
                        && items.iter().all(|(_, c)| c.is_some()) =>
                {
                    for (qualifier, columns) in &items {
                        projection.extend(visible(qualifier, columns.as_deref().unwrap_or(&[])));
                    }
                }
                SelectItem::QualifiedWildcard(
                    SelectItemQualifiedWildcardKind::ObjectName(name),
                    options,
                ) if options.opt_except.is_none() && options.opt_exclude.is_none() => {
                    let qualifier = object_last(name);
                    match items.iter().find(|(q, _)| *q == qualifier) {
                        Some((q, Some(columns))) => projection.extend(visible(q, columns)),
                        _ => projection.push(item),
                    }
                }
                _ => projection.push(item),
            }
        }
        select.projection = projection;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    #[test]
    fn group_keys_not_selected_are_appended() {
        let mut statements = Parser::parse_sql(
            &PostgreSqlDialect {},
            "SELECT sum(v1) AS s, v2 FROM t GROUP BY v3, v2, t.v4",
        )
        .unwrap();
        let Statement::Query(query) = &mut statements[0] else {
            panic!("a query")
        };
        assert_eq!(add_group_keys(query), vec!["v3", "v4"]);
        assert_eq!(
            query.to_string(),
            "SELECT sum(v1) AS s, v2, v3, t.v4 FROM t GROUP BY v3, v2, t.v4"
        );
    }
}
