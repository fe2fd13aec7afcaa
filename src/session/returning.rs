//! `INSERT | UPDATE | DELETE ... RETURNING items`, which DataFusion does not plan.
//!
//! The statement runs without its `RETURNING` clause, and the clause is evaluated over
//! the rows the statement wrote: for an `INSERT` the rows its source produced (computed
//! once, then inserted from memory), for an `UPDATE` the changed rows' new values and for
//! a `DELETE` the deleted rows, both read just before the change with the statement's
//! own `WHERE`.

use super::sql_rewrite::parse_query;
use super::{Outcome, Session, column_values, ddl::relation_name};
use crate::catalog::RelationKind;
use crate::error::{EddyError, Result};
use arrow::datatypes::SchemaRef;
use datafusion::catalog::MemTable;
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::datasource::provider_as_source;
use datafusion::logical_expr::{DmlStatement, LogicalPlan, LogicalPlanBuilder};
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{
    AssignmentTarget, Expr, FromTable, Ident, SelectItem, SetExpr, Statement, TableFactor,
    TableObject,
};
use std::sync::Arc;

/// Whether the statement has a `RETURNING` clause.
pub(super) fn has_returning(statement: &Statement) -> bool {
    match statement {
        Statement::Insert(i) => i.returning.is_some(),
        Statement::Update(u) => u.returning.is_some(),
        Statement::Delete(d) => d.returning.is_some(),
        _ => false,
    }
}

/// The statement's parameter types and result columns, for the extended protocol's
/// Describe; nothing is written.
pub(super) async fn describe(
    session: &Session,
    statement: &Statement,
) -> Result<(Vec<Option<arrow::datatypes::DataType>>, SchemaRef)> {
    let (change, items, table) = split(statement)?;
    let plan = session.plan(change).await?;
    let mut param_types = Vec::new();
    for (name, ty) in plan.get_parameter_types()? {
        if let Some(idx) = name.strip_prefix('$').and_then(|n| n.parse::<usize>().ok())
            && idx >= 1
        {
            if idx > param_types.len() {
                param_types.resize(idx, None);
            }
            param_types[idx - 1] = ty;
        }
    }
    let schema = table_schema(session, &table)?;
    let empty = arrow::array::RecordBatch::new_empty(schema);
    match evaluate(session, &table, &items, vec![empty]).await? {
        Outcome::Rows { schema, .. } => Ok((param_types, schema)),
        _ => unreachable!("RETURNING gives rows"),
    }
}

/// Runs the statement and returns what its `RETURNING` clause selects from the rows it
/// wrote.
pub(super) async fn execute(
    session: &Session,
    statement: Statement,
    params: Vec<ScalarValue>,
) -> Result<Outcome> {
    let (change, items, table) = split(&statement)?;
    // A RETURNING clause that cannot be evaluated fails the statement before it writes.
    let empty = arrow::array::RecordBatch::new_empty(table_schema(session, &table)?);
    evaluate(session, &table, &items, vec![empty]).await?;
    let bind = |plan: LogicalPlan| -> Result<LogicalPlan> {
        if params.is_empty() {
            Ok(plan)
        } else {
            Ok(plan.with_param_values(ParamValues::from(params.clone()))?)
        }
    };
    let (written, outcome) = match &change {
        Statement::Insert(_) => {
            let LogicalPlan::Dml(dml) = bind(session.plan(change.clone()).await?)? else {
                return Err(EddyError::internal("an INSERT plans as DML"));
            };
            // The rows once, then inserted from memory: the RETURNING clause sees exactly
            // what was written (`now()`, `random()` and defaults included).
            let rows = collect(session, dml.input.as_ref().clone()).await?;
            let schema = dml.input.schema().inner().clone();
            let source = MemTable::try_new(schema, vec![rows.clone()])?;
            let input = LogicalPlanBuilder::scan(
                "__eddy_inserted_rows",
                provider_as_source(Arc::new(source)),
                None,
            )?
            .build()?;
            let insert = LogicalPlan::Dml(DmlStatement::new(
                dml.table_name.clone(),
                dml.target.clone(),
                dml.op.clone(),
                Arc::new(input),
            ));
            (rows, session.run_plan(insert).await?)
        }
        _ => {
            let before = rows_query(session, &change, &table)?;
            let rows = collect(session, bind(session.plan(before).await?)?).await?;
            let outcome = session.run_plan(bind(session.plan(change).await?)?).await?;
            (rows, outcome)
        }
    };
    let Outcome::Command(_) = outcome else {
        return Err(EddyError::internal("a data change gives a command tag"));
    };
    evaluate(session, &table, &items, written).await
}

/// The statement without its `RETURNING` clause, the clause, and the table's name.
fn split(statement: &Statement) -> Result<(Statement, Vec<SelectItem>, String)> {
    let mut change = statement.clone();
    let (items, table) = match &mut change {
        Statement::Insert(insert) => {
            let TableObject::TableName(name) = &insert.table else {
                return Err(EddyError::not_supported(
                    "INSERT ... RETURNING into a table function",
                ));
            };
            (insert.returning.take(), relation_name(name)?)
        }
        Statement::Update(update) => {
            if update.from.is_some() {
                return Err(EddyError::not_supported(
                    "UPDATE ... FROM ... RETURNING is not supported",
                ));
            }
            (update.returning.take(), table_name(&update.table.relation)?)
        }
        Statement::Delete(delete) => {
            if delete.using.is_some() {
                return Err(EddyError::not_supported(
                    "DELETE ... USING ... RETURNING is not supported",
                ));
            }
            let (FromTable::WithFromKeyword(from) | FromTable::WithoutKeyword(from)) = &delete.from;
            let [table] = from.as_slice() else {
                return Err(EddyError::not_supported(
                    "DELETE ... RETURNING from several tables is not supported",
                ));
            };
            (delete.returning.take(), table_name(&table.relation)?)
        }
        _ => {
            return Err(EddyError::internal(
                "RETURNING on a statement that is no DML",
            ));
        }
    };
    Ok((change, items.unwrap_or_default(), table))
}

fn table_name(relation: &TableFactor) -> Result<String> {
    match relation {
        TableFactor::Table { name, .. } => relation_name(name),
        other => Err(EddyError::not_supported(format!(
            "RETURNING from {other} is not supported"
        ))),
    }
}

fn table_schema(session: &Session, table: &str) -> Result<SchemaRef> {
    let relation = session
        .engine
        .catalog
        .get(table)
        .filter(|r| r.kind == RelationKind::Table)
        .ok_or_else(|| EddyError::undefined_table(table))?;
    Ok(relation.arrow_schema())
}

/// `SELECT <each column's value after the change> FROM t WHERE <the statement's filter>`:
/// the rows an `UPDATE` writes (its assignments applied, generated columns recomputed)
/// or a `DELETE` removes.
fn rows_query(session: &Session, change: &Statement, table: &str) -> Result<Statement> {
    let relation = session
        .engine
        .catalog
        .get(table)
        .ok_or_else(|| EddyError::undefined_table(table))?;
    let (relation_factor, selection, assignments) = match change {
        Statement::Update(update) => {
            let mut rewritten = change.clone();
            column_values::rewrite(&mut rewritten, &session.engine.catalog, None)?;
            let Statement::Update(rewritten) = rewritten else {
                unreachable!("an UPDATE stays one");
            };
            (
                update.table.relation.clone(),
                update.selection.clone(),
                rewritten.assignments,
            )
        }
        Statement::Delete(delete) => {
            let (FromTable::WithFromKeyword(from) | FromTable::WithoutKeyword(from)) = &delete.from;
            (from[0].relation.clone(), delete.selection.clone(), vec![])
        }
        _ => return Err(EddyError::internal("rows_query of an INSERT")),
    };
    let mut query = parse_query("SELECT 1 FROM t")?;
    let SetExpr::Select(select) = query.body.as_mut() else {
        unreachable!("parsed a SELECT");
    };
    select.from[0].relation = relation_factor;
    select.selection = selection;
    select.projection = relation
        .columns
        .iter()
        .filter(|c| !c.hidden)
        .map(|c| {
            let assigned = assignments.iter().find(|a| match &a.target {
                AssignmentTarget::ColumnName(name) => name
                    .0
                    .last()
                    .and_then(|p| p.as_ident())
                    .is_some_and(|i| super::ddl::ident_name(i) == c.name),
                AssignmentTarget::Tuple(_) => false,
            });
            let column = Ident::with_quote('"', c.name.as_str());
            SelectItem::ExprWithAlias {
                expr: assigned
                    .map_or_else(|| Expr::Identifier(column.clone()), |a| a.value.clone()),
                alias: column,
            }
        })
        .collect();
    Ok(Statement::Query(Box::new(query)))
}

/// The `RETURNING` items over the written rows, named as PostgreSQL names them.
async fn evaluate(
    session: &Session,
    table: &str,
    items: &[SelectItem],
    rows: Vec<arrow::array::RecordBatch>,
) -> Result<Outcome> {
    let schema = table_schema(session, table)?;
    let rows = rows
        .into_iter()
        .map(|b| conform(&b, &schema))
        .collect::<Result<Vec<_>>>()?;
    let ctx = SessionContext::new_with_state(session.statement_state());
    let frame = ctx
        .read_table(Arc::new(MemTable::try_new(schema.clone(), vec![rows])?))?
        .alias(table)?;
    let mut exprs = Vec::new();
    for item in items {
        match item {
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => exprs.extend(
                schema
                    .fields()
                    .iter()
                    .map(|f| datafusion::prelude::col(format!("\"{}\"", f.name()))),
            ),
            SelectItem::UnnamedExpr(expr) => exprs.push(frame.parse_sql_expr(&expr.to_string())?),
            SelectItem::ExprWithAlias { expr, alias } => exprs.push(
                frame
                    .parse_sql_expr(&expr.to_string())?
                    .alias(super::ddl::ident_name(alias)),
            ),
            other => {
                return Err(EddyError::not_supported(format!(
                    "RETURNING {other} is not supported"
                )));
            }
        }
    }
    let (schema, batches) = super::collect_typed(frame.select(exprs)?).await?;
    let mut as_query = parse_query("SELECT 1 FROM t")?;
    if let SetExpr::Select(select) = as_query.body.as_mut() {
        select.projection = items.to_vec();
    }
    Ok(super::with_postgres_names(
        Outcome::Rows { schema, batches },
        &Statement::Query(Box::new(as_query)),
    ))
}

async fn collect(session: &Session, plan: LogicalPlan) -> Result<Vec<arrow::array::RecordBatch>> {
    let state = session.statement_state();
    Ok(datafusion::dataframe::DataFrame::new(state, plan)
        .collect()
        .await?)
}

/// The batch with each column cast to the table's type (an assignment's value may be
/// wider than its column until the table casts it).
fn conform(
    batch: &arrow::array::RecordBatch,
    schema: &SchemaRef,
) -> Result<arrow::array::RecordBatch> {
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(column, field)| arrow::compute::cast(column, field.data_type()))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(arrow::array::RecordBatch::try_new(schema.clone(), columns)?)
}
