//! The job manager: how the jobs of materialized views and sinks start, stop and start
//! again. Every statement or event that touches running jobs comes through here:
//! `CREATE` (start a job), server start-up ([`restart_all`]), failover
//! (`failover.rs`, restarting a failed job's region from the committed checkpoint), and
//! `ALTER ... SET PARALLELISM` / `RENAME` ([`restart_around`]). The stop-and-restart
//! sequence (pause barrier rounds, stop readers first, put state back, change the
//! catalog, respawn, release, run a round) is [`restart_jobs`], written once; the walks
//! over view dependencies are [`region`] and [`readers_of`].

use super::Engine;
use super::materialized_views::plan_graph;
use crate::catalog::{Relation, RelationKind};
use crate::error::Result;
use crate::stream::graph::{FragmentInput, StreamGraph};
use crate::stream::job::{JobOutput, JobStateLocation};

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
fn spawn_job(
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
        &|r| {
            let rel = engine
                .catalog
                .get_by_id(r.id)
                .ok_or_else(|| crate::error::EddyError::undefined_table(&r.name))?;
            provider.state_table_for(&rel)
        },
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
        let region = region(rel, &relations);
        let checkpoint_holds_region = engine
            .restored
            .as_ref()
            .is_some_and(|m| region.iter().all(|r| m.jobs.contains(&r.name)));
        let states_fit = region.iter().all(|r| can_resume.get(&r.id) == Some(&true));
        let resume = checkpoint_holds_region && states_fit;
        let resumed_at = engine.checkpoints.committed_epoch();
        if resume {
            tracing::info!(job = %rel.name, epoch = resumed_at, "job resumes from the checkpoint");
        } else {
            tracing::info!(job = %rel.name, checkpoint_holds_region, states_fit, "job starts afresh");
        }
        reads_changes |= restart_job(engine, rel, resume, resumed_at).await?;
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
        rel.time_zone.as_deref(),
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
async fn region_can_resume(
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
/// (`resume`: its state of epoch `resumed_at`), or afresh with its view emptied and its
/// internal state deleted. Returns whether the job reads tables or views (a barrier then
/// brings their rows in).
async fn restart_job(
    engine: &Engine,
    rel: &Relation,
    resume: bool,
    resumed_at: u64,
) -> Result<bool> {
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
        _ => {
            // Afresh, the sink's rows all come again after the committed epoch.
            let resumed_at = if resume {
                resumed_at
            } else {
                engine.checkpoints.committed_epoch()
            };
            super::sinks::job_output(engine, rel, &graph, Some(resumed_at)).await?
        }
    };
    spawn_job(engine, rel, &graph, output, resume)
}

/// Where restarted jobs take their state from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RestartFrom {
    /// What they wrote at the last barrier: barrier rounds are paused first, so that is
    /// one epoch for all of them (a change of parallelism or name).
    LastBarrier,
    /// The last committed checkpoint (a failed job's own state is not trusted).
    CommittedCheckpoint,
}

/// Stops running `jobs` (a region, or a view and its readers; in creation order), makes
/// a catalog `change` while they are stopped, and starts them again as the catalog now
/// has them, all from the state `from` names if every one of them can resume, else all
/// afresh (one started afresh would feed the others, or be fed, twice). Barrier rounds
/// are paused throughout; a round runs after, so the next checkpoint records the jobs
/// as they now are (and jobs reading tables or views get their rows). The jobs run again
/// whether `change` succeeded or not; its result is returned.
pub(super) async fn restart_jobs(
    engine: &Engine,
    jobs: &[Relation],
    from: RestartFrom,
    change: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let paused = engine.checkpoints.pause().await;
    // Readers first, so no job feeds a stopped one.
    for r in jobs.iter().rev() {
        engine.jobs.stop_and_wait(&r.name).await;
    }
    let restored = match from {
        RestartFrom::LastBarrier => true,
        RestartFrom::CommittedCheckpoint => restore_from_checkpoint(engine, jobs).await?,
    };
    // The epoch whose state the jobs resume with: every job has passed the last barrier
    // (rounds are paused), and keeps only what it wrote at barriers.
    let resumed_at = match from {
        RestartFrom::LastBarrier => *paused,
        RestartFrom::CommittedCheckpoint => engine.checkpoints.committed_epoch(),
    };
    let changed = change();
    let relations = engine.catalog.relations();
    let jobs: Vec<Relation> = jobs
        .iter()
        .filter_map(|r| engine.catalog.get_by_id(r.id))
        .collect();
    let resume = restored && region_can_resume(engine, &jobs, &relations).await?;
    for r in &jobs {
        restart_job(engine, r, resume, resumed_at).await?;
    }
    std::mem::drop(paused);
    engine.checkpoints.run_round().await;
    changed
}

/// Puts back the state of `jobs` as of the last committed checkpoint; `false` if it
/// does not hold them all (no checkpoint yet, or a job failed or started after it).
async fn restore_from_checkpoint(engine: &Engine, jobs: &[Relation]) -> Result<bool> {
    let staging = engine.checkpoints.hold_staging().await;
    let committed = engine.checkpoints.committed_epoch();
    if committed == 0 {
        return Ok(false);
    }
    let (manifest, dir) =
        crate::checkpoint::recovery::fetch(&engine.config, engine.checkpoints.storage(), committed)
            .await?;
    if !jobs.iter().all(|r| manifest.jobs.contains(&r.name)) {
        return Ok(false);
    }
    crate::checkpoint::recovery::restore_relations(&engine.store, &dir, manifest.epoch, jobs)?;
    std::mem::drop(staging);
    Ok(true)
}

/// Restarts a job and every job reading its view (directly or not) around a catalog
/// `change`, from their state at the last barrier (jobs reading tables replay the
/// tables' logged changes since it).
pub(super) async fn restart_around(
    engine: &Engine,
    rel: &Relation,
    change: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let jobs = readers_of(rel, &engine.catalog.relations());
    let changed = restart_jobs(engine, &jobs, RestartFrom::LastBarrier, change).await;
    // A renamed job's run under its old name is listed until removed.
    if engine
        .catalog
        .get_by_id(rel.id)
        .is_some_and(|now| now.name != rel.name)
    {
        engine.jobs.stop(&rel.name);
    }
    changed
}

/// `rel` (if it has a job) and the jobs of every materialized view and sink reading it,
/// directly or through other views, in creation order.
fn readers_of(rel: &Relation, relations: &[Relation]) -> Vec<Relation> {
    let mut found = vec![rel.clone()];
    let mut frontier = vec![rel.id];
    while let Some(id) = frontier.pop() {
        for r in relations {
            if r.depends_on.contains(&id) && !found.iter().any(|f| f.id == r.id) {
                frontier.push(r.id);
                found.push(r.clone());
            }
        }
    }
    // Plain views and indexes over the view have no job of their own.
    found.retain(has_job);
    found.sort_by_key(|r| r.id);
    found
}

fn has_job(r: &Relation) -> bool {
    matches!(r.kind, RelationKind::MaterializedView | RelationKind::Sink)
}

/// The materialized views and sinks connected to `start` through `depends_on`, in
/// creation order.
pub(super) fn region(start: &Relation, relations: &[Relation]) -> Vec<Relation> {
    let mut found = vec![start.clone()];
    let mut frontier = vec![start.clone()];
    while let Some(current) = frontier.pop() {
        for r in relations.iter().filter(|r| has_job(r)) {
            let linked = r.depends_on.contains(&current.id) || current.depends_on.contains(&r.id);
            if linked && !found.iter().any(|f| f.id == r.id) {
                found.push(r.clone());
                frontier.push(r.clone());
            }
        }
    }
    found.sort_by_key(|r| r.id);
    found
}
