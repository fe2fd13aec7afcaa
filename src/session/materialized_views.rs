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
use crate::planner::{PlanContext, plan_job};
use crate::sql::alter_parallelism::AlterParallelism;
use crate::stream::graph::{FragmentInput, StreamGraph, Terminal};
use crate::stream::job::{JobOutput, JobStateLocation};
use datafusion::sql::sqlparser::ast::{self, CreateView};

/// Plans a view's or sink's query as a stream graph.
pub(super) async fn plan_graph(
    engine: &Engine,
    query_sql: &str,
    parallelism: usize,
    emit_on_window_close: bool,
) -> Result<(datafusion::logical_expr::LogicalPlan, StreamGraph)> {
    let plan = engine.plan_streaming_query(query_sql).await?;
    let state = engine.ctx.state();
    let graph = plan_job(
        &plan,
        &PlanContext {
            catalog: &engine.catalog,
            state: &state,
            parallelism,
            emit_on_window_close,
        },
    )?;
    Ok((plan, graph))
}

/// The relations a query reads, by id: those it names (plain views included) and the
/// tables and sources its plan scans.
pub(super) fn dependencies(
    engine: &Engine,
    query_sql: &str,
    plan: &datafusion::logical_expr::LogicalPlan,
) -> Result<Vec<u32>> {
    use datafusion::common::tree_node::TreeNodeRecursion;
    let mut names: Vec<String> = Vec::new();
    let state = engine.ctx.state();
    let statement = state.sql_to_statement(query_sql, &datafusion::config::Dialect::PostgreSQL)?;
    for r in state.resolve_table_references(&statement)? {
        names.push(r.table().to_string());
    }
    plan.apply_with_subqueries(|node| {
        if let datafusion::logical_expr::LogicalPlan::TableScan(scan) = node {
            names.push(scan.table_name.table().to_string());
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    let mut ids = Vec::new();
    for name in names {
        if let Some(rel) = engine.catalog.get(&name)
            && !ids.contains(&rel.id)
        {
            ids.push(rel.id);
        }
    }
    Ok(ids)
}

/// `EXPLAIN CREATE MATERIALIZED VIEW`: the fragments the view's job would run.
pub(super) async fn explain(
    session: &Session,
    view: &CreateView,
    emit_on_window_close: bool,
) -> Result<Outcome> {
    let parallelism = session.streaming_parallelism()?;
    let (_, graph) = plan_graph(
        &session.engine,
        &view.query.to_string(),
        parallelism,
        emit_on_window_close,
    )
    .await?;
    text_rows("QUERY PLAN", graph.explain(Terminal::Materialize))
}

/// Starts a view's or sink's job; when it reads tables or views, waits until their
/// current rows have gone through it (as `CREATE MATERIALIZED VIEW` does in RisingWave).
pub(super) async fn start_job(
    engine: &Engine,
    rel: &Relation,
    graph: &StreamGraph,
    output: JobOutput,
    resume: bool,
) -> Result<()> {
    // Subscribing to a view's change log between barrier rounds: a view publishes its
    // changes only at barriers, one publisher (subtask) after another, so mid-round the
    // new job could find some publishers past the round's barrier and others not — its
    // barriers would then stay one epoch off on those inputs, and its checkpoints would
    // not match the view's.
    let paused = engine.checkpoints.pause().await;
    let reads_changes = spawn_job(engine, rel, graph, output, resume)?;
    std::mem::drop(paused);
    if reads_changes {
        // The rows the tables and views read already hold, readable once committed.
        engine.checkpoints.flush().await;
    }
    Ok(())
}

/// Starts a job; returns whether it reads tables, views or constants (whose current rows
/// then reach it at the next barrier).
pub(super) fn spawn_job(
    engine: &Engine,
    rel: &Relation,
    graph: &StreamGraph,
    output: JobOutput,
    resume: bool,
) -> Result<bool> {
    let provider = engine.schema_provider.clone();
    engine.jobs.spawn(
        &rel.name,
        graph,
        output,
        &|r| provider.state_table_for(r),
        &JobStateLocation {
            relation_id: rel.id,
            store: engine.store.clone(),
            resume,
        },
    )?;
    // The constants of a `VALUES` list go through before the first barrier too.
    Ok(graph.fragments.iter().any(|f| {
        matches!(
            &f.input,
            FragmentInput::Changes { .. }
                | FragmentInput::Connector {
                    spec: crate::connectors::ConnectorSpec::Values(_),
                    ..
                }
        )
    }))
}

pub(super) async fn create(
    session: &Session,
    view: CreateView,
    emit_on_window_close: bool,
) -> Result<Outcome> {
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
    // A GROUP BY column the query does not select is kept, hidden (as in RisingWave);
    // not when the statement names the view's columns.
    let mut query = view.query.clone();
    let hidden = if view.columns.is_empty() {
        super::hidden_columns::add_group_keys(&mut query)
    } else {
        vec![]
    };
    let query_sql = query.to_string();
    // Check the whole query is supported before anything is recorded.
    let parallelism = session.streaming_parallelism()?;
    let (plan, graph) = plan_graph(engine, &query_sql, parallelism, emit_on_window_close).await?;
    let names: Vec<String> = if view.columns.is_empty() {
        super::column_names::view_column_names(&query, graph.schema.fields())
    } else {
        if view.columns.len() != graph.schema.fields().len() {
            return Err(EddyError::syntax(
                "the column list must name every column of the query",
            ));
        }
        view.columns.iter().map(|c| ident_name(&c.name)).collect()
    };
    let mut columns = view_columns(names, graph.schema.fields())?;
    let visible = columns.len() - hidden.len();
    for column in &mut columns[visible..] {
        column.hidden = true;
    }
    let depends_on = dependencies(engine, &query_sql, &plan)?;
    let scan_order = super::scan_order::of_query(&query, &columns);
    let rel = engine.catalog.create_relation(Relation {
        columns,
        definition: query_sql,
        depends_on,
        parallelism: session.chosen_streaming_parallelism()?,
        emit_on_window_close,
        state_layout: graph.state_layout()?,
        scan_order,
        ..Relation::new(name.clone(), RelationKind::MaterializedView)
    })?;
    let table = engine.schema_provider.state_table_for(&rel)?;
    start_job(engine, &rel, &graph, JobOutput::View(table), false).await?;
    // A query that cannot run over the rows its tables already hold is refused, as
    // RisingWave refuses it, instead of leaving a view whose job keeps failing. (A job
    // over sources only has no existing rows: its failures are the failover's.)
    let reads_existing_rows = graph
        .fragments
        .iter()
        .any(|f| matches!(f.input, FragmentInput::Changes { .. }));
    if reads_existing_rows && let Some(failure) = job_failure(engine, &rel.name) {
        super::drop::drop_relation(engine, &rel, false)?;
        return Err(EddyError::new(
            sqlstate::DATA_EXCEPTION,
            format!("the view's query failed on the existing rows: {failure}"),
        ));
    }
    Ok(Outcome::Command("CREATE_MATERIALIZED_VIEW".into()))
}

/// The error a job failed with, if it has failed (and perhaps been restarted since).
fn job_failure(engine: &Engine, name: &str) -> Option<String> {
    let job = engine.jobs.jobs().into_iter().find(|j| j.name == name)?;
    let error = job.error.lock().clone();
    error.or_else(|| job.last_failure.lock().clone())
}

pub(super) async fn drop(
    session: &Session,
    names: &[ast::ObjectName],
    if_exists: bool,
    cascade: bool,
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
        super::drop::drop_relation(engine, &rel, cascade)?;
    }
    Ok(Outcome::Command("DROP_MATERIALIZED_VIEW".into()))
}

/// Starts the job of every materialized view and sink, in creation order so that a view
/// starts before the views over it. After a restored checkpoint, jobs resume from its
/// state (those reading tables replay the tables' logged changes since it); every job
/// starts afresh when there is no checkpoint.
pub async fn restart_all(engine: &Engine) -> Result<()> {
    let mut relations = engine.catalog.relations();
    relations.sort_by_key(|r| r.id);
    let paused = engine.checkpoints.pause().await;
    let mut reads_changes = false;
    // Per job: whether it can resume (asked once, for every region it is part of).
    let mut can_resume: std::collections::HashMap<u32, bool> = Default::default();
    for rel in &relations {
        if matches!(
            rel.kind,
            RelationKind::MaterializedView | RelationKind::Sink
        ) && engine.restored.is_some()
        {
            can_resume.insert(rel.id, job_can_resume(engine, rel, &relations).await?);
        }
    }
    for rel in &relations {
        if !matches!(
            rel.kind,
            RelationKind::MaterializedView | RelationKind::Sink
        ) {
            continue;
        }
        // A job resumes only if the checkpoint holds every job of its region (the jobs
        // it reads from or feeds): one started afresh would feed the others twice.
        let region = super::failover::region(rel, &relations);
        let resume = engine
            .restored
            .as_ref()
            .is_some_and(|m| region.iter().all(|r| m.jobs.contains(&r.name)))
            && region.iter().all(|r| can_resume.get(&r.id) == Some(&true));
        reads_changes |= restart_job(engine, rel, resume).await?;
    }
    std::mem::drop(paused);
    if reads_changes {
        engine.checkpoints.run_round().await;
    }
    Ok(())
}

/// Plans a stored view's or sink's query again, at its parallelism (the workers' count
/// when it follows them).
async fn replan(engine: &Engine, rel: &Relation) -> Result<StreamGraph> {
    let parallelism = rel.parallelism.unwrap_or(engine.jobs.worker_count());
    let (_, graph) = plan_graph(
        engine,
        &rel.definition,
        parallelism,
        rel.emit_on_window_close,
    )
    .await?;
    Ok(graph)
}

/// Whether a job can resume from the state the store holds for it: it recorded its
/// positions in the logs of the tables it reads, and its query still plans to the state
/// tables that state was written for (a job whose layout was not recorded, by an older
/// Eddy, is trusted). A region resumes only if all its jobs can: one started afresh
/// would feed the others, or be fed, twice.
async fn job_can_resume(engine: &Engine, rel: &Relation, relations: &[Relation]) -> Result<bool> {
    if !crate::checkpoint::recovery::table_positions_recorded(&engine.store, rel, relations)? {
        return Ok(false);
    }
    if rel.state_layout.is_empty() {
        return Ok(true);
    }
    let layout = replan(engine, rel).await?.state_layout()?;
    if layout != rel.state_layout {
        tracing::warn!(
            job = %rel.name,
            stored = ?rel.state_layout,
            planned = ?layout,
            "the query now plans to other state tables than its stored state was written \
             for: it starts afresh"
        );
        return Ok(false);
    }
    Ok(true)
}

/// [`job_can_resume`] for every job of a region.
pub(super) async fn region_can_resume(
    engine: &Engine,
    region: &[Relation],
    relations: &[Relation],
) -> Result<bool> {
    for rel in region {
        if !job_can_resume(engine, rel, relations).await? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Deletes a job's internal state (aggregates, source positions): it starts afresh.
pub(super) fn clear_job_state(engine: &Engine, rel: &Relation) -> Result<()> {
    let (start, end) = crate::state::operator_state::internal_table_range(rel.id);
    engine
        .store
        .delete_range(&start.to_be_bytes(), &end.to_be_bytes())
}

/// Starts a materialized view's or sink's job again: from the state it has in the store
/// (`resume`), or afresh with its view emptied and its internal state deleted. Returns
/// whether the job reads tables or views (a barrier then brings their rows in).
pub(super) async fn restart_job(engine: &Engine, rel: &Relation, resume: bool) -> Result<bool> {
    if !resume {
        clear_job_state(engine, rel)?;
    }
    let graph = replan(engine, rel).await?;
    // What the job's state is now written for (recorded for catalogs without it, or
    // after a layout change made the job start afresh).
    let layout = graph.state_layout()?;
    if layout != rel.state_layout {
        engine.catalog.set_state_layout(&rel.name, layout)?;
    }
    let output = match rel.kind {
        RelationKind::MaterializedView => {
            let table = engine.schema_provider.state_table_for(rel)?;
            if !resume {
                table.truncate()?;
            }
            JobOutput::View(table)
        }
        _ => super::sinks::job_output(engine, rel, &graph, false).await?,
    };
    spawn_job(engine, rel, &graph, output, resume)
}

/// `ALTER MATERIALIZED VIEW name SET PARALLELISM = n` (or `ALTER SINK`): the job, and
/// every job reading its view, restart from their state at the last barrier — barrier
/// rounds are paused meanwhile, so that state is one epoch for all of them — at the new
/// parallelism; aggregates then find each key's state in the subtask its key group now
/// maps to (jobs reading tables replay the tables' logged changes since that barrier).
pub(super) async fn alter_parallelism(
    engine: &Engine,
    alter: &AlterParallelism,
) -> Result<Outcome> {
    let kind = if alter.kind == "SINK" {
        RelationKind::Sink
    } else {
        RelationKind::MaterializedView
    };
    let rel = engine
        .catalog
        .get(&alter.name)
        .filter(|r| r.kind == kind)
        .ok_or_else(|| {
            EddyError::new(
                sqlstate::UNDEFINED_TABLE,
                format!(
                    "{} \"{}\" does not exist",
                    alter.kind.to_lowercase(),
                    alter.name
                ),
            )
        })?;
    let parallelism = alter
        .parallelism
        .parse::<usize>()
        .ok()
        .filter(|p| (1..=crate::state::MAX_PARALLELISM as usize).contains(p))
        .ok_or_else(|| {
            EddyError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!(
                    "invalid parallelism \"{}\": a number from 1 to {}",
                    alter.parallelism,
                    crate::state::MAX_PARALLELISM
                ),
            )
        })?;
    restart_around(engine, &rel, || {
        engine.catalog.set_parallelism(&rel.name, parallelism)?;
        Ok(())
    })
    .await?;
    Ok(Outcome::Command(format!(
        "ALTER_{}",
        alter.kind.replace(' ', "_")
    )))
}

/// Stops a job and every job reading its view (directly or not), makes a catalog
/// `change` while they are stopped, and restarts them all from their state at the last
/// barrier. Barrier rounds are paused meanwhile, so that state is one epoch for all of
/// them (jobs reading tables replay the tables' logged changes since that barrier); a
/// round runs after, so the next checkpoint records the jobs as they now are.
pub(super) async fn restart_around(
    engine: &Engine,
    rel: &Relation,
    change: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let relations = engine.catalog.relations();
    let mut affected = vec![rel.clone()];
    let mut frontier = vec![rel.id];
    while let Some(id) = frontier.pop() {
        for r in &relations {
            if r.depends_on.contains(&id) && !affected.iter().any(|a| a.id == r.id) {
                frontier.push(r.id);
                affected.push(r.clone());
            }
        }
    }
    // Plain views and indexes over the view have no job of their own.
    affected.retain(|r| matches!(r.kind, RelationKind::MaterializedView | RelationKind::Sink));
    affected.sort_by_key(|r| r.id);
    let paused = engine.checkpoints.pause().await;
    for r in affected.iter().rev() {
        engine.jobs.stop_and_wait(&r.name).await;
    }
    // The jobs run again whether the change was made or not, as the catalog now has them.
    let changed = change();
    let relations = engine.catalog.relations();
    let affected: Vec<Relation> = affected
        .iter()
        .map(|r| engine.catalog.get_by_id(r.id).unwrap_or_else(|| r.clone()))
        .collect();
    let resume = region_can_resume(engine, &affected, &relations).await?;
    for r in &affected {
        restart_job(engine, r, resume).await?;
    }
    // A renamed job's run under its old name is listed until removed.
    if engine
        .catalog
        .get_by_id(rel.id)
        .is_some_and(|now| now.name != rel.name)
    {
        engine.jobs.stop(&rel.name);
    }
    std::mem::drop(paused);
    engine.checkpoints.run_round().await;
    changed
}
