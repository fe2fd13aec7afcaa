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

use crate::stream::{Barrier, Message, StreamChunk};
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

pub struct ChangeLog {
    inner: Mutex<Inner>,
}

pub(super) struct Inner {
    /// Per publisher: whether it has ended (its subscribers' channels are closed).
    ended: Vec<bool>,
    /// Per subscriber, one sender per publisher (`None` once that publisher ended).
    subscribers: Vec<Vec<Option<UnboundedSender<Message>>>>,
}

impl Default for ChangeLog {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Inner {
                ended: vec![false],
                subscribers: vec![],
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

    /// Passes a barrier on to every subscriber.
    pub fn barrier(&self, publisher: usize, barrier: Barrier) {
        self.inner
            .lock()
            .publish(publisher, || Some(Message::Barrier(barrier)));
    }

    /// Subscribes: `snapshot` reads the current rows while writes are held off, and the
    /// receivers (one per publisher) get every change after it.
    pub fn subscribe<T>(
        &self,
        snapshot: impl FnOnce() -> crate::error::Result<T>,
    ) -> crate::error::Result<(T, Vec<UnboundedReceiver<Message>>)> {
        let mut inner = self.inner.lock();
        let rows = snapshot()?;
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
    pub(super) fn has_subscribers(&self) -> bool {
        !self.subscribers.is_empty()
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
