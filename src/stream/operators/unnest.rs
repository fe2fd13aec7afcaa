//! Unnest: one output row per element of a list column, the other columns repeated.
//! `HOP` windows use it: each row is emitted once per window it falls in.

use super::{Operator, WatermarkOutput};
use crate::error::{EddyError, Result};
use crate::stream::{Op, StreamChunk, Watermark};
use arrow::array::{Array, AsArray, RecordBatch, UInt32Array};
use arrow::compute::take;
use arrow::datatypes::SchemaRef;

pub struct Unnest {
    /// Input column holding the lists.
    list_column: usize,
    /// For each output column, the input column it comes from.
    sources: Vec<usize>,
    schema: SchemaRef,
}

impl Unnest {
    pub fn new(list_column: usize, sources: Vec<usize>, schema: SchemaRef) -> Self {
        Self {
            list_column,
            sources,
            schema,
        }
    }
}

impl Operator for Unnest {
    fn name(&self) -> &'static str {
        "Unnest"
    }

    /// Each output column keeps the watermark of the input column it comes from (the
    /// list column's watermark is already its smallest element's).
    fn on_watermark(&mut self, watermark: Watermark) -> Result<WatermarkOutput> {
        let out = self
            .sources
            .iter()
            .enumerate()
            .filter(|(_, source)| **source == watermark.column)
            .map(|(column, _)| Watermark {
                column,
                value: watermark.value.clone(),
            })
            .collect();
        Ok((vec![], out))
    }

    fn process(&mut self, chunk: StreamChunk) -> Result<Vec<StreamChunk>> {
        if chunk.keys.is_some() {
            return Err(EddyError::not_supported(
                "unnest after an aggregate is not supported yet",
            ));
        }
        let lists = chunk.batch.column(self.list_column).as_list::<i32>();
        // Row i of the input repeats once per element of its list (none for NULL).
        let mut repeat = Vec::with_capacity(lists.values().len());
        let mut elements = Vec::with_capacity(lists.values().len());
        let offsets = lists.value_offsets();
        for row in 0..lists.len() {
            if lists.is_null(row) {
                continue;
            }
            for e in offsets[row]..offsets[row + 1] {
                repeat.push(row as u32);
                elements.push(e as u32);
            }
        }
        let repeat = UInt32Array::from(repeat);
        let elements = UInt32Array::from(elements);
        let flat = take(lists.values().as_ref(), &elements, None)?;
        let columns = self
            .sources
            .iter()
            .map(|&i| {
                if i == self.list_column {
                    Ok(flat.clone())
                } else {
                    Ok(take(chunk.batch.column(i).as_ref(), &repeat, None)?)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let ops: Vec<Op> = repeat
            .values()
            .iter()
            .map(|r| chunk.ops[*r as usize])
            .collect();
        let batch = RecordBatch::try_new(self.schema.clone(), columns)?;
        Ok(vec![StreamChunk {
            ops,
            batch,
            keys: None,
        }])
    }
}
