//! Dispatchers: how a task sends its output to the subtasks of the next fragment.
//!
//! Chunks are routed by the edge's [`Exchange`]; barriers go to every downstream
//! subtask. Channels are bounded: when a downstream subtask falls behind, `send` waits —
//! that wait is backpressure, and it travels up to the sources.

use super::graph::Exchange;
use super::{Message, StreamChunk};
pub use crate::dataflow::routing::{CHANNEL_CAPACITY, split, split_rows, subtask_of};
use crate::error::Result;
use arrow::array::ArrayRef;
use arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;
use tokio::sync::mpsc::Sender;

enum Route {
    /// One receiver (forward or single).
    Direct,
    Hash {
        keys: Vec<Arc<dyn PhysicalExpr>>,
        codec: RowConverter,
    },
    HashStreamKey,
    Rebalance {
        next: usize,
    },
}

pub struct Dispatcher {
    senders: Vec<Sender<Message>>,
    route: Route,
}

impl Dispatcher {
    /// `senders` holds one channel per downstream subtask (one for forward edges).
    pub fn new(exchange: &Exchange, senders: Vec<Sender<Message>>) -> Result<Self> {
        let route = match exchange {
            Exchange::Forward | Exchange::Single => Route::Direct,
            Exchange::Hash {
                keys, key_types, ..
            } => Route::Hash {
                keys: keys.clone(),
                codec: RowConverter::new(key_types.iter().cloned().map(SortField::new).collect())?,
            },
            Exchange::HashStreamKey => Route::HashStreamKey,
            Exchange::Rebalance => Route::Rebalance { next: 0 },
        };
        Ok(Self { senders, route })
    }

    /// Sends a chunk on; `Ok(false)` when the downstream tasks are gone (the job stops).
    pub async fn send_chunk(&mut self, chunk: StreamChunk) -> Result<bool> {
        if chunk.num_rows() == 0 {
            return Ok(true);
        }
        if self.senders.len() == 1 {
            return Ok(self.senders[0].send(Message::Chunk(chunk)).await.is_ok());
        }
        if let Route::Rebalance { next } = &mut self.route {
            let target = *next % self.senders.len();
            *next = next.wrapping_add(1);
            return Ok(self.senders[target]
                .send(Message::Chunk(chunk))
                .await
                .is_ok());
        }
        let targets = self.targets(&chunk)?;
        for (target, part) in split(chunk, &targets, self.senders.len())? {
            if self.senders[target]
                .send(Message::Chunk(part))
                .await
                .is_err()
            {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The downstream subtask of every row of a chunk (whole chunks dealt round robin
    /// all go to subtask 0 here: `send_chunk` picks their target).
    pub fn targets(&self, chunk: &StreamChunk) -> Result<Vec<usize>> {
        let n = self.senders.len();
        Ok(match &self.route {
            Route::Direct | Route::Rebalance { .. } => vec![0; chunk.num_rows()],
            Route::Hash { keys, codec } => {
                let batch = &chunk.batch;
                let columns = keys
                    .iter()
                    .map(|e| crate::stream::expression_errors::evaluate(e, batch))
                    .collect::<Result<Vec<ArrayRef>>>()?;
                let rows = codec.convert_columns(&columns)?;
                rows.iter().map(|r| subtask_of(r.as_ref(), n)).collect()
            }
            Route::HashStreamKey => {
                let keys = chunk.keys.as_ref().ok_or_else(|| {
                    crate::error::EddyError::internal("hash by stream key over rows without keys")
                })?;
                keys.iter().map(|k| subtask_of(k, n)).collect()
            }
        })
    }

    /// Sends a message every downstream subtask must see (a barrier).
    pub async fn broadcast(&mut self, message: Message) -> bool {
        for s in &self.senders {
            if s.send(message.clone()).await.is_err() {
                return false;
            }
        }
        true
    }
}
