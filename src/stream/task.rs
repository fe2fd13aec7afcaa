//! [`Task`]: one subtask of a fragment — its input, its chain of operators (called
//! directly, one chunk at a time) and where its output goes.

use super::barrier_align::AlignedInputs;
use super::dispatch::Dispatcher;
use super::job::{JobInfo, TaskInfo};
use super::operators::Operator;
use super::watermark::WatermarkGenerator;
use super::{Barrier, Message, StreamChunk, Watermark};
use crate::connectors::SplitReader;
use crate::error::{EddyError, Result};
use crate::state::StateWrites;
use crate::state::{OperatorState, StateTable};
use futures::FutureExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::watch;

/// Rows a source split reads at a time.
const SOURCE_BATCH_ROWS: usize = 1024;
/// How often a source held off by full state caches looks again (eviction elsewhere may
/// have made room before the next barrier).
const FULL_CACHE_RECHECK: Duration = Duration::from_millis(20);
/// How long a source whose splits all had nothing new waits before polling again.
const IDLE_SOURCE_WAIT: Duration = Duration::from_millis(10);

pub enum TaskInput {
    /// Reads connector splits; barriers arrive on their own channel.
    Connector {
        /// The splits this subtask reads, by split index.
        readers: Vec<(usize, Box<dyn SplitReader>)>,
        projection: Option<Vec<usize>>,
        /// This subtask's share of the source's rate (0: as fast as possible).
        rows_per_second: f64,
        barriers: UnboundedReceiver<Barrier>,
        watermark: Option<WatermarkGenerator>,
        /// After how long without rows the subtask tells downstream it is idle (sources
        /// with a watermark only).
        idle_timeout: Option<Duration>,
    },
    /// Reads channels (from upstream tasks or a change log), after an optional snapshot.
    Merge(MergeInput),
}

/// See [`TaskInput::Merge`].
pub struct MergeInput {
    pub snapshot: Vec<StreamChunk>,
    pub projection: Option<Vec<usize>>,
    pub inputs: Box<AlignedInputs>,
    /// For a change log of a table with `WATERMARK FOR`.
    pub watermark: Option<WatermarkGenerator>,
    /// For a change log: the coordinator's barriers, which end the stream once the
    /// log has ended (a view whose job finished). While the log is open its own
    /// barriers count and these are ignored.
    pub injector: Option<UnboundedReceiver<Barrier>>,
    /// For a change log of a table: the key under which this stream's position in
    /// the table's log is recorded at barriers (in the task's `positions`).
    pub table_log: Option<usize>,
}

pub enum TaskOutput {
    Dispatch(Dispatcher),
    /// Writes into a view's state table. Changes wait in `pending` until the next
    /// barrier: a view's state only ever holds whole epochs.
    Materialize {
        table: Arc<StateTable>,
        publisher: usize,
        pending: Vec<StreamChunk>,
    },
    Blackhole {
        throttle: Option<Throttle>,
    },
    /// A sink connector's writer.
    Sink(Box<dyn super::sink::SinkWriter>),
}

/// Keeps a stream to a rate: how long to wait so that `rows` rows took at least
/// `rows / rows_per_second` seconds since the start.
pub struct Throttle {
    rows_per_second: f64,
    started: Instant,
    rows: u64,
}

impl Throttle {
    pub fn new(rows_per_second: f64) -> Self {
        Self {
            rows_per_second,
            started: Instant::now(),
            rows: 0,
        }
    }

    /// Counts `rows` more rows; the time to wait before going on.
    pub fn wait_for(&mut self, rows: u64) -> Option<Duration> {
        self.rows += rows;
        let due = Duration::from_secs_f64(self.rows as f64 / self.rows_per_second);
        due.checked_sub(self.started.elapsed())
            .filter(|d| !d.is_zero())
    }
}

/// Per split index: the recorded offset and encoded watermark.
pub type SplitPositions = std::collections::HashMap<usize, (u64, Option<Vec<u8>>)>;

/// Where a source subtask records its splits' positions (and watermark) at barriers.
pub struct SourcePositions {
    pub state: OperatorState,
    /// Per split: the encoded position staged for the next barrier's write.
    staged: Vec<(usize, Vec<u8>)>,
    /// Splits that have ended, with their final offsets.
    ended: Vec<(usize, u64)>,
    /// For a source with `error.policy = 'dead_letter'`.
    dead_letters: Option<DeadLetters>,
}

/// The malformed records of a source subtask, kept with why they were skipped in the
/// job's dead-letter table, written with the positions at the barrier (so a restore from
/// a checkpoint keeps exactly the letters of the records before its positions).
pub struct DeadLetters {
    state: OperatorState,
    source: String,
    fragment: usize,
    staged: Vec<(Vec<u8>, Vec<u8>)>,
}

impl DeadLetters {
    pub fn new(state: OperatorState, source: String, fragment: usize) -> Self {
        Self {
            state,
            source,
            fragment,
            staged: vec![],
        }
    }

    /// Stages the records a split rejected in a batch read from `position`; each is
    /// keyed by `fragment | split | position | index in the batch`.
    fn stage(
        &mut self,
        split: usize,
        position: u64,
        rejected: Vec<crate::connectors::records::Rejected>,
    ) {
        for (index, r) in rejected.into_iter().enumerate() {
            let mut key = Vec::with_capacity(20);
            key.extend_from_slice(&(self.fragment as u32).to_be_bytes());
            key.extend_from_slice(&(split as u32).to_be_bytes());
            key.extend_from_slice(&position.to_be_bytes());
            key.extend_from_slice(&(index as u32).to_be_bytes());
            let value = serde_json::json!({
                "source": self.source, "record": r.record, "error": r.error,
            });
            self.staged.push((key, value.to_string().into_bytes()));
        }
    }

    fn write(&mut self, batch: &mut StateWrites) {
        for (key, value) in self.staged.drain(..) {
            self.state.put_unkeyed(batch, &key, &value);
        }
    }
}

impl SourcePositions {
    pub fn new(state: OperatorState) -> Self {
        Self {
            state,
            staged: vec![],
            ended: vec![],
            dead_letters: None,
        }
    }

    /// Keeps the source's malformed records (`error.policy = 'dead_letter'`).
    pub fn keep_dead_letters(&mut self, dead_letters: DeadLetters) {
        self.dead_letters = Some(dead_letters);
    }

    /// The recorded offset and watermark of each split (a job restarting from a
    /// checkpoint; none for a new job).
    pub fn load(state: &OperatorState) -> Result<SplitPositions> {
        let mut positions = std::collections::HashMap::new();
        state.scan_unkeyed(|k, v| {
            if k.len() == 4 && v.len() >= 8 {
                let split = u32::from_be_bytes(k.try_into().expect("length checked")) as usize;
                let offset = u64::from_le_bytes(v[..8].try_into().expect("length checked"));
                let watermark = (v.len() > 8).then(|| v[8..].to_vec());
                positions.insert(split, (offset, watermark));
            }
            Ok(())
        })?;
        Ok(positions)
    }

    /// Stages every split's current position for the next write.
    fn stage(
        &mut self,
        job: &JobInfo,
        fragment: usize,
        readers: &mut [(usize, Box<dyn SplitReader>)],
        watermark: &Option<WatermarkGenerator>,
    ) -> Result<()> {
        let watermark = match watermark {
            Some(g) => g.encode()?,
            None => None,
        };
        self.staged.clear();
        let mut lags = job.lags.lock();
        for (split, reader) in readers.iter_mut() {
            if let Some(lag) = reader.lag() {
                lags.insert(format!("{fragment}/{split}"), lag);
            }
        }
        std::mem::drop(lags);
        let offsets = readers
            .iter()
            .map(|(split, r)| (*split, r.offset()))
            .chain(self.ended.iter().copied());
        let mut shown = job.positions.lock();
        for (split, offset) in offsets {
            shown.insert(format!("{fragment}/{split}"), offset);
            let mut value = offset.to_le_bytes().to_vec();
            if let Some(w) = &watermark {
                value.extend_from_slice(w);
            }
            self.staged.push((split, value));
        }
        Ok(())
    }

    /// Stages a change stream's position in its table's log (and its watermark) under
    /// `key` for the next write.
    fn stage_log_position(
        &mut self,
        key: usize,
        position: u64,
        watermark: &Option<WatermarkGenerator>,
    ) -> Result<()> {
        let mut value = position.to_le_bytes().to_vec();
        if let Some(w) = watermark
            .as_ref()
            .map(|g| g.encode())
            .transpose()?
            .flatten()
        {
            value.extend_from_slice(&w);
        }
        self.staged.push((key, value));
        Ok(())
    }

    fn write(&mut self, batch: &mut StateWrites) {
        for (split, value) in self.staged.drain(..) {
            self.state
                .put_unkeyed(batch, &(split as u32).to_be_bytes(), &value);
        }
        if let Some(letters) = &mut self.dead_letters {
            letters.write(batch);
        }
    }
}

/// When a source subtask is idle: no rows for its idle timeout, announced once until
/// rows come again.
pub struct IdleSource {
    timeout: Option<Duration>,
    last_rows: Instant,
    announced: bool,
}

impl IdleSource {
    fn new(timeout: Option<Duration>) -> Self {
        Self {
            timeout,
            last_rows: Instant::now(),
            announced: false,
        }
    }

    fn rows_read(&mut self) {
        self.last_rows = Instant::now();
        self.announced = false;
    }

    /// Whether the subtask has just become idle (true once per idle spell).
    fn announce_now(&mut self) -> bool {
        let due = self
            .timeout
            .is_some_and(|t| !self.announced && self.last_rows.elapsed() >= t);
        self.announced |= due;
        due
    }
}

pub struct Task {
    pub info: Arc<TaskInfo>,
    pub input: TaskInput,
    pub chain: Vec<Box<dyn Operator>>,
    /// The internal state tables of each operator of the chain (none for most).
    pub states: Vec<Vec<OperatorState>>,
    /// For a connector subtask: where its splits' positions go.
    pub positions: Option<SourcePositions>,
    pub output: TaskOutput,
    /// Set for subtasks of the job's last fragment: they acknowledge barriers.
    pub terminal_subtask: Option<usize>,
}

fn add_time(counter: &AtomicU64, since: Instant) {
    counter.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

/// Resolves once the job is told to stop.
async fn stopped(rx: &mut watch::Receiver<bool>) {
    while !*rx.borrow_and_update() {
        if rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

fn project(chunk: StreamChunk, projection: &Option<Vec<usize>>) -> Result<StreamChunk> {
    Ok(match projection {
        Some(p) => StreamChunk {
            batch: chunk.batch.project(p)?,
            ..chunk
        },
        None => chunk,
    })
}

impl Task {
    pub async fn run(mut self, job: Arc<JobInfo>) {
        let mut input = std::mem::replace(
            &mut self.input,
            TaskInput::Merge(MergeInput {
                snapshot: vec![],
                projection: None,
                inputs: Box::new(AlignedInputs::new(vec![])),
                watermark: None,
                injector: None,
                table_log: None,
            }),
        );
        // A panic in an operator (a bug) fails the job like an error does, instead of
        // leaving it waiting forever for this task's barriers.
        let result = std::panic::AssertUnwindSafe(self.run_input(&job, &mut input))
            .catch_unwind()
            .await
            .unwrap_or_else(|panic| Err(EddyError::internal(panic_message(&panic))));
        if let Err(e) = result {
            job.fail(e.report());
        }
        if let TaskOutput::Materialize {
            table, publisher, ..
        } = &self.output
        {
            table.changes().end(*publisher);
        }
        if let Some(subtask) = self.terminal_subtask {
            job.ack(subtask, u64::MAX);
        }
        // Close the output channels before the job can be seen as finished.
        drop(self);
        drop(input);
        job.task_ended();
    }

    async fn run_input(&mut self, job: &JobInfo, input: &mut TaskInput) -> Result<()> {
        // State from the last checkpoint, if the job had any.
        for (op, tables) in self.chain.iter_mut().zip(&self.states) {
            if !tables.is_empty() {
                op.restore(tables)?;
            }
        }
        let initial = super::operators::initial_output(&mut self.chain)?;
        if !self.emit(job, initial).await? {
            return Ok(());
        }
        match input {
            TaskInput::Connector {
                readers,
                projection,
                rows_per_second,
                barriers,
                watermark,
                idle_timeout,
            } => {
                let idle = IdleSource::new(*idle_timeout);
                self.run_connector(
                    job,
                    readers,
                    projection,
                    *rows_per_second,
                    barriers,
                    watermark,
                    idle,
                )
                .await
            }
            TaskInput::Merge(merge) => self.run_merge(job, merge).await,
        }
    }

    // The connector input's parts, taken apart by `run_input`.
    #[allow(clippy::too_many_arguments)]
    async fn run_connector(
        &mut self,
        job: &JobInfo,
        readers: &mut Vec<(usize, Box<dyn SplitReader>)>,
        projection: &Option<Vec<usize>>,
        rows_per_second: f64,
        barriers: &mut UnboundedReceiver<Barrier>,
        watermark: &mut Option<WatermarkGenerator>,
        mut idle_source: IdleSource,
    ) -> Result<()> {
        let mut stop = job.stop_receiver();
        let batch_rows = if rows_per_second > 0.0 {
            SOURCE_BATCH_ROWS.min((rows_per_second as usize).max(1))
        } else {
            SOURCE_BATCH_ROWS
        };
        let started = Instant::now();
        let mut read = 0u64;
        let mut malformed_reported = 0u64;
        let mut malformed_ended = 0u64;
        let mut next = 0usize;
        let mut idle_splits = 0usize;
        let cache_budget = self
            .positions
            .as_ref()
            .map(|p| p.state.store().cache_budget().clone());
        while !readers.is_empty() {
            // A split that must be read whole before the first barrier holds barriers
            // back until it has ended (and left `readers`).
            let holding_barriers = readers.iter().any(|(_, r)| r.before_first_barrier());
            while let Some(barrier) = (!holding_barriers)
                .then(|| barriers.try_recv().ok())
                .flatten()
            {
                self.stage_positions(job, readers, watermark)?;
                if !self.barrier(job, barrier).await? {
                    return Ok(());
                }
            }
            if job.is_stopped() {
                return Ok(());
            }
            if let Some(budget) = cache_budget.as_ref().filter(|b| b.is_full()) {
                // State caches are full of changes only a barrier makes evictable: ask
                // for one and read nothing until it has passed (or room was made).
                budget.want_barrier();
                let waiting = Instant::now();
                tokio::select! {
                    _ = stopped(&mut stop) => return Ok(()),
                    _ = tokio::time::sleep(FULL_CACHE_RECHECK) => {}
                    Some(barrier) = barriers.recv() => {
                        self.stage_positions(job, readers, watermark)?;
                        if !self.barrier(job, barrier).await? {
                            return Ok(());
                        }
                    }
                }
                add_time(&self.info.backpressure_ns, waiting);
                continue;
            }
            let busy = Instant::now();
            next %= readers.len();
            let read_from = readers[next].1.offset();
            let batch = readers[next].1.next_batch(batch_rows)?;
            let rejected = readers[next].1.take_rejected();
            if !rejected.is_empty()
                && let Some(letters) = self
                    .positions
                    .as_mut()
                    .and_then(|p| p.dead_letters.as_mut())
            {
                letters.stage(readers[next].0, read_from, rejected);
            }
            let Some(batch) = batch else {
                let (split, reader) = readers.remove(next);
                malformed_ended += reader.malformed();
                if let Some(p) = &mut self.positions {
                    p.ended.push((split, reader.offset()));
                }
                continue;
            };
            next += 1;
            let malformed =
                malformed_ended + readers.iter().map(|(_, r)| r.malformed()).sum::<u64>();
            job.malformed_rows
                .fetch_add(malformed - malformed_reported, Ordering::Relaxed);
            malformed_reported = malformed;
            if batch.num_rows() == 0 {
                if !readers[next - 1].1.waits_for_data() {
                    continue;
                }
                // Nothing new in this split (a topic with no new messages): once every
                // split had nothing, wait a moment instead of spinning.
                idle_splits += 1;
                if idle_splits >= readers.len() {
                    idle_splits = 0;
                    let idle = Instant::now();
                    tokio::select! {
                        _ = tokio::time::sleep(IDLE_SOURCE_WAIT) => {}
                        _ = stopped(&mut stop) => return Ok(()),
                        Some(barrier) = barriers.recv() => {
                            self.stage_positions(job, readers, watermark)?;
                            if !self.barrier(job, barrier).await? {
                                return Ok(());
                            }
                        }
                    }
                    add_time(&self.info.idle_ns, idle);
                    if idle_source.announce_now() && !self.announce_idle().await {
                        return Ok(());
                    }
                }
                continue;
            }
            idle_splits = 0;
            idle_source.rows_read();
            let rows = batch.num_rows() as u64;
            read += rows;
            job.rows_read.fetch_add(rows, Ordering::Relaxed);
            if !self
                .ingest(
                    job,
                    0,
                    StreamChunk::inserts(batch),
                    projection,
                    watermark,
                    busy,
                )
                .await?
            {
                return Ok(());
            }
            if rows_per_second > 0.0 {
                // Keep to the configured rate: the time `read` rows should have taken.
                let due = Duration::from_secs_f64(read as f64 / rows_per_second);
                let elapsed = started.elapsed();
                if due > elapsed {
                    let idle = Instant::now();
                    tokio::select! {
                        _ = tokio::time::sleep(due - elapsed) => {}
                        _ = stopped(&mut stop) => return Ok(()),
                        Some(barrier) = barriers.recv() => {
                            self.stage_positions(job, readers, watermark)?;
                            if !self.barrier(job, barrier).await? {
                                return Ok(());
                            }
                        }
                    }
                    add_time(&self.info.idle_ns, idle);
                }
            } else {
                tokio::task::yield_now().await;
            }
        }
        // Every split has ended: the stream ends at the next barrier.
        self.stage_positions(job, readers, watermark)?;
        self.end_at_next_barrier(job, barriers).await
    }

    /// Tells every downstream subtask this source subtask is idle (its watermark no longer
    /// holds theirs back until it sends rows again); `false` when downstream is gone.
    async fn announce_idle(&mut self) -> bool {
        match &mut self.output {
            TaskOutput::Dispatch(dispatcher) => dispatcher.broadcast(Message::Idle).await,
            _ => true,
        }
    }

    /// Stages the splits' positions for the barrier about to be handled.
    fn stage_positions(
        &mut self,
        job: &JobInfo,
        readers: &mut [(usize, Box<dyn SplitReader>)],
        watermark: &Option<WatermarkGenerator>,
    ) -> Result<()> {
        match &mut self.positions {
            Some(p) => p.stage(job, self.info.fragment, readers, watermark),
            None => Ok(()),
        }
    }

    /// Writes the state of the epoch the barrier closes: every stateful operator's
    /// changes and the source positions, in one atomic write.
    fn write_state(&mut self) -> Result<()> {
        let mut batch = StateWrites::default();
        let mut store = None;
        for (op, tables) in self.chain.iter_mut().zip(&self.states) {
            if let Some(table) = tables.first() {
                op.checkpoint(tables, &mut batch)?;
                store = Some(table.store().clone());
            }
        }
        if let Some(p) = &mut self.positions {
            p.write(&mut batch);
            store = Some(p.state.store().clone());
        }
        match store {
            Some(store) if !batch.is_empty() => store.write(batch.into_batch()),
            _ => Ok(()),
        }
    }

    /// Waits for the coordinator's next barrier and passes it on as this stream's final
    /// one (unless the job is stopped first).
    async fn end_at_next_barrier(
        &mut self,
        job: &JobInfo,
        barriers: &mut UnboundedReceiver<Barrier>,
    ) -> Result<()> {
        let mut stop = job.stop_receiver();
        let idle = Instant::now();
        let barrier = tokio::select! {
            b = barriers.recv() => b,
            _ = stopped(&mut stop) => None,
        };
        add_time(&self.info.idle_ns, idle);
        if let Some(barrier) = barrier {
            self.barrier(job, barrier.into_final()).await?;
        }
        Ok(())
    }

    /// Runs a chunk read from a source, a change log or input `input` of the chain's
    /// first operator through the chain: late rows dropped and the watermark advanced
    /// first if the relation declares one. `Ok(false)` when downstream is gone.
    async fn ingest(
        &mut self,
        job: &JobInfo,
        input: usize,
        chunk: StreamChunk,
        projection: &Option<Vec<usize>>,
        watermark: &mut Option<WatermarkGenerator>,
        busy: Instant,
    ) -> Result<bool> {
        let (chunk, advanced) = match watermark {
            Some(generator) => {
                let (chunk, late, advanced) = generator.observe(chunk)?;
                job.late_rows.fetch_add(late, Ordering::Relaxed);
                (chunk, advanced)
            }
            None => (chunk, None),
        };
        let outputs = self.process(input, project(chunk, projection)?)?;
        add_time(&self.info.busy_ns, busy);
        if !self.emit(job, outputs).await? {
            return Ok(false);
        }
        match advanced {
            Some(w) => self.watermark(job, input, w).await,
            None => Ok(true),
        }
    }

    /// Runs a watermark of input `input` through the chain and passes on what comes
    /// out; `Ok(false)` when downstream is gone.
    async fn watermark(
        &mut self,
        job: &JobInfo,
        input: usize,
        watermark: Watermark,
    ) -> Result<bool> {
        let busy = Instant::now();
        let (chunks, watermarks) =
            super::operators::run_watermark(&mut self.chain, input, watermark)?;
        add_time(&self.info.busy_ns, busy);
        if !self.emit(job, chunks).await? {
            return Ok(false);
        }
        if let TaskOutput::Dispatch(dispatcher) = &mut self.output {
            for w in watermarks {
                if !dispatcher.broadcast(Message::Watermark(w)).await {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    async fn run_merge(&mut self, job: &JobInfo, merge: &mut MergeInput) -> Result<()> {
        let snapshot = std::mem::take(&mut merge.snapshot);
        let MergeInput {
            projection,
            inputs,
            watermark,
            injector,
            table_log,
            ..
        } = merge;
        let table_log = *table_log;
        let mut stop = job.stop_receiver();
        // Rows read from a table (its rows, or the logged changes a resuming job missed,
        // then its changes) count as the job's input, as a source's do.
        let count_read = |rows: usize| {
            if table_log.is_some() {
                job.rows_read.fetch_add(rows as u64, Ordering::Relaxed);
            }
        };
        for chunk in snapshot {
            count_read(chunk.num_rows());
            if !self
                .ingest(job, 0, chunk, projection, watermark, Instant::now())
                .await?
            {
                return Ok(());
            }
        }
        // The coordinator's last barrier, and the last epoch this stream passed on: a
        // log that ends after its last barrier (its view's job finished) must still pass
        // the coordinator's barriers that the log never will, or the round that sent one
        // would wait for this job forever.
        let mut last_injected: Option<Barrier> = None;
        let mut last_passed = 0u64;
        loop {
            let idle = Instant::now();
            let message = tokio::select! {
                m = inputs.next() => m,
                _ = stopped(&mut stop) => return Ok(()),
                // The log's own barriers count while it is open.
                Some(b) = async { injector.as_mut()?.recv().await } => {
                    last_injected = Some(b);
                    continue;
                }
            };
            add_time(&self.info.idle_ns, idle);
            match message {
                // A change log that ended (its view's job finished) ends this stream at
                // the coordinator's next barrier; closed task channels mean the job
                // stopped.
                None => {
                    if let Some(barrier) = last_injected.filter(|b| b.epoch > last_passed) {
                        self.barrier(job, barrier.into_final()).await?;
                        return Ok(());
                    }
                    return match injector {
                        Some(barriers) => self.end_at_next_barrier(job, barriers).await,
                        None => Ok(()),
                    };
                }
                // Consumed by the alignment (it only marks a channel).
                Some((_, Message::Idle)) => {}
                Some((input, Message::Watermark(w))) => {
                    if !self.watermark(job, input, w).await? {
                        return Ok(());
                    }
                }
                Some((input, Message::Chunk(chunk))) => {
                    count_read(chunk.num_rows());
                    if !self
                        .ingest(job, input, chunk, projection, watermark, Instant::now())
                        .await?
                    {
                        return Ok(());
                    }
                }
                Some((_, Message::Barrier(barrier))) => {
                    if let (Some(key), Some(position), Some(positions)) =
                        (table_log, barrier.log_position, &mut self.positions)
                    {
                        positions.stage_log_position(key, position, watermark)?;
                    }
                    let barrier = Barrier {
                        log_position: None,
                        ..barrier
                    };
                    last_passed = barrier.epoch;
                    if !self.barrier(job, barrier).await? {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Runs a chunk of input `input` through the chain.
    fn process(&mut self, input: usize, chunk: StreamChunk) -> Result<Vec<StreamChunk>> {
        self.info
            .rows_in
            .fetch_add(chunk.num_rows() as u64, Ordering::Relaxed);
        super::operators::run_chain(&mut self.chain, input, chunk)
    }

    /// Delivers output chunks; `Ok(false)` when downstream is gone.
    async fn emit(&mut self, job: &JobInfo, chunks: Vec<StreamChunk>) -> Result<bool> {
        // Every call into the chain is followed by an `emit` before anything else runs
        // on this thread: the place to collect the rows its expressions failed on.
        job.expression_errors
            .fetch_add(super::expression_errors::take(), Ordering::Relaxed);
        for chunk in chunks {
            let rows = chunk.num_rows() as u64;
            if rows == 0 {
                continue;
            }
            self.info.rows_out.fetch_add(rows, Ordering::Relaxed);
            match &mut self.output {
                TaskOutput::Dispatch(dispatcher) => {
                    let waiting = Instant::now();
                    let delivered = dispatcher.send_chunk(chunk).await?;
                    add_time(&self.info.backpressure_ns, waiting);
                    if !delivered {
                        return Ok(false);
                    }
                }
                TaskOutput::Materialize { pending, .. } => pending.push(chunk),
                TaskOutput::Sink(writer) => {
                    let busy = Instant::now();
                    writer.write(chunk).await?;
                    add_time(&self.info.busy_ns, busy);
                    job.rows_written.fetch_add(rows, Ordering::Relaxed);
                }
                TaskOutput::Blackhole { throttle } => {
                    job.rows_written.fetch_add(rows, Ordering::Relaxed);
                    if let Some(wait) = throttle.as_mut().and_then(|t| t.wait_for(rows)) {
                        let busy = Instant::now();
                        tokio::time::sleep(wait).await;
                        add_time(&self.info.busy_ns, busy);
                    }
                }
            }
        }
        Ok(true)
    }

    /// Handles an aligned barrier: at a final one the chain first releases what it holds
    /// (closing every window); then the operators release the epoch's changes, the
    /// view's pending changes are written and the barrier is passed on (or, at the job's
    /// output, acknowledged). `Ok(false)` when the task is done: downstream is gone or
    /// the barrier was final.
    async fn barrier(&mut self, job: &JobInfo, barrier: Barrier) -> Result<bool> {
        if barrier.is_final {
            let busy = Instant::now();
            let outputs = super::operators::finish_chain(&mut self.chain)?;
            add_time(&self.info.busy_ns, busy);
            if !self.emit(job, outputs).await? {
                return Ok(false);
            }
        }
        // What the operators hold until the end of the epoch (aggregates' changes).
        let busy = Instant::now();
        let outputs = super::operators::barrier_chain(&mut self.chain)?;
        add_time(&self.info.busy_ns, busy);
        if !self.emit(job, outputs).await? {
            return Ok(false);
        }
        let busy = Instant::now();
        self.write_state()?;
        add_time(&self.info.busy_ns, busy);
        let delivered = match &mut self.output {
            TaskOutput::Dispatch(dispatcher) => {
                let waiting = Instant::now();
                let delivered = dispatcher.broadcast(Message::Barrier(barrier)).await;
                add_time(&self.info.backpressure_ns, waiting);
                delivered
            }
            TaskOutput::Materialize {
                table,
                publisher,
                pending,
            } => {
                let mut stop = job.stop_receiver();
                for chunk in std::mem::take(pending) {
                    let busy = Instant::now();
                    table.apply_chunk(*publisher, &chunk)?;
                    job.rows_written
                        .fetch_add(chunk.num_rows() as u64, Ordering::Relaxed);
                    add_time(&self.info.busy_ns, busy);
                    // Views reading this one that fell behind hold it back here.
                    let waiting = Instant::now();
                    tokio::select! {
                        _ = table.changes().wait_for_readers(*publisher) => {}
                        _ = stopped(&mut stop) => return Ok(false),
                    }
                    add_time(&self.info.backpressure_ns, waiting);
                }
                table.changes().barrier(*publisher, barrier);
                true
            }
            TaskOutput::Blackhole { .. } => true,
            TaskOutput::Sink(writer) => {
                let busy = Instant::now();
                writer.barrier(barrier.epoch).await?;
                add_time(&self.info.busy_ns, busy);
                true
            }
        };
        if let Some(subtask) = self.terminal_subtask {
            job.ack(subtask, barrier.epoch);
        }
        Ok(delivered && !barrier.is_final)
    }
}

/// What a caught panic said.
fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown cause".to_string());
    format!("a task panicked: {text}")
}
