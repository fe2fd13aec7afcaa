//! A group's state as the bytes stored in the aggregate's internal table.
//!
//! Layout: the group's input row count (i64), whether its row is shown (one byte), then
//! each call's state in call order — a count (i64), a sum (i128 or f64) with its count
//! of non-null inputs (i64), an interval sum (three i128: months, days, nanoseconds)
//! with its count, or, for counted values, the marker [`VALUES_IN_ROWS`]: the values are
//! rows of their own ([`super::value_rows`]). Groups written by older versions have the
//! number of values there instead, then per value its length, bytes and count. Numbers
//! are little-endian.

use super::value_rows::{VALUES_IN_ROWS, value_changed};
use super::{AggState, HashAgg};
use crate::error::{EddyError, Result};

/// The unkeyed state entry holding the `EMIT ON WINDOW CLOSE` closed-below mark.
pub(super) const CLOSED_BELOW_KEY: &[u8] = b"closed_below";

/// Reads little-endian numbers back from a group's encoded state.
struct StateReader<'a>(&'a [u8]);

impl StateReader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N]> {
        if self.0.len() < N {
            return Err(EddyError::internal("truncated aggregate state"));
        }
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        Ok(head.try_into().expect("length checked"))
    }
    fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_le_bytes(self.take()?))
    }
    fn bytes(&mut self) -> Result<&[u8]> {
        let len = u32::from_le_bytes(self.take()?) as usize;
        if self.0.len() < len {
            return Err(EddyError::internal("truncated aggregate state"));
        }
        let (head, rest) = self.0.split_at(len);
        self.0 = rest;
        Ok(head)
    }
}

impl HashAgg {
    /// A group's state as bytes.
    pub(super) fn encode_group(&self, g: usize, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.row_counts[g].to_le_bytes());
        out.push(self.visible[g] as u8);
        for state in &self.states {
            match state {
                AggState::Count(c) => out.extend_from_slice(&c[g].to_le_bytes()),
                AggState::IntSum(s, n) => {
                    out.extend_from_slice(&s[g].to_le_bytes());
                    out.extend_from_slice(&n[g].to_le_bytes());
                }
                AggState::FloatSum(s, n) => {
                    out.extend_from_slice(&s[g].to_le_bytes());
                    out.extend_from_slice(&n[g].to_le_bytes());
                }
                AggState::IntervalSum(s, n) => {
                    for part in s[g] {
                        out.extend_from_slice(&part.to_le_bytes());
                    }
                    out.extend_from_slice(&n[g].to_le_bytes());
                }
                AggState::Values { .. } => out.extend_from_slice(&VALUES_IN_ROWS.to_le_bytes()),
            }
        }
    }

    /// Fills the (fresh) slot `g` from a group's stored state. Returns whether its counted
    /// values are to be read from their own rows. Values stored inline (by an older
    /// version) are marked changed, so that the next barrier writes them as rows.
    pub(super) fn decode_group(&mut self, g: usize, bytes: &[u8]) -> Result<bool> {
        let mut r = StateReader(bytes);
        self.row_counts[g] = r.i64()?;
        self.visible[g] = r.take::<1>()?[0] != 0;
        let mut value_bytes = 0;
        let mut values_in_rows = false;
        let mut inline_values = false;
        for (call, state) in self.states.iter_mut().enumerate() {
            match state {
                AggState::Count(c) => c[g] = r.i64()?,
                AggState::IntSum(s, n) => {
                    s[g] = i128::from_le_bytes(r.take()?);
                    n[g] = r.i64()?;
                }
                AggState::FloatSum(s, n) => {
                    s[g] = f64::from_le_bytes(r.take()?);
                    n[g] = r.i64()?;
                }
                AggState::IntervalSum(s, n) => {
                    for part in &mut s[g] {
                        *part = i128::from_le_bytes(r.take()?);
                    }
                    n[g] = r.i64()?;
                }
                AggState::Values { counts, .. } => {
                    let len = u32::from_le_bytes(r.take()?);
                    if len == VALUES_IN_ROWS {
                        values_in_rows = true;
                        continue;
                    }
                    for _ in 0..len {
                        let value = r.bytes()?.to_vec();
                        let count = r.i64()?;
                        value_bytes += super::cache::value_bytes(&value);
                        value_changed(&mut self.value_changes, g, call, &value);
                        counts[g].insert(value, count);
                        inline_values = true;
                    }
                }
            }
        }
        self.grow_group(g, value_bytes);
        if inline_values {
            self.mark_dirty(g);
        }
        Ok(values_in_rows)
    }
}
