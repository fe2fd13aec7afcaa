//! Tables fed by PostgreSQL change data capture (`connectors::postgres_cdc`): one task per
//! table copies the upstream table once, then applies its changes as they come.
//!
//! Exactly once across crashes: each upstream transaction is applied to the table whole,
//! and then its end position (LSN) is written to the table's internal state, so every
//! Eddy checkpoint holds the table's rows and a position no later than them. After a
//! restore the task resumes from the restored position, skipping transactions at or
//! before it (re-applying a few keyed upserts or deletes would leave the same rows
//! anyway). The replication slot is advanced only to positions a committed checkpoint
//! holds: a position written while epoch *x* was the last one injected is in every
//! checkpoint after *x*, so when epoch *e* commits the slot may move to the newest
//! position written before epoch *e* was injected.

use super::Engine;
use crate::catalog::Relation;
use crate::connectors::pgoutput::{Message, Value};
use crate::connectors::postgres_cdc::CdcSpec;
use crate::connectors::table_letters;
use crate::error::{EddyError, Result};
use crate::state::operator_state::internal_table_id;
use crate::state::{OperatorState, StateTable};
use arrow::array::{ArrayRef, RecordBatch, StringArray};
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::watch;

/// Rows per batch written to the table while copying the snapshot.
const SNAPSHOT_BATCH_ROWS: usize = 4096;
/// How often the slot is read when it had nothing new.
const POLL_INTERVAL: Duration = Duration::from_millis(200);
/// The longest wait before connecting again after an error.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(10);
/// The key of the applied position in the table's internal state.
const POSITION_KEY: &[u8] = b"lsn";
/// The most changes of one upstream transaction held in memory before they are applied.
const MAX_HELD_CHANGES: usize = 10_000;

/// The running tasks that feed tables (CDC and Kafka tables), by table name.
#[derive(Default)]
pub struct CdcTables {
    tasks: Mutex<HashMap<String, watch::Sender<bool>>>,
    /// Replication slots being dropped, by slot name: a `CREATE TABLE` that reuses the
    /// name waits for the drop first (else the drop could remove the new table's slot).
    slot_drops: Mutex<HashMap<String, tokio::task::JoinHandle<()>>>,
}

impl CdcTables {
    /// Records a table's task (by its stop signal); returns the one it replaces.
    pub(super) fn insert_task(
        &self,
        table: &str,
        stop: watch::Sender<bool>,
    ) -> Option<watch::Sender<bool>> {
        self.tasks.lock().insert(table.to_string(), stop)
    }

    /// Stops a table's task; whether it had one.
    pub(super) fn stop_task(&self, table: &str) -> bool {
        let stop = self.tasks.lock().remove(table);
        if let Some(stop) = &stop {
            stop.send_replace(true);
        }
        stop.is_some()
    }

    /// Waits until no drop of replication slot `slot` is under way.
    async fn wait_for_slot_drop(&self, slot: &str) {
        let pending = self.slot_drops.lock().remove(slot);
        if let Some(pending) = pending {
            let _ = pending.await;
        }
    }
}

/// Whether a relation names connector `postgres-cdc` (a CDC table or a shared source).
pub fn has_cdc_connector(rel: &Relation) -> bool {
    rel.options
        .get("connector")
        .is_some_and(|c| c.eq_ignore_ascii_case("postgres-cdc"))
}

/// Whether a table is fed by PostgreSQL CDC.
pub fn is_cdc_table(rel: &Relation) -> bool {
    rel.kind == crate::catalog::RelationKind::Table && has_cdc_connector(rel)
}

fn position_state(engine: &Engine, rel: &Relation) -> OperatorState {
    OperatorState::new(internal_table_id(rel.id, 0), engine.store.clone(), 0, 1)
}

fn load_position(engine: &Engine, rel: &Relation) -> Result<u64> {
    let mut position = 0;
    position_state(engine, rel).scan_unkeyed(|k, v| {
        if k == POSITION_KEY && v.len() == 8 {
            position = u64::from_le_bytes(v.try_into().expect("8 bytes"));
        }
        Ok(())
    })?;
    Ok(position)
}

/// Writes, in one write, the end of the last transaction applied, the count of skipped
/// changes grown by `malformed`, and the dead letters of that transaction.
fn store_position(
    engine: &Engine,
    rel: &Relation,
    lsn: u64,
    malformed: u64,
    letters: &[Skipped],
) -> Result<()> {
    let state = position_state(engine, rel);
    let mut batch = crate::state::StateWrites::default();
    state.put_unkeyed(&mut batch, POSITION_KEY, &lsn.to_le_bytes());
    if malformed > 0 {
        let total = table_letters::malformed_count(&engine.store, rel.id)? + malformed;
        table_letters::put_malformed_count(&state, &mut batch, total);
    }
    for (index, (record, error)) in letters.iter().enumerate() {
        let letter = table_letters::TableLetter {
            partition: 0,
            offset: lsn as i64,
            record: record.clone(),
            error: error.clone(),
        };
        table_letters::put_letter(&state, &mut batch, index, &letter);
    }
    engine.store.write(batch.into_batch())
}

/// A change that did not fit the table: its row (as a JSON object of the columns'
/// upstream text) and why.
type Skipped = (String, String);

/// `CREATE TABLE` of a CDC table, once the relation is in the catalog: checks the
/// upstream table, makes its publication and slot, copies its rows, starts the task.
pub(super) async fn create(engine: &Arc<Engine>, rel: &Relation) -> Result<()> {
    if rel.primary_key.is_empty() {
        return Err(EddyError::new(
            crate::error::sqlstate::INVALID_PARAMETER_VALUE,
            "a postgres-cdc table needs a PRIMARY KEY (the upstream table's)",
        ));
    }
    let spec = CdcSpec::from_options(&rel.options, &rel.name)?;
    engine.cdc.wait_for_slot_drop(&spec.slot).await;
    let client = spec.connect().await?;
    let columns: Vec<String> = rel.columns.iter().map(|c| c.name.clone()).collect();
    let made_slot = spec.prepare(&client, &columns).await?;
    let table = engine.schema_provider.state_table_for(rel)?;
    // The slot exists before the copy starts: a change committed meanwhile is in both,
    // and applying it again leaves the same row.
    let copied = spec
        .snapshot(&client, &columns, SNAPSHOT_BATCH_ROWS, |rows| {
            table.upsert(&text_rows_to_batch(&table, &rows)?)?;
            Ok(())
        })
        .await;
    if let Err(e) = copied {
        // The table is not created: a slot made for it would hold WAL forever.
        if made_slot {
            spec.drop_slot().await;
        }
        return Err(e);
    }
    start(engine, rel, spec);
    Ok(())
}

/// Starts the task of every CDC table (at server start, after the restore).
pub fn start_all(engine: &Arc<Engine>) -> Result<()> {
    for rel in engine.catalog.relations() {
        if is_cdc_table(&rel) {
            let spec = CdcSpec::from_options(&rel.options, &rel.name)?;
            start(engine, &rel, spec);
        }
    }
    Ok(())
}

/// Stops a dropped table's task and drops its replication slot. A table whose `CREATE`
/// failed has no task, and its slot (if the user named one that was there) is not ours
/// to drop.
pub(super) fn drop(engine: &Engine, rel: &Relation) -> Result<()> {
    let had_task = engine.cdc.stop_task(&rel.name);
    engine
        .checkpoints
        .remove_commit_hook(&format!("cdc:{}", rel.name));
    let (start, end) = crate::state::operator_state::internal_table_range(rel.id);
    engine
        .store
        .delete_range(&start.to_be_bytes(), &end.to_be_bytes())?;
    if had_task && let Ok(spec) = CdcSpec::from_options(&rel.options, &rel.name) {
        let slot = spec.slot.clone();
        let dropping = tokio::spawn(async move { spec.drop_slot().await });
        engine.cdc.slot_drops.lock().insert(slot, dropping);
    }
    Ok(())
}

fn start(engine: &Arc<Engine>, rel: &Relation, spec: CdcSpec) {
    let (stop, stopped) = watch::channel(false);
    if let Some(old) = engine.cdc.insert_task(&rel.name, stop) {
        old.send_replace(true);
    }
    // Positions written, with the last epoch injected when each was.
    let written: Arc<Mutex<VecDeque<(u64, u64)>>> = Arc::default();
    let committed_position = Arc::new(AtomicU64::new(0));
    {
        let written = written.clone();
        let committed_position = committed_position.clone();
        engine.checkpoints.set_commit_hook(
            &format!("cdc:{}", rel.name),
            Arc::new(move |epoch, _| {
                let mut written = written.lock();
                while let Some(&(injected, lsn)) = written.front() {
                    if injected >= epoch {
                        break;
                    }
                    committed_position.fetch_max(lsn, Ordering::SeqCst);
                    written.pop_front();
                }
                Box::pin(async {})
            }),
        );
    }
    let task = CdcTask {
        engine: Arc::downgrade(engine),
        rel: rel.clone(),
        spec,
        written,
        committed_position,
        advanced: 0,
        error_policy: crate::connectors::error_policy(&rel.options)
            .unwrap_or(crate::connectors::ErrorPolicy::Skip),
    };
    tokio::spawn(task.run(stopped));
}

struct CdcTask {
    engine: Weak<Engine>,
    rel: Relation,
    spec: CdcSpec,
    written: Arc<Mutex<VecDeque<(u64, u64)>>>,
    /// The newest position a committed checkpoint holds.
    committed_position: Arc<AtomicU64>,
    /// Where the slot was last advanced to.
    advanced: u64,
    /// With `error.policy = 'dead_letter'`, skipped changes are kept.
    error_policy: crate::connectors::ErrorPolicy,
}

impl CdcTask {
    async fn run(mut self, mut stopped: watch::Receiver<bool>) {
        let mut client: Option<tokio_postgres::Client> = None;
        let mut delay = POLL_INTERVAL;
        loop {
            if *stopped.borrow() {
                return;
            }
            let Some(engine) = self.engine.upgrade() else {
                return;
            };
            let result = self.poll(&engine, &mut client).await;
            // Views reading the table that fell behind hold the slot's reader back (the
            // slot, not memory, keeps what they have not read yet).
            let readers = match &result {
                Ok(true) => engine.schema_provider.state_table_for(&self.rel).ok(),
                _ => None,
            };
            std::mem::drop(engine);
            if let Some(table) = readers {
                tokio::select! {
                    _ = table.changes().wait_for_readers(0) => {}
                    _ = stopped.changed() => return,
                }
            }
            let wait = match result {
                Ok(true) => Duration::ZERO,
                Ok(false) => {
                    delay = POLL_INTERVAL;
                    POLL_INTERVAL
                }
                Err(e) => {
                    tracing::warn!(table = %self.rel.name, "postgres-cdc: {e}");
                    client = None;
                    delay = (delay * 2).min(MAX_RETRY_DELAY);
                    delay
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stopped.changed() => return,
            }
        }
    }

    /// Reads the slot once and applies the transactions not applied yet; `Ok(true)` when
    /// it applied any.
    async fn poll(
        &mut self,
        engine: &Engine,
        client: &mut Option<tokio_postgres::Client>,
    ) -> Result<bool> {
        if client.is_none() {
            *client = Some(self.spec.connect().await?);
        }
        let connection = client.as_ref().expect("connected above");
        let committed = self.committed_position.load(Ordering::SeqCst);
        if committed > self.advanced {
            self.spec.advance(connection, committed).await?;
            self.advanced = committed;
        }
        let table = engine.schema_provider.state_table_for(&self.rel)?;
        let mut position = load_position(engine, &self.rel)?;
        let mut relations: HashMap<u32, Vec<String>> = HashMap::new();
        let mut pending: Vec<Message> = Vec::new();
        // The transaction being read was applied before (the slot is advanced only once a
        // checkpoint holds it, so a poll reads it again): its changes are skipped.
        let mut applied_before = false;
        let mut applied = false;
        // The current transaction's changes that did not fit the table, with why.
        let mut skipped: Vec<Skipped> = Vec::new();
        let messages = self.spec.peek(connection).await?;
        futures::pin_mut!(messages);
        while let Some(message) = futures::StreamExt::next(&mut messages).await {
            match message? {
                Message::Relation {
                    id,
                    namespace,
                    name,
                    columns,
                } => {
                    if namespace == self.spec.schema && name == self.spec.table {
                        relations.insert(id, columns);
                    }
                }
                Message::Begin { final_lsn } => {
                    pending.clear();
                    skipped.clear();
                    // `position` is the end of the last transaction applied: one that
                    // commits before it was applied.
                    applied_before = final_lsn < position;
                }
                Message::Commit { end_lsn } => {
                    if !applied_before && end_lsn > position {
                        skipped.extend(apply(&table, &relations, std::mem::take(&mut pending))?);
                        let letters = match self.error_policy {
                            crate::connectors::ErrorPolicy::DeadLetter => skipped.as_slice(),
                            crate::connectors::ErrorPolicy::Skip => &[],
                        };
                        if !skipped.is_empty() {
                            tracing::warn!(
                                table = %self.rel.name,
                                "postgres-cdc: {} changes skipped (values that do not fit the table)",
                                skipped.len()
                            );
                        }
                        store_position(engine, &self.rel, end_lsn, skipped.len() as u64, letters)?;
                        skipped.clear();
                        position = end_lsn;
                        applied = true;
                        // Read after the write: the write is in every checkpoint after
                        // this epoch.
                        let injected = engine.checkpoints.injected_epoch();
                        self.written.lock().push_back((injected, end_lsn));
                    }
                    pending.clear();
                }
                Message::Other => {}
                _ if applied_before => {}
                change => {
                    pending.push(change);
                    // A large transaction is applied in parts: a checkpoint may then hold
                    // a part of it without its position, and after a restart it is read
                    // and applied again whole. Every change sets or deletes a key's row
                    // (or empties the table), so applying the whole transaction over a
                    // part of it leaves what applying it once does.
                    if pending.len() >= MAX_HELD_CHANGES {
                        skipped.extend(apply(&table, &relations, std::mem::take(&mut pending))?);
                    }
                }
            }
        }
        Ok(applied)
    }
}

/// Applies one upstream transaction's changes to the table, in order: runs of upserts
/// and runs of deletes, each as one write. Returns the changes skipped because their
/// values do not fit the table's columns (a value out of a column's range, a NULL in a
/// `NOT NULL` column), with why.
fn apply(
    table: &Arc<StateTable>,
    relations: &HashMap<u32, Vec<String>>,
    changes: Vec<Message>,
) -> Result<Vec<Skipped>> {
    let mut run: Vec<Vec<Option<String>>> = Vec::new();
    let mut run_is_delete = false;
    let mut skipped = Vec::new();
    let mut flush = |rows: &mut Vec<Vec<Option<String>>>, delete: bool| -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let (batch, unfit) = fitting_rows_to_batch(table, std::mem::take(rows), delete);
        skipped.extend(unfit);
        if delete {
            table.delete_rows_with_keys_of(&batch)?;
        } else {
            table.upsert(&batch)?;
        }
        rows.clear();
        Ok(())
    };
    for change in changes {
        let (relation, delete_first, row, delete) = match change {
            Message::Insert { relation, new } => (relation, None, new, false),
            Message::Update { relation, old, new } => (relation, old, new, false),
            Message::Delete { relation, old } => (relation, None, old, true),
            Message::Truncate {
                relations: truncated,
            } => {
                if truncated.iter().any(|r| relations.contains_key(r)) {
                    flush(&mut run, run_is_delete)?;
                    table.truncate()?;
                }
                continue;
            }
            _ => continue,
        };
        let Some(upstream) = relations.get(&relation) else {
            continue;
        };
        // An update that changed the key sends the old key: delete that row first.
        if let Some(old) = delete_first {
            let old = in_table_order(table, upstream, old);
            let new_key = in_table_order(table, upstream, row.clone());
            let key_changed = table.pk_indices().iter().any(|k| old[*k] != new_key[*k]);
            if key_changed {
                if !run_is_delete {
                    flush(&mut run, run_is_delete)?;
                    run_is_delete = true;
                }
                run.push(old);
            }
        }
        if delete != run_is_delete {
            flush(&mut run, run_is_delete)?;
            run_is_delete = delete;
        }
        run.push(in_table_order(table, upstream, row));
    }
    flush(&mut run, run_is_delete)?;
    Ok(skipped)
}

/// The rows as a batch of the table's schema, leaving out (and returning, with why) each
/// row whose values do not cast to their columns or that lacks a value its columns need
/// (the key; for an upsert also the `NOT NULL` columns).
fn fitting_rows_to_batch(
    table: &StateTable,
    rows: Vec<Vec<Option<String>>>,
    delete: bool,
) -> (RecordBatch, Vec<Skipped>) {
    let required: Vec<usize> = if delete {
        table.pk_indices().to_vec()
    } else {
        (0..table.schema().fields().len())
            .filter(|c| !table.schema().field(*c).is_nullable() || table.pk_indices().contains(c))
            .collect()
    };
    let record = |row: &[Option<String>]| {
        let object: serde_json::Map<String, serde_json::Value> = table
            .schema()
            .fields()
            .iter()
            .zip(row)
            .map(|(f, v)| {
                (
                    f.name().clone(),
                    v.clone().map_or(serde_json::Value::Null, Into::into),
                )
            })
            .collect();
        serde_json::Value::Object(object).to_string()
    };
    let mut fitting = Vec::with_capacity(rows.len());
    let mut skipped = Vec::new();
    for row in rows {
        if let Some(c) = required.iter().find(|c| row[**c].is_none()) {
            let column = table.schema().field(*c).name();
            skipped.push((record(&row), format!("column \"{column}\" is NULL")));
            continue;
        }
        fitting.push(row);
    }
    // Most often every row casts: one conversion. Otherwise row by row, to tell which.
    if let Ok(batch) = text_rows_to_batch(table, &fitting) {
        return (batch, skipped);
    }
    let mut cast = Vec::with_capacity(fitting.len());
    for row in fitting {
        match text_rows_to_batch(table, std::slice::from_ref(&row)) {
            Ok(_) => cast.push(row),
            Err(e) => skipped.push((record(&row), e.to_string())),
        }
    }
    let batch = text_rows_to_batch(table, &cast)
        .unwrap_or_else(|_| RecordBatch::new_empty(table.schema().clone()));
    (batch, skipped)
}

/// An upstream row's values in the table's column order (a TOASTed value an update did
/// not change is not sent: it reads as NULL, see docs/connectors.md).
fn in_table_order(
    table: &StateTable,
    upstream: &[String],
    values: Vec<Value>,
) -> Vec<Option<String>> {
    table
        .schema()
        .fields()
        .iter()
        .map(|f| {
            let at = upstream.iter().position(|c| c == f.name())?;
            match values.get(at) {
                Some(Value::Text(s)) => Some(s.clone()),
                _ => None,
            }
        })
        .collect()
}

/// Rows of PostgreSQL text values as a batch of the table's schema.
fn text_rows_to_batch(table: &StateTable, rows: &[Vec<Option<String>>]) -> Result<RecordBatch> {
    // Cast under a nullable schema (a delete carries only the key columns); the table's
    // own schema when the values fit it, so upserts check NOT NULL as usual.
    let schema = super::kafka_tables::nullable(table.schema());
    let columns = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(c, field)| {
            let text: StringArray = rows.iter().map(|r| r[c].clone()).collect();
            super::copy::text_to_column(&text, field.data_type())
        })
        .collect::<Result<Vec<ArrayRef>>>()?;
    match RecordBatch::try_new(table.schema().clone(), columns.clone()) {
        Ok(batch) => Ok(batch),
        Err(_) => Ok(RecordBatch::try_new(schema, columns)?),
    }
}
