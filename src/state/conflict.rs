//! `ON CONFLICT` of a table with a primary key (RisingWave's clause of `CREATE TABLE`):
//! what an `INSERT` of a row whose key is already stored (or appears twice in one
//! statement) does.
//!
//! - `OVERWRITE` / `DO UPDATE FULL` (the default): the new row replaces the old one.
//! - `DO NOTHING`: the first row of a key is kept; later ones are dropped.
//! - `DO UPDATE IF NOT NULL`: the new row's non-NULL columns replace the old row's; its
//!   NULL columns keep the old values.

use super::StateTable;
use crate::error::{EddyError, Result};
use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnConflict {
    #[default]
    Overwrite,
    DoNothing,
    UpdateIfNotNull,
}

impl OnConflict {
    /// The policy named by the words after `ON CONFLICT` (lowercase).
    pub fn from_words(words: &[String]) -> Result<Self> {
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        Ok(match words.as_slice() {
            ["overwrite"] | ["do", "update", "full"] => OnConflict::Overwrite,
            // `IGNORE`: RisingWave's older name for it.
            ["do", "nothing"] | ["ignore"] => OnConflict::DoNothing,
            ["do", "update", "if", "not", "null"] => OnConflict::UpdateIfNotNull,
            other => {
                return Err(EddyError::syntax(format!(
                    "expected ON CONFLICT DO NOTHING, OVERWRITE, DO UPDATE FULL or DO UPDATE IF NOT NULL, found ON CONFLICT {}",
                    other.join(" ")
                )));
            }
        })
    }

    /// The value kept in the table's catalog options.
    pub fn option_value(self) -> &'static str {
        match self {
            OnConflict::Overwrite => "overwrite",
            OnConflict::DoNothing => "do_nothing",
            OnConflict::UpdateIfNotNull => "do_update_if_not_null",
        }
    }

    pub fn from_option_value(value: Option<&str>) -> Self {
        match value {
            Some("do_nothing") => OnConflict::DoNothing,
            Some("do_update_if_not_null") => OnConflict::UpdateIfNotNull,
            _ => OnConflict::Overwrite,
        }
    }

    /// The rows to write for `batch`, given its rows' primary keys and the rows stored
    /// under them (encoded, `None` where the key is new). With `Overwrite` that is
    /// `batch` itself.
    pub(super) fn resolve(
        self,
        table: &StateTable,
        batch: &RecordBatch,
        keys: &[Vec<u8>],
        stored: &[Option<Vec<u8>>],
    ) -> Result<RecordBatch> {
        match self {
            OnConflict::Overwrite => Ok(batch.clone()),
            OnConflict::DoNothing => {
                let mut taken: std::collections::HashSet<&[u8]> = keys
                    .iter()
                    .zip(stored)
                    .filter(|(_, s)| s.is_some())
                    .map(|(k, _)| k.as_slice())
                    .collect();
                let kept: Vec<u32> = keys
                    .iter()
                    .enumerate()
                    .filter(|(_, k)| taken.insert(k.as_slice()))
                    .map(|(i, _)| i as u32)
                    .collect();
                Ok(arrow::compute::take_record_batch(
                    batch,
                    &UInt32Array::from(kept),
                )?)
            }
            OnConflict::UpdateIfNotNull => merge_not_null(table, batch, keys, stored),
        }
    }
}

/// One row per key: each column the last non-NULL value among the stored row and the
/// key's rows of `batch` in order (NULL if all are).
fn merge_not_null(
    table: &StateTable,
    batch: &RecordBatch,
    keys: &[Vec<u8>],
    stored: &[Option<Vec<u8>>],
) -> Result<RecordBatch> {
    let present: Vec<Vec<u8>> = stored.iter().flatten().cloned().collect();
    let old = table.decode(&present)?;
    // Per key, in order of first appearance: its stored row (in `old`) and its rows.
    let mut order: HashMap<&[u8], usize> = HashMap::new();
    let mut groups: Vec<(Option<usize>, Vec<usize>)> = Vec::new();
    let mut next_old = 0;
    for (row, (key, s)) in keys.iter().zip(stored).enumerate() {
        let old_row = s.as_ref().map(|_| {
            next_old += 1;
            next_old - 1
        });
        match order.get(key.as_slice()) {
            Some(&g) => groups[g].1.push(row),
            None => {
                order.insert(key, groups.len());
                groups.push((old_row, vec![row]));
            }
        }
    }
    let columns = (0..batch.num_columns())
        .map(|c| {
            let (old_col, new_col) = (old.column(c), batch.column(c));
            let picks: Vec<(usize, usize)> = groups
                .iter()
                .map(|(old_row, rows)| {
                    let newest = rows.iter().rev().find(|r| new_col.is_valid(**r));
                    match (newest, old_row) {
                        (Some(r), _) => (1, *r),
                        (None, Some(o)) => (0, *o),
                        (None, None) => (1, *rows.last().expect("a key has a row")),
                    }
                })
                .collect();
            Ok(arrow::compute::interleave(
                &[old_col.as_ref(), new_col.as_ref()],
                &picks,
            )?)
        })
        .collect::<Result<Vec<ArrayRef>>>()?;
    Ok(RecordBatch::try_new(batch.schema(), columns)?)
}
