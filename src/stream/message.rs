//! [`Message`]: what flows on the channels between tasks.
//!
//! Data travels as [`StreamChunk`]s; [`Barrier`]s cut the stream into epochs (FLUSH uses
//! them today, checkpoints will); [`Watermark`]s promise that no later row has a smaller
//! value in a column; a closed channel means the input has ended (a final watermark).

use super::StreamChunk;
use datafusion::common::ScalarValue;

/// No row after this message has `column` below `value` (rows that would are late and
/// dropped at the source).
#[derive(Debug, Clone, PartialEq)]
pub struct Watermark {
    pub column: usize,
    pub value: ScalarValue,
}

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
    Watermark(Watermark),
}
