//! The replayable change log of a table.
//!
//! Every write to a table that views or sinks read is also appended to the table's log,
//! in the same RocksDB write as the rows: one entry per write, numbered by a sequence
//! number that only grows. A job reading the table records, at every barrier, the number
//! of the last entry before that barrier; after a restart or failover it resumes from its
//! checkpoint and reads the entries after that number instead of the table's rows. The
//! log is cut below the position of the oldest checkpoint that is kept.
//!
//! Layout, under the log's own table id (`LOG_TABLE_BIT | table id`):
//! `log id | group 0 | seq (u64 BE)` → the entry's chunks; `log id | group 0xffff` → the
//! last sequence number written (so it survives a log cut down to nothing).
//! An entry is its chunks in order, each `row count (u32)` then per row `op (u8)`, the
//! row's stream key and its value (the table's whole-row encoding), length-prefixed.

use super::keys::{KEY_PREFIX_LEN, encode_state_key, put_len_prefixed, take_len_prefixed};
use super::store::StateStore;
use crate::dataflow::{Op, StreamChunk};
use crate::error::{EddyError, Result};
use arrow::datatypes::SchemaRef;
use arrow::row::RowConverter;
use rocksdb::WriteBatch;

/// Log table ids have this bit set; user relations and internal tables never do.
pub const LOG_TABLE_BIT: u32 = 0x4000_0000;
const ENTRY_GROUP: u16 = 0;
const SEQUENCE_GROUP: u16 = 0xffff;

/// The id under which a table's log is stored.
pub fn log_table_id(table_id: u32) -> u32 {
    LOG_TABLE_BIT | table_id
}

fn entry_key(table_id: u32, seq: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(KEY_PREFIX_LEN + 8);
    encode_state_key(
        log_table_id(table_id),
        ENTRY_GROUP,
        &seq.to_be_bytes(),
        &mut key,
    );
    key
}

fn sequence_key(table_id: u32) -> Vec<u8> {
    let mut key = Vec::with_capacity(KEY_PREFIX_LEN);
    encode_state_key(log_table_id(table_id), SEQUENCE_GROUP, &[], &mut key);
    key
}

/// The last sequence number written to a table's log (0 for none).
pub fn last_sequence(store: &StateStore, table_id: u32) -> Result<u64> {
    Ok(match store.get(&sequence_key(table_id))? {
        Some(v) if v.len() == 8 => u64::from_be_bytes(v.as_slice().try_into().expect("8 bytes")),
        _ => 0,
    })
}

fn op_code(op: Op) -> u8 {
    match op {
        Op::Insert => 0,
        Op::Delete => 1,
        Op::UpdateInsert => 2,
        Op::UpdateDelete => 3,
    }
}

fn op_of(code: u8) -> Result<Op> {
    Ok(match code {
        0 => Op::Insert,
        1 => Op::Delete,
        2 => Op::UpdateInsert,
        3 => Op::UpdateDelete,
        other => return Err(EddyError::internal(format!("bad table log op {other}"))),
    })
}

/// Adds entry `seq` (the given chunks, every row keyed) to `batch`.
pub fn append(
    batch: &mut WriteBatch,
    table_id: u32,
    seq: u64,
    chunks: &[&StreamChunk],
    codec: &RowConverter,
) -> Result<()> {
    let mut value = Vec::new();
    for chunk in chunks {
        let keys = chunk
            .keys
            .as_ref()
            .ok_or_else(|| EddyError::internal("a table's change without row keys"))?;
        let rows = codec.convert_columns(chunk.batch.columns())?;
        value.extend_from_slice(&(chunk.num_rows() as u32).to_be_bytes());
        for (row, key) in keys.iter().enumerate() {
            value.push(op_code(chunk.ops[row]));
            put_len_prefixed(&mut value, key);
            put_len_prefixed(&mut value, rows.row(row).as_ref());
        }
    }
    batch.put(entry_key(table_id, seq), value);
    batch.put(sequence_key(table_id), seq.to_be_bytes());
    Ok(())
}

/// The changes of every entry after `position`, in order. Fails if the log no longer
/// holds them all (it was cut above `position`): the reader cannot resume.
pub fn read_after(
    store: &StateStore,
    table_id: u32,
    position: u64,
    last: u64,
    schema: &SchemaRef,
    codec: &RowConverter,
) -> Result<Vec<StreamChunk>> {
    let mut entries: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut prefix = Vec::new();
    encode_state_key(log_table_id(table_id), ENTRY_GROUP, &[], &mut prefix);
    let start = entry_key(table_id, position.saturating_add(1));
    store.scan_prefix_from(&prefix, &start, |k, v| {
        let seq = u64::from_be_bytes(
            k[KEY_PREFIX_LEN..]
                .try_into()
                .map_err(|_| EddyError::internal("a table log key of the wrong length"))?,
        );
        entries.push((seq, v.to_vec()));
        Ok(())
    })?;
    let expected = last.saturating_sub(position) as usize;
    let contiguous = entries
        .iter()
        .enumerate()
        .all(|(i, (seq, _))| *seq == position + 1 + i as u64);
    if entries.len() != expected || !contiguous {
        return Err(EddyError::internal(format!(
            "the change log of table {table_id} no longer holds the changes after \
             position {position} (it holds {} of the {expected} entries up to {last})",
            entries.len()
        )));
    }
    let parser = codec.parser();
    let mut chunks = Vec::new();
    for (_, value) in &entries {
        let mut rest = value.as_slice();
        while !rest.is_empty() {
            let count = u32::from_be_bytes(take_fixed::<4>(&mut rest)?) as usize;
            let mut ops = Vec::with_capacity(count);
            let mut keys = Vec::with_capacity(count);
            let mut values = Vec::with_capacity(count);
            for _ in 0..count {
                let [op] = take_fixed::<1>(&mut rest)?;
                ops.push(op_of(op)?);
                let (key, after) = take_len_prefixed(rest).ok_or_else(truncated)?;
                let (row, after) = take_len_prefixed(after).ok_or_else(truncated)?;
                keys.push(key.to_vec());
                values.push(row);
                rest = after;
            }
            let columns = codec.convert_rows(values.iter().map(|v| parser.parse(v)))?;
            let batch = arrow::array::RecordBatch::try_new_with_options(
                schema.clone(),
                columns,
                &arrow::array::RecordBatchOptions::new().with_row_count(Some(count)),
            )?;
            chunks.push(StreamChunk {
                ops,
                batch,
                keys: Some(keys),
            });
        }
    }
    Ok(chunks)
}

fn truncated() -> EddyError {
    EddyError::internal("a truncated table log entry")
}

fn take_fixed<const N: usize>(rest: &mut &[u8]) -> Result<[u8; N]> {
    if rest.len() < N {
        return Err(truncated());
    }
    let (head, tail) = rest.split_at(N);
    *rest = tail;
    Ok(head.try_into().expect("length checked"))
}

/// Deletes the entries numbered up to `through` (the sequence number stays).
pub fn cut_through(store: &StateStore, table_id: u32, through: u64) -> Result<()> {
    store.delete_range(
        &entry_key(table_id, 0),
        &entry_key(table_id, through.saturating_add(1)),
    )
}

/// Deletes the whole log (the table is dropped).
pub fn delete(store: &StateStore, table_id: u32) -> Result<()> {
    store.delete_prefix(&super::keys::table_prefix(log_table_id(table_id)))
}

#[cfg(test)]
mod tests {
    use crate::dataflow::{Barrier, Message, Op};
    use crate::state::{OnConflict, StateStore, StateTable};
    use arrow::array::{Array, Decimal128Array, Int32Array, RecordBatch, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn table(store: &Arc<StateStore>, keyed: bool) -> StateTable {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int32, false),
            Field::new("amount", DataType::Decimal128(10, 2), true),
            Field::new("note", DataType::Utf8, true),
        ]));
        let pk = if keyed { vec![0] } else { vec![] };
        StateTable::new(1000, schema, pk, store.clone()).unwrap()
    }

    fn rows(t: &StateTable, keys: &[i32], amount: i128, note: Option<&str>) -> RecordBatch {
        RecordBatch::try_new(
            t.schema().clone(),
            vec![
                Arc::new(Int32Array::from(keys.to_vec())),
                Arc::new(
                    Decimal128Array::from(vec![Some(amount); keys.len()])
                        .with_precision_and_scale(10, 2)
                        .unwrap(),
                ),
                Arc::new(StringArray::from(vec![note; keys.len()])),
            ],
        )
        .unwrap()
    }

    /// What the logged changes after `position` say, as (op, k, amount, note) rows.
    fn replay(t: &StateTable, position: u64) -> Vec<(Op, i32, i128, Option<String>)> {
        let (chunks, _) = t
            .changes()
            .subscribe(|last| t.logged_changes_after(position, last.unwrap()))
            .unwrap();
        let mut out = Vec::new();
        for c in chunks {
            let k = c
                .batch
                .column(0)
                .as_any()
                .downcast_ref::<Int32Array>()
                .unwrap();
            let a = c
                .batch
                .column(1)
                .as_any()
                .downcast_ref::<Decimal128Array>()
                .unwrap();
            let n = c
                .batch
                .column(2)
                .as_any()
                .downcast_ref::<StringArray>()
                .unwrap();
            for row in 0..c.num_rows() {
                let note = (!n.is_null(row)).then(|| n.value(row).to_string());
                out.push((c.ops[row], k.value(row), a.value(row), note));
            }
        }
        out
    }

    /// The position a barrier passing through the table's change log carries.
    fn barrier_position(t: &StateTable, epoch: u64) -> u64 {
        let (_, mut receivers) = t.changes().subscribe(|_| Ok(())).unwrap();
        t.changes().barrier(0, Barrier::new(epoch));
        match receivers[0].try_recv().unwrap() {
            Message::Barrier(b) => b.log_position.expect("a logged table's barrier"),
            _ => panic!("expected the barrier"),
        }
    }

    #[test]
    fn every_write_is_logged_and_replayed_after_a_position() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(StateStore::open(dir.path(), 1 << 20).unwrap());
        let t = table(&store, true);
        t.upsert(&rows(&t, &[1, 2], 150, Some("a"))).unwrap(); // before logging: not logged
        t.enable_log().unwrap();
        let start = barrier_position(&t, 1);
        assert_eq!(start, 0);
        t.insert(&rows(&t, &[3], 725, None), OnConflict::Overwrite)
            .unwrap();
        t.upsert(&rows(&t, &[1], 1950, Some("b"))).unwrap();
        let scanned = t.scan().unwrap();
        let key_of_2 = scanned[0].keys[1].clone();
        t.delete_keys(&[key_of_2]).unwrap();
        let at_2 = barrier_position(&t, 2);
        assert_eq!(at_2, 3);
        t.truncate().unwrap();

        use Op::*;
        assert_eq!(
            replay(&t, start),
            vec![
                (Insert, 3, 725, None),
                (Delete, 1, 150, Some("a".into())),
                (Insert, 1, 1950, Some("b".into())),
                (Delete, 2, 150, Some("a".into())),
                (Delete, 1, 1950, Some("b".into())),
                (Delete, 3, 725, None),
            ]
        );
        assert_eq!(replay(&t, at_2).len(), 2);

        // The sequence survives reopening, and a cut log cannot be replayed from before
        // the cut, only from after it.
        drop(t);
        let t = table(&store, true);
        t.enable_log().unwrap();
        t.upsert(&rows(&t, &[9], 1, None)).unwrap();
        assert_eq!(barrier_position(&t, 3), 5);
        t.cut_log_before(2).unwrap(); // no barrier at or before epoch 2 since reopening
        assert_eq!(replay(&t, at_2).len(), 3);
        t.cut_log_before(3).unwrap();
        assert!(
            t.changes()
                .subscribe(|last| t.logged_changes_after(at_2, last.unwrap()))
                .is_err(),
            "the entries after position 3 are gone"
        );
        assert_eq!(replay(&t, 5), vec![]);
    }

    #[test]
    fn a_table_no_job_reads_any_more_stops_logging_and_forgets_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(StateStore::open(dir.path(), 1 << 20).unwrap());
        let t = table(&store, true);
        t.enable_log().unwrap();
        t.upsert(&rows(&t, &[1, 2], 100, None)).unwrap();
        assert_eq!(super::last_sequence(&store, 1000).unwrap(), 1);
        t.changes()
            .disable_log(|| super::delete(&store, 1000))
            .unwrap();
        assert!(!t.changes().is_logged());
        t.upsert(&rows(&t, &[3], 100, None)).unwrap();
        assert_eq!(super::last_sequence(&store, 1000).unwrap(), 0);
        let prefix = crate::state::keys::table_prefix(super::log_table_id(1000));
        assert!(!store.any_with_prefix(&prefix).unwrap(), "the log is gone");
        // A new reader starts a new log from its own snapshot.
        t.enable_log().unwrap();
        assert_eq!(barrier_position(&t, 9), 0);
    }

    #[test]
    fn rows_of_a_table_without_a_key_are_logged_with_their_row_ids() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(StateStore::open(dir.path(), 1 << 20).unwrap());
        let t = table(&store, false);
        t.enable_log().unwrap();
        t.upsert(&rows(&t, &[5, 5], 100, Some("x"))).unwrap();
        let scanned = t.scan().unwrap();
        t.replace(&scanned[0].keys[..1], &rows(&t, &[6], 200, None))
            .unwrap();
        let (chunks, _) = t
            .changes()
            .subscribe(|last| t.logged_changes_after(0, last.unwrap()))
            .unwrap();
        let ops: Vec<Op> = chunks.iter().flat_map(|c| c.ops.clone()).collect();
        // An update is a pair: the old row, then its new version.
        assert_eq!(
            ops,
            vec![Op::Insert, Op::Insert, Op::UpdateDelete, Op::UpdateInsert]
        );
        // The replaced row keeps its hidden id: its old and new versions share the key.
        let keys: Vec<Vec<u8>> = chunks
            .iter()
            .flat_map(|c| c.keys.clone().unwrap())
            .collect();
        assert_eq!(keys[2], keys[3]);
        assert_eq!(keys[0], keys[2]);
        assert_ne!(keys[0], keys[1]);
    }
}
