//! EowcSort: `EMIT ON WINDOW CLOSE` on a query without an aggregate. Append-only rows are
//! held until the watermark of their time column passes them (a row whose time is below
//! the watermark can no longer be joined by earlier ones), then emitted in time order
//! and forgotten. Rows that arrive below the watermark are late and dropped, as the
//! window-closing aggregate drops them. Held rows are kept in RocksDB too, in the key
//! group the hash exchange in front routes them by: the whole row's, or, in front of a
//! window top-N ([`EowcSort::routed_by`]), its partition key's — so that all the rows of
//! a window are in one subtask and come out together when it closes.

use super::{Operator, WatermarkOutput};
use crate::error::{EddyError, Result};
use crate::state::StateWrites;
use crate::state::keys::{put_len_prefixed, take_len_prefixed, whole_row_codec};
use crate::state::{OperatorState, key_group_of};
use crate::stream::{StreamChunk, Watermark};
use arrow::array::{Array, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;
use std::collections::BTreeMap;
use std::sync::Arc;

pub struct EowcSort {
    /// The watermarked column rows are released by.
    column: usize,
    schema: SchemaRef,
    /// Whole rows (the exchange's routing encoding).
    row_codec: RowConverter,
    /// The time column, memcomparable.
    time_codec: RowConverter,
    /// Held rows by (time, a unique suffix): encoded rows.
    held: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Held keys added or released since the last checkpoint.
    changed: Vec<(Vec<u8>, bool)>,
    /// Rows below this time are late.
    released_below: Option<Vec<u8>>,
    /// Unique suffixes: a random prefix per operator instance, then a counter.
    salt: u64,
    next: u64,
    /// The key the exchange in front routes by, when it is not the whole row: its
    /// expressions and their encoding. Held rows are then stored with their key group
    /// in front of the row.
    routing: Option<(Vec<Arc<dyn PhysicalExpr>>, RowConverter)>,
}

impl EowcSort {
    pub fn new(column: usize, schema: SchemaRef) -> Result<Self> {
        let row_codec = whole_row_codec(&schema)?;
        let time_codec = RowConverter::new(vec![SortField::new(
            schema.field(column).data_type().clone(),
        )])?;
        Ok(Self {
            column,
            schema,
            row_codec,
            time_codec,
            held: BTreeMap::new(),
            changed: Vec::new(),
            released_below: None,
            salt: super::random_salt(),
            next: 0,
            routing: None,
        })
    }

    /// Rows routed to this subtask by `keys` (of `key_types`) rather than by the whole row.
    pub fn routed_by(
        mut self,
        keys: Vec<Arc<dyn PhysicalExpr>>,
        key_types: Vec<arrow::datatypes::DataType>,
    ) -> Result<Self> {
        let codec = RowConverter::new(key_types.into_iter().map(SortField::new).collect())?;
        self.routing = Some((keys, codec));
        Ok(self)
    }

    /// The row bytes of a held entry (after the key group, when routed).
    fn row_of<'a>(&self, entry: &'a [u8]) -> &'a [u8] {
        match self.routing {
            Some(_) => &entry[2..],
            None => entry,
        }
    }

    /// The key group a held entry is stored in.
    fn group_of(&self, entry: &[u8]) -> crate::state::keys::KeyGroup {
        match self.routing {
            Some(_) => u16::from_be_bytes([entry[0], entry[1]]),
            None => key_group_of(entry),
        }
    }

    /// Emits the held rows below `bound` (all with `None`), in time order.
    fn release(&mut self, bound: Option<&[u8]>) -> Result<Vec<StreamChunk>> {
        let released = match bound {
            Some(bound) => {
                let kept = self.held.split_off(bound);
                std::mem::replace(&mut self.held, kept)
            }
            None => std::mem::take(&mut self.held),
        };
        if released.is_empty() {
            return Ok(vec![]);
        }
        let parser = self.row_codec.parser();
        let columns = self
            .row_codec
            .convert_rows(released.values().map(|r| parser.parse(self.row_of(r))))?;
        self.changed.extend(
            released
                .into_iter()
                .map(|(k, row)| (time_key_with_row(k, row), false)),
        );
        let batch = RecordBatch::try_new(self.schema.clone(), columns)?;
        Ok(vec![StreamChunk::inserts(batch)])
    }
}

/// The state entry of a held row: its key, then the row (so the key group can be
/// computed at checkpoint from the row).
fn time_key_with_row(key: Vec<u8>, row: Vec<u8>) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + key.len() + row.len());
    put_len_prefixed(&mut out, &key);
    out.extend_from_slice(&row);
    out
}

fn split_entry(entry: &[u8]) -> Result<(&[u8], &[u8])> {
    take_len_prefixed(entry).ok_or_else(|| EddyError::internal("a held row's state is malformed"))
}

impl Operator for EowcSort {
    fn name(&self) -> &'static str {
        "EowcSort"
    }

    fn process(&mut self, chunk: StreamChunk) -> Result<Vec<StreamChunk>> {
        if chunk.keys.is_some() || chunk.ops.iter().any(|op| !op.is_insert()) {
            return Err(EddyError::internal(
                "EMIT ON WINDOW CLOSE without an aggregate got updates",
            ));
        }
        let rows = self.row_codec.convert_columns(chunk.batch.columns())?;
        let routing_keys = match &self.routing {
            Some((exprs, codec)) => {
                let columns = exprs
                    .iter()
                    .map(|e| crate::stream::expression_errors::evaluate(e, &chunk.batch))
                    .collect::<Result<Vec<_>>>()?;
                Some(codec.convert_columns(&columns)?)
            }
            None => None,
        };
        let times = self
            .time_codec
            .convert_columns(&[chunk.batch.column(self.column).clone()])?;
        for i in 0..chunk.num_rows() {
            if chunk.batch.column(self.column).is_null(i) {
                continue; // never closed by any watermark
            }
            let time = times.row(i);
            if self
                .released_below
                .as_ref()
                .is_some_and(|b| time.as_ref() < b.as_slice())
            {
                continue; // late
            }
            self.next += 1;
            let mut key = time.as_ref().to_vec();
            key.extend_from_slice(&self.salt.to_be_bytes());
            key.extend_from_slice(&self.next.to_be_bytes());
            let row = match &routing_keys {
                Some(keys) => {
                    let mut entry = key_group_of(keys.row(i).as_ref()).to_be_bytes().to_vec();
                    entry.extend_from_slice(rows.row(i).as_ref());
                    entry
                }
                None => rows.row(i).as_ref().to_vec(),
            };
            self.changed
                .push((time_key_with_row(key.clone(), row.clone()), true));
            self.held.insert(key, row);
        }
        Ok(vec![])
    }

    fn on_watermark(&mut self, watermark: Watermark) -> Result<WatermarkOutput> {
        if watermark.column != self.column {
            return Ok((vec![], vec![watermark]));
        }
        let value = watermark.value.to_array_of_size(1)?;
        let value = cast(&value, self.schema.field(self.column).data_type())?;
        let bound = self
            .time_codec
            .convert_columns(&[value])?
            .row(0)
            .as_ref()
            .to_vec();
        if self.released_below.as_ref().is_none_or(|b| *b < bound) {
            self.released_below = Some(bound.clone());
        }
        let chunks = self.release(Some(&bound))?;
        Ok((chunks, vec![watermark]))
    }

    fn finish(&mut self) -> Result<Vec<StreamChunk>> {
        self.release(None)
    }

    fn state_tables(&self) -> usize {
        1
    }

    fn checkpoint(&mut self, tables: &[OperatorState], batch: &mut StateWrites) -> Result<()> {
        for (entry, held) in std::mem::take(&mut self.changed) {
            let (key, row) = split_entry(&entry)?;
            let group = self.group_of(row);
            let mut state_key = Vec::with_capacity(4 + key.len());
            put_len_prefixed(&mut state_key, key);
            tables[0].put_in_group(batch, group, &state_key, held.then_some(row));
        }
        Ok(())
    }

    fn restore(&mut self, tables: &[OperatorState]) -> Result<()> {
        tables[0].scan_owned(|state_key, row| {
            let (key, _) = split_entry(state_key)?;
            self.held.insert(key.to_vec(), row.to_vec());
            Ok(())
        })
    }
}
