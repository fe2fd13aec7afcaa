//! The writes of an explicit transaction (`BEGIN ... COMMIT`).
//!
//! Between `BEGIN` and `COMMIT`, `INSERT`, `UPDATE`, `DELETE` and `TRUNCATE` do not touch
//! RocksDB: each table's changes are staged here, as the new encoded row (or a deletion)
//! per state key, and the session's own reads see the table with them applied. `COMMIT`
//! writes every staged change of every table in one RocksDB write, publishing the
//! changes to the tables' change logs while holding all of their locks, so that no
//! barrier can fall between them: views see the whole transaction in one epoch.
//! `ROLLBACK` drops the staged changes; nothing was written.
//!
//! Hidden row ids of tables without a primary key are allocated when a row is staged (a
//! rolled-back transaction leaves a gap in the sequence, as PostgreSQL's sequences do).

use super::conflict::OnConflict;
use super::keys::{KEY_PREFIX_LEN, encode_state_key, key_group_of, table_prefix};
use super::state_table::{SCAN_BATCH_ROWS, ScannedBatch};
use super::{StateStore, StateTable};
use crate::dataflow::{Op, StreamChunk};
use crate::error::Result;
use arrow::array::RecordBatch;
use parking_lot::Mutex;
use rocksdb::WriteBatch;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Staged changes of one table: the new encoded row per state key, `None` for a delete.
struct Staged {
    table: Arc<StateTable>,
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
}

/// An open transaction's staged writes, by table id.
#[derive(Default)]
pub struct Transaction {
    tables: Mutex<BTreeMap<u32, Staged>>,
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction")
            .field("tables", &self.tables.lock().keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Transaction {
    fn stage(&self, table: &Arc<StateTable>, writes: Vec<(Vec<u8>, Option<Vec<u8>>)>) {
        let mut tables = self.tables.lock();
        let staged = tables.entry(table.table_id()).or_insert_with(|| Staged {
            table: table.clone(),
            writes: BTreeMap::new(),
        });
        staged.writes.extend(writes);
    }

    /// Stages an insert of every row, a row whose primary key is already stored (or
    /// staged, or repeated in `batch`) handled as `policy` says.
    pub fn insert(
        &self,
        table: &Arc<StateTable>,
        batch: &RecordBatch,
        policy: OnConflict,
    ) -> Result<usize> {
        let Some(key_codec) = &table.key_codec else {
            return self.upsert(table, batch);
        };
        if policy == OnConflict::Overwrite {
            return self.upsert(table, batch);
        }
        table.check_not_null(batch)?;
        let keys = table.primary_keys(key_codec, batch)?;
        let state_keys: Vec<Vec<u8>> = keys.iter().map(|k| table.state_key(k)).collect();
        let mut stored = table.store.multi_get(&state_keys)?;
        if let Some(staged) = self.tables.lock().get(&table.table_id()) {
            for (key, value) in state_keys.iter().zip(stored.iter_mut()) {
                if let Some(write) = staged.writes.get(key) {
                    *value = write.clone();
                }
            }
        }
        let resolved = policy.resolve(table, batch, &keys, &stored)?;
        self.upsert(table, &resolved)
    }

    /// Stages an insert (a replacement for an existing primary key) of every row.
    pub fn upsert(&self, table: &Arc<StateTable>, batch: &RecordBatch) -> Result<usize> {
        let rows = batch.num_rows();
        if rows == 0 {
            return Ok(0);
        }
        table.check_not_null(batch)?;
        let values = table.value_codec.convert_columns(batch.columns())?;
        let state_keys: Vec<Vec<u8>> = match &table.key_codec {
            Some(key_codec) => table
                .primary_keys(key_codec, batch)?
                .iter()
                .map(|k| table.state_key(k))
                .collect(),
            None => {
                let first = table.store.allocate_row_ids(rows as u64)?;
                (0..rows as u64)
                    .map(|i| {
                        let id = (first + i).to_be_bytes();
                        let mut key = Vec::new();
                        encode_state_key(table.table_id(), key_group_of(&id), &id, &mut key);
                        key
                    })
                    .collect()
            }
        };
        self.stage(
            table,
            state_keys
                .into_iter()
                .enumerate()
                .map(|(row, key)| (key, Some(values.row(row).as_ref().to_vec())))
                .collect(),
        );
        Ok(rows)
    }

    /// Stages the replacement of the rows at `old_keys` by the rows of `batch` (see
    /// [`StateTable::replace`]).
    pub fn replace(
        &self,
        table: &Arc<StateTable>,
        old_keys: &[Vec<u8>],
        batch: &RecordBatch,
    ) -> Result<usize> {
        if old_keys.is_empty() {
            return Ok(0);
        }
        table.check_not_null(batch)?;
        let values = table.value_codec.convert_columns(batch.columns())?;
        let mut writes = Vec::with_capacity(old_keys.len() * 2);
        match &table.key_codec {
            Some(key_codec) => {
                writes.extend(old_keys.iter().map(|k| (k.clone(), None)));
                for (row, key) in table.primary_keys(key_codec, batch)?.iter().enumerate() {
                    writes.push((
                        table.state_key(key),
                        Some(values.row(row).as_ref().to_vec()),
                    ));
                }
            }
            None => {
                for (row, key) in old_keys.iter().enumerate() {
                    writes.push((key.clone(), Some(values.row(row).as_ref().to_vec())));
                }
            }
        }
        self.stage(table, writes);
        Ok(old_keys.len())
    }

    /// Stages the deletion of the rows at these state keys.
    pub fn delete_keys(&self, table: &Arc<StateTable>, keys: &[Vec<u8>]) -> Result<usize> {
        self.stage(table, keys.iter().map(|k| (k.clone(), None)).collect());
        Ok(keys.len())
    }

    /// The table's rows as this transaction sees them: stored rows with the staged
    /// changes applied, in key order.
    pub fn scan(&self, table: &StateTable) -> Result<Vec<ScannedBatch>> {
        let mut rows: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        table
            .store
            .scan_prefix(&table_prefix(table.table_id()), |k, v| {
                rows.insert(k.to_vec(), v.to_vec());
                Ok(())
            })?;
        if let Some(staged) = self.tables.lock().get(&table.table_id()) {
            for (key, value) in &staged.writes {
                match value {
                    Some(v) => rows.insert(key.clone(), v.clone()),
                    None => rows.remove(key),
                };
            }
        }
        let mut out = Vec::new();
        let mut keys = Vec::new();
        let mut values = Vec::new();
        for (key, value) in rows {
            keys.push(key);
            values.push(value);
            if keys.len() >= SCAN_BATCH_ROWS {
                out.push(ScannedBatch {
                    batch: table.decode(&values)?,
                    keys: std::mem::take(&mut keys),
                });
                values.clear();
            }
        }
        if !keys.is_empty() {
            out.push(ScannedBatch {
                batch: table.decode(&values)?,
                keys,
            });
        }
        Ok(out)
    }

    /// Writes every staged change in one RocksDB write and publishes each table's
    /// changes (deletes of the rows replaced, then the new rows) while holding every
    /// table's change-log lock. The transaction is empty afterwards.
    pub fn commit(&self, store: &StateStore) -> Result<()> {
        let tables = std::mem::take(&mut *self.tables.lock());
        if tables.is_empty() {
            return Ok(());
        }
        // Locks in table-id order (the map's), as every committer takes them.
        let mut logs: Vec<_> = tables.values().map(|s| s.table.changes().lock()).collect();
        for staged in tables.values() {
            staged.table.ensure_current()?;
        }
        let mut batch = WriteBatch::default();
        let mut changes = Vec::with_capacity(tables.len());
        for (staged, log) in tables.values().zip(&logs) {
            let table = &staged.table;
            if log.wants_changes() {
                let keys: Vec<Vec<u8>> = staged.writes.keys().cloned().collect();
                let deletes = table.deletes_at(&keys)?;
                let (new_keys, new_values): (Vec<Vec<u8>>, Vec<Vec<u8>>) = staged
                    .writes
                    .iter()
                    .filter_map(|(k, v)| {
                        v.as_ref()
                            .map(|v| (k[KEY_PREFIX_LEN..].to_vec(), v.clone()))
                    })
                    .unzip();
                let inserts = StreamChunk {
                    ops: vec![Op::Insert; new_keys.len()],
                    batch: table.decode(&new_values)?,
                    keys: Some(new_keys),
                };
                changes.push(Some((deletes, inserts)));
            } else {
                changes.push(None);
            }
            for (key, value) in &staged.writes {
                match value {
                    Some(v) => batch.put(key, v),
                    None => batch.delete(key),
                }
            }
        }
        let mut entries = Vec::with_capacity(changes.len());
        for ((staged, log), change) in tables.values().zip(&logs).zip(&changes) {
            entries.push(match change {
                Some((deletes, inserts)) => {
                    log.log_changes(&mut batch, &[deletes, inserts], staged.table.value_codec())?
                }
                None => None,
            });
        }
        store.write(batch)?;
        for ((log, change), entry) in logs.iter_mut().zip(changes).zip(entries) {
            log.logged(entry);
            if let Some((deletes, inserts)) = change {
                log.publish_chunk(0, deletes);
                log.publish_chunk(0, inserts);
            }
        }
        Ok(())
    }
}
