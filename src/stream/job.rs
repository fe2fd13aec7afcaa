//! Running jobs: one task per materialized view that reads the source, runs the operator
//! chain and writes the view's state table. The [`JobRegistry`] knows every job and its
//! progress (the `eddy_catalog.jobs` table shows it).

use super::operators::run_chain;
use super::planner::JobPlan;
use super::{Op, StreamChunk};
use crate::connectors::ConnectorSpec;
use crate::error::Result;
use crate::state::StateTable;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// Rows a source split reads at a time.
const SOURCE_BATCH_ROWS: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    Running,
    Finished,
    Failed,
}

impl JobState {
    pub fn as_str(&self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Finished => "finished",
            JobState::Failed => "failed",
        }
    }
}

/// A job's progress, shared between its task and whoever asks.
pub struct JobInfo {
    pub name: String,
    pub state: Mutex<JobState>,
    pub error: Mutex<Option<String>>,
    pub rows_read: AtomicU64,
    /// Rows the job produced: written to its view, or delivered to its sink.
    pub rows_written: AtomicU64,
    /// Source records skipped because they did not fit the source's schema.
    pub malformed_rows: AtomicU64,
    pub started: SystemTime,
    pub finished: Mutex<Option<SystemTime>>,
    stop: AtomicBool,
}

#[derive(Default)]
pub struct JobRegistry {
    jobs: Mutex<BTreeMap<String, Arc<JobInfo>>>,
}

impl JobRegistry {
    pub fn jobs(&self) -> Vec<Arc<JobInfo>> {
        self.jobs.lock().values().cloned().collect()
    }

    /// Stops a job (its task ends at the next batch) and forgets it.
    pub fn stop(&self, name: &str) {
        if let Some(job) = self.jobs.lock().remove(name) {
            job.stop.store(true, Ordering::SeqCst);
        }
    }

    /// Starts a job: reads its source from the beginning and delivers the results.
    pub fn spawn(&self, name: &str, plan: JobPlan, output: JobOutput) -> Result<Arc<JobInfo>> {
        let spec = ConnectorSpec::from_options(&plan.source.arrow_schema(), &plan.source.options)?;
        let info = Arc::new(JobInfo {
            name: name.to_string(),
            state: Mutex::new(JobState::Running),
            error: Mutex::new(None),
            rows_read: AtomicU64::new(0),
            rows_written: AtomicU64::new(0),
            malformed_rows: AtomicU64::new(0),
            started: SystemTime::now(),
            finished: Mutex::new(None),
            stop: AtomicBool::new(false),
        });
        self.stop(name);
        self.jobs.lock().insert(name.to_string(), info.clone());
        let task_info = info.clone();
        tokio::spawn(async move {
            let result = run(plan, spec, output, &task_info).await;
            let state = match result {
                Ok(()) => JobState::Finished,
                Err(e) => {
                    tracing::warn!(job = %task_info.name, "job failed: {e}");
                    *task_info.error.lock() = Some(e.message.clone());
                    JobState::Failed
                }
            };
            if !task_info.stop.load(Ordering::SeqCst) {
                *task_info.state.lock() = state;
                *task_info.finished.lock() = Some(SystemTime::now());
            }
        });
        Ok(info)
    }
}

/// Where a job's rows go.
pub enum JobOutput {
    /// A materialized view's state table.
    View(Arc<StateTable>),
    /// Counted and discarded (`connector = 'blackhole'` sinks, for measuring the engine).
    Blackhole,
}

async fn run(
    mut plan: JobPlan,
    spec: ConnectorSpec,
    output: JobOutput,
    info: &JobInfo,
) -> Result<()> {
    let mut splits = spec.split_readers();
    let mut finished_malformed = 0;
    let started = Instant::now();
    let rate = spec.rows_per_second();
    let batch_rows = if rate > 0 {
        SOURCE_BATCH_ROWS.min(rate.max(1) as usize)
    } else {
        SOURCE_BATCH_ROWS
    };
    while !splits.is_empty() {
        let mut i = 0;
        while i < splits.len() {
            if info.stop.load(Ordering::SeqCst) {
                return Ok(());
            }
            let Some(batch) = splits[i].next_batch(batch_rows)? else {
                finished_malformed += splits.remove(i).malformed();
                continue;
            };
            i += 1;
            let malformed = finished_malformed + splits.iter().map(|s| s.malformed()).sum::<u64>();
            info.malformed_rows.store(malformed, Ordering::Relaxed);
            let rows = batch.num_rows() as u64;
            let batch = match &plan.source_projection {
                Some(p) => batch.project(p)?,
                None => batch,
            };
            for chunk in run_chain(&mut plan.operators, StreamChunk::inserts(batch))? {
                if let JobOutput::View(view) = &output {
                    materialize(view, &chunk)?;
                }
                info.rows_written
                    .fetch_add(chunk.num_rows() as u64, Ordering::Relaxed);
            }
            let total = info.rows_read.fetch_add(rows, Ordering::Relaxed) + rows;
            if rate > 0 {
                // Keep to the configured rate: the time `total` rows should have taken.
                let due = Duration::from_secs_f64(total as f64 / rate as f64);
                let elapsed = started.elapsed();
                if due > elapsed {
                    tokio::time::sleep(due - elapsed).await;
                }
            } else {
                tokio::task::yield_now().await;
            }
        }
    }
    Ok(())
}

/// Writes a chunk into the view's state: keyed rows replace or delete their key; rows
/// of an append-only view are added.
fn materialize(view: &StateTable, chunk: &StreamChunk) -> Result<()> {
    let batch = crate::state::state_table::conform(&chunk.batch, view.schema())?;
    match &chunk.keys {
        Some(keys) => {
            let deletes: Vec<bool> = chunk
                .ops
                .iter()
                .map(|o| matches!(o, Op::Delete | Op::UpdateDelete))
                .collect();
            view.write_keyed(keys, &deletes, &batch)
        }
        None => {
            view.upsert(&batch)?;
            Ok(())
        }
    }
}
