//! Filter: keeps the rows for which a predicate is true (NULL counts as false), with
//! their ops and keys.

use super::Operator;
use crate::error::Result;
use crate::stream::StreamChunk;
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
    let value = predicate.evaluate(batch)?.into_array(batch.num_rows())?;
    let value = value.as_boolean();
    Ok(if value.null_count() > 0 {
        value.iter().map(|v| Some(v == Some(true))).collect()
    } else {
        value.clone()
    })
}

/// Applies a mask to a chunk's rows, ops and keys.
pub fn filter_chunk(chunk: StreamChunk, keep: &BooleanArray) -> Result<StreamChunk> {
    let batch = filter_record_batch(&chunk.batch, keep)?;
    let ops = chunk
        .ops
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
