//! The aggregate's write-back cache over its internal state table.
//!
//! Groups live in memory slots. At each barrier the groups changed since the last one are
//! written to RocksDB (`checkpoint`); from then on they are *clean* and may be evicted
//! when the server's state caches together pass `--state-cache-mb` (a clock sweep gives
//! recently used groups a second chance). A key that is not in memory is looked up in
//! RocksDB — for a whole chunk at once — before it counts as a new group, but only once
//! the store may hold groups that memory does not (after a restore or an eviction): a job
//! whose state fits in memory never reads RocksDB.
//!
//! Sizes are estimates (slot overhead, key bytes, counted values): what matters is that
//! they grow and shrink with the state.

use super::{AggState, HashAgg};
use crate::error::Result;
use crate::state::{CacheBudget, OperatorState};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Memory of a group slot besides its key and counted values: the map entry and the
/// slot's place in each per-group vector.
const SLOT_BYTES: usize = 96;
/// Memory of one call's per-group state (a count, a sum, or an empty value map).
const CALL_BYTES: usize = 24;
/// Memory of a counted value (`min`/`max`/`count(DISTINCT)`) besides its bytes.
const VALUE_BYTES: usize = 48;
/// The most slots one eviction pass looks at: when nearly every group has changed since
/// the last barrier, a pass must not cost a sweep over all of them per chunk.
const MAX_SWEEP: usize = 16_384;

/// The estimated memory of one counted value.
pub(super) fn value_bytes(value: &[u8]) -> usize {
    value.len() + VALUE_BYTES
}

/// Where evicted groups are read back from and how much memory groups may take.
pub(super) struct GroupCache {
    pub(super) state: OperatorState,
    budget: Arc<CacheBudget>,
    /// RocksDB may hold groups that are not in memory (restored or evicted ones): a key
    /// missing from memory must be looked up before it counts as new.
    pub(super) may_hold_more: bool,
    /// Where the clock sweep goes on.
    hand: usize,
    /// Bytes of groups in memory already reported to the budget.
    reported: usize,
}

impl Drop for GroupCache {
    fn drop(&mut self) {
        self.budget.adjust(self.reported, 0);
    }
}

impl HashAgg {
    /// Connects the aggregate to its state table (before any input).
    pub(super) fn attach(&mut self, state: &OperatorState) -> Result<()> {
        self.cache = Some(GroupCache {
            state: state.clone(),
            budget: state.store().cache_budget().clone(),
            may_hold_more: state.has_owned_state()?,
            hand: 0,
            reported: 0,
        });
        Ok(())
    }

    /// The estimated memory of a new group slot with this key.
    pub(super) fn slot_bytes(&self, key: &[u8]) -> usize {
        SLOT_BYTES + CALL_BYTES * self.states.len() + 2 * key.len()
    }

    /// A group in memory grew (or, negative, shrank) by `bytes`.
    pub(super) fn grow_group(&mut self, g: usize, bytes: usize) {
        self.sizes[g] += bytes;
        self.resident_bytes += bytes;
    }

    /// Frees a group's slot (evicted or forgotten), dropping its memory.
    pub(super) fn release_slot(&mut self, g: usize) {
        self.groups.remove(&self.group_rows[g]);
        self.group_rows[g] = Box::default();
        self.resident_bytes -= self.sizes[g];
        self.sizes[g] = 0;
        self.is_dirty[g] = false;
        self.value_changes[g].clear();
        for state in &mut self.states {
            if let AggState::Values { counts, .. } = state {
                counts[g] = BTreeMap::new();
            }
        }
        self.free.push(g);
    }

    /// Slots for keys that are not in memory: each is read back from RocksDB when it is
    /// there, or starts as a new, empty group. Returns each slot with whether the group
    /// was found in RocksDB.
    pub(super) fn load_groups(&mut self, keys: &[&[u8]]) -> Result<Vec<(usize, bool)>> {
        let stored = match &self.cache {
            Some(cache) if cache.may_hold_more => {
                let stored = cache.state.get_keyed_many(keys)?;
                let found = stored.iter().filter(|s| s.is_some()).count();
                cache.budget.record_loads(found);
                stored
            }
            _ => vec![None; keys.len()],
        };
        let mut slots = Vec::with_capacity(keys.len());
        for (key, stored) in keys.iter().zip(stored) {
            let key: Box<[u8]> = (*key).into();
            let g = self.new_group(key.clone());
            self.groups.insert(key, g);
            if let Some(bytes) = &stored
                && self.decode_group(g, bytes)?
                && let Some(cache) = &self.cache
            {
                let state = cache.state.clone();
                self.load_value_rows(g, &state)?;
            }
            slots.push((g, stored.is_some()));
        }
        Ok(slots)
    }

    /// After a chunk or watermark: reports the groups' memory and, when the caches
    /// together are over budget, evicts clean groups until they are back under it. Asks
    /// for an early barrier when too few groups are clean.
    pub(super) fn settle_cache(&mut self) {
        let Some(cache) = &mut self.cache else {
            return;
        };
        cache.budget.adjust(cache.reported, self.resident_bytes);
        cache.reported = self.resident_bytes;
        if !cache.budget.is_over() || self.global {
            return;
        }
        let budget = cache.budget.clone();
        // This aggregate's share of the excess, in proportion to what it holds: every
        // over-budget operator evicts its part rather than the first one evicting all.
        let used = budget.used().max(1);
        let excess = used.saturating_sub(budget.target());
        let mut to_free = (excess as u128 * self.resident_bytes as u128 / used as u128) as usize;
        let slots = self.group_rows.len();
        let mut evicted = 0;
        // Up to two turns of the clock (the first may only clear reference bits), at most
        // MAX_SWEEP slots; what is left waits for the next pass or barrier.
        for _ in 0..(2 * slots).min(MAX_SWEEP) {
            if to_free == 0 {
                break;
            }
            let cache = self.cache.as_mut().expect("checked above");
            let g = cache.hand % slots;
            cache.hand = (g + 1) % slots;
            if self.sizes[g] == 0 || self.is_dirty[g] {
                continue; // a free slot, or changes not yet in RocksDB
            }
            if std::mem::take(&mut self.referenced[g]) {
                continue;
            }
            to_free = to_free.saturating_sub(self.sizes[g]);
            self.release_slot(g);
            evicted += 1;
        }
        let cache = self.cache.as_mut().expect("checked above");
        if evicted > 0 {
            cache.may_hold_more = true;
            budget.record_evictions(evicted);
        }
        budget.adjust(cache.reported, self.resident_bytes);
        cache.reported = self.resident_bytes;
        if to_free > 0 {
            budget.want_barrier();
        }
    }
}
