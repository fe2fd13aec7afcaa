//! [`CacheBudget`]: the memory that every stateful operator's write-back cache shares
//! (`--state-cache-mb`).
//!
//! Operators keep hot state (aggregate groups) in memory and write what changed to
//! RocksDB at each barrier. Each reports the bytes it holds here; when the total passes
//! the limit, operators evict entries that have not changed since the last barrier —
//! RocksDB holds them already — and read them back when their key comes again. Entries
//! changed since the last barrier cannot be evicted (the store holds only whole epochs):
//! an operator that finds nothing to evict asks the checkpoint coordinator for an early
//! barrier, after which its entries are clean again, and sources stop reading while the
//! caches are [full](CacheBudget::is_full): memory stays within a quarter above the limit
//! plus what is in flight between tasks.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use tokio::sync::Notify;

pub struct CacheBudget {
    limit: usize,
    used: AtomicUsize,
    loads: AtomicU64,
    evictions: AtomicU64,
    early_barriers: AtomicU64,
    barrier_wanted: Notify,
}

impl CacheBudget {
    pub fn new(limit_bytes: usize) -> Self {
        Self {
            limit: limit_bytes,
            used: AtomicUsize::new(0),
            loads: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            early_barriers: AtomicU64::new(0),
            barrier_wanted: Notify::new(),
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Bytes operators should evict down to once the limit is passed: a tenth below it,
    /// so that eviction runs in batches rather than on every new entry.
    pub fn target(&self) -> usize {
        self.limit - self.limit / 10
    }

    pub fn is_over(&self) -> bool {
        self.used() > self.limit
    }

    /// Over the limit by more than eviction can fix between barriers: sources hold off
    /// reading until a barrier has made the changed entries clean (evictable) again.
    pub fn is_full(&self) -> bool {
        self.used() > self.limit + self.limit / 4
    }

    /// Accounts for a change of an operator's cached bytes.
    pub fn adjust(&self, before: usize, after: usize) {
        if after > before {
            self.used.fetch_add(after - before, Ordering::Relaxed);
        } else {
            self.used.fetch_sub(before - after, Ordering::Relaxed);
        }
    }

    pub fn record_loads(&self, n: usize) {
        self.loads.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub fn record_evictions(&self, n: usize) {
        self.evictions.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Entries read back from RocksDB after eviction, over the server's life.
    pub fn loads(&self) -> u64 {
        self.loads.load(Ordering::Relaxed)
    }

    pub fn evictions(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }

    /// Barriers the coordinator ran early because caches were full of changed entries.
    pub fn early_barriers(&self) -> u64 {
        self.early_barriers.load(Ordering::Relaxed)
    }

    /// Asks for a barrier now: the cache is full of entries changed since the last one.
    pub fn want_barrier(&self) {
        self.barrier_wanted.notify_one();
    }

    /// Resolves when an operator wants an early barrier (for the coordinator).
    pub async fn barrier_wanted(&self) {
        self.barrier_wanted.notified().await;
        self.early_barriers.fetch_add(1, Ordering::Relaxed);
    }
}
