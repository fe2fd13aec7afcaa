//! [`AlignedInputs`]: merges a task's input channels and aligns barriers.
//!
//! Messages are taken from whichever input has one. When a barrier arrives on an input,
//! that input is held (not read) until the same barrier has arrived on every input still
//! open; then the barrier is returned once. So everything a task emits before a barrier
//! comes from before that barrier on all inputs — the property consistent checkpoints
//! need. An input whose barrier is final has ended once that barrier is released; when
//! the barrier ends the last open input it is returned final. An input whose channel
//! closes without a final barrier was stopped; [`AlignedInputs::next`] then returns
//! `None` once no input is left.
//!
//! Watermarks are merged too: a column's watermark is the smallest of the latest ones of
//! the inputs still open, passed on when it grows.

use super::{Barrier, Message, Watermark};
use datafusion::common::ScalarValue;
use std::collections::{HashMap, VecDeque};
use std::future::poll_fn;
use std::task::Poll;
use tokio::sync::mpsc::{Receiver, UnboundedReceiver};

pub enum Input {
    /// From another task (bounded: backpressure).
    Task(Receiver<Message>),
    /// From a table's or view's change log.
    Changes(UnboundedReceiver<Message>),
}

impl Input {
    fn poll_recv(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Option<Message>> {
        match self {
            Input::Task(rx) => rx.poll_recv(cx),
            Input::Changes(rx) => rx.poll_recv(cx),
        }
    }
}

pub struct AlignedInputs {
    /// `None` once an input has ended.
    inputs: Vec<Option<Input>>,
    /// Inputs held until the pending barrier has arrived on all of them.
    held: Vec<bool>,
    /// Inputs whose held barrier is final: they end when it is released.
    ending: Vec<bool>,
    pending: Option<Barrier>,
    /// Messages ready to return (a released barrier, then watermarks it unblocked).
    ready: VecDeque<Message>,
    /// Where the next poll starts, so no input starves the others.
    start: usize,
    /// Per input, the latest watermark of each column.
    watermarks: Vec<HashMap<usize, ScalarValue>>,
    /// Per column, the watermark last passed on.
    emitted: HashMap<usize, ScalarValue>,
}

impl AlignedInputs {
    pub fn new(inputs: Vec<Input>) -> Self {
        let n = inputs.len();
        Self {
            inputs: inputs.into_iter().map(Some).collect(),
            held: vec![false; n],
            ending: vec![false; n],
            pending: None,
            ready: VecDeque::new(),
            start: 0,
            watermarks: vec![HashMap::new(); n],
            emitted: HashMap::new(),
        }
    }

    /// The merged watermark of `column` if it grew: the minimum over open inputs, once
    /// every open input has one.
    fn merged_watermark(&mut self, column: usize) -> Option<Watermark> {
        let mut min: Option<&ScalarValue> = None;
        for (input, marks) in self.inputs.iter().zip(&self.watermarks) {
            if input.is_none() {
                continue;
            }
            let value = marks.get(&column)?;
            if min.is_none_or(|m| value.partial_cmp(m) == Some(std::cmp::Ordering::Less)) {
                min = Some(value);
            }
        }
        let min = min?.clone();
        let grew = self
            .emitted
            .get(&column)
            .is_none_or(|e| min.partial_cmp(e) == Some(std::cmp::Ordering::Greater));
        grew.then(|| {
            self.emitted.insert(column, min.clone());
            Watermark { column, value: min }
        })
    }

    /// An input has ended: it no longer holds watermarks back, so merged watermarks may
    /// grow (queued while other inputs stay open).
    fn close(&mut self, index: usize) {
        self.inputs[index] = None;
        self.held[index] = false;
        self.ending[index] = false;
        if self.inputs.iter().all(|i| i.is_none()) {
            return;
        }
        let columns: Vec<usize> = self.watermarks[index].keys().copied().collect();
        for column in columns {
            if let Some(w) = self.merged_watermark(column) {
                self.ready.push_back(Message::Watermark(w));
            }
        }
    }

    /// The pending barrier, once every open input has delivered it: inputs whose barrier
    /// was final end, and the barrier is final if no input is left.
    fn release_barrier(&mut self) {
        let Some(barrier) = self.pending else { return };
        let all_held = self
            .inputs
            .iter()
            .zip(&self.held)
            .all(|(input, held)| input.is_none() || *held);
        if !all_held {
            return;
        }
        self.pending = None;
        for i in 0..self.inputs.len() {
            if self.ending[i] {
                self.close(i);
            }
            self.held[i] = false;
        }
        // Watermarks the ended inputs unblocked belong after the barrier.
        let watermarks: Vec<Message> = self.ready.drain(..).collect();
        let barrier = Barrier {
            is_final: self.inputs.iter().all(|i| i.is_none()),
            ..barrier
        };
        self.ready.push_back(Message::Barrier(barrier));
        self.ready.extend(watermarks);
    }

    /// The next chunk, watermark or aligned barrier; `None` when every input has closed
    /// without a final barrier (its sender stopped).
    pub async fn next(&mut self) -> Option<Message> {
        loop {
            if let Some(message) = self.ready.pop_front() {
                return Some(message);
            }
            let open = self.inputs.iter().filter(|i| i.is_some()).count();
            if open == 0 {
                return None;
            }
            self.release_barrier();
            if !self.ready.is_empty() {
                continue;
            }
            let (index, message) = poll_fn(|cx| {
                let n = self.inputs.len();
                for k in 0..n {
                    let i = (self.start + k) % n;
                    if self.held[i] {
                        continue;
                    }
                    if let Some(input) = &mut self.inputs[i]
                        && let Poll::Ready(m) = input.poll_recv(cx)
                    {
                        self.start = (i + 1) % n;
                        return Poll::Ready((i, m));
                    }
                }
                Poll::Pending
            })
            .await;
            match message {
                None => self.close(index),
                Some(Message::Watermark(w)) => {
                    self.watermarks[index].insert(w.column, w.value);
                    if let Some(merged) = self.merged_watermark(w.column) {
                        return Some(Message::Watermark(merged));
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
                    self.held[index] = true;
                    self.ending[index] = b.is_final;
                    self.pending = Some(Barrier {
                        is_final: false,
                        ..b
                    });
                }
                Some(chunk) => return Some(chunk),
            }
        }
    }
}
