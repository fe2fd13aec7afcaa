//! Stream operators. Each turns an input chunk into zero or more output chunks, working
//! on whole batches; a chain of them is called synchronously inside one task.

pub mod changelog;
pub mod drop_keys;
pub mod eowc_sort;
pub mod expand;
pub mod filter;
pub mod hash_agg;
pub mod hash_join;
pub mod over_window;
pub mod project;
pub mod tag_keys;
pub mod temporal_filter;
pub mod top_n;
pub mod unnest;

#[cfg(test)]
mod tests;

use super::{StreamChunk, Watermark};
use crate::error::Result;
use crate::state::OperatorState;
use crate::state::StateWrites;

pub trait Operator: Send {
    /// A short name for `EXPLAIN` and the tasks table.
    fn name(&self) -> &'static str;

    /// How many inputs the operator reads (a join: two). Only the first operator of a
    /// chain can have more than one; the others read the operator before them.
    fn input_count(&self) -> usize {
        1
    }

    /// Processes one chunk (of input 0).
    fn process(&mut self, chunk: StreamChunk) -> Result<Vec<StreamChunk>>;

    /// Processes one chunk of input `input` (operators with several inputs override it).
    fn process_input(&mut self, input: usize, chunk: StreamChunk) -> Result<Vec<StreamChunk>> {
        debug_assert_eq!(input, 0, "{} has one input", self.name());
        self.process(chunk)
    }

    /// Rows the operator outputs before any input (a global aggregate's first row).
    fn initial_output(&mut self) -> Result<Vec<StreamChunk>> {
        Ok(vec![])
    }

    /// Reacts to a watermark on one of its input columns: rows it can now emit (closed
    /// windows) and the watermarks of its output columns. By default the column keeps
    /// its index (operators that keep their input's columns).
    fn on_watermark(&mut self, watermark: Watermark) -> Result<WatermarkOutput> {
        Ok((vec![], vec![watermark]))
    }

    /// Reacts to a watermark of input `input` (operators with several inputs override
    /// it: each input's watermark arrives on its own).
    fn on_input_watermark(
        &mut self,
        input: usize,
        watermark: Watermark,
    ) -> Result<WatermarkOutput> {
        debug_assert_eq!(input, 0, "{} has one input", self.name());
        self.on_watermark(watermark)
    }

    /// A barrier is about to pass: rows held back until the end of the epoch (an
    /// aggregate's one change per group). Called before [`Operator::checkpoint`].
    fn on_barrier(&mut self) -> Result<Vec<StreamChunk>> {
        Ok(vec![])
    }

    /// The input has ended for good (a final watermark): rows still held back.
    fn finish(&mut self) -> Result<Vec<StreamChunk>> {
        Ok(vec![])
    }

    /// How many internal state tables the operator keeps (state that must survive a
    /// restart: an aggregate one, a join one per side). The operator gets them, in
    /// order, in the two calls below.
    fn state_tables(&self) -> usize {
        0
    }

    /// A barrier passes: adds the state changed since the last one to the epoch's
    /// writes, through its tables' [`OperatorState`] (which place each write in the
    /// table and key group; the task writes the whole epoch at once).
    fn checkpoint(&mut self, _tables: &[OperatorState], _writes: &mut StateWrites) -> Result<()> {
        Ok(())
    }

    /// Before any input, when the job restarts from a checkpoint: loads the state of the
    /// key groups this subtask owns.
    fn restore(&mut self, _tables: &[OperatorState]) -> Result<()> {
        Ok(())
    }
}

/// A random number, different for every call: the prefix that keeps the row ids an
/// operator instance makes up (for rows without keys) apart from those of any other
/// instance, before or after a restart.
pub fn random_salt() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_i64(temporal_filter::processing_time_micros());
    h.finish()
}

/// What an operator returns for a watermark: chunks, then watermarks for its output.
pub type WatermarkOutput = (Vec<StreamChunk>, Vec<Watermark>);

/// Which input of the chain's first operator a message of the task's input `input` is:
/// a union's task merges its inputs into the one input of an operator that has one.
fn head_input(first: &dyn Operator, input: usize) -> usize {
    if first.input_count() > 1 { input } else { 0 }
}

/// Runs a chunk of input `input` through a chain of operators (the input index matters
/// only to the first operator).
pub fn run_chain(
    chain: &mut [Box<dyn Operator>],
    input: usize,
    chunk: StreamChunk,
) -> Result<Vec<StreamChunk>> {
    let Some((first, rest)) = chain.split_first_mut() else {
        return Ok(vec![chunk]);
    };
    if chunk.num_rows() == 0 {
        return Ok(vec![]);
    }
    let out = first.process_input(head_input(first.as_ref(), input), chunk)?;
    run_chunks(rest, out)
}

/// What a chain outputs before any input: each operator's initial rows, run through the
/// operators after it.
pub fn initial_output(chain: &mut [Box<dyn Operator>]) -> Result<Vec<StreamChunk>> {
    let mut out = Vec::new();
    for i in 0..chain.len() {
        let initial = chain[i].initial_output()?;
        if !initial.is_empty() {
            out.extend(run_chunks(&mut chain[i + 1..], initial)?);
        }
    }
    Ok(out)
}

/// Runs a watermark of input `input` through a chain: each operator's chunks go through
/// the operators after it, its watermarks to the next operator. Returns the chunks and
/// the watermarks leaving the chain, chunks first.
pub fn run_watermark(
    chain: &mut [Box<dyn Operator>],
    input: usize,
    watermark: Watermark,
) -> Result<WatermarkOutput> {
    let mut chunks = Vec::new();
    let mut watermarks = vec![watermark];
    for i in 0..chain.len() {
        let mut next = Vec::new();
        for w in watermarks {
            let (out, wms) = if i == 0 {
                let input = head_input(chain[i].as_ref(), input);
                chain[i].on_input_watermark(input, w)?
            } else {
                chain[i].on_watermark(w)?
            };
            if !out.is_empty() {
                chunks.extend(run_chunks(&mut chain[i + 1..], out)?);
            }
            next.extend(wms);
        }
        watermarks = next;
    }
    Ok((chunks, watermarks))
}

/// The input has ended: what each operator still holds, run through the operators after
/// it.
pub fn finish_chain(chain: &mut [Box<dyn Operator>]) -> Result<Vec<StreamChunk>> {
    release_chain(chain, |op| op.finish())
}

/// A barrier is about to pass: what each operator releases at the end of the epoch, run
/// through the operators after it (which release theirs after taking it in).
pub fn barrier_chain(chain: &mut [Box<dyn Operator>]) -> Result<Vec<StreamChunk>> {
    release_chain(chain, |op| op.on_barrier())
}

fn release_chain(
    chain: &mut [Box<dyn Operator>],
    release: impl Fn(&mut dyn Operator) -> Result<Vec<StreamChunk>>,
) -> Result<Vec<StreamChunk>> {
    let mut out = Vec::new();
    for i in 0..chain.len() {
        let held = release(chain[i].as_mut())?;
        if !held.is_empty() {
            out.extend(run_chunks(&mut chain[i + 1..], held)?);
        }
    }
    Ok(out)
}

fn run_chunks(
    chain: &mut [Box<dyn Operator>],
    chunks: Vec<StreamChunk>,
) -> Result<Vec<StreamChunk>> {
    let mut chunks = chunks;
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
