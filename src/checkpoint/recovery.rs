//! Recovery: at start, the last committed checkpoint becomes the jobs' state.
//!
//! [`prepare`] runs before the state store opens. It finds the newest manifest in the
//! object store and makes its files available locally — the staging copy when it is
//! complete, otherwise a download. If the data dir has no state at all (a new machine,
//! or the data dir was lost), the checkpoint becomes the whole database, tables and
//! catalog included. Otherwise the live database keeps its tables and catalog (every
//! committed write survives) and [`restore_job_state`] puts back, from the checkpoint,
//! the state of every materialized view and sink — view rows, aggregates, source
//! positions — discarding whatever was written after the checkpoint.

use super::coordinator::{epoch_dir_name, staging_dir};
use super::manifest::Manifest;
use super::storage::CheckpointStorage;
use crate::catalog::{Relation, RelationKind};
use crate::config::Config;
use crate::error::{EddyError, Result};
use crate::state::StateStore;
use crate::state::operator_state::internal_table_range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The checkpoint a start restores.
pub struct Restored {
    pub manifest: Manifest,
    /// A local directory holding the checkpoint's RocksDB files.
    pub dir: PathBuf,
    /// The data dir had no state: the checkpoint became the whole database.
    pub whole_database: bool,
}

pub async fn read_manifest(storage: &CheckpointStorage, epoch: u64) -> Result<Manifest> {
    let bytes = storage.get(&Manifest::object_name(epoch)).await?;
    serde_json::from_slice(&bytes)
        .map_err(|e| EddyError::internal(format!("unreadable manifest of epoch {epoch}: {e}")))
}

/// The newest committed epoch in the store.
pub async fn latest_epoch(storage: &CheckpointStorage) -> Result<Option<u64>> {
    Ok(storage
        .list("manifests")
        .await?
        .iter()
        .filter_map(|n| Manifest::epoch_of(n))
        .max())
}

/// Whether `dir` holds every file of the manifest with its size.
fn complete(dir: &Path, manifest: &Manifest) -> bool {
    manifest
        .files
        .iter()
        .all(|f| std::fs::metadata(dir.join(&f.name)).is_ok_and(|m| m.len() == f.size))
}

async fn download(storage: &CheckpointStorage, manifest: &Manifest, dir: &Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    for file in &manifest.files {
        let bytes = storage.get(&file.object).await?;
        tokio::fs::write(dir.join(&file.name), &bytes).await?;
    }
    Ok(())
}

/// Copies a checkpoint into a new database directory: table files are immutable and
/// hard-linked when possible; the rest (which RocksDB appends to) are copied.
fn install(checkpoint: &Path, state_dir: &Path) -> Result<()> {
    std::fs::create_dir_all(state_dir)?;
    for entry in std::fs::read_dir(checkpoint)? {
        let entry = entry?;
        let target = state_dir.join(entry.file_name());
        let is_table_file = entry.file_name().to_string_lossy().ends_with(".sst");
        if !(is_table_file && std::fs::hard_link(entry.path(), &target).is_ok()) {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// A committed checkpoint's manifest and a local directory with its files: the staging
/// copy when complete, otherwise a download under `<data-dir>/restore`.
pub async fn fetch(
    config: &Config,
    storage: &CheckpointStorage,
    epoch: u64,
) -> Result<(Manifest, PathBuf)> {
    let manifest = read_manifest(storage, epoch).await?;
    let staged = staging_dir(&config.data_dir).join(epoch_dir_name(epoch));
    if complete(&staged, &manifest) {
        return Ok((manifest, staged));
    }
    let dir = config.data_dir.join("restore").join(epoch_dir_name(epoch));
    download(storage, &manifest, &dir).await?;
    Ok((manifest, dir))
}

/// Finds and fetches the last committed checkpoint, before the state store opens.
pub async fn prepare(config: &Config, storage: &CheckpointStorage) -> Result<Option<Restored>> {
    let Some(epoch) = latest_epoch(storage).await? else {
        return Ok(None);
    };
    let (manifest, dir) = fetch(config, storage, epoch).await?;
    let state_dir = config.data_dir.join("state");
    let whole_database = !state_dir.join("CURRENT").exists();
    if whole_database {
        if state_dir.exists() {
            std::fs::remove_dir_all(&state_dir)?;
        }
        install(&dir, &state_dir)?;
    }
    tracing::info!(
        epoch,
        from = %storage.location,
        whole_database,
        "restoring the last committed checkpoint"
    );
    Ok(Some(Restored {
        manifest,
        dir,
        whole_database,
    }))
}

/// Whether a job that reads tables recorded its positions in their change logs (a job
/// run by an Eddy without table change logs did not, and cannot resume from its state).
/// True for a job reading no table.
pub fn table_positions_recorded(
    store: &Arc<StateStore>,
    job: &Relation,
    all: &[Relation],
) -> Result<bool> {
    let reads_table = job.depends_on.iter().any(|id| {
        all.iter()
            .any(|r| r.id == *id && r.kind == RelationKind::Table)
    });
    Ok(!reads_table || crate::stream::job::has_table_log_positions(store, job.id)?)
}

/// Puts back the checkpoint's state of every materialized view and sink in the live
/// database (their rows and internal tables), dropping anything written after it.
pub fn restore_job_state(
    store: &StateStore,
    restored: &Restored,
    relations: &[Relation],
) -> Result<()> {
    if restored.whole_database {
        return Ok(());
    }
    restore_relations(store, &restored.dir, restored.manifest.epoch, relations)
}

/// Replaces the view rows and internal state of the given materialized views and sinks
/// with a checkpoint's (`dir`, of `epoch`).
pub fn restore_relations(
    store: &StateStore,
    dir: &Path,
    epoch: u64,
    relations: &[Relation],
) -> Result<()> {
    let mut ranges = Vec::new();
    for r in relations {
        if !matches!(r.kind, RelationKind::MaterializedView | RelationKind::Sink) {
            continue;
        }
        ranges.push((
            r.id.to_be_bytes().to_vec(),
            (r.id + 1).to_be_bytes().to_vec(),
        ));
        let (start, end) = internal_table_range(r.id);
        ranges.push((start.to_be_bytes().to_vec(), end.to_be_bytes().to_vec()));
    }
    let keys = store.restore_ranges(dir, &ranges)?;
    tracing::info!(keys, epoch, "job state restored");
    Ok(())
}
