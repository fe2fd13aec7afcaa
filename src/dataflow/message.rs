//! [`Message`]: what flows on the channels between tasks.
//!
//! Data travels as [`StreamChunk`]s; [`Barrier`]s cut the stream into epochs (checkpoints
//! and `FLUSH`); [`Watermark`]s promise that no later row has a smaller
//! value in a column; a final barrier means the input has ended (a final watermark);
//! a channel closed without one means its sender stopped or failed.

use super::chunk::StreamChunk;
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
///
/// A stream that ends does not just close its channel: its sender waits for the next
/// barrier and passes it on marked `is_final`, then closes. Everything a task does at its
/// end (closing every window, writing its last state) so belongs to an epoch, which keeps
/// checkpoints consistent when bounded sources finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Barrier {
    pub epoch: u64,
    /// The sender's last message: its stream has ended and the channel closes after it.
    pub is_final: bool,
    /// From a logged table's change log: the number of its last log entry before this
    /// barrier (where a job reading the table resumes after this epoch's checkpoint).
    pub log_position: Option<u64>,
}

impl Barrier {
    pub fn new(epoch: u64) -> Self {
        Self {
            epoch,
            is_final: false,
            log_position: None,
        }
    }

    pub fn into_final(self) -> Self {
        Self {
            is_final: true,
            ..self
        }
    }
}

#[derive(Debug, Clone)]
pub enum Message {
    Chunk(StreamChunk),
    Barrier(Barrier),
    Watermark(Watermark),
    /// The sender (a source subtask) has read nothing for its idle timeout: until it
    /// sends rows again its watermarks do not hold back the minimum a receiver merges
    /// over its channels (an idle Kafka partition must not stop every window).
    Idle,
}
