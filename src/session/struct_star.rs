//! `(v).*` in a select list (the token rewrite made it `eddy_struct_star(v)`): one column
//! per field of the struct, `get_field(v, 'f') AS f`, in the fields' order — as PostgreSQL
//! expands a composite value. `v` must be a struct column of a table, view or source in
//! `FROM` (possibly qualified, or a struct field of one: `((v).inner).*`), whose fields
//! the catalog knows; anything else is refused.

use super::ddl::{ident_name, relation_name};
use super::token_rewrites::STRUCT_STAR_MARKER;
use crate::catalog::{Catalog, SqlType};
use crate::error::{EddyError, Result};
use datafusion::sql::sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, Query, Select, SelectItem,
    SetExpr, Statement, TableFactor, Value, VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use std::ops::ControlFlow;

/// Whether a statement's text may hold the marker.
pub fn mentioned(sql: &str) -> bool {
    super::token_rewrites::mentions(sql, STRUCT_STAR_MARKER)
}

/// Expands every `(v).*` of `statement`'s select lists.
pub fn expand(statement: &mut Statement, catalog: &Catalog) -> Result<()> {
    match statement.visit(&mut Expander { catalog }) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}

struct Expander<'a> {
    catalog: &'a Catalog,
}

impl VisitorMut for Expander<'_> {
    type Break = EddyError;

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<EddyError> {
        match expand_body(&mut query.body, self.catalog) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => ControlFlow::Break(e),
        }
    }
}

fn expand_body(body: &mut SetExpr, catalog: &Catalog) -> Result<()> {
    match body {
        SetExpr::Select(select) => expand_select(select, catalog),
        SetExpr::SetOperation { left, right, .. } => {
            expand_body(left, catalog)?;
            expand_body(right, catalog)
        }
        _ => Ok(()),
    }
}

fn expand_select(select: &mut Select, catalog: &Catalog) -> Result<()> {
    let mut items = Vec::with_capacity(select.projection.len());
    for item in std::mem::take(&mut select.projection) {
        let Some(value) = marked(&item) else {
            items.push(item);
            continue;
        };
        let Some(SqlType::Struct(fields)) = type_of(&value, select, catalog) else {
            return Err(EddyError::not_supported(format!(
                "({value}).* needs a struct column of a table, view or source in FROM"
            )));
        };
        for (field, _) in &fields {
            let access = format!("get_field({value}, '{}')", field.replace('\'', "''"));
            let expr = Parser::new(&PostgreSqlDialect {})
                .try_with_sql(&access)
                .and_then(|mut p| p.parse_expr())
                .map_err(|e| EddyError::internal(format!("(v).* expansion: {e}")))?;
            items.push(SelectItem::ExprWithAlias {
                expr,
                alias: Ident::with_quote('"', field.clone()),
            });
        }
    }
    select.projection = items;
    Ok(())
}

/// The struct expression of a `(v).*` select item.
fn marked(item: &SelectItem) -> Option<Expr> {
    let SelectItem::UnnamedExpr(Expr::Function(call)) = item else {
        return None;
    };
    if !call
        .name
        .to_string()
        .eq_ignore_ascii_case(STRUCT_STAR_MARKER)
    {
        return None;
    }
    match &call.args {
        FunctionArguments::List(list) => match list.args.as_slice() {
            [FunctionArg::Unnamed(FunctionArgExpr::Expr(e))] => Some(e.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// The SQL type of a column reference (or a field of one) in `select`'s `FROM`.
fn type_of(expr: &Expr, select: &Select, catalog: &Catalog) -> Option<SqlType> {
    match expr {
        Expr::Nested(inner) => type_of(inner, select, catalog),
        Expr::Identifier(column) => column_type(None, &ident_name(column), select, catalog),
        Expr::CompoundIdentifier(parts) if parts.len() == 2 => column_type(
            Some(&ident_name(&parts[0])),
            &ident_name(&parts[1]),
            select,
            catalog,
        ),
        // `(v).inner` was made `get_field(v, 'inner')` by the field-access rewrite.
        Expr::Function(call) if call.name.to_string().eq_ignore_ascii_case("get_field") => {
            let FunctionArguments::List(list) = &call.args else {
                return None;
            };
            let [
                FunctionArg::Unnamed(FunctionArgExpr::Expr(base)),
                FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(name))),
            ] = list.args.as_slice()
            else {
                return None;
            };
            let Value::SingleQuotedString(name) = &name.value else {
                return None;
            };
            match type_of(base, select, catalog)? {
                SqlType::Struct(fields) => fields
                    .into_iter()
                    .find(|(field, _)| field == name)
                    .map(|(_, ty)| ty),
                _ => None,
            }
        }
        _ => None,
    }
}

fn column_type(
    qualifier: Option<&str>,
    column: &str,
    select: &Select,
    catalog: &Catalog,
) -> Option<SqlType> {
    let factors = select
        .from
        .iter()
        .flat_map(|f| std::iter::once(&f.relation).chain(f.joins.iter().map(|j| &j.relation)));
    for factor in factors {
        let TableFactor::Table { name, alias, .. } = factor else {
            continue;
        };
        let table = relation_name(name).ok()?;
        let label = alias
            .as_ref()
            .map_or(table.clone(), |a| ident_name(&a.name));
        if qualifier.is_some_and(|q| q != label) {
            continue;
        }
        if let Some(found) = catalog
            .get(&table)
            .and_then(|rel| rel.columns.into_iter().find(|c| c.name == column))
        {
            return Some(found.sql_type);
        }
    }
    None
}
