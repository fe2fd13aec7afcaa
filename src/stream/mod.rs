//! The streaming runtime: continuous queries as chains of operators over Arrow batches.
//!
//! What exists today is the first slice of `../shared/DESIGN.md`'s runtime: a job is one
//! task that reads its source's splits, pushes each batch through a chain of operators
//! (called directly, no channel between them) and writes the result into the
//! materialized view's state table. Parallel subtasks, exchanges, barriers and
//! checkpoints come next; the types here ([`StreamChunk`] with per-row ops, the
//! [`operators::Operator`] trait) are the ones they will use.

pub mod chunk;
pub mod job;
pub mod operators;
pub mod planner;

pub use chunk::{Op, StreamChunk};
