//! The malformed messages of a table fed by a connector (a Kafka table): their count, and
//! with `error.policy = 'dead_letter'` the messages themselves with why they were skipped,
//! kept in the table's internal state next to its offsets and written in the same write,
//! so a restore keeps exactly the letters of the messages before its offsets.
//! `eddy_catalog.connector_tables` and `eddy_catalog.dead_letters` read them.

use crate::error::Result;
use crate::state::StateWrites;
use crate::state::operator_state::{UNKEYED_GROUP, internal_table_id};
use crate::state::{OperatorState, StateStore};

/// The count of malformed messages (offsets, beside it, have 4-byte keys).
const MALFORMED_KEY: &[u8] = b"malformed";
/// The prefix of a dead letter's key: then partition, offset and index in the batch.
const LETTER_PREFIX: &[u8] = b"letter:";

/// A dead letter: where the message was, the message as read, why it was skipped.
pub struct TableLetter {
    pub partition: i32,
    pub offset: i64,
    pub record: String,
    pub error: String,
}

fn state_key(relation_id: u32, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    crate::state::keys::encode_state_key(
        internal_table_id(relation_id, 0),
        UNKEYED_GROUP,
        key,
        &mut out,
    );
    out
}

/// How many malformed messages the table with relation id `relation_id` skipped.
pub fn malformed_count(store: &StateStore, relation_id: u32) -> Result<u64> {
    Ok(store
        .get(&state_key(relation_id, MALFORMED_KEY))?
        .and_then(|v| v.try_into().ok())
        .map_or(0, u64::from_le_bytes))
}

pub fn put_malformed_count(state: &OperatorState, batch: &mut StateWrites, total: u64) {
    state.put_unkeyed(batch, MALFORMED_KEY, &total.to_le_bytes());
}

/// Stages a letter, the `index`-th of its batch.
pub fn put_letter(
    state: &OperatorState,
    batch: &mut StateWrites,
    index: usize,
    letter: &TableLetter,
) {
    let mut key = LETTER_PREFIX.to_vec();
    key.extend_from_slice(&letter.partition.to_be_bytes());
    key.extend_from_slice(&letter.offset.to_be_bytes());
    key.extend_from_slice(&(index as u32).to_be_bytes());
    let value = serde_json::json!({ "record": letter.record, "error": letter.error });
    state.put_unkeyed(batch, &key, value.to_string().as_bytes());
}

/// The dead letters of the table with relation id `relation_id`, in the order they were
/// read per partition.
pub fn dead_letters(store: &StateStore, relation_id: u32) -> Result<Vec<TableLetter>> {
    let prefix = state_key(relation_id, LETTER_PREFIX);
    let mut letters = Vec::new();
    store.scan_prefix(&prefix, |k, v| {
        let key = &k[prefix.len()..];
        if key.len() != 16 {
            return Ok(());
        }
        let letter: serde_json::Value = serde_json::from_slice(v).unwrap_or_default();
        let text = |field: &str| letter[field].as_str().unwrap_or("").to_string();
        letters.push(TableLetter {
            partition: i32::from_be_bytes(key[..4].try_into().expect("4 bytes")),
            offset: i64::from_be_bytes(key[4..12].try_into().expect("8 bytes")),
            record: text("record"),
            error: text("error"),
        });
        Ok(())
    })?;
    Ok(letters)
}
