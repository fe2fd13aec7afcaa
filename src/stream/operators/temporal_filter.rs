//! TemporalFilter: `WHERE` conditions comparing rows with `now()` (RisingWave's temporal
//! filters, e.g. `ts > now() - INTERVAL '1 hour'`). Each condition is a bound on the
//! processing time: a row is shown while `now < t` ([`BoundKind::VisibleBefore`]: it
//! leaves the view once time passes `t`) or from `now >= t` on
//! ([`BoundKind::VisibleFrom`]: it enters the view once time reaches `t`), `t` computed
//! from the row.
//!
//! `now` is the wall clock read at each barrier, constant within an epoch. Rows whose
//! visibility will still change are kept (in RocksDB too, keyed by the row, in the key
//! group the row is routed by) under the time of their next change; at each barrier the
//! rows whose time has come are shown or retracted. Rows that can never be shown are
//! dropped; rows shown for good are not kept. Rows of an append-only input get keys
//! here, since they can now be retracted (and reach the subtask by the whole row);
//! updatable rows reach it by their stream key, so that all changes of a row meet.

use super::Operator;
use crate::error::{EddyError, Result};
use crate::state::StateWrites;
use crate::state::keys::{put_len_prefixed, take_len_prefixed, whole_row_codec};
use crate::state::{OperatorState, key_group_of};
use crate::stream::{Op, StreamChunk};
use arrow::array::{Array, AsArray, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, SchemaRef, TimeUnit, TimestampMicrosecondType};
use arrow::row::RowConverter;
use datafusion::physical_expr::PhysicalExpr;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundKind {
    /// Shown while `now < t`.
    VisibleBefore,
    /// Shown once `now >= t`.
    VisibleFrom,
}

/// One condition: `t` is `time` (a timestamp of the row) plus `offset_micros`.
#[derive(Clone)]
pub struct TimeBound {
    pub time: Arc<dyn PhysicalExpr>,
    pub offset_micros: i64,
    pub kind: BoundKind,
}

/// The processing time (`now()` in views, `PROCTIME()` columns), in microseconds since
/// the epoch (UTC): the wall clock, or, for tests that need to know it, the fixed time
/// `EDDY_FIXED_PROCESSING_TIME` names (`YYYY-MM-DD HH:MM:SS`, UTC) when the server starts.
pub fn processing_time_micros() -> i64 {
    static FIXED: std::sync::OnceLock<Option<i64>> = std::sync::OnceLock::new();
    let fixed = FIXED.get_or_init(|| {
        let text = std::env::var("EDDY_FIXED_PROCESSING_TIME").ok()?;
        chrono::NaiveDateTime::parse_from_str(text.trim(), "%Y-%m-%d %H:%M:%S")
            .ok()
            .map(|t| t.and_utc().timestamp_micros())
    });
    if let Some(t) = fixed {
        return *t;
    }
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// A kept row: how many copies, when its visibility changes next, whether it is shown.
#[derive(Clone, Copy)]
struct Kept {
    count: i64,
    change_at: i64,
    shown: bool,
}

pub struct TemporalFilter {
    bounds: Vec<TimeBound>,
    schema: SchemaRef,
    /// Encodes whole rows: the same encoding the hash exchange routes by.
    codec: RowConverter,
    now: i64,
    /// Kept rows by identity (length-prefixed row bytes, then the stream key).
    kept: HashMap<Vec<u8>, Kept>,
    /// The same rows by the time of their next change.
    by_time: BTreeSet<(i64, Vec<u8>)>,
    /// Identities changed since the last checkpoint.
    dirty: HashSet<Vec<u8>>,
    /// Keys given to rows of an append-only input: a random prefix per operator
    /// instance, then a counter.
    key_salt: u64,
    next_key: u64,
    /// Rows reach this subtask by their stream key (else by the whole row): the key
    /// group their state is kept in.
    by_stream_key: bool,
}

impl TemporalFilter {
    pub fn new(bounds: Vec<TimeBound>, schema: SchemaRef, by_stream_key: bool) -> Result<Self> {
        let codec = whole_row_codec(&schema)?;
        Ok(Self {
            bounds,
            schema,
            codec,
            now: processing_time_micros(),
            kept: HashMap::new(),
            by_time: BTreeSet::new(),
            dirty: HashSet::new(),
            key_salt: super::random_salt(),
            next_key: 0,
            by_stream_key,
        })
    }

    /// Per bound, each row's `t` (`None` where the time is NULL).
    fn times(&self, batch: &RecordBatch) -> Result<Vec<Vec<Option<i64>>>> {
        self.bounds
            .iter()
            .map(|b| {
                let t = b.time.evaluate(batch)?.into_array(batch.num_rows())?;
                let t =
                    arrow::compute::cast(&t, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
                let t = t.as_primitive::<TimestampMicrosecondType>();
                Ok((0..t.len())
                    .map(|i| {
                        t.is_valid(i)
                            .then(|| t.value(i).saturating_add(b.offset_micros))
                    })
                    .collect())
            })
            .collect()
    }

    fn visible(&self, times: &[Vec<Option<i64>>], row: usize, now: i64) -> bool {
        self.bounds
            .iter()
            .zip(times)
            .all(|(b, t)| match (b.kind, t[row]) {
                (_, None) => false,
                (BoundKind::VisibleBefore, Some(t)) => now < t,
                (BoundKind::VisibleFrom, Some(t)) => now >= t,
            })
    }

    /// When the row's visibility changes after `now`, if ever.
    fn next_change(&self, times: &[Vec<Option<i64>>], row: usize, now: i64) -> Option<i64> {
        let mut until: Option<i64> = None;
        let mut from: Option<i64> = None;
        for (b, t) in self.bounds.iter().zip(times) {
            let t = t[row]?;
            match b.kind {
                BoundKind::VisibleBefore => until = Some(until.map_or(t, |u| u.min(t))),
                BoundKind::VisibleFrom => from = Some(from.map_or(t, |f| f.max(t))),
            }
        }
        if self.visible(times, row, now) {
            return until;
        }
        if until.is_some_and(|u| u <= now) {
            return None; // expired for good
        }
        match from {
            Some(f) if f > now && until.is_none_or(|u| f < u) => Some(f),
            _ => None,
        }
    }

    fn fresh_key(&mut self) -> Vec<u8> {
        self.next_key += 1;
        // 0xFE first: never equal to a hidden row id (8 bytes starting lower) or a
        // UNION ALL tag (0xFF).
        let mut key = vec![0xFE];
        key.extend_from_slice(&self.key_salt.to_be_bytes());
        key.extend_from_slice(&self.next_key.to_be_bytes());
        key
    }

    fn keep(&mut self, identity: Vec<u8>, change_at: i64, delta: i64, shown: bool) {
        let entry = self.kept.entry(identity.clone()).or_insert(Kept {
            count: 0,
            change_at,
            shown,
        });
        entry.count += delta;
        if entry.count == 0 {
            self.kept.remove(&identity);
            self.by_time.remove(&(change_at, identity.clone()));
        } else {
            self.by_time.insert((change_at, identity.clone()));
        }
        self.dirty.insert(identity);
    }

    /// Rows (with their keys) of the given identities, decoded.
    fn decode(&self, identities: &[&[u8]]) -> Result<(RecordBatch, Vec<Vec<u8>>)> {
        let parser = self.codec.parser();
        let mut rows = Vec::with_capacity(identities.len());
        let mut keys = Vec::with_capacity(identities.len());
        for id in identities {
            let (row, key) = split_identity(id)?;
            rows.push(parser.parse(row));
            keys.push(key.to_vec());
        }
        let columns = self.codec.convert_rows(rows)?;
        let batch = RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(identities.len())),
        )?;
        Ok((batch, keys))
    }
}

fn identity(row: &[u8], key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + row.len() + key.len());
    put_len_prefixed(&mut out, row);
    out.extend_from_slice(key);
    out
}

fn split_identity(id: &[u8]) -> Result<(&[u8], &[u8])> {
    take_len_prefixed(id)
        .ok_or_else(|| EddyError::internal("a temporal filter's state key is malformed"))
}

impl Operator for TemporalFilter {
    fn name(&self) -> &'static str {
        "TemporalFilter"
    }

    fn process(&mut self, chunk: StreamChunk) -> Result<Vec<StreamChunk>> {
        let times = self.times(&chunk.batch)?;
        let rows = self.codec.convert_columns(chunk.batch.columns())?;
        let mut out_rows = Vec::new();
        let mut out_ops = Vec::new();
        let mut out_keys = Vec::new();
        for i in 0..chunk.num_rows() {
            let insert = chunk.ops[i].is_insert();
            let key = match &chunk.keys {
                Some(keys) => keys[i].clone(),
                None if insert => self.fresh_key(),
                // An unkeyed delete cannot name its row: append-only inputs have none.
                None => continue,
            };
            let shown = self.visible(&times, i, self.now);
            if shown {
                out_rows.push(i as u32);
                out_ops.push(if insert { Op::Insert } else { Op::Delete });
                out_keys.push(key.clone());
            }
            if let Some(at) = self.next_change(&times, i, self.now) {
                let id = identity(rows.row(i).as_ref(), &key);
                self.keep(id, at, if insert { 1 } else { -1 }, shown);
            }
        }
        if out_rows.is_empty() {
            return Ok(vec![]);
        }
        let batch = arrow::compute::take_record_batch(&chunk.batch, &UInt32Array::from(out_rows))?;
        Ok(vec![StreamChunk {
            ops: out_ops,
            batch,
            keys: Some(out_keys),
        }])
    }

    /// Time has moved on: rows whose time came are shown or retracted.
    fn on_barrier(&mut self) -> Result<Vec<StreamChunk>> {
        let now = processing_time_micros().max(self.now);
        self.now = now;
        let due: Vec<(i64, Vec<u8>)> = self
            .by_time
            .range(..=(now, Vec::new()))
            .cloned()
            .chain(
                self.by_time
                    .range((now, Vec::new())..(now + 1, Vec::new()))
                    .cloned(),
            )
            .collect();
        if due.is_empty() {
            return Ok(vec![]);
        }
        let ids: Vec<&[u8]> = due.iter().map(|(_, id)| id.as_slice()).collect();
        let (batch, keys) = self.decode(&ids)?;
        let times = self.times(&batch)?;
        let mut out_rows = Vec::new();
        let mut out_ops = Vec::new();
        let mut out_keys = Vec::new();
        for (i, (at, id)) in due.iter().enumerate() {
            self.by_time.remove(&(*at, id.clone()));
            let Some(mut kept) = self.kept.get(id).copied() else {
                continue;
            };
            let visible = self.visible(&times, i, now);
            if visible != kept.shown {
                for _ in 0..kept.count.max(0) {
                    out_rows.push(i as u32);
                    out_ops.push(if visible { Op::Insert } else { Op::Delete });
                    out_keys.push(keys[i].clone());
                }
            }
            kept.shown = visible;
            match self.next_change(&times, i, now) {
                Some(next) => {
                    kept.change_at = next;
                    self.kept.insert(id.clone(), kept);
                    self.by_time.insert((next, id.clone()));
                }
                None => {
                    self.kept.remove(id);
                }
            }
            self.dirty.insert(id.clone());
        }
        if out_rows.is_empty() {
            return Ok(vec![]);
        }
        let batch = arrow::compute::take_record_batch(&batch, &UInt32Array::from(out_rows))?;
        Ok(vec![StreamChunk {
            ops: out_ops,
            batch,
            keys: Some(out_keys),
        }])
    }

    fn state_tables(&self) -> usize {
        1
    }

    /// Each changed row: its count and whether it is shown, or its deletion.
    fn checkpoint(&mut self, tables: &[OperatorState], batch: &mut StateWrites) -> Result<()> {
        for id in self.dirty.drain() {
            let (row, key) = split_identity(&id)?;
            let group = key_group_of(if self.by_stream_key { key } else { row });
            let value = self.kept.get(&id).map(|k| {
                let mut v = k.count.to_le_bytes().to_vec();
                v.push(k.shown as u8);
                v
            });
            tables[0].put_in_group(batch, group, &id, value.as_deref());
        }
        Ok(())
    }

    /// Loads the kept rows; each is reconsidered at the first barrier (time moved on
    /// while the job was down).
    fn restore(&mut self, tables: &[OperatorState]) -> Result<()> {
        tables[0].scan_owned(|id, value| {
            let malformed = || EddyError::internal("a temporal filter's state is malformed");
            let count: [u8; 8] = value.get(..8).ok_or_else(malformed)?.try_into().expect("8");
            let shown = *value.get(8).ok_or_else(malformed)? != 0;
            let kept = Kept {
                count: i64::from_le_bytes(count),
                change_at: i64::MIN,
                shown,
            };
            self.kept.insert(id.to_vec(), kept);
            self.by_time.insert((i64::MIN, id.to_vec()));
            Ok(())
        })
    }
}
