//! `UPDATE ... FROM`, `DELETE ... USING`, and `UPDATE`/`DELETE` with correlated
//! subqueries: statements whose rows (and new values) depend on other relations.
//!
//! DataFusion hands a table's `UPDATE` and `DELETE` only the filters and assignments
//! that read the table alone, so such a statement would change the wrong rows. Instead it
//! runs as the query it is: the target table is read with each row's storage key
//! ([`KeyedScan`]), DataFusion finds the rows (joining, decorrelating subqueries) and,
//! for an `UPDATE`, their new values; then exactly those rows are changed by key. A row
//! that several rows of the other relations match is changed once, with the values of
//! the first match (PostgreSQL leaves which one unspecified).
//!
//! `DELETE FROM t USING s WHERE cond` is written as
//! `DELETE FROM t WHERE EXISTS (SELECT 1 FROM s WHERE cond)` before planning, since
//! DataFusion's planner has no `USING`.

use super::dml_subqueries::subquery_of;
use crate::error::{EddyError, Result};
use crate::serving::keyed_scan::KeyedScan;
use crate::serving::stored_table::ROW_KEY_COLUMN;
use arrow::array::{Array, BinaryArray, RecordBatch, UInt32Array};
use datafusion::common::Column;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::datasource::{provider_as_source, source_as_provider};
use datafusion::execution::SessionState;
use datafusion::logical_expr::{
    DmlStatement, Expr, LogicalPlan, LogicalPlanBuilder, Projection, WriteOp,
};
use datafusion::sql::sqlparser::ast::{
    self, Delete, FromTable, Ident, SetExpr, Statement, TableFactor,
};
use std::collections::HashSet;
use std::sync::Arc;

/// Whether a planned `UPDATE` or `DELETE` reads other relations row by row: a join
/// (`UPDATE ... FROM`) or a correlated subquery.
pub(super) fn applies(plan: &LogicalPlan) -> bool {
    let LogicalPlan::Dml(dml) = plan else {
        return false;
    };
    if !matches!(dml.op, WriteOp::Update | WriteOp::Delete) {
        return false;
    }
    let mut found = false;
    let _ = dml.input.apply(|node| {
        if matches!(node, LogicalPlan::Join(_)) {
            found = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        node.apply_expressions(|e| {
            e.apply(|e| {
                if subquery_of(e).is_some_and(|s| !s.outer_ref_columns.is_empty()) {
                    found = true;
                    return Ok(TreeNodeRecursion::Stop);
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
    found
}

/// Runs such an `UPDATE` or `DELETE`; returns how many rows it changed.
pub(super) async fn execute(plan: LogicalPlan, state: SessionState) -> Result<u64> {
    let LogicalPlan::Dml(dml) = plan else {
        return Err(EddyError::internal("not an UPDATE or DELETE"));
    };
    let provider = source_as_provider(&dml.target)?;
    let keyed = Arc::new(KeyedScan::of(provider).ok_or_else(|| {
        EddyError::not_supported(format!(
            "this UPDATE or DELETE of \"{}\" is not supported",
            dml.table_name
        ))
    })?);
    keyed.table().check_changeable()?;
    let query = keyed_query(&dml, keyed.clone())?;
    let batches = datafusion::dataframe::DataFrame::new(state.clone(), query)
        .collect()
        .await?;
    let width = keyed.table().keyed_schema().fields().len() - 1;
    let mut seen: HashSet<Vec<u8>> = HashSet::new();
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let mut rows: Vec<RecordBatch> = Vec::new();
    for batch in &batches {
        let key_column = batch
            .column(batch.num_columns() - 1)
            .as_any()
            .downcast_ref::<BinaryArray>()
            .ok_or_else(|| EddyError::internal("the row key column is not binary"))?;
        let mut first_matches = Vec::new();
        for row in 0..key_column.len() {
            let key = key_column.value(row);
            if seen.insert(key.to_vec()) {
                keys.push(key.to_vec());
                first_matches.push(row as u32);
            }
        }
        if dml.op == WriteOp::Update && !first_matches.is_empty() {
            let values = batch.project(&(0..width).collect::<Vec<_>>())?;
            rows.push(arrow::compute::take_record_batch(
                &values,
                &UInt32Array::from(first_matches),
            )?);
        }
    }
    if keys.is_empty() {
        return Ok(0);
    }
    let table = keyed.table();
    let changed = match dml.op {
        WriteOp::Update => {
            let new = arrow::compute::concat_batches(&rows[0].schema(), &rows)?;
            table.change_rows(&state, &keys, Some(&new))?
        }
        _ => table.change_rows(&state, &keys, None)?,
    };
    Ok(changed)
}

/// The statement's input with the target read through `keyed`, selecting (after the new
/// values of an `UPDATE`) the key of the target's row.
fn keyed_query(dml: &DmlStatement, keyed: Arc<KeyedScan>) -> Result<LogicalPlan> {
    let target = dml.table_name.clone();
    let source = provider_as_source(keyed);
    let input = dml
        .input
        .as_ref()
        .clone()
        .transform_up(|node| match node {
            LogicalPlan::TableScan(scan) if scan.table_name.resolved_eq(&target) => {
                let scan =
                    LogicalPlanBuilder::scan(scan.table_name, source.clone(), None)?.build()?;
                Ok(Transformed::yes(scan))
            }
            other => Ok(Transformed::yes(other.recompute_schema()?)),
        })?
        .data;
    // The target comes first in the statement's FROM: the first key column is its own.
    let key_of = |plan: &LogicalPlan| -> Result<Expr> {
        plan.schema()
            .iter()
            .find(|(_, field)| field.name() == ROW_KEY_COLUMN)
            .map(|(qualifier, field)| Expr::Column(Column::from((qualifier, field))))
            .ok_or_else(|| EddyError::internal("the target's row key is not read"))
    };
    Ok(match (&dml.op, input) {
        (WriteOp::Update, LogicalPlan::Projection(projection)) => {
            let mut exprs = projection.expr;
            exprs.push(key_of(&projection.input)?);
            LogicalPlan::Projection(Projection::try_new(exprs, projection.input)?)
        }
        (WriteOp::Delete, input) => {
            let key = key_of(&input)?;
            LogicalPlanBuilder::from(input)
                .project(vec![key])?
                .build()?
        }
        _ => return Err(EddyError::internal("unexpected UPDATE plan")),
    })
}

/// Plans `UPDATE t [AS a] SET c = e, ... FROM s, ... WHERE cond` (which DataFusion's
/// planner refuses) as the `UPDATE` DataFusion would plan: its input is
/// `SELECT <each column of t: its new value, or a.c> FROM t [AS a], s, ... WHERE cond`.
/// `None` for other statements.
pub(super) async fn plan_update_from(
    statement: &Statement,
    state: &SessionState,
) -> Result<Option<LogicalPlan>> {
    let Statement::Update(update) = statement else {
        return Ok(None);
    };
    let Some(from) = &update.from else {
        return Ok(None);
    };
    let from = match from {
        ast::UpdateTableFromKind::BeforeSet(f) | ast::UpdateTableFromKind::AfterSet(f) => f,
    };
    if !update.table.joins.is_empty() {
        return Err(EddyError::not_supported(
            "UPDATE of a join is not supported; name the other relations in FROM",
        ));
    }
    let TableFactor::Table { name, alias, .. } = &update.table.relation else {
        return Err(EddyError::not_supported("UPDATE needs a table to change"));
    };
    let table_ref =
        datafusion::common::TableReference::from(super::ddl::relation_name(name)?.as_str());
    let provider = state
        .schema_for_ref(table_ref.clone())?
        .table(table_ref.table())
        .await?
        .ok_or_else(|| EddyError::undefined_table(&table_ref.to_string()))?;
    // Unchanged columns are read under the alias, or the name as written.
    let qualifier: Vec<Ident> = match alias {
        Some(alias) => vec![alias.name.clone()],
        None => name
            .0
            .iter()
            .filter_map(|p| p.as_ident().cloned())
            .collect(),
    };
    let mut assigned: Vec<(String, ast::Expr)> = Vec::new();
    for assignment in &update.assignments {
        let ast::AssignmentTarget::ColumnName(column) = &assignment.target else {
            return Err(EddyError::not_supported(
                "a multiple-column assignment in UPDATE ... FROM is not supported",
            ));
        };
        let column = column
            .0
            .last()
            .and_then(|p| p.as_ident())
            .map(super::ddl::ident_name)
            .ok_or_else(|| EddyError::syntax("a column name is needed"))?;
        assigned.push((column, assignment.value.clone()));
    }
    let schema = provider.schema();
    for (column, _) in &assigned {
        if schema.field_with_name(column).is_err() {
            return Err(EddyError::new(
                crate::error::sqlstate::UNDEFINED_COLUMN,
                format!(
                    "column \"{column}\" of relation \"{}\" does not exist",
                    table_ref.table()
                ),
            ));
        }
    }
    let projection = schema
        .fields()
        .iter()
        .map(|field| {
            let value = match assigned.iter().find(|(c, _)| c == field.name()) {
                Some((_, value)) => value.clone(),
                None => {
                    let mut parts = qualifier.clone();
                    parts.push(Ident::with_quote('"', field.name()));
                    ast::Expr::CompoundIdentifier(parts)
                }
            };
            ast::SelectItem::ExprWithAlias {
                expr: value,
                alias: Ident::with_quote('"', field.name()),
            }
        })
        .collect();
    let mut query = super::sql_rewrite::parse_query("SELECT 1")?;
    let SetExpr::Select(select) = query.body.as_mut() else {
        return Err(EddyError::internal("SELECT 1 parses as a SELECT"));
    };
    select.projection = projection;
    select.from = std::iter::once(update.table.clone())
        .chain(from.iter().cloned())
        .collect();
    select.selection = update.selection.clone();
    let input = state
        .statement_to_plan(datafusion::sql::parser::Statement::Statement(Box::new(
            Statement::Query(Box::new(query)),
        )))
        .await?;
    let input = type_placeholders(input, &schema)?;
    Ok(Some(LogicalPlan::Dml(DmlStatement::new(
        table_ref,
        provider_as_source(provider),
        WriteOp::Update,
        Arc::new(input),
    ))))
}

/// A parameter assigned to a column (`SET c = $1`) takes the column's type, as in
/// DataFusion's own `UPDATE`.
fn type_placeholders(
    input: LogicalPlan,
    schema: &arrow::datatypes::SchemaRef,
) -> Result<LogicalPlan> {
    let LogicalPlan::Projection(projection) = input else {
        return Ok(input);
    };
    let exprs = projection
        .expr
        .into_iter()
        .zip(schema.fields())
        .map(|(expr, field)| match expr {
            Expr::Alias(mut alias) => {
                if let Expr::Placeholder(placeholder) = alias.expr.as_mut()
                    && placeholder.field.is_none()
                {
                    placeholder.field = Some(field.clone());
                }
                Expr::Alias(alias)
            }
            other => other,
        })
        .collect();
    Ok(LogicalPlan::Projection(Projection::try_new(
        exprs,
        projection.input,
    )?))
}

/// Writes `DELETE FROM t USING s, ... WHERE cond` as
/// `DELETE FROM t WHERE EXISTS (SELECT 1 FROM s, ... WHERE cond)`; an alias of `t` is
/// dropped and its references renamed to `t`.
pub(super) fn rewrite_delete_using(statement: &mut Statement) -> Result<()> {
    let Statement::Delete(Delete {
        from,
        using,
        selection,
        ..
    }) = statement
    else {
        return Ok(());
    };
    let Some(using) = using.take() else {
        return Ok(());
    };
    let tables = match from {
        FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
    };
    let [target] = tables.as_mut_slice() else {
        return Err(EddyError::not_supported(
            "DELETE from several tables is not supported",
        ));
    };
    let TableFactor::Table { name, alias, .. } = &mut target.relation else {
        return Err(EddyError::not_supported(
            "DELETE ... USING needs a table to delete from",
        ));
    };
    let table_ident = name
        .0
        .last()
        .and_then(|part| part.as_ident())
        .cloned()
        .ok_or_else(|| EddyError::syntax("a table name is needed"))?;
    let mut condition = selection.take();
    if let Some(alias) = alias.take()
        && let Some(condition) = condition.as_mut()
    {
        rename_qualifier(condition, &alias.name, &table_ident);
    }
    let mut subquery = super::sql_rewrite::parse_query("SELECT 1")?;
    if let SetExpr::Select(select) = subquery.body.as_mut() {
        select.from = using;
        select.selection = condition;
    }
    *selection = Some(ast::Expr::Exists {
        subquery: Box::new(subquery),
        negated: false,
    });
    Ok(())
}

/// Renames `alias.column` to `table.column` throughout an expression.
fn rename_qualifier(expr: &mut ast::Expr, alias: &Ident, table: &Ident) {
    let same = |a: &Ident| match alias.quote_style {
        Some(_) => a.value == alias.value,
        None => a.value.eq_ignore_ascii_case(&alias.value),
    };
    let _ = ast::visit_expressions_mut(expr, |e| {
        if let ast::Expr::CompoundIdentifier(parts) = e
            && parts.len() == 2
            && same(&parts[0])
        {
            parts[0] = table.clone();
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn rewritten(sql: &str) -> String {
        let mut statement = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .remove(0);
        rewrite_delete_using(&mut statement).unwrap();
        statement.to_string()
    }

    #[test]
    fn delete_using_becomes_an_exists_over_the_using_relations() {
        assert_eq!(
            rewritten("DELETE FROM t USING s, u WHERE s.k = t.k AND u.k = s.k"),
            "DELETE FROM t WHERE EXISTS (SELECT 1 FROM s, u WHERE s.k = t.k AND u.k = s.k)"
        );
        assert_eq!(
            rewritten("DELETE FROM t USING s"),
            "DELETE FROM t WHERE EXISTS (SELECT 1 FROM s)"
        );
    }

    #[test]
    fn the_targets_alias_is_replaced_by_its_name() {
        assert_eq!(
            rewritten("DELETE FROM t AS a USING s WHERE s.k = A.k AND a.v > 1"),
            "DELETE FROM t WHERE EXISTS (SELECT 1 FROM s WHERE s.k = t.k AND t.v > 1)"
        );
    }

    #[test]
    fn other_deletes_are_left_alone() {
        assert_eq!(
            rewritten("DELETE FROM t WHERE k = 1"),
            "DELETE FROM t WHERE k = 1"
        );
    }
}
