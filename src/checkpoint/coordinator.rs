//! [`Coordinator`]: barrier rounds, one epoch at a time, each ending in a checkpoint.
//!
//! A round injects epoch *e* into every job and waits until every job has passed it;
//! tasks write their state only when a barrier passes, so the state store then holds
//! exactly epoch *e*. RocksDB makes a consistent checkpoint of it into a local staging
//! directory (hard links, fast) before the next barrier may be injected. The uploader
//! sends the checkpoint's new files to the object store in the background, then its
//! manifest: from that moment epoch *e* is committed, and `SELECT` reads materialized
//! views in the RocksDB snapshot taken with the checkpoint. If the uploader falls behind, it
//! skips to the newest checkpoint; one that cannot be uploaded is not committed, and the
//! jobs go on regardless.

use super::commit_hooks::{self, CommitHook, CommitHooks, RoundEnd};
use super::manifest::{CheckpointFile, Manifest};
use super::storage::CheckpointStorage;
use crate::catalog::Catalog;
use crate::error::{EddyError, Result};
use crate::state::{ServingEpoch, ServingSnapshot, StateStore};
use crate::stream::job::JobRegistry;
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// How many checkpoints `eddy_catalog.checkpoints` remembers.
const HISTORY: usize = 20;

/// One checkpoint, as `eddy_catalog.checkpoints` shows it.
#[derive(Debug, Clone)]
pub struct CheckpointRecord {
    pub epoch: u64,
    pub started: SystemTime,
    pub duration: Duration,
    pub uploaded_bytes: u64,
    pub uploaded_files: u64,
    pub total_files: u64,
    pub state_bytes: u64,
    /// `None` once committed; why not otherwise.
    pub error: Option<String>,
}

/// A local checkpoint waiting to be uploaded.
struct Staged {
    epoch: u64,
    dir: PathBuf,
    started: SystemTime,
    clock: Instant,
    catalog_version: u32,
    jobs: Vec<String>,
    sources: BTreeMap<String, BTreeMap<String, u64>>,
    /// The state as of this epoch, served to `SELECT` once it is committed.
    snapshot: Arc<ServingSnapshot>,
}

pub struct Coordinator {
    jobs: Arc<JobRegistry>,
    store: Arc<StateStore>,
    catalog: Arc<Catalog>,
    storage: Arc<CheckpointStorage>,
    /// Local checkpoints: `<data-dir>/checkpoint-staging/<epoch>`.
    staging: PathBuf,
    keep: usize,
    interval_ms: AtomicU64,
    /// The last epoch injected. Held for a whole round, so rounds never overlap: the next
    /// barrier is injected only once the previous epoch's checkpoint is taken.
    last_epoch: tokio::sync::Mutex<u64>,
    committed: AtomicU64,
    /// The last epoch injected (its round may still be running).
    injected: AtomicU64,
    /// The newest epoch whose checkpoint was committed or given up on.
    settled: AtomicU64,
    settled_notify: tokio::sync::Notify,
    serving: Arc<ServingEpoch>,
    history: Mutex<VecDeque<CheckpointRecord>>,
    to_upload: UnboundedSender<Staged>,
    /// Held while local checkpoints are deleted, and by whoever reads one (failover).
    staging_lock: tokio::sync::Mutex<()>,
    uploads: Mutex<Option<UnboundedReceiver<Staged>>>,
    /// Called, by name, with each committed epoch and the jobs its checkpoint holds (file
    /// sinks publish the files they staged for it), on a task of their own.
    commit_hooks: Arc<CommitHooks>,
    /// Called with the oldest epoch whose checkpoint is still kept, after old ones are
    /// deleted: what no restore can go back before (tables cut their change logs).
    retention_hook: Mutex<Option<RetentionHook>>,
}

/// See [`Coordinator::set_retention_hook`].
pub type RetentionHook = Arc<dyn Fn(u64) + Send + Sync>;

/// Where local checkpoints are staged.
/// The least time between an early barrier (asked for by a full state cache) and the
/// round before it: each round flushes RocksDB's memtables into a new file.
const MIN_EARLY_BARRIER_GAP: Duration = Duration::from_millis(100);

pub fn staging_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("checkpoint-staging")
}

pub fn epoch_dir_name(epoch: u64) -> String {
    format!("{epoch:020}")
}

fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Coordinator {
    /// A coordinator whose epochs continue after `committed` (the epoch restored at
    /// start, 0 for none).
    pub fn new(
        jobs: Arc<JobRegistry>,
        store: Arc<StateStore>,
        catalog: Arc<Catalog>,
        storage: Arc<CheckpointStorage>,
        serving: Arc<ServingEpoch>,
        config: &crate::config::Config,
        committed: u64,
    ) -> Self {
        let (to_upload, uploads) = unbounded_channel();
        Self {
            jobs,
            store,
            catalog,
            storage,
            staging: staging_dir(&config.data_dir),
            keep: config.checkpoints_to_keep.max(1),
            interval_ms: AtomicU64::new(config.barrier_interval_ms.max(1)),
            last_epoch: tokio::sync::Mutex::new(committed),
            committed: AtomicU64::new(committed),
            injected: AtomicU64::new(committed),
            settled: AtomicU64::new(committed),
            settled_notify: tokio::sync::Notify::new(),
            serving,
            history: Mutex::new(VecDeque::new()),
            to_upload,
            staging_lock: tokio::sync::Mutex::new(()),
            uploads: Mutex::new(Some(uploads)),
            commit_hooks: Arc::new(CommitHooks::new()),
            retention_hook: Mutex::new(None),
        }
    }

    pub fn barrier_interval_ms(&self) -> u64 {
        self.interval_ms.load(Ordering::Relaxed)
    }

    pub fn set_barrier_interval_ms(&self, ms: u64) {
        self.interval_ms.store(ms.max(1), Ordering::Relaxed);
    }

    /// The last epoch injected: a write made before this is read is in the checkpoint of
    /// every later epoch.
    pub fn injected_epoch(&self) -> u64 {
        self.injected.load(Ordering::SeqCst)
    }

    /// The last epoch whose checkpoint is committed (its manifest uploaded).
    pub fn committed_epoch(&self) -> u64 {
        self.committed.load(Ordering::SeqCst)
    }

    /// Calls `hook` after every committed checkpoint (replacing a hook of that name).
    pub fn set_commit_hook(&self, name: &str, hook: CommitHook) {
        self.commit_hooks.set(name, hook);
    }

    pub fn remove_commit_hook(&self, name: &str) {
        self.commit_hooks.remove(name);
    }

    /// Sets what runs with the oldest kept checkpoint's epoch after each garbage
    /// collection: state needed only to resume from older checkpoints can go.
    pub fn set_retention_hook(&self, hook: RetentionHook) {
        *self.retention_hook.lock() = Some(hook);
    }

    pub fn storage(&self) -> &Arc<CheckpointStorage> {
        &self.storage
    }

    /// Keeps the local checkpoints in place while the guard lives.
    pub async fn hold_staging(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.staging_lock.lock().await
    }

    /// Recent checkpoints, oldest first.
    pub fn history(&self) -> Vec<CheckpointRecord> {
        self.history.lock().iter().cloned().collect()
    }

    fn record(&self, record: CheckpointRecord) {
        let mut history = self.history.lock();
        history.push_back(record);
        while history.len() > HISTORY {
            history.pop_front();
        }
    }

    /// Holds off barrier rounds while the guard lives: jobs started meanwhile all see
    /// the same first epoch (a restart subscribes every view to the views it reads
    /// before any of them publishes a change).
    pub async fn pause(&self) -> tokio::sync::MutexGuard<'_, u64> {
        self.last_epoch.lock().await
    }

    /// Runs one barrier round: injects epoch *e* into every running job, waits until each
    /// has passed it on, and takes the local checkpoint of *e* for upload. Returns *e*.
    pub async fn run_round(&self) -> u64 {
        let mut last = self.last_epoch.lock().await;
        let epoch = *last + 1;
        *last = epoch;
        self.injected.store(epoch, Ordering::SeqCst);
        let started = SystemTime::now();
        let clock = Instant::now();
        let jobs = self.jobs.inject_and_wait(epoch).await;
        let snapshot = ServingSnapshot::take(&self.store, epoch);
        let dir = self.staging.join(epoch_dir_name(epoch));
        let store = self.store.clone();
        let target = dir.clone();
        let taken = tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(target.parent().expect("staging dir has a parent"))?;
            if target.exists() {
                std::fs::remove_dir_all(&target)?;
            }
            store.create_checkpoint(&target)
        })
        .await;
        match taken {
            Ok(Ok(())) => {
                let staged = Staged {
                    epoch,
                    dir,
                    started,
                    clock,
                    catalog_version: self
                        .catalog
                        .relations()
                        .iter()
                        .map(|r| r.id)
                        .max()
                        .unwrap_or(0),
                    jobs,
                    sources: self.jobs.source_positions(),
                    snapshot,
                };
                let _ = self.to_upload.send(staged);
            }
            Ok(Err(e)) => {
                tracing::warn!("checkpoint of epoch {epoch} failed: {e}");
                self.commit_hooks.round_ended(RoundEnd::GivenUp { epoch });
            }
            Err(e) => {
                tracing::warn!("checkpoint of epoch {epoch} failed: {e}");
                self.commit_hooks.round_ended(RoundEnd::GivenUp { epoch });
            }
        }
        epoch
    }

    /// Runs a round and waits until its checkpoint is committed (or given up on): what
    /// `FLUSH` does, so that views read afterwards show every write made before it.
    pub async fn flush(&self) -> u64 {
        let epoch = self.run_round().await;
        if self.uploads.lock().is_some() {
            return epoch; // no uploader runs (an engine without a runtime)
        }
        loop {
            let settled = self.settled_notify.notified();
            if self.settled.load(Ordering::SeqCst) >= epoch {
                return epoch;
            }
            // The timeout covers a notification that raced the check.
            let _ = tokio::time::timeout(Duration::from_millis(50), settled).await;
        }
    }

    /// The checkpoint of `epoch` (and any before it) is committed or given up on.
    fn settle(&self, epoch: u64) {
        self.settled.fetch_max(epoch, Ordering::SeqCst);
        self.settled_notify.notify_waiters();
    }

    /// Where the snapshot `SELECT` reads materialized views at is published.
    pub fn serving(&self) -> &Arc<ServingEpoch> {
        &self.serving
    }

    /// The epoch `SELECT` reads materialized views at.
    pub fn serving_epoch(&self) -> u64 {
        self.serving.epoch()
    }

    /// Starts the periodic rounds and the uploader on the current tokio runtime. Both
    /// stop when the coordinator is dropped.
    pub fn start(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let Some(interval) = weak.upgrade().map(|c| c.barrier_interval_ms()) else {
                    return;
                };
                let Some(budget) = weak.upgrade().map(|c| c.store.cache_budget().clone()) else {
                    return;
                };
                // A round comes every interval, or earlier when operators' caches are
                // full of state changed since the last barrier (at most every
                // MIN_EARLY_BARRIER_GAP).
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(interval)) => {}
                    _ = budget.barrier_wanted() => {
                        tokio::time::sleep(MIN_EARLY_BARRIER_GAP).await;
                    }
                }
                let Some(coordinator) = weak.upgrade() else {
                    return;
                };
                coordinator.run_round().await;
            }
        });
        if let Some(uploads) = self.uploads.lock().take() {
            tokio::spawn(upload_loop(Arc::downgrade(self), uploads));
        }
        if let Some(queue) = self.commit_hooks.take_queue() {
            let coordinator = Arc::downgrade(self);
            let settle = move |epoch| {
                if let Some(coordinator) = coordinator.upgrade() {
                    coordinator.settle(epoch);
                }
            };
            tokio::spawn(commit_hooks::run(
                Arc::downgrade(&self.commit_hooks),
                queue,
                settle,
            ));
        }
    }

    /// Uploads a staged checkpoint's files that the store lacks, then its manifest.
    async fn upload(&self, staged: &Staged, uploaded: &mut HashSet<String>) -> Result<Manifest> {
        let mut entries: Vec<(String, PathBuf, u64)> = Vec::new();
        for entry in std::fs::read_dir(&staged.dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            entries.push((name, entry.path(), entry.metadata()?.len()));
        }
        entries.sort();
        let mut files = Vec::new();
        let mut uploaded_bytes = 0;
        let mut uploaded_files = 0;
        for (name, path, size) in entries {
            let is_table_file = name.ends_with(".sst");
            let object = if is_table_file {
                format!("sst/{name}")
            } else {
                format!("epochs/{}/{name}", epoch_dir_name(staged.epoch))
            };
            if !is_table_file || !uploaded.contains(&name) {
                let data = tokio::fs::read(&path).await.map_err(|e| {
                    EddyError::from(e).context(format!("reading {}", path.display()))
                })?;
                self.storage
                    .put(&object, Bytes::from(data))
                    .await
                    .map_err(|e| e.context(format!("uploading {object}")))?;
                uploaded_bytes += size;
                uploaded_files += 1;
                if is_table_file {
                    uploaded.insert(name.clone());
                }
            }
            files.push(CheckpointFile { name, object, size });
        }
        let manifest = Manifest {
            epoch: staged.epoch,
            started_ms: millis(staged.started),
            duration_ms: staged.clock.elapsed().as_millis() as u64,
            catalog_version: staged.catalog_version,
            jobs: staged.jobs.clone(),
            sources: staged.sources.clone(),
            files,
            uploaded_bytes,
            uploaded_files,
        };
        let json = serde_json::to_vec_pretty(&manifest)
            .map_err(|e| crate::error::EddyError::internal(e.to_string()))?;
        self.storage
            .put(&Manifest::object_name(staged.epoch), Bytes::from(json))
            .await?;
        Ok(manifest)
    }

    /// Deletes manifests beyond the newest `keep`, their own files, and table files no
    /// kept manifest references. Returns the oldest kept checkpoint's epoch.
    async fn collect_garbage(&self, uploaded: &mut HashSet<String>) -> Result<Option<u64>> {
        let mut epochs: Vec<u64> = self
            .storage
            .list("manifests")
            .await?
            .iter()
            .filter_map(|n| Manifest::epoch_of(n))
            .collect();
        epochs.sort();
        let split = epochs.len().saturating_sub(self.keep);
        let (old, kept) = epochs.split_at(split);
        for epoch in old {
            // The manifest goes first: a checkpoint is never half there but listed.
            self.storage.delete(&Manifest::object_name(*epoch)).await?;
            let dir = format!("epochs/{}", epoch_dir_name(*epoch));
            for name in self.storage.list(&dir).await? {
                self.storage.delete(&format!("{dir}/{name}")).await?;
            }
        }
        let oldest_kept = kept.first().copied();
        if old.is_empty() {
            return Ok(oldest_kept);
        }
        let mut referenced = HashSet::new();
        for epoch in kept {
            let manifest = super::recovery::read_manifest(&self.storage, *epoch).await?;
            referenced.extend(manifest.files.into_iter().map(|f| f.object));
        }
        for name in self.storage.list("sst").await? {
            let object = format!("sst/{name}");
            if !referenced.contains(&object) {
                self.storage.delete(&object).await?;
                uploaded.remove(&name);
            }
        }
        Ok(oldest_kept)
    }

    /// The table files the committed checkpoints reference. Others — left by an upload
    /// a crash interrupted — are deleted: a database restored from an older checkpoint
    /// may create files of the same names with other contents.
    async fn committed_table_files(&self) -> Result<HashSet<String>> {
        let mut referenced = HashSet::new();
        for name in self.storage.list("manifests").await? {
            if let Some(epoch) = Manifest::epoch_of(&name) {
                let manifest = super::recovery::read_manifest(&self.storage, epoch).await?;
                referenced.extend(
                    manifest
                        .files
                        .into_iter()
                        .filter_map(|f| f.object.strip_prefix("sst/").map(str::to_string)),
                );
            }
        }
        for name in self.storage.list("sst").await? {
            if !referenced.contains(&name) {
                self.storage.delete(&format!("sst/{name}")).await?;
            }
        }
        Ok(referenced)
    }

    /// Local checkpoints older than `epoch` are no longer needed.
    fn remove_staged_before(&self, epoch: u64) {
        let Ok(entries) = std::fs::read_dir(&self.staging) else {
            return;
        };
        for entry in entries.flatten() {
            let older = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|e| e < epoch);
            if older {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

/// Uploads staged checkpoints in epoch order, skipping to the newest when behind.
async fn upload_loop(coordinator: Weak<Coordinator>, mut uploads: UnboundedReceiver<Staged>) {
    let mut uploaded: Option<HashSet<String>> = None;
    while let Some(mut staged) = uploads.recv().await {
        while let Ok(newer) = uploads.try_recv() {
            let _ = std::fs::remove_dir_all(&staged.dir);
            staged = newer;
        }
        let Some(coordinator) = coordinator.upgrade() else {
            return;
        };
        // The table files committed checkpoints hold, found once.
        let known = match &mut uploaded {
            Some(known) => known,
            None => match coordinator.committed_table_files().await {
                Ok(names) => uploaded.insert(names),
                Err(e) => {
                    tracing::warn!("cannot read the checkpoint store: {e}");
                    let _ = std::fs::remove_dir_all(&staged.dir);
                    coordinator.commit_hooks.round_ended(RoundEnd::GivenUp {
                        epoch: staged.epoch,
                    });
                    continue;
                }
            },
        };
        match coordinator.upload(&staged, known).await {
            Ok(manifest) => {
                coordinator
                    .committed
                    .fetch_max(staged.epoch, Ordering::SeqCst);
                coordinator.serving.publish(staged.snapshot.clone());
                coordinator.commit_hooks.round_ended(RoundEnd::Committed {
                    epoch: staged.epoch,
                    jobs: staged.jobs.clone(),
                });
                coordinator.record(CheckpointRecord {
                    epoch: staged.epoch,
                    started: staged.started,
                    duration: staged.clock.elapsed(),
                    uploaded_bytes: manifest.uploaded_bytes,
                    uploaded_files: manifest.uploaded_files,
                    total_files: manifest.files.len() as u64,
                    state_bytes: manifest.state_bytes(),
                    error: None,
                });
                let held = coordinator.staging_lock.lock().await;
                coordinator.remove_staged_before(staged.epoch);
                std::mem::drop(held);
                match coordinator.collect_garbage(known).await {
                    Ok(Some(oldest_kept)) => {
                        let hook = coordinator.retention_hook.lock().clone();
                        if let Some(hook) = hook {
                            hook(oldest_kept);
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!("checkpoint garbage collection failed: {}", e.report())
                    }
                }
            }
            Err(e) => {
                tracing::warn!(
                    "checkpoint of epoch {} not committed: {}",
                    staged.epoch,
                    e.report()
                );
                let _ = std::fs::remove_dir_all(&staged.dir);
                coordinator.commit_hooks.round_ended(RoundEnd::GivenUp {
                    epoch: staged.epoch,
                });
                coordinator.record(CheckpointRecord {
                    epoch: staged.epoch,
                    started: staged.started,
                    duration: staged.clock.elapsed(),
                    uploaded_bytes: 0,
                    uploaded_files: 0,
                    total_files: 0,
                    state_bytes: 0,
                    error: Some(e.report()),
                });
            }
        }
    }
}
