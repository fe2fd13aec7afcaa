//! [`Coordinator`]: barrier rounds, one epoch at a time, on a timer and on `FLUSH`.

use crate::stream::job::JobRegistry;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The default time between two barriers.
pub const DEFAULT_BARRIER_INTERVAL_MS: u64 = 1000;

pub struct Coordinator {
    jobs: Arc<JobRegistry>,
    interval_ms: AtomicU64,
    /// The last epoch injected. Held for a whole round, so rounds never overlap: the next
    /// barrier is injected only once every job has passed the previous one.
    last_epoch: tokio::sync::Mutex<u64>,
}

impl Coordinator {
    pub fn new(jobs: Arc<JobRegistry>, interval_ms: u64) -> Self {
        Self {
            jobs,
            interval_ms: AtomicU64::new(interval_ms.max(1)),
            last_epoch: tokio::sync::Mutex::new(0),
        }
    }

    pub fn barrier_interval_ms(&self) -> u64 {
        self.interval_ms.load(Ordering::Relaxed)
    }

    pub fn set_barrier_interval_ms(&self, ms: u64) {
        self.interval_ms.store(ms.max(1), Ordering::Relaxed);
    }

    /// Runs one barrier round: injects epoch *e* into every running job and waits until
    /// each has passed it on. Returns *e*.
    pub async fn run_round(&self) -> u64 {
        let mut last = self.last_epoch.lock().await;
        let epoch = *last + 1;
        *last = epoch;
        self.jobs.inject_and_wait(epoch).await;
        epoch
    }

    /// Starts the periodic rounds on the current tokio runtime. They stop when the
    /// coordinator is dropped.
    pub fn start(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let Some(interval) = weak.upgrade().map(|c| c.barrier_interval_ms()) else {
                    return;
                };
                tokio::time::sleep(Duration::from_millis(interval)).await;
                let Some(coordinator) = weak.upgrade() else {
                    return;
                };
                coordinator.run_round().await;
            }
        });
    }
}
