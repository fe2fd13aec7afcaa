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
//! A subscriber may read with several subtasks ([`ChangeLog::subscribe_partitioned`]):
//! each publisher then splits its chunks by stream key among them, so every key's changes
//! reach one reader, in order, and barriers and watermarks reach all.
//! Writers wait for slow subscribers: after each chunk a view's subtask publishes, and
//! after each batch an `INSERT` or a Kafka or CDC table's task writes into a table, the
//! writer waits while a subscriber still has more than [`CHANGE_BACKLOG`] of its messages
//! unread ([`ChangeLog::wait_for_readers`]), so a slow view slows down what it reads
//! instead of queueing its changes without bound. (Other writes to tables — `UPDATE`,
//! `DELETE`, `COPY`, a transaction's `COMMIT` — do not wait.)
//!
//! A table's change log can also be *logged* ([`ChangeLog::enable_log`]): every write is
//! then appended to the table's replayable log ([`super::table_log`]) in the same RocksDB
//! write, and every barrier carries the log's position, so that a job can resume after
//! the changes its checkpoint holds.

use crate::dataflow::routing::{split, split_rows, subtask_of};
use crate::dataflow::{Barrier, Message, Op, StreamChunk};
use parking_lot::{Mutex, MutexGuard};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use tokio::sync::Notify;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// Unread messages from one publisher that a view's subscriber may hold before that
/// publisher waits (as many as a channel between two tasks holds).
pub const CHANGE_BACKLOG: usize = crate::dataflow::routing::CHANNEL_CAPACITY;

/// How far one reader of a change stream is behind one publisher.
#[derive(Default)]
struct Backlog {
    unread: AtomicUsize,
    /// The reader went away: nobody waits for it any more.
    closed: AtomicBool,
    /// Wakes the publisher waiting for room (one publisher per channel).
    room: Notify,
}

impl Backlog {
    async fn wait_for_room(&self) {
        while self.unread.load(Ordering::Acquire) > CHANGE_BACKLOG
            && !self.closed.load(Ordering::Acquire)
        {
            // `notify_one` stores a wake-up given before this waits, so none is lost.
            self.room.notified().await;
        }
    }
}

/// The sending half of one reader's channel from one publisher.
struct ChangeSender {
    tx: UnboundedSender<Message>,
    backlog: Arc<Backlog>,
}

impl ChangeSender {
    fn send(&self, message: Message) -> bool {
        self.backlog.unread.fetch_add(1, Ordering::AcqRel);
        self.tx.send(message).is_ok()
    }
}

/// The receiving half: every message taken makes room for its publisher.
pub struct ChangeReceiver {
    rx: UnboundedReceiver<Message>,
    backlog: Arc<Backlog>,
}

impl ChangeReceiver {
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        let polled = self.rx.poll_recv(cx);
        if let Poll::Ready(Some(_)) = &polled {
            self.took_one();
        }
        polled
    }

    pub fn try_recv(&mut self) -> Option<Message> {
        let message = self.rx.try_recv().ok()?;
        self.took_one();
        Some(message)
    }

    fn took_one(&self) {
        let before = self.backlog.unread.fetch_sub(1, Ordering::AcqRel);
        if before == CHANGE_BACKLOG + 1 {
            self.backlog.room.notify_one();
        }
    }
}

impl Drop for ChangeReceiver {
    fn drop(&mut self) {
        self.backlog.closed.store(true, Ordering::Release);
        self.backlog.room.notify_one();
    }
}

fn change_channel() -> (ChangeSender, ChangeReceiver) {
    let (tx, rx) = unbounded_channel();
    let backlog = Arc::new(Backlog::default());
    (
        ChangeSender {
            tx,
            backlog: backlog.clone(),
        },
        ChangeReceiver { rx, backlog },
    )
}

pub struct ChangeLog {
    inner: Mutex<Inner>,
}

pub(super) struct Inner {
    /// Per publisher: whether it has ended (its subscribers' channels are closed).
    ended: Vec<bool>,
    subscribers: Vec<Subscriber>,
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
            if let Some(senders) = s.senders.get_mut(publisher) {
                senders.clear();
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

    /// Waits until every reader of `publisher`'s changes has at most [`CHANGE_BACKLOG`]
    /// of them unread (or went away): how a view's subtask feels the views reading it.
    pub async fn wait_for_readers(&self, publisher: usize) {
        let backlogs: Vec<Arc<Backlog>> = {
            let inner = self.inner.lock();
            inner
                .subscribers
                .iter()
                .filter_map(|s| s.senders.get(publisher))
                .flatten()
                .map(|tx| tx.backlog.clone())
                .collect()
        };
        for backlog in backlogs {
            backlog.wait_for_room().await;
        }
    }

    /// Subscribes: `snapshot` reads the current rows while writes are held off (it is
    /// given the log's last position, for a logged table), and the receivers (one per
    /// publisher) get every change after it.
    pub fn subscribe<T>(
        &self,
        snapshot: impl FnOnce(Option<u64>) -> crate::error::Result<T>,
    ) -> crate::error::Result<(T, Vec<ChangeReceiver>)> {
        let mut inner = self.inner.lock();
        let rows = snapshot(inner.log.as_ref().map(|l| l.last))?;
        let (subscriber, mut receivers) = Subscriber::new(&inner.ended, 1);
        inner.subscribers.push(subscriber);
        Ok((rows, receivers.pop().unwrap_or_default()))
    }

    /// Subscribes with `readers` subtasks: each gets the snapshot's rows and the changes
    /// of the stream keys it owns ([`stream_key_targets`]), and every barrier and
    /// watermark, on one receiver per publisher.
    pub fn subscribe_partitioned(
        &self,
        readers: usize,
        snapshot: impl FnOnce(Option<u64>) -> crate::error::Result<Vec<StreamChunk>>,
    ) -> crate::error::Result<Vec<(Vec<StreamChunk>, Vec<ChangeReceiver>)>> {
        let readers = readers.max(1);
        let mut inner = self.inner.lock();
        let rows = snapshot(inner.log.as_ref().map(|l| l.last))?;
        let mut parts: Vec<Vec<StreamChunk>> = vec![Vec::new(); readers];
        for chunk in rows {
            for (reader, part) in split_for_readers(chunk, readers)? {
                parts[reader].push(part);
            }
        }
        let (subscriber, receivers) = Subscriber::new(&inner.ended, readers);
        inner.subscribers.push(subscriber);
        Ok(parts.into_iter().zip(receivers).collect())
    }
}

/// The reader (of `readers`) of each row of a chunk: by stream key, so that a key's
/// changes stay in order; rows without keys are inserts only and are dealt in turn.
fn stream_key_targets(chunk: &StreamChunk, readers: usize) -> Vec<usize> {
    match &chunk.keys {
        Some(keys) => keys.iter().map(|k| subtask_of(k, readers)).collect(),
        None if chunk.ops.iter().all(|op| *op == Op::Insert) => {
            (0..chunk.num_rows()).map(|row| row % readers).collect()
        }
        // Deletes without keys cannot be matched to their inserts by key: one reader
        // takes them all (no change stream publishes such chunks today).
        None => vec![0; chunk.num_rows()],
    }
}

fn split_for_readers(
    chunk: StreamChunk,
    readers: usize,
) -> crate::error::Result<Vec<(usize, StreamChunk)>> {
    if readers == 1 {
        return Ok(vec![(0, chunk)]);
    }
    let targets = stream_key_targets(&chunk, readers);
    split(chunk, &targets, readers)
}

/// [`split_for_readers`] of a published chunk, which every subscriber shares: only
/// the rows of each part are copied.
fn split_shared_for_readers(
    chunk: &StreamChunk,
    readers: usize,
) -> crate::error::Result<Vec<(usize, StreamChunk)>> {
    let targets = stream_key_targets(chunk, readers);
    match targets.first() {
        Some(&first) if targets.iter().all(|t| *t == first) => Ok(vec![(first, chunk.clone())]),
        _ => split_rows(chunk, &targets, readers),
    }
}

/// One subscriber: per publisher, one sender per reader (none once the publisher ended).
pub(super) struct Subscriber {
    senders: Vec<Vec<ChangeSender>>,
}

impl Subscriber {
    /// A subscriber of publishers that have `ended` so far, read by `readers` subtasks,
    /// and its receivers: per reader, one per publisher.
    fn new(ended: &[bool], readers: usize) -> (Self, Vec<Vec<ChangeReceiver>>) {
        let mut senders = Vec::new();
        let mut receivers: Vec<Vec<ChangeReceiver>> = (0..readers).map(|_| Vec::new()).collect();
        for ended in ended {
            let mut to_readers = Vec::new();
            for reader in receivers.iter_mut() {
                let (tx, rx) = change_channel();
                if !ended {
                    to_readers.push(tx);
                }
                reader.push(rx);
            }
            senders.push(to_readers);
        }
        (Self { senders }, receivers)
    }

    /// Sends a message from `publisher`, split among the readers if it is a chunk;
    /// `false` when the subscriber went away.
    fn send(&self, publisher: usize, message: &Message) -> bool {
        let Some(senders) = self.senders.get(publisher) else {
            return true;
        };
        match (message, senders.len()) {
            // This publisher ended for the subscriber; keep it for the others.
            (_, 0) => true,
            (_, 1) => senders[0].send(message.clone()),
            (Message::Chunk(chunk), readers) => {
                match split_shared_for_readers(chunk, readers) {
                    Ok(parts) => parts
                        .into_iter()
                        .all(|(reader, part)| senders[reader].send(Message::Chunk(part))),
                    Err(e) => {
                        // The subscriber's readers would miss rows: drop it, which
                        // stops its job (closed inputs) rather than leave it wrong.
                        tracing::error!("splitting a change stream chunk: {}", e.report());
                        false
                    }
                }
            }
            (_, _) => senders.iter().all(|tx| tx.send(message.clone())),
        }
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
        self.subscribers.retain(|s| s.send(publisher, &message));
    }

    pub(super) fn publish_chunk(&mut self, publisher: usize, chunk: StreamChunk) {
        if chunk.num_rows() > 0 {
            self.publish(publisher, || Some(Message::Chunk(chunk)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, RecordBatch};
    use std::time::Duration;

    fn keyed_chunk(ids: &[i64], op: Op) -> StreamChunk {
        let batch = RecordBatch::try_from_iter([(
            "id",
            Arc::new(Int64Array::from(ids.to_vec())) as arrow::array::ArrayRef,
        )])
        .unwrap();
        StreamChunk {
            ops: vec![op; ids.len()],
            batch,
            keys: Some(ids.iter().map(|id| id.to_be_bytes().to_vec()).collect()),
        }
    }

    fn ids(chunk: &StreamChunk) -> Vec<i64> {
        let column = chunk.batch.column(0).as_any().downcast_ref::<Int64Array>();
        column.unwrap().values().to_vec()
    }

    fn drain(receiver: &mut ChangeReceiver) -> (Vec<i64>, usize) {
        let (mut rows, mut barriers) = (Vec::new(), 0);
        while let Some(message) = receiver.try_recv() {
            match message {
                Message::Chunk(c) => rows.extend(ids(&c)),
                Message::Barrier(_) => barriers += 1,
                _ => {}
            }
        }
        (rows, barriers)
    }

    #[test]
    fn partitioned_readers_own_each_key_in_snapshot_and_changes() {
        let log = ChangeLog::default();
        log.restart(2);
        let all: Vec<i64> = (0..200).collect();
        let mut readers = log
            .subscribe_partitioned(3, |_| Ok(vec![keyed_chunk(&all, Op::Insert)]))
            .unwrap();
        assert_eq!(readers.len(), 3);
        // Both publishers change every key, then pass a barrier.
        for publisher in 0..2 {
            let mut inner = log.lock();
            inner.publish_chunk(publisher, keyed_chunk(&all, Op::Delete));
            drop(inner);
            log.barrier(publisher, Barrier::new(1));
        }
        let mut seen = Vec::new();
        for (reader, (snapshot, receivers)) in readers.iter_mut().enumerate() {
            let snapshot_keys: Vec<i64> = snapshot.iter().flat_map(ids).collect();
            assert!(!snapshot_keys.is_empty(), "reader {reader} owns some keys");
            assert_eq!(receivers.len(), 2, "one receiver per publisher");
            for receiver in receivers.iter_mut() {
                let (changed, barriers) = drain(receiver);
                // A reader gets the changes of exactly the keys of its snapshot rows.
                assert_eq!(changed, snapshot_keys, "reader {reader}");
                assert_eq!(barriers, 1, "every reader gets every barrier");
            }
            seen.extend(snapshot_keys);
        }
        seen.sort_unstable();
        assert_eq!(seen, all, "every key has exactly one reader");
    }

    #[tokio::test]
    async fn a_publisher_waits_while_a_reader_is_behind() {
        let log = Arc::new(ChangeLog::default());
        log.restart(1);
        let (_, mut receivers) = log.subscribe(|_| Ok(())).unwrap();
        for i in 0..(CHANGE_BACKLOG as i64 + 3) {
            log.lock().publish_chunk(0, keyed_chunk(&[i], Op::Insert));
        }
        let waiting = {
            let log = log.clone();
            tokio::spawn(async move { log.wait_for_readers(0).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !waiting.is_finished(),
            "more than the backlog unread: it waits"
        );
        // Reading down to the backlog lets it go on.
        for _ in 0..3 {
            receivers[0].try_recv().unwrap();
        }
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the publisher goes on once the reader caught up")
            .unwrap();
        // A reader that went away holds nobody back.
        for i in 0..(CHANGE_BACKLOG as i64 * 2) {
            log.lock().publish_chunk(0, keyed_chunk(&[i], Op::Insert));
        }
        drop(receivers);
        tokio::time::timeout(Duration::from_secs(5), log.wait_for_readers(0))
            .await
            .expect("no wait for a reader that is gone");
    }
}
