//! Where rows go: the stable hash that puts every key in one of [`MAX_PARALLELISM`] key
//! groups, the contiguous ranges of key groups each of `p` subtasks owns, and the split of
//! a chunk by target subtask. Shared by the runtime's exchanges (`stream::dispatch`), the
//! state store's key layout (`state::keys`) and the change streams views publish
//! (`state::changelog`), so a key's rows and its state always meet in the same subtask.
//!
//! The hash must never change between builds: checkpoints and table rows on disk depend
//! on which key group a key belongs to. It is FNV-1a (64-bit), written out here rather than
//! taken from a crate whose output could change with a version bump.

use super::chunk::StreamChunk;
use crate::error::Result;
use arrow::array::UInt32Array;
use arrow::compute::take_record_batch;

/// Messages a channel between two tasks holds before its sender waits.
pub const CHANNEL_CAPACITY: usize = 8;

/// Number of key groups: the most subtasks a keyed operator can ever be split into.
pub const MAX_PARALLELISM: u16 = 256;

pub type KeyGroup = u16;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a over the bytes, followed by a final avalanche step so that keys differing only
/// in their last byte still spread over all key groups.
pub fn stable_hash(bytes: &[u8]) -> u64 {
    let mut h = FNV_OFFSET;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(FNV_PRIME);
    }
    // fmix64 from MurmurHash3.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The key group of an encoded (memcomparable) key.
pub fn key_group_of(key: &[u8]) -> KeyGroup {
    (stable_hash(key) % MAX_PARALLELISM as u64) as KeyGroup
}

/// The subtask (of `parallelism`) that owns a key: key groups are split into contiguous
/// ranges, one per subtask, so rescaling moves whole key groups.
pub fn subtask_of(key: &[u8], parallelism: usize) -> usize {
    key_group_of(key) as usize * parallelism / MAX_PARALLELISM as usize
}

/// Splits a chunk by target subtask, keeping row order within each part.
pub fn split(
    chunk: StreamChunk,
    targets: &[usize],
    parts: usize,
) -> Result<Vec<(usize, StreamChunk)>> {
    if let Some(&first) = targets.first()
        && targets.iter().all(|t| *t == first)
    {
        return Ok(vec![(first, chunk)]);
    }
    split_rows(&chunk, targets, parts)
}

/// The rows of a chunk for each target subtask, copied out (row order kept within each
/// part); [`split`] hands a chunk whose rows all go to one subtask on whole.
pub fn split_rows(
    chunk: &StreamChunk,
    targets: &[usize],
    parts: usize,
) -> Result<Vec<(usize, StreamChunk)>> {
    let mut rows: Vec<Vec<u32>> = vec![Vec::new(); parts];
    for (row, t) in targets.iter().enumerate() {
        rows[*t].push(row as u32);
    }
    let mut out = Vec::new();
    for (target, rows) in rows.into_iter().enumerate() {
        if rows.is_empty() {
            continue;
        }
        let ops = rows.iter().map(|r| chunk.ops[*r as usize]).collect();
        let keys = chunk
            .keys
            .as_ref()
            .map(|k| rows.iter().map(|r| k[*r as usize].clone()).collect());
        let batch = take_record_batch(&chunk.batch, &UInt32Array::from(rows))?;
        out.push((target, StreamChunk { ops, batch, keys }));
    }
    Ok(out)
}
