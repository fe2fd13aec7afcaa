//! `CREATE SINK`, `DROP SINK`. The only connector so far is `blackhole`: the query's rows
//! are counted (`eddy_catalog.jobs.rows_written`) and discarded, which is what
//! benchmarks use to measure the engine alone.

use super::{Outcome, Session};
use crate::catalog::{Relation, RelationKind};
use crate::error::{EddyError, Result, sqlstate};
use crate::sql::CreateSink;
use crate::stream::job::JobOutput;

pub(super) async fn create(session: &Session, sink: CreateSink) -> Result<Outcome> {
    let engine = &session.engine;
    if engine.catalog.get(&sink.name).is_some() {
        if sink.if_not_exists {
            return Ok(Outcome::Command("CREATE_SINK".into()));
        }
        return Err(EddyError::new(
            sqlstate::DUPLICATE_OBJECT,
            format!("relation \"{}\" already exists", sink.name),
        ));
    }
    match sink
        .options
        .get("connector")
        .map(|c| c.to_ascii_lowercase())
        .as_deref()
    {
        Some("blackhole") => {
            JobOutput::blackhole(&sink.options)?;
        }
        Some(other) => {
            return Err(EddyError::not_supported(format!(
                "sink connector '{other}' is not supported yet; available: blackhole"
            )));
        }
        None => {
            return Err(EddyError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                "a sink needs WITH (connector = 'blackhole')",
            ));
        }
    }
    // The query gets the rewrites every statement gets (TUMBLE and HOP in FROM).
    let query = match engine.parse(&sink.query)?.as_slice() {
        [statement] => statement.to_string(),
        _ => return Err(EddyError::syntax("a sink's query is one SELECT")),
    };
    let parallelism = session.streaming_parallelism()?;
    let (plan, graph) =
        super::materialized_views::plan_graph(engine, &query, parallelism, false).await?;
    let rel = engine.catalog.create_relation(Relation {
        id: 0,
        name: sink.name.clone(),
        kind: RelationKind::Sink,
        columns: vec![],
        primary_key: vec![],
        definition: query.clone(),
        depends_on: super::materialized_views::dependencies(engine, &query, &plan)?,
        options: sink.options.clone(),
        watermark: None,
        parallelism: session.chosen_streaming_parallelism()?,
        emit_on_window_close: false,
    })?;
    let output = JobOutput::blackhole(&rel.options)?;
    super::materialized_views::start_job(engine, &rel, &graph, output, false).await?;
    Ok(Outcome::Command("CREATE_SINK".into()))
}

pub(super) fn drop(session: &Session, names: Vec<String>, if_exists: bool) -> Result<Outcome> {
    let engine = &session.engine;
    for rel in engine.catalog.resolve_drop(
        &names,
        RelationKind::Sink,
        if_exists,
        sqlstate::UNDEFINED_OBJECT,
    )? {
        super::drop::drop_relation(engine, &rel, false)?;
    }
    Ok(Outcome::Command("DROP_SINK".into()))
}
