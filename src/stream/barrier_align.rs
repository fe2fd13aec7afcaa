//! [`AlignedInputs`]: merges a task's input channels and aligns barriers.
//!
//! A task reads one or more *inputs* (the edges of its fragment: a join has two, a union
//! one per branch); each input arrives over one channel per upstream subtask. Messages
//! are taken from whichever channel has one and returned with the index of the input
//! they came from. When a barrier arrives on a channel, that channel is held (not read)
//! until the same barrier has arrived on every channel still open; then the barrier is
//! returned once. So everything a task emits before a barrier comes from before that
//! barrier on all inputs — the property consistent checkpoints need. A channel whose
//! barrier is final has ended once that barrier is released; when the barrier ends the
//! last open channel it is returned final. A channel that closes without a final
//! barrier was stopped; [`AlignedInputs::next`] then returns `None` once no channel is
//! left.
//!
//! Watermarks: an input's watermark on a column is the smallest of the latest ones of its
//! open channels. With [`WatermarkMerge::AcrossInputs`] (a union) they are merged over
//! all inputs too and returned as input 0; with [`WatermarkMerge::PerInput`] (a join,
//! which needs each side's) each input's is returned with its index. Either way a
//! watermark is returned only when it grows.

use super::{Barrier, Message, Watermark};
use datafusion::common::ScalarValue;
use std::collections::{HashMap, VecDeque};
use std::future::poll_fn;
use std::task::Poll;
use tokio::sync::mpsc::Receiver;

pub enum Input {
    /// From another task (bounded: backpressure).
    Task(Receiver<Message>),
    /// From a table's or view's change log (a view's publishers wait for its readers).
    Changes(crate::state::changelog::ChangeReceiver),
}

impl Input {
    fn poll_recv(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Option<Message>> {
        match self {
            Input::Task(rx) => rx.poll_recv(cx),
            Input::Changes(rx) => rx.poll_recv(cx),
        }
    }
}

/// How a task's watermarks are merged over its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatermarkMerge {
    /// The minimum over all inputs, returned as input 0 (a union, a single input).
    AcrossInputs,
    /// Each input's own, returned with its index (an operator with several inputs).
    PerInput,
}

pub struct AlignedInputs {
    /// `None` once a channel has ended.
    channels: Vec<Option<Input>>,
    /// The input each channel belongs to.
    input_of: Vec<usize>,
    merge: WatermarkMerge,
    /// Channels held until the pending barrier has arrived on all of them.
    held: Vec<bool>,
    /// Channels whose held barrier is final: they end when it is released.
    ending: Vec<bool>,
    pending: Option<Barrier>,
    /// Messages ready to return (a released barrier, then watermarks it unblocked).
    ready: VecDeque<(usize, Message)>,
    /// Where the next poll starts, so no channel starves the others.
    start: usize,
    /// Per channel, the latest watermark of each column.
    watermarks: Vec<HashMap<usize, ScalarValue>>,
    /// Channels whose sender said it is idle ([`Message::Idle`]) and has sent no rows
    /// or watermarks since: left out of merged watermarks.
    idle: Vec<bool>,
    /// Per (input, column), the watermark last returned (input 0 when merged across).
    emitted: HashMap<(usize, usize), ScalarValue>,
}

impl AlignedInputs {
    /// A single input over these channels.
    pub fn new(channels: Vec<Input>) -> Self {
        Self::with_inputs(
            channels.into_iter().map(|c| (0, c)).collect(),
            WatermarkMerge::AcrossInputs,
        )
    }

    /// Channels, each with the index of the input it belongs to.
    pub fn with_inputs(channels: Vec<(usize, Input)>, merge: WatermarkMerge) -> Self {
        let n = channels.len();
        let (input_of, channels): (Vec<usize>, Vec<Option<Input>>) =
            channels.into_iter().map(|(i, c)| (i, Some(c))).unzip();
        Self {
            channels,
            input_of,
            merge,
            held: vec![false; n],
            ending: vec![false; n],
            pending: None,
            ready: VecDeque::new(),
            start: 0,
            watermarks: vec![HashMap::new(); n],
            idle: vec![false; n],
            emitted: HashMap::new(),
        }
    }

    /// The watermark of `column` for the input of `channel` (or every input, when merged
    /// across) if it grew: the minimum over the open channels concerned, once each has
    /// one.
    fn merged_watermark(&mut self, channel: usize, column: usize) -> Option<(usize, Watermark)> {
        let input = match self.merge {
            WatermarkMerge::AcrossInputs => None,
            WatermarkMerge::PerInput => Some(self.input_of[channel]),
        };
        let mut min: Option<&ScalarValue> = None;
        for c in 0..self.channels.len() {
            if self.channels[c].is_none()
                || self.idle[c]
                || input.is_some_and(|i| self.input_of[c] != i)
            {
                continue;
            }
            let value = self.watermarks[c].get(&column)?;
            if min.is_none_or(|m| value.partial_cmp(m) == Some(std::cmp::Ordering::Less)) {
                min = Some(value);
            }
        }
        let min = min?.clone();
        let input = input.unwrap_or(0);
        let grew = self
            .emitted
            .get(&(input, column))
            .is_none_or(|e| min.partial_cmp(e) == Some(std::cmp::Ordering::Greater));
        grew.then(|| {
            self.emitted.insert((input, column), min.clone());
            (input, Watermark { column, value: min })
        })
    }

    /// A channel has ended: it no longer holds watermarks back, so merged watermarks may
    /// grow (queued while other channels stay open).
    fn close(&mut self, channel: usize) {
        self.channels[channel] = None;
        self.held[channel] = false;
        self.ending[channel] = false;
        if self.channels.iter().all(|c| c.is_none()) {
            return;
        }
        self.release_watermarks_held_by(channel);
    }

    /// A channel went idle: the watermarks of the others may now grow. Every column some
    /// open channel has a watermark for is merged again.
    fn set_idle(&mut self, channel: usize) {
        if self.idle[channel] {
            return;
        }
        self.idle[channel] = true;
        let mut columns: Vec<usize> = self
            .watermarks
            .iter()
            .flat_map(|w| w.keys().copied())
            .collect();
        columns.sort_unstable();
        columns.dedup();
        for column in columns {
            if let Some((input, w)) = self.merged_watermark(channel, column) {
                self.ready.push_back((input, Message::Watermark(w)));
            }
        }
    }

    /// Queues the merged watermarks that `channel` no longer holds back.
    fn release_watermarks_held_by(&mut self, channel: usize) {
        let columns: Vec<usize> = self.watermarks[channel].keys().copied().collect();
        for column in columns {
            if let Some((input, w)) = self.merged_watermark(channel, column) {
                self.ready.push_back((input, Message::Watermark(w)));
            }
        }
    }

    /// The pending barrier, once every open channel has delivered it: channels whose
    /// barrier was final end, and the barrier is final if no channel is left.
    fn release_barrier(&mut self) {
        let Some(barrier) = self.pending else { return };
        let all_held = self
            .channels
            .iter()
            .zip(&self.held)
            .all(|(channel, held)| channel.is_none() || *held);
        if !all_held {
            return;
        }
        self.pending = None;
        for c in 0..self.channels.len() {
            if self.ending[c] {
                self.close(c);
            }
            self.held[c] = false;
        }
        // Watermarks the ended channels unblocked belong after the barrier.
        let watermarks: Vec<(usize, Message)> = self.ready.drain(..).collect();
        let barrier = Barrier {
            is_final: self.channels.iter().all(|c| c.is_none()),
            ..barrier
        };
        self.ready.push_back((0, Message::Barrier(barrier)));
        self.ready.extend(watermarks);
    }

    /// The next chunk or watermark with the index of the input it came from, or the next
    /// aligned barrier (input 0); `None` when every channel has closed without a final
    /// barrier (its sender stopped).
    pub async fn next(&mut self) -> Option<(usize, Message)> {
        loop {
            if let Some(message) = self.ready.pop_front() {
                return Some(message);
            }
            let open = self.channels.iter().filter(|c| c.is_some()).count();
            if open == 0 {
                return None;
            }
            self.release_barrier();
            if !self.ready.is_empty() {
                continue;
            }
            let (channel, message) = poll_fn(|cx| {
                let n = self.channels.len();
                for k in 0..n {
                    let c = (self.start + k) % n;
                    if self.held[c] {
                        continue;
                    }
                    if let Some(input) = &mut self.channels[c]
                        && let Poll::Ready(m) = input.poll_recv(cx)
                    {
                        self.start = (c + 1) % n;
                        return Poll::Ready((c, m));
                    }
                }
                Poll::Pending
            })
            .await;
            match message {
                None => self.close(channel),
                Some(Message::Idle) => self.set_idle(channel),
                Some(Message::Watermark(w)) => {
                    // A watermark means its sender reads rows again, even when none of
                    // them were routed to this subtask: the channel counts again (else
                    // a subtask its rows bypass would ignore its watermarks for good).
                    self.idle[channel] = false;
                    self.watermarks[channel].insert(w.column, w.value);
                    if let Some((input, merged)) = self.merged_watermark(channel, w.column) {
                        return Some((input, Message::Watermark(merged)));
                    }
                }
                Some(Message::Barrier(b)) => {
                    if let Some(p) = self.pending
                        && p.epoch != b.epoch
                    {
                        // Inputs must join at a barrier boundary (see `start_job`);
                        // otherwise checkpoints downstream would mix epochs.
                        tracing::error!(
                            held = p.epoch,
                            arrived = b.epoch,
                            "barriers of different epochs are being aligned"
                        );
                    }
                    self.held[channel] = true;
                    self.ending[channel] = b.is_final;
                    self.pending = Some(Barrier {
                        is_final: false,
                        ..b
                    });
                }
                Some(chunk) => {
                    // Rows again: the channel's watermarks count again.
                    self.idle[channel] = false;
                    return Some((self.input_of[channel], chunk));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::StreamChunk;
    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;
    use tokio::sync::mpsc::{Sender, channel};

    fn rows(n: i64) -> Message {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let batch =
            RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![n]))]).unwrap();
        Message::Chunk(StreamChunk::inserts(batch))
    }

    fn watermark(column: usize, value: i64) -> Message {
        Message::Watermark(Watermark {
            column,
            value: ScalarValue::Int64(Some(value)),
        })
    }

    /// Channels `(input of each)`; the senders in the same order.
    fn inputs(of: &[usize], merge: WatermarkMerge) -> (AlignedInputs, Vec<Sender<Message>>) {
        let mut senders = Vec::new();
        let mut channels = Vec::new();
        for input in of {
            let (tx, rx) = channel(16);
            senders.push(tx);
            channels.push((*input, Input::Task(rx)));
        }
        (AlignedInputs::with_inputs(channels, merge), senders)
    }

    /// What `next` returns, in short: `c<input>:<x>`, `b<epoch>`, `B<epoch>` (final),
    /// `w<input>:<column>=<value>`.
    async fn next(aligned: &mut AlignedInputs) -> Option<String> {
        let (input, message) = aligned.next().await?;
        Some(match message {
            Message::Chunk(c) => {
                let x = c
                    .batch
                    .column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap();
                format!("c{input}:{}", x.value(0))
            }
            Message::Barrier(b) if b.is_final => format!("B{}", b.epoch),
            Message::Barrier(b) => format!("b{}", b.epoch),
            Message::Watermark(w) => format!("w{input}:{}={}", w.column, w.value),
            Message::Idle => format!("i{input}"),
        })
    }

    /// Whether `next` would wait (nothing ready).
    async fn waits(aligned: &mut AlignedInputs) -> bool {
        tokio::time::timeout(std::time::Duration::from_millis(20), aligned.next())
            .await
            .is_err()
    }

    #[tokio::test]
    async fn chunks_carry_their_input_and_a_barrier_waits_for_every_channel() {
        // Input 0 over two channels (two upstream subtasks), input 1 over one.
        let (mut aligned, tx) = inputs(&[0, 0, 1], WatermarkMerge::PerInput);
        tx[0].send(Message::Barrier(Barrier::new(1))).await.unwrap();
        tx[0].send(rows(99)).await.unwrap(); // after the barrier: held back
        tx[1].send(rows(1)).await.unwrap();
        tx[2].send(rows(2)).await.unwrap();
        let mut seen = vec![
            next(&mut aligned).await.unwrap(),
            next(&mut aligned).await.unwrap(),
        ];
        seen.sort();
        assert_eq!(seen, vec!["c0:1", "c1:2"]);
        assert!(
            waits(&mut aligned).await,
            "the barrier waits for channels 1 and 2"
        );
        tx[1].send(Message::Barrier(Barrier::new(1))).await.unwrap();
        tx[2].send(Message::Barrier(Barrier::new(1))).await.unwrap();
        assert_eq!(next(&mut aligned).await.unwrap(), "b1");
        assert_eq!(next(&mut aligned).await.unwrap(), "c0:99");
    }

    #[tokio::test]
    async fn watermarks_per_input_are_the_minimum_over_that_inputs_channels() {
        let (mut aligned, tx) = inputs(&[0, 0, 1], WatermarkMerge::PerInput);
        tx[2].send(watermark(3, 50)).await.unwrap();
        assert_eq!(next(&mut aligned).await.unwrap(), "w1:3=50");
        tx[0].send(watermark(3, 10)).await.unwrap();
        assert!(
            waits(&mut aligned).await,
            "channel 1 of input 0 has none yet"
        );
        tx[1].send(watermark(3, 20)).await.unwrap();
        assert_eq!(next(&mut aligned).await.unwrap(), "w0:3=10");
        // Not grown: nothing.
        tx[0].send(watermark(3, 5)).await.unwrap();
        assert!(waits(&mut aligned).await);
        tx[0].send(watermark(3, 30)).await.unwrap();
        assert_eq!(next(&mut aligned).await.unwrap(), "w0:3=20");
    }

    #[tokio::test]
    async fn watermarks_across_inputs_are_the_minimum_of_all() {
        let (mut aligned, tx) = inputs(&[0, 1], WatermarkMerge::AcrossInputs);
        tx[1].send(watermark(0, 50)).await.unwrap();
        assert!(waits(&mut aligned).await);
        tx[0].send(watermark(0, 70)).await.unwrap();
        assert_eq!(next(&mut aligned).await.unwrap(), "w0:0=50");
        tx[1].send(watermark(0, 90)).await.unwrap();
        assert_eq!(next(&mut aligned).await.unwrap(), "w0:0=70");
    }

    #[tokio::test]
    async fn an_input_that_ends_stops_holding_barriers_and_watermarks() {
        let (mut aligned, tx) = inputs(&[0, 1], WatermarkMerge::AcrossInputs);
        tx[0].send(watermark(0, 10)).await.unwrap();
        tx[1].send(watermark(0, 40)).await.unwrap();
        assert_eq!(next(&mut aligned).await.unwrap(), "w0:0=10");
        // Input 0 ends at barrier 2; the barrier is not final while input 1 is open,
        // and input 1's watermark is then the only one.
        tx[0]
            .send(Message::Barrier(Barrier::new(2).into_final()))
            .await
            .unwrap();
        tx[1].send(Message::Barrier(Barrier::new(2))).await.unwrap();
        assert_eq!(next(&mut aligned).await.unwrap(), "b2");
        assert_eq!(next(&mut aligned).await.unwrap(), "w0:0=40");
        tx[1].send(rows(5)).await.unwrap();
        assert_eq!(next(&mut aligned).await.unwrap(), "c1:5");
        tx[1].send(Message::Barrier(Barrier::new(3))).await.unwrap();
        assert_eq!(
            next(&mut aligned).await.unwrap(),
            "b3",
            "not held by the ended input"
        );
        tx[1]
            .send(Message::Barrier(Barrier::new(4).into_final()))
            .await
            .unwrap();
        assert_eq!(next(&mut aligned).await.unwrap(), "B4");
    }

    #[tokio::test]
    async fn an_idle_channel_stops_holding_watermarks_until_its_rows_come_again() {
        let (mut aligned, tx) = inputs(&[0, 0, 0], WatermarkMerge::AcrossInputs);
        tx[0].send(watermark(0, 50)).await.unwrap();
        tx[1].send(watermark(0, 30)).await.unwrap();
        // Channel 2 never sent a watermark: nothing can be merged yet.
        tx[2].send(rows(1)).await.unwrap();
        assert_eq!(next(&mut aligned).await.unwrap(), "c0:1");
        // Channel 2 goes idle: the others' minimum goes out.
        tx[2].send(Message::Idle).await.unwrap();
        assert_eq!(next(&mut aligned).await.unwrap(), "w0:0=30");
        // Channel 1 goes idle too: channel 0's watermark alone.
        tx[1].send(Message::Idle).await.unwrap();
        assert_eq!(next(&mut aligned).await.unwrap(), "w0:0=50");
        // Channel 1 has rows again: its (older) watermark holds the merge back again,
        // which never goes back.
        tx[1].send(rows(2)).await.unwrap();
        assert_eq!(next(&mut aligned).await.unwrap(), "c0:2");
        tx[0].send(watermark(0, 70)).await.unwrap();
        tx[1].send(watermark(0, 60)).await.unwrap();
        assert_eq!(next(&mut aligned).await.unwrap(), "w0:0=60");
    }

    #[tokio::test]
    async fn an_idle_channel_counts_again_from_its_next_watermark_without_rows() {
        // The sender's rows all went to other subtasks of the exchange: only its
        // watermark reaches this one, and it must close windows here too.
        let (mut aligned, tx) = inputs(&[0, 0], WatermarkMerge::AcrossInputs);
        tx[0].send(watermark(0, 40)).await.unwrap();
        tx[1].send(watermark(0, 20)).await.unwrap();
        assert_eq!(next(&mut aligned).await.unwrap(), "w0:0=20");
        tx[1].send(Message::Idle).await.unwrap();
        assert_eq!(next(&mut aligned).await.unwrap(), "w0:0=40");
        tx[0].send(Message::Idle).await.unwrap();
        assert!(waits(&mut aligned).await, "every channel idle: nothing");
        tx[1].send(watermark(0, 90)).await.unwrap();
        assert_eq!(next(&mut aligned).await.unwrap(), "w0:0=90");
        // Channel 0 reads rows again: it holds the merge back from then on.
        tx[0].send(watermark(0, 95)).await.unwrap();
        assert!(waits(&mut aligned).await, "the minimum is still 90");
        tx[1].send(watermark(0, 120)).await.unwrap();
        assert_eq!(next(&mut aligned).await.unwrap(), "w0:0=95");
    }

    #[tokio::test]
    async fn channels_closed_without_a_final_barrier_end_the_stream() {
        let (mut aligned, tx) = inputs(&[0, 1], WatermarkMerge::PerInput);
        tx[0].send(rows(1)).await.unwrap();
        drop(tx);
        assert_eq!(next(&mut aligned).await.unwrap(), "c0:1");
        assert_eq!(next(&mut aligned).await, None);
    }

    #[tokio::test]
    async fn barriers_of_different_epochs_are_released_once_at_the_latest() {
        // A channel that skipped an epoch (it joined late) must not wedge the task.
        let (mut aligned, tx) = inputs(&[0, 1], WatermarkMerge::PerInput);
        tx[0].send(Message::Barrier(Barrier::new(5))).await.unwrap();
        tx[1].send(Message::Barrier(Barrier::new(6))).await.unwrap();
        assert_eq!(next(&mut aligned).await.unwrap(), "b6");
        assert!(waits(&mut aligned).await);
    }
}
