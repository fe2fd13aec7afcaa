//! Column values a DML statement does not spell out: `DEFAULT` expressions, stored
//! generated columns (`v2 int AS (v1 + 1)`, `GENERATED ALWAYS AS (...) STORED`), and
//! PostgreSQL's shorter `INSERT` forms.
//!
//! DataFusion plans an `INSERT` by position, fills left-out columns with NULL and knows
//! neither `DEFAULT` nor generated columns, so before a DML statement is planned it is
//! rewritten here into one that names every value:
//! - `INSERT`: VALUES rows shorter than the table fill its first columns (as in
//!   PostgreSQL); `DEFAULT` items and left-out columns get the column's default; a
//!   generated column gets its expression over the row's values and refuses any other.
//!   A query source that fills fewer columns is wrapped in a derived table whose
//!   columns are named after the ones it fills, so defaults and generated expressions
//!   can be added beside it.
//! - `UPDATE`: `(a, b) = (x, y)` becomes `a = x, b = y`; `a = DEFAULT` takes the
//!   default; generated columns whose inputs are assigned are assigned their expression
//!   over the new values.

use super::ddl::{ident_name, relation_name};
use super::sql_rewrite::{parse_expr, parse_query};
use crate::catalog::{Catalog, Column, Relation, RelationKind, SqlType};
use crate::error::{EddyError, Result, sqlstate};
use datafusion::sql::sqlparser::ast::{
    Assignment, AssignmentTarget, Expr, Ident, ObjectName, Query, SelectItem, SetExpr, Statement,
    TableAliasColumnDef, TableFactor, TableObject, Values, visit_expressions,
    visit_expressions_mut,
};
use std::ops::ControlFlow;

const SYNTAX_ERROR: &str = "42601";
const GENERATED_ALWAYS: &str = "428C9";
const INVALID_DEFINITION: &str = "42P17";
/// Alias of the derived table that holds an `INSERT`'s query source.
const SOURCE_ALIAS: &str = "__eddy_insert_source";

/// A `DEFAULT` expression may not read the row (PostgreSQL's rule).
pub fn check_default(column: &str, expr: &Expr) -> Result<()> {
    if let Some(name) = column_references(expr).into_iter().next() {
        return Err(EddyError::new(
            sqlstate::FEATURE_NOT_SUPPORTED,
            format!(
                "cannot use column reference \"{name}\" in DEFAULT expression of column \"{column}\""
            ),
        ));
    }
    Ok(())
}

/// A generated column's expression reads only the table's other, ordinary columns.
pub fn check_generated(columns: &[Column]) -> Result<()> {
    for column in columns {
        let Some(generated) = &column.generated else {
            continue;
        };
        for name in column_references(&parse_expr(generated)?) {
            match columns.iter().find(|c| c.name == name) {
                None => {
                    return Err(EddyError::new(
                        sqlstate::UNDEFINED_COLUMN,
                        format!("column \"{name}\" does not exist"),
                    ));
                }
                Some(c) if c.generated.is_some() => {
                    return Err(EddyError::new(
                        INVALID_DEFINITION,
                        format!(
                            "cannot use generated column \"{name}\" in column generation expression"
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}

/// The query of an `INSERT` without a column list whose width decides which columns it
/// fills: the caller plans it and passes its width to [`rewrite`].
pub fn source_to_measure(statement: &Statement, catalog: &Catalog) -> Option<Query> {
    let Statement::Insert(insert) = statement else {
        return None;
    };
    let source = insert.source.as_ref()?;
    if !insert.columns.is_empty() || matches!(source.body.as_ref(), SetExpr::Values(_)) {
        return None;
    }
    target_table(&insert.table, catalog)?;
    Some(source.as_ref().clone())
}

/// Rewrites an `INSERT` or `UPDATE` of a table so that every value it writes is spelled
/// out; `source_width` is the width of the query [`source_to_measure`] returned.
pub fn rewrite(
    statement: &mut Statement,
    catalog: &Catalog,
    source_width: Option<usize>,
) -> Result<()> {
    match statement {
        Statement::Insert(insert) => {
            let Some(table) = target_table(&insert.table, catalog) else {
                return Ok(());
            };
            let named: Vec<String> = insert.columns.iter().map(last_name).collect();
            let columns = if named.is_empty() { None } else { Some(named) };
            let filled = rewrite_insert(&table, columns, &mut insert.source, source_width)?;
            if let Some(filled) = filled {
                insert.columns = filled
                    .iter()
                    .map(|c| ObjectName::from(vec![Ident::with_quote('"', c.as_str())]))
                    .collect();
            }
            Ok(())
        }
        Statement::Update(update) => {
            let TableFactor::Table { name, .. } = &update.table.relation else {
                return Ok(());
            };
            let Some(table) = relation_name(name)
                .ok()
                .and_then(|n| catalog.get(&n))
                .filter(|r| r.kind == RelationKind::Table)
            else {
                return Ok(());
            };
            update.assignments =
                rewrite_assignments(&table, std::mem::take(&mut update.assignments))?;
            Ok(())
        }
        _ => Ok(()),
    }
}

fn target_table(table: &TableObject, catalog: &Catalog) -> Option<Relation> {
    let TableObject::TableName(name) = table else {
        return None;
    };
    catalog
        .get(&relation_name(name).ok()?)
        .filter(|r| r.kind == RelationKind::Table)
}

/// The columns the rewritten `INSERT` names, or `None` when it needs no change.
fn rewrite_insert(
    table: &Relation,
    named: Option<Vec<String>>,
    source: &mut Option<Box<Query>>,
    source_width: Option<usize>,
) -> Result<Option<Vec<String>>> {
    let all: Vec<&Column> = table.columns.iter().filter(|c| !c.hidden).collect();
    let needs_values = all
        .iter()
        .any(|c| c.default.is_some() || c.generated.is_some());
    let targets: Vec<&Column> = match &named {
        Some(names) => names
            .iter()
            .map(|n| {
                all.iter().copied().find(|c| &c.name == n).ok_or_else(|| {
                    EddyError::new(
                        sqlstate::UNDEFINED_COLUMN,
                        format!(
                            "column \"{n}\" of relation \"{}\" does not exist",
                            table.name
                        ),
                    )
                })
            })
            .collect::<Result<_>>()?,
        None => all.clone(),
    };
    let Some(query) = source else {
        // INSERT ... DEFAULT VALUES: one row of defaults.
        let row: Vec<Expr> = all.iter().map(|c| default_of(c)).collect::<Result<_>>()?;
        let mut values = parse_query("VALUES (NULL)")?;
        if let SetExpr::Values(v) = values.body.as_mut() {
            v.rows[0].content = row;
        }
        *source = Some(Box::new(values));
        return finish_values(table, &all, &all, source);
    };
    if let SetExpr::Values(values) = query.body.as_mut() {
        let width = values.rows.first().map_or(0, |r| r.content.len());
        if values.rows.iter().any(|r| r.content.len() != width) {
            return Err(EddyError::new(
                SYNTAX_ERROR,
                "VALUES lists must all be the same length",
            ));
        }
        let targets = fitted_targets(&targets, width, named.is_some())?;
        let has_default_items = values
            .rows
            .iter()
            .any(|r| r.content.iter().any(is_default_keyword));
        if !needs_values && !has_default_items && targets.len() == all.len() {
            return Ok(None);
        }
        for row in values.rows.iter_mut() {
            for (value, column) in row.content.iter_mut().zip(&targets) {
                if is_default_keyword(value) {
                    *value = default_of(column)?;
                } else if column.generated.is_some() {
                    return Err(cannot_write_generated(&column.name));
                }
            }
        }
        return finish_values(table, &all, &targets, source);
    }
    let width = match (&named, source_width) {
        (Some(names), _) => names.len(),
        (None, Some(width)) => width,
        (None, None) => return Ok(None),
    };
    if named.is_none() && width == all.len() && !needs_values {
        return Ok(None);
    }
    let targets = fitted_targets(&targets, width, named.is_some())?;
    if let Some(generated) = targets.iter().find(|c| c.generated.is_some()) {
        return Err(cannot_write_generated(&generated.name));
    }
    // SELECT *, <the other columns' values> FROM (<query>) AS source(<targets>)
    let mut wrapper = parse_query(&format!("SELECT * FROM (SELECT 1) AS {SOURCE_ALIAS}(x)"))?;
    let SetExpr::Select(select) = wrapper.body.as_mut() else {
        unreachable!("parsed a SELECT");
    };
    if let TableFactor::Derived {
        subquery, alias, ..
    } = &mut select.from[0].relation
    {
        *subquery = source.take().expect("a query source");
        if let Some(alias) = alias {
            alias.columns = targets
                .iter()
                .map(|c| TableAliasColumnDef {
                    name: Ident::with_quote('"', c.name.as_str()),
                    data_type: None,
                })
                .collect();
        }
    }
    let mut filled: Vec<String> = targets.iter().map(|c| c.name.clone()).collect();
    let left_out: Vec<&Column> = all
        .iter()
        .copied()
        .filter(|c| !filled.contains(&c.name))
        .collect();
    for column in left_out {
        let value = match &column.generated {
            Some(expression) => {
                generated_value(column, expression, |name| {
                    if let Some(target) = targets.iter().find(|t| t.name == name) {
                        // The source's column of that name.
                        let read = Expr::Identifier(Ident::with_quote('"', name));
                        cast_to(read, target).map(Some)
                    } else {
                        all.iter()
                            .find(|c| c.name == name)
                            .map(|c| default_of(c).map(Some))
                            .unwrap_or(Ok(None))
                    }
                })?
            }
            None if column.default.is_some() => default_of(column)?,
            None => continue,
        };
        select.projection.push(SelectItem::UnnamedExpr(value));
        filled.push(column.name.clone());
    }
    *source = Some(Box::new(wrapper));
    Ok(Some(filled))
}

/// The columns `width` values fill: the named ones (exactly as many), or the table's
/// first `width` columns.
fn fitted_targets<'a>(
    targets: &[&'a Column],
    width: usize,
    named: bool,
) -> Result<Vec<&'a Column>> {
    if width > targets.len() {
        return Err(EddyError::new(
            SYNTAX_ERROR,
            "INSERT has more expressions than target columns",
        ));
    }
    if named && width < targets.len() {
        return Err(EddyError::new(
            SYNTAX_ERROR,
            "INSERT has more target columns than expressions",
        ));
    }
    Ok(targets[..width].to_vec())
}

/// Appends to each VALUES row the defaults of the columns it leaves out and the generated
/// columns' values; returns the columns the rows now fill.
fn finish_values(
    _table: &Relation,
    all: &[&Column],
    targets: &[&Column],
    source: &mut Option<Box<Query>>,
) -> Result<Option<Vec<String>>> {
    let Some(SetExpr::Values(Values { rows, .. })) = source.as_mut().map(|q| q.body.as_mut())
    else {
        return Ok(None);
    };
    let mut filled: Vec<String> = targets
        .iter()
        .filter(|c| c.generated.is_none())
        .map(|c| c.name.clone())
        .collect();
    let left_out: Vec<&Column> = all
        .iter()
        .copied()
        .filter(|c| c.generated.is_none() && !filled.contains(&c.name) && c.default.is_some())
        .collect();
    let generated: Vec<&Column> = all
        .iter()
        .copied()
        .filter(|c| c.generated.is_some())
        .collect();
    for row in rows.iter_mut() {
        // The row's value of each ordinary column, by name, for the generated ones.
        let mut by_name: Vec<(String, Expr)> = Vec::new();
        let mut kept = Vec::with_capacity(all.len());
        for (value, column) in std::mem::take(&mut row.content).into_iter().zip(targets) {
            if column.generated.is_none() {
                by_name.push((column.name.clone(), cast_to(value.clone(), column)?));
                kept.push(value);
            }
        }
        for column in &left_out {
            let value = default_of(column)?;
            by_name.push((column.name.clone(), value.clone()));
            kept.push(value);
        }
        for column in &generated {
            let expression = column.generated.as_deref().unwrap_or("NULL");
            kept.push(generated_value(column, expression, |name| {
                match by_name.iter().find(|(n, _)| n == name) {
                    Some((_, value)) => Ok(Some(value.clone())),
                    // A column the row leaves NULL, typed as the column is.
                    None => match all.iter().find(|c| c.name == name) {
                        Some(c) => cast_to(null(), c).map(Some),
                        None => Ok(Some(null())),
                    },
                }
            })?);
        }
        row.content = kept;
    }
    filled.extend(left_out.iter().map(|c| c.name.clone()));
    filled.extend(generated.iter().map(|c| c.name.clone()));
    Ok(Some(filled))
}

fn rewrite_assignments(table: &Relation, assignments: Vec<Assignment>) -> Result<Vec<Assignment>> {
    let mut out: Vec<Assignment> = Vec::with_capacity(assignments.len());
    for assignment in assignments {
        match assignment.target {
            AssignmentTarget::ColumnName(name) => out.push(Assignment {
                target: AssignmentTarget::ColumnName(name),
                value: assignment.value,
            }),
            AssignmentTarget::Tuple(names) => {
                let values = match assignment.value {
                    Expr::Tuple(values) => values,
                    Expr::Nested(value) if names.len() == 1 => vec![*value],
                    // ROW(x, y), which the parse pass made `named_struct('f1', x, 'f2', y)`.
                    Expr::Function(f)
                        if f.name.to_string().eq_ignore_ascii_case("named_struct") =>
                    {
                        function_arguments(&f)?
                            .into_iter()
                            .skip(1)
                            .step_by(2)
                            .collect()
                    }
                    // (a, b) = (SELECT x, y ...): one scalar subquery per column.
                    Expr::Subquery(query) => (0..names.len())
                        .map(|i| row_subquery_column(&query, names.len(), i))
                        .collect::<Result<_>>()?,
                    _ => {
                        return Err(EddyError::new(
                            SYNTAX_ERROR,
                            "source for a multiple-column UPDATE item must be a sub-SELECT or ROW() expression",
                        ));
                    }
                };
                if values.len() != names.len() {
                    return Err(EddyError::new(
                        SYNTAX_ERROR,
                        "number of columns does not match number of values",
                    ));
                }
                if values.iter().any(is_default_keyword) {
                    // RisingWave refuses it too.
                    return Err(EddyError::not_supported(
                        "DEFAULT in a multiple-column assignment is not supported",
                    ));
                }
                out.extend(
                    names
                        .into_iter()
                        .zip(values)
                        .map(|(name, value)| Assignment {
                            target: AssignmentTarget::ColumnName(name),
                            value,
                        }),
                );
            }
        }
    }
    let mut assigned_names: Vec<String> = Vec::new();
    for assignment in &out {
        if let AssignmentTarget::ColumnName(name) = &assignment.target {
            let name = last_name(name);
            if assigned_names.contains(&name) {
                return Err(EddyError::new(
                    SYNTAX_ERROR,
                    format!("multiple assignments to the same column \"{name}\""),
                ));
            }
            assigned_names.push(name);
        }
    }
    let column_of = |a: &Assignment| match &a.target {
        AssignmentTarget::ColumnName(name) => {
            let name = last_name(name);
            table.columns.iter().find(|c| c.name == name)
        }
        AssignmentTarget::Tuple(_) => None,
    };
    for assignment in out.iter_mut() {
        let Some(column) = column_of(assignment) else {
            continue;
        };
        if is_default_keyword(&assignment.value) {
            assignment.value = default_of(column)?;
        } else if column.generated.is_some() {
            return Err(EddyError::new(
                GENERATED_ALWAYS,
                format!("column \"{}\" can only be updated to DEFAULT", column.name),
            ));
        }
    }
    // Generated columns: dropped where written as DEFAULT, recomputed where an input changes.
    out.retain(|a| column_of(a).is_none_or(|c| c.generated.is_none()));
    let assigned: Vec<(String, Expr)> = out
        .iter()
        .filter_map(|a| column_of(a).map(|c| Ok((c.name.clone(), cast_to(a.value.clone(), c)?))))
        .collect::<Result<_>>()?;
    for column in table.columns.iter() {
        let Some(expression) = &column.generated else {
            continue;
        };
        let inputs = column_references(&parse_expr(expression)?);
        if !inputs.iter().any(|i| assigned.iter().any(|(n, _)| n == i)) {
            continue;
        }
        let value = generated_value(column, expression, |name| {
            Ok(assigned
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone()))
        })?;
        out.push(Assignment {
            target: AssignmentTarget::ColumnName(ObjectName::from(vec![Ident::with_quote(
                '"',
                column.name.as_str(),
            )])),
            value,
        });
    }
    Ok(out)
}

/// Column `i` of a row subquery with `width` columns, as a scalar subquery:
/// `(SELECT c<i> FROM (<query>) AS row(c0, c1, ...))`.
fn row_subquery_column(query: &Query, width: usize, i: usize) -> Result<Expr> {
    let names: Vec<String> = (0..width).map(|c| format!("__eddy_c{c}")).collect();
    let mut column = parse_query(&format!(
        "SELECT \"__eddy_c{i}\" FROM (SELECT 1) AS __eddy_row({})",
        names
            .iter()
            .map(|n| format!("\"{n}\""))
            .collect::<Vec<_>>()
            .join(", ")
    ))?;
    if let SetExpr::Select(select) = column.body.as_mut()
        && let TableFactor::Derived { subquery, .. } = &mut select.from[0].relation
    {
        **subquery = query.clone();
    }
    Ok(Expr::Subquery(Box::new(column)))
}

/// The plain arguments of a function call.
fn function_arguments(f: &datafusion::sql::sqlparser::ast::Function) -> Result<Vec<Expr>> {
    use datafusion::sql::sqlparser::ast::{FunctionArg, FunctionArgExpr, FunctionArguments};
    let FunctionArguments::List(list) = &f.args else {
        return Ok(vec![]);
    };
    list.args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Ok(e.clone()),
            other => Err(EddyError::syntax(format!("unexpected ROW() item {other}"))),
        })
        .collect()
}

/// A generated column's expression with each column it reads replaced by `value_of`'s
/// expression for it (already cast to that column's type), or left as a column reference when
/// `value_of` gives none; cast to the generated column's type.
fn generated_value(
    column: &Column,
    expression: &str,
    value_of: impl Fn(&str) -> Result<Option<Expr>>,
) -> Result<Expr> {
    let mut expr = processing_time_as_now(parse_expr(expression)?);
    let mut failure = None;
    let _ = visit_expressions_mut(&mut expr, |e| {
        if let Some(name) = referenced_column(e) {
            match value_of(&name) {
                Ok(Some(value)) => *e = Expr::Nested(Box::new(value)),
                Ok(None) => {}
                Err(err) => {
                    failure = Some(err);
                    return ControlFlow::Break(());
                }
            }
        }
        ControlFlow::Continue(())
    });
    if let Some(err) = failure {
        return Err(err);
    }
    cast_to(expr, column)
}

/// The column's default (NULL without one), cast to its type.
pub(super) fn default_of(column: &Column) -> Result<Expr> {
    match (&column.default, &column.generated) {
        (Some(default), _) => cast_to(processing_time_as_now(parse_expr(default)?), column),
        // A generated column written as DEFAULT is computed after.
        _ => cast_to(null(), column),
    }
}

/// `proctime()` in a default or a generated column (RisingWave's spelling) is the
/// statement's time, `now()`.
fn processing_time_as_now(mut expr: Expr) -> Expr {
    let _ = visit_expressions_mut(&mut expr, |e| {
        if let Expr::Function(f) = e
            && f.name.to_string().eq_ignore_ascii_case("proctime")
        {
            f.name = ObjectName::from(vec![Ident::new("now")]);
        }
        ControlFlow::<()>::Continue(())
    });
    expr
}

/// Casts to the column's type where DataFusion spells the type as Eddy stores it; other
/// values are left to the cast DataFusion's INSERT and UPDATE make to the column's type.
fn cast_to(expr: Expr, column: &Column) -> Result<Expr> {
    let type_name = match &column.sql_type {
        SqlType::Boolean => "boolean".to_string(),
        SqlType::SmallInt => "smallint".to_string(),
        SqlType::Int => "int".to_string(),
        SqlType::BigInt => "bigint".to_string(),
        SqlType::Real => "real".to_string(),
        SqlType::Double => "double".to_string(),
        SqlType::Numeric {
            precision: Some(p),
            scale,
        } => format!("numeric({p},{})", scale.unwrap_or(0)),
        SqlType::Varchar(_) | SqlType::Text => "varchar".to_string(),
        SqlType::Date => "date".to_string(),
        SqlType::Time => "time".to_string(),
        SqlType::Timestamp => "timestamp".to_string(),
        SqlType::Interval => "interval".to_string(),
        _ => return Ok(expr),
    };
    let mut cast = parse_expr(&format!("CAST(NULL AS {type_name})"))?;
    if let Expr::Cast { expr: inner, .. } = &mut cast {
        **inner = Expr::Nested(Box::new(expr));
    }
    Ok(cast)
}

fn cannot_write_generated(column: &str) -> EddyError {
    EddyError::new(
        GENERATED_ALWAYS,
        format!(
            "cannot insert a non-DEFAULT value into column \"{column}\": it is a generated column"
        ),
    )
}

fn is_default_keyword(expr: &Expr) -> bool {
    matches!(expr, Expr::Identifier(i) if i.quote_style.is_none() && i.value.eq_ignore_ascii_case("default"))
}

fn referenced_column(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Identifier(i) => Some(ident_name(i)),
        Expr::CompoundIdentifier(parts) => parts.last().map(ident_name),
        _ => None,
    }
}

/// The columns an expression reads (identifiers, including those in subqueries).
fn column_references(expr: &Expr) -> Vec<String> {
    let mut names = Vec::new();
    let _ = visit_expressions(expr, |e| {
        if let Some(name) = referenced_column(e)
            && !names.contains(&name)
        {
            names.push(name);
        }
        ControlFlow::<()>::Continue(())
    });
    names
}

fn last_name(name: &ObjectName) -> String {
    name.0
        .last()
        .and_then(|p| p.as_ident())
        .map(ident_name)
        .unwrap_or_default()
}

fn null() -> Expr {
    Expr::value(datafusion::sql::sqlparser::ast::Value::Null)
}
