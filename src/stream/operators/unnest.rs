//! Unnest: one output row per element of a list column, the other columns repeated.
//! `HOP` windows use it: each row is emitted once per window it falls in.
//!
//! Over an updating stream (a table, a view) every output row keeps its input row's op
//! and gets a stream key of its own: the input row's key followed by the element's
//! position in the list, so a delete retracts the row from every window it was in. An
//! update becomes a delete and an insert: its old and new rows may fall into different
//! windows, so the output rows of the two halves are not pairs.

use super::{Operator, WatermarkOutput};
use crate::error::Result;
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
        let lists = chunk.batch.column(self.list_column).as_list::<i32>();
        // Row i of the input repeats once per element of its list (none for NULL).
        let mut repeat = Vec::with_capacity(lists.values().len());
        let mut elements = Vec::with_capacity(lists.values().len());
        let mut keys = chunk.keys.as_ref().map(|_| Vec::new());
        let offsets = lists.value_offsets();
        for row in 0..lists.len() {
            if lists.is_null(row) {
                continue;
            }
            for e in offsets[row]..offsets[row + 1] {
                repeat.push(row as u32);
                elements.push(e as u32);
                if let (Some(keys), Some(input_keys)) = (&mut keys, &chunk.keys) {
                    let mut key = input_keys[row].clone();
                    key.extend_from_slice(&((e - offsets[row]) as u32).to_be_bytes());
                    keys.push(key);
                }
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
            .map(|r| match chunk.ops[*r as usize] {
                Op::UpdateDelete => Op::Delete,
                Op::UpdateInsert => Op::Insert,
                op => op,
            })
            .collect();
        let batch = RecordBatch::try_new(self.schema.clone(), columns)?;
        Ok(vec![StreamChunk { ops, batch, keys }])
    }
}
