//! Dropping join state the watermarks have made useless (interval and window joins).
//!
//! When the join's condition bounds a side's matches in time — `b.ts <= a.ts + INTERVAL
//! '10' SECOND`, `b.date_time <= a.expires`, `a.window_start = b.window_start` — a
//! stored row of side `a` can only match rows of `b` whose time is at most its *bound*
//! (`a.ts + 10 s`, `a.expires`, `a.window_start`). Rows below `b`'s watermark never come
//! again, so once that watermark passes a row's bound the row is dropped, from memory and
//! (at the next barrier) from the state table. The planner derives the bounds; the
//! operator keeps each side's rows ordered by bound.

use super::side::Bytes;
use crate::error::Result;
use arrow::array::{Array, RecordBatch};
use arrow::datatypes::DataType;
use arrow::row::{RowConverter, SortField};
use datafusion::common::ScalarValue;
use datafusion::physical_expr::PhysicalExpr;
use std::collections::BTreeMap;
use std::sync::Arc;

/// How one side's rows expire.
#[derive(Clone, Debug)]
pub struct StateCleanup {
    /// The other side's column whose watermark expires this side's rows.
    pub watermark_column: usize,
    /// Over this side's columns: the largest value of that column a matching row of the
    /// other side can have.
    pub bound: Arc<dyn PhysicalExpr>,
    /// The bound's type (the watermark column's).
    pub bound_type: DataType,
    /// For `EXPLAIN`: the other side's column and the bound.
    pub describe: String,
}

/// One side's rows by bound: `(join key, row id)` under the memcomparable bound.
pub struct CleanupIndex {
    cleanup: StateCleanup,
    codec: RowConverter,
    by_bound: BTreeMap<Vec<u8>, Vec<(Bytes, Bytes)>>,
}

impl CleanupIndex {
    pub fn new(cleanup: StateCleanup) -> Result<Self> {
        let codec = RowConverter::new(vec![SortField::new(cleanup.bound_type.clone())])?;
        Ok(Self {
            cleanup,
            codec,
            by_bound: BTreeMap::new(),
        })
    }

    pub fn watermark_column(&self) -> usize {
        self.cleanup.watermark_column
    }

    /// Each row's encoded bound (`None` when NULL: such a row never expires).
    pub fn bounds(&self, batch: &RecordBatch) -> Result<Vec<Option<Vec<u8>>>> {
        let values = self
            .cleanup
            .bound
            .evaluate(batch)?
            .into_array(batch.num_rows())?;
        let values = if values.data_type() == &self.cleanup.bound_type {
            values
        } else {
            arrow::compute::cast(&values, &self.cleanup.bound_type)?
        };
        let rows = self.codec.convert_columns(std::slice::from_ref(&values))?;
        Ok((0..batch.num_rows())
            .map(|i| values.is_valid(i).then(|| rows.row(i).as_ref().to_vec()))
            .collect())
    }

    pub fn add(&mut self, bound: Vec<u8>, join_key: Bytes, id: Bytes) {
        self.by_bound.entry(bound).or_default().push((join_key, id));
    }

    /// The rows whose bound the watermark has passed, forgotten here.
    pub fn expired(&mut self, watermark: &ScalarValue) -> Result<Vec<(Bytes, Bytes)>> {
        let value = watermark.cast_to(&self.cleanup.bound_type)?.to_array()?;
        let rows = self.codec.convert_columns(&[value])?;
        let passed = rows.row(0).as_ref().to_vec();
        let kept = self.by_bound.split_off(&passed);
        let expired = std::mem::replace(&mut self.by_bound, kept);
        Ok(expired.into_values().flatten().collect())
    }
}
