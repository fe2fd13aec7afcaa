//! [`Partitions`]: the rows a top-N or an over-window keeps, per partition, in sort order.
//!
//! A partition's rows are ordered by `(sort key, row id)`: the sort key is the row's
//! `ORDER BY` values in memcomparable form (so byte order is the query's order, with its
//! directions and NULL placement), the id breaks ties and tells identical rows apart —
//! the row's stream key, or a sequence number per partition for append-only inputs.
//!
//! The rows live in the operator's state table; memory is a cache over it that shares
//! the server's state cache budget (`--state-cache-mb`):
//! - A partition is read from the table when a row of it arrives ([`Partitions::load`]).
//!   After a barrier, when the caches together are over budget, whole partitions are
//!   evicted: all are clean then, the table holds them.
//! - With a row limit (a top-N shows only a partition's first rows), a partition keeps
//!   only its first rows in memory: at most the limit after each barrier. When deletes
//!   leave too few, the next rows are read back ([`Partitions::load_more`]), so a deleted
//!   winner is replaced by the next row whether or not memory held it. Without a limit
//!   (an over-window evaluates whole partitions) a partition is read whole.
//!
//! Changes since the last barrier are pending writes that carry their values: rows read
//! back from the table are overlaid with them, and the barrier writes them. State keys
//! are `len(partition) | partition | tag` in the key group of the partition key (the
//! group the hash exchange routes its rows by): tag 0 holds the partition's next
//! sequence number, tag 1 followed by `len(sort key) | sort key | id` one row.

use crate::error::{EddyError, Result};
use crate::state::StateWrites;
use crate::state::keys::{key_group_of, put_len_prefixed, take_len_prefixed};
use crate::state::{BudgetShare, OperatorState};
use crate::stream::StreamChunk;
use arrow::array::RecordBatch;
use arrow::row::{RowConverter, Rows};
use datafusion::common::{HashMap, HashSet};
use datafusion::physical_expr::PhysicalExpr;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

pub type Bytes = Box<[u8]>;

/// A row's place in its partition.
pub type Position = (Bytes, Bytes);

/// Estimated memory of a partition's entry besides its key.
const PARTITION_BYTES: usize = 64;
/// Estimated memory of a row besides its position and values.
const ROW_BYTES: usize = 64;
/// The fewest rows read back at once when a partition needs its next rows.
const MIN_READ_ROWS: usize = 16;

/// The rows of one partition in memory.
pub struct Partition {
    /// Encoded rows by `(sort key, id)`: the partition's first rows, or all of them when
    /// it is complete.
    pub rows: BTreeMap<Position, Bytes>,
    /// Whether `rows` holds every row; otherwise those after its last one are in the
    /// state table only.
    complete: bool,
    /// The next sequence number (append-only inputs).
    next_seq: u64,
}

impl Partition {
    fn empty() -> Self {
        Self {
            rows: BTreeMap::new(),
            complete: true,
            next_seq: 0,
        }
    }
}

/// A partition's changes since the last barrier.
#[derive(Default)]
struct Pending {
    /// Its sequence number changed.
    seq: bool,
    /// Rows written (`Some`) or deleted.
    rows: BTreeMap<Position, Option<Bytes>>,
}

/// Where evicted and unread rows are read back from, and the memory budget shared with
/// the other operators' caches.
struct Backing {
    table: OperatorState,
    budget: BudgetShare,
    /// The table may hold partitions that memory does not (restored or evicted ones).
    may_hold_more: bool,
}

pub struct Partitions {
    partitions: HashMap<Bytes, Partition>,
    pending: HashMap<Bytes, Pending>,
    /// How many of a partition's first rows memory keeps after a barrier (`None`: all).
    row_limit: Option<usize>,
    /// Set once the operator is connected to its state table.
    backing: Option<Backing>,
    /// Estimated bytes of the partitions in memory.
    resident_bytes: usize,
}

impl Default for Partitions {
    fn default() -> Self {
        Self::new(None)
    }
}

/// Each row's values of `exprs`, encoded by `codec` (memcomparable); without a codec (no
/// partition key, no `ORDER BY`) every row gets the same empty key.
pub fn encode_rows(
    codec: Option<&RowConverter>,
    exprs: &[Arc<dyn PhysicalExpr>],
    batch: &RecordBatch,
) -> Result<Vec<Bytes>> {
    let Some(codec) = codec else {
        return Ok(vec![Bytes::default(); batch.num_rows()]);
    };
    let columns = exprs
        .iter()
        .map(|e| crate::stream::expression_errors::evaluate(e, batch))
        .collect::<Result<Vec<_>>>()?;
    let rows = codec.convert_columns(&columns)?;
    Ok(rows.iter().map(|r| r.as_ref().into()).collect())
}

const SEQ_TAG: u8 = 0;
const ROW_TAG: u8 = 1;

fn row_bytes(position: &Position, row: &[u8]) -> usize {
    position.0.len() + position.1.len() + row.len() + ROW_BYTES
}

impl Partitions {
    /// Partitions keeping at most `row_limit` first rows each in memory after a barrier.
    pub fn new(row_limit: Option<usize>) -> Self {
        Self {
            partitions: HashMap::new(),
            pending: HashMap::new(),
            row_limit,
            backing: None,
            resident_bytes: 0,
        }
    }

    /// Every partition in memory with its rows.
    pub fn iter(&self) -> impl Iterator<Item = (&Bytes, &Partition)> {
        self.partitions.iter()
    }

    /// A partition in memory ([`Partitions::load`] reads it first).
    pub fn get(&self, partition: &[u8]) -> Option<&Partition> {
        self.partitions.get(partition)
    }

    /// Whether memory holds every row of the partition (or it is not in memory).
    pub fn is_complete(&self, partition: &[u8]) -> bool {
        self.partitions.get(partition).is_none_or(|p| p.complete)
    }

    /// Makes a partition resident: its sequence number and first rows (all of them
    /// without a row limit) are read from the state table when it may hold them.
    pub fn load(&mut self, partition: &[u8]) -> Result<()> {
        if self.partitions.contains_key(partition) {
            return Ok(());
        }
        let mut loaded = Partition::empty();
        let table = match &self.backing {
            Some(b) if b.may_hold_more => b.table.clone(),
            _ => {
                self.resident_bytes += partition.len() + PARTITION_BYTES;
                self.partitions.insert(partition.into(), loaded);
                return Ok(());
            }
        };
        let mut key = Vec::new();
        state_key(partition, None, &mut key);
        if let Some(seq) = table.get_in_group(key_group_of(partition), &key)? {
            let seq: [u8; 8] = seq
                .try_into()
                .map_err(|_| EddyError::internal("a top-N sequence is malformed"))?;
            loaded.next_seq = u64::from_le_bytes(seq);
        }
        loaded.complete = false;
        self.resident_bytes += partition.len() + PARTITION_BYTES;
        self.partitions.insert(partition.into(), loaded);
        self.load_more(partition)?;
        if let Some(b) = &self.backing {
            b.budget.budget().record_loads(1);
        }
        Ok(())
    }

    /// Reads the rows after those in memory from the state table (overlaid with the
    /// changes since the last barrier): the row limit's worth, or all without a limit.
    /// The partition is complete once none are left.
    pub fn load_more(&mut self, partition: &[u8]) -> Result<()> {
        let Some(p) = self.partitions.get(partition) else {
            return Ok(());
        };
        if p.complete {
            return Ok(());
        }
        let Some(table) = self.backing.as_ref().map(|b| b.table.clone()) else {
            // Nothing was ever written: memory holds every row.
            self.partitions
                .get_mut(partition)
                .expect("present")
                .complete = true;
            return Ok(());
        };
        let after: Option<Position> = p.rows.last_key_value().map(|(k, _)| k.clone());
        let want = self
            .row_limit
            .map_or(usize::MAX, |limit| limit.max(MIN_READ_ROWS));
        let pending = self.pending.get(partition);
        let mut prefix = Vec::new();
        put_len_prefixed(&mut prefix, partition);
        prefix.push(ROW_TAG);
        let mut start = prefix.clone();
        if let Some((sort_key, id)) = &after {
            put_len_prefixed(&mut start, sort_key);
            start.extend_from_slice(id);
        }
        let mut read: Vec<(Position, Bytes)> = Vec::new();
        let mut exhausted = true;
        let malformed = || EddyError::internal("a top-N state key is malformed");
        table.scan_prefix_in_group_from(key_group_of(partition), &prefix, &start, |k, v| {
            let (_, position) = split_state_key(k)?;
            let position = position.ok_or_else(malformed)?;
            if after.as_ref().is_some_and(|a| &position <= a) {
                return Ok(true);
            }
            let change = pending.and_then(|p| p.rows.get(&position));
            if let Some(None) = change {
                return Ok(true); // deleted since the last barrier
            }
            if read.len() == want {
                exhausted = false;
                return Ok(false);
            }
            let row = match change {
                Some(Some(row)) => row.clone(),
                _ => v.into(),
            };
            read.push((position, row));
            Ok(true)
        })?;
        // Rows written since the last barrier, up to the last row read when more remain.
        let upper = if exhausted {
            None
        } else {
            read.last().map(|(position, _)| position.clone())
        };
        let mut rows: BTreeMap<Position, Bytes> = read.into_iter().collect();
        if let Some(pending) = pending {
            let from = after.map_or(Bound::Unbounded, Bound::Excluded);
            for (position, change) in pending.rows.range((from, Bound::Unbounded)) {
                if upper.as_ref().is_some_and(|u| position > u) {
                    break;
                }
                if let Some(row) = change {
                    rows.insert(position.clone(), row.clone());
                }
            }
        }
        let p = self.partitions.get_mut(partition).expect("present");
        for (position, row) in rows {
            self.resident_bytes += row_bytes(&position, &row);
            p.rows.insert(position, row);
        }
        p.complete = exhausted;
        Ok(())
    }

    /// Reads every partition of the key groups this subtask owns (the end of a bounded
    /// input, where every partition is evaluated).
    pub fn load_all(&mut self) -> Result<()> {
        let Some(table) = self.backing.as_ref().map(|b| b.table.clone()) else {
            return Ok(());
        };
        let mut stored: HashSet<Bytes> = HashSet::new();
        table.scan_owned(|key, _| {
            let (partition, _) = split_state_key(key)?;
            if !self.partitions.contains_key(partition) {
                stored.insert(partition.into());
            }
            Ok(())
        })?;
        for partition in stored {
            self.load(&partition)?;
        }
        let limit = self.row_limit;
        let partitions: Vec<Bytes> = self.partitions.keys().cloned().collect();
        self.row_limit = None;
        let loaded = partitions.iter().try_for_each(|p| self.load_more(p));
        self.row_limit = limit;
        loaded
    }

    /// A fresh row id in `partition` (append-only inputs: ids are never reused).
    pub fn next_id(&mut self, partition: &[u8]) -> Bytes {
        let p = self.partition_mut(partition);
        let id = p.next_seq;
        p.next_seq += 1;
        self.pending_mut(partition).seq = true;
        Box::new(id.to_be_bytes())
    }

    /// Stores a row. Memory keeps it when it falls among the rows memory holds.
    pub fn insert(&mut self, partition: &[u8], position: Position, row: Bytes) {
        self.partition_mut(partition);
        let p = self.partitions.get_mut(partition).expect("just made");
        let in_memory = p.complete || p.rows.last_key_value().is_some_and(|(l, _)| &position < l);
        if in_memory {
            let added = row_bytes(&position, &row);
            if let Some(old) = p.rows.insert(position.clone(), row.clone()) {
                self.resident_bytes -= row_bytes(&position, &old);
            }
            self.resident_bytes += added;
        }
        self.pending_mut(partition).rows.insert(position, Some(row));
    }

    /// A partition, made empty first when it is new (its key is copied only then).
    fn partition_mut(&mut self, partition: &[u8]) -> &mut Partition {
        if !self.partitions.contains_key(partition) {
            self.resident_bytes += partition.len() + PARTITION_BYTES;
            self.partitions.insert(partition.into(), Partition::empty());
        }
        self.partitions
            .get_mut(partition)
            .expect("the partition was just added")
    }

    fn pending_mut(&mut self, partition: &[u8]) -> &mut Pending {
        if !self.pending.contains_key(partition) {
            self.pending.insert(partition.into(), Pending::default());
        }
        self.pending.get_mut(partition).expect("just added")
    }

    /// Removes a row (from memory if there, and from the state table at the barrier).
    pub fn remove(&mut self, partition: &[u8], position: &Position) {
        let Some(p) = self.partitions.get_mut(partition) else {
            return;
        };
        if let Some(old) = p.rows.remove(position) {
            self.resident_bytes -= row_bytes(position, &old);
        } else if p.complete {
            return;
        }
        self.pending_mut(partition)
            .rows
            .insert(position.clone(), None);
    }

    /// The position of a stored row with this sort key and these values (a delete on an
    /// input without keys: any identical row will do), reading further rows of the
    /// partition back until it is found.
    pub fn find(
        &mut self,
        partition: &[u8],
        sort_key: &[u8],
        row: &[u8],
    ) -> Result<Option<Position>> {
        loop {
            let Some(p) = self.partitions.get(partition) else {
                return Ok(None);
            };
            let from = (Bytes::from(sort_key), Bytes::default());
            let found = p
                .rows
                .range(from..)
                .take_while(|((s, _), _)| &**s == sort_key)
                .find(|(_, r)| &***r == row)
                .map(|(position, _)| position.clone());
            if found.is_some() || p.complete {
                return Ok(found);
            }
            self.load_more(partition)?;
        }
    }

    /// Keeps only the first `keep` rows of a partition (the rest can never be shown
    /// again: the input only inserts). Used without a row limit, where memory holds
    /// every row of a partition it holds.
    pub fn truncate(&mut self, partition: &[u8], keep: usize) {
        let Some(p) = self.partitions.get_mut(partition) else {
            return;
        };
        let mut dropped = Vec::new();
        while p.rows.len() > keep {
            let (position, row) = p.rows.pop_last().expect("more rows than kept");
            self.resident_bytes -= row_bytes(&position, &row);
            dropped.push(position);
        }
        if !dropped.is_empty() {
            let pending = self.pending_mut(partition);
            for position in dropped {
                pending.rows.insert(position, None);
            }
        }
    }

    /// Applies a chunk: each insert is stored under its stream key (a fresh sequence
    /// number when the input has none), each delete removes its row.
    pub fn apply(
        &mut self,
        chunk: &StreamChunk,
        partitions: &[Bytes],
        sort_keys: &[Bytes],
        rows: &Rows,
    ) -> Result<()> {
        for (i, partition) in partitions.iter().enumerate() {
            self.load(partition)?;
            let sort_key = sort_keys[i].clone();
            let row = rows.row(i);
            if chunk.ops[i].is_insert() {
                let id = match &chunk.keys {
                    Some(keys) => keys[i].as_slice().into(),
                    None => self.next_id(partition),
                };
                self.insert(partition, (sort_key, id), row.as_ref().into());
            } else {
                let position = match &chunk.keys {
                    Some(keys) => Some((sort_key, keys[i].as_slice().into())),
                    None => self.find(partition, &sort_key, row.as_ref())?,
                };
                if let Some(position) = position {
                    self.remove(partition, &position);
                }
            }
        }
        Ok(())
    }

    /// Writes the changes since the last barrier. Then every partition is clean: memory
    /// keeps only the row limit's first rows of each, forgets empty ones, and gives back
    /// its share when the caches together are over budget.
    pub fn checkpoint(&mut self, table: &OperatorState, batch: &mut StateWrites) {
        let mut key = Vec::new();
        for (partition, pending) in std::mem::take(&mut self.pending) {
            let group = key_group_of(&partition);
            let stored = self.partitions.get(&*partition);
            if pending.seq {
                state_key(&partition, None, &mut key);
                let seq = stored.map_or(0, |p| p.next_seq).to_le_bytes();
                table.put_in_group(batch, group, &key, Some(&seq));
            }
            for (position, row) in pending.rows {
                state_key(&partition, Some(&position), &mut key);
                table.put_in_group(batch, group, &key, row.as_deref());
            }
            if self.backing.is_some() {
                self.settle(&partition);
            }
        }
        self.evict();
    }

    /// A clean partition: trimmed to the row limit, forgotten when it holds nothing.
    fn settle(&mut self, partition: &[u8]) {
        let Some(p) = self.partitions.get_mut(partition) else {
            return;
        };
        if let Some(limit) = self.row_limit {
            while p.rows.len() > limit {
                let (position, row) = p.rows.pop_last().expect("more rows than the limit");
                self.resident_bytes -= row_bytes(&position, &row);
                p.complete = false;
            }
        }
        if p.rows.is_empty() && p.complete && p.next_seq == 0 {
            self.partitions.remove(partition);
            self.resident_bytes -= partition.len() + PARTITION_BYTES;
        }
    }

    /// Reports the memory held to the budget; over it, asks for an early barrier, after
    /// which every partition is clean and can be evicted.
    pub fn report(&mut self) {
        let Some(backing) = &mut self.backing else {
            return;
        };
        backing
            .budget
            .report(self.resident_bytes, !self.pending.is_empty());
    }

    /// After a barrier (every partition clean): when the caches together are over
    /// budget, evicts this operator's share of the excess.
    fn evict(&mut self) {
        let Some(backing) = &mut self.backing else {
            return;
        };
        let mut to_free = backing.budget.to_free(self.resident_bytes);
        if to_free == 0 {
            return;
        }
        let mut evicted = 0;
        let mut freed = 0;
        self.partitions.retain(|partition, p| {
            if to_free == 0 {
                return true;
            }
            let bytes = partition.len()
                + PARTITION_BYTES
                + p.rows.iter().map(|(k, r)| row_bytes(k, r)).sum::<usize>();
            to_free = to_free.saturating_sub(bytes);
            freed += bytes;
            evicted += 1;
            false
        });
        self.resident_bytes -= freed;
        backing.may_hold_more |= evicted > 0;
        backing.budget.evicted(evicted, self.resident_bytes);
    }

    /// Connects the partitions to the state table: they are read from it as their rows
    /// arrive (from the key groups this subtask owns, which its rows are routed to).
    pub fn restore(&mut self, table: &OperatorState) -> Result<()> {
        self.backing = Some(Backing {
            table: table.clone(),
            budget: BudgetShare::new(table.store().cache_budget().clone()),
            may_hold_more: table.has_owned_state()?,
        });
        Ok(())
    }
}

fn state_key(partition: &[u8], position: Option<&Position>, out: &mut Vec<u8>) {
    out.clear();
    put_len_prefixed(out, partition);
    match position {
        None => out.push(SEQ_TAG),
        Some((sort_key, id)) => {
            out.push(ROW_TAG);
            put_len_prefixed(out, sort_key);
            out.extend_from_slice(id);
        }
    }
}

/// Reads a length-prefixed part; returns it and the rest.
fn split_state_key(key: &[u8]) -> Result<(&[u8], Option<Position>)> {
    let malformed = || EddyError::internal("a top-N state key is malformed");
    let (partition, rest) = take_len_prefixed(key).ok_or_else(malformed)?;
    match rest.split_first() {
        Some((&SEQ_TAG, [])) => Ok((partition, None)),
        Some((&ROW_TAG, rest)) => {
            let (sort_key, id) = take_len_prefixed(rest).ok_or_else(malformed)?;
            Ok((partition, Some((sort_key.into(), id.into()))))
        }
        _ => Err(malformed()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_keys_split_back() {
        let mut key = Vec::new();
        let position: Position = (Box::new([3, 4]), Box::new([9]));
        state_key(b"p", Some(&position), &mut key);
        assert_eq!(split_state_key(&key).unwrap(), (&b"p"[..], Some(position)));
        state_key(b"", None, &mut key);
        assert_eq!(split_state_key(&key).unwrap(), (&b""[..], None));
        assert!(split_state_key(&[0, 0, 0, 9, 1]).is_err());
        assert!(split_state_key(&[0, 0, 0, 0, 7]).is_err());
    }

    #[test]
    fn truncation_drops_the_last_rows_and_ids_are_not_reused() {
        let mut parts = Partitions::default();
        let mut ids = vec![];
        for sort in [5u8, 1, 3] {
            let id = parts.next_id(b"p");
            ids.push(id.clone());
            parts.insert(b"p", (Box::new([sort]), id), Box::new([sort]));
        }
        parts.truncate(b"p", 2);
        let kept: Vec<u8> = parts
            .get(b"p")
            .unwrap()
            .rows
            .values()
            .map(|r| r[0])
            .collect();
        assert_eq!(kept, vec![1, 3]);
        assert!(!ids.contains(&parts.next_id(b"p")));
        assert_eq!(
            parts.find(b"p", &[3], &[3]).unwrap(),
            Some((Box::new([3u8]) as Bytes, ids[2].clone()))
        );
        assert_eq!(parts.find(b"p", &[3], &[4]).unwrap(), None);
    }
}
