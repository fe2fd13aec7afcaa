//! [`SideState`]: the rows one side of a join holds, by join key.
//!
//! Each row is stored under its join key and a row id: the row's stream key when the
//! side's input carries keys (so a later delete finds it), or, when it is append-only,
//! a random prefix per operator instance and a sequence number (identical rows stay
//! distinct, and no id is ever given twice: the join's output rows are keyed by them). Rows of a side that keeps
//! unmatched rows (the left side of a `LEFT JOIN`) also count their matches on the other
//! side, their *degree*: a row whose degree falls to zero is emitted NULL-padded again.
//!
//! The rows live in the side's state table; a barrier writes the entries changed since
//! the last one. State keys are `len(join key) | join key | row id` in the key group of
//! the join key — the group the hash exchange routes the rows by, so a job restarted at
//! another parallelism finds each key's rows in the subtask they now reach.
//!
//! Memory holds the keys in use. On a side whose rows never expire (a plain equi-join),
//! memory is a cache over the state table: the rows of the keys of each chunk are read
//! back from RocksDB (one prefix scan per key not in memory) before the chunk is joined,
//! and after a barrier, when the server's state caches together pass `--state-cache-mb`,
//! keys are evicted — all are clean then, RocksDB holds them. A side whose rows expire
//! (interval and window joins) keeps all of its rows in memory, where its expiry index
//! finds them; its state stays bounded by the expiry.

use crate::error::{EddyError, Result};
use crate::state::StateWrites;
use crate::state::keys::key_group_of;
use crate::state::{BudgetShare, OperatorState};
use datafusion::common::HashMap;
use std::collections::BTreeMap;

/// Estimated memory of a stored row besides its id and values.
const ENTRY_BYTES: usize = 64;
/// Estimated memory of a join key's map entry besides the key.
const KEY_BYTES: usize = 64;

/// A stored row: its encoded values (arrow row format) and, on a side that keeps
/// unmatched rows, how many rows of the other side it matches.
pub struct Entry {
    pub row: Box<[u8]>,
    pub degree: u64,
}

/// The rows of one join key.
#[derive(Default)]
pub struct KeyRows {
    pub rows: BTreeMap<Box<[u8]>, Entry>,
}

/// An encoded key or id.
pub type Bytes = Box<[u8]>;

pub struct SideState {
    keys: HashMap<Box<[u8]>, KeyRows>,
    /// Ids of the entries changed since the last barrier, by join key (an id may be
    /// listed more than once). Grouped by key so that a key is copied, hashed and looked
    /// up once per barrier, not once per changed row.
    dirty: HashMap<Bytes, Vec<Bytes>>,
    /// Ids of append-only rows: this prefix, then the next sequence number.
    id_salt: u64,
    next_seq: u64,
    /// Set on a side whose keys may be evicted: where they are read back from.
    cache: Option<SideCache>,
    /// Estimated bytes of the keys and rows in memory.
    resident_bytes: usize,
}

/// What a side that evicts keys needs to read them back and to share the memory budget.
struct SideCache {
    table: OperatorState,
    budget: BudgetShare,
    /// RocksDB may hold keys that memory does not (restored or evicted ones).
    may_hold_more: bool,
}

impl Default for SideState {
    fn default() -> Self {
        Self {
            keys: HashMap::new(),
            dirty: HashMap::new(),
            id_salt: crate::stream::operators::random_salt(),
            next_seq: 0,
            cache: None,
            resident_bytes: 0,
        }
    }
}

fn entry_bytes(id: &[u8], entry: &Entry) -> usize {
    id.len() + entry.row.len() + ENTRY_BYTES
}

impl SideState {
    pub fn rows_of(&self, join_key: &[u8]) -> Option<&KeyRows> {
        self.keys.get(join_key)
    }

    pub fn rows_of_mut(&mut self, join_key: &[u8]) -> Option<&mut KeyRows> {
        self.keys.get_mut(join_key)
    }

    /// How many rows the side holds.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.keys.values().map(|k| k.rows.len()).sum()
    }

    /// A fresh row id for an append-only row of `join_key`.
    pub fn next_id(&mut self, join_key: &[u8]) -> Box<[u8]> {
        if !self.keys.contains_key(join_key) {
            self.keys.insert(join_key.into(), KeyRows::default());
            self.resident_bytes += join_key.len() + KEY_BYTES;
        }
        self.next_seq += 1;
        let mut id = Vec::with_capacity(16);
        id.extend_from_slice(&self.id_salt.to_be_bytes());
        id.extend_from_slice(&self.next_seq.to_be_bytes());
        id.into()
    }

    /// Stores a row (replacing one stored under the same id).
    pub fn insert(&mut self, join_key: &[u8], id: Box<[u8]>, entry: Entry) {
        let added = entry_bytes(&id, &entry);
        let replaced = self.rows_for(join_key).rows.insert(id.clone(), entry);
        self.resident_bytes += added;
        if let Some(old) = replaced {
            self.resident_bytes -= entry_bytes(&id, &old);
        }
        self.mark_dirty(join_key, id);
    }

    /// The rows of a join key, made empty first when the key is new (the key is copied
    /// only then).
    fn rows_for(&mut self, join_key: &[u8]) -> &mut KeyRows {
        if !self.keys.contains_key(join_key) {
            self.resident_bytes += join_key.len() + KEY_BYTES;
            self.keys.insert(join_key.into(), KeyRows::default());
        }
        self.keys.get_mut(join_key).expect("the key was just added")
    }

    fn mark_dirty(&mut self, join_key: &[u8], id: Bytes) {
        match self.dirty.get_mut(join_key) {
            Some(ids) => ids.push(id),
            None => {
                self.dirty.insert(join_key.into(), vec![id]);
            }
        }
    }

    /// Removes a row; returns it if it was there.
    pub fn remove(&mut self, join_key: &[u8], id: &[u8]) -> Option<Entry> {
        let rows = self.keys.get_mut(join_key)?;
        let entry = rows.rows.remove(id)?;
        let now_empty = rows.rows.is_empty();
        self.resident_bytes -= entry_bytes(id, &entry);
        self.mark_dirty(join_key, id.into());
        // A key without rows is forgotten (ids are unique across keys), so the memory of
        // an interval or window join stays bounded as its keys expire. A side that reads
        // keys back keeps it until the barrier has deleted its rows from RocksDB, so that
        // a read before then cannot bring them back.
        if now_empty && self.cache.is_none() {
            self.keys.remove(join_key);
            self.resident_bytes -= join_key.len() + KEY_BYTES;
        }
        Some(entry)
    }

    /// The id of a stored row with these values (an append-only side told to delete a
    /// row: any identical one will do).
    pub fn find_row(&self, join_key: &[u8], row: &[u8]) -> Option<Box<[u8]>> {
        let rows = self.keys.get(join_key)?;
        rows.rows
            .iter()
            .rev()
            .find(|(_, e)| &*e.row == row)
            .map(|(id, _)| id.clone())
    }

    /// Marks an entry whose degree changed.
    pub fn touch(&mut self, join_key: &[u8], id: &[u8]) {
        self.mark_dirty(join_key, id.into());
    }

    /// Every stored row: its join key, id and encoded values.
    pub fn entries(&self) -> Vec<(Bytes, Bytes, Bytes)> {
        self.keys
            .iter()
            .flat_map(|(join_key, rows)| {
                rows.rows
                    .iter()
                    .map(|(id, e)| (join_key.clone(), id.clone(), e.row.clone()))
            })
            .collect()
    }

    /// Writes the entries changed since the last barrier.
    pub fn checkpoint(&mut self, table: &OperatorState, batch: &mut StateWrites) {
        let mut key = Vec::new();
        let mut value = Vec::new();
        for (join_key, mut ids) in self.dirty.drain() {
            ids.sort_unstable();
            ids.dedup();
            let group = key_group_of(&join_key);
            let rows = self.keys.get(&join_key);
            for id in ids {
                state_key(&join_key, &id, &mut key);
                match rows.and_then(|r| r.rows.get(&id)) {
                    Some(entry) => {
                        value.clear();
                        value.extend_from_slice(&entry.degree.to_le_bytes());
                        value.extend_from_slice(&entry.row);
                        table.put_in_group(batch, group, &key, Some(&value));
                    }
                    None => table.put_in_group(batch, group, &key, None),
                }
            }
        }
        // Every key is clean now: keys left without rows can go, and others may be
        // evicted.
        if self.cache.is_some() {
            let mut freed = 0;
            self.keys.retain(|join_key, rows| {
                let keep = !rows.rows.is_empty();
                if !keep {
                    freed += join_key.len() + KEY_BYTES;
                }
                keep
            });
            self.resident_bytes -= freed;
            self.evict();
        }
    }

    /// Connects the side to its state table. A side that keeps all its rows in memory
    /// (`evictable` false) loads the rows of the key groups this subtask owns; one that
    /// evicts reads each key's rows when the key comes. (New ids get a new random
    /// prefix, so they never equal restored ones.)
    pub fn restore(&mut self, table: &OperatorState, evictable: bool) -> Result<()> {
        if evictable {
            self.cache = Some(SideCache {
                table: table.clone(),
                budget: BudgetShare::new(table.store().cache_budget().clone()),
                may_hold_more: table.has_owned_state()?,
            });
            return Ok(());
        }
        table.scan_owned(|key, value| {
            let (join_key, id) = split_state_key(key)?;
            let entry = decode_entry(value)?;
            self.insert_loaded(join_key, id, entry);
            Ok(())
        })
    }

    /// Makes the rows of these join keys resident, reading those not in memory from
    /// RocksDB (when it may hold keys that memory does not).
    pub fn load(&mut self, join_keys: &[Bytes]) -> Result<()> {
        let Some(cache) = &self.cache else {
            return Ok(());
        };
        if !cache.may_hold_more {
            return Ok(());
        }
        let table = cache.table.clone();
        let mut loaded = 0;
        let mut prefix = Vec::new();
        for join_key in join_keys {
            if self.keys.contains_key(join_key) {
                continue;
            }
            state_key(join_key, &[], &mut prefix);
            let mut rows: Vec<(Bytes, Entry)> = Vec::new();
            table.scan_prefix_in_group(key_group_of(join_key), &prefix, |key, value| {
                let (_, id) = split_state_key(key)?;
                rows.push((id.into(), decode_entry(value)?));
                Ok(())
            })?;
            // An empty key is remembered too, until the next eviction: the chunk's other
            // rows of it need not look again.
            self.keys.entry(join_key.clone()).or_default();
            self.resident_bytes += join_key.len() + KEY_BYTES;
            loaded += usize::from(!rows.is_empty());
            for (id, entry) in rows {
                self.insert_loaded(join_key, &id, entry);
            }
        }
        if let Some(cache) = &self.cache {
            cache.budget.budget().record_loads(loaded);
        }
        self.report();
        Ok(())
    }

    /// Adds a row read from the state table (unchanged: not dirty).
    fn insert_loaded(&mut self, join_key: &[u8], id: &[u8], entry: Entry) {
        self.resident_bytes += entry_bytes(id, &entry);
        self.rows_for(join_key).rows.insert(id.into(), entry);
    }

    /// Reports the side's memory to the budget; over it, asks for an early barrier, after
    /// which the side's keys are clean and can be evicted.
    pub fn report(&mut self) {
        let Some(cache) = &mut self.cache else {
            return;
        };
        cache
            .budget
            .report(self.resident_bytes, !self.dirty.is_empty());
    }

    /// After a barrier (every key clean): when the caches together are over budget,
    /// evicts this side's share of the excess.
    fn evict(&mut self) {
        let Some(cache) = &mut self.cache else {
            return;
        };
        let mut to_free = cache.budget.to_free(self.resident_bytes);
        if to_free == 0 {
            return;
        }
        let mut evicted = 0;
        let mut freed = 0;
        self.keys.retain(|join_key, rows| {
            if to_free == 0 {
                return true;
            }
            let bytes = join_key.len()
                + KEY_BYTES
                + rows
                    .rows
                    .iter()
                    .map(|(id, e)| entry_bytes(id, e))
                    .sum::<usize>();
            to_free = to_free.saturating_sub(bytes);
            freed += bytes;
            evicted += 1;
            false
        });
        self.resident_bytes -= freed;
        cache.may_hold_more |= evicted > 0;
        cache.budget.evicted(evicted, self.resident_bytes);
    }
}

fn decode_entry(value: &[u8]) -> Result<Entry> {
    if value.len() < 8 {
        return Err(EddyError::internal("a join state row is truncated"));
    }
    let degree = u64::from_le_bytes(value[..8].try_into().expect("length checked"));
    Ok(Entry {
        row: value[8..].into(),
        degree,
    })
}

fn state_key(join_key: &[u8], id: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&(join_key.len() as u32).to_be_bytes());
    out.extend_from_slice(join_key);
    out.extend_from_slice(id);
}

fn split_state_key(key: &[u8]) -> Result<(&[u8], &[u8])> {
    let malformed = || EddyError::internal("a join state key is malformed");
    let len = u32::from_be_bytes(key.get(..4).ok_or_else(malformed)?.try_into().expect("4"));
    let end = 4 + len as usize;
    if key.len() < end {
        return Err(malformed());
    }
    Ok((&key[4..end], &key[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_keys_split_back() {
        let mut key = Vec::new();
        state_key(b"join", b"id", &mut key);
        assert_eq!(split_state_key(&key).unwrap(), (&b"join"[..], &b"id"[..]));
        state_key(b"", b"", &mut key);
        assert_eq!(split_state_key(&key).unwrap(), (&b""[..], &b""[..]));
        assert!(split_state_key(&[0, 0, 0, 9, 1]).is_err());
    }

    #[test]
    fn append_only_ids_are_never_reused_and_empty_keys_are_forgotten() {
        let mut side = SideState::default();
        let entry = || Entry {
            row: Box::new([1]),
            degree: 0,
        };
        let a = side.next_id(b"k");
        side.insert(b"k", a.clone(), entry());
        let b = side.next_id(b"k");
        side.insert(b"k", b.clone(), entry());
        assert!(side.remove(b"k", &a).is_some());
        assert!(side.remove(b"k", &b).is_some());
        // The key's last row gone, nothing of it stays in memory, and new ids still
        // differ from every id given before (output rows are keyed by them).
        assert_eq!(side.len(), 0);
        assert!(side.rows_of(b"k").is_none());
        let c = side.next_id(b"k");
        assert!(c != a && c != b);
        assert_ne!(SideState::default().next_id(b"k"), a);
    }
}
