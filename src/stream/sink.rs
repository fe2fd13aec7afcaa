//! The interface between the runtime and a sink connector.
//!
//! Each subtask of a sink job's last fragment owns a [`SinkWriter`]. It is handed the
//! fragment's output chunk by chunk and told when an epoch's input is complete (at the
//! barrier, before the barrier is acknowledged): a database sink applies the epoch there,
//! a file sink stages it to be published once the epoch's checkpoint is committed. An
//! error fails the job, which then restarts from its last checkpoint (sinks are retried
//! without limit, see `session::failover`), so nothing is lost.

use super::StreamChunk;
use crate::error::Result;

#[async_trait::async_trait]
pub trait SinkWriter: Send {
    /// Takes a chunk of the sink's input (usually held until the barrier).
    async fn write(&mut self, chunk: StreamChunk) -> Result<()>;
    /// The input of `epoch` is complete.
    async fn barrier(&mut self, epoch: u64) -> Result<()>;
}

/// Makes the writer of each subtask of a sink.
pub trait SinkFactory: Send + Sync {
    /// The operator name tasks and `EXPLAIN` show, e.g. `FileSink`.
    fn name(&self) -> &'static str;
    fn writer(&self, subtask: usize) -> Result<Box<dyn SinkWriter>>;
}
