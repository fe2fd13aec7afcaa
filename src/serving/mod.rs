//! Serving: batch SQL over Eddy's stored relations through DataFusion.
//!
//! A table is exposed to DataFusion as a [`StoredTable`] whose scans read the table's
//! [`crate::state::StateTable`] and whose `INSERT`, `UPDATE` and `DELETE` write it.

pub mod keyed_scan;
pub mod stored_table;

pub use stored_table::StoredTable;
