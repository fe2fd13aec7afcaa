//! Filter: keeps the rows for which a predicate is true (NULL counts as false), with
//! their ops and keys; an update half of which passes becomes a delete or an insert.

use super::Operator;
use crate::error::Result;
use crate::stream::{Op, StreamChunk};
use arrow::array::{Array, AsArray, BooleanArray};
use arrow::compute::filter_record_batch;
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;

pub struct Filter {
    predicate: Arc<dyn PhysicalExpr>,
}

impl Filter {
    pub fn new(predicate: Arc<dyn PhysicalExpr>) -> Self {
        Self { predicate }
    }
}

/// The rows where `predicate` is true.
pub fn mask(
    predicate: &Arc<dyn PhysicalExpr>,
    batch: &arrow::array::RecordBatch,
) -> Result<BooleanArray> {
    let value = crate::stream::expression_errors::evaluate(predicate, batch)?;
    let value = value.as_boolean();
    Ok(if value.null_count() > 0 {
        value.iter().map(|v| Some(v == Some(true))).collect()
    } else {
        value.clone()
    })
}

/// Applies a mask to a chunk's rows, ops and keys. An update whose old row is kept and
/// new row dropped becomes a delete, and the other way round an insert: an
/// `UpdateDelete` never leaves without its `UpdateInsert`.
pub fn filter_chunk(chunk: StreamChunk, keep: &BooleanArray) -> Result<StreamChunk> {
    let batch = filter_record_batch(&chunk.batch, keep)?;
    let mut ops = chunk.ops;
    for i in 1..ops.len() {
        if ops[i - 1] == Op::UpdateDelete && ops[i] == Op::UpdateInsert {
            match (keep.value(i - 1), keep.value(i)) {
                (true, false) => ops[i - 1] = Op::Delete,
                (false, true) => ops[i] = Op::Insert,
                _ => {}
            }
        }
    }
    let ops = ops
        .iter()
        .zip(keep.values().iter())
        .filter(|(_, k)| *k)
        .map(|(o, _)| *o)
        .collect();
    let keys = chunk.keys.map(|keys| {
        keys.into_iter()
            .zip(keep.values().iter())
            .filter(|(_, k)| *k)
            .map(|(key, _)| key)
            .collect()
    });
    Ok(StreamChunk { ops, batch, keys })
}

impl Operator for Filter {
    fn name(&self) -> &'static str {
        "Filter"
    }

    fn process(&mut self, chunk: StreamChunk) -> Result<Vec<StreamChunk>> {
        let keep = mask(&self.predicate, &chunk.batch)?;
        Ok(vec![filter_chunk(chunk, &keep)?])
    }
}
