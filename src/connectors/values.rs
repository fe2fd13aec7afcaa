//! The rows of a `VALUES` list (or the one row of a `SELECT` without `FROM`) in a
//! streaming query: a bounded source of one split that emits them once. Its position is
//! checkpointed like any source's, so a restarted job does not emit them again.

use super::SplitReader;
use crate::error::Result;
use arrow::array::RecordBatch;

#[derive(Debug, Clone, PartialEq)]
pub struct ValuesSpec {
    pub rows: RecordBatch,
}

impl ValuesSpec {
    pub fn split_reader(&self, offset: u64) -> ValuesSplit {
        ValuesSplit {
            rows: self.rows.clone(),
            offset: (offset as usize).min(self.rows.num_rows()),
        }
    }
}

pub struct ValuesSplit {
    rows: RecordBatch,
    offset: usize,
}

impl SplitReader for ValuesSplit {
    fn next_batch(&mut self, max_rows: usize) -> Result<Option<RecordBatch>> {
        let left = self.rows.num_rows() - self.offset;
        if left == 0 {
            return Ok(None);
        }
        let n = left.min(max_rows.max(1));
        let batch = self.rows.slice(self.offset, n);
        self.offset += n;
        Ok(Some(batch))
    }

    fn offset(&self) -> u64 {
        self.offset as u64
    }

    fn before_first_barrier(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int32Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    #[test]
    fn rows_come_once_and_not_again_after_their_position() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int32, false)]));
        let rows =
            RecordBatch::try_new(schema, vec![Arc::new(Int32Array::from(vec![1, 2, 3]))]).unwrap();
        let spec = ValuesSpec { rows };
        let mut split = spec.split_reader(0);
        assert_eq!(split.next_batch(2).unwrap().unwrap().num_rows(), 2);
        assert_eq!(split.next_batch(2).unwrap().unwrap().num_rows(), 1);
        assert!(split.next_batch(2).unwrap().is_none());
        assert_eq!(split.offset(), 3);
        assert!(spec.split_reader(3).next_batch(10).unwrap().is_none());
    }
}
