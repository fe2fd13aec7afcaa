//! Expressions that fail on a row (division by zero, an overflow, a failed cast) give
//! NULL for that row instead of failing the job, as in RisingWave: one bad row must not
//! stop a pipeline that runs for months. The rows are counted
//! (`eddy_catalog.jobs.expression_errors`) and the first error of each batch is logged.
//!
//! A batch is evaluated whole; only when that fails is it evaluated again row by row, so
//! the cost falls on batches that hold a failing row. Errors that do not depend on the
//! data (a planning or internal error) still fail the job.
//!
//! Counting: operators run synchronously on their task's worker thread, so failures are
//! counted in a thread-local that the task drains into its job right after each call
//! into its chain ([`take`]).

use crate::error::Result;
use arrow::array::{ArrayRef, RecordBatch, new_null_array};
use arrow::compute::concat;
use datafusion::error::DataFusionError;
use datafusion::physical_expr::PhysicalExpr;
use std::cell::Cell;
use std::sync::Arc;

thread_local! {
    static FAILED_ROWS: Cell<u64> = const { Cell::new(0) };
}

/// Rows whose expressions failed on this thread since the last call.
pub fn take() -> u64 {
    FAILED_ROWS.with(|c| c.replace(0))
}

/// `expr` over every row of `batch`, NULL where it fails.
pub fn evaluate(expr: &Arc<dyn PhysicalExpr>, batch: &RecordBatch) -> Result<ArrayRef> {
    let rows = batch.num_rows();
    let error = match expr.evaluate(batch).and_then(|v| v.into_array(rows)) {
        Ok(array) => return Ok(array),
        Err(e) if depends_on_data(&e) => e,
        Err(e) => return Err(e.into()),
    };
    let data_type = expr.data_type(&batch.schema())?;
    let mut parts = Vec::with_capacity(rows);
    let mut failed = 0;
    for row in 0..rows {
        let one = batch.slice(row, 1);
        match expr.evaluate(&one).and_then(|v| v.into_array(1)) {
            Ok(array) => parts.push(array),
            Err(e) if depends_on_data(&e) => {
                failed += 1;
                parts.push(new_null_array(&data_type, 1));
            }
            Err(e) => return Err(e.into()),
        }
    }
    if failed == 0 {
        // Failed only as a whole: nothing row by row to blame.
        return Err(error.into());
    }
    tracing::warn!(
        rows = failed,
        "an expression failed; its value is NULL in those rows: {error}"
    );
    FAILED_ROWS.with(|c| c.set(c.get() + failed));
    let parts: Vec<&dyn arrow::array::Array> = parts.iter().map(|a| a.as_ref()).collect();
    Ok(concat(&parts)?)
}

/// Whether an evaluation error comes from the values evaluated rather than from the plan.
fn depends_on_data(error: &DataFusionError) -> bool {
    match error {
        DataFusionError::ArrowError(..) | DataFusionError::Execution(_) => true,
        DataFusionError::Context(_, inner) => depends_on_data(inner),
        DataFusionError::Shared(inner) => depends_on_data(inner),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray, Int32Array};
    use arrow::datatypes::{DataType, Field, Int32Type, Schema};
    use datafusion::logical_expr::Operator;
    use datafusion::physical_expr::expressions::{BinaryExpr, col, lit};

    #[test]
    fn a_failing_row_becomes_null_and_is_counted() {
        let schema = Arc::new(Schema::new(vec![Field::new("d", DataType::Int32, true)]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int32Array::from(vec![
                Some(2),
                Some(0),
                None,
                Some(5),
            ]))],
        )
        .unwrap();
        let ten_by_d: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
            lit(10i32),
            Operator::Divide,
            col("d", &schema).unwrap(),
        ));
        take();
        let out = evaluate(&ten_by_d, &batch).unwrap();
        let out = out.as_primitive::<Int32Type>();
        assert_eq!(out.len(), 4);
        assert_eq!(out.value(0), 5);
        assert!(out.is_null(1));
        assert!(out.is_null(2));
        assert_eq!(out.value(3), 2);
        assert_eq!(take(), 1);
        // A batch without a failing row costs nothing extra and counts nothing.
        let fine = batch.slice(0, 1);
        assert_eq!(evaluate(&ten_by_d, &fine).unwrap().len(), 1);
        assert_eq!(take(), 0);
    }
}
