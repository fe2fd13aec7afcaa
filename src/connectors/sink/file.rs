//! The file sink: `connector = 'file'` (`path` a local directory or `s3://bucket/prefix`),
//! `'fs'` (`fs.path`) or `'s3'` (`s3.bucket_name`, `s3.path`, ...), with
//! `FORMAT PLAIN ENCODE JSON | CSV | PARQUET`.
//!
//! Exactly once, as Flink's file sink does it: each subtask encodes an epoch's rows in
//! memory and, at the epoch's barrier, writes them under `_staging/<sink>/<epoch>/`
//! before acknowledging the barrier. Once the checkpoint holding that epoch is committed,
//! the [`FileCommitter`] moves the staged files to their final names, `<sink>-<epoch>-
//! <subtask>-<part>.<ext>` in the directory, so readers never see part of an epoch.
//! After a crash the job resumes from checkpoint *c*: staged epochs up to *c* are
//! published (their rows are in the checkpoint's past), later ones are deleted (their
//! rows come again). Final names are fixed by epoch, subtask and part, so publishing twice
//! writes the same file. A file rolls over at the barrier and every `max_row_count` rows.

use super::encode::{FileEncoder, FileEncoding};
use super::object_location_for;
use super::{SinkContext, SinkMode, check_known, inserted_rows, invalid};
use crate::connectors::object_location::{ObjectLocation, object_store_error};
use crate::error::Result;
use crate::stream::StreamChunk;
use crate::stream::sink::{SinkFactory, SinkWriter};
use arrow::datatypes::SchemaRef;
use object_store::{ObjectStoreExt, PutPayload};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Where staged files wait for their epoch's commit, under the sink's directory (a name
/// starting with `_` is skipped by the usual readers of a directory of files).
const STAGING: &str = "_staging";

pub struct FileSinkSpec {
    sink: String,
    location: Arc<ObjectLocation>,
    encoding: FileEncoding,
    schema: SchemaRef,
    max_rows_per_file: usize,
}

impl FileSinkSpec {
    pub fn from_options(
        connector: &str,
        options: &BTreeMap<String, String>,
        context: &SinkContext<'_>,
    ) -> Result<Self> {
        let mut encode_free = options.clone();
        encode_free.retain(|k, _| !k.starts_with("encode."));
        let known: &[&str] = match connector {
            "s3" => &[
                "s3.bucket_name",
                "s3.path",
                "s3.region_name",
                "s3.endpoint_url",
                "s3.credentials.access",
                "s3.credentials.secret",
                "max_row_count",
            ],
            "fs" => &["fs.path", "max_row_count"],
            _ => &["path", "max_row_count"],
        };
        check_known(connector, &encode_free, known)?;
        let encoding = FileEncoding::from_options(options)?;
        let location = object_location_for(connector, options, context.s3)?;
        SinkMode::from_options(options, context, SinkMode::AppendOnly, false)?;
        let max_rows_per_file = match options.get("max_row_count") {
            Some(v) => match crate::connectors::parse_option::<usize>("max_row_count", v)? {
                0 => return Err(invalid("max_row_count must be at least 1")),
                n => n,
            },
            None => usize::MAX,
        };
        Ok(Self {
            sink: context.name.to_string(),
            location: Arc::new(location),
            encoding,
            schema: context.schema.clone(),
            max_rows_per_file,
        })
    }
}

impl SinkFactory for FileSinkSpec {
    fn name(&self) -> &'static str {
        "FileSink"
    }

    fn writer(&self, subtask: usize) -> Result<Box<dyn SinkWriter>> {
        Ok(Box::new(FileSinkWriter {
            sink: self.sink.clone(),
            location: self.location.clone(),
            encoding: self.encoding.clone(),
            schema: self.schema.clone(),
            max_rows_per_file: self.max_rows_per_file,
            subtask,
            open: None,
            finished: Vec::new(),
        }))
    }
}

/// The final name of a file: epoch, subtask and part, zero-padded so names sort in
/// epoch order.
fn file_name(sink: &str, epoch: u64, subtask: usize, part: usize, extension: &str) -> String {
    format!("{sink}-{epoch:020}-{subtask:04}-{part:04}.{extension}")
}

struct FileSinkWriter {
    sink: String,
    location: Arc<ObjectLocation>,
    encoding: FileEncoding,
    schema: SchemaRef,
    max_rows_per_file: usize,
    subtask: usize,
    /// The file being filled.
    open: Option<FileEncoder>,
    /// Files of this epoch that reached `max_row_count`.
    finished: Vec<Vec<u8>>,
}

#[async_trait::async_trait]
impl SinkWriter for FileSinkWriter {
    async fn write(&mut self, chunk: StreamChunk) -> Result<()> {
        let mut rows = inserted_rows(&chunk)?;
        while rows.num_rows() > 0 {
            let encoder = match &mut self.open {
                Some(encoder) => encoder,
                None => self
                    .open
                    .insert(FileEncoder::new(&self.encoding, &self.schema)?),
            };
            let room = self.max_rows_per_file - encoder.rows();
            let take = room.min(rows.num_rows());
            encoder.write(&rows.slice(0, take))?;
            rows = rows.slice(take, rows.num_rows() - take);
            if encoder.rows() >= self.max_rows_per_file {
                let full = self.open.take().expect("just written");
                self.finished.push(full.finish()?);
            }
        }
        Ok(())
    }

    async fn barrier(&mut self, epoch: u64) -> Result<()> {
        if let Some(encoder) = self.open.take() {
            self.finished.push(encoder.finish()?);
        }
        for (part, bytes) in std::mem::take(&mut self.finished).into_iter().enumerate() {
            let name = file_name(
                &self.sink,
                epoch,
                self.subtask,
                part,
                self.encoding.extension(),
            );
            let staged = self
                .location
                .path(&format!("{STAGING}/{}/{epoch:020}/{name}", self.sink));
            self.location
                .store
                .put(&staged, PutPayload::from(bytes))
                .await
                .map_err(object_store_error)?;
        }
        Ok(())
    }
}

/// Publishes a file sink's staged files once their epochs are committed.
pub struct FileCommitter {
    sink: String,
    location: Arc<ObjectLocation>,
    /// One publication or recovery at a time.
    busy: tokio::sync::Mutex<()>,
}

impl FileCommitter {
    pub fn new(spec: &FileSinkSpec) -> Self {
        Self {
            sink: spec.sink.clone(),
            location: spec.location.clone(),
            busy: tokio::sync::Mutex::new(()),
        }
    }

    /// The staged files: (epoch, staged path, final name).
    async fn staged(&self) -> Result<Vec<(u64, object_store::path::Path, String)>> {
        let prefix = self.location.path(&format!("{STAGING}/{}", self.sink));
        let mut staged = Vec::new();
        for (path, parts) in self.location.list_below(&prefix).await? {
            if let [epoch, name] = parts.as_slice()
                && let Ok(epoch) = epoch.parse::<u64>()
            {
                staged.push((epoch, path, name.clone()));
            }
        }
        staged.sort_by(|a, b| (a.0, &a.2).cmp(&(b.0, &b.2)));
        Ok(staged)
    }
}

#[async_trait::async_trait]
impl super::SinkCommitter for FileCommitter {
    /// Moves the files staged for epochs up to `epoch` (now committed) to their final
    /// names; returns how many.
    async fn publish_upto(&self, epoch: u64) -> Result<usize> {
        let _busy = self.busy.lock().await;
        let mut published = 0;
        for (staged_epoch, from, name) in self.staged().await? {
            if staged_epoch > epoch {
                continue;
            }
            match self
                .location
                .store
                .rename(&from, &self.location.path(&name))
                .await
            {
                // Published meanwhile (the same bytes, under the same name).
                Ok(()) | Err(object_store::Error::NotFound { .. }) => published += 1,
                Err(e) => return Err(object_store_error(e)),
            }
        }
        Ok(published)
    }

    /// Files staged for epochs up to `committed` are published, those after `resumed_at`
    /// deleted (their rows come again).
    async fn recover(&self, committed: u64, resumed_at: u64) -> Result<()> {
        self.publish_upto(committed).await?;
        let _busy = self.busy.lock().await;
        for (epoch, path, _) in self.staged().await? {
            if epoch <= resumed_at {
                continue;
            }
            match self.location.store.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(object_store_error(e)),
            }
        }
        Ok(())
    }
}
