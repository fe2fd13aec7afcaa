//! `CREATE MATERIALIZED VIEW`, `DROP MATERIALIZED VIEW`, `SHOW MATERIALIZED VIEWS`,
//! `EXPLAIN` and `ALTER ... SET PARALLELISM`: planning views' queries as stream graphs.
//! Their jobs are started, stopped and restarted by `jobs.rs`.

use super::ddl::{ident_name, relation_name, view_columns};
use super::jobs::{restart_around, start_job};
use super::{Engine, Outcome, Session, text_rows};
use crate::catalog::{Relation, RelationKind};
use crate::error::{EddyError, Result, sqlstate};
use crate::planner::{PlanContext, plan_job};
use crate::sql::alter_parallelism::AlterParallelism;
use crate::stream::graph::{FragmentInput, StreamGraph, Terminal};
use crate::stream::job::JobOutput;
use datafusion::sql::sqlparser::ast::{self, CreateView};

/// Plans a view's or sink's query as a stream graph, in the time zone of the session that
/// created it (`None`: UTC).
pub(super) async fn plan_graph(
    engine: &Engine,
    query_sql: &str,
    parallelism: usize,
    emit_on_window_close: bool,
    time_zone: Option<&str>,
) -> Result<(datafusion::logical_expr::LogicalPlan, StreamGraph)> {
    let plan = engine.plan_streaming_query(query_sql, time_zone).await?;
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
    let rewritten = crate::sql::star_except::rewrite(query_sql);
    let statement = state.sql_to_statement(
        rewritten.as_deref().unwrap_or(query_sql),
        &datafusion::config::Dialect::PostgreSQL,
    )?;
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
        session.time_zone().as_deref(),
    )
    .await?;
    text_rows("QUERY PLAN", graph.explain(Terminal::Materialize))
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
    let time_zone = session.time_zone();
    let (plan, graph) = plan_graph(
        engine,
        &query_sql,
        parallelism,
        emit_on_window_close,
        time_zone.as_deref(),
    )
    .await?;
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
        time_zone,
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
