//! Watermarks through operators.
//!
//! A watermark on an input column becomes one on every output column computed from that
//! column by an expression that never decreases when the column grows: the column itself,
//! `date_bin` (`TUMBLE`'s `window_start`), `hop_window_starts` (`HOP`: the smallest
//! window start), a cast, or adding or subtracting a constant (`window_end`). The planner
//! finds these with [`monotone_column`]; at run time [`WatermarkMapping::apply`] evaluates
//! the output expression at the watermark's value.

use super::Watermark;
use crate::error::Result;
use arrow::array::{Array, AsArray, RecordBatch, new_null_array};
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, SortField};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::logical_expr::{Expr, Operator as BinaryOp};
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;

/// How a watermark on input column `input` becomes one on output column `output`.
#[derive(Clone)]
pub struct WatermarkMapping {
    pub input: usize,
    pub output: usize,
    /// The output column's expression over the input.
    pub expr: Arc<dyn PhysicalExpr>,
    pub input_schema: SchemaRef,
}

impl WatermarkMapping {
    /// The output's watermark for an input watermark `value` (`None` if it is NULL).
    pub fn apply(&self, value: &ScalarValue) -> Result<Option<ScalarValue>> {
        let columns = self
            .input_schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| {
                if i == self.input {
                    let array = value.to_array_of_size(1)?;
                    Ok(if array.data_type() == f.data_type() {
                        array
                    } else {
                        arrow::compute::cast(&array, f.data_type())?
                    })
                } else {
                    Ok(new_null_array(f.data_type(), 1))
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let batch = RecordBatch::try_new(relaxed(&self.input_schema), columns)?;
        let out = self.expr.evaluate(&batch)?.into_array(1)?;
        if out.is_null(0) {
            return Ok(None);
        }
        // A list of window starts (`HOP`): later rows' windows start at its smallest.
        if let Some(list) = out.as_list_opt::<i32>() {
            let values = list.value(0);
            let mut min: Option<ScalarValue> = None;
            for i in 0..values.len() {
                let v = ScalarValue::try_from_array(&values, i)?;
                if min
                    .as_ref()
                    .is_none_or(|m| v.partial_cmp(m) == Some(std::cmp::Ordering::Less))
                {
                    min = Some(v);
                }
            }
            return Ok(min);
        }
        Ok(Some(ScalarValue::try_from_array(&out, 0)?))
    }
}

/// The same schema with every column nullable (the one-row batch holds NULLs).
fn relaxed(schema: &SchemaRef) -> SchemaRef {
    Arc::new(arrow::datatypes::Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ))
}

/// Output watermarks for an input watermark.
pub fn map_watermark(
    mappings: &[WatermarkMapping],
    watermark: &Watermark,
) -> Result<Vec<Watermark>> {
    let mut out = Vec::new();
    for m in mappings.iter().filter(|m| m.input == watermark.column) {
        if let Some(value) = m.apply(&watermark.value)? {
            out.push(Watermark {
                column: m.output,
                value,
            });
        }
    }
    Ok(out)
}

/// The watermarked input column that `expr` grows with, if it is computed from that
/// column alone by steps that never decrease.
pub fn monotone_column(expr: &Expr, schema: &DFSchema, watermarked: &[usize]) -> Option<usize> {
    match expr {
        Expr::Alias(a) => monotone_column(&a.expr, schema, watermarked),
        Expr::Column(c) => {
            let index = schema.index_of_column(c).ok()?;
            watermarked.contains(&index).then_some(index)
        }
        Expr::Cast(c) if c.field.data_type().is_temporal() || c.field.data_type().is_numeric() => {
            monotone_column(&c.expr, schema, watermarked)
        }
        Expr::ScalarFunction(f)
            if matches!(
                f.func.name(),
                "date_bin" | "date_trunc" | "hop_window_starts"
            ) =>
        {
            let mut found = None;
            for arg in &f.args {
                if matches!(arg, Expr::Literal(..)) {
                    continue;
                }
                if found.is_some() {
                    return None;
                }
                found = Some(monotone_column(arg, schema, watermarked)?);
            }
            found
        }
        Expr::BinaryExpr(b) => match (b.op, b.left.as_ref(), b.right.as_ref()) {
            (BinaryOp::Plus | BinaryOp::Minus, left, Expr::Literal(..)) => {
                monotone_column(left, schema, watermarked)
            }
            (BinaryOp::Plus, Expr::Literal(..), right) => {
                monotone_column(right, schema, watermarked)
            }
            _ => None,
        },
        _ => None,
    }
}

/// Watermarks of a source: `WATERMARK FOR column AS expr`. Each batch moves the
/// watermark to the largest `expr` seen; rows whose time is below the watermark reached
/// before their batch are late, dropped and counted.
#[derive(Clone)]
pub struct SourceWatermark {
    /// The event-time column, in the source's full schema.
    pub time_column: usize,
    /// The watermark expression over the source's full schema.
    pub expr: Arc<dyn PhysicalExpr>,
    /// The time column's index among the columns the job reads (`None`: not read).
    pub output_column: Option<usize>,
}

/// The running state of a [`SourceWatermark`] in one source subtask.
pub struct WatermarkGenerator {
    spec: SourceWatermark,
    current: Option<ScalarValue>,
}

impl WatermarkGenerator {
    pub fn new(spec: SourceWatermark) -> Self {
        Self {
            spec,
            current: None,
        }
    }

    /// Drops the late rows of a chunk (returning how many), then advances the watermark
    /// over what is left. Returns the watermark to send when it grew.
    pub fn observe(
        &mut self,
        chunk: super::StreamChunk,
    ) -> Result<(super::StreamChunk, u64, Option<Watermark>)> {
        use datafusion::logical_expr::Accumulator;
        let mut chunk = chunk;
        let mut late = 0;
        if let Some(current) = &self.current {
            let time = chunk.batch.column(self.spec.time_column);
            let bound = arrow::array::Scalar::new(current.to_array_of_size(1)?);
            let on_time = arrow::compute::kernels::cmp::gt_eq(time, &bound)?;
            // A NULL time is never late.
            let keep: arrow::array::BooleanArray =
                on_time.iter().map(|v| Some(v.unwrap_or(true))).collect();
            late = (chunk.num_rows() - keep.true_count()) as u64;
            if late > 0 {
                chunk = super::operators::filter::filter_chunk(chunk, &keep)?;
            }
        }
        let values = self
            .spec
            .expr
            .evaluate(&chunk.batch)?
            .into_array(chunk.num_rows())?;
        let mut max =
            datafusion::functions_aggregate::min_max::MaxAccumulator::try_new(values.data_type())?;
        max.update_batch(&[values])?;
        let candidate = max.evaluate()?;
        let grew = !candidate.is_null()
            && self
                .current
                .as_ref()
                .is_none_or(|c| candidate.partial_cmp(c) == Some(std::cmp::Ordering::Greater));
        let mut out = None;
        if grew {
            self.current = Some(candidate.clone());
            out = self.spec.output_column.map(|column| Watermark {
                column,
                value: candidate,
            });
        }
        Ok((chunk, late, out))
    }

    /// The current watermark as bytes (its type, then its value in arrow-row form), for
    /// a source split's checkpointed position.
    pub fn encode(&self) -> Result<Option<Vec<u8>>> {
        let Some(current) = &self.current else {
            return Ok(None);
        };
        let data_type = current.data_type();
        let codec = RowConverter::new(vec![SortField::new(data_type.clone())])?;
        let rows = codec.convert_columns(&[current.to_array_of_size(1)?])?;
        let mut out = data_type.to_string().into_bytes();
        out.push(0);
        out.extend_from_slice(rows.row(0).as_ref());
        Ok(Some(out))
    }

    /// Resumes from a checkpointed watermark (the smallest, when several splits' are
    /// merged into this subtask).
    pub fn restore(&mut self, encoded: &[u8]) -> Result<()> {
        let Some(split) = encoded.iter().position(|b| *b == 0) else {
            return Err(crate::error::EddyError::internal(
                "malformed checkpointed watermark",
            ));
        };
        let type_name = std::str::from_utf8(&encoded[..split])
            .map_err(|_| crate::error::EddyError::internal("malformed checkpointed watermark"))?;
        let data_type: arrow::datatypes::DataType = type_name.parse()?;
        let codec = RowConverter::new(vec![SortField::new(data_type)])?;
        let parser = codec.parser();
        let columns = codec.convert_rows([parser.parse(&encoded[split + 1..])])?;
        let value = ScalarValue::try_from_array(&columns[0], 0)?;
        if self
            .current
            .as_ref()
            .is_none_or(|c| value.partial_cmp(c) == Some(std::cmp::Ordering::Less))
        {
            self.current = Some(value);
        }
        Ok(())
    }
}
