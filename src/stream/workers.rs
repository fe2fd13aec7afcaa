//! Worker threads and their task slots.
//!
//! Streaming tasks do not run on the tokio runtime that serves connections: each worker
//! is an OS thread with its own single-threaded tokio runtime, so a busy job cannot slow
//! down query handling and a task always runs on the worker it was placed on. A worker
//! offers `slots_per_worker` slots; subtask *i* of every fragment of a job goes to slot
//! *i* (slot sharing, as in Flink), and slot *s* lives on worker *s mod workers*, so the
//! subtasks of one fragment spread over all workers.

use std::future::Future;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

pub struct Workers {
    handles: Vec<Handle>,
    slots_per_worker: usize,
    /// Dropping these ends the workers' threads.
    _shutdown: Vec<oneshot::Sender<()>>,
}

/// Where a subtask runs.
#[derive(Debug, Clone, Copy)]
pub struct Placement {
    pub slot: usize,
    pub worker: usize,
}

impl Workers {
    pub fn start(workers: usize, slots_per_worker: usize) -> std::io::Result<Self> {
        let mut handles = Vec::with_capacity(workers);
        let mut shutdown = Vec::with_capacity(workers);
        for i in 0..workers.max(1) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            handles.push(runtime.handle().clone());
            let (tx, rx) = oneshot::channel::<()>();
            shutdown.push(tx);
            std::thread::Builder::new()
                .name(format!("eddy-worker-{i}"))
                .spawn(move || {
                    // Runs the tasks spawned onto this worker until the server stops.
                    let _ = runtime.block_on(rx);
                })?;
        }
        Ok(Self {
            handles,
            slots_per_worker: slots_per_worker.max(1),
            _shutdown: shutdown,
        })
    }

    pub fn worker_count(&self) -> usize {
        self.handles.len()
    }

    pub fn slot_count(&self) -> usize {
        self.handles.len() * self.slots_per_worker
    }

    /// The slot and worker of subtask `subtask`. With more subtasks than slots, slots are
    /// shared by several subtasks of a fragment.
    pub fn place(&self, subtask: usize) -> Placement {
        let slot = subtask % self.slot_count();
        Placement {
            slot,
            worker: slot % self.handles.len(),
        }
    }

    pub fn spawn<F>(&self, placement: Placement, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.handles[placement.worker].spawn(task);
    }
}
