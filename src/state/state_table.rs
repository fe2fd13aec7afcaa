//! A [`StateTable`] stores the rows of one relation in the [`StateStore`].
//!
//! Rows are written and read a whole Arrow batch at a time: keys and values are encoded
//! with `arrow-row` (the key encoding is memcomparable, so RocksDB's key order is the
//! primary key's order), never one Rust value per cell.
//!
//! A table with a primary key is keyed by it, so writing a row whose key exists replaces
//! it. A table without one is keyed by a hidden row id from a persistent sequence.

use super::keys::{KEY_PREFIX_LEN, encode_state_key, key_group_of, table_prefix};
use super::store::StateStore;
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
    store: Arc<StateStore>,
    value_codec: RowConverter,
    key_codec: Option<RowConverter>,
}

/// How many rows a scan puts in one batch.
const SCAN_BATCH_ROWS: usize = 8192;

impl StateTable {
    pub fn new(
        table_id: u32,
        schema: SchemaRef,
        pk_indices: Vec<usize>,
        store: Arc<StateStore>,
    ) -> Result<Self> {
        let value_codec = RowConverter::new(
            schema
                .fields()
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        )?;
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

    /// Inserts (or, for an existing primary key, replaces) every row of `batch`.
    pub fn upsert(&self, batch: &RecordBatch) -> Result<usize> {
        let rows = batch.num_rows();
        if rows == 0 {
            return Ok(0);
        }
        self.check_not_null(batch)?;
        let values = self.value_codec.convert_columns(batch.columns())?;
        match &self.key_codec {
            Some(key_codec) => {
                let pk_columns: Vec<ArrayRef> = self
                    .pk_indices
                    .iter()
                    .map(|i| batch.column(*i).clone())
                    .collect();
                let keys = key_codec.convert_columns(&pk_columns)?;
                let mut wb = WriteBatch::default();
                let mut key_buf = Vec::new();
                for row in 0..rows {
                    let key = keys.row(row);
                    encode_state_key(
                        self.table_id,
                        key_group_of(key.as_ref()),
                        key.as_ref(),
                        &mut key_buf,
                    );
                    wb.put(&key_buf, values.row(row).as_ref());
                }
                self.store.write(wb)?;
            }
            None => {
                self.store.write_with_row_ids(rows as u64, |first, wb| {
                    let mut key_buf = Vec::new();
                    for row in 0..rows {
                        let id = (first + row as u64).to_be_bytes();
                        encode_state_key(self.table_id, key_group_of(&id), &id, &mut key_buf);
                        wb.put(&key_buf, values.row(row).as_ref());
                    }
                    Ok(())
                })?;
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
        let mut wb = WriteBatch::default();
        match &self.key_codec {
            Some(key_codec) => {
                let pk_columns: Vec<ArrayRef> = self
                    .pk_indices
                    .iter()
                    .map(|i| batch.column(*i).clone())
                    .collect();
                let keys = key_codec.convert_columns(&pk_columns)?;
                for k in old_keys {
                    wb.delete(k);
                }
                let mut key_buf = Vec::new();
                for row in 0..batch.num_rows() {
                    let key = keys.row(row);
                    encode_state_key(
                        self.table_id,
                        key_group_of(key.as_ref()),
                        key.as_ref(),
                        &mut key_buf,
                    );
                    wb.put(&key_buf, values.row(row).as_ref());
                }
            }
            None => {
                for (row, k) in old_keys.iter().enumerate() {
                    wb.put(k, values.row(row).as_ref());
                }
            }
        }
        self.store.write(wb)?;
        Ok(old_keys.len())
    }

    /// Applies keyed changes: each row is stored under its memcomparable `key`
    /// (inserts and updates replace the row, deletes remove it). This is how a
    /// materialized view keeps one row per stream key.
    pub fn write_keyed(
        &self,
        keys: &[Vec<u8>],
        deletes: &[bool],
        batch: &RecordBatch,
    ) -> Result<()> {
        let values = self.value_codec.convert_columns(batch.columns())?;
        let mut wb = WriteBatch::default();
        let mut key_buf = Vec::new();
        for (row, key) in keys.iter().enumerate() {
            encode_state_key(self.table_id, key_group_of(key), key, &mut key_buf);
            if deletes[row] {
                wb.delete(&key_buf);
            } else {
                wb.put(&key_buf, values.row(row).as_ref());
            }
        }
        self.store.write(wb)
    }

    pub fn delete_keys(&self, keys: &[Vec<u8>]) -> Result<usize> {
        let mut wb = WriteBatch::default();
        for k in keys {
            wb.delete(k);
        }
        self.store.write(wb)?;
        Ok(keys.len())
    }

    /// Reads the whole table, in key order, as batches with each row's state key.
    pub fn scan(&self) -> Result<Vec<ScannedBatch>> {
        let parser = self.value_codec.parser();
        let mut out = Vec::new();
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut values: Vec<Vec<u8>> = Vec::new();
        let prefix = table_prefix(self.table_id);
        let mut flush = |keys: &mut Vec<Vec<u8>>, values: &mut Vec<Vec<u8>>| -> Result<()> {
            if keys.is_empty() {
                return Ok(());
            }
            let rows = values.iter().map(|v| parser.parse(v));
            let columns = self.value_codec.convert_rows(rows)?;
            let batch = RecordBatch::try_new(self.schema.clone(), columns)?;
            out.push(ScannedBatch {
                keys: std::mem::take(keys),
                batch,
            });
            values.clear();
            Ok(())
        };
        self.store.scan_prefix(&prefix, |k, v| {
            debug_assert!(k.len() >= KEY_PREFIX_LEN);
            keys.push(k.to_vec());
            values.push(v.to_vec());
            if keys.len() >= SCAN_BATCH_ROWS {
                flush(&mut keys, &mut values)?;
            }
            Ok(())
        })?;
        flush(&mut keys, &mut values)?;
        Ok(out)
    }

    /// Removes every row (the table itself stays).
    pub fn truncate(&self) -> Result<()> {
        self.store.delete_prefix(&table_prefix(self.table_id))
    }
}
