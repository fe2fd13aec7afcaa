//! Sink connectors: where a sink's rows go.
//!
//! `CREATE SINK ... WITH (connector = '...', ...) [FORMAT ... ENCODE ...]` is checked here
//! (unknown or missing options are errors naming the option), and the connector gives the
//! runtime one [`SinkWriter`](crate::stream::sink::SinkWriter) per subtask:
//!
//! - [`file`]: files on a local path or S3, one per epoch and subtask, published only
//!   once the epoch's checkpoint is committed (exactly once);
//! - [`postgres`]: upserts and deletes into a PostgreSQL table, one transaction per
//!   epoch (at least once, converging to the query's result);
//! - [`kafka`]: JSON or Avro messages, plain, upsert (tombstones) or Debezium envelopes:
//!   at least once (every epoch's messages acknowledged before its barrier passes), or
//!   exactly once (`sink.delivery = 'exactly_once'`: staged per epoch, published once the
//!   epoch's checkpoint is committed, see [`kafka_commit`]).
//!
//! (`blackhole`, which only counts rows, is the runtime's own.)

pub mod encode;
pub mod file;
pub mod kafka;
pub mod kafka_commit;
pub mod postgres;

use crate::config::S3Options;
use crate::error::{EddyError, Result, sqlstate};
use crate::stream::sink::SinkFactory;
use crate::stream::{Op, StreamChunk};
use arrow::array::{BooleanArray, RecordBatch};
use arrow::datatypes::SchemaRef;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What a connector needs to know about the sink besides its options.
pub struct SinkContext<'a> {
    pub name: &'a str,
    /// The sink's relation id (stable across renames).
    pub id: u32,
    /// The sink's columns (its query's output).
    pub schema: SchemaRef,
    /// The query updates and deletes rows (a stream with keys), rather than only
    /// appending them.
    pub updating: bool,
    pub s3: &'a S3Options,
    /// The state store's location (`Config::state_store_location`): where sinks that
    /// publish at commit stage their epochs, so a committed checkpoint's promise
    /// survives the loss of the data directory.
    pub state_store: &'a str,
}

/// What a sink that publishes at commit does when checkpoints commit and when its job
/// starts again.
#[async_trait::async_trait]
pub trait SinkCommitter: Send + Sync {
    /// Publishes what was staged for epochs up to `epoch` (now committed); returns how
    /// many staged parts it published.
    async fn publish_upto(&self, epoch: u64) -> Result<usize>;
    /// Before the sink's job runs again with the state of epoch `resumed_at` (the
    /// committed checkpoint, or the last barrier when every job was paused at it):
    /// epochs up to `committed` are published, those after `resumed_at` dropped (their
    /// rows come again); those between wait for their checkpoints to commit.
    async fn recover(&self, committed: u64, resumed_at: u64) -> Result<()>;
}

/// A sink connector ready to start.
pub struct OpenedSink {
    pub factory: Arc<dyn SinkFactory>,
    /// For sinks that publish at commit (files, exactly-once Kafka): what the checkpoint
    /// coordinator and recovery call.
    pub committer: Option<Arc<dyn SinkCommitter>>,
}

pub const CONNECTORS: &str = "blackhole, file, s3, postgres, kafka";

pub fn invalid(message: impl Into<String>) -> EddyError {
    EddyError::new(sqlstate::INVALID_PARAMETER_VALUE, message)
}

/// Builds a sink connector from its options. `check_target` (at `CREATE SINK`) also
/// makes sure the target can be reached and fits the sink (a PostgreSQL table with the
/// sink's columns); a sink restarted with the server does not wait for that.
pub async fn open(
    options: &BTreeMap<String, String>,
    context: &SinkContext<'_>,
    check_target: bool,
) -> Result<OpenedSink> {
    let connector = options
        .get("connector")
        .map(|c| c.to_ascii_lowercase())
        .ok_or_else(|| {
            invalid(format!(
                "a sink needs WITH (connector = '...'); available: {CONNECTORS}"
            ))
        })?;
    match connector.as_str() {
        "file" | "fs" | "s3" => {
            let spec = file::FileSinkSpec::from_options(&connector, options, context)?;
            let committer = Arc::new(file::FileCommitter::new(&spec));
            Ok(OpenedSink {
                factory: Arc::new(spec),
                committer: Some(committer),
            })
        }
        "kafka" => {
            let spec = kafka::KafkaSinkSpec::from_options(options, context)?;
            if check_target {
                spec.check_target()?;
            }
            let committer = spec
                .exactly_once_committer()?
                .map(|c| Arc::new(c) as Arc<dyn SinkCommitter>);
            Ok(OpenedSink {
                factory: Arc::new(spec),
                committer,
            })
        }
        "postgres" => {
            let spec = postgres::PostgresSinkSpec::from_options(options, context)?;
            let spec = if check_target {
                spec.resolve_target().await?
            } else {
                spec
            };
            Ok(OpenedSink {
                factory: Arc::new(spec),
                committer: None,
            })
        }
        other => Err(EddyError::not_supported(format!(
            "unsupported sink type {other}: sink connector '{other}' is not supported; available: {CONNECTORS} (and CREATE SINK ... INTO table)"
        ))),
    }
}

/// Refuses options a connector does not know, naming the first.
pub fn check_known(
    connector: &str,
    options: &BTreeMap<String, String>,
    known: &[&str],
) -> Result<()> {
    for key in options.keys() {
        let common = matches!(
            key.as_str(),
            "connector" | "type" | "force_append_only" | "primary_key" | "format" | "encode"
        );
        if !common && !known.contains(&key.as_str()) {
            return Err(invalid(format!(
                "unknown option '{key}' for sink connector {connector}"
            )));
        }
    }
    Ok(())
}

/// How a sink treats updates and deletes (`type`, `force_append_only`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkMode {
    /// Rows are appended; with `force_append_only` the deletes (and the old halves of
    /// updates) of an updating query are dropped.
    AppendOnly,
    /// Rows are upserted and deleted by the primary key.
    Upsert,
}

impl SinkMode {
    /// The mode the options ask for (`default` when `type` is not given), checked
    /// against the query.
    pub fn from_options(
        options: &BTreeMap<String, String>,
        context: &SinkContext<'_>,
        default: SinkMode,
        upsert_allowed: bool,
    ) -> Result<Self> {
        let mode = match options
            .get("type")
            .map(|t| t.to_ascii_lowercase())
            .as_deref()
        {
            None => default,
            Some("append-only") => SinkMode::AppendOnly,
            Some("upsert") if upsert_allowed => SinkMode::Upsert,
            Some(other) => {
                return Err(invalid(format!(
                    "invalid sink type '{other}'; expected {}",
                    if upsert_allowed {
                        "'append-only' or 'upsert'"
                    } else {
                        "'append-only'"
                    }
                )));
            }
        };
        let forced = match options
            .get("force_append_only")
            .map(|v| v.to_ascii_lowercase())
        {
            None => false,
            Some(v) if v == "true" => true,
            Some(v) if v == "false" => false,
            Some(v) => {
                return Err(invalid(format!(
                    "invalid value for option force_append_only: '{v}' (true or false)"
                )));
            }
        };
        if mode == SinkMode::AppendOnly && context.updating && !forced {
            return Err(invalid(format!(
                "sink \"{}\" is append-only but its query updates or deletes rows; {}set \
                 force_append_only = 'true' to keep only the inserted rows",
                context.name,
                if upsert_allowed {
                    "use type = 'upsert' with a primary_key, or "
                } else {
                    ""
                }
            )));
        }
        Ok(mode)
    }
}

/// The sink columns `primary_key = 'a, b'` names, by index.
pub fn primary_key(
    options: &BTreeMap<String, String>,
    context: &SinkContext<'_>,
) -> Result<Vec<usize>> {
    let Some(list) = options.get("primary_key") else {
        return Ok(vec![]);
    };
    list.split(',')
        .map(|name| {
            let name = name.trim().trim_matches('"');
            context
                .schema
                .fields()
                .iter()
                .position(|f| f.name() == name)
                .ok_or_else(|| {
                    EddyError::new(
                        sqlstate::UNDEFINED_COLUMN,
                        format!(
                            "primary_key column \"{name}\" is not a column of sink \"{}\"",
                            context.name
                        ),
                    )
                })
        })
        .collect()
}

/// The rows of a chunk that insert (inserts and the new halves of updates): what an
/// append-only sink writes.
pub fn inserted_rows(chunk: &StreamChunk) -> Result<RecordBatch> {
    if chunk.ops.iter().all(|op| *op == Op::Insert) {
        return Ok(chunk.batch.clone());
    }
    let keep: BooleanArray = chunk.ops.iter().map(|op| Some(op.is_insert())).collect();
    Ok(arrow::compute::filter_record_batch(&chunk.batch, &keep)?)
}

/// The directory a file sink writes to, from its options: `path` (`connector = 'file'`,
/// a local directory or `s3://bucket/prefix`), `fs.path` (`'fs'`), or `s3.bucket_name`
/// and `s3.path` (`'s3'`, whose `s3.region_name`, `s3.endpoint_url` and
/// `s3.credentials.*` override the server's S3 settings).
pub fn object_location_for(
    connector: &str,
    options: &BTreeMap<String, String>,
    s3: &S3Options,
) -> Result<crate::connectors::object_location::ObjectLocation> {
    use crate::connectors::object_location::ObjectLocation;
    let required = |key: &str| {
        options
            .get(key)
            .filter(|v| !v.trim().is_empty())
            .ok_or_else(|| invalid(format!("sink connector {connector} needs option {key}")))
    };
    match connector {
        "s3" => {
            let bucket = required("s3.bucket_name")?;
            let path = options.get("s3.path").map(String::as_str).unwrap_or("");
            let settings = S3Options {
                endpoint: options
                    .get("s3.endpoint_url")
                    .or(s3.endpoint.as_ref())
                    .cloned(),
                region: options
                    .get("s3.region_name")
                    .or(s3.region.as_ref())
                    .cloned(),
                access_key_id: options
                    .get("s3.credentials.access")
                    .or(s3.access_key_id.as_ref())
                    .cloned(),
                secret_access_key: options
                    .get("s3.credentials.secret")
                    .or(s3.secret_access_key.as_ref())
                    .cloned(),
            };
            ObjectLocation::open(
                &format!("s3://{bucket}/{}", path.trim_start_matches('/')),
                &settings,
            )
        }
        "fs" => ObjectLocation::open(required("fs.path")?, s3),
        _ => ObjectLocation::open(required("path")?, s3),
    }
}
