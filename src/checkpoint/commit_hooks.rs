//! What runs once a checkpoint is committed: sinks that publish at commit (files,
//! exactly-once Kafka) send what they staged for it, CDC sources acknowledge the log
//! position it holds.
//!
//! Hooks run on a task of their own, in epoch order, not on the uploader: a slow or
//! unreachable external system (a Kafka broker timing out) delays its own publishing
//! and the `FLUSH` waiting for it, never the commits of later checkpoints, and so never
//! the freshness of every view in the server. When hooks fall behind, the epochs that
//! queued up meanwhile are handled in one call with the newest of them: each hook
//! publishes everything up to the epoch it is given.

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// Runs once a checkpoint is committed, before a `FLUSH` of its epoch returns; called
/// with the epoch and the jobs its checkpoint holds.
pub type CommitHook =
    Arc<dyn Fn(u64, &[String]) -> futures::future::BoxFuture<'static, ()> + Send + Sync>;

/// How a checkpoint round ended.
pub(super) enum RoundEnd {
    /// Committed, holding these jobs: the hooks run for it.
    Committed { epoch: u64, jobs: Vec<String> },
    /// Failed or given up on: nothing to publish, only waiters to release.
    GivenUp { epoch: u64 },
}

/// The hooks by name, and the queue of ended rounds they are run for.
pub(super) struct CommitHooks {
    hooks: Mutex<BTreeMap<String, CommitHook>>,
    ended: UnboundedSender<RoundEnd>,
    /// Taken by [`run`] when the coordinator starts.
    pending: Mutex<Option<UnboundedReceiver<RoundEnd>>>,
}

impl CommitHooks {
    pub(super) fn new() -> Self {
        let (ended, pending) = unbounded_channel();
        Self {
            hooks: Mutex::new(BTreeMap::new()),
            ended,
            pending: Mutex::new(Some(pending)),
        }
    }

    pub(super) fn set(&self, name: &str, hook: CommitHook) {
        self.hooks.lock().insert(name.to_string(), hook);
    }

    pub(super) fn remove(&self, name: &str) {
        self.hooks.lock().remove(name);
    }

    /// Queues a round's end; its epoch is settled once the hooks have run for it.
    pub(super) fn round_ended(&self, end: RoundEnd) {
        let _ = self.ended.send(end);
    }

    pub(super) fn take_queue(&self) -> Option<UnboundedReceiver<RoundEnd>> {
        self.pending.lock().take()
    }

    fn all(&self) -> Vec<CommitHook> {
        self.hooks.lock().values().cloned().collect()
    }
}

/// Runs the hooks for each ended round (or the newest of those waiting), then calls
/// `settle` with the newest epoch handled. Ends when `hooks` is gone.
pub(super) async fn run(
    hooks: std::sync::Weak<CommitHooks>,
    mut queue: UnboundedReceiver<RoundEnd>,
    settle: impl Fn(u64) + Send + 'static,
) {
    while let Some(first) = queue.recv().await {
        let mut newest = 0;
        let mut committed = None;
        let mut jobs = BTreeSet::new();
        let mut end = Some(first);
        while let Some(next) = end.take().or_else(|| queue.try_recv().ok()) {
            match next {
                RoundEnd::Committed { epoch, jobs: held } => {
                    newest = newest.max(epoch);
                    committed = committed.max(Some(epoch));
                    jobs.extend(held);
                }
                RoundEnd::GivenUp { epoch } => newest = newest.max(epoch),
            }
        }
        let Some(hooks) = hooks.upgrade() else {
            return;
        };
        if let Some(epoch) = committed {
            let jobs: Vec<String> = jobs.into_iter().collect();
            for hook in hooks.all() {
                hook(epoch, &jobs).await;
            }
        }
        settle(newest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rounds that ended while the hooks were busy are handled in one call with the
    /// newest committed epoch and every job they held; the newest epoch is settled.
    #[tokio::test]
    async fn queued_rounds_run_the_hooks_once_with_the_newest_epoch() {
        let hooks = Arc::new(CommitHooks::new());
        type Calls = Vec<(u64, Vec<String>)>;
        let calls: Arc<Mutex<Calls>> = Arc::default();
        let seen = calls.clone();
        hooks.set(
            "sink",
            Arc::new(move |epoch, jobs| {
                seen.lock().push((epoch, jobs.to_vec()));
                Box::pin(async {})
            }),
        );
        let queue = hooks.take_queue().unwrap();
        hooks.round_ended(RoundEnd::Committed {
            epoch: 1,
            jobs: vec!["a".into()],
        });
        hooks.round_ended(RoundEnd::Committed {
            epoch: 2,
            jobs: vec!["b".into()],
        });
        hooks.round_ended(RoundEnd::GivenUp { epoch: 3 });
        let settled: Arc<Mutex<Vec<u64>>> = Arc::default();
        let settles = settled.clone();
        let weak = Arc::downgrade(&hooks);
        let runner = tokio::spawn(run(weak, queue, move |epoch| settles.lock().push(epoch)));
        while settled.lock().is_empty() {
            tokio::task::yield_now().await;
        }
        assert_eq!(*calls.lock(), vec![(2, vec!["a".into(), "b".into()])]);
        assert_eq!(*settled.lock(), vec![3]);
        // A round that only failed releases its waiters without calling the hooks.
        hooks.round_ended(RoundEnd::GivenUp { epoch: 4 });
        while settled.lock().len() < 2 {
            tokio::task::yield_now().await;
        }
        assert_eq!(calls.lock().len(), 1);
        drop(hooks);
        runner.abort();
    }
}
