//! [`Manifest`]: what one committed checkpoint consists of. Written last, as
//! `manifests/<epoch>.json`: an epoch is committed once its manifest exists.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckpointFile {
    /// The file's name in RocksDB's directory.
    pub name: String,
    /// Where it is in the state store, relative to its root.
    pub object: String,
    pub size: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub epoch: u64,
    /// When the barrier was injected (milliseconds since the Unix epoch).
    pub started_ms: u64,
    /// From the barrier's injection to the manifest's upload.
    pub duration_ms: u64,
    /// The catalog's version: the highest relation id (every DDL takes a new one).
    pub catalog_version: u32,
    /// The jobs whose state this checkpoint holds (those that existed when its barrier
    /// was injected); a job started later begins afresh after a restore.
    pub jobs: Vec<String>,
    /// Every job's source split offsets at this epoch: job → `fragment/split` → offset.
    pub sources: BTreeMap<String, BTreeMap<String, u64>>,
    pub files: Vec<CheckpointFile>,
    /// Bytes and files this checkpoint uploaded (files already in the store are shared).
    pub uploaded_bytes: u64,
    pub uploaded_files: u64,
}

impl Manifest {
    pub fn object_name(epoch: u64) -> String {
        format!("manifests/{epoch:020}.json")
    }

    /// The epoch of a manifest object's name (relative to `manifests/`).
    pub fn epoch_of(name: &str) -> Option<u64> {
        name.strip_suffix(".json")?.parse().ok()
    }

    /// Total size of the state in this checkpoint.
    pub fn state_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}
