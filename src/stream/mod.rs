//! The streaming runtime: continuous queries as parallel dataflows over Arrow batches.
//!
//! A materialized view's query is planned into a [`graph::StreamGraph`] of fragments
//! ([`planner`]); each fragment runs as parallel subtasks ([`task`]) placed in slots of
//! worker threads ([`workers`]); tasks exchange [`Message`]s over bounded channels
//! ([`dispatch`]), aligning barriers where inputs meet ([`barrier_align`]). [`job`] ties
//! it together and tracks every job and task. See `docs/architecture.md`.

pub mod barrier_align;
pub mod dispatch;
pub mod expression_errors;
pub mod graph;
pub mod job;
pub mod operators;
pub mod sink;
pub mod task;
#[cfg(test)]
pub mod testing;
pub mod watermark;
pub mod workers;

// The chunks and messages the runtime moves are the shared vocabulary of `dataflow`.
pub use crate::dataflow::{chunk, message};
pub use chunk::{Op, StreamChunk};
pub use message::{Barrier, Message, Watermark};
