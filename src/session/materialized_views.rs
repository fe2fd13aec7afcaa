//! `CREATE MATERIALIZED VIEW`, `DROP MATERIALIZED VIEW`, `SHOW MATERIALIZED VIEWS`, and
//! (re)starting their jobs.
//!
//! Until checkpoints exist, a restart recomputes every view from the beginning of its
//! sources: the view's state is cleared and its job starts again. Sources are
//! deterministic, so the result is the same as in an uninterrupted run.

use super::ddl::{ident_name, relation_name, view_columns};
use super::{Engine, Outcome, Session, text_rows};
use crate::catalog::{Relation, RelationKind};
use crate::error::{EddyError, Result, sqlstate};
use crate::stream::job::JobOutput;
use crate::stream::planner::plan_job;
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{self, CreateView};

pub(super) async fn create(session: &Session, view: CreateView) -> Result<Outcome> {
    let name = relation_name(&view.name)?;
    let engine = &session.engine;
    if engine.catalog.get(&name).is_some() {
        if view.if_not_exists {
            return Ok(Outcome::Command("CREATE_MATERIALIZED_VIEW".into()));
        }
        return Err(EddyError::new(
            sqlstate::DUPLICATE_TABLE,
            format!("relation \"{name}\" already exists"),
        ));
    }
    if view.or_replace {
        return Err(EddyError::not_supported(
            "CREATE OR REPLACE MATERIALIZED VIEW is not supported",
        ));
    }
    let query_sql = view.query.to_string();
    let plan = engine.plan_streaming_query(&query_sql).await?;
    // Check the whole query is supported before anything is recorded.
    let job = plan_job(&plan, &engine.catalog)?;
    let names: Vec<String> = if view.columns.is_empty() {
        job.schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect()
    } else {
        if view.columns.len() != job.schema.fields().len() {
            return Err(EddyError::syntax(
                "the column list must name every column of the query",
            ));
        }
        view.columns.iter().map(|c| ident_name(&c.name)).collect()
    };
    let columns = view_columns(names, job.schema.fields())?;
    let statement = DFStatement::Statement(Box::new(ast::Statement::Query(view.query.clone())));
    let mut depends_on = Vec::new();
    for r in engine.ctx.state().resolve_table_references(&statement)? {
        if let Some(rel) = engine.catalog.get(r.table())
            && !depends_on.contains(&rel.id)
        {
            depends_on.push(rel.id);
        }
    }
    let rel = engine.catalog.create_relation(Relation {
        id: 0,
        name: name.clone(),
        kind: RelationKind::MaterializedView,
        columns,
        primary_key: vec![],
        definition: query_sql,
        depends_on,
        options: Default::default(),
        watermark: None,
    })?;
    let table = engine.schema_provider.state_table_for(&rel)?;
    engine.jobs.spawn(&rel.name, job, JobOutput::View(table))?;
    Ok(Outcome::Command("CREATE_MATERIALIZED_VIEW".into()))
}

pub(super) async fn drop(
    session: &Session,
    names: &[ast::ObjectName],
    if_exists: bool,
) -> Result<Outcome> {
    let engine = &session.engine;
    let names = names
        .iter()
        .map(relation_name)
        .collect::<Result<Vec<_>>>()?;
    for rel in engine.catalog.resolve_drop(
        &names,
        RelationKind::MaterializedView,
        if_exists,
        sqlstate::UNDEFINED_TABLE,
    )? {
        engine.catalog.drop_relation(&rel.name)?;
        engine.jobs.stop(&rel.name);
        let table = engine.schema_provider.state_table_for(&rel)?;
        table.truncate()?;
        engine.schema_provider.forget(rel.id);
    }
    Ok(Outcome::Command("DROP_MATERIALIZED_VIEW".into()))
}

pub(super) fn show(session: &Session) -> Result<Outcome> {
    text_rows(
        "Name",
        session
            .engine
            .catalog
            .names_of_kind(RelationKind::MaterializedView),
    )
}

/// Starts the job of every materialized view and sink, from the beginning (see the
/// module docs).
pub async fn restart_all(engine: &Engine) -> Result<()> {
    for rel in engine.catalog.relations() {
        let output = match rel.kind {
            RelationKind::MaterializedView => {
                let table = engine.schema_provider.state_table_for(&rel)?;
                table.truncate()?;
                JobOutput::View(table)
            }
            RelationKind::Sink => JobOutput::Blackhole,
            _ => continue,
        };
        let plan = engine.plan_streaming_query(&rel.definition).await?;
        let job = plan_job(&plan, &engine.catalog)?;
        engine.jobs.spawn(&rel.name, job, output)?;
    }
    Ok(())
}
