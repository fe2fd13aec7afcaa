//! `SHOW`, `SHOW TABLES` and `DESCRIBE`.

use super::ddl::relation_name;
use super::{Outcome, Session, text_rows};
use crate::catalog::RelationKind;
use crate::error::{EddyError, Result};
use arrow::array::{RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::sql::sqlparser::ast::{Ident, ObjectName, Statement};
use std::sync::Arc;

/// The result columns of the statements answered here, known before they run (the
/// extended protocol describes a statement before executing it).
pub(super) fn result_schema(stmt: &Statement) -> Option<SchemaRef> {
    let utf8 = |names: &[&str]| {
        Some(Arc::new(Schema::new(
            names
                .iter()
                .map(|n| Field::new(*n, DataType::Utf8, true))
                .collect::<Vec<_>>(),
        )))
    };
    match stmt {
        Statement::ShowVariable { variable } => {
            let name = variable_name(variable);
            if LISTS
                .iter()
                .any(|(list, _)| name.eq_ignore_ascii_case(list))
            {
                utf8(&["Name"])
            } else if is_show_all(variable) {
                utf8(&["name", "setting", "description"])
            } else {
                utf8(&[&variable_name(variable)])
            }
        }
        Statement::ShowTables { .. }
        | Statement::ShowDatabases { .. }
        | Statement::ShowSchemas { .. } => utf8(&["Name"]),
        Statement::ShowColumns { .. } => utf8(&DESCRIBE_COLUMNS),
        Statement::ShowViews { .. } => utf8(&["Name"]),
        Statement::ExplainTable { .. } => utf8(&DESCRIBE_COLUMNS),
        Statement::Explain { statement, .. }
            if matches!(statement.as_ref(), Statement::CreateView(_)) =>
        {
            utf8(&["QUERY PLAN"])
        }
        _ => None,
    }
}

const DESCRIBE_COLUMNS: [&str; 4] = ["Name", "Type", "Is Hidden", "Description"];

/// `SHOW <list>` forms sqlparser reads as variables, and the relations each lists.
const LISTS: [(&str, RelationKind); 4] = [
    ("sources", RelationKind::Source),
    ("materialized views", RelationKind::MaterializedView),
    ("sinks", RelationKind::Sink),
    ("views", RelationKind::View),
];

/// The schemas `SHOW SCHEMAS` lists: the one users' relations live in and the system ones.
const SCHEMAS: [&str; 4] = ["information_schema", "pg_catalog", "public", "rw_catalog"];

fn is_show_all(variable: &[Ident]) -> bool {
    variable.len() == 1 && variable[0].value.eq_ignore_ascii_case("all")
}

fn variable_name(variable: &[Ident]) -> String {
    variable
        .iter()
        .map(|i| i.value.clone())
        .collect::<Vec<_>>()
        .join(" ")
}

pub(super) fn show_variable(session: &Session, variable: &[Ident]) -> Result<Outcome> {
    if is_show_all(variable) {
        let all = session.vars.lock().all();
        let schema = result_schema(&Statement::ShowVariable {
            variable: variable.to_vec(),
        })
        .expect("SHOW has a result schema");
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from_iter_values(
                    all.iter().map(|a| a.0.as_str()),
                )),
                Arc::new(StringArray::from_iter_values(
                    all.iter().map(|a| a.1.as_str()),
                )),
                Arc::new(StringArray::from_iter_values(
                    all.iter().map(|a| a.2.as_str()),
                )),
            ],
        )?;
        return Ok(Outcome::Rows {
            schema,
            batches: vec![batch],
        });
    }
    let name = variable_name(variable);
    if let Some((_, kind)) = LISTS
        .iter()
        .find(|(list, _)| name.eq_ignore_ascii_case(list))
    {
        return show_list(session, *kind);
    }
    if let Some(shown) = super::system_params::show(&session.engine, &name) {
        return shown;
    }
    let value = session.vars.lock().get(&name)?;
    // PostgreSQL names the column after the variable as the user wrote it.
    let column = if variable.len() == 1 {
        variable[0].value.clone()
    } else {
        session.vars.lock().display_name(&name)
    };
    text_rows(&column, vec![value])
}

/// The names of the relations of one kind, as `SHOW TABLES` and the like list them.
pub(super) fn show_list(session: &Session, kind: RelationKind) -> Result<Outcome> {
    text_rows("Name", session.engine.catalog.names_of_kind(kind))
}

pub(super) fn show_databases() -> Result<Outcome> {
    text_rows("Name", vec![crate::catalog::DATABASE_NAME.to_string()])
}

pub(super) fn show_schemas() -> Result<Outcome> {
    text_rows("Name", SCHEMAS.iter().map(|s| s.to_string()).collect())
}

/// `SHOW COLUMNS FROM t`: what `DESCRIBE t` shows.
pub(super) fn show_columns(
    session: &Session,
    options: &datafusion::sql::sqlparser::ast::ShowStatementOptions,
) -> Result<Outcome> {
    match options
        .show_in
        .as_ref()
        .and_then(|i| i.parent_name.as_ref())
    {
        Some(name) => describe(session, name),
        None => Err(EddyError::syntax(
            "SHOW COLUMNS FROM needs a relation's name",
        )),
    }
}

pub(super) fn show_tables(session: &Session) -> Result<Outcome> {
    text_rows(
        "Name",
        session.engine.catalog.names_of_kind(RelationKind::Table),
    )
}

pub(super) fn describe(session: &Session, name: &ObjectName) -> Result<Outcome> {
    let name = relation_name(name)?;
    let rel = session
        .engine
        .catalog
        .get(&name)
        .ok_or_else(|| EddyError::undefined_table(&name))?;
    let mut rows: Vec<[String; 4]> = rel
        .columns
        .iter()
        .map(|c| {
            [
                c.name.clone(),
                c.sql_type.pg_name(),
                c.hidden.to_string(),
                c.description.clone().unwrap_or_default(),
            ]
        })
        .collect();
    if !rel.primary_key.is_empty() {
        let pk = rel
            .primary_key
            .iter()
            .map(|i| rel.columns[*i].name.clone())
            .collect::<Vec<_>>()
            .join(", ");
        rows.push(["primary key".into(), pk, String::new(), String::new()]);
    }
    if let Some(description) = &rel.description {
        rows.push([
            "table description".into(),
            description.clone(),
            String::new(),
            String::new(),
        ]);
    }
    let schema = result_schema(&Statement::ExplainTable {
        describe_alias: datafusion::sql::sqlparser::ast::DescribeAlias::Describe,
        hive_format: None,
        has_table_keyword: false,
        table_name: ObjectName::from(vec![Ident::new(name)]),
    })
    .expect("DESCRIBE has a result schema");
    let columns = (0..4)
        .map(|i| {
            Arc::new(StringArray::from_iter(rows.iter().map(|r| {
                if i >= 2 && r[i].is_empty() {
                    None
                } else {
                    Some(r[i].clone())
                }
            }))) as _
        })
        .collect();
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    Ok(Outcome::Rows {
        schema,
        batches: vec![batch],
    })
}

/// `SHOW CREATE ...`: the statement that would create the object again.
pub(super) fn show_create(session: &Session, kind: &str, name: &str) -> Result<Outcome> {
    let rel = session
        .engine
        .catalog
        .get(name)
        .filter(|r| r.kind.sql_name() == kind)
        .ok_or_else(|| {
            EddyError::new(
                crate::error::sqlstate::UNDEFINED_TABLE,
                format!("{kind} \"{name}\" does not exist"),
            )
        })?;
    let sql = match rel.kind {
        RelationKind::View => format!("CREATE VIEW {} AS {}", rel.name, rel.definition),
        RelationKind::MaterializedView => {
            format!(
                "CREATE MATERIALIZED VIEW {} AS {}{}",
                rel.name,
                rel.definition,
                if rel.emit_on_window_close {
                    " EMIT ON WINDOW CLOSE"
                } else {
                    ""
                }
            )
        }
        RelationKind::Sink => {
            let options: Vec<String> = rel
                .options
                .iter()
                .map(|(k, v)| format!("{k} = '{}'", v.replace('\'', "''")))
                .collect();
            format!(
                "CREATE SINK {} AS {} WITH ({})",
                rel.name,
                rel.definition,
                options.join(", ")
            )
        }
        RelationKind::Table | RelationKind::Source | RelationKind::Index => rel.definition.clone(),
    };
    let schema = Arc::new(Schema::new(vec![
        Field::new("Name", DataType::Utf8, false),
        Field::new("Create Sql", DataType::Utf8, false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            // Qualified by its schema, as RisingWave names it.
            Arc::new(StringArray::from(vec![format!(
                "{}.{}",
                crate::catalog::DEFAULT_SCHEMA,
                rel.name
            )])),
            Arc::new(StringArray::from(vec![sql])),
        ],
    )?;
    Ok(Outcome::Rows {
        schema,
        batches: vec![batch],
    })
}
