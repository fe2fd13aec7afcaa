//! OverWindow: window functions over partitions — `lag`, `lead`, `first_value`,
//! `last_value`, `row_number`, `rank`, running and sliding `sum`/`count`/`avg`/`min`/
//! `max ... OVER (PARTITION BY ... ORDER BY ... [ROWS|RANGE ...])` — with every input row
//! in the output, extended by the functions' values.
//!
//! Each partition keeps its rows in sort order (the same per-partition store as
//! [`super::top_n`]). A partition changed in an epoch is evaluated at the barrier twice,
//! as it was at the epoch's start and as it is now, by DataFusion's own window
//! expressions over the partition's rows in order (so every function and frame means
//! exactly what it means in a batch query); rows whose values changed are emitted as
//! updates, rows that came or went as inserts and deletes. An output row's stream key is
//! its partition and row id. Evaluating a whole partition costs its size, once per epoch
//! in which it changes.
//!
//! With `EMIT ON WINDOW CLOSE` ([`EowcOrder`]) the input is append-only and ordered by a
//! watermarked time: rows are held (in a second state table) until the watermark passes
//! them, then added to their partitions in time order, and each row is emitted once, as
//! an insert, when its values are final: when as many rows follow it in its partition as
//! its frames look ahead (`ROWS ... n FOLLOWING`, `lead(x, n)`). The output is then
//! append-only, as RisingWave's is.

use super::Operator;
use super::top_n::partitions::{Bytes, Partitions, Position, encode_rows};
use crate::error::Result;
use crate::state::OperatorState;
use crate::state::StateWrites;
use crate::stream::{Op, StreamChunk, Watermark};
use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion::common::HashMap;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::window::WindowExpr;
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Clone)]
pub struct OverWindowSpec {
    /// The partition key (none: one partition, one subtask).
    pub partition: Vec<Arc<dyn PhysicalExpr>>,
    pub partition_types: Vec<DataType>,
    /// The window's `ORDER BY`, with types and directions, for the rows' order.
    pub order: Vec<Arc<dyn PhysicalExpr>>,
    pub order_fields: Vec<SortField>,
    /// The window functions, planned by DataFusion over the input's columns.
    pub functions: Vec<Arc<dyn WindowExpr>>,
    pub input: SchemaRef,
    /// The input's columns, then one per function.
    pub output: SchemaRef,
    /// Input columns whose watermark holds for an output column, as (input, output):
    /// a session's end over an append-only input (a session ending before the input's
    /// watermark can never grow again).
    pub watermarks: Vec<(usize, usize)>,
    /// `EMIT ON WINDOW CLOSE`: the input is released in time order, rows emitted once final.
    pub eowc: Option<EowcOrder>,
}

#[derive(Clone, Copy)]
pub struct EowcOrder {
    /// The input column of the window's first `ORDER BY` key, which has a watermark.
    pub time_column: usize,
    /// How many rows after a row its values depend on.
    pub following: usize,
}

pub struct OverWindow {
    spec: OverWindowSpec,
    partition_codec: Option<RowConverter>,
    /// `None` without `ORDER BY`: rows are then in id order.
    order_codec: Option<RowConverter>,
    row_codec: RowConverter,
    /// Encodes a row's function values, to tell whether they changed.
    value_codec: RowConverter,
    partitions: Partitions,
    /// Partitions changed in this epoch, with their rows at its start.
    before: HashMap<Bytes, BTreeMap<Position, Bytes>>,
    /// `EMIT ON WINDOW CLOSE`: rows waiting for the watermark.
    held: HeldRows,
    /// The input ended: every frame is complete.
    ended: bool,
}

/// Rows held until the watermark passes them: by (time, a unique suffix), each its
/// partition (length-prefixed) and then the row.
#[derive(Default)]
struct HeldRows {
    rows: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Entries added (`true`) or released since the last checkpoint.
    changed: Vec<(Vec<u8>, Vec<u8>, bool)>,
    /// Rows below this time are late (dropped).
    released_below: Option<Vec<u8>>,
    salt: u64,
    next: u64,
}

/// One partition's rows evaluated: all output columns, and per row its id.
struct Evaluated {
    batch: RecordBatch,
    ids: Vec<Bytes>,
    rows: Vec<Bytes>,
    values: Vec<Bytes>,
}

impl OverWindow {
    pub fn new(spec: OverWindowSpec) -> Result<Self> {
        let partition_codec = if spec.partition.is_empty() {
            None
        } else {
            Some(RowConverter::new(
                spec.partition_types
                    .iter()
                    .cloned()
                    .map(SortField::new)
                    .collect(),
            )?)
        };
        let fields = |schema: &SchemaRef, skip: usize| {
            schema
                .fields()
                .iter()
                .skip(skip)
                .map(|f| SortField::new(f.data_type().clone()))
                .collect::<Vec<_>>()
        };
        let order_codec = if spec.order_fields.is_empty() {
            None
        } else {
            Some(RowConverter::new(spec.order_fields.clone())?)
        };
        let row_codec = RowConverter::new(fields(&spec.input, 0))?;
        let value_codec = RowConverter::new(fields(&spec.output, spec.input.fields().len()))?;
        Ok(Self {
            spec,
            partition_codec,
            order_codec,
            row_codec,
            value_codec,
            partitions: Partitions::default(),
            before: HashMap::new(),
            held: HeldRows {
                salt: super::random_salt(),
                ..HeldRows::default()
            },
            ended: false,
        })
    }

    /// Adds rows to their partitions (remembering each changed partition's rows first).
    fn apply(&mut self, chunk: StreamChunk) -> Result<()> {
        let batch = &chunk.batch;
        let partitions = encode_rows(self.partition_codec.as_ref(), &self.spec.partition, batch)?;
        let sort_keys = encode_rows(self.order_codec.as_ref(), &self.spec.order, batch)?;
        let rows = self.row_codec.convert_columns(batch.columns())?;
        for partition in &partitions {
            if !self.before.contains_key(partition) {
                self.partitions.load(partition)?;
                let rows = self
                    .partitions
                    .get(partition)
                    .map(|p| p.rows.clone())
                    .unwrap_or_default();
                self.before.insert(partition.clone(), rows);
            }
        }
        self.partitions
            .apply(&chunk, &partitions, &sort_keys, &rows)?;
        self.partitions.report();
        Ok(())
    }

    /// `EMIT ON WINDOW CLOSE`: holds each row until the watermark passes its time.
    fn hold(&mut self, chunk: &StreamChunk, time_column: usize) -> Result<()> {
        if chunk.ops.iter().any(|op| !op.is_insert()) {
            return Err(crate::error::EddyError::internal(
                "EMIT ON WINDOW CLOSE over a window got updates",
            ));
        }
        let batch = &chunk.batch;
        let partitions = encode_rows(self.partition_codec.as_ref(), &self.spec.partition, batch)?;
        let times = self
            .time_codec(time_column)?
            .convert_columns(&[batch.column(time_column).clone()])?;
        let rows = self.row_codec.convert_columns(batch.columns())?;
        let held = &mut self.held;
        for (i, partition) in partitions.iter().enumerate() {
            if batch.column(time_column).is_null(i) {
                continue; // never closed by any watermark
            }
            let time = times.row(i);
            if held
                .released_below
                .as_ref()
                .is_some_and(|b| time.as_ref() < b.as_slice())
            {
                continue; // late
            }
            held.next += 1;
            let mut key = time.as_ref().to_vec();
            key.extend_from_slice(&held.salt.to_be_bytes());
            key.extend_from_slice(&held.next.to_be_bytes());
            let mut entry = Vec::new();
            crate::state::keys::put_len_prefixed(&mut entry, partition);
            entry.extend_from_slice(rows.row(i).as_ref());
            held.changed.push((key.clone(), entry.clone(), true));
            held.rows.insert(key, entry);
        }
        Ok(())
    }

    fn time_codec(&self, time_column: usize) -> Result<RowConverter> {
        Ok(RowConverter::new(vec![SortField::new(
            self.spec.input.field(time_column).data_type().clone(),
        )])?)
    }

    /// Adds the held rows below `bound` (all with `None`) to their partitions, in time
    /// order; a row that would land before rows already in its partition (late after a
    /// restart) is dropped.
    fn release(&mut self, bound: Option<&[u8]>) -> Result<()> {
        let released = match bound {
            Some(bound) => {
                let kept = self.held.rows.split_off(bound);
                std::mem::replace(&mut self.held.rows, kept)
            }
            None => std::mem::take(&mut self.held.rows),
        };
        if released.is_empty() {
            return Ok(());
        }
        let parser = self.row_codec.parser();
        let mut rows = Vec::with_capacity(released.len());
        for (key, entry) in released {
            let (_, row) = crate::state::keys::take_len_prefixed(&entry)
                .ok_or_else(|| crate::error::EddyError::internal("a held row is malformed"))?;
            rows.push(row.to_vec());
            self.held.changed.push((key, entry, false));
        }
        let columns = self
            .row_codec
            .convert_rows(rows.iter().map(|r| parser.parse(r)))?;
        let batch = RecordBatch::try_new(self.spec.input.clone(), columns)?;
        let partitions = encode_rows(self.partition_codec.as_ref(), &self.spec.partition, &batch)?;
        let sort_keys = encode_rows(self.order_codec.as_ref(), &self.spec.order, &batch)?;
        // A row released after its partition's last one is late: the partition is read
        // from state to tell.
        for partition in &partitions {
            self.partitions.load(partition)?;
        }
        let in_order: Vec<bool> = partitions
            .iter()
            .zip(&sort_keys)
            .map(|(partition, sort_key)| {
                self.partitions
                    .get(partition)
                    .and_then(|p| p.rows.keys().next_back())
                    .is_none_or(|(last, _)| last <= sort_key)
            })
            .collect();
        let batch = arrow::compute::filter_record_batch(
            &batch,
            &arrow::array::BooleanArray::from(in_order),
        )?;
        self.apply(StreamChunk::inserts(batch))
    }

    /// The window functions over a partition's rows (in order).
    fn evaluate_partition(&self, rows: &BTreeMap<Position, Bytes>) -> Result<Evaluated> {
        if rows.is_empty() {
            return Ok(Evaluated {
                batch: RecordBatch::new_empty(self.spec.output.clone()),
                ids: vec![],
                rows: vec![],
                values: vec![],
            });
        }
        let parser = self.row_codec.parser();
        let mut columns = self
            .row_codec
            .convert_rows(rows.values().map(|r| parser.parse(r)))?;
        let input = RecordBatch::try_new(self.spec.input.clone(), columns.clone())?;
        let mut values = Vec::with_capacity(self.spec.functions.len());
        for (f, field) in self
            .spec
            .functions
            .iter()
            .zip(self.spec.output.fields().iter().skip(columns.len()))
        {
            let v = f.evaluate(&input)?;
            values.push(if v.data_type() == field.data_type() {
                v
            } else {
                arrow::compute::cast(&v, field.data_type())?
            });
        }
        let encoded = self.value_codec.convert_columns(&values)?;
        columns.extend(values);
        Ok(Evaluated {
            batch: RecordBatch::try_new(self.spec.output.clone(), columns)?,
            ids: rows.keys().map(|(_, id)| id.clone()).collect(),
            rows: rows.values().cloned().collect(),
            values: encoded.iter().map(|r| r.as_ref().into()).collect(),
        })
    }

    /// Emits, for every partition changed in the epoch, how its rows' values changed.
    fn emit_changes(&mut self) -> Result<Vec<StreamChunk>> {
        let mut out = Vec::new();
        for (partition, old_rows) in std::mem::take(&mut self.before) {
            let empty = BTreeMap::new();
            let new_rows = self.partitions.get(&partition).map_or(&empty, |p| &p.rows);
            if let Some(eowc) = self.spec.eowc {
                // Rows are only ever appended: emit those that became final.
                let following = if self.ended { 0 } else { eowc.following };
                let start = old_rows.len().saturating_sub(eowc.following);
                let end = new_rows.len().saturating_sub(following);
                if start >= end {
                    continue;
                }
                let new = self.evaluate_partition(new_rows)?;
                let keys = new.ids[start..end]
                    .iter()
                    .map(|id| partition_row_key(&partition, id))
                    .collect();
                out.push(StreamChunk {
                    ops: vec![Op::Insert; end - start],
                    batch: new.batch.slice(start, end - start),
                    keys: Some(keys),
                });
                continue;
            }
            let old = self.evaluate_partition(&old_rows)?;
            let new = self.evaluate_partition(new_rows)?;
            let mut old_index: HashMap<&[u8], usize> = old
                .ids
                .iter()
                .enumerate()
                .map(|(i, id)| (&**id, i))
                .collect();
            // (batch: 0 old, 1 new; row), op, id
            let mut picks: Vec<(usize, usize)> = Vec::new();
            let mut ops = Vec::new();
            let mut keys = Vec::new();
            let key = |id: &[u8]| partition_row_key(&partition, id);
            let mut inserts = Vec::new();
            for (j, id) in new.ids.iter().enumerate() {
                match old_index.remove(&**id) {
                    None => inserts.push(j),
                    Some(i) => {
                        if old.rows[i] != new.rows[j] || old.values[i] != new.values[j] {
                            picks.extend([(0, i), (1, j)]);
                            ops.extend([Op::UpdateDelete, Op::UpdateInsert]);
                            keys.extend([key(id), key(id)]);
                        }
                    }
                }
            }
            let mut gone: Vec<usize> = old_index.into_values().collect();
            gone.sort_unstable();
            for i in gone {
                picks.push((0, i));
                ops.push(Op::Delete);
                keys.push(key(&old.ids[i]));
            }
            for j in inserts {
                picks.push((1, j));
                ops.push(Op::Insert);
                keys.push(key(&new.ids[j]));
            }
            if picks.is_empty() {
                continue;
            }
            let columns = (0..self.spec.output.fields().len())
                .map(|c| {
                    let sources: [&dyn Array; 2] =
                        [old.batch.column(c).as_ref(), new.batch.column(c).as_ref()];
                    Ok(arrow::compute::interleave(&sources, &picks)?)
                })
                .collect::<Result<Vec<ArrayRef>>>()?;
            out.push(StreamChunk {
                ops,
                batch: RecordBatch::try_new(self.spec.output.clone(), columns)?,
                keys: Some(keys),
            });
        }
        Ok(out)
    }
}

/// An output row's stream key: its partition (length-prefixed) and row id.
fn partition_row_key(partition: &[u8], id: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + partition.len() + id.len());
    k.extend_from_slice(&(partition.len() as u32).to_be_bytes());
    k.extend_from_slice(partition);
    k.extend_from_slice(id);
    k
}

impl Operator for OverWindow {
    fn name(&self) -> &'static str {
        "OverWindow"
    }

    fn process(&mut self, chunk: StreamChunk) -> Result<Vec<StreamChunk>> {
        match self.spec.eowc {
            Some(eowc) => self.hold(&chunk, eowc.time_column)?,
            None => self.apply(chunk)?,
        }
        Ok(vec![])
    }

    /// Output rows change long after their input row came, so watermarks stop here,
    /// except those the planner maps to an output column (a session's end): the changes
    /// so far are emitted first, so none comes after the watermark it precedes.
    fn on_watermark(&mut self, watermark: Watermark) -> Result<super::WatermarkOutput> {
        if let Some(eowc) = self.spec.eowc
            && watermark.column == eowc.time_column
        {
            let value = watermark.value.to_array_of_size(1)?;
            let value =
                arrow::compute::cast(&value, self.spec.input.field(eowc.time_column).data_type())?;
            let bound = self
                .time_codec(eowc.time_column)?
                .convert_columns(&[value])?
                .row(0)
                .as_ref()
                .to_vec();
            if self.held.released_below.as_ref().is_none_or(|b| *b < bound) {
                self.held.released_below = Some(bound.clone());
            }
            self.release(Some(&bound))?;
            return Ok((vec![], vec![]));
        }
        let outputs: Vec<Watermark> = self
            .spec
            .watermarks
            .iter()
            .filter(|(input, _)| *input == watermark.column)
            .map(|(_, output)| Watermark {
                column: *output,
                value: watermark.value.clone(),
            })
            .collect();
        if outputs.is_empty() {
            return Ok((vec![], vec![]));
        }
        Ok((self.emit_changes()?, outputs))
    }

    fn on_barrier(&mut self) -> Result<Vec<StreamChunk>> {
        self.emit_changes()
    }

    /// At the end of a bounded input every held row is released and every frame is
    /// complete.
    fn finish(&mut self) -> Result<Vec<StreamChunk>> {
        if self.spec.eowc.is_some() {
            self.release(None)?;
            self.ended = true;
            // Partitions unchanged in this epoch still hold rows waiting for followers.
            self.partitions.load_all()?;
            for (partition, p) in self.partitions.iter() {
                if !self.before.contains_key(partition) {
                    self.before.insert(partition.clone(), p.rows.clone());
                }
            }
        }
        self.emit_changes()
    }

    fn state_tables(&self) -> usize {
        match self.spec.eowc {
            Some(_) => 2,
            None => 1,
        }
    }

    fn checkpoint(&mut self, tables: &[OperatorState], batch: &mut StateWrites) -> Result<()> {
        self.partitions.checkpoint(&tables[0], batch);
        for (key, entry, held) in self.held.changed.drain(..) {
            let (partition, _) = crate::state::keys::take_len_prefixed(&entry)
                .ok_or_else(|| crate::error::EddyError::internal("a held row is malformed"))?;
            let group = crate::state::keys::key_group_of(partition);
            tables[1].put_in_group(batch, group, &key, held.then_some(entry.as_slice()));
        }
        Ok(())
    }

    fn restore(&mut self, tables: &[OperatorState]) -> Result<()> {
        self.partitions.restore(&tables[0])?;
        if self.spec.eowc.is_some() {
            tables[1].scan_owned(|key, entry| {
                self.held.rows.insert(key.to_vec(), entry.to_vec());
                Ok(())
            })?;
        }
        Ok(())
    }
}
