//! Result column names as PostgreSQL gives them.
//!
//! DataFusion names an unaliased expression by its text (`Int64(1)`, `count(*)`);
//! PostgreSQL calls it `?column?`, or after the function (`count`) or the cast type
//! (`int4`). Clients show these names, and some look columns up by them.

use crate::catalog::SqlType;
use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::sql::sqlparser::ast::{Expr, SelectItem, SetExpr, Statement};
use std::sync::Arc;

/// For each output column of a query, the name PostgreSQL would give it, where that
/// differs from DataFusion's; `None` when the columns cannot be matched one to one
/// (a `*` in the select list) or the statement is not a query.
pub fn postgres_names(stmt: &Statement) -> Option<Vec<Option<String>>> {
    let Statement::Query(query) = stmt else {
        return None;
    };
    names_of_set_expr(&query.body)
}

fn names_of_set_expr(body: &SetExpr) -> Option<Vec<Option<String>>> {
    match body {
        SetExpr::Select(select) => select
            .projection
            .iter()
            .map(|item| match item {
                SelectItem::UnnamedExpr(e) => Some(name_of(e)),
                SelectItem::ExprWithAlias { alias, .. } => Some(
                    alias
                        .value
                        .strip_prefix(super::sql_rewrite::DUPLICATE_ALIAS_PREFIX)
                        .and_then(|rest| rest.split_once("__"))
                        .map(|(_, name)| name.to_string()),
                ),
                SelectItem::ExprWithAliases { .. } => Some(None),
                _ => None,
            })
            .collect(),
        SetExpr::SetOperation { left, .. } => names_of_set_expr(left),
        SetExpr::Query(q) => names_of_set_expr(&q.body),
        _ => None,
    }
}

/// The name PostgreSQL gives an unaliased select-list expression (`None`: the name it
/// already has, a column's own name).
pub fn pg_name_of(expr: &Expr) -> Option<String> {
    name_of(expr).or_else(|| match expr {
        Expr::Identifier(i) => Some(i.value.clone()),
        Expr::CompoundIdentifier(parts) => parts.last().map(|p| p.value.clone()),
        _ => None,
    })
}

/// The name PostgreSQL gives an unaliased select-list expression, or `None` when the name
/// DataFusion already gives (a column's own name) is right.
fn name_of(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Identifier(_) | Expr::CompoundIdentifier(_) => None,
        Expr::Nested(inner) => name_of(inner),
        Expr::Function(f) => f
            .name
            .0
            .last()
            .and_then(|p| p.as_ident())
            .map(|i| i.value.to_lowercase())
            // Interval arithmetic written as an operator is rewritten into a call.
            .map(|name| {
                if name == super::interval_arithmetic::INTERVAL_MUL {
                    "?column?".to_string()
                } else if name == super::string_agg_by_row::NAME {
                    "string_agg".to_string()
                } else if name == "regexp_like"
                    && f.to_string().contains(super::similar_to::SIMILAR_TO_REGEX)
                {
                    // `x SIMILAR TO p`, rewritten into a call: an operator's column.
                    "?column?".to_string()
                } else {
                    name
                }
            }),
        Expr::Cast {
            expr, data_type, ..
        } => match expr.as_ref() {
            Expr::Identifier(i) => Some(i.value.clone()),
            Expr::CompoundIdentifier(parts) => parts.last().map(|i| i.value.clone()),
            Expr::Function(_) | Expr::Nested(_) => name_of(expr),
            _ => Some(
                SqlType::from_ast(data_type)
                    .map(|t| t.internal_name().to_string())
                    .unwrap_or_else(|_| "?column?".into()),
            ),
        },
        Expr::Case { .. } => Some("case".into()),
        Expr::Exists { .. } => Some("exists".into()),
        Expr::Extract { .. } => Some("extract".into()),
        Expr::Array(_) => Some("array".into()),
        _ => Some("?column?".into()),
    }
}

/// The schema with the given columns renamed.
pub fn rename(schema: &SchemaRef, names: &[Option<String>]) -> SchemaRef {
    if names.len() != schema.fields().len() || names.iter().all(Option::is_none) {
        return schema.clone();
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .zip(names)
        .map(|(f, n)| match n {
            Some(n) => f.as_ref().clone().with_name(n),
            None => f.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// The column names of a view over `query` with these (DataFusion-named) fields:
/// unaliased expressions get the names PostgreSQL gives them (`count`, `?column?`).
pub fn view_column_names(
    query: &datafusion::sql::sqlparser::ast::Query,
    fields: &arrow::datatypes::Fields,
) -> Vec<String> {
    let pg = names_of_set_expr(&query.body).filter(|n| n.len() == fields.len());
    fields
        .iter()
        .enumerate()
        .map(|(i, f)| {
            pg.as_ref()
                .and_then(|n| n[i].clone())
                .unwrap_or_else(|| f.name().clone())
        })
        .collect()
}
