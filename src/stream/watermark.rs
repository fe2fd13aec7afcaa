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
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, new_null_array};
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
    /// The expression never decreases as the time column grows (`ts - INTERVAL '5'
    /// SECOND`): its largest value in a batch is its value at the batch's latest time.
    pub grows_with_time: bool,
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
        let candidate = self.largest_watermark(&chunk.batch)?;
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

    /// The largest value of the watermark expression over a batch's rows (NULL when
    /// there is none).
    fn largest_watermark(&self, batch: &RecordBatch) -> Result<ScalarValue> {
        use datafusion::functions_aggregate::min_max::MaxAccumulator;
        use datafusion::logical_expr::Accumulator;
        let largest = |values: ArrayRef| -> Result<ScalarValue> {
            let mut max = MaxAccumulator::try_new(values.data_type())?;
            max.update_batch(&[values])?;
            Ok(max.evaluate()?)
        };
        if !self.spec.grows_with_time {
            let values = self
                .spec
                .expr
                .evaluate(batch)?
                .into_array(batch.num_rows())?;
            return largest(values);
        }
        // Evaluate the expression once, at the latest time, instead of on every row
        // (interval arithmetic on timestamps goes through calendar code per value).
        let latest = largest(batch.column(self.spec.time_column).clone())?;
        if latest.is_null() {
            return Ok(latest);
        }
        let mut columns = batch.slice(0, 1).columns().to_vec();
        columns[self.spec.time_column] = latest.to_array_of_size(1)?;
        let one_row = RecordBatch::try_new(batch.schema(), columns)?;
        largest(self.spec.expr.evaluate(&one_row)?.into_array(1)?)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::StreamChunk;
    use arrow::array::{Int64Array, TimestampMicrosecondArray};
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};

    fn generator(grows_with_time: bool) -> WatermarkGenerator {
        let ts = Arc::new(Column::new("ts", 1));
        let four_seconds = Arc::new(Literal::new(ScalarValue::new_interval_mdn(
            0,
            0,
            4_000_000_000,
        )));
        WatermarkGenerator::new(SourceWatermark {
            time_column: 1,
            expr: Arc::new(BinaryExpr::new(ts, BinaryOp::Minus, four_seconds)),
            grows_with_time,
            output_column: Some(1),
        })
    }

    fn chunk(times: &[Option<i64>]) -> StreamChunk {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                true,
            ),
        ]));
        let ids = Int64Array::from_iter_values(0..times.len() as i64);
        let ts = TimestampMicrosecondArray::from(times.to_vec()).with_timezone("UTC");
        StreamChunk::inserts(
            RecordBatch::try_new(schema, vec![Arc::new(ids), Arc::new(ts)]).unwrap(),
        )
    }

    /// Evaluating `ts - INTERVAL '4' SECOND` once at the latest time gives the watermarks
    /// and late rows that evaluating it on every row gives: unordered times, NULLs, a
    /// batch of NULLs only, late rows and an empty batch.
    #[test]
    fn a_monotone_expression_evaluated_once_matches_every_row() {
        let batches: Vec<Vec<Option<i64>>> = vec![
            vec![Some(10_000_000), None, Some(30_000_000), Some(20_000_000)],
            vec![None, None],
            vec![Some(25_000_000), Some(5_000_000), Some(40_000_000)],
            vec![Some(1_000_000)],
            vec![],
            vec![Some(39_000_000), None, Some(41_000_000)],
        ];
        let (mut once, mut every_row) = (generator(true), generator(false));
        let mut seen = Vec::new();
        for times in &batches {
            let (a, late_a, wm_a) = once.observe(chunk(times)).unwrap();
            let (b, late_b, wm_b) = every_row.observe(chunk(times)).unwrap();
            assert_eq!(a.batch, b.batch);
            assert_eq!(late_a, late_b);
            assert_eq!(
                wm_a.as_ref().map(|w| &w.value),
                wm_b.as_ref().map(|w| &w.value)
            );
            seen.push((late_a, wm_a.map(|w| w.value)));
        }
        // The watermark follows the latest time minus 4 s, and rows below it are late.
        let micros = |v: i64| {
            Some(ScalarValue::TimestampMicrosecond(
                Some(v),
                Some("UTC".into()),
            ))
        };
        assert_eq!(seen[0], (0, micros(26_000_000)));
        assert_eq!(seen[1], (0, None));
        assert_eq!(seen[2], (2, micros(36_000_000)));
        assert_eq!(seen[3], (1, None));
        assert_eq!(seen[5], (0, micros(37_000_000)));
    }
}
