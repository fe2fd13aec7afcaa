//! `UNION | INTERSECT | EXCEPT ... CORRESPONDING [BY (c, ...)]` after parsing: the token
//! rewrite ([`super::token_rewrites`]) left a marker as the right side's first select
//! item; here both sides become `SELECT <columns> FROM (<side>)`, the columns being those
//! of `BY`, or else the left side's columns that the right side also has, in the left
//! side's order (the standard's and RisingWave's rule). A side's column names come from
//! its select list: names, aliases, and `*` over relations of the catalog or derived
//! tables; an expression without a name makes `CORRESPONDING` refused.

use super::ddl::{ident_name, relation_name};
use super::token_rewrites::CORRESPONDING_MARKER;
use crate::catalog::Catalog;
use crate::error::{EddyError, Result, sqlstate};
use datafusion::sql::sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Query, SelectItem,
    SelectItemQualifiedWildcardKind, SetExpr, Statement, TableFactor, TableWithJoins, Value,
    VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use std::ops::ControlFlow;

/// Whether a statement's text may hold the marker.
pub fn mentioned(sql: &str) -> bool {
    super::token_rewrites::mentions(sql, CORRESPONDING_MARKER)
}

/// Rewrites every `CORRESPONDING` set operation of `statement`.
pub fn rewrite(statement: &mut Statement, catalog: &Catalog) -> Result<()> {
    let mut visitor = Rewriter { catalog };
    match statement.visit(&mut visitor) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}

struct Rewriter<'a> {
    catalog: &'a Catalog,
}

impl VisitorMut for Rewriter<'_> {
    type Break = EddyError;

    fn post_visit_query(&mut self, query: &mut Query) -> ControlFlow<EddyError> {
        match set_operations(&mut query.body, self.catalog) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => ControlFlow::Break(e),
        }
    }
}

fn set_operations(body: &mut SetExpr, catalog: &Catalog) -> Result<()> {
    let SetExpr::SetOperation {
        op, left, right, ..
    } = body
    else {
        return Ok(());
    };
    set_operations(left, catalog)?;
    let Some(by) = take_marker(right)? else {
        return Ok(());
    };
    let unnamed = |side: &str| {
        EddyError::not_supported(format!(
            "CORRESPONDING needs the column names of the {side} side: name each \
             expression with AS, and select from tables or views"
        ))
    };
    let left_names = output_names(left, catalog).ok_or_else(|| unnamed("left"))?;
    let right_names = output_names(right, catalog).ok_or_else(|| unnamed("right"))?;
    let columns: Vec<String> = if by.is_empty() {
        let common: Vec<String> = left_names
            .iter()
            .filter(|c| right_names.contains(c))
            .cloned()
            .collect();
        if common.is_empty() {
            let list = |names: &[String]| {
                names
                    .iter()
                    .map(|n| format!("{n:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(EddyError::new(
                sqlstate::SYNTAX_ERROR,
                format!(
                    "When CORRESPONDING is specified, at least one column of the left side \
                     shall have a column name that is the column name of some column of the \
                     right side in a {op} operation. Left side query column list: ({}). \
                     Right side query column list: ({}).",
                    list(&left_names),
                    list(&right_names)
                ),
            ));
        }
        common
    } else {
        for column in &by {
            if !left_names.contains(column) || !right_names.contains(column) {
                return Err(EddyError::new(
                    sqlstate::SYNTAX_ERROR,
                    format!(
                        "Column name `{column}` in CORRESPONDING BY is not found in a side of \
                         the {op} operation. It shall be included in both sides."
                    ),
                ));
            }
        }
        by
    };
    **left = project(left, &columns, "eddy_corresponding_left")?;
    **right = project(right, &columns, "eddy_corresponding_right")?;
    Ok(())
}

/// Removes the marker from the right side's select list: the `BY` columns (empty: none).
fn take_marker(side: &mut SetExpr) -> Result<Option<Vec<String>>> {
    let select = match side {
        SetExpr::Select(select) => select,
        SetExpr::Query(query) => return take_marker(&mut query.body),
        _ => return Ok(None),
    };
    let Some(SelectItem::UnnamedExpr(Expr::Function(call))) = select.projection.first() else {
        return Ok(None);
    };
    if !call
        .name
        .to_string()
        .eq_ignore_ascii_case(CORRESPONDING_MARKER)
    {
        return Ok(None);
    }
    let FunctionArguments::List(args) = &call.args else {
        return Err(EddyError::internal(
            "a CORRESPONDING marker without arguments",
        ));
    };
    let columns = match args.args.first() {
        Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(v)))) => match &v.value {
            Value::SingleQuotedString(s) => s
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect(),
            _ => return Err(EddyError::internal("a CORRESPONDING marker's argument")),
        },
        _ => return Err(EddyError::internal("a CORRESPONDING marker's argument")),
    };
    select.projection.remove(0);
    Ok(Some(columns))
}

/// `SELECT columns FROM (side) AS alias`.
fn project(side: &SetExpr, columns: &[String], alias: &str) -> Result<SetExpr> {
    let quoted: Vec<String> = columns
        .iter()
        .map(|c| format!("\"{}\"", c.replace('"', "\"\"")))
        .collect();
    let sql = format!("SELECT {} FROM ({side}) AS {alias}", quoted.join(", "));
    let query = Parser::new(&PostgreSqlDialect {})
        .try_with_sql(&sql)
        .and_then(|mut p| p.parse_query())
        .map_err(|e| EddyError::internal(format!("CORRESPONDING rewrite: {e}")))?;
    Ok(*query.body)
}

/// A side's output column names, where its select list tells them.
fn output_names(side: &SetExpr, catalog: &Catalog) -> Option<Vec<String>> {
    match side {
        SetExpr::Query(query) => output_names(&query.body, catalog),
        SetExpr::SetOperation { left, .. } => output_names(left, catalog),
        SetExpr::Select(select) => {
            let mut names = Vec::new();
            for item in &select.projection {
                match item {
                    SelectItem::UnnamedExpr(Expr::Identifier(ident)) => {
                        names.push(ident_name(ident))
                    }
                    SelectItem::UnnamedExpr(Expr::CompoundIdentifier(parts)) => {
                        names.push(ident_name(parts.last()?))
                    }
                    SelectItem::ExprWithAlias { alias, .. } => names.push(ident_name(alias)),
                    SelectItem::Wildcard(_) => {
                        for from in &select.from {
                            for factor in factors(from) {
                                names.extend(factor_names(factor, catalog)?);
                            }
                        }
                    }
                    SelectItem::QualifiedWildcard(
                        SelectItemQualifiedWildcardKind::ObjectName(qualifier),
                        _,
                    ) => {
                        let wanted = relation_name(qualifier).ok()?;
                        let factor = select
                            .from
                            .iter()
                            .flat_map(factors)
                            .find(|f| factor_label(f).as_deref() == Some(wanted.as_str()))?;
                        names.extend(factor_names(factor, catalog)?);
                    }
                    _ => return None,
                }
            }
            Some(names)
        }
        _ => None,
    }
}

fn factors(from: &TableWithJoins) -> impl Iterator<Item = &TableFactor> {
    std::iter::once(&from.relation).chain(from.joins.iter().map(|j| &j.relation))
}

/// The name a `FROM` item is referred to by: its alias, or its table's name.
fn factor_label(factor: &TableFactor) -> Option<String> {
    match factor {
        TableFactor::Table { alias: Some(a), .. } | TableFactor::Derived { alias: Some(a), .. } => {
            Some(ident_name(&a.name))
        }
        TableFactor::Table { name, .. } => relation_name(name).ok(),
        _ => None,
    }
}

/// The columns a `FROM` item gives `*`.
fn factor_names(factor: &TableFactor, catalog: &Catalog) -> Option<Vec<String>> {
    match factor {
        TableFactor::Table { name, alias, .. } => {
            if let Some(alias) = alias
                && !alias.columns.is_empty()
            {
                return Some(alias.columns.iter().map(|c| ident_name(&c.name)).collect());
            }
            let rel = catalog.get(&relation_name(name).ok()?)?;
            Some(
                rel.columns
                    .iter()
                    .filter(|c| !c.hidden)
                    .map(|c| c.name.clone())
                    .collect(),
            )
        }
        TableFactor::Derived {
            subquery, alias, ..
        } => {
            if let Some(alias) = alias
                && !alias.columns.is_empty()
            {
                return Some(alias.columns.iter().map(|c| ident_name(&c.name)).collect());
            }
            output_names(&subquery.body, catalog)
        }
        _ => None,
    }
}
