//! Failover: a job whose task fails restarts from the last committed checkpoint, without
//! restarting the server — as Flink's region failover does.
//!
//! The jobs connected to the failed one through the views they read or feed (its
//! "region") stop together, get their state back from the checkpoint (jobs reading tables
//! then replay the tables' logged changes since it) and restart,
//! with barrier rounds paused so that the whole region resumes at one epoch. Jobs outside
//! the region keep running. A job is restarted at most [`MAX_RESTARTS`] times, waiting
//! longer each time; then it stays `failed`, with its error in `eddy_catalog.jobs`. A sink
//! whose target is unreachable is restarted without limit (at most every 30 s), so it
//! resumes by itself once the target is back; meanwhile `eddy_catalog.jobs` shows its
//! restarts and last error.

use super::Engine;
use super::jobs::{RestartFrom, region, restart_jobs};
use crate::catalog::RelationKind;
use crate::error::Result;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// Restarts of one job before it is left failed.
pub const MAX_RESTARTS: u64 = 3;
const FIRST_DELAY: Duration = Duration::from_millis(500);
/// The longest wait between two restarts of a sink.
const MAX_DELAY: Duration = Duration::from_secs(30);

/// Starts the supervisor that restarts failed jobs (on the current tokio runtime).
pub fn start(engine: &Arc<Engine>) {
    let Some(mut failures) = engine.jobs.take_failures() else {
        return;
    };
    let engine: Weak<Engine> = Arc::downgrade(engine);
    tokio::spawn(async move {
        let mut attempts: HashMap<String, u64> = HashMap::new();
        while let Some(name) = failures.recv().await {
            let attempt = attempts.entry(name.clone()).or_insert(0);
            *attempt += 1;
            let attempt = *attempt;
            let Some(is_sink) = engine.upgrade().map(|e| {
                e.catalog
                    .get(&name)
                    .is_some_and(|r| r.kind == RelationKind::Sink)
            }) else {
                return;
            };
            // A sink fails when its target is down: it keeps trying until it is back.
            if attempt > MAX_RESTARTS && !is_sink {
                tracing::warn!(job = %name, "job failed {MAX_RESTARTS} restarts; left failed");
                continue;
            }
            let delay = FIRST_DELAY * 2u32.pow((attempt as u32 - 1).min(16));
            tokio::time::sleep(delay.min(MAX_DELAY)).await;
            let Some(engine) = engine.upgrade() else {
                return;
            };
            match restart_region(&engine, &name, attempt).await {
                Ok(()) => tracing::info!(job = %name, attempt, "job restarted from its checkpoint"),
                Err(e) => {
                    tracing::warn!(job = %name, "cannot restart the job: {e}");
                    engine.jobs.report_failure(&name);
                }
            }
        }
    });
}

async fn restart_region(engine: &Engine, name: &str, attempt: u64) -> Result<()> {
    let relations = engine.catalog.relations();
    let Some(failed) = relations.iter().find(|r| r.name == name).cloned() else {
        return Ok(()); // dropped meanwhile
    };
    let failure = engine
        .jobs
        .jobs()
        .into_iter()
        .find(|j| j.name == name)
        .and_then(|j| j.error.lock().clone());
    let region = region(&failed, &relations);
    restart_jobs(engine, &region, RestartFrom::CommittedCheckpoint, || Ok(())).await?;
    if let Some(job) = engine.jobs.jobs().into_iter().find(|j| j.name == name) {
        job.restarts
            .store(attempt, std::sync::atomic::Ordering::Relaxed);
        *job.last_failure.lock() = failure;
    }
    Ok(())
}
