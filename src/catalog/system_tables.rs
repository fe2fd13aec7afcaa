//! `eddy_catalog`: system tables about what the server is doing.
//!
//! - `eddy_catalog.jobs`: every streaming job (one per materialized view) with its state
//!   (`running`, `finished` once a bounded source is exhausted, `failed`), the rows it has
//!   read and written, and when it started and finished; how often it was restarted after
//!   a failure, and that failure. Tests and benchmarks wait on it.
//! - `eddy_catalog.tasks`: every task of every running job — fragment, subtask, slot,
//!   worker, the operators chained in it, rows in and out, and the share of its time it
//!   was busy, backpressured (waiting to send) and idle (waiting for input).
//! - `eddy_catalog.checkpoints`: recent checkpoints — epoch, start, duration, bytes and
//!   files uploaded, total files and state size, whether committed (and why not) — and
//!   whether each is the last committed one.
//! - `eddy_catalog.state_cache`: one row — the memory operators' state caches may use
//!   (`--state-cache-mb`) and use now, how many entries were evicted and read back from
//!   RocksDB, and how many barriers came early because caches were full of changes.
//! - `eddy_catalog.sinks`: every sink — connector, state, rows written, restarts, last
//!   error, last epoch delivered and how many epochs it is behind.
//! - `eddy_catalog.source_splits`: every source split of every job — position and, for
//!   Kafka, the consumer lag of its partition.
//! - `eddy_catalog.dead_letters`: the malformed records of every source read with
//!   `error.policy = 'dead_letter'`, per job — the record as read, why it was skipped,
//!   and where (split and position).
//! - `eddy_catalog.connector_tables`: every table fed by a connector (Kafka, PostgreSQL
//!   CDC) — its connector and how many malformed messages it skipped; a Kafka table's
//!   dead letters (`error.policy = 'dead_letter'`) are in `dead_letters`, under its name.
//! - `eddy_catalog.state_tables`: every internal state table of every running job — its
//!   fragment, the operator keeping it, and the rows (keys) and bytes (keys and values)
//!   it holds now in RocksDB, counted by scanning it.

use crate::checkpoint::Coordinator;
use crate::stream::job::JobRegistry;
use arrow::array::{
    BooleanArray, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use async_trait::async_trait;
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::common::Result as DFResult;
use datafusion::datasource::TableType;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

pub const SYSTEM_SCHEMA: &str = "eddy_catalog";

/// What system tables read: the running jobs and the checkpoint coordinator.
pub struct SystemSources {
    pub jobs: Arc<JobRegistry>,
    pub checkpoints: Arc<Coordinator>,
    pub cache_budget: Arc<crate::state::CacheBudget>,
    pub store: Arc<crate::state::StateStore>,
    /// The catalog, for the tables fed by connectors.
    pub catalog: Arc<super::Catalog>,
}

/// Builds a system table's rows from the running system, at scan time.
pub(super) type RowBuilder = fn(&SystemSources, SchemaRef) -> DFResult<RecordBatch>;

/// A table whose rows are computed from the running system when it is scanned.
pub struct SystemTable {
    schema_name: &'static str,
    name: &'static str,
    schema: SchemaRef,
    sources: Arc<SystemSources>,
    rows: RowBuilder,
}

impl std::fmt::Debug for SystemTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.schema_name, self.name)
    }
}

#[derive(Debug)]
pub struct SystemSchema {
    tables: Vec<Arc<SystemTable>>,
}

impl SystemSchema {
    pub fn new(sources: Arc<SystemSources>) -> Self {
        let table = |name, schema, rows| {
            Arc::new(SystemTable {
                schema_name: SYSTEM_SCHEMA,
                name,
                schema,
                sources: sources.clone(),
                rows,
            })
        };
        Self {
            tables: vec![
                table("jobs", jobs_schema(), jobs_rows),
                table("tasks", tasks_schema(), tasks_rows),
                table("checkpoints", checkpoints_schema(), checkpoints_rows),
                table("state_cache", state_cache_schema(), state_cache_rows),
                table("state_tables", state_tables_schema(), state_tables_rows),
                table("sinks", sinks_schema(), sinks_rows),
                table("source_splits", source_splits_schema(), source_splits_rows),
                table("dead_letters", dead_letters_schema(), dead_letters_rows),
                table(
                    "connector_tables",
                    connector_tables_schema(),
                    connector_tables_rows,
                ),
            ],
        }
    }

    /// RisingWave's `rw_catalog` relation lists ([`super::rw_catalog`]).
    pub fn risingwave(sources: Arc<SystemSources>) -> Self {
        Self {
            tables: super::rw_catalog::TABLES
                .iter()
                .map(|(name, rows)| {
                    Arc::new(SystemTable {
                        schema_name: super::rw_catalog::SCHEMA,
                        name,
                        schema: super::rw_catalog::relations_schema(),
                        sources: sources.clone(),
                        rows: *rows,
                    })
                })
                .collect(),
        }
    }

    fn find(&self, name: &str) -> Option<Arc<SystemTable>> {
        self.tables.iter().find(|t| t.name == name).cloned()
    }
}

#[async_trait]
impl SchemaProvider for SystemSchema {
    fn table_names(&self) -> Vec<String> {
        self.tables.iter().map(|t| t.name.to_string()).collect()
    }

    async fn table(&self, name: &str) -> DFResult<Option<Arc<dyn TableProvider>>> {
        Ok(self.find(name).map(|t| t as Arc<dyn TableProvider>))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.find(name).is_some()
    }
}

fn micros(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

#[async_trait]
impl TableProvider for SystemTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let batch = (self.rows)(&self.sources, self.schema.clone())?;
        Ok(MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            self.schema.clone(),
            projection.cloned(),
        )?)
    }
}

fn jobs_schema() -> SchemaRef {
    let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()));
    Arc::new(Schema::new(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("state", DataType::Utf8, false),
        Field::new("rows_read", DataType::Int64, false),
        Field::new("rows_written", DataType::Int64, false),
        Field::new("malformed_rows", DataType::Int64, false),
        Field::new("late_rows", DataType::Int64, false),
        Field::new("started", ts.clone(), false),
        Field::new("finished", ts, true),
        Field::new("error", DataType::Utf8, true),
        Field::new("restarts", DataType::Int64, false),
        Field::new("last_failure", DataType::Utf8, true),
        Field::new("expression_errors", DataType::Int64, false),
    ]))
}

/// A job's state as users see it: a job whose last results are not committed yet — not
/// readable by `SELECT` — is still `running`.
fn shown_state(job: &crate::stream::job::JobInfo, committed: u64) -> &'static str {
    let state = *job.state.lock();
    if state == crate::stream::job::JobState::Finished
        && job.last_epoch.load(Ordering::SeqCst) > committed
    {
        return crate::stream::job::JobState::Running.as_str();
    }
    state.as_str()
}

fn jobs_rows(sources: &SystemSources, schema: SchemaRef) -> DFResult<RecordBatch> {
    let jobs = sources.jobs.jobs();
    let committed = sources.checkpoints.serving_epoch();
    Ok(RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from_iter_values(
                jobs.iter().map(|j| j.name.clone()),
            )),
            Arc::new(StringArray::from_iter_values(
                jobs.iter().map(|j| shown_state(j, committed)),
            )),
            Arc::new(Int64Array::from_iter_values(
                jobs.iter()
                    .map(|j| j.rows_read.load(Ordering::Relaxed) as i64),
            )),
            Arc::new(Int64Array::from_iter_values(
                jobs.iter()
                    .map(|j| j.rows_written.load(Ordering::Relaxed) as i64),
            )),
            Arc::new(Int64Array::from_iter_values(
                jobs.iter()
                    .map(|j| j.malformed_rows.load(Ordering::Relaxed) as i64),
            )),
            Arc::new(Int64Array::from_iter_values(
                jobs.iter()
                    .map(|j| j.late_rows.load(Ordering::Relaxed) as i64),
            )),
            Arc::new(
                TimestampMicrosecondArray::from_iter_values(jobs.iter().map(|j| micros(j.started)))
                    .with_timezone("+00:00"),
            ),
            Arc::new(
                TimestampMicrosecondArray::from_iter(
                    jobs.iter().map(|j| j.finished.lock().map(micros)),
                )
                .with_timezone("+00:00"),
            ),
            Arc::new(StringArray::from_iter(
                jobs.iter().map(|j| j.error.lock().clone()),
            )),
            Arc::new(Int64Array::from_iter_values(
                jobs.iter()
                    .map(|j| j.restarts.load(Ordering::Relaxed) as i64),
            )),
            Arc::new(StringArray::from_iter(
                jobs.iter().map(|j| j.last_failure.lock().clone()),
            )),
            Arc::new(Int64Array::from_iter_values(
                jobs.iter()
                    .map(|j| j.expression_errors.load(Ordering::Relaxed) as i64),
            )),
        ],
    )?)
}

fn sinks_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("connector", DataType::Utf8, false),
        Field::new("state", DataType::Utf8, false),
        Field::new("rows_written", DataType::Int64, false),
        Field::new("restarts", DataType::Int64, false),
        Field::new("last_error", DataType::Utf8, true),
        Field::new("last_epoch", DataType::Int64, false),
        Field::new("lag_epochs", DataType::Int64, false),
    ]))
}

/// Every sink's job: where it writes, how much, the error that last stopped it, and how
/// many barrier epochs behind the newest injected one it is.
fn sinks_rows(sources: &SystemSources, schema: SchemaRef) -> DFResult<RecordBatch> {
    let jobs: Vec<_> = sources
        .jobs
        .jobs()
        .into_iter()
        .filter(|j| j.output != "Materialize")
        .collect();
    let committed = sources.checkpoints.serving_epoch();
    let injected = sources.checkpoints.injected_epoch();
    let connector = |output: &str| {
        output
            .strip_suffix("Sink")
            .unwrap_or(output)
            .to_ascii_lowercase()
    };
    let last_epoch = |j: &crate::stream::job::JobInfo| j.last_epoch.load(Ordering::SeqCst);
    Ok(RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from_iter_values(
                jobs.iter().map(|j| j.name.clone()),
            )),
            Arc::new(StringArray::from_iter_values(
                jobs.iter().map(|j| connector(j.output)),
            )),
            Arc::new(StringArray::from_iter_values(
                jobs.iter().map(|j| shown_state(j, committed)),
            )),
            Arc::new(Int64Array::from_iter_values(
                jobs.iter()
                    .map(|j| j.rows_written.load(Ordering::Relaxed) as i64),
            )),
            Arc::new(Int64Array::from_iter_values(
                jobs.iter()
                    .map(|j| j.restarts.load(Ordering::Relaxed) as i64),
            )),
            Arc::new(StringArray::from_iter(jobs.iter().map(|j| {
                j.error
                    .lock()
                    .clone()
                    .or_else(|| j.last_failure.lock().clone())
            }))),
            Arc::new(Int64Array::from_iter_values(
                jobs.iter().map(|j| last_epoch(j) as i64),
            )),
            Arc::new(Int64Array::from_iter_values(jobs.iter().map(|j| {
                if j.is_running() {
                    injected.saturating_sub(last_epoch(j)) as i64
                } else {
                    0
                }
            }))),
        ],
    )?)
}

fn source_splits_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("job", DataType::Utf8, false),
        Field::new("split", DataType::Utf8, false),
        Field::new("position", DataType::Int64, false),
        Field::new("lag", DataType::Int64, true),
    ]))
}

/// Every source split of every job as of the last barrier: its position (rows read, or
/// for Kafka the next offset + 1) and, where the connector knows it, how many records
/// wait upstream (Kafka's consumer lag per partition).
fn source_splits_rows(sources: &SystemSources, schema: SchemaRef) -> DFResult<RecordBatch> {
    let mut job = Vec::new();
    let mut split = Vec::new();
    let mut position = Vec::new();
    let mut lag = Vec::new();
    for j in sources.jobs.jobs() {
        let lags = j.lags.lock().clone();
        for (s, p) in j.positions.lock().iter() {
            job.push(j.name.clone());
            split.push(s.clone());
            position.push(*p as i64);
            lag.push(lags.get(s).map(|l| *l as i64));
        }
    }
    Ok(RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(job)),
            Arc::new(StringArray::from(split)),
            Arc::new(Int64Array::from(position)),
            Arc::new(Int64Array::from(lag)),
        ],
    )?)
}

fn dead_letters_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("job", DataType::Utf8, false),
        Field::new("source", DataType::Utf8, false),
        Field::new("split", DataType::Utf8, false),
        Field::new("position", DataType::Int64, false),
        Field::new("record", DataType::Utf8, false),
        Field::new("error", DataType::Utf8, false),
    ]))
}

/// The dead letters every job keeps (as of its last barrier), in the order they were
/// read per split. A key is `fragment | split | position | index`, a value the JSON
/// `{source, record, error}` (see `stream::task::DeadLetters`).
fn dead_letters_rows(sources: &SystemSources, schema: SchemaRef) -> DFResult<RecordBatch> {
    let (mut jobs, mut names, mut splits, mut positions, mut records, mut errors) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for job in sources.jobs.jobs() {
        for (id, _, what) in &job.state_tables {
            if what != crate::stream::job::DEAD_LETTERS {
                continue;
            }
            let mut prefix = Vec::new();
            crate::state::keys::encode_state_key(
                *id,
                crate::state::operator_state::UNKEYED_GROUP,
                &[],
                &mut prefix,
            );
            sources
                .store
                .scan_prefix(&prefix, |k, v| {
                    let key = &k[crate::state::keys::KEY_PREFIX_LEN..];
                    if key.len() != 20 {
                        return Ok(());
                    }
                    let number = |range: std::ops::Range<usize>| {
                        key[range].iter().fold(0u64, |n, b| (n << 8) | *b as u64)
                    };
                    let letter: serde_json::Value = serde_json::from_slice(v).unwrap_or_default();
                    let text = |field: &str| letter[field].as_str().unwrap_or("").to_string();
                    jobs.push(job.name.clone());
                    names.push(text("source"));
                    splits.push(format!("{}/{}", number(0..4), number(4..8)));
                    positions.push(number(8..16) as i64);
                    records.push(text("record"));
                    errors.push(text("error"));
                    Ok(())
                })
                .map_err(crate::error::EddyError::into_datafusion)?;
        }
    }
    // Tables fed by connectors keep theirs beside their positions.
    for rel in sources.catalog.relations() {
        if rel.kind != super::RelationKind::Table || !rel.options.contains_key("connector") {
            continue;
        }
        let letters = crate::connectors::table_letters::dead_letters(&sources.store, rel.id)
            .map_err(crate::error::EddyError::into_datafusion)?;
        for letter in letters {
            jobs.push(rel.name.clone());
            names.push(rel.name.clone());
            splits.push(letter.partition.to_string());
            positions.push(letter.offset);
            records.push(letter.record);
            errors.push(letter.error);
        }
    }
    Ok(RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(jobs)),
            Arc::new(StringArray::from(names)),
            Arc::new(StringArray::from(splits)),
            Arc::new(Int64Array::from(positions)),
            Arc::new(StringArray::from(records)),
            Arc::new(StringArray::from(errors)),
        ],
    )?)
}

fn connector_tables_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("connector", DataType::Utf8, false),
        Field::new("malformed_rows", DataType::Int64, false),
    ]))
}

/// Every table fed by a connector, with the malformed messages it skipped (as of its
/// last applied batch).
fn connector_tables_rows(sources: &SystemSources, schema: SchemaRef) -> DFResult<RecordBatch> {
    let (mut names, mut connectors, mut malformed) = (vec![], vec![], vec![]);
    let mut relations = sources.catalog.relations();
    relations.sort_by(|a, b| a.name.cmp(&b.name));
    for rel in relations {
        if rel.kind != super::RelationKind::Table {
            continue;
        }
        let Some(connector) = rel.options.get("connector") else {
            continue;
        };
        let count = crate::connectors::table_letters::malformed_count(&sources.store, rel.id)
            .map_err(crate::error::EddyError::into_datafusion)?;
        names.push(rel.name.clone());
        connectors.push(connector.to_ascii_lowercase());
        malformed.push(count as i64);
    }
    Ok(RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(names)),
            Arc::new(StringArray::from(connectors)),
            Arc::new(Int64Array::from(malformed)),
        ],
    )?)
}

fn tasks_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("job", DataType::Utf8, false),
        Field::new("fragment", DataType::Int32, false),
        Field::new("subtask", DataType::Int32, false),
        Field::new("slot", DataType::Int32, false),
        Field::new("worker", DataType::Int32, false),
        Field::new("operators", DataType::Utf8, false),
        Field::new("rows_in", DataType::Int64, false),
        Field::new("rows_out", DataType::Int64, false),
        Field::new("busy", DataType::Float64, false),
        Field::new("backpressured", DataType::Float64, false),
        Field::new("idle", DataType::Float64, false),
    ]))
}

/// One row per task of every running job; busy/backpressured/idle are shares of the
/// task's accounted time (each between 0 and 1, summing to 1 once it has run).
fn tasks_rows(sources: &SystemSources, schema: SchemaRef) -> DFResult<RecordBatch> {
    let tasks: Vec<_> = sources
        .jobs
        .jobs()
        .into_iter()
        .filter(|j| j.is_running())
        .flat_map(|j| j.tasks.clone())
        .collect();
    let times: Vec<[f64; 3]> = tasks
        .iter()
        .map(|t| {
            let busy = t.busy_ns.load(Ordering::Relaxed) as f64;
            let back = t.backpressure_ns.load(Ordering::Relaxed) as f64;
            let idle = t.idle_ns.load(Ordering::Relaxed) as f64;
            let total = (busy + back + idle).max(1.0);
            [busy / total, back / total, idle / total]
        })
        .collect();
    let int = |f: fn(&crate::stream::job::TaskInfo) -> usize| {
        Arc::new(Int32Array::from_iter_values(
            tasks.iter().map(|t| f(t) as i32),
        )) as arrow::array::ArrayRef
    };
    let share = |i: usize| {
        Arc::new(Float64Array::from_iter_values(times.iter().map(|t| t[i])))
            as arrow::array::ArrayRef
    };
    Ok(RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from_iter_values(
                tasks.iter().map(|t| t.job.clone()),
            )),
            int(|t| t.fragment),
            int(|t| t.subtask),
            int(|t| t.slot),
            int(|t| t.worker),
            Arc::new(StringArray::from_iter_values(
                tasks.iter().map(|t| t.operators.clone()),
            )),
            Arc::new(Int64Array::from_iter_values(
                tasks
                    .iter()
                    .map(|t| t.rows_in.load(Ordering::Relaxed) as i64),
            )),
            Arc::new(Int64Array::from_iter_values(
                tasks
                    .iter()
                    .map(|t| t.rows_out.load(Ordering::Relaxed) as i64),
            )),
            share(0),
            share(1),
            share(2),
        ],
    )?)
}

fn checkpoints_schema() -> SchemaRef {
    let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()));
    Arc::new(Schema::new(vec![
        Field::new("epoch", DataType::Int64, false),
        Field::new("started", ts, false),
        Field::new("duration_ms", DataType::Int64, false),
        Field::new("uploaded_bytes", DataType::Int64, false),
        Field::new("uploaded_files", DataType::Int64, false),
        Field::new("total_files", DataType::Int64, false),
        Field::new("state_bytes", DataType::Int64, false),
        Field::new("committed", DataType::Boolean, false),
        Field::new("last_committed", DataType::Boolean, false),
        Field::new("error", DataType::Utf8, true),
    ]))
}

/// The coordinator's recent checkpoints, oldest first.
fn checkpoints_rows(sources: &SystemSources, schema: SchemaRef) -> DFResult<RecordBatch> {
    let history = sources.checkpoints.history();
    let committed = sources.checkpoints.committed_epoch();
    let int = |f: fn(&crate::checkpoint::coordinator::CheckpointRecord) -> u64| {
        Arc::new(Int64Array::from_iter_values(
            history.iter().map(|c| f(c) as i64),
        )) as arrow::array::ArrayRef
    };
    Ok(RecordBatch::try_new(
        schema,
        vec![
            int(|c| c.epoch),
            Arc::new(
                TimestampMicrosecondArray::from_iter_values(
                    history.iter().map(|c| micros(c.started)),
                )
                .with_timezone("+00:00"),
            ),
            int(|c| c.duration.as_millis() as u64),
            int(|c| c.uploaded_bytes),
            int(|c| c.uploaded_files),
            int(|c| c.total_files),
            int(|c| c.state_bytes),
            Arc::new(BooleanArray::from_iter(
                history.iter().map(|c| Some(c.error.is_none())),
            )),
            Arc::new(BooleanArray::from_iter(
                history
                    .iter()
                    .map(|c| Some(c.error.is_none() && c.epoch == committed)),
            )),
            Arc::new(StringArray::from_iter(
                history.iter().map(|c| c.error.clone()),
            )),
        ],
    )?)
}

fn state_cache_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("limit_bytes", DataType::Int64, false),
        Field::new("used_bytes", DataType::Int64, false),
        Field::new("evictions", DataType::Int64, false),
        Field::new("loads", DataType::Int64, false),
        Field::new("early_barriers", DataType::Int64, false),
    ]))
}

fn state_cache_rows(sources: &SystemSources, schema: SchemaRef) -> DFResult<RecordBatch> {
    let budget = &sources.cache_budget;
    let column = |v: u64| Arc::new(Int64Array::from(vec![v as i64])) as arrow::array::ArrayRef;
    Ok(RecordBatch::try_new(
        schema,
        vec![
            column(budget.limit() as u64),
            column(budget.used() as u64),
            column(budget.evictions()),
            column(budget.loads()),
            column(budget.early_barriers()),
        ],
    )?)
}

fn state_tables_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("job", DataType::Utf8, false),
        Field::new("fragment", DataType::Int32, false),
        Field::new("operator", DataType::Utf8, false),
        Field::new("table_id", DataType::Int64, false),
        Field::new("rows", DataType::Int64, false),
        Field::new("bytes", DataType::Int64, false),
    ]))
}

fn state_tables_rows(sources: &SystemSources, schema: SchemaRef) -> DFResult<RecordBatch> {
    let (mut jobs, mut fragments, mut operators, mut ids, mut rows, mut bytes) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for job in sources.jobs.jobs() {
        for (id, fragment, operator) in &job.state_tables {
            let (n, size) = sources
                .store
                .table_footprint(*id)
                .map_err(crate::error::EddyError::into_datafusion)?;
            jobs.push(job.name.clone());
            fragments.push(*fragment as i32);
            operators.push(operator.clone());
            ids.push(*id as i64);
            rows.push(n as i64);
            bytes.push(size as i64);
        }
    }
    Ok(RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(jobs)),
            Arc::new(Int32Array::from(fragments)),
            Arc::new(StringArray::from(operators)),
            Arc::new(Int64Array::from(ids)),
            Arc::new(Int64Array::from(rows)),
            Arc::new(Int64Array::from(bytes)),
        ],
    )?)
}
