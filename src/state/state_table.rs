//! A [`StateTable`] stores the rows of one relation in the [`StateStore`].
//!
//! Rows are written and read a whole Arrow batch at a time: keys and values are encoded
//! with `arrow-row` (the key encoding is memcomparable, so RocksDB's key order is the
//! primary key's order), never one Rust value per cell.
//!
//! A table with a primary key is keyed by it, so writing a row whose key exists replaces
//! it. A table without one is keyed by a hidden row id from a persistent sequence.

use super::changelog::ChangeLog;
use super::conflict::OnConflict;
use super::keys::{KEY_PREFIX_LEN, encode_state_key, key_group_of, table_prefix};
use super::store::StateStore;
use crate::dataflow::{Message, Op, StreamChunk};
use crate::error::{EddyError, Result, sqlstate};
use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, SortField};
use rocksdb::WriteBatch;
use std::sync::Arc;

/// Rows read back from a table, together with the state key of each row (needed by
/// `UPDATE` and `DELETE` to address the rows they change).
pub struct ScannedBatch {
    pub keys: Vec<Vec<u8>>,
    pub batch: RecordBatch,
}

/// Casts a batch to `schema`'s column types (expressions may yield another layout of the
/// same type, such as `Utf8View` for text), keeping every column nullable so that a NULL
/// in a `NOT NULL` column reaches [`StateTable::check_not_null`] and its proper error.
pub fn conform(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(c, f)| {
            if c.data_type() == f.data_type() {
                Ok(c.clone())
            } else {
                Ok(arrow::compute::cast(c, f.data_type())?)
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let relaxed = Arc::new(arrow::datatypes::Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ));
    Ok(RecordBatch::try_new_with_options(
        relaxed,
        columns,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )?)
}

pub struct StateTable {
    table_id: u32,
    schema: SchemaRef,
    pk_indices: Vec<usize>,
    pub(super) store: Arc<StateStore>,
    pub(super) value_codec: RowConverter,
    pub(super) key_codec: Option<RowConverter>,
    changes: ChangeLog,
    /// Serialises inserts that read the stored rows of their keys (`ON CONFLICT DO
    /// NOTHING` / `DO UPDATE IF NOT NULL`), so two of them cannot both see a key free.
    conflict_lock: parking_lot::Mutex<()>,
    /// Set once `ALTER TABLE` rewrote the rows for new columns: this instance's codec no
    /// longer matches them, so writes through it are refused (the next lookup opens the
    /// table with its new columns).
    retired: std::sync::atomic::AtomicBool,
}

/// How many rows a scan puts in one batch.
pub(super) const SCAN_BATCH_ROWS: usize = 8192;

impl StateTable {
    pub fn new(
        table_id: u32,
        schema: SchemaRef,
        pk_indices: Vec<usize>,
        store: Arc<StateStore>,
    ) -> Result<Self> {
        let value_codec = super::keys::whole_row_codec(&schema)?;
        let key_codec = if pk_indices.is_empty() {
            None
        } else {
            Some(RowConverter::new(
                pk_indices
                    .iter()
                    .map(|i| SortField::new(schema.field(*i).data_type().clone()))
                    .collect(),
            )?)
        };
        Ok(Self {
            table_id,
            schema,
            pk_indices,
            store,
            value_codec,
            key_codec,
            changes: ChangeLog::default(),
            conflict_lock: parking_lot::Mutex::new(()),
            retired: std::sync::atomic::AtomicBool::new(false),
        })
    }

    pub fn table_id(&self) -> u32 {
        self.table_id
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    pub fn pk_indices(&self) -> &[usize] {
        &self.pk_indices
    }

    /// Checks that no column declared `NOT NULL` holds a null.
    pub fn check_not_null(&self, batch: &RecordBatch) -> Result<()> {
        for (i, field) in self.schema.fields().iter().enumerate() {
            if !field.is_nullable() && batch.column(i).null_count() > 0 {
                return Err(EddyError::new(
                    sqlstate::NOT_NULL_VIOLATION,
                    format!(
                        "null value in column \"{}\" violates not-null constraint",
                        field.name()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The change stream of this table: every write below is also sent to its subscribers.
    pub fn changes(&self) -> &ChangeLog {
        &self.changes
    }

    pub(super) fn value_codec(&self) -> &RowConverter {
        &self.value_codec
    }

    pub(super) fn decode(&self, values: &[Vec<u8>]) -> Result<RecordBatch> {
        let parser = self.value_codec.parser();
        let columns = self
            .value_codec
            .convert_rows(values.iter().map(|v| parser.parse(v)))?;
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(values.len())),
        )?)
    }

    /// The rows stored under the given state keys, as deletes for the change stream.
    pub(super) fn deletes_at(&self, state_keys: &[Vec<u8>]) -> Result<StreamChunk> {
        let mut keys = Vec::new();
        let mut values = Vec::new();
        for (key, value) in state_keys.iter().zip(self.store.multi_get(state_keys)?) {
            if let Some(value) = value {
                keys.push(key[KEY_PREFIX_LEN..].to_vec());
                values.push(value);
            }
        }
        Ok(StreamChunk {
            ops: vec![Op::Delete; keys.len()],
            batch: self.decode(&values)?,
            keys: Some(keys),
        })
    }

    /// The memcomparable primary keys of a batch's rows.
    pub(super) fn primary_keys(
        &self,
        key_codec: &RowConverter,
        batch: &RecordBatch,
    ) -> Result<Vec<Vec<u8>>> {
        let pk_columns: Vec<ArrayRef> = self
            .pk_indices
            .iter()
            .map(|i| batch.column(*i).clone())
            .collect();
        let rows = key_codec.convert_columns(&pk_columns)?;
        Ok(rows.iter().map(|r| r.as_ref().to_vec()).collect())
    }

    pub(super) fn state_key(&self, key: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_state_key(self.table_id, key_group_of(key), key, &mut out);
        out
    }

    /// Inserts every row of `batch`; a row whose primary key is already stored (or
    /// repeated in `batch`) is handled as `policy` says. Returns the rows written.
    pub fn insert(&self, batch: &RecordBatch, policy: OnConflict) -> Result<usize> {
        let Some(key_codec) = &self.key_codec else {
            return self.upsert(batch);
        };
        if policy == OnConflict::Overwrite {
            return self.upsert(batch);
        }
        self.check_not_null(batch)?;
        let _serialised = self.conflict_lock.lock();
        let keys = self.primary_keys(key_codec, batch)?;
        let state_keys: Vec<Vec<u8>> = keys.iter().map(|k| self.state_key(k)).collect();
        let stored = self.store.multi_get(&state_keys)?;
        let resolved = policy.resolve(self, batch, &keys, &stored)?;
        self.upsert(&resolved)
    }

    /// Inserts (or, for an existing primary key, replaces) every row of `batch`.
    pub fn upsert(&self, batch: &RecordBatch) -> Result<usize> {
        self.upsert_from(0, batch)
    }

    fn upsert_from(&self, publisher: usize, batch: &RecordBatch) -> Result<usize> {
        let rows = batch.num_rows();
        if rows == 0 {
            return Ok(0);
        }
        self.check_not_null(batch)?;
        let values = self.value_codec.convert_columns(batch.columns())?;
        let mut log = self.changes.lock();
        self.ensure_current()?;
        match &self.key_codec {
            Some(key_codec) => {
                let keys = self.primary_keys(key_codec, batch)?;
                let state_keys: Vec<Vec<u8>> = keys.iter().map(|k| self.state_key(k)).collect();
                // The last row of a key wins; the change stream sees only that row, after
                // a delete of the row it replaces.
                let changes = if log.wants_changes() {
                    let mut last = datafusion::common::HashMap::with_capacity(rows);
                    for (row, key) in keys.iter().enumerate() {
                        last.insert(key.as_slice(), row);
                    }
                    let mut kept: Vec<u32> = last.into_values().map(|r| r as u32).collect();
                    kept.sort_unstable();
                    let kept_state_keys: Vec<Vec<u8>> = kept
                        .iter()
                        .map(|r| state_keys[*r as usize].clone())
                        .collect();
                    let deletes = self.deletes_at(&kept_state_keys)?;
                    let inserts = StreamChunk {
                        ops: vec![Op::Insert; kept.len()],
                        batch: take_rows(batch, &kept)?,
                        keys: Some(kept.iter().map(|r| keys[*r as usize].clone()).collect()),
                    };
                    Some((deletes, inserts))
                } else {
                    None
                };
                let mut wb = WriteBatch::default();
                for (row, key) in state_keys.iter().enumerate() {
                    wb.put(key, values.row(row).as_ref());
                }
                let entry = match &changes {
                    Some((deletes, inserts)) => {
                        log.log_changes(&mut wb, &[deletes, inserts], &self.value_codec)?
                    }
                    None => None,
                };
                self.store.write(wb)?;
                log.logged(entry);
                if let Some((deletes, inserts)) = changes {
                    log.publish_chunk(publisher, deletes);
                    log.publish_chunk(publisher, inserts);
                }
            }
            None => {
                let inserts = |first: u64| StreamChunk {
                    ops: vec![Op::Insert; rows],
                    batch: batch.clone(),
                    keys: Some(
                        (0..rows as u64)
                            .map(|i| (first + i).to_be_bytes().to_vec())
                            .collect(),
                    ),
                };
                let mut entry = None;
                let first = self.store.write_with_row_ids(rows as u64, |first, wb| {
                    let mut key_buf = Vec::new();
                    for row in 0..rows {
                        let id = (first + row as u64).to_be_bytes();
                        encode_state_key(self.table_id, key_group_of(&id), &id, &mut key_buf);
                        wb.put(&key_buf, values.row(row).as_ref());
                    }
                    if log.wants_changes() {
                        entry = log.log_changes(wb, &[&inserts(first)], &self.value_codec)?;
                    }
                    Ok(())
                })?;
                log.logged(entry);
                log.publish(publisher, || Some(Message::Chunk(inserts(first))));
            }
        }
        Ok(rows)
    }

    /// Replaces rows addressed by their state keys with new contents. For a table with a
    /// primary key the new row's key is derived from its key columns (an update may move a
    /// row); otherwise the row keeps its hidden id.
    pub fn replace(&self, old_keys: &[Vec<u8>], batch: &RecordBatch) -> Result<usize> {
        if old_keys.is_empty() {
            return Ok(0);
        }
        self.check_not_null(batch)?;
        let values = self.value_codec.convert_columns(batch.columns())?;
        let mut log = self.changes.lock();
        self.ensure_current()?;
        let deletes = if log.wants_changes() {
            Some(self.deletes_at(old_keys)?)
        } else {
            None
        };
        let mut wb = WriteBatch::default();
        let new_keys: Vec<Vec<u8>> = match &self.key_codec {
            Some(key_codec) => {
                for k in old_keys {
                    wb.delete(k);
                }
                let keys = self.primary_keys(key_codec, batch)?;
                for (row, key) in keys.iter().enumerate() {
                    wb.put(self.state_key(key), values.row(row).as_ref());
                }
                keys
            }
            None => {
                for (row, k) in old_keys.iter().enumerate() {
                    wb.put(k, values.row(row).as_ref());
                }
                old_keys
                    .iter()
                    .map(|k| k[KEY_PREFIX_LEN..].to_vec())
                    .collect()
            }
        };
        let changes = deletes
            .map(|deletes| {
                let inserts = StreamChunk {
                    ops: vec![Op::Insert; batch.num_rows()],
                    batch: batch.clone(),
                    keys: Some(new_keys),
                };
                update_pairs(deletes, inserts)
            })
            .transpose()?;
        let entry = match &changes {
            Some(chunks) => {
                let chunks: Vec<&StreamChunk> = chunks.iter().collect();
                log.log_changes(&mut wb, &chunks, &self.value_codec)?
            }
            None => None,
        };
        self.store.write(wb)?;
        log.logged(entry);
        for chunk in changes.into_iter().flatten() {
            log.publish_chunk(0, chunk);
        }
        Ok(old_keys.len())
    }

    /// Applies a chunk of a materialized view's output from one of its `publisher`
    /// subtasks: keyed rows replace or delete the row stored under their stream key;
    /// rows of an append-only stream are added under new hidden ids.
    pub fn apply_chunk(&self, publisher: usize, chunk: &StreamChunk) -> Result<()> {
        let batch = conform(&chunk.batch, &self.schema)?;
        let Some(keys) = &chunk.keys else {
            self.upsert_from(publisher, &batch)?;
            return Ok(());
        };
        let values = self.value_codec.convert_columns(batch.columns())?;
        let mut wb = WriteBatch::default();
        let mut key_buf = Vec::new();
        for (row, key) in keys.iter().enumerate() {
            encode_state_key(self.table_id, key_group_of(key), key, &mut key_buf);
            if chunk.ops[row].is_insert() {
                wb.put(&key_buf, values.row(row).as_ref());
            } else {
                wb.delete(&key_buf);
            }
        }
        let mut log = self.changes.lock();
        let change = StreamChunk {
            ops: chunk.ops.clone(),
            batch,
            keys: Some(keys.clone()),
        };
        let entry = log.log_changes(&mut wb, &[&change], &self.value_codec)?;
        self.store.write(wb)?;
        log.logged(entry);
        log.publish(publisher, || Some(Message::Chunk(change)));
        Ok(())
    }

    /// Deletes the rows whose primary keys are those of `batch`'s rows (only its key
    /// columns are read). Keys not stored are ignored.
    pub fn delete_rows_with_keys_of(&self, batch: &RecordBatch) -> Result<usize> {
        let Some(key_codec) = &self.key_codec else {
            return Err(crate::error::EddyError::internal(
                "deleting by key needs a table with a primary key",
            ));
        };
        let keys = self.primary_keys(key_codec, batch)?;
        let state_keys: Vec<Vec<u8>> = keys.iter().map(|k| self.state_key(k)).collect();
        let stored = self.store.multi_get(&state_keys)?;
        let present: Vec<Vec<u8>> = state_keys
            .into_iter()
            .zip(stored)
            .filter(|(_, v)| v.is_some())
            .map(|(k, _)| k)
            .collect();
        self.delete_keys(&present)
    }

    pub fn delete_keys(&self, keys: &[Vec<u8>]) -> Result<usize> {
        let mut log = self.changes.lock();
        self.ensure_current()?;
        let deletes = if log.wants_changes() {
            Some(self.deletes_at(keys)?)
        } else {
            None
        };
        let mut wb = WriteBatch::default();
        for k in keys {
            wb.delete(k);
        }
        let entry = match &deletes {
            Some(deletes) => log.log_changes(&mut wb, &[deletes], &self.value_codec)?,
            None => None,
        };
        self.store.write(wb)?;
        log.logged(entry);
        if let Some(deletes) = deletes {
            log.publish_chunk(0, deletes);
        }
        Ok(keys.len())
    }

    /// Refuses a write through an instance whose rows `ALTER TABLE` has rewritten (call
    /// with the change log locked, as [`StateTable::rewrite_rows`] holds it).
    pub fn ensure_current(&self) -> Result<()> {
        if self.retired.load(std::sync::atomic::Ordering::Acquire) {
            return Err(EddyError::new(
                "40001",
                "the table's columns changed while this statement ran; run it again",
            ));
        }
        Ok(())
    }

    /// Rewrites every row for new columns (`ALTER TABLE ... ADD | DROP COLUMN`): `change`
    /// maps each scanned batch to `new_schema`, the new values go under the same keys in
    /// one write batch, and `commit` writes it together with the catalog's new columns,
    /// so rows and their schema change at once. Writers are held off meanwhile (the
    /// change log's lock), and this instance is retired afterwards. Returns the rows.
    pub fn rewrite_rows(
        &self,
        new_schema: &SchemaRef,
        change: impl Fn(&RecordBatch) -> Result<RecordBatch>,
        commit: impl FnOnce(WriteBatch) -> Result<()>,
    ) -> Result<usize> {
        let _log = self.changes.lock();
        let _conflicts = self.conflict_lock.lock();
        self.ensure_current()?;
        let codec = super::keys::whole_row_codec(new_schema)?;
        let mut wb = WriteBatch::default();
        let mut rows = 0;
        for scanned in self.scan()? {
            let batch = change(&scanned.batch)?;
            let values = codec.convert_columns(batch.columns())?;
            for (key, value) in scanned.keys.iter().zip(values.iter()) {
                wb.put(key, value.as_ref());
            }
            rows += scanned.keys.len();
        }
        // Logged changes were encoded for the old columns: no job reads them now (a
        // table read by one cannot be altered), and none may after.
        super::table_log::delete(&self.store, self.table_id)?;
        commit(wb)?;
        self.retired
            .store(true, std::sync::atomic::Ordering::Release);
        Ok(rows)
    }

    /// Reads the whole table, in key order, as batches with each row's state key.
    pub fn scan(&self) -> Result<Vec<ScannedBatch>> {
        self.scan_at(None)
    }

    /// [`StateTable::scan`] as of a snapshot (`None`: now).
    ///
    /// Rows come in the order of their keys (primary key, group key, or the hidden row
    /// id, which follows insertion), as PostgreSQL and RisingWave return a small table
    /// without `ORDER BY`, not in the order of the key groups they are stored under.
    pub fn scan_at(&self, snapshot: Option<&super::ServingSnapshot>) -> Result<Vec<ScannedBatch>> {
        let mut rows: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let visit = |k: &[u8], v: &[u8]| {
            debug_assert!(k.len() >= KEY_PREFIX_LEN);
            rows.push((k.to_vec(), v.to_vec()));
            Ok(())
        };
        let prefix = table_prefix(self.table_id);
        match snapshot {
            Some(snapshot) => snapshot.scan_prefix(&prefix, visit)?,
            None => self.store.scan_prefix(&prefix, visit)?,
        }
        // Each key group is already sorted: the sort merges those runs.
        rows.sort_by(|a, b| a.0[KEY_PREFIX_LEN..].cmp(&b.0[KEY_PREFIX_LEN..]));
        let parser = self.value_codec.parser();
        let mut out = Vec::with_capacity(rows.len().div_ceil(SCAN_BATCH_ROWS));
        let mut rows = rows.into_iter().peekable();
        while rows.peek().is_some() {
            let (keys, values): (Vec<Vec<u8>>, Vec<Vec<u8>>) =
                rows.by_ref().take(SCAN_BATCH_ROWS).unzip();
            let columns = self
                .value_codec
                .convert_rows(values.iter().map(|v| parser.parse(v)))?;
            out.push(ScannedBatch {
                keys,
                batch: RecordBatch::try_new(self.schema.clone(), columns)?,
            });
        }
        Ok(out)
    }

    /// Removes every row (the table itself stays).
    pub fn truncate(&self) -> Result<()> {
        let mut log = self.changes.lock();
        let deletes: Vec<StreamChunk> = if log.wants_changes() {
            self.scan()?
                .into_iter()
                .map(|scanned| StreamChunk {
                    ops: vec![Op::Delete; scanned.keys.len()],
                    keys: Some(
                        scanned
                            .keys
                            .iter()
                            .map(|k| k[KEY_PREFIX_LEN..].to_vec())
                            .collect(),
                    ),
                    batch: scanned.batch,
                })
                .collect()
        } else {
            vec![]
        };
        let mut wb = WriteBatch::default();
        let prefix = table_prefix(self.table_id);
        let end = super::store::prefix_end(&prefix)
            .ok_or_else(|| EddyError::internal("a table id of all ones"))?;
        wb.delete_range(&prefix[..], &end[..]);
        let entry = log.log_changes(
            &mut wb,
            &deletes.iter().collect::<Vec<_>>(),
            &self.value_codec,
        )?;
        self.store.write(wb)?;
        log.logged(entry);
        for chunk in deletes {
            log.publish_chunk(0, chunk);
        }
        Ok(())
    }

    /// Logs every change from now on in the table's replayable log (a job reads the
    /// table, and may resume from a checkpoint after changes made while it is down).
    pub fn enable_log(&self) -> Result<()> {
        self.changes.enable_log(self.table_id, || {
            super::table_log::last_sequence(&self.store, self.table_id)
        })
    }

    /// The changes logged after `position` (up to `last`, the log's current end): what a
    /// job resuming at `position` missed. Call inside [`ChangeLog::subscribe`].
    pub fn logged_changes_after(&self, position: u64, last: u64) -> Result<Vec<StreamChunk>> {
        super::table_log::read_after(
            &self.store,
            self.table_id,
            position,
            last,
            &self.schema,
            &self.value_codec,
        )
    }

    /// Cuts the log up to the position of the last barrier at or before `epoch` (no
    /// checkpoint older than `epoch` is kept any more).
    pub fn cut_log_before(&self, epoch: u64) -> Result<()> {
        match self.changes.position_at(epoch) {
            Some(position) => super::table_log::cut_through(&self.store, self.table_id, position),
            None => Ok(()),
        }
    }

    /// The current rows as inserts keyed by their stream keys: where a new subscriber of
    /// the change stream starts (call inside [`ChangeLog::subscribe`]).
    pub fn snapshot(&self) -> Result<Vec<StreamChunk>> {
        Ok(self
            .scan()?
            .into_iter()
            .map(|scanned| StreamChunk {
                ops: vec![Op::Insert; scanned.keys.len()],
                keys: Some(
                    scanned
                        .keys
                        .iter()
                        .map(|k| k[KEY_PREFIX_LEN..].to_vec())
                        .collect(),
                ),
                batch: scanned.batch,
            })
            .collect())
    }
}

/// The given rows of a batch, in order.
fn take_rows(batch: &RecordBatch, rows: &[u32]) -> Result<RecordBatch> {
    let indices = arrow::array::UInt32Array::from(rows.to_vec());
    Ok(arrow::compute::take_record_batch(batch, &indices)?)
}

/// An update's changes: each old row as an `UpdateDelete` directly followed by its new
/// version as an `UpdateInsert` (what a changelog shows as ops 4 and 3, and what lets
/// operators see one change instead of two), when every old row was found; otherwise the
/// deletes, then the inserts.
fn update_pairs(deletes: StreamChunk, inserts: StreamChunk) -> Result<Vec<StreamChunk>> {
    let rows = inserts.num_rows();
    let (Some(old_keys), Some(new_keys)) = (&deletes.keys, &inserts.keys) else {
        return Ok(vec![deletes, inserts]);
    };
    if deletes.num_rows() != rows {
        return Ok(vec![deletes, inserts]);
    }
    let both =
        arrow::compute::concat_batches(&deletes.batch.schema(), [&deletes.batch, &inserts.batch])?;
    let order = arrow::array::UInt32Array::from_iter_values(
        (0..rows as u32).flat_map(|row| [row, rows as u32 + row]),
    );
    let batch = take_rows(&both, order.values())?;
    let keys = (0..rows)
        .flat_map(|row| [old_keys[row].clone(), new_keys[row].clone()])
        .collect();
    let ops = (0..rows)
        .flat_map(|_| [Op::UpdateDelete, Op::UpdateInsert])
        .collect();
    Ok(vec![StreamChunk {
        ops,
        batch,
        keys: Some(keys),
    }])
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray, Int32Array, StringArray};
    use arrow::datatypes::{DataType, Field, Int32Type, Schema};

    #[test]
    fn rewritten_rows_keep_their_keys_and_old_writers_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(StateStore::open(dir.path(), 1 << 20).unwrap());
        let old_schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let old = StateTable::new(7, old_schema.clone(), vec![0], store.clone()).unwrap();
        let rows = RecordBatch::try_new(
            old_schema.clone(),
            vec![
                Arc::new(Int32Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec![Some("a"), None])),
            ],
        )
        .unwrap();
        old.upsert(&rows).unwrap();

        // A column added: every row gets 0 in it, under its old key.
        let new_schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("score", DataType::Int32, true),
        ]));
        let rewritten = old
            .rewrite_rows(
                &new_schema,
                |batch| {
                    let mut columns = batch.columns().to_vec();
                    columns.push(Arc::new(Int32Array::from(vec![0; batch.num_rows()])));
                    Ok(RecordBatch::try_new(new_schema.clone(), columns)?)
                },
                |wb| store.write(wb),
            )
            .unwrap();
        assert_eq!(rewritten, 2);
        let err = old.upsert(&rows).unwrap_err();
        assert!(err.to_string().contains("columns changed"), "{err}");

        let new = StateTable::new(7, new_schema.clone(), vec![0], store.clone()).unwrap();
        let scanned = new.scan().unwrap();
        let batch = &scanned[0].batch;
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(
            batch.column(2).as_primitive::<Int32Type>().values(),
            &[0, 0]
        );
        assert!(batch.column(1).is_null(1));
        // The same key: an upsert of id 1 replaces the rewritten row.
        let again = RecordBatch::try_new(
            new_schema.clone(),
            vec![
                Arc::new(Int32Array::from(vec![1])),
                Arc::new(StringArray::from(vec!["z"])),
                Arc::new(Int32Array::from(vec![5])),
            ],
        )
        .unwrap();
        new.upsert(&again).unwrap();
        let scanned = new.scan().unwrap();
        assert_eq!(scanned[0].batch.num_rows(), 2);
    }
}
