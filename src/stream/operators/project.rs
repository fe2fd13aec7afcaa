//! Project: computes output columns from input columns, row for row.

use super::{Operator, WatermarkOutput};
use crate::error::Result;
use crate::stream::expression_errors;
use crate::stream::watermark::{WatermarkMapping, map_watermark};
use crate::stream::{StreamChunk, Watermark};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;

#[derive(Clone)]
pub struct Project {
    exprs: Vec<Arc<dyn PhysicalExpr>>,
    schema: SchemaRef,
    /// Output columns that carry an input column's watermark.
    watermarks: Vec<WatermarkMapping>,
}

impl Project {
    /// Every output column is nullable whatever the plan says: an expression that fails
    /// on a row gives NULL there (`10 / id`, `count(*) / count(x)` over no rows), and the
    /// chunks of one stream must share one schema for the operators that concatenate
    /// them (a view's changes between two barriers).
    pub fn new(exprs: Vec<Arc<dyn PhysicalExpr>>, schema: SchemaRef) -> Self {
        let fields: Vec<arrow::datatypes::Field> = schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        let schema = Arc::new(arrow::datatypes::Schema::new_with_metadata(
            fields,
            schema.metadata().clone(),
        ));
        Self {
            exprs,
            schema,
            watermarks: vec![],
        }
    }

    pub fn with_watermarks(mut self, watermarks: Vec<WatermarkMapping>) -> Self {
        self.watermarks = watermarks;
        self
    }

    /// The output watermarks an input watermark gives.
    pub fn map_watermark(&self, watermark: &Watermark) -> Result<Vec<Watermark>> {
        map_watermark(&self.watermarks, watermark)
    }

    pub fn apply(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let columns = self
            .exprs
            .iter()
            .map(|e| expression_errors::evaluate(e, batch))
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

    fn on_watermark(&mut self, watermark: Watermark) -> Result<WatermarkOutput> {
        Ok((vec![], self.map_watermark(&watermark)?))
    }
}
