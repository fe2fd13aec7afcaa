//! Eddy: a streaming SQL database with Flink's execution model behind PostgreSQL's wire
//! protocol. See `docs/architecture.md` for the map of the modules.

pub mod catalog;
pub mod checkpoint;
pub mod config;
pub mod connectors;
pub mod dataflow;
pub mod error;
pub mod interval_math;
pub mod jsonb;
mod layering;
pub mod pg_text;
pub mod plan_helpers;
pub mod planner;
pub mod server;
pub mod serving;
pub mod session;
pub mod sql;
pub mod state;
pub mod stream;
pub mod time_zones;

/// Every binary linking Eddy (the server, its tests and benchmarks) allocates through
/// mimalloc: batches are built on one worker and freed on another, which glibc's malloc
/// handles with costly consolidation.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
