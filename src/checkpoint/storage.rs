//! [`CheckpointStorage`]: the object store checkpoints are uploaded to.
//!
//! A local directory by default (`<data-dir>/checkpoints`), or `s3://bucket/prefix`
//! through object_store's S3 client (endpoint, region and credentials from flags or the
//! usual AWS variables). Layout under the root:
//!
//! - `sst/<file>.sst` — RocksDB's table files, immutable and uniquely named, so each is
//!   uploaded once and shared by every checkpoint that contains it;
//! - `epochs/<epoch>/<file>` — the other files of one checkpoint (RocksDB's MANIFEST,
//!   CURRENT, OPTIONS, WAL);
//! - `manifests/<epoch>.json` — written last: an epoch is committed once it exists.

use crate::config::{Config, S3Options};
use crate::error::{EddyError, Result};
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use std::sync::Arc;
use std::time::Duration;

/// Attempts per upload before the checkpoint is given up.
const PUT_ATTEMPTS: u32 = 5;

pub struct CheckpointStorage {
    store: Arc<dyn ObjectStore>,
    root: ObjectPath,
    /// Where it is, for logs.
    pub location: String,
}

fn storage_error(e: object_store::Error) -> EddyError {
    EddyError::caused_by(
        crate::error::sqlstate::IO_ERROR,
        format!("checkpoint storage: {e}"),
        e,
    )
}

impl CheckpointStorage {
    /// The state store the configuration names.
    pub fn open(config: &Config) -> Result<Self> {
        let location = config.state_store_location();
        match location.strip_prefix("s3://") {
            Some(rest) => {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                Self::s3(bucket, prefix, &config.s3, location.clone())
            }
            None => {
                std::fs::create_dir_all(&location)?;
                let store = object_store::local::LocalFileSystem::new_with_prefix(&location)
                    .map_err(storage_error)?;
                Ok(Self {
                    store: Arc::new(store),
                    root: ObjectPath::default(),
                    location,
                })
            }
        }
    }

    fn s3(bucket: &str, prefix: &str, options: &S3Options, location: String) -> Result<Self> {
        Ok(Self {
            store: crate::connectors::object_location::s3_store(bucket, options)?,
            root: ObjectPath::from(prefix),
            location,
        })
    }

    /// The object path of `relative` (e.g. `sst/000012.sst`) under the root.
    pub fn path(&self, relative: &str) -> ObjectPath {
        relative
            .split('/')
            .fold(self.root.clone(), |path, part| path.join(part))
    }

    /// Uploads an object, retrying with backoff.
    pub async fn put(&self, relative: &str, bytes: Bytes) -> Result<()> {
        let path = self.path(relative);
        let mut delay = Duration::from_millis(100);
        let mut attempt = 1;
        loop {
            match self.store.put(&path, PutPayload::from(bytes.clone())).await {
                Ok(_) => return Ok(()),
                Err(e) if attempt < PUT_ATTEMPTS => {
                    tracing::warn!("upload of {relative} failed (attempt {attempt}): {e}");
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                    attempt += 1;
                }
                Err(e) => return Err(storage_error(e)),
            }
        }
    }

    pub async fn get(&self, relative: &str) -> Result<Bytes> {
        let result = self
            .store
            .get(&self.path(relative))
            .await
            .map_err(storage_error)?;
        result.bytes().await.map_err(storage_error)
    }

    /// The names of the objects directly or deeper under `relative`, relative to it.
    pub async fn list(&self, relative: &str) -> Result<Vec<String>> {
        let prefix = self.path(relative);
        let objects: Vec<_> = self
            .store
            .list(Some(&prefix))
            .try_collect()
            .await
            .map_err(storage_error)?;
        Ok(objects
            .into_iter()
            .filter_map(|o| {
                o.location
                    .prefix_match(&prefix)
                    .map(|parts| parts.map(|p| p.as_ref().to_string()).collect::<Vec<_>>())
                    .map(|parts| parts.join("/"))
            })
            .collect())
    }

    pub async fn delete(&self, relative: &str) -> Result<()> {
        match self.store.delete(&self.path(relative)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(storage_error(e)),
        }
    }
}
