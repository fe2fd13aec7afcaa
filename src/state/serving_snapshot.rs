//! [`ServingSnapshot`]: the state as of one committed epoch, which `SELECT` reads
//! materialized views at.
//!
//! Views' rows change barrier by barrier, one subtask after another, and a barrier round
//! ends before its checkpoint is committed. Reading the live database could show one view
//! (or half of one) an epoch ahead of another; reading a RocksDB snapshot taken at the
//! end of a round — the moment its checkpoint is taken — and published once that
//! checkpoint is committed shows every view as of the same committed epoch.

use super::StateStore;
use crate::error::Result;
use rocksdb::{DB, Direction, IteratorMode, SnapshotWithThreadMode};
use std::sync::Arc;

pub struct ServingSnapshot {
    epoch: u64,
    /// Borrows the database inside `_store`. Declared before `_store` so that it is
    /// dropped first; the `Arc` keeps the database alive, at a stable address, until then.
    snapshot: SnapshotWithThreadMode<'static, DB>,
    _store: Arc<StateStore>,
}

impl ServingSnapshot {
    /// The database as it is now, labelled as epoch `epoch`.
    pub fn take(store: &Arc<StateStore>, epoch: u64) -> Arc<Self> {
        let snapshot = store.db().snapshot();
        // SAFETY: the snapshot refers to the `DB` owned by `*store`, which lives in an
        // `Arc` allocation that never moves; the clone of that `Arc` stored next to the
        // snapshot keeps it alive until the snapshot (dropped first) is gone.
        let snapshot = unsafe {
            std::mem::transmute::<SnapshotWithThreadMode<'_, DB>, SnapshotWithThreadMode<'static, DB>>(
                snapshot,
            )
        };
        Arc::new(Self {
            epoch,
            snapshot,
            _store: store.clone(),
        })
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Visits every key-value pair whose key starts with `prefix`, in key order, as of
    /// the snapshot.
    pub fn scan_prefix(
        &self,
        prefix: &[u8],
        visit: impl FnMut(&[u8], &[u8]) -> Result<()>,
    ) -> Result<()> {
        let iter = self.snapshot.iterator_opt(
            IteratorMode::From(prefix, Direction::Forward),
            super::store::prefix_read_options(prefix),
        );
        super::store::visit_prefix(iter, prefix, visit)
    }
}

/// The snapshot one statement reads every materialized view at, so a query over several
/// views sees them all at one epoch even if another is committed meanwhile. Carried in
/// the statement's DataFusion session config.
pub struct PinnedSnapshot(pub Option<Arc<ServingSnapshot>>);

/// Where the snapshot of the last committed epoch is published (by the checkpoint
/// coordinator) and found (by `SELECT` on materialized views).
#[derive(Default)]
pub struct ServingEpoch {
    current: parking_lot::RwLock<Option<Arc<ServingSnapshot>>>,
}

impl std::fmt::Debug for ServingEpoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServingEpoch({})", self.epoch())
    }
}

impl ServingEpoch {
    /// Makes `snapshot` the one reads use, unless a later epoch's already is.
    pub fn publish(&self, snapshot: Arc<ServingSnapshot>) {
        let mut current = self.current.write();
        if current.as_ref().is_none_or(|c| c.epoch <= snapshot.epoch) {
            *current = Some(snapshot);
        }
    }

    /// The snapshot reads use now (`None` before the first one: read the live state).
    pub fn current(&self) -> Option<Arc<ServingSnapshot>> {
        self.current.read().clone()
    }

    pub fn epoch(&self) -> u64 {
        self.current.read().as_ref().map_or(0, |s| s.epoch)
    }
}
