//! [`StreamChunk`]: a batch of rows, each marked as an insert or a delete.

use arrow::array::RecordBatch;

/// What a row of a chunk does to the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Insert,
    Delete,
    /// The old version of an updated row (always followed by its `UpdateInsert`).
    UpdateDelete,
    UpdateInsert,
}

impl Op {
    pub fn is_insert(self) -> bool {
        matches!(self, Op::Insert | Op::UpdateInsert)
    }
}

/// Rows with one op each. `keys`, when present, holds each row's stream key in
/// memcomparable form: the key a materialized view stores the row under, so that a later
/// update or delete of the same key replaces it. Append-only streams carry no keys.
#[derive(Debug, Clone)]
pub struct StreamChunk {
    pub ops: Vec<Op>,
    pub batch: RecordBatch,
    pub keys: Option<Vec<Vec<u8>>>,
}

impl StreamChunk {
    /// An append-only chunk: every row an insert, no keys.
    pub fn inserts(batch: RecordBatch) -> Self {
        Self {
            ops: vec![Op::Insert; batch.num_rows()],
            batch,
            keys: None,
        }
    }

    pub fn num_rows(&self) -> usize {
        self.batch.num_rows()
    }

    pub fn is_append_only(&self) -> bool {
        self.keys.is_none() && self.ops.iter().all(|o| *o == Op::Insert)
    }
}
