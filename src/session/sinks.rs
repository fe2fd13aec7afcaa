//! `CREATE SINK`, `DROP SINK`: a job whose rows go to a sink connector
//! (`connectors::sink`) — files, PostgreSQL, or `blackhole`, which counts rows
//! (`eddy_catalog.jobs.rows_written`) and discards them to measure the engine alone.

use super::{Engine, Outcome, Session};
use crate::catalog::{Relation, RelationKind};
use crate::connectors::sink::SinkContext;
use crate::error::{EddyError, Result, sqlstate};
use crate::sql::CreateSink;
use crate::stream::graph::StreamGraph;
use crate::stream::job::JobOutput;
use std::sync::Arc;

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
    // The query gets the rewrites every statement gets (TUMBLE and HOP in FROM).
    let query = match engine.parse(&sink.query)?.as_slice() {
        [statement] => statement.to_string(),
        _ => return Err(EddyError::syntax("a sink's query is one SELECT")),
    };
    let parallelism = session.streaming_parallelism()?;
    let time_zone = session.time_zone();
    let (mut plan, mut graph) = super::materialized_views::plan_graph(
        engine,
        &query,
        parallelism,
        false,
        time_zone.as_deref(),
    )
    .await?;
    let mut query = query;
    let mut target = None;
    let options = match &sink.into {
        Some(into) => {
            let prepared =
                super::sink_into_table::prepare(engine, into, &sink.options, &query, &graph)?;
            // Planned again as the table's whole rows (defaults where the query gives
            // no value).
            query = prepared.query.clone();
            (plan, graph) = super::materialized_views::plan_graph(
                engine,
                &query,
                parallelism,
                false,
                time_zone.as_deref(),
            )
            .await?;
            target = Some(prepared.table.id);
            prepared.options
        }
        None => sink.options.clone(),
    };
    let mut depends_on = super::materialized_views::dependencies(engine, &query, &plan)?;
    // The target cannot be dropped while the sink writes into it.
    depends_on.extend(target);
    let mut rel = Relation {
        definition: query.clone(),
        depends_on,
        options,
        parallelism: session.chosen_streaming_parallelism()?,
        state_layout: graph.state_layout()?,
        time_zone,
        ..Relation::new(sink.name.clone(), RelationKind::Sink)
    };
    // Options, and the target itself, are checked before anything is created.
    job_output(engine, &rel, &graph, None).await?;
    rel = engine.catalog.create_relation(rel)?;
    let committed = engine.checkpoints.committed_epoch();
    let output = match job_output(engine, &rel, &graph, Some(committed)).await {
        Ok(output) => output,
        Err(e) => {
            engine.catalog.drop_relation(&rel.name)?;
            return Err(e);
        }
    };
    super::jobs::start_job(engine, &rel, &graph, output, false).await?;
    Ok(Outcome::Command("CREATE_SINK".into()))
}

/// Where a sink's job writes, for a job about to run with its state of epoch
/// `resumed_at`. What a sink that publishes at commit (files, exactly-once Kafka) staged
/// before this start is settled first (published up to the committed epoch, dropped
/// after `resumed_at`), and published from then on as checkpoints commit. Without
/// `resumed_at` (at `CREATE SINK`, before anything runs) the options and the target are
/// checked instead: reachable, and fit for the sink.
pub(super) async fn job_output(
    engine: &Engine,
    rel: &Relation,
    graph: &StreamGraph,
    resumed_at: Option<u64>,
) -> Result<JobOutput> {
    let check_target = resumed_at.is_none();
    if super::sink_into_table::is_into_table(&rel.options) {
        return super::sink_into_table::output(engine, rel);
    }
    let connector = rel.options.get("connector").map(|c| c.to_ascii_lowercase());
    if connector.as_deref() == Some("blackhole") {
        return JobOutput::blackhole(&rel.options);
    }
    let context = SinkContext {
        name: &rel.name,
        id: rel.id,
        schema: graph.schema.clone(),
        updating: graph.keyed,
        s3: &engine.config.s3,
        state_store: &engine.config.state_store_location(),
    };
    let opened = crate::connectors::sink::open(&rel.options, &context, check_target).await?;
    if let Some(resumed_at) = resumed_at
        && let Some(committer) = opened.committer
    {
        committer
            .recover(engine.checkpoints.committed_epoch(), resumed_at)
            .await?;
        let name = rel.name.clone();
        engine.checkpoints.set_commit_hook(
            &rel.name,
            Arc::new(move |epoch, jobs| {
                let committer = committer.clone();
                let holds_sink = jobs.contains(&name);
                let name = name.clone();
                Box::pin(async move {
                    if holds_sink && let Err(e) = committer.publish_upto(epoch).await {
                        tracing::warn!(sink = %name, "cannot publish epoch {epoch}: {e}");
                    }
                })
            }),
        );
    }
    Ok(JobOutput::Sink(opened.factory))
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
