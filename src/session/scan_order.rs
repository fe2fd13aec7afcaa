//! The order a materialized view's rows are read in when a `SELECT` gives none: the
//! view query's own `ORDER BY`. RisingWave keeps such a view sorted that way, and test
//! files written for it compare the rows of `SELECT * FROM v` in that order.
//!
//! Only the leading `ORDER BY` items that name the view's columns count (by name, by
//! position, or as the same expression as a selected column); the rest would need
//! columns the view does not keep, and sorting by the prefix is still that order.

use super::ddl::ident_name;
use crate::catalog::{Column, ScanOrder};
use datafusion::sql::sqlparser::ast::{Expr, OrderByKind, Query, SelectItem, SetExpr, Value};

/// The scan order of a view over `query` with `columns` (its visible columns first).
pub fn of_query(query: &Query, columns: &[Column]) -> Vec<ScanOrder> {
    let Some(order_by) = &query.order_by else {
        return vec![];
    };
    let OrderByKind::Expressions(items) = &order_by.kind else {
        return vec![];
    };
    let mut order = Vec::new();
    for item in items {
        let Some(column) = column_of(&item.expr, query, columns) else {
            break;
        };
        let descending = item.options.asc == Some(false);
        order.push(ScanOrder {
            column,
            descending,
            // PostgreSQL: NULLS LAST ascending, NULLS FIRST descending, unless stated.
            nulls_first: item.options.nulls_first.unwrap_or(descending),
        });
    }
    order
}

/// The view column an `ORDER BY` expression sorts by, if it is one.
fn column_of(expr: &Expr, query: &Query, columns: &[Column]) -> Option<usize> {
    let visible = columns.iter().filter(|c| !c.hidden).count();
    match expr {
        // An output column's name comes first, as in PostgreSQL.
        Expr::Identifier(ident) => {
            let name = ident_name(ident);
            columns.iter().position(|c| c.name == name)
        }
        Expr::Value(value) => match &value.value {
            Value::Number(n, _) => n
                .parse::<usize>()
                .ok()
                .filter(|p| (1..=visible).contains(p))
                .map(|p| p - 1),
            _ => None,
        },
        _ => selected_position(expr, query).filter(|p| *p < visible),
    }
}

/// The position among the selected items of one whose expression is `expr`.
fn selected_position(expr: &Expr, query: &Query) -> Option<usize> {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let wanted = expr.to_string();
    let mut position = 0;
    for item in &select.projection {
        match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                if e.to_string() == wanted {
                    return Some(position);
                }
                position += 1;
            }
            // A `*` stands for columns this cannot count.
            _ => return None,
        }
    }
    None
}
