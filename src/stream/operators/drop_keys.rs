//! DropKeys: removes the stream keys of an append-only table's changes. Such a table
//! only ever inserts, so its rows can flow as an append-only stream (which a temporal
//! join's stream side must be, and which lets joins and top-N keep less state).

use super::Operator;
use crate::error::Result;
use crate::stream::StreamChunk;

pub struct DropKeys;

impl Operator for DropKeys {
    fn name(&self) -> &'static str {
        "DropKeys"
    }

    fn process(&mut self, mut chunk: StreamChunk) -> Result<Vec<StreamChunk>> {
        chunk.keys = None;
        Ok(vec![chunk])
    }
}
