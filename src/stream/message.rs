//! [`Message`]: what flows on the channels between tasks.
//!
//! Data travels as [`StreamChunk`]s; [`Barrier`]s cut the stream into epochs (FLUSH uses
//! them today, checkpoints will); a closed channel means the input has ended.

use super::StreamChunk;

/// A marker injected at the sources and passed on by every task once it has received it
/// from all of its inputs (barrier alignment). Everything before the barrier belongs to
/// epochs up to `epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Barrier {
    pub epoch: u64,
}

#[derive(Debug, Clone)]
pub enum Message {
    Chunk(StreamChunk),
    Barrier(Barrier),
}
