//! [`AlignedInputs`]: merges a task's input channels and aligns barriers.
//!
//! Messages are taken from whichever input has one. When a barrier arrives on an input,
//! that input is held (not read) until the same barrier has arrived on every input still
//! open; then the barrier is returned once. So everything a task emits before a barrier
//! comes from before that barrier on all inputs — the property consistent checkpoints
//! need. An input whose channel closes has ended; when all have, so has the stream.

use super::{Barrier, Message};
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
    pending: Option<Barrier>,
    /// Where the next poll starts, so no input starves the others.
    start: usize,
}

impl AlignedInputs {
    pub fn new(inputs: Vec<Input>) -> Self {
        let n = inputs.len();
        Self {
            inputs: inputs.into_iter().map(Some).collect(),
            held: vec![false; n],
            pending: None,
            start: 0,
        }
    }

    /// The next chunk or aligned barrier; `None` when every input has ended.
    pub async fn next(&mut self) -> Option<Message> {
        loop {
            let open = self.inputs.iter().filter(|i| i.is_some()).count();
            if open == 0 {
                return None;
            }
            if let Some(barrier) = self.pending {
                let all_held = self
                    .inputs
                    .iter()
                    .zip(&self.held)
                    .all(|(input, held)| input.is_none() || *held);
                if all_held {
                    self.pending = None;
                    self.held.iter_mut().for_each(|h| *h = false);
                    return Some(Message::Barrier(barrier));
                }
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
                None => self.inputs[index] = None,
                Some(Message::Barrier(b)) => {
                    self.held[index] = true;
                    self.pending = Some(b);
                }
                Some(chunk) => return Some(chunk),
            }
        }
    }
}
