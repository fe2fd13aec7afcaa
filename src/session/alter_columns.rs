//! `ALTER TABLE t ADD [COLUMN] [IF NOT EXISTS] c type [DEFAULT e] [NOT NULL]` and
//! `ALTER TABLE t DROP [COLUMN] [IF EXISTS] c`, as PostgreSQL runs them: existing rows
//! get the new column's default (or NULL), or lose the dropped column.
//!
//! Every row is rewritten for the new columns in the same RocksDB write as the catalog's
//! new columns and `CREATE TABLE` text (what `SHOW CREATE TABLE` prints), so a crash
//! leaves either the old table or the new one. Writers are held off meanwhile; one that
//! opened the table before is refused afterwards (40001) instead of writing rows in the
//! old layout. Only tables nothing reads continuously can be altered (a materialized
//! view, sink, index or view over the table would see its columns change under it), and
//! only tables Eddy fills itself (not from a connector); a new column cannot be part of
//! the primary key or generated, and a primary-key or watermark column cannot be dropped.

use super::ddl::{columns_from_defs, ident_name, relation_name};
use super::{Outcome, Session};
use crate::catalog::{Relation, RelationKind};
use crate::error::{EddyError, Result, sqlstate};
use arrow::array::{ArrayRef, RecordBatch, new_null_array};
use arrow::datatypes::{Field, Schema};
use datafusion::sql::sqlparser::ast::{self, AlterTableOperation, ColumnDef, Statement};
use std::sync::Arc;

pub(super) async fn execute(session: &Session, alter: ast::AlterTable) -> Result<Outcome> {
    let name = relation_name(&alter.name)?;
    let done = Ok(Outcome::command("ALTER TABLE"));
    let Some(rel) = session.engine.catalog.get(&name) else {
        if alter.if_exists {
            return done;
        }
        return Err(EddyError::undefined_table(&name));
    };
    let [operation] = alter.operations.as_slice() else {
        return Err(EddyError::not_supported(
            "ALTER TABLE with several actions is not supported: give one per statement",
        ));
    };
    match operation {
        AlterTableOperation::AddColumn {
            if_not_exists,
            column_def,
            column_position: None,
            ..
        } => {
            check_is_table(&rel)?;
            let column = ident_name(&column_def.name);
            if rel.columns.iter().any(|c| c.name == column) {
                if *if_not_exists {
                    return done;
                }
                return Err(EddyError::new(
                    "42701",
                    format!("column \"{column}\" of relation \"{name}\" already exists"),
                ));
            }
            let (mut added, primary_key) =
                columns_from_defs(&rel.name, std::slice::from_ref(column_def))?;
            if !primary_key.is_empty() {
                return Err(EddyError::not_supported(
                    "ALTER TABLE cannot alter primary key: an added column cannot be part of it",
                ));
            }
            let column = added.pop().expect("one column defined");
            if column.generated.is_some() {
                return Err(EddyError::not_supported(
                    "ALTER TABLE ... ADD COLUMN cannot add a generated column",
                ));
            }
            let table = alterable(session, &rel)?;
            add_column(session, &rel, table, column_def, column).await?;
            done
        }
        AlterTableOperation::DropColumn {
            column_names,
            if_exists,
            ..
        } => {
            let [column] = column_names.as_slice() else {
                return Err(EddyError::not_supported(
                    "ALTER TABLE ... DROP COLUMN drops one column per statement",
                ));
            };
            check_is_table(&rel)?;
            let column = ident_name(column);
            let Some(index) = rel.columns.iter().position(|c| c.name == column) else {
                if *if_exists {
                    return done;
                }
                return Err(EddyError::new(
                    sqlstate::UNDEFINED_COLUMN,
                    format!("column \"{column}\" of relation \"{name}\" does not exist"),
                ));
            };
            let table = alterable(session, &rel)?;
            drop_column(session, &rel, table, index)?;
            done
        }
        other => Err(EddyError::not_supported(format!(
            "ALTER TABLE ... {other} is not supported"
        ))),
    }
}

fn check_is_table(rel: &Relation) -> Result<()> {
    if rel.kind != RelationKind::Table {
        return Err(EddyError::new(
            sqlstate::WRONG_OBJECT_TYPE,
            format!("\"{}\" is not a table or cannot be altered", rel.name),
        ));
    }
    Ok(())
}

/// The `CREATE TABLE` statement of a table whose columns may change, or why they may not.
fn alterable(session: &Session, rel: &Relation) -> Result<ast::CreateTable> {
    if let Some(reader) = session
        .engine
        .catalog
        .relations()
        .into_iter()
        .find(|r| r.depends_on.contains(&rel.id))
    {
        return Err(EddyError::new(
            sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
            format!(
                "cannot change the columns of table \"{}\" because {} \"{}\" depends on it",
                rel.name,
                reader.kind.sql_name(),
                reader.name
            ),
        ));
    }
    let not_supported = || {
        EddyError::not_supported(format!(
            "the columns of table \"{}\" cannot be changed: it is filled by a connector or \
             was created with options",
            rel.name
        ))
    };
    if super::kafka_tables::is_kafka_table(rel) || super::cdc::is_cdc_table(rel) {
        return Err(not_supported());
    }
    match session.engine.parse(&rel.definition)?.pop() {
        Some(Statement::CreateTable(create)) if create.query.is_none() => Ok(create),
        _ => Err(not_supported()),
    }
}

async fn add_column(
    session: &Session,
    rel: &Relation,
    mut create: ast::CreateTable,
    def: &ColumnDef,
    column: crate::catalog::Column,
) -> Result<()> {
    let old_schema = rel.arrow_schema();
    let mut columns = rel.columns.clone();
    columns.push(column.clone());
    let new_rel = Relation {
        columns: columns.clone(),
        ..rel.clone()
    };
    let new_schema = new_rel.arrow_schema();
    let field = new_schema.field(old_schema.fields().len()).clone();
    // Existing rows get the default, evaluated once (as PostgreSQL does for a constant).
    let default = match &column.default {
        Some(expr) => Some(evaluate_default(session, expr, &field).await?),
        None => None,
    };
    let state_table = session.engine.schema_provider.state_table_for(rel)?;
    let fill = |batch: &RecordBatch| -> Result<RecordBatch> {
        let rows = batch.num_rows();
        let value: ArrayRef = match &default {
            Some(value) => value.to_array_of_size(rows)?,
            None => new_null_array(field.data_type(), rows),
        };
        if !column.nullable && value.null_count() > 0 {
            return Err(EddyError::new(
                sqlstate::NOT_NULL_VIOLATION,
                format!(
                    "column \"{}\" of relation \"{}\" contains null values",
                    column.name, rel.name
                ),
            ));
        }
        let mut arrays = batch.columns().to_vec();
        arrays.push(value);
        Ok(RecordBatch::try_new(new_schema.clone(), arrays)?)
    };
    create.columns.push(def.clone());
    let definition = Statement::CreateTable(create).to_string();
    state_table.rewrite_rows(&new_schema, fill, |rows| {
        session
            .engine
            .catalog
            .alter_columns(
                &rel.name,
                columns,
                rel.primary_key.clone(),
                definition,
                rows,
            )
            .map(|_| ())
    })?;
    session.engine.schema_provider.forget(rel.id);
    Ok(())
}

/// A column's `DEFAULT` expression evaluated once, as a value of the column's type.
async fn evaluate_default(
    session: &Session,
    expr: &str,
    field: &Field,
) -> Result<datafusion::common::ScalarValue> {
    let batches = session
        .engine
        .ctx
        .sql(&format!("SELECT {expr}"))
        .await?
        .collect()
        .await?;
    let value = batches
        .first()
        .filter(|b| b.num_rows() == 1)
        .map(|b| b.column(0).clone())
        .ok_or_else(|| EddyError::internal("a default gave no value"))?;
    let value = arrow::compute::cast(&value, field.data_type())?;
    Ok(datafusion::common::ScalarValue::try_from_array(&value, 0)?)
}

fn drop_column(
    session: &Session,
    rel: &Relation,
    mut create: ast::CreateTable,
    index: usize,
) -> Result<()> {
    let column = &rel.columns[index];
    if rel.primary_key.contains(&index) {
        return Err(EddyError::not_supported(format!(
            "cannot drop column \"{}\": it is part of the primary key of \"{}\"",
            column.name, rel.name
        )));
    }
    if rel
        .watermark
        .as_ref()
        .is_some_and(|w| w.column == column.name)
    {
        return Err(EddyError::not_supported(format!(
            "cannot drop column \"{}\": the watermark of \"{}\" is defined on it",
            column.name, rel.name
        )));
    }
    if rel.columns.len() == 1 {
        return Err(EddyError::not_supported(
            "cannot drop the last column of a table",
        ));
    }
    let mut columns = rel.columns.clone();
    columns.remove(index);
    // A generated column computed from the dropped one would have nothing to read.
    super::column_values::check_generated(&columns)?;
    let primary_key: Vec<usize> = rel
        .primary_key
        .iter()
        .map(|&k| if k > index { k - 1 } else { k })
        .collect();
    let new_schema = Arc::new(Schema::new(
        rel.arrow_schema()
            .fields()
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != index)
            .map(|(_, f)| f.clone())
            .collect::<Vec<_>>(),
    ));
    let remove = |batch: &RecordBatch| -> Result<RecordBatch> {
        let mut arrays = batch.columns().to_vec();
        arrays.remove(index);
        Ok(RecordBatch::try_new(new_schema.clone(), arrays)?)
    };
    create
        .columns
        .retain(|def| ident_name(&def.name) != column.name);
    let definition = Statement::CreateTable(create).to_string();
    let state_table = session.engine.schema_provider.state_table_for(rel)?;
    state_table.rewrite_rows(&new_schema, remove, |rows| {
        session
            .engine
            .catalog
            .alter_columns(&rel.name, columns, primary_key, definition, rows)
            .map(|_| ())
    })?;
    session.engine.schema_provider.forget(rel.id);
    Ok(())
}
