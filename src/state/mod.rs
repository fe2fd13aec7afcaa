//! Keyed state over one RocksDB instance.
//!
//! Every piece of state — table rows, the catalog, later operator state — lives in a
//! [`StateTable`] identified by a table id. Keys are laid out as
//! `table_id (4 bytes BE) | key_group (2 bytes BE) | memcomparable key`, so one table's rows
//! are one contiguous key range and one key group of one table is a contiguous sub-range:
//! the unit that rescaling moves between subtasks.

pub mod cache_budget;
pub mod changelog;
pub mod conflict;
pub mod keys;
pub mod operator_state;
pub mod serving_snapshot;
pub mod state_table;
pub mod store;
pub mod table_log;
pub mod transaction;

pub use cache_budget::{BudgetShare, CacheBudget};
pub use conflict::OnConflict;
pub use keys::{KeyGroup, MAX_PARALLELISM, key_group_of, stable_hash};
pub use operator_state::{OperatorState, StateWrites};
pub use serving_snapshot::{PinnedSnapshot, ServingEpoch, ServingSnapshot};
pub use state_table::StateTable;
pub use store::StateStore;
pub use transaction::Transaction;
