//! Jobs: the running dataflow of a materialized view or sink.
//!
//! [`JobRegistry::spawn`] turns a [`StreamGraph`] into tasks — one per subtask of every
//! fragment — wires them with bounded channels, places them in worker slots and starts
//! them. The registry also injects barriers (`FLUSH` waits for one to pass through every
//! job) and keeps each job's progress and each task's counters for the system tables.

use super::barrier_align::{AlignedInputs, Input, WatermarkMerge};
use super::dispatch::{CHANNEL_CAPACITY, Dispatcher};
use super::graph::{FragmentInput, StreamGraph, Terminal};
use super::task::{DeadLetters, MergeInput, SourcePositions, Task, TaskInput, TaskOutput};
use super::workers::Workers;
use super::{Barrier, StreamChunk};
use crate::error::Result;
use crate::state::operator_state::internal_table_id;
use crate::state::{OperatorState, StateStore, StateTable};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, channel, unbounded_channel};
use tokio::sync::{Notify, watch};

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

/// Counters of one task, for `eddy_catalog.tasks`. Times are in nanoseconds: busy
/// (running operators, reading a source), backpressured (waiting to send downstream),
/// idle (waiting for input).
pub struct TaskInfo {
    pub job: String,
    pub fragment: usize,
    pub subtask: usize,
    pub slot: usize,
    pub worker: usize,
    /// The operators chained in the task, e.g. `Source -> Filter -> Project`.
    pub operators: String,
    pub rows_in: AtomicU64,
    pub rows_out: AtomicU64,
    pub busy_ns: AtomicU64,
    pub backpressure_ns: AtomicU64,
    pub idle_ns: AtomicU64,
}

/// A job's progress, shared between its tasks and whoever asks.
pub struct JobInfo {
    pub name: String,
    pub state: Mutex<JobState>,
    pub error: Mutex<Option<String>>,
    pub rows_read: AtomicU64,
    /// Rows the job produced: written to its view, or delivered to its sink.
    pub rows_written: AtomicU64,
    /// Source records skipped because they did not fit the source's schema.
    pub malformed_rows: AtomicU64,
    /// Source rows dropped for arriving behind the watermark.
    pub late_rows: AtomicU64,
    /// Rows in which an expression failed and gave NULL ([`super::expression_errors`]).
    pub expression_errors: AtomicU64,
    pub started: SystemTime,
    pub finished: Mutex<Option<SystemTime>>,
    pub tasks: Vec<Arc<TaskInfo>>,
    /// How many times the job was restarted after failing, and the error that made it
    /// restart last.
    pub restarts: AtomicU64,
    pub last_failure: Mutex<Option<String>>,
    /// Source split offsets as of the last barrier: `fragment/split` → rows read.
    pub positions: Mutex<BTreeMap<String, u64>>,
    /// Source splits' lag as of the last barrier, where the connector knows it:
    /// `fragment/split` → records waiting upstream.
    pub lags: Mutex<BTreeMap<String, u64>>,
    /// Where the job's rows go: `Materialize`, or the sink's name (`KafkaSink`, ...).
    pub output: &'static str,
    /// The job's internal state tables: (table id, fragment, what keeps it).
    pub state_tables: Vec<(u32, usize, String)>,
    stopped: AtomicBool,
    stop_signal: watch::Sender<bool>,
    /// Tasks still running; the last one to end settles the job's state.
    running_tasks: AtomicUsize,
    /// Per subtask of the last fragment: the last barrier epoch it passed on
    /// (`u64::MAX` once it has ended).
    acked: Mutex<Vec<u64>>,
    /// The last barrier epoch any subtask of the last fragment passed on: once the job
    /// has finished, its final results are readable when this epoch is committed.
    pub last_epoch: AtomicU64,
    /// Barrier inlets: one per connector source subtask and per change stream subtask
    /// (which uses them only once its change log has ended).
    injectors: Vec<UnboundedSender<Barrier>>,
    /// Tables the job reads changes from: barriers are injected into their change logs.
    tables: Vec<Arc<StateTable>>,
    registry_notify: Arc<Notify>,
    /// Where a failed job's name is sent, for the failover supervisor.
    failures: UnboundedSender<String>,
}

impl JobInfo {
    pub fn is_running(&self) -> bool {
        *self.state.lock() == JobState::Running
    }

    /// Records a task's failure: the job stops and shows the error.
    pub(super) fn fail(&self, message: String) {
        tracing::warn!(job = %self.name, "job failed: {message}");
        let mut error = self.error.lock();
        if error.is_none() {
            *error = Some(message);
        }
        drop(error);
        self.stop_signal.send_replace(true);
    }

    pub(super) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst) || *self.stop_signal.borrow()
    }

    pub(super) fn stop_receiver(&self) -> watch::Receiver<bool> {
        self.stop_signal.subscribe()
    }

    pub(super) fn ack(&self, subtask: usize, epoch: u64) {
        if epoch != u64::MAX {
            self.last_epoch.fetch_max(epoch, Ordering::SeqCst);
        }
        if let Some(a) = self.acked.lock().get_mut(subtask) {
            *a = (*a).max(epoch);
        }
        self.registry_notify.notify_waiters();
    }

    /// A task ended; the last one settles the job's state.
    pub(super) fn task_ended(&self) {
        if self.running_tasks.fetch_sub(1, Ordering::SeqCst) == 1 {
            if !self.stopped.load(Ordering::SeqCst) {
                let state = if self.error.lock().is_some() {
                    JobState::Failed
                } else {
                    JobState::Finished
                };
                *self.state.lock() = state;
                *self.finished.lock() = Some(SystemTime::now());
                if state == JobState::Failed {
                    let _ = self.failures.send(self.name.clone());
                }
            }
            self.registry_notify.notify_waiters();
        }
    }

    fn has_passed(&self, epoch: u64) -> bool {
        !self.is_running() || self.acked.lock().iter().all(|a| *a >= epoch)
    }
}

/// The ordinal of the internal table where a job's change streams of tables record their
/// positions in the tables' logs (past any operator's: those count up from 0).
const TABLE_LOG_POSITIONS_ORDINAL: u8 = u8::MAX;

fn table_log_positions_id(relation_id: u32) -> u32 {
    internal_table_id(relation_id, TABLE_LOG_POSITIONS_ORDINAL)
}

/// The ordinal of the internal table where a job's sources with `error.policy =
/// 'dead_letter'` keep their malformed records (`eddy_catalog.dead_letters`).
const DEAD_LETTERS_ORDINAL: u8 = u8::MAX - 1;
/// How the dead-letter table is listed in [`JobInfo::state_tables`].
pub const DEAD_LETTERS: &str = "dead letters";

pub fn dead_letters_id(relation_id: u32) -> u32 {
    internal_table_id(relation_id, DEAD_LETTERS_ORDINAL)
}

/// Whether a job that reads tables recorded its positions in their change logs at a
/// barrier (a job run by an Eddy without table change logs did not: it cannot resume).
pub fn has_table_log_positions(store: &Arc<StateStore>, relation_id: u32) -> Result<bool> {
    let state = OperatorState::new(table_log_positions_id(relation_id), store.clone(), 0, 1);
    Ok(!SourcePositions::load(&state)?.is_empty())
}

/// Where a job keeps its state: internal tables derived from its relation's id.
pub struct JobStateLocation {
    pub relation_id: u32,
    pub store: Arc<StateStore>,
    /// The job resumes from a checkpoint: views it reads are restored to the same epoch,
    /// so it reads only their changes, not their current rows.
    pub resume: bool,
}

/// Where a job's rows go.
pub enum JobOutput {
    /// A materialized view's state table.
    View(Arc<StateTable>),
    /// Counted and discarded (`connector = 'blackhole'` sinks, for measuring the engine),
    /// optionally taking at most `rows_per_second` rows per second per subtask (a slow
    /// consumer, to see backpressure).
    Blackhole { rows_per_second: f64 },
    /// A sink connector: each subtask of the last fragment writes through its own writer.
    Sink(Arc<dyn super::sink::SinkFactory>),
}

impl JobOutput {
    pub fn terminal(&self) -> Terminal {
        match self {
            JobOutput::View(_) => Terminal::Materialize,
            JobOutput::Blackhole { .. } => Terminal::Blackhole,
            JobOutput::Sink(factory) => Terminal::Sink(factory.name()),
        }
    }

    /// A blackhole sink with its options (`blackhole.rows.per.second`, default 0: no limit).
    pub fn blackhole(options: &std::collections::BTreeMap<String, String>) -> Result<Self> {
        let rows_per_second = match options.get("blackhole.rows.per.second") {
            Some(v) => crate::connectors::parse_option::<f64>("blackhole.rows.per.second", v)?,
            None => 0.0,
        };
        Ok(JobOutput::Blackhole { rows_per_second })
    }
}

pub struct JobRegistry {
    jobs: Mutex<BTreeMap<String, Arc<JobInfo>>>,
    workers: Workers,
    notify: Arc<Notify>,
    failures: UnboundedSender<String>,
    failed_jobs: Mutex<Option<UnboundedReceiver<String>>>,
}

impl JobRegistry {
    pub fn new(workers: usize, slots_per_worker: usize) -> std::io::Result<Self> {
        let (failures, failed_jobs) = unbounded_channel();
        Ok(Self {
            failures,
            failed_jobs: Mutex::new(Some(failed_jobs)),
            jobs: Mutex::new(BTreeMap::new()),
            workers: Workers::start(workers, slots_per_worker)?,
            notify: Arc::new(Notify::new()),
        })
    }

    /// Reports a job as failed again (its restart did not succeed).
    pub fn report_failure(&self, name: &str) {
        let _ = self.failures.send(name.to_string());
    }

    /// The names of jobs as they fail (once: for the failover supervisor).
    pub fn take_failures(&self) -> Option<UnboundedReceiver<String>> {
        self.failed_jobs.lock().take()
    }

    pub fn worker_count(&self) -> usize {
        self.workers.worker_count()
    }

    pub fn jobs(&self) -> Vec<Arc<JobInfo>> {
        self.jobs.lock().values().cloned().collect()
    }

    /// Every job's source split offsets as of the last barrier, by job name.
    pub fn source_positions(&self) -> BTreeMap<String, BTreeMap<String, u64>> {
        self.jobs()
            .into_iter()
            .filter(|j| !j.positions.lock().is_empty())
            .map(|j| (j.name.clone(), j.positions.lock().clone()))
            .collect()
    }

    /// Stops a job (its tasks end at their next step) and forgets it.
    pub fn stop(&self, name: &str) {
        if let Some(job) = self.jobs.lock().remove(name) {
            job.stopped.store(true, Ordering::SeqCst);
            job.stop_signal.send_replace(true);
        }
    }

    /// Stops a job that is about to be started again and waits until every one of its
    /// tasks has ended (so none of them touches the view or its change log any more). The
    /// job stays listed, in its last state, until its new run replaces it.
    pub async fn stop_and_wait(&self, name: &str) {
        let Some(job) = self.jobs.lock().get(name).cloned() else {
            return;
        };
        job.stopped.store(true, Ordering::SeqCst);
        job.stop_signal.send_replace(true);
        while job.running_tasks.load(Ordering::SeqCst) > 0 {
            let _ = tokio::time::timeout(Duration::from_millis(20), self.notify.notified()).await;
        }
    }

    /// Injects the barrier of `epoch` into every running job and waits until each has
    /// passed it to its output: every write made before the call is then in every view.
    /// The checkpoint coordinator calls this, one epoch at a time. Returns the names of
    /// the jobs whose state the epoch holds: those registered when the barrier was
    /// injected (finished ones included) that have not failed.
    pub async fn inject_and_wait(&self, epoch: u64) -> Vec<String> {
        let barrier = Barrier::new(epoch);
        let all = self.jobs();
        let jobs: Vec<Arc<JobInfo>> = all.iter().filter(|j| j.is_running()).cloned().collect();
        let mut tables_done = HashSet::new();
        for job in &jobs {
            for injector in &job.injectors {
                let _ = injector.send(barrier);
            }
            for table in &job.tables {
                if tables_done.insert(table.table_id()) {
                    table.changes().barrier(0, barrier);
                }
            }
        }
        while !jobs.iter().all(|j| j.has_passed(epoch)) {
            // Woken by acks; the timeout covers a wake-up that raced the check.
            let _ = tokio::time::timeout(Duration::from_millis(20), self.notify.notified()).await;
        }
        // A job that failed (before or during the round) may have written some of its
        // tasks' state for a later barrier than others: its state is not this epoch's.
        all.iter()
            .filter(|j| j.error.lock().is_none() && !j.stopped.load(Ordering::SeqCst))
            .map(|j| j.name.clone())
            .collect()
    }

    /// Starts a job: builds its tasks, wires them and places them in slots. `table_of`
    /// gives the state table of a table or view the job reads changes from. The job's
    /// operators and sources resume from whatever state `state` holds for it (none for a
    /// new job).
    pub fn spawn(
        &self,
        name: &str,
        graph: &StreamGraph,
        output: JobOutput,
        table_of: &dyn Fn(&super::graph::InputRelation) -> Result<Arc<StateTable>>,
        state: &JobStateLocation,
    ) -> Result<Arc<JobInfo>> {
        let fragments = &graph.fragments;
        let last = fragments.len() - 1;
        // Channels: inputs[f][subtask] (each with the index of its fragment edge) and
        // dispatch senders[f][subtask][downstream subtask].
        let mut inputs: Vec<Vec<Vec<(usize, Input)>>> = fragments
            .iter()
            .map(|f| (0..f.parallelism).map(|_| Vec::new()).collect())
            .collect();
        let mut dispatchers: Vec<Vec<Option<Dispatcher>>> = fragments
            .iter()
            .map(|f| (0..f.parallelism).map(|_| None).collect())
            .collect();
        for (down, fragment) in fragments.iter().enumerate() {
            let FragmentInput::Upstream(edges) = &fragment.input else {
                continue;
            };
            for (edge, (up, exchange)) in edges.iter().enumerate() {
                let forward = matches!(exchange, super::graph::Exchange::Forward);
                for (i, dispatcher) in dispatchers[*up].iter_mut().enumerate() {
                    let mut senders = Vec::new();
                    let targets: Vec<usize> = if forward {
                        vec![i]
                    } else {
                        (0..fragment.parallelism).collect()
                    };
                    for j in targets {
                        let (tx, rx) = channel(CHANNEL_CAPACITY);
                        senders.push(tx);
                        inputs[down][j].push((edge, Input::Task(rx)));
                    }
                    *dispatcher = Some(Dispatcher::new(exchange, senders)?);
                }
            }
        }

        let (stop_signal, _) = watch::channel(false);
        let mut tasks: Vec<(super::workers::Placement, Task)> = Vec::new();
        let mut infos = Vec::new();
        let mut injectors = Vec::new();
        let mut tables = Vec::new();
        let terminal = output.terminal();
        if let JobOutput::View(table) = &output {
            table.changes().restart(fragments[last].parallelism);
        }
        // Internal state tables, numbered over the graph: a connector's positions, then
        // each stateful operator of the chain, fragment by fragment.
        let mut ordinal: u8 = 0;
        let mut state_tables = Vec::new();
        // Where the change streams of tables record their log positions at barriers.
        let log_positions_state = OperatorState::new(
            table_log_positions_id(state.relation_id),
            state.store.clone(),
            0,
            1,
        );
        let log_positions = if state.resume {
            SourcePositions::load(&log_positions_state)?
        } else {
            Default::default()
        };
        let mut next_table = || {
            let id = internal_table_id(state.relation_id, ordinal);
            ordinal = ordinal.wrapping_add(1);
            id
        };
        for (f, fragment) in fragments.iter().enumerate() {
            let operator_state = |table_id: u32, subtask: usize| {
                OperatorState::new(table_id, state.store.clone(), subtask, fragment.parallelism)
            };
            let source_table =
                matches!(fragment.input, FragmentInput::Connector { .. }).then(&mut next_table);
            if let Some(id) = source_table {
                state_tables.push((id, f, "source positions".to_string()));
            }
            let positions = match source_table {
                Some(id) => SourcePositions::load(&operator_state(id, 0))?,
                None => Default::default(),
            };
            // A source with `error.policy = 'dead_letter'` keeps its malformed records.
            let dead_letter_source = match &fragment.input {
                FragmentInput::Connector { source, .. }
                    if crate::connectors::error_policy(&source.options)?
                        == crate::connectors::ErrorPolicy::DeadLetter =>
                {
                    let id = dead_letters_id(state.relation_id);
                    if !state_tables.iter().any(|(t, ..)| *t == id) {
                        state_tables.push((id, f, DEAD_LETTERS.to_string()));
                    }
                    Some(source.name.clone())
                }
                _ => None,
            };
            let mut op_tables: Vec<Vec<u32>> = Vec::new();
            let mut multi_input_head = false;
            for (position, spec) in fragment.chain.iter().enumerate() {
                let op = (spec.build)()?;
                multi_input_head |= position == 0 && op.input_count() > 1;
                let ids: Vec<u32> = (0..op.state_tables()).map(|_| next_table()).collect();
                for (k, id) in ids.iter().enumerate() {
                    let what = if ids.len() > 1 {
                        format!("{} (table {k})", op.name())
                    } else {
                        op.name().to_string()
                    };
                    state_tables.push((*id, f, what));
                }
                op_tables.push(ids);
            }
            // A join needs each side's watermark; a union passes on their minimum.
            let merge = if multi_input_head {
                WatermarkMerge::PerInput
            } else {
                WatermarkMerge::AcrossInputs
            };
            let reads_table = matches!(
                &fragment.input,
                FragmentInput::Changes { relation, .. } if relation.is_table
            );
            // Per subtask of a change stream: its part of the snapshot and its receivers
            // (a view is read by several subtasks, each owning a share of the stream keys).
            let mut changes: Vec<Option<(Vec<StreamChunk>, Vec<Input>)>> = match &fragment.input {
                FragmentInput::Changes { relation, .. } => {
                    let table = table_of(relation)?;
                    if reads_table {
                        table.enable_log()?;
                    }
                    // A new job starts from the current rows; a resuming one from where
                    // its checkpoint left the table's log (a view it reads is restored to
                    // the same epoch as the job, so it needs only the view's changes).
                    let readers =
                        table
                            .changes()
                            .subscribe_partitioned(fragment.parallelism, |last| {
                                if !state.resume {
                                    return table.snapshot();
                                }
                                if !reads_table {
                                    return Ok(vec![]);
                                }
                                let (position, _) = log_positions.get(&f).ok_or_else(|| {
                                    crate::error::EddyError::internal(format!(
                                        "job {name} has no position in the change log of {}",
                                        relation.name
                                    ))
                                })?;
                                table.logged_changes_after(*position, last.unwrap_or(0))
                            })?;
                    if reads_table {
                        tables.push(table.clone());
                    }
                    readers
                        .into_iter()
                        .map(|(snapshot, receivers)| {
                            Some((
                                snapshot,
                                receivers.into_iter().map(Input::Changes).collect(),
                            ))
                        })
                        .collect()
                }
                _ => vec![],
            };
            for subtask in 0..fragment.parallelism {
                let placement = self.workers.place(subtask);
                let input = match &fragment.input {
                    FragmentInput::Connector {
                        source,
                        spec,
                        projection,
                        watermark,
                    } => {
                        let splits: Vec<usize> = (0..spec.split_count())
                            .filter(|s| s % fragment.parallelism == subtask)
                            .collect();
                        let readers = splits
                            .iter()
                            .map(|s| {
                                let offset = positions.get(s).map(|p| p.0).unwrap_or(0);
                                (*s, spec.split_reader(*s, offset))
                            })
                            .collect::<Vec<_>>();
                        let mut generator = watermark
                            .clone()
                            .map(super::watermark::WatermarkGenerator::new);
                        if let Some(generator) = &mut generator {
                            for s in &splits {
                                if let Some((_, Some(w))) = positions.get(s) {
                                    generator.restore(w)?;
                                }
                            }
                        }
                        let share = readers.len() as f64 / spec.split_count().max(1) as f64;
                        let (tx, rx) = unbounded_channel();
                        injectors.push(tx);
                        TaskInput::Connector {
                            readers,
                            projection: projection.clone(),
                            rows_per_second: spec.rows_per_second() as f64 * share,
                            barriers: rx,
                            idle_timeout: match &generator {
                                Some(_) => crate::connectors::idle_timeout(&source.options)?,
                                None => None,
                            },
                            watermark: generator,
                        }
                    }
                    FragmentInput::Changes {
                        projection,
                        watermark,
                        ..
                    } => {
                        let (snapshot, receivers) = changes
                            .get_mut(subtask)
                            .and_then(Option::take)
                            .ok_or_else(|| {
                                crate::error::EddyError::internal(
                                    "a change stream subtask without its receivers",
                                )
                            })?;
                        let (tx, rx) = unbounded_channel();
                        injectors.push(tx);
                        let mut generator = watermark
                            .clone()
                            .map(super::watermark::WatermarkGenerator::new);
                        if let (Some(generator), Some((_, Some(w)))) =
                            (&mut generator, log_positions.get(&f))
                        {
                            generator.restore(w)?;
                        }
                        TaskInput::Merge(MergeInput {
                            snapshot,
                            projection: projection.clone(),
                            inputs: Box::new(AlignedInputs::new(receivers)),
                            watermark: generator,
                            injector: Some(rx),
                            table_log: reads_table.then_some(f),
                        })
                    }
                    FragmentInput::Upstream(_) => TaskInput::Merge(MergeInput {
                        snapshot: vec![],
                        projection: None,
                        inputs: Box::new(AlignedInputs::with_inputs(
                            std::mem::take(&mut inputs[f][subtask]),
                            merge,
                        )),
                        watermark: None,
                        injector: None,
                        table_log: None,
                    }),
                };
                let chain = fragment
                    .chain
                    .iter()
                    .map(|spec| (spec.build)())
                    .collect::<Result<Vec<_>>>()?;
                let task_output = if f == last {
                    match &output {
                        JobOutput::View(table) => TaskOutput::Materialize {
                            table: table.clone(),
                            publisher: subtask,
                            pending: Vec::new(),
                        },
                        JobOutput::Blackhole { rows_per_second } => TaskOutput::Blackhole {
                            throttle: (*rows_per_second > 0.0)
                                .then(|| super::task::Throttle::new(*rows_per_second)),
                        },
                        JobOutput::Sink(factory) => TaskOutput::Sink(factory.writer(subtask)?),
                    }
                } else {
                    TaskOutput::Dispatch(dispatchers[f][subtask].take().ok_or_else(|| {
                        crate::error::EddyError::internal("fragment without a downstream edge")
                    })?)
                };
                let mut names = vec![
                    match &fragment.input {
                        FragmentInput::Connector { .. } => "Source",
                        FragmentInput::Changes { .. } => "Changes",
                        FragmentInput::Upstream(_) => "Merge",
                    }
                    .to_string(),
                ];
                names.extend(chain.iter().map(|o| o.name().to_string()));
                if f == last {
                    names.push(terminal.name().into());
                }
                let info = Arc::new(TaskInfo {
                    job: name.to_string(),
                    fragment: f,
                    subtask,
                    slot: placement.slot,
                    worker: placement.worker,
                    operators: names.join(" -> "),
                    rows_in: AtomicU64::new(0),
                    rows_out: AtomicU64::new(0),
                    busy_ns: AtomicU64::new(0),
                    backpressure_ns: AtomicU64::new(0),
                    idle_ns: AtomicU64::new(0),
                });
                infos.push(info.clone());
                tasks.push((
                    placement,
                    Task {
                        info,
                        input,
                        states: op_tables
                            .iter()
                            .map(|ids| ids.iter().map(|id| operator_state(*id, subtask)).collect())
                            .collect(),
                        positions: match source_table {
                            Some(id) => {
                                let mut positions =
                                    SourcePositions::new(operator_state(id, subtask));
                                if let Some(source) = &dead_letter_source {
                                    positions.keep_dead_letters(DeadLetters::new(
                                        operator_state(dead_letters_id(state.relation_id), subtask),
                                        source.clone(),
                                        f,
                                    ));
                                }
                                Some(positions)
                            }
                            None => reads_table
                                .then(|| SourcePositions::new(log_positions_state.clone())),
                        },
                        chain,
                        output: task_output,
                        terminal_subtask: (f == last).then_some(subtask),
                    },
                ));
            }
        }
        if state_tables.len() >= DEAD_LETTERS_ORDINAL as usize {
            return Err(crate::error::EddyError::new(
                crate::error::sqlstate::FEATURE_NOT_SUPPORTED,
                format!(
                    "a job with more than {DEAD_LETTERS_ORDINAL} stateful operators is not supported"
                ),
            ));
        }
        if !tables.is_empty() {
            state_tables.push((
                table_log_positions_id(state.relation_id),
                0,
                "table log positions".to_string(),
            ));
        }
        let job = Arc::new(JobInfo {
            name: name.to_string(),
            state: Mutex::new(JobState::Running),
            last_epoch: AtomicU64::new(0),
            error: Mutex::new(None),
            rows_read: AtomicU64::new(0),
            rows_written: AtomicU64::new(0),
            malformed_rows: AtomicU64::new(0),
            expression_errors: AtomicU64::new(0),
            late_rows: AtomicU64::new(0),
            started: SystemTime::now(),
            finished: Mutex::new(None),
            tasks: infos,
            restarts: AtomicU64::new(0),
            last_failure: Mutex::new(None),
            positions: Mutex::new(BTreeMap::new()),
            lags: Mutex::new(BTreeMap::new()),
            output: terminal.name(),
            state_tables,
            stopped: AtomicBool::new(false),
            stop_signal,
            running_tasks: AtomicUsize::new(tasks.len()),
            acked: Mutex::new(vec![0; fragments[last].parallelism]),
            injectors,
            tables,
            registry_notify: self.notify.clone(),
            failures: self.failures.clone(),
        });
        self.stop(name);
        self.jobs.lock().insert(name.to_string(), job.clone());
        for (placement, task) in tasks {
            let job = job.clone();
            self.workers.spawn(placement, task.run(job));
        }
        Ok(job)
    }
}
