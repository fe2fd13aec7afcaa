//! [`ChangeLog`]: the change stream of a table or materialized view.
//!
//! Every write to a [`super::StateTable`] that has subscribers is also sent to them as a
//! [`StreamChunk`] (inserts, and deletes carrying the old rows), under the same lock as
//! the write, so that a new subscriber's snapshot and the changes it receives afterwards
//! neither overlap nor leave a gap.
//!
//! A change log has one or more publishers: a table has one (its writers take turns under
//! the lock); a materialized view has one per subtask of its last fragment, and each
//! subscriber gets one channel per publisher so that barriers can be aligned across them.
//! Channels are unbounded: a view's writers are not slowed down by the views over it.
//!
//! A table's change log can also be *logged* ([`ChangeLog::enable_log`]): every write is
//! then appended to the table's replayable log ([`super::table_log`]) in the same RocksDB
//! write, and every barrier carries the log's position, so that a job can resume after
//! the changes its checkpoint holds.

use crate::stream::{Barrier, Message, StreamChunk};
use parking_lot::{Mutex, MutexGuard};
use std::collections::VecDeque;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

pub struct ChangeLog {
    inner: Mutex<Inner>,
}

pub(super) struct Inner {
    /// Per publisher: whether it has ended (its subscribers' channels are closed).
    ended: Vec<bool>,
    /// Per subscriber, one sender per publisher (`None` once that publisher ended).
    subscribers: Vec<Vec<Option<UnboundedSender<Message>>>>,
    /// Set once the table's changes are logged.
    log: Option<LogCursor>,
}

/// Where a logged table's log stands.
pub(super) struct LogCursor {
    table_id: u32,
    /// The last sequence number written.
    last: u64,
    /// `(epoch, position)` of recent barriers, oldest first: where the log may be cut
    /// once a checkpoint is no longer kept.
    marks: VecDeque<(u64, u64)>,
}

/// Barrier positions remembered per logged table (a barrier a second: more than an hour
/// of checkpoints failing to upload before the oldest ones are forgotten, which only
/// delays cutting the log).
const MAX_MARKS: usize = 4096;

impl Default for ChangeLog {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Inner {
                ended: vec![false],
                subscribers: vec![],
                log: None,
            }),
        }
    }
}

impl ChangeLog {
    pub(super) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock()
    }

    /// Starts a new run of `publishers` writers (a materialized view's job starting):
    /// current subscribers are dropped, their channels close.
    pub fn restart(&self, publishers: usize) {
        let mut inner = self.inner.lock();
        inner.ended = vec![false; publishers.max(1)];
        inner.subscribers.clear();
    }

    /// A publisher is done: its channels close, and subscribers joining later get closed
    /// channels for it.
    pub fn end(&self, publisher: usize) {
        let mut inner = self.inner.lock();
        if let Some(ended) = inner.ended.get_mut(publisher) {
            *ended = true;
        }
        for s in &mut inner.subscribers {
            if let Some(sender) = s.get_mut(publisher) {
                *sender = None;
            }
        }
    }

    /// Passes a barrier on to every subscriber; for a logged table it carries the log's
    /// position (the changes before the barrier are those up to it).
    pub fn barrier(&self, publisher: usize, barrier: Barrier) {
        let mut inner = self.inner.lock();
        let log_position = inner.log.as_mut().map(|log| {
            if log.marks.len() == MAX_MARKS {
                log.marks.pop_front();
            }
            log.marks.push_back((barrier.epoch, log.last));
            log.last
        });
        let barrier = Barrier {
            log_position,
            ..barrier
        };
        inner.publish(publisher, || Some(Message::Barrier(barrier)));
    }

    /// Starts logging the table's changes (no-op if it already does); `last` is the last
    /// sequence number its log holds.
    pub fn enable_log(
        &self,
        table_id: u32,
        last: impl FnOnce() -> crate::error::Result<u64>,
    ) -> crate::error::Result<()> {
        let mut inner = self.inner.lock();
        if inner.log.is_none() {
            inner.log = Some(LogCursor {
                table_id,
                last: last()?,
                marks: VecDeque::new(),
            });
        }
        Ok(())
    }

    /// Stops logging (no job reads the table any more); `forget` deletes the log, under
    /// the lock so no write lands in it meanwhile.
    pub fn disable_log(
        &self,
        forget: impl FnOnce() -> crate::error::Result<()>,
    ) -> crate::error::Result<()> {
        let mut inner = self.inner.lock();
        if inner.log.take().is_some() {
            forget()?;
        }
        Ok(())
    }

    pub fn is_logged(&self) -> bool {
        self.inner.lock().log.is_some()
    }

    /// The log position of the newest barrier at or before `epoch` still remembered,
    /// forgetting older ones: the log up to it can be cut once no checkpoint before
    /// `epoch` is kept. `None` if no such barrier is known.
    pub fn position_at(&self, epoch: u64) -> Option<u64> {
        let mut inner = self.inner.lock();
        let log = inner.log.as_mut()?;
        let newer = log
            .marks
            .iter()
            .position(|(e, _)| *e > epoch)
            .unwrap_or(log.marks.len());
        let position = newer.checked_sub(1).map(|i| log.marks[i].1)?;
        log.marks.drain(..newer - 1);
        Some(position)
    }

    /// Subscribes: `snapshot` reads the current rows while writes are held off (it is
    /// given the log's last position, for a logged table), and the receivers (one per
    /// publisher) get every change after it.
    pub fn subscribe<T>(
        &self,
        snapshot: impl FnOnce(Option<u64>) -> crate::error::Result<T>,
    ) -> crate::error::Result<(T, Vec<UnboundedReceiver<Message>>)> {
        let mut inner = self.inner.lock();
        let rows = snapshot(inner.log.as_ref().map(|l| l.last))?;
        let mut senders = Vec::new();
        let mut receivers = Vec::new();
        for ended in inner.ended.clone() {
            let (tx, rx) = unbounded_channel();
            senders.push((!ended).then_some(tx));
            receivers.push(rx);
        }
        inner.subscribers.push(senders);
        Ok((rows, receivers))
    }
}

impl Inner {
    /// Whether a write must work out its changes: someone listens, or they are logged.
    pub(super) fn wants_changes(&self) -> bool {
        !self.subscribers.is_empty() || self.log.is_some()
    }

    /// Adds the changes of a write to its RocksDB batch as the log's next entry, if the
    /// table is logged. Returns the entry's number, for [`Inner::logged`] once the batch
    /// is written.
    pub(super) fn log_changes(
        &self,
        batch: &mut rocksdb::WriteBatch,
        chunks: &[&StreamChunk],
        codec: &arrow::row::RowConverter,
    ) -> crate::error::Result<Option<u64>> {
        let Some(log) = &self.log else {
            return Ok(None);
        };
        if chunks.iter().all(|c| c.num_rows() == 0) {
            return Ok(None);
        }
        let seq = log.last + 1;
        super::table_log::append(batch, log.table_id, seq, chunks, codec)?;
        Ok(Some(seq))
    }

    /// The batch holding entry `seq` was written.
    pub(super) fn logged(&mut self, seq: Option<u64>) {
        if let (Some(log), Some(seq)) = (&mut self.log, seq) {
            log.last = seq;
        }
    }

    /// Sends a message (built only if someone listens) to every subscriber, forgetting
    /// those that went away.
    pub(super) fn publish(&mut self, publisher: usize, message: impl FnOnce() -> Option<Message>) {
        if self.subscribers.is_empty() {
            return;
        }
        let Some(message) = message() else { return };
        self.subscribers.retain(|s| {
            match s.get(publisher) {
                Some(Some(tx)) => tx.send(message.clone()).is_ok(),
                // This publisher ended for the subscriber; keep it for the others.
                _ => true,
            }
        });
    }

    pub(super) fn publish_chunk(&mut self, publisher: usize, chunk: StreamChunk) {
        if chunk.num_rows() > 0 {
            self.publish(publisher, || Some(Message::Chunk(chunk)));
        }
    }
}
