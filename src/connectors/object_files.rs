//! The `file` connector over object storage: `path = 's3://bucket/prefix/*.parquet'` (or a
//! local directory or glob) with `ENCODE PARQUET | CSV | JSON`, and, with
//! `refresh.interval.sec`, files that appear later picked up as they come.
//!
//! One split reads the files in name order. A reader thread with its own runtime lists and
//! fetches them through `object_store` and hands decoded batches over a small bounded
//! channel, so the source task never blocks on the network. The split's position is
//! (files finished, rows read of the next one), packed in one number: a restart skips the
//! finished files and the rows already read. New files must sort after those already read
//! (time-stamped names do), as a file that sorts earlier would shift the count.

use super::object_location::ObjectLocation;
use super::records::{self, RecordFormat};
use crate::config::S3Options;
use crate::error::{EddyError, Result, sqlstate};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::time::Duration;

/// Batches decoded ahead of the source task.
const READ_AHEAD: usize = 4;
const ROWS_PER_BATCH: usize = 4096;
/// Bits of the position that count rows within a file.
const ROW_BITS: u32 = 40;

#[derive(Debug, Clone, PartialEq)]
pub enum FileFormat {
    Records(RecordFormat, /* header line */ bool),
    Parquet,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ObjectFilesSpec {
    pub schema: SchemaRef,
    /// The directory part of the path (`s3://bucket/prefix` or a local directory).
    pub directory: String,
    /// The file name pattern (`*.parquet`; `*` when the path names a directory).
    pub pattern: String,
    pub format: FileFormat,
    /// Look for new files this often; `None`: the source ends after the files listed first.
    pub refresh: Option<Duration>,
    pub s3: S3Options,
}

fn invalid(message: impl Into<String>) -> EddyError {
    EddyError::new(sqlstate::INVALID_PARAMETER_VALUE, message)
}

/// Whether the `file` connector's options need this reader (rather than the local
/// line reader): an S3 path, Parquet, or a refresh interval.
pub fn wanted(options: &BTreeMap<String, String>) -> bool {
    options.get("path").is_some_and(|p| p.starts_with("s3://"))
        || options.get("encode").is_some_and(|e| e == "parquet")
        || options.contains_key("refresh.interval.sec")
}

impl ObjectFilesSpec {
    pub fn from_options(schema: &SchemaRef, options: &BTreeMap<String, String>) -> Result<Self> {
        for key in options.keys() {
            let known = matches!(
                key.as_str(),
                "connector"
                    | "path"
                    | "format"
                    | "encode"
                    | "encode.delimiter"
                    | "encode.without_header"
                    | "refresh.interval.sec"
                    | "s3.region_name"
                    | "s3.endpoint_url"
                    | "s3.credentials.access"
                    | "s3.credentials.secret"
            );
            if !known {
                return Err(invalid(format!(
                    "unknown option '{key}' for connector file"
                )));
            }
        }
        let path = options
            .get("path")
            .ok_or_else(|| invalid("a file source needs WITH (path = '...')"))?;
        let format = match options.get("encode").map(String::as_str) {
            Some("parquet") => FileFormat::Parquet,
            Some("json") => FileFormat::Records(RecordFormat::Json, false),
            Some("csv") => {
                let (delimiter, header) = records::csv_options(options)?;
                FileFormat::Records(RecordFormat::Csv { delimiter }, header)
            }
            _ => {
                return Err(invalid(
                    "a file source needs FORMAT PLAIN ENCODE CSV, JSON or PARQUET",
                ));
            }
        };
        let refresh = match options.get("refresh.interval.sec") {
            Some(v) => match super::parse_option::<f64>("refresh.interval.sec", v)? {
                s if s > 0.0 => Some(Duration::from_secs_f64(s)),
                _ => return Err(invalid("refresh.interval.sec must be positive")),
            },
            None => None,
        };
        // The last path segment is a pattern when it has one; else the path is a directory.
        let (directory, pattern) = match path.rsplit_once('/') {
            Some((dir, name)) if name.contains(['*', '?', '[']) => {
                (dir.to_string(), name.to_string())
            }
            _ => (path.trim_end_matches('/').to_string(), "*".to_string()),
        };
        glob::Pattern::new(&pattern).map_err(|e| invalid(format!("invalid path pattern: {e}")))?;
        let spec = Self {
            schema: schema.clone(),
            directory,
            pattern,
            format,
            refresh,
            s3: S3Options {
                endpoint: options.get("s3.endpoint_url").cloned(),
                region: options.get("s3.region_name").cloned(),
                access_key_id: options.get("s3.credentials.access").cloned(),
                secret_access_key: options.get("s3.credentials.secret").cloned(),
            },
        };
        // The location must be readable now, not when a job starts.
        spec.on_reader_thread(|spec| async move { spec.list().await.map(|_| ()) })?;
        Ok(spec)
    }

    /// Runs `work` on a thread with its own runtime (object_store needs one) and waits.
    fn on_reader_thread<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(ObjectFilesSpec) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T>>,
        T: Send + 'static,
    {
        let spec = self.clone();
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| EddyError::internal(e.to_string()))?
                .block_on(work(spec))
        })
        .join()
        .map_err(|_| EddyError::internal("the file listing thread panicked"))?
    }

    fn location(&self) -> Result<ObjectLocation> {
        ObjectLocation::open(&self.directory, &self.s3)
    }

    /// The matching files directly in the directory, by name.
    async fn list(&self) -> Result<Vec<(String, object_store::path::Path)>> {
        use futures::TryStreamExt;
        let location = self.location()?;
        let pattern = glob::Pattern::new(&self.pattern).expect("checked when created");
        let listed: Vec<object_store::ObjectMeta> = location
            .store
            .list(Some(&location.prefix))
            .try_collect()
            .await
            .map_err(super::object_location::object_store_error)?;
        let mut files: Vec<(String, object_store::path::Path)> = listed
            .into_iter()
            .filter_map(|o| {
                let parts: Vec<String> = o
                    .location
                    .prefix_match(&location.prefix)?
                    .map(|p| p.as_ref().to_string())
                    .collect();
                // Directly in the directory, not staged or hidden.
                match parts.as_slice() {
                    [name] if pattern.matches(name) && !name.starts_with(['_', '.']) => {
                        Some((name.clone(), o.location.clone()))
                    }
                    _ => None,
                }
            })
            .collect();
        files.sort();
        Ok(files)
    }

    /// The reader of the one split, from `position` (see the module's doc).
    pub fn split_reader(&self, position: u64) -> ObjectFilesSplit {
        ObjectFilesSplit {
            spec: self.clone(),
            position,
            batches: None,
            malformed: 0,
            rejected: vec![],
            ended: false,
        }
    }

    /// Reads files from `position` on, sending (position after the batch, batch,
    /// malformed records); ends when the files are read (without a refresh interval) or
    /// the receiver is gone.
    async fn read(self, position: u64, out: SyncSender<Result<Option<Decoded>>>) {
        let mut done_files = (position >> ROW_BITS) as usize;
        let mut skip_rows = (position & ((1 << ROW_BITS) - 1)) as usize;
        loop {
            let files = match self.list().await {
                Ok(files) => files,
                Err(e) => {
                    let _ = out.send(Err(e));
                    return;
                }
            };
            let location = match self.location() {
                Ok(l) => l,
                Err(e) => {
                    let _ = out.send(Err(e));
                    return;
                }
            };
            while let Some((_, path)) = files.get(done_files) {
                let result = self
                    .read_file(&location, path, done_files, skip_rows, &out)
                    .await;
                match result {
                    Ok(true) => {}
                    Ok(false) => return, // the receiver is gone
                    Err(e) => {
                        let _ = out.send(Err(e));
                        return;
                    }
                }
                done_files += 1;
                skip_rows = 0;
                // The file is finished: the position moves to the next one.
                let next = (done_files as u64) << ROW_BITS;
                if out
                    .send(Ok(Some(Decoded::marker(next, &self.schema))))
                    .is_err()
                {
                    return;
                }
            }
            match self.refresh {
                Some(interval) => {
                    tokio::time::sleep(interval).await;
                    // Nothing new to say; but a job that stopped is noticed here.
                    let here = ((done_files as u64) << ROW_BITS) | skip_rows as u64;
                    if out
                        .send(Ok(Some(Decoded::marker(here, &self.schema))))
                        .is_err()
                    {
                        return;
                    }
                }
                None => {
                    let _ = out.send(Ok(None));
                    return;
                }
            }
        }
    }

    /// Sends one file's rows from `skip_rows` on; `Ok(false)` when the receiver is gone.
    async fn read_file(
        &self,
        location: &ObjectLocation,
        path: &object_store::path::Path,
        index: usize,
        skip_rows: usize,
        out: &SyncSender<Result<Option<Decoded>>>,
    ) -> Result<bool> {
        use object_store::ObjectStoreExt;
        let bytes = location
            .store
            .get(path)
            .await
            .map_err(super::object_location::object_store_error)?
            .bytes()
            .await
            .map_err(super::object_location::object_store_error)?;
        let mut row = 0usize;
        let mut send =
            |batch: RecordBatch, rejected: Vec<records::Rejected>, count: usize| -> bool {
                row += count;
                let position = ((index as u64) << ROW_BITS) | row as u64;
                out.send(Ok(Some(Decoded {
                    position,
                    batch,
                    rejected,
                })))
                .is_ok()
            };
        match &self.format {
            FileFormat::Parquet => {
                let reader =
                    datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(
                        bytes,
                        ROWS_PER_BATCH,
                    )
                    .map_err(|e| invalid(format!("{path} is not a readable Parquet file: {e}")))?;
                let mut seen = 0usize;
                for batch in reader {
                    let batch = batch.map_err(|e| invalid(format!("{path}: {e}")))?;
                    let rows = batch.num_rows();
                    let start = skip_rows.saturating_sub(seen).min(rows);
                    seen += rows;
                    let batch = batch.slice(start, rows - start);
                    let conformed = self.conform(&batch)?;
                    if !send(conformed, vec![], rows) {
                        return Ok(false);
                    }
                }
            }
            FileFormat::Records(format, header) => {
                let text = String::from_utf8_lossy(&bytes);
                let mut lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
                if *header && !lines.is_empty() {
                    lines.remove(0);
                }
                for (k, chunk) in lines.chunks(ROWS_PER_BATCH).enumerate() {
                    let first = k * ROWS_PER_BATCH;
                    let start = skip_rows.saturating_sub(first).min(chunk.len());
                    let (batch, rejected) =
                        records::decode_rejecting(&chunk[start..], &self.schema, format)?;
                    if !send(batch, rejected, chunk.len()) {
                        return Ok(false);
                    }
                }
            }
        }
        Ok(true)
    }

    /// A Parquet batch as the source's columns: by name, cast to the declared types,
    /// NULL for columns the file lacks.
    fn conform(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let columns = self
            .schema
            .fields()
            .iter()
            .map(|f| match batch.column_by_name(f.name()) {
                Some(c) => Ok(arrow::compute::cast(c, f.data_type())?),
                None => Ok(arrow::array::new_null_array(
                    f.data_type(),
                    batch.num_rows(),
                )),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}

/// A batch read, with the position after it.
struct Decoded {
    position: u64,
    batch: RecordBatch,
    /// The records of the batch that did not decode.
    rejected: Vec<records::Rejected>,
}

impl Decoded {
    /// No rows, only a new position (a file finished).
    fn marker(position: u64, schema: &SchemaRef) -> Self {
        Self {
            position,
            batch: RecordBatch::new_empty(schema.clone()),
            rejected: vec![],
        }
    }
}

/// The split of a `file` source over object storage.
pub struct ObjectFilesSplit {
    spec: ObjectFilesSpec,
    position: u64,
    batches: Option<Receiver<Result<Option<Decoded>>>>,
    malformed: u64,
    /// Records skipped since the reader last took them.
    pub(super) rejected: Vec<records::Rejected>,
    ended: bool,
}

impl ObjectFilesSplit {
    /// The next decoded batch if one is ready (an empty batch if not), `None` at the end.
    pub fn next_batch(&mut self, _max_rows: usize) -> Result<Option<RecordBatch>> {
        if self.ended {
            return Ok(None);
        }
        let receiver = self.batches.get_or_insert_with(|| {
            let (sender, receiver) = sync_channel(READ_AHEAD);
            let spec = self.spec.clone();
            let position = self.position;
            std::thread::spawn(move || {
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime.block_on(spec.read(position, sender)),
                    Err(e) => {
                        let _ = sender.send(Err(EddyError::internal(e.to_string())));
                    }
                }
            });
            receiver
        });
        match receiver.try_recv() {
            Ok(Ok(Some(decoded))) => {
                self.position = decoded.position;
                self.malformed += decoded.rejected.len() as u64;
                self.rejected.extend(decoded.rejected);
                Ok(Some(decoded.batch))
            }
            Ok(Ok(None)) => {
                self.ended = true;
                Ok(None)
            }
            Ok(Err(e)) => Err(e),
            Err(TryRecvError::Empty) => Ok(Some(RecordBatch::new_empty(self.spec.schema.clone()))),
            Err(TryRecvError::Disconnected) => {
                Err(EddyError::internal("the file reader thread ended"))
            }
        }
    }

    pub fn offset(&self) -> u64 {
        self.position
    }

    pub fn malformed(&self) -> u64 {
        self.malformed
    }
}
