//! Per-value state rows: how `min`/`max`, `count(DISTINCT)`, `sum(DISTINCT)` and the
//! recomputed aggregates keep their counted values in RocksDB.
//!
//! Each counted value of a group is a row of its own, `VALUE_ROW_MARKER | group key
//! (length-prefixed) | call (u16) | value` → count (i64), in the key group of its group
//! key. A barrier writes only the values that changed since the last one: a group with
//! 100 000 distinct prices costs one row per changed price, not a rewrite of all of them
//! (which made `max()` over a changing group quadratic). A group loaded back from RocksDB
//! reads its values with one prefix scan.
//!
//! Groups written before value rows existed keep their values inline in the group's row;
//! they are read as such and rewritten as value rows at the next barrier.

use super::{AggState, HashAgg};
use crate::error::{EddyError, Result};
use crate::state::OperatorState;
use crate::state::StateWrites;
use crate::state::keys::{key_group_of, put_len_prefixed};

/// First byte of every value row. Group keys are memcomparable rows of ascending fields,
/// whose first byte (a null or validity sentinel) is at most 2: no group key starts so.
pub(super) const VALUE_ROW_MARKER: u8 = 0xfe;

/// In a group's encoded state, the value count that says "the values are rows of their
/// own" (an older group's state has the real count and the values inline).
pub(super) const VALUES_IN_ROWS: u32 = u32::MAX;

/// A counted value whose count changed: the call it belongs to and the value.
pub(super) type ValueChange = (u16, Box<[u8]>);

/// Whether an owned state key is a value row rather than a group.
pub(super) fn is_value_row(key: &[u8]) -> bool {
    key.first() == Some(&VALUE_ROW_MARKER)
}

/// The prefix of every value row of a group.
fn group_prefix(group_key: &[u8]) -> Vec<u8> {
    let mut prefix = Vec::with_capacity(group_key.len() + 5);
    prefix.push(VALUE_ROW_MARKER);
    put_len_prefixed(&mut prefix, group_key);
    prefix
}

impl HashAgg {
    /// Whether any call keeps counted values (and so writes value rows).
    pub(super) fn keeps_values(&self) -> bool {
        self.states
            .iter()
            .any(|s| matches!(s, AggState::Values { .. }))
    }

    /// Writes the value rows of group `g` that changed since the last barrier.
    pub(super) fn write_value_changes(
        &mut self,
        g: usize,
        state: &OperatorState,
        batch: &mut StateWrites,
    ) {
        let mut changes = std::mem::take(&mut self.value_changes[g]);
        if changes.is_empty() {
            return;
        }
        changes.sort_unstable();
        changes.dedup();
        let group_key = &self.group_rows[g];
        let key_group = key_group_of(group_key);
        let prefix = group_prefix(group_key);
        let mut key = Vec::new();
        for (call, value) in &changes {
            let AggState::Values { counts, .. } = &self.states[*call as usize] else {
                continue;
            };
            key.clear();
            key.extend_from_slice(&prefix);
            key.extend_from_slice(&call.to_be_bytes());
            key.extend_from_slice(value);
            let count = counts[g].get(value.as_ref()).map(|c| c.to_le_bytes());
            state.put_in_group(batch, key_group, &key, count.as_ref().map(|c| &c[..]));
        }
        // Keep the allocation for the next epoch's changes.
        changes.clear();
        self.value_changes[g] = changes;
    }

    /// Deletes every value row of a group (gone, or forgotten with its window).
    pub(super) fn delete_value_rows(
        group_key: &[u8],
        state: &OperatorState,
        batch: &mut StateWrites,
    ) {
        state.delete_prefix_in_group(batch, key_group_of(group_key), &group_prefix(group_key));
    }

    /// Reads the value rows of the (just loaded) group `g` into its calls' counts.
    pub(super) fn load_value_rows(&mut self, g: usize, state: &OperatorState) -> Result<()> {
        let group_key = &self.group_rows[g];
        let prefix = group_prefix(group_key);
        let mut loaded: Vec<(usize, Vec<u8>, i64)> = Vec::new();
        state.scan_prefix_in_group(key_group_of(group_key), &prefix, |key, count| {
            let rest = &key[prefix.len()..];
            let (call, value) = rest.split_at_checked(2).ok_or_else(truncated)?;
            let call = u16::from_be_bytes([call[0], call[1]]) as usize;
            let count = i64::from_le_bytes(count.try_into().map_err(|_| truncated())?);
            loaded.push((call, value.to_vec(), count));
            Ok(())
        })?;
        let mut bytes = 0;
        for (call, value, count) in loaded {
            if let Some(AggState::Values { counts, .. }) = self.states.get_mut(call) {
                bytes += super::cache::value_bytes(&value);
                counts[g].insert(value, count);
            }
        }
        self.grow_group(g, bytes);
        Ok(())
    }
}

/// Records that the count of `value` in call `call` of group `g` changed.
pub(super) fn value_changed(changes: &mut [Vec<ValueChange>], g: usize, call: usize, value: &[u8]) {
    changes[g].push((call as u16, value.into()));
}

fn truncated() -> EddyError {
    EddyError::internal("truncated aggregate value row")
}
