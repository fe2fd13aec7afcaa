//! Where files live: a local directory or `s3://bucket/prefix`, as an `object_store`
//! store and a prefix in it. Checkpoints and file sinks use the same S3 client
//! settings: endpoint, region and credentials from the server's flags, else the usual
//! AWS variables.

use crate::config::S3Options;
use crate::error::{EddyError, Result};
use object_store::ObjectStore;
use object_store::path::Path as ObjectPath;
use std::sync::Arc;

pub struct ObjectLocation {
    pub store: Arc<dyn ObjectStore>,
    /// The directory inside the store.
    pub prefix: ObjectPath,
}

impl ObjectLocation {
    /// `s3://bucket/prefix` through S3, anything else as a local directory (created if
    /// missing).
    pub fn open(location: &str, s3: &S3Options) -> Result<Self> {
        match location.strip_prefix("s3://") {
            Some(rest) => {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(EddyError::new(
                        crate::error::sqlstate::INVALID_PARAMETER_VALUE,
                        format!("'{location}' names no bucket"),
                    ));
                }
                Ok(Self {
                    store: s3_store(bucket, s3)?,
                    prefix: ObjectPath::from(prefix.trim_end_matches('/')),
                })
            }
            None => {
                std::fs::create_dir_all(location).map_err(|e| {
                    EddyError::new(
                        crate::error::sqlstate::IO_ERROR,
                        format!("cannot create directory '{location}': {e}"),
                    )
                })?;
                let store = object_store::local::LocalFileSystem::new_with_prefix(location)
                    .map_err(object_store_error)?;
                Ok(Self {
                    store: Arc::new(store),
                    prefix: ObjectPath::default(),
                })
            }
        }
    }

    /// The object path of `relative` (`a/b.json`) under the prefix.
    pub fn path(&self, relative: &str) -> ObjectPath {
        relative
            .split('/')
            .filter(|p| !p.is_empty())
            .fold(self.prefix.clone(), |path, part| path.join(part))
    }

    /// Every object under `dir` (none when it does not exist): its path, and the parts of
    /// that path below `dir` (`["00042", "00001.messages"]`).
    pub async fn list_below(&self, dir: &ObjectPath) -> Result<Vec<(ObjectPath, Vec<String>)>> {
        use futures::TryStreamExt;
        let listed: Vec<_> = match self.store.list(Some(dir)).try_collect().await {
            Ok(listed) => listed,
            Err(object_store::Error::NotFound { .. }) => vec![],
            Err(e) => return Err(object_store_error(e)),
        };
        Ok(listed
            .into_iter()
            .filter_map(|object| {
                let parts = object
                    .location
                    .prefix_match(dir)?
                    .map(|p| p.as_ref().to_string())
                    .collect();
                Some((object.location, parts))
            })
            .collect())
    }
}

pub fn object_store_error(e: object_store::Error) -> EddyError {
    EddyError::from(e)
}

/// An S3 client for `bucket`.
pub fn s3_store(bucket: &str, options: &S3Options) -> Result<Arc<dyn ObjectStore>> {
    let mut builder =
        object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket.to_string());
    let endpoint = options
        .endpoint
        .clone()
        .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok());
    if let Some(endpoint) = endpoint {
        builder = builder
            .with_allow_http(endpoint.starts_with("http://"))
            .with_endpoint(endpoint);
    }
    let region = options
        .region
        .clone()
        .or_else(|| std::env::var("AWS_REGION").ok())
        .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok())
        .unwrap_or_else(|| "us-east-1".into());
    builder = builder.with_region(region);
    if let Some(key) = &options.access_key_id {
        builder = builder.with_access_key_id(key.clone());
    }
    if let Some(secret) = &options.secret_access_key {
        builder = builder.with_secret_access_key(secret.clone());
    }
    Ok(Arc::new(builder.build().map_err(object_store_error)?))
}
