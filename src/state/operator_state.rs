//! [`OperatorState`]: the slice of a job's internal state table one subtask owns.
//!
//! Stateful operators (aggregates) and source subtasks (split positions) keep their state
//! in internal tables, one per stateful operator of a job, with ids derived from the
//! job's relation id ([`internal_table_id`]). Keys follow the usual layout
//! `table_id | key_group | key`; a subtask of parallelism `p` owns the key groups `g` with
//! `g * p / 256 == subtask` — the same ranges the hash exchange routes by, so a job
//! restarted at another parallelism finds each key's state in the subtask its rows now
//! reach. State that belongs to no key (a window operator's closed-below mark, a source
//! split's position) goes to the reserved group [`UNKEYED_GROUP`], which every subtask
//! reads whole.
//!
//! Writes are collected into a task's [`StateWrites`] when a barrier passes; nothing is
//! written in between, so the store only ever holds whole epochs of operator state.

use super::keys::{KEY_PREFIX_LEN, KeyGroup, MAX_PARALLELISM, encode_state_key, key_group_of};
use super::store::{StateStore, prefix_end};
use crate::error::Result;
use rocksdb::WriteBatch;
use std::sync::Arc;

/// Internal table ids have this bit set; user relations never do.
pub const INTERNAL_TABLE_BIT: u32 = 0x8000_0000;
/// The key group of state that belongs to no key.
pub const UNKEYED_GROUP: KeyGroup = 0xffff;

/// The id of the internal table of a job's `ordinal`-th stateful operator (sources
/// first, in fragment order). Relation ids stay far below 2^23.
pub fn internal_table_id(relation_id: u32, ordinal: u8) -> u32 {
    INTERNAL_TABLE_BIT | (relation_id << 8) | ordinal as u32
}

/// The range of table ids `[start, end)` of a job's internal tables.
pub fn internal_table_range(relation_id: u32) -> (u32, u32) {
    (
        internal_table_id(relation_id, 0),
        internal_table_id(relation_id + 1, 0),
    )
}

/// The state writes of one epoch of a task: at a barrier each stateful operator (and the
/// source's split positions) adds the state it changed, and the task writes them all in
/// one atomic write. Operators reach it only through [`OperatorState`]'s methods, which
/// place each write in the operator's own table and key group; they never see the
/// store's write batch.
#[derive(Default)]
pub struct StateWrites {
    batch: WriteBatch,
}

impl StateWrites {
    pub fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }

    /// How many writes (puts, deletes, range deletes) it holds.
    pub fn len(&self) -> usize {
        self.batch.len()
    }

    /// The writes, for the store.
    pub fn into_batch(self) -> WriteBatch {
        self.batch
    }
}

#[derive(Clone)]
pub struct OperatorState {
    table_id: u32,
    store: Arc<StateStore>,
    subtask: usize,
    parallelism: usize,
}

impl OperatorState {
    pub fn new(table_id: u32, store: Arc<StateStore>, subtask: usize, parallelism: usize) -> Self {
        Self {
            table_id,
            store,
            subtask,
            parallelism,
        }
    }

    pub fn store(&self) -> &Arc<StateStore> {
        &self.store
    }

    /// Puts (or with `None`, deletes) the state of a key.
    pub fn put_keyed(&self, writes: &mut StateWrites, key: &[u8], value: Option<&[u8]>) {
        self.put_in_group(writes, key_group_of(key), key, value);
    }

    /// Puts (or with `None`, deletes) state under `key` in key group `group`: for state
    /// whose key extends the routing key (a join's rows under their join key), so that
    /// it lives in the key group its rows are routed by.
    pub fn put_in_group(
        &self,
        writes: &mut StateWrites,
        group: KeyGroup,
        key: &[u8],
        value: Option<&[u8]>,
    ) {
        let mut state_key = Vec::new();
        encode_state_key(self.table_id, group, key, &mut state_key);
        match value {
            Some(v) => writes.batch.put(&state_key, v),
            None => writes.batch.delete(&state_key),
        }
    }

    /// Visits, in key order, the state under `prefix` in key group `group` (keys without
    /// the table and key-group prefix): the rows of one key kept as rows of their own.
    pub fn scan_prefix_in_group(
        &self,
        group: KeyGroup,
        prefix: &[u8],
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<()>,
    ) -> Result<()> {
        let mut state_prefix = Vec::new();
        encode_state_key(self.table_id, group, prefix, &mut state_prefix);
        self.store
            .scan_prefix(&state_prefix, |k, v| visit(&k[KEY_PREFIX_LEN..], v))
    }

    /// Visits, in key order while `visit` returns true, the state under `prefix` in key
    /// group `group` from the first key at or after `start` (which begins with `prefix`).
    pub fn scan_prefix_in_group_from(
        &self,
        group: KeyGroup,
        prefix: &[u8],
        start: &[u8],
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let mut state_prefix = Vec::new();
        encode_state_key(self.table_id, group, prefix, &mut state_prefix);
        let mut state_start = Vec::new();
        encode_state_key(self.table_id, group, start, &mut state_start);
        self.store
            .scan_prefix_from_while(&state_prefix, &state_start, |k, v| {
                visit(&k[KEY_PREFIX_LEN..], v)
            })
    }

    /// The state under `key` in key group `group`.
    pub fn get_in_group(&self, group: KeyGroup, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut state_key = Vec::new();
        encode_state_key(self.table_id, group, key, &mut state_key);
        self.store.get(&state_key)
    }

    /// Deletes all state under `prefix` in key group `group`, in the same write as the
    /// rest of the batch.
    pub fn delete_prefix_in_group(&self, writes: &mut StateWrites, group: KeyGroup, prefix: &[u8]) {
        let mut start = Vec::new();
        encode_state_key(self.table_id, group, prefix, &mut start);
        // The prefix starts with the table id and key group, so it is never all 0xff.
        if let Some(end) = prefix_end(&start) {
            writes.batch.delete_range(&start, &end);
        }
    }

    /// Puts state that belongs to no key.
    pub fn put_unkeyed(&self, writes: &mut StateWrites, key: &[u8], value: &[u8]) {
        let mut state_key = Vec::new();
        encode_state_key(self.table_id, UNKEYED_GROUP, key, &mut state_key);
        writes.batch.put(&state_key, value);
    }

    /// Visits the keyed state of every key group this subtask owns (keys without the
    /// table and key-group prefix).
    pub fn scan_owned(&self, mut visit: impl FnMut(&[u8], &[u8]) -> Result<()>) -> Result<()> {
        for group in self.owned_groups() {
            let mut prefix = Vec::new();
            encode_state_key(self.table_id, group, &[], &mut prefix);
            self.store
                .scan_prefix(&prefix, |k, v| visit(&k[KEY_PREFIX_LEN..], v))?;
        }
        Ok(())
    }

    /// The state of each key (`None` where there is none), read in one call.
    pub fn get_keyed_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let state_keys: Vec<Vec<u8>> = keys
            .iter()
            .map(|key| {
                let mut state_key = Vec::new();
                encode_state_key(self.table_id, key_group_of(key), key, &mut state_key);
                state_key
            })
            .collect();
        self.store.multi_get(&state_keys)
    }

    /// Whether any key group this subtask owns holds keyed state.
    pub fn has_owned_state(&self) -> Result<bool> {
        for group in self.owned_groups() {
            let mut prefix = Vec::new();
            encode_state_key(self.table_id, group, &[], &mut prefix);
            if self.store.any_with_prefix(&prefix)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The key groups this subtask owns.
    fn owned_groups(&self) -> impl Iterator<Item = KeyGroup> + '_ {
        (0..MAX_PARALLELISM).filter(|group| {
            *group as usize * self.parallelism / MAX_PARALLELISM as usize == self.subtask
        })
    }

    /// Visits all unkeyed state (every subtask's).
    pub fn scan_unkeyed(&self, mut visit: impl FnMut(&[u8], &[u8]) -> Result<()>) -> Result<()> {
        let mut prefix = Vec::new();
        encode_state_key(self.table_id, UNKEYED_GROUP, &[], &mut prefix);
        self.store
            .scan_prefix(&prefix, |k, v| visit(&k[KEY_PREFIX_LEN..], v))
    }
}
