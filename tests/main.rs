//! Eddy's integration tests, in one binary so DataFusion is linked once.
//!
//! Every test talks to a real `eddy` server process over the PostgreSQL wire protocol,
//! with its data in a fresh temporary directory.

mod auth;
mod bounded_state;
mod cdc;
mod checkpoints;
mod clients;
mod common;
mod dataflow;
mod durability;
mod kafka;
mod nexmark;
#[path = "../benches/nexmark/shared.rs"]
mod nexmark_shared;
mod protocol;
mod psql;
mod sinks;
mod slt;
mod state_cache;
mod streaming;
mod table_log;
mod two_tables;
