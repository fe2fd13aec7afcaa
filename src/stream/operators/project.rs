//! Project: computes output columns from input columns, row for row.

use super::Operator;
use crate::error::Result;
use crate::stream::StreamChunk;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;

#[derive(Clone)]
pub struct Project {
    exprs: Vec<Arc<dyn PhysicalExpr>>,
    schema: SchemaRef,
}

impl Project {
    pub fn new(exprs: Vec<Arc<dyn PhysicalExpr>>, schema: SchemaRef) -> Self {
        Self { exprs, schema }
    }

    pub fn apply(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let columns = self
            .exprs
            .iter()
            .map(|e| Ok(e.evaluate(batch)?.into_array(batch.num_rows())?))
            .collect::<Result<Vec<_>>>()?;
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
        )?)
    }
}

impl Operator for Project {
    fn name(&self) -> &'static str {
        "Project"
    }

    fn process(&mut self, chunk: StreamChunk) -> Result<Vec<StreamChunk>> {
        let batch = self.apply(&chunk.batch)?;
        Ok(vec![StreamChunk {
            ops: chunk.ops,
            batch,
            keys: chunk.keys,
        }])
    }
}
