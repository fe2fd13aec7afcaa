//! Changelog: a stream's changes as rows (RisingWave's `WITH sub AS changelog FROM t`).
//!
//! Every change becomes an inserted row with the change's kind in `changelog_op` (1
//! insert, 2 delete, 3 the new version of an updated row, 4 its old version, as
//! RisingWave numbers them) and, when asked for, an increasing `_changelog_row_id`: an
//! append-only stream, without keys, that a view keeps in full.

use super::{Operator, random_salt, temporal_filter::processing_time_micros};
use crate::dataflow::{Op, StreamChunk};
use crate::error::Result;
use arrow::array::{ArrayRef, Int16Array, Int64Array, RecordBatch};
use arrow::datatypes::SchemaRef;
use std::sync::Arc;

/// RisingWave's number for each kind of change.
pub fn op_code(op: Op) -> i16 {
    match op {
        Op::Insert => 1,
        Op::Delete => 2,
        Op::UpdateInsert => 3,
        Op::UpdateDelete => 4,
    }
}

pub struct Changelog {
    /// The input's columns, then `changelog_op` (and `_changelog_row_id`).
    schema: SchemaRef,
    with_row_id: bool,
    row_ids: RowIds,
}

impl Changelog {
    pub fn new(schema: SchemaRef, with_row_id: bool) -> Self {
        Self {
            schema,
            with_row_id,
            row_ids: RowIds::new(),
        }
    }
}

impl Operator for Changelog {
    fn name(&self) -> &'static str {
        "Changelog"
    }

    fn process(&mut self, chunk: StreamChunk) -> Result<Vec<StreamChunk>> {
        let mut columns: Vec<ArrayRef> = chunk.batch.columns().to_vec();
        columns.push(Arc::new(Int16Array::from_iter_values(
            chunk.ops.iter().map(|op| op_code(*op)),
        )));
        if self.with_row_id {
            columns.push(Arc::new(self.row_ids.take(chunk.num_rows())));
        }
        let batch = RecordBatch::try_new(self.schema.clone(), columns)?;
        Ok(vec![StreamChunk::inserts(batch)])
    }
}

/// Row ids that increase within an instance and differ between instances: the wall
/// clock in milliseconds in the high bits (so ids keep increasing across restarts), a
/// random byte telling parallel instances apart, and a counter.
struct RowIds {
    next: i64,
    instance: i64,
}

const COUNTER_BITS: u32 = 12;
const INSTANCE_BITS: u32 = 8;

impl RowIds {
    fn new() -> Self {
        let instance = (random_salt() & ((1 << INSTANCE_BITS) - 1)) as i64;
        Self { next: 0, instance }
    }

    fn take(&mut self, n: usize) -> Int64Array {
        let millis = processing_time_micros() / 1000;
        let now = (millis << (INSTANCE_BITS + COUNTER_BITS)) | (self.instance << COUNTER_BITS);
        self.next = self.next.max(now);
        let first = self.next;
        self.next += n as i64;
        Int64Array::from_iter_values(first..first + n as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{AsArray, Int32Array};
    use arrow::datatypes::{DataType, Field, Int16Type, Int64Type, Schema};

    #[test]
    fn each_change_becomes_an_inserted_row_with_its_kind() {
        let input = Arc::new(Schema::new(vec![Field::new("v", DataType::Int32, true)]));
        let output = Arc::new(Schema::new(vec![
            Field::new("v", DataType::Int32, true),
            Field::new("changelog_op", DataType::Int16, false),
            Field::new("_changelog_row_id", DataType::Int64, false),
        ]));
        let mut changelog = Changelog::new(output, true);
        let batch = RecordBatch::try_new(input, vec![Arc::new(Int32Array::from(vec![1, 1, 2, 3]))])
            .unwrap();
        let chunk = StreamChunk {
            ops: vec![Op::UpdateDelete, Op::UpdateInsert, Op::Delete, Op::Insert],
            batch,
            keys: Some(vec![vec![1], vec![1], vec![2], vec![3]]),
        };
        let out = changelog.process(chunk.clone()).unwrap().remove(0);
        assert!(out.is_append_only());
        let ops = out.batch.column(1).as_primitive::<Int16Type>();
        assert_eq!(ops.values().to_vec(), vec![4, 3, 2, 1]);
        let ids = out
            .batch
            .column(2)
            .as_primitive::<Int64Type>()
            .values()
            .to_vec();
        let later = changelog.process(chunk).unwrap().remove(0);
        let later_ids = later
            .batch
            .column(2)
            .as_primitive::<Int64Type>()
            .values()
            .to_vec();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        assert!(ids.last() < later_ids.first(), "{ids:?} then {later_ids:?}");
    }
}
