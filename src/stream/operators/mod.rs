//! Stream operators. Each turns an input chunk into zero or more output chunks, working
//! on whole batches; a chain of them is called synchronously inside one task.

pub mod filter;
pub mod hash_agg;
pub mod project;
pub mod unnest;

use super::StreamChunk;
use crate::error::Result;

pub trait Operator: Send {
    /// A short name for `EXPLAIN` and the tasks table.
    fn name(&self) -> &'static str;

    /// Processes one chunk.
    fn process(&mut self, chunk: StreamChunk) -> Result<Vec<StreamChunk>>;
}

/// Runs a chunk through a chain of operators.
pub fn run_chain(chain: &mut [Box<dyn Operator>], chunk: StreamChunk) -> Result<Vec<StreamChunk>> {
    let mut chunks = vec![chunk];
    for op in chain.iter_mut() {
        let mut next = Vec::new();
        for c in chunks {
            if c.num_rows() > 0 {
                next.extend(op.process(c)?);
            }
        }
        chunks = next;
    }
    Ok(chunks)
}
