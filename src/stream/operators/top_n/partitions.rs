//! [`Partitions`]: the rows a top-N keeps, per partition, in sort order.
//!
//! A partition's rows are ordered by `(sort key, row id)`: the sort key is the row's
//! `ORDER BY` values in memcomparable form (so byte order is the query's order, with its
//! directions and NULL placement), the id breaks ties and tells identical rows apart —
//! the row's stream key, or a sequence number per partition for append-only inputs.
//!
//! The rows live in memory and in the operator's state table; a barrier writes the
//! entries changed since the last one. State keys are `len(partition) | partition | tag`
//! in the key group of the partition key (the group the hash exchange routes its rows
//! by): tag 0 holds the partition's next sequence number, tag 1 followed by
//! `len(sort key) | sort key | id` one row.

use crate::error::{EddyError, Result};
use crate::state::OperatorState;
use crate::state::keys::{key_group_of, put_len_prefixed, take_len_prefixed};
use crate::stream::StreamChunk;
use arrow::array::RecordBatch;
use arrow::row::{RowConverter, Rows};
use datafusion::common::HashMap;
use datafusion::physical_expr::PhysicalExpr;
use rocksdb::WriteBatch;
use std::collections::BTreeMap;
use std::sync::Arc;

pub type Bytes = Box<[u8]>;

/// A row's place in its partition.
pub type Position = (Bytes, Bytes);

/// The rows of one partition.
#[derive(Default)]
pub struct Partition {
    /// Encoded rows by `(sort key, id)`.
    pub rows: BTreeMap<Position, Bytes>,
    /// The next sequence number (append-only inputs).
    next_seq: u64,
}

#[derive(Default)]
pub struct Partitions {
    partitions: HashMap<Bytes, Partition>,
    /// Entries changed since the last barrier, by partition (an entry may be listed more
    /// than once): `Some(position)` for a row, `None` for the sequence number. Grouped
    /// by partition so that a partition key is copied and hashed once per barrier.
    dirty: HashMap<Bytes, Vec<Option<Position>>>,
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

impl Partitions {
    /// Every partition with its rows.
    pub fn iter(&self) -> impl Iterator<Item = (&Bytes, &Partition)> {
        self.partitions.iter()
    }

    pub fn get(&self, partition: &[u8]) -> Option<&Partition> {
        self.partitions.get(partition)
    }

    /// A fresh row id in `partition` (append-only inputs: ids are never reused).
    pub fn next_id(&mut self, partition: &[u8]) -> Bytes {
        let p = self.partition_mut(partition);
        let id = p.next_seq;
        p.next_seq += 1;
        self.mark_dirty(partition, None);
        Box::new(id.to_be_bytes())
    }

    pub fn insert(&mut self, partition: &[u8], position: Position, row: Bytes) {
        self.partition_mut(partition)
            .rows
            .insert(position.clone(), row);
        self.mark_dirty(partition, Some(position));
    }

    /// A partition, made empty first when it is new (its key is copied only then).
    fn partition_mut(&mut self, partition: &[u8]) -> &mut Partition {
        if !self.partitions.contains_key(partition) {
            self.partitions
                .insert(partition.into(), Partition::default());
        }
        self.partitions
            .get_mut(partition)
            .expect("the partition was just added")
    }

    fn mark_dirty(&mut self, partition: &[u8], entry: Option<Position>) {
        match self.dirty.get_mut(partition) {
            Some(entries) => entries.push(entry),
            None => {
                self.dirty.insert(partition.into(), vec![entry]);
            }
        }
    }

    /// Removes a row; whether it was there.
    pub fn remove(&mut self, partition: &[u8], position: &Position) -> bool {
        let Some(p) = self.partitions.get_mut(partition) else {
            return false;
        };
        if p.rows.remove(position).is_none() {
            return false;
        }
        let forget = p.rows.is_empty() && p.next_seq == 0;
        self.mark_dirty(partition, Some(position.clone()));
        // A keyed partition without rows is forgotten; an append-only one keeps its
        // sequence.
        if forget {
            self.partitions.remove(partition);
        }
        true
    }

    /// The position of a stored row with this sort key and these values (a delete on an
    /// input without keys: any identical row will do).
    pub fn find(&self, partition: &[u8], sort_key: &[u8], row: &[u8]) -> Option<Position> {
        let p = self.partitions.get(partition)?;
        let from = (Bytes::from(sort_key), Bytes::default());
        p.rows
            .range(from..)
            .take_while(|((s, _), _)| &**s == sort_key)
            .find(|(_, r)| &***r == row)
            .map(|(position, _)| position.clone())
    }

    /// Keeps only the first `keep` rows of a partition (the rest can never be shown
    /// again: the input only inserts).
    pub fn truncate(&mut self, partition: &[u8], keep: usize) {
        let Some(p) = self.partitions.get_mut(partition) else {
            return;
        };
        let mut dropped = Vec::new();
        while p.rows.len() > keep {
            let (position, _) = p.rows.pop_last().expect("more rows than kept");
            dropped.push(Some(position));
        }
        if !dropped.is_empty() {
            match self.dirty.get_mut(partition) {
                Some(entries) => entries.append(&mut dropped),
                None => {
                    self.dirty.insert(partition.into(), dropped);
                }
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
    ) {
        for (i, partition) in partitions.iter().enumerate() {
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
                    None => self.find(partition, &sort_key, row.as_ref()),
                };
                if let Some(position) = position {
                    self.remove(partition, &position);
                }
            }
        }
    }

    /// Writes the entries changed since the last barrier.
    pub fn checkpoint(&mut self, table: &OperatorState, batch: &mut WriteBatch) {
        let mut key = Vec::new();
        for (partition, mut entries) in self.dirty.drain() {
            entries.sort_unstable();
            entries.dedup();
            let group = key_group_of(&partition);
            let stored = self.partitions.get(&*partition);
            for entry in entries {
                match entry {
                    None => {
                        state_key(&partition, None, &mut key);
                        let seq = stored.map_or(0, |p| p.next_seq).to_le_bytes();
                        table.put_in_group(batch, group, &key, Some(&seq));
                    }
                    Some(position) => {
                        state_key(&partition, Some(&position), &mut key);
                        let row = stored.and_then(|p| p.rows.get(&position));
                        table.put_in_group(batch, group, &key, row.map(|r| &**r));
                    }
                }
            }
        }
    }

    /// Loads the partitions of the key groups this subtask owns.
    pub fn restore(&mut self, table: &OperatorState) -> Result<()> {
        table.scan_owned(|key, value| {
            let (partition, position) = split_state_key(key)?;
            let p = self.partitions.entry(partition.into()).or_default();
            match position {
                None => {
                    let seq: [u8; 8] = value
                        .try_into()
                        .map_err(|_| EddyError::internal("a top-N sequence is malformed"))?;
                    p.next_seq = u64::from_le_bytes(seq);
                }
                Some(position) => {
                    p.rows.insert(position, value.into());
                }
            }
            Ok(())
        })
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
            parts.find(b"p", &[3], &[3]),
            Some((Box::new([3u8]) as Bytes, ids[2].clone()))
        );
        assert_eq!(parts.find(b"p", &[3], &[4]), None);
    }
}
