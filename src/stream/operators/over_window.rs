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

use super::Operator;
use super::top_n::partitions::{Bytes, Partitions, Position, encode_rows};
use crate::error::Result;
use crate::state::OperatorState;
use crate::stream::{Op, StreamChunk, Watermark};
use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::window::WindowExpr;
use rocksdb::WriteBatch;
use std::collections::{BTreeMap, HashMap};
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
        })
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
            let key = |id: &[u8]| {
                let mut k = Vec::with_capacity(4 + partition.len() + id.len());
                k.extend_from_slice(&(partition.len() as u32).to_be_bytes());
                k.extend_from_slice(&partition);
                k.extend_from_slice(id);
                k
            };
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

impl Operator for OverWindow {
    fn name(&self) -> &'static str {
        "OverWindow"
    }

    fn process(&mut self, chunk: StreamChunk) -> Result<Vec<StreamChunk>> {
        let batch = &chunk.batch;
        let partitions = encode_rows(self.partition_codec.as_ref(), &self.spec.partition, batch)?;
        let sort_keys = encode_rows(self.order_codec.as_ref(), &self.spec.order, batch)?;
        let rows = self.row_codec.convert_columns(batch.columns())?;
        // Each partition's rows before its first change in the epoch.
        for partition in &partitions {
            if !self.before.contains_key(partition) {
                let rows = self
                    .partitions
                    .get(partition)
                    .map(|p| p.rows.clone())
                    .unwrap_or_default();
                self.before.insert(partition.clone(), rows);
            }
        }
        self.partitions
            .apply(&chunk, &partitions, &sort_keys, &rows);
        Ok(vec![])
    }

    /// Output rows change long after their input row came, so watermarks stop here,
    /// except those the planner maps to an output column (a session's end): the changes
    /// so far are emitted first, so none comes after the watermark it precedes.
    fn on_watermark(&mut self, watermark: Watermark) -> Result<super::WatermarkOutput> {
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

    fn finish(&mut self) -> Result<Vec<StreamChunk>> {
        self.emit_changes()
    }

    fn state_tables(&self) -> usize {
        1
    }

    fn checkpoint(&mut self, tables: &[OperatorState], batch: &mut WriteBatch) -> Result<()> {
        self.partitions.checkpoint(&tables[0], batch);
        Ok(())
    }

    fn restore(&mut self, tables: &[OperatorState]) -> Result<()> {
        self.partitions.restore(&tables[0])
    }
}
