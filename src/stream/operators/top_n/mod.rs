//! TopN: the first rows of each partition in a given order — `ORDER BY ... LIMIT n
//! [OFFSET m]` in a view, and `ROW_NUMBER()`, `RANK()` or `DENSE_RANK() OVER (PARTITION
//! BY ... ORDER BY ...)` filtered to a range of ranks (`<= n`, `= 1` for dedup).
//!
//! Every input row is kept in its partition in sort order ([`partitions`]), in the
//! operator's state table, so that when a shown row is deleted the next one takes its
//! place; memory holds each partition's first rows (twice those shown) and reads the
//! next ones back when deletes leave too few. An append-only input never deletes, so
//! its partitions keep only the rows that could still be shown.
//!
//! Like an aggregate, a top-N emits at the barrier: a partition changed in the epoch
//! compares the rows it showed at the epoch's start with those it shows now, and emits
//! a delete for each row that left, an insert for each that entered, and an update for a
//! shown row whose values (or rank, when the rank is a column) changed. An output row's
//! stream key is its partition and its row id, so a row moving between partitions (and
//! subtasks) is a delete of one key and an insert of another.

pub(crate) mod partitions;

use super::Operator;
use crate::error::Result;
use crate::state::OperatorState;
use crate::state::StateWrites;
use crate::stream::{Op, StreamChunk, Watermark};
use arrow::array::{ArrayRef, RecordBatch, UInt64Array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion::common::{HashMap, HashSet};
use datafusion::physical_expr::PhysicalExpr;
use partitions::{Bytes, Partitions, encode_rows};
use std::sync::Arc;

/// How rows are numbered within a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankKind {
    /// 1, 2, 3, ... (ties in any order).
    RowNumber,
    /// Ties share a rank; the next rank skips (1, 1, 3).
    Rank,
    /// Ties share a rank; the next rank follows (1, 1, 2).
    DenseRank,
}

impl RankKind {
    pub fn sql_name(self) -> &'static str {
        match self {
            RankKind::RowNumber => "row_number",
            RankKind::Rank => "rank",
            RankKind::DenseRank => "dense_rank",
        }
    }
}

#[derive(Clone)]
pub struct TopNSpec {
    /// The partition key (none: one partition, one subtask).
    pub partition: Vec<Arc<dyn PhysicalExpr>>,
    pub partition_types: Vec<DataType>,
    /// The sort expressions, with their types and directions.
    pub order: Vec<Arc<dyn PhysicalExpr>>,
    pub order_fields: Vec<SortField>,
    pub rank: RankKind,
    /// The ranks shown, from 1, both ends included.
    pub ranks: (u64, u64),
    pub input: SchemaRef,
    /// The input's columns, then the rank when `rank_column`.
    pub output: SchemaRef,
    pub rank_column: bool,
    /// The input carries stream keys (it may delete); otherwise ids are sequences.
    pub keyed_input: bool,
}

/// A row shown at the start of the epoch.
struct Shown {
    id: Bytes,
    rank: u64,
    row: Bytes,
}

pub struct TopN {
    spec: TopNSpec,
    partition_codec: Option<RowConverter>,
    order_codec: RowConverter,
    row_codec: RowConverter,
    partitions: Partitions,
    /// Partitions changed in this epoch, with the rows each showed at its start.
    shown_before: HashMap<Bytes, Vec<Shown>>,
}

impl TopN {
    pub fn new(spec: TopNSpec) -> Result<Self> {
        let partition_codec = if spec.partition.is_empty() {
            None
        } else {
            // Encoded as the hash exchange encodes it: the state's key group is the one
            // the rows are routed by.
            Some(RowConverter::new(
                spec.partition_types
                    .iter()
                    .cloned()
                    .map(SortField::new)
                    .collect(),
            )?)
        };
        let order_codec = RowConverter::new(spec.order_fields.clone())?;
        let row_codec = RowConverter::new(
            spec.input
                .fields()
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        )?;
        let row_limit = spec.keyed_input.then(|| rows_kept_in_memory(spec.ranks.1));
        Ok(Self {
            spec,
            partition_codec,
            order_codec,
            row_codec,
            // A keyed input may delete shown rows: memory keeps a partition's first rows,
            // twice those shown, and reads the next ones back when deletes leave too few.
            // An append-only partition keeps only the rows that can be shown.
            partitions: Partitions::new(row_limit),
            shown_before: HashMap::new(),
        })
    }

    /// The rows a partition shows now, and how many of its first rows could still be
    /// shown were nothing ever deleted (all rows up to the last one ranked in range).
    /// Rows past those in memory are read back from state as far as the ranks need.
    fn shown(&mut self, partition: &[u8]) -> Result<(Vec<Shown>, usize)> {
        loop {
            let (shown, kept, ran_out) = self.shown_in_memory(partition);
            if !ran_out || self.partitions.is_complete(partition) {
                return Ok((shown, kept));
            }
            self.partitions.load_more(partition)?;
        }
    }

    /// [`TopN::shown`] over the rows in memory; also whether they ran out before a rank
    /// past the range was reached.
    fn shown_in_memory(&self, partition: &[u8]) -> (Vec<Shown>, usize, bool) {
        let (low, high) = self.spec.ranks;
        let mut shown = Vec::new();
        let mut kept = 0;
        let Some(p) = self.partitions.get(partition) else {
            return (shown, kept, false);
        };
        let mut rank = 0u64;
        let mut previous: Option<&[u8]> = None;
        for (position, ((sort_key, id), row)) in p.rows.iter().enumerate() {
            let tie = previous == Some(&**sort_key);
            rank = match self.spec.rank {
                RankKind::RowNumber => position as u64 + 1,
                RankKind::Rank if tie => rank,
                RankKind::Rank => position as u64 + 1,
                RankKind::DenseRank if tie => rank,
                RankKind::DenseRank => rank + 1,
            };
            if rank > high {
                return (shown, kept, false);
            }
            kept = position + 1;
            if rank >= low {
                shown.push(Shown {
                    id: id.clone(),
                    rank,
                    row: row.clone(),
                });
            }
            previous = Some(sort_key);
        }
        (shown, kept, true)
    }

    /// Emits, for every partition changed in the epoch, how what it shows changed.
    fn emit_changes(&mut self) -> Result<Vec<StreamChunk>> {
        if self.shown_before.is_empty() {
            return Ok(vec![]);
        }
        let mut out = Changes::default();
        for (partition, before) in std::mem::take(&mut self.shown_before) {
            let (now, _) = self.shown(&partition)?;
            let mut before: HashMap<&[u8], &Shown> = before.iter().map(|s| (&*s.id, s)).collect();
            let mut entered = Vec::new();
            for row in &now {
                match before.remove(&*row.id) {
                    None => entered.push(row),
                    Some(old) => {
                        let rank_changed = self.spec.rank_column && old.rank != row.rank;
                        if old.row != row.row || rank_changed {
                            out.push(Op::UpdateDelete, &partition, old);
                            out.push(Op::UpdateInsert, &partition, row);
                        }
                    }
                }
            }
            for old in before.into_values() {
                out.push(Op::Delete, &partition, old);
            }
            for row in entered {
                out.push(Op::Insert, &partition, row);
            }
        }
        out.finish(self)
    }
}

/// How many of a partition's first rows memory keeps when `high` is the last rank shown:
/// twice those (at least 16 more), so that deletes rarely need a read-back.
fn rows_kept_in_memory(high: u64) -> usize {
    let high = usize::try_from(high).unwrap_or(usize::MAX);
    high.saturating_add(high.max(16))
}

/// Output rows being collected.
#[derive(Default)]
struct Changes {
    ops: Vec<Op>,
    keys: Vec<Vec<u8>>,
    rows: Vec<Bytes>,
    ranks: Vec<u64>,
}

impl Changes {
    fn push(&mut self, op: Op, partition: &[u8], row: &Shown) {
        self.ops.push(op);
        let mut key = Vec::with_capacity(4 + partition.len() + row.id.len());
        key.extend_from_slice(&(partition.len() as u32).to_be_bytes());
        key.extend_from_slice(partition);
        key.extend_from_slice(&row.id);
        self.keys.push(key);
        self.rows.push(row.row.clone());
        self.ranks.push(row.rank);
    }

    fn finish(self, top_n: &TopN) -> Result<Vec<StreamChunk>> {
        if self.ops.is_empty() {
            return Ok(vec![]);
        }
        let parser = top_n.row_codec.parser();
        let mut columns = top_n
            .row_codec
            .convert_rows(self.rows.iter().map(|r| parser.parse(r)))?;
        if top_n.spec.rank_column {
            let ranks: ArrayRef = Arc::new(UInt64Array::from(self.ranks));
            let field = top_n.spec.output.fields().last().expect("the rank column");
            columns.push(cast(&ranks, field.data_type())?);
        }
        let batch = RecordBatch::try_new(top_n.spec.output.clone(), columns)?;
        Ok(vec![StreamChunk {
            ops: self.ops,
            batch,
            keys: Some(self.keys),
        }])
    }
}

impl Operator for TopN {
    fn name(&self) -> &'static str {
        "TopN"
    }

    fn process(&mut self, chunk: StreamChunk) -> Result<Vec<StreamChunk>> {
        let batch = &chunk.batch;
        let partitions = encode_rows(self.partition_codec.as_ref(), &self.spec.partition, batch)?;
        let sort_keys = encode_rows(Some(&self.order_codec), &self.spec.order, batch)?;
        let rows = self.row_codec.convert_columns(batch.columns())?;
        // What each partition shows before its first change in the epoch.
        for partition in &partitions {
            if !self.shown_before.contains_key(partition) {
                self.partitions.load(partition)?;
                let (shown, _) = self.shown(partition)?;
                self.shown_before.insert(partition.clone(), shown);
            }
        }
        self.partitions
            .apply(&chunk, &partitions, &sort_keys, &rows)?;
        // An append-only input never brings back a row pushed out of range.
        if !self.spec.keyed_input {
            let touched: HashSet<&Bytes> = partitions.iter().collect();
            for partition in touched {
                let (_, kept) = self.shown(partition)?;
                self.partitions.truncate(partition, kept);
            }
        }
        self.partitions.report();
        Ok(vec![])
    }

    /// Rows are emitted as they were, after reordering: no watermark holds for them.
    fn on_watermark(&mut self, _watermark: Watermark) -> Result<super::WatermarkOutput> {
        Ok((vec![], vec![]))
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

    fn checkpoint(&mut self, tables: &[OperatorState], batch: &mut StateWrites) -> Result<()> {
        self.partitions.checkpoint(&tables[0], batch);
        Ok(())
    }

    fn restore(&mut self, tables: &[OperatorState]) -> Result<()> {
        self.partitions.restore(&tables[0])
    }
}

#[cfg(test)]
mod tests;
