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

/// One operator's share of the [`CacheBudget`]: the bytes it last reported, given back
/// when it is dropped. Operators that evict whole keys after a barrier (join sides,
/// top-N and over-window partitions) report through it.
pub struct BudgetShare {
    budget: std::sync::Arc<CacheBudget>,
    reported: usize,
}

impl BudgetShare {
    pub fn new(budget: std::sync::Arc<CacheBudget>) -> Self {
        Self {
            budget,
            reported: 0,
        }
    }

    pub fn budget(&self) -> &CacheBudget {
        &self.budget
    }

    /// Reports the operator's memory; over the limit with changes not yet written, asks
    /// for an early barrier, after which they are clean and can be evicted.
    pub fn report(&mut self, resident: usize, has_changes: bool) {
        self.budget.adjust(self.reported, resident);
        self.reported = resident;
        if self.budget.is_over() && has_changes {
            self.budget.want_barrier();
        }
    }

    /// After a barrier: the bytes this operator should evict, its share (by its part of
    /// the memory used) of the caches' excess over their target; 0 under the limit.
    pub fn to_free(&mut self, resident: usize) -> usize {
        self.budget.adjust(self.reported, resident);
        self.reported = resident;
        if !self.budget.is_over() {
            return 0;
        }
        let used = self.budget.used().max(1);
        let excess = used.saturating_sub(self.budget.target());
        (excess as u128 * resident as u128 / used as u128) as usize
    }

    /// Records an eviction of `count` entries, after which the operator holds `resident`.
    pub fn evicted(&mut self, count: usize, resident: usize) {
        self.budget.record_evictions(count);
        self.budget.adjust(self.reported, resident);
        self.reported = resident;
    }
}

impl Drop for BudgetShare {
    fn drop(&mut self) {
        self.budget.adjust(self.reported, 0);
    }
}
