//! Checkpoints: the coordinator that cuts every job's streams into epochs.
//!
//! Like Flink's JobManager, [`Coordinator`] injects a barrier with a new epoch into every
//! source (connector splits and table change logs) every `barrier_interval_ms`, and waits
//! until every job has passed it to its output. Tasks write their state only when a
//! barrier passes (views buffer their changes until then), so once every job has passed
//! epoch *e*, the state store holds exactly the state of epoch *e* until the next barrier
//! is injected. `FLUSH` runs a round at once.

mod commit_hooks;
pub mod coordinator;
pub mod manifest;
pub mod recovery;
pub mod storage;

pub use commit_hooks::CommitHook;
pub use coordinator::Coordinator;
