//! The one RocksDB instance under the data dir that holds all state.

use super::CacheBudget;
use crate::error::Result;
use parking_lot::Mutex;
use rocksdb::{DB, Direction, IteratorMode, Options, ReadOptions, WriteBatch};
use std::path::Path;
use std::sync::Arc;

/// RocksDB's block cache (data, index and filter blocks).
const BLOCK_CACHE_BYTES: usize = 64 << 20;

/// Table ids below this are reserved for Eddy's own bookkeeping.
pub const FIRST_USER_TABLE_ID: u32 = 1000;
/// The system table holding counters such as the hidden row id sequence.
pub const SYSTEM_TABLE_ID: u32 = 1;

const ROW_ID_SEQUENCE_KEY: &[u8] = b"\x00\x00\x00\x01\x00\x00seq/row_id";

/// Shared handle to the RocksDB instance.
pub struct StateStore {
    db: DB,
    /// Serialises allocation of hidden row ids with the write that records the new high
    /// mark, so a restart never hands out an id twice.
    row_id_lock: Mutex<u64>,
    /// The memory operators' state caches share.
    cache_budget: Arc<CacheBudget>,
}

impl StateStore {
    /// Opens (or creates) the database; operators' state caches may hold
    /// `cache_limit_bytes` together.
    pub fn open(path: &Path, cache_limit_bytes: usize) -> Result<Self> {
        std::fs::create_dir_all(path)?;
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
        opts.increase_parallelism(2);
        // Operators look up keys their caches evicted, and keys that were never stored
        // (new groups): bloom filters answer most of the latter without reading a block.
        let mut table = rocksdb::BlockBasedOptions::default();
        table.set_bloom_filter(10.0, false);
        // Index and filter blocks live in the block cache, so RocksDB's memory stays
        // bounded however large the state grows.
        table.set_block_cache(&rocksdb::Cache::new_lru_cache(BLOCK_CACHE_BYTES));
        table.set_cache_index_and_filter_blocks(true);
        table.set_pin_l0_filter_and_index_blocks_in_cache(true);
        opts.set_block_based_table_factory(&table);
        let db = DB::open(&opts, path)?;
        let next_row_id = match db.get(ROW_ID_SEQUENCE_KEY)? {
            Some(v) if v.len() == 8 => u64::from_be_bytes(v[..8].try_into().unwrap()),
            _ => 1,
        };
        Ok(Self {
            db,
            row_id_lock: Mutex::new(next_row_id),
            cache_budget: Arc::new(CacheBudget::new(cache_limit_bytes)),
        })
    }

    pub fn cache_budget(&self) -> &Arc<CacheBudget> {
        &self.cache_budget
    }

    pub(super) fn db(&self) -> &DB {
        &self.db
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.db.get(key)?)
    }

    /// Reads several keys at once.
    pub fn multi_get(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        self.db
            .multi_get(keys)
            .into_iter()
            .map(|r| Ok(r?))
            .collect()
    }

    /// Applies a batch atomically. The write goes through RocksDB's WAL, so it survives
    /// the process being killed once this returns.
    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        self.db.write(batch)?;
        Ok(())
    }

    /// Allocates `count` consecutive hidden row ids and applies `fill(first_id, batch)`
    /// together with the new high mark in one atomic write.
    pub fn write_with_row_ids(
        &self,
        count: u64,
        fill: impl FnOnce(u64, &mut WriteBatch) -> Result<()>,
    ) -> Result<u64> {
        let mut next = self.row_id_lock.lock();
        let first = *next;
        let mut batch = WriteBatch::default();
        fill(first, &mut batch)?;
        batch.put(ROW_ID_SEQUENCE_KEY, (first + count).to_be_bytes());
        self.db.write(batch)?;
        *next = first + count;
        Ok(first)
    }

    /// Allocates `count` consecutive hidden row ids (rows written later, at a
    /// transaction's commit) and records the new high mark.
    pub fn allocate_row_ids(&self, count: u64) -> Result<u64> {
        self.write_with_row_ids(count, |_, _| Ok(()))
    }

    /// Visits every key-value pair whose key starts with `prefix`, in key order.
    /// The rows and bytes (keys and values) one table or state table holds.
    pub fn table_footprint(&self, table_id: u32) -> Result<(u64, u64)> {
        let (mut rows, mut bytes) = (0u64, 0u64);
        self.scan_prefix(&super::keys::table_prefix(table_id), |k, v| {
            rows += 1;
            bytes += (k.len() + v.len()) as u64;
            Ok(())
        })?;
        Ok((rows, bytes))
    }

    pub fn scan_prefix(
        &self,
        prefix: &[u8],
        visit: impl FnMut(&[u8], &[u8]) -> Result<()>,
    ) -> Result<()> {
        let iter = self.db.iterator_opt(
            IteratorMode::From(prefix, Direction::Forward),
            prefix_read_options(prefix),
        );
        visit_prefix(iter, prefix, visit)
    }

    /// [`StateStore::scan_prefix`] from the first key at or after `start` (which itself
    /// starts with `prefix`).
    pub fn scan_prefix_from(
        &self,
        prefix: &[u8],
        start: &[u8],
        visit: impl FnMut(&[u8], &[u8]) -> Result<()>,
    ) -> Result<()> {
        let iter = self.db.iterator_opt(
            IteratorMode::From(start, Direction::Forward),
            prefix_read_options(prefix),
        );
        visit_prefix(iter, prefix, visit)
    }

    /// [`StateStore::scan_prefix_from`] while `visit` returns true: reads only as far as
    /// the caller needs (the first rows of a long sorted run).
    pub fn scan_prefix_from_while(
        &self,
        prefix: &[u8],
        start: &[u8],
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let iter = self.db.iterator_opt(
            IteratorMode::From(start, Direction::Forward),
            prefix_read_options(prefix),
        );
        for item in iter {
            let (k, v) = item?;
            if !k.starts_with(prefix) || !visit(&k, &v)? {
                break;
            }
        }
        Ok(())
    }

    /// Whether any key starts with `prefix`.
    pub fn any_with_prefix(&self, prefix: &[u8]) -> Result<bool> {
        let mut iter = self
            .db
            .iterator(IteratorMode::From(prefix, Direction::Forward));
        match iter.next() {
            Some(item) => Ok(item?.0.starts_with(prefix)),
            None => Ok(false),
        }
    }

    /// Writes a consistent copy of the whole database into `dir` (which must not exist):
    /// memtables are flushed, table files hard-linked, the rest copied.
    pub fn create_checkpoint(&self, dir: &Path) -> Result<()> {
        rocksdb::checkpoint::Checkpoint::new(&self.db)?.create_checkpoint(dir)?;
        Ok(())
    }

    /// Replaces the keys in each `[start, end)` range with those a checkpoint (a RocksDB
    /// directory, opened read-only) holds there. Returns the number of keys copied.
    ///
    /// Each range is written into a table file of its own and ingested whole, which is
    /// several times faster than writing the keys through the memtable and the WAL. A
    /// crash half-way leaves the ranges mixed; recovery then simply runs again.
    pub fn restore_ranges(&self, checkpoint: &Path, ranges: &[(Vec<u8>, Vec<u8>)]) -> Result<u64> {
        let source = DB::open_for_read_only(&Options::default(), checkpoint, false)?;
        let scratch = self
            .db
            .path()
            .parent()
            .unwrap_or(self.db.path())
            .join("restore-ingest");
        std::fs::create_dir_all(&scratch)?;
        let mut file_options = Options::default();
        file_options.set_compression_type(rocksdb::DBCompressionType::Lz4);
        let mut ingest = rocksdb::IngestExternalFileOptions::default();
        ingest.set_move_files(true);
        let mut copied = 0;
        for (i, (start, end)) in ranges.iter().enumerate() {
            self.delete_range(start, end)?;
            let file = scratch.join(format!("{i}.sst"));
            let mut writer = rocksdb::SstFileWriter::create(&file_options);
            writer.open(&file)?;
            let mut keys = 0u64;
            let mut opts = ReadOptions::default();
            opts.set_iterate_upper_bound(end.clone());
            for item in source.iterator_opt(IteratorMode::From(start, Direction::Forward), opts) {
                let (k, v) = item?;
                writer.put(k, v)?;
                keys += 1;
            }
            if keys > 0 {
                writer.finish()?;
                self.db.ingest_external_file_opts(&ingest, vec![&file])?;
            }
            drop(writer);
            let _ = std::fs::remove_file(&file);
            copied += keys;
        }
        let _ = std::fs::remove_dir_all(&scratch);
        Ok(copied)
    }

    /// Deletes every key in `[start, end)`.
    pub fn delete_range(&self, start: &[u8], end: &[u8]) -> Result<()> {
        let mut batch = WriteBatch::default();
        batch.delete_range(start, end);
        self.write(batch)
    }

    /// Deletes every key starting with `prefix` (dropping a table).
    pub fn delete_prefix(&self, prefix: &[u8]) -> Result<()> {
        let mut end = prefix.to_vec();
        let mut batch = WriteBatch::default();
        if increment_bytes(&mut end) {
            batch.delete_range(prefix, &end);
        } else {
            let mut keys = Vec::new();
            self.scan_prefix(prefix, |k, _| {
                keys.push(k.to_vec());
                Ok(())
            })?;
            for k in keys {
                batch.delete(k);
            }
        }
        self.write(batch)
    }
}

/// Read options that stop iteration after the keys starting with `prefix`.
pub(super) fn prefix_read_options(prefix: &[u8]) -> ReadOptions {
    let mut opts = ReadOptions::default();
    if let Some(upper) = prefix_end(prefix) {
        opts.set_iterate_upper_bound(upper);
    }
    opts
}

/// Visits the pairs of an iterator positioned at `prefix` while their keys start with it.
pub(super) fn visit_prefix(
    iter: impl Iterator<Item = std::result::Result<(Box<[u8]>, Box<[u8]>), rocksdb::Error>>,
    prefix: &[u8],
    mut visit: impl FnMut(&[u8], &[u8]) -> Result<()>,
) -> Result<()> {
    for item in iter {
        let (k, v) = item?;
        if !k.starts_with(prefix) {
            break;
        }
        visit(&k, &v)?;
    }
    Ok(())
}

/// The smallest key greater than every key starting with `prefix` (none if the prefix is
/// all 0xff bytes).
pub(super) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    increment_bytes(&mut end).then_some(end)
}

/// Turns `bytes` into the smallest byte string greater than every string it prefixes.
/// Returns false when there is none (all bytes 0xff).
fn increment_bytes(bytes: &mut Vec<u8>) -> bool {
    while let Some(last) = bytes.last_mut() {
        if *last == 0xff {
            bytes.pop();
        } else {
            *last += 1;
            return true;
        }
    }
    false
}
