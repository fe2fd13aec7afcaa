//! The `kafka` source: a topic's messages, one split per partition.
//!
//! ```sql
//! CREATE SOURCE s (...) WITH (connector = 'kafka', topic = 'events',
//!     properties.bootstrap.server = 'host:9092',
//!     scan.startup.mode = 'earliest' | 'latest' | 'timestamp',
//!     scan.startup.timestamp.millis = '...')
//! FORMAT PLAIN ENCODE JSON | CSV [(delimiter = ',')] | BYTES;
//! ```
//!
//! Each message's value is one record (`ENCODE BYTES`: the value as the source's single
//! `BYTEA` column); a value that does not decode is skipped and counted as malformed. A
//! split's position is the next offset to read (stored as offset + 1, 0 meaning "not
//! started"): it goes into every checkpoint and the split resumes from it, so views over
//! the topic count every message once across crashes. A `latest` or `timestamp` start is
//! resolved to an offset when the split is first opened, so a checkpoint taken before any
//! message arrived still resumes where the job started. The partition count is read when
//! the source is created and when its jobs start.

use super::kafka_resume::{ResumeCheck, Verdict};
use super::records::{self, RecordFormat};
use crate::error::{EddyError, Result, sqlstate};
use arrow::array::{BinaryArray, RecordBatch};
use arrow::datatypes::{DataType, SchemaRef};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::Duration;

/// How long metadata and offset lookups may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a split asks for its partition's high watermark (for the lag), and how long
/// it waits for the answer.
const LAG_REFRESH: Duration = Duration::from_secs(2);
const LAG_TIMEOUT: Duration = Duration::from_millis(100);
/// The option where the partition count seen at `CREATE SOURCE` is kept, so jobs can
/// start while the broker is unreachable.
pub const PARTITIONS_OPTION: &str = "kafka.partitions";
/// The option where `INCLUDE ...` clauses are kept: `what[:header]=column;...`.
pub const INCLUDE_OPTION: &str = "kafka.include";

/// Message metadata a source carries as a column (`INCLUDE ...`).
#[derive(Debug, Clone, PartialEq)]
pub enum Metadata {
    /// The message key, `BYTEA`.
    Key,
    /// The partition number, as text.
    Partition,
    /// The offset, as text.
    Offset,
    /// The message timestamp, `TIMESTAMPTZ`.
    Timestamp,
    /// The value of the named header, `BYTEA`.
    Header(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum StartupMode {
    Earliest,
    Latest,
    /// The first message at or after this time (milliseconds since the epoch).
    Timestamp(i64),
}

#[derive(Debug, Clone, PartialEq)]
pub enum PayloadFormat {
    Records(RecordFormat),
    /// Avro in Confluent's wire format, schemas from a registry.
    Avro(std::sync::Arc<super::avro::AvroDecoder>),
    /// The raw value, as the one `BYTEA` column.
    Bytes,
}

#[derive(Debug, Clone, PartialEq)]
pub struct KafkaSpec {
    pub schema: SchemaRef,
    pub topic: String,
    pub brokers: String,
    pub startup: StartupMode,
    pub payload: PayloadFormat,
    pub partitions: u32,
    /// Other `properties.*` options, passed to the Kafka client as they are.
    pub properties: Vec<(String, String)>,
    /// Columns filled from message metadata, by column index.
    pub metadata: Vec<(usize, Metadata)>,
    /// The columns decoded from the message value (the others are metadata).
    pub value_schema: SchemaRef,
    /// How a message changes rows: appended (a source), or upserted/deleted by key (a
    /// table, see `session::kafka_tables`).
    pub envelope: Envelope,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Envelope {
    /// Each message a new row.
    Plain,
    /// The message key names the row; the value is its new contents, or none (a
    /// tombstone) to delete it.
    Upsert,
    /// Debezium's change envelope: `before`, `after` and `op`.
    Debezium,
}

fn invalid(message: impl Into<String>) -> EddyError {
    EddyError::new(sqlstate::INVALID_PARAMETER_VALUE, message)
}

impl KafkaSpec {
    pub fn from_options(schema: &SchemaRef, options: &BTreeMap<String, String>) -> Result<Self> {
        for key in options.keys() {
            let known = matches!(
                key.as_str(),
                "connector"
                    | "topic"
                    | "scan.startup.mode"
                    | "scan.startup.timestamp.millis"
                    | "format"
                    | "encode"
                    | "encode.delimiter"
                    | "encode.schema.registry"
                    | PARTITIONS_OPTION
                    | INCLUDE_OPTION
            ) || key.starts_with("properties.");
            if !known {
                return Err(invalid(format!(
                    "unknown option '{key}' for connector kafka"
                )));
            }
        }
        let required = |key: &str| {
            options
                .get(key)
                .filter(|v| !v.trim().is_empty())
                .cloned()
                .ok_or_else(|| invalid(format!("a kafka source needs option {key}")))
        };
        let topic = required("topic")?;
        let brokers = match options.get("properties.bootstrap.servers") {
            Some(b) => b.clone(),
            None => required("properties.bootstrap.server")?,
        };
        let startup = match options
            .get("scan.startup.mode")
            .map(|m| m.to_ascii_lowercase())
            .as_deref()
        {
            None | Some("earliest") => StartupMode::Earliest,
            Some("latest") => StartupMode::Latest,
            Some("timestamp") => {
                let millis = required("scan.startup.timestamp.millis")?;
                StartupMode::Timestamp(super::parse_option(
                    "scan.startup.timestamp.millis",
                    &millis,
                )?)
            }
            Some(other) => {
                return Err(invalid(format!(
                    "invalid scan.startup.mode '{other}': expected earliest, latest or timestamp"
                )));
            }
        };
        let envelope = match options
            .get("format")
            .map(|f| f.to_ascii_lowercase())
            .as_deref()
        {
            None | Some("plain") => Envelope::Plain,
            Some("upsert") => Envelope::Upsert,
            Some("debezium") => Envelope::Debezium,
            Some(other) => {
                return Err(EddyError::not_supported(format!(
                    "FORMAT {} is not supported for kafka; use PLAIN, UPSERT or DEBEZIUM",
                    other.to_ascii_uppercase()
                )));
            }
        };
        let mut metadata = Vec::new();
        for include in options
            .get(INCLUDE_OPTION)
            .map(|v| v.split(';').filter(|s| !s.is_empty()).collect::<Vec<_>>())
            .unwrap_or_default()
        {
            let (what, column) = include
                .split_once('=')
                .ok_or_else(|| invalid(format!("invalid INCLUDE '{include}'")))?;
            let kind = match what.split_once(':') {
                Some(("header", name)) => Metadata::Header(name.to_string()),
                _ => match what {
                    "key" => Metadata::Key,
                    "partition" => Metadata::Partition,
                    "offset" => Metadata::Offset,
                    "timestamp" => Metadata::Timestamp,
                    other => return Err(invalid(format!("INCLUDE {other} is not known"))),
                },
            };
            let index = schema
                .index_of(column)
                .map_err(|_| invalid(format!("INCLUDE column {column} is missing")))?;
            metadata.push((index, kind));
        }
        let value_schema = std::sync::Arc::new(arrow::datatypes::Schema::new(
            schema
                .fields()
                .iter()
                .enumerate()
                .filter(|(i, _)| !metadata.iter().any(|(m, _)| m == i))
                .map(|(_, f)| f.clone())
                .collect::<Vec<_>>(),
        ));
        let payload = match options
            .get("encode")
            .map(|e| e.to_ascii_lowercase())
            .as_deref()
        {
            Some("json") => PayloadFormat::Records(RecordFormat::Json),
            Some("csv") => PayloadFormat::Records(RecordFormat::Csv {
                delimiter: match options.get("encode.delimiter") {
                    Some(d) if d.chars().count() == 1 => d.chars().next().expect("one char"),
                    Some(d) => {
                        return Err(invalid(format!(
                            "delimiter must be one character, not '{d}'"
                        )));
                    }
                    None => ',',
                },
            }),
            Some("avro") => {
                let url = options
                    .get("encode.schema.registry")
                    .or_else(|| options.get("schema.registry"))
                    .ok_or_else(|| {
                        invalid("ENCODE AVRO needs its schema registry: ENCODE AVRO (schema.registry = 'http://...')")
                    })?;
                PayloadFormat::Avro(std::sync::Arc::new(super::avro::AvroDecoder::new(
                    super::schema_registry::SchemaRegistry::new(url)?,
                )))
            }
            Some("bytes") => {
                let one_bytea = value_schema.fields().len() == 1
                    && matches!(value_schema.field(0).data_type(), DataType::Binary);
                if !one_bytea {
                    return Err(invalid(
                        "ENCODE BYTES needs exactly one column, of type BYTEA",
                    ));
                }
                PayloadFormat::Bytes
            }
            Some(other) => {
                return Err(EddyError::not_supported(format!(
                    "ENCODE {} is not supported for kafka sources yet; use JSON, CSV, AVRO or BYTES",
                    other.to_ascii_uppercase()
                )));
            }
            None => {
                return Err(invalid(
                    "a kafka source needs FORMAT PLAIN ENCODE JSON | CSV | AVRO | BYTES",
                ));
            }
        };
        let properties: Vec<(String, String)> = options
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("properties.")?.to_string(), v.clone())))
            .filter(|(k, _)| k != "bootstrap.server" && k != "bootstrap.servers")
            .collect();
        let mut spec = Self {
            schema: schema.clone(),
            topic,
            brokers,
            startup,
            payload,
            partitions: 0,
            properties,
            metadata,
            value_schema,
            envelope,
        };
        let seen: Option<u32> = options.get(PARTITIONS_OPTION).and_then(|p| p.parse().ok());
        spec.partitions = match (spec.partition_count(), seen) {
            (Ok(now), seen) => now.max(seen.unwrap_or(0)),
            (Err(e), None) => return Err(e),
            (Err(e), Some(seen)) => {
                tracing::warn!(topic = %spec.topic, "{e}; using the {seen} partitions seen before");
                seen
            }
        };
        Ok(spec)
    }

    pub(crate) fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", format!("eddy-{}", self.topic))
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false");
        for (k, v) in &self.properties {
            config.set(k, v);
        }
        config
    }

    fn consumer(&self) -> Result<BaseConsumer> {
        let mut config = self.client_config();
        // A position the broker no longer has (deleted by retention) is read from the
        // partition's first message, not silently from its end (librdkafka's default).
        if !self
            .properties
            .iter()
            .any(|(k, _)| k == "auto.offset.reset")
        {
            config.set("auto.offset.reset", "earliest");
        }
        config.create().map_err(|e| {
            invalid(format!(
                "cannot create a Kafka client for '{}': {e}",
                self.brokers
            ))
        })
    }

    /// Points `consumer` at `offset` of `partition`.
    fn assign(&self, consumer: &BaseConsumer, partition: i32, offset: Offset) -> Result<()> {
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(&self.topic, partition, offset)
            .and_then(|()| consumer.assign(&assignment))
            .map_err(|e| {
                EddyError::new(
                    sqlstate::IO_ERROR,
                    format!(
                        "cannot read {}/{partition} from {offset:?}: {e}",
                        self.topic
                    ),
                )
            })
    }

    /// The topic's partition count, from the broker.
    fn partition_count(&self) -> Result<u32> {
        let consumer = self.consumer()?;
        let metadata = consumer
            .fetch_metadata(Some(&self.topic), LOOKUP_TIMEOUT)
            .map_err(|e| {
                EddyError::new(
                    sqlstate::IO_ERROR,
                    format!(
                        "cannot read topic '{}' from Kafka at {}: {e}",
                        self.topic, self.brokers
                    ),
                )
            })?;
        let partitions = metadata
            .topics()
            .iter()
            .find(|t| t.name() == self.topic)
            .filter(|t| t.error().is_none())
            .map(|t| t.partitions().len() as u32)
            .unwrap_or(0);
        if partitions == 0 {
            return Err(EddyError::new(
                sqlstate::UNDEFINED_OBJECT,
                format!("topic '{}' does not exist at {}", self.topic, self.brokers),
            ));
        }
        Ok(partitions)
    }

    /// A reader of partition `split`, from `position` (0: where the startup mode says;
    /// otherwise the next offset + 1, as recorded by a checkpoint). It connects when
    /// first read, so a broker that is down fails the job (which restarts), not its start.
    pub fn split_reader(&self, split: u32, position: u64) -> KafkaSplit {
        KafkaSplit {
            spec: self.clone(),
            partition: split as i32,
            position,
            consumer: None,
            next: None,
            resume_check: None,
            malformed: 0,
            rejected: vec![],
            high_watermark: None,
        }
    }

    /// A consumer of `partition` positioned at `position` (see [`KafkaSpec::split_reader`]);
    /// the offset it starts at, when known, and for a resumed partition the check that it
    /// really starts there.
    fn open(
        &self,
        partition: i32,
        position: u64,
    ) -> Result<(BaseConsumer, Option<i64>, Option<ResumeCheck>)> {
        let consumer = self.consumer()?;
        let lookup_failed = |e: rdkafka::error::KafkaError| {
            EddyError::new(
                sqlstate::IO_ERROR,
                format!(
                    "cannot find where to start reading {}/{partition}: {e}",
                    self.topic
                ),
            )
        };
        let start = if position > 0 {
            Offset::Offset(position as i64 - 1)
        } else {
            match self.startup {
                StartupMode::Earliest => Offset::Beginning,
                StartupMode::Latest => {
                    let (_, high) = consumer
                        .fetch_watermarks(&self.topic, partition, LOOKUP_TIMEOUT)
                        .map_err(lookup_failed)?;
                    Offset::Offset(high)
                }
                StartupMode::Timestamp(millis) => {
                    let mut wanted = TopicPartitionList::new();
                    wanted
                        .add_partition_offset(&self.topic, partition, Offset::Offset(millis))
                        .map_err(lookup_failed)?;
                    let found = consumer
                        .offsets_for_times(wanted, LOOKUP_TIMEOUT)
                        .map_err(lookup_failed)?;
                    found
                        .find_partition(&self.topic, partition)
                        .map(|p| p.offset())
                        .unwrap_or(Offset::End)
                }
            }
        };
        let next = match start {
            Offset::Offset(o) => Some(o),
            _ => None,
        };
        let check = match start {
            Offset::Offset(o) if position > 0 => {
                let (first, _) = consumer
                    .fetch_watermarks(&self.topic, partition, LOOKUP_TIMEOUT)
                    .map_err(lookup_failed)?;
                ResumeCheck::start(o, first)
            }
            _ => None,
        };
        let fetch_from = match &check {
            Some(check) => Offset::Offset(check.seek()),
            None => start,
        };
        self.assign(&consumer, partition, fetch_from)?;
        Ok((consumer, next, check))
    }
}

/// One partition being read.
pub struct KafkaSplit {
    spec: KafkaSpec,
    partition: i32,
    /// Where the split started (see [`KafkaSpec::split_reader`]).
    position: u64,
    consumer: Option<BaseConsumer>,
    /// The next offset to read, once known.
    next: Option<i64>,
    /// Set while a split resumed from a checkpoint has not read its first message.
    resume_check: Option<ResumeCheck>,
    malformed: u64,
    /// Messages skipped since the reader last took them.
    pub(super) rejected: Vec<records::Rejected>,
    /// The partition's high watermark and when it was asked for.
    high_watermark: Option<(i64, std::time::Instant)>,
}

impl KafkaSplit {
    /// The messages available now, at most `max_rows` (an empty batch when there are
    /// none: a topic never ends).
    pub fn next_batch(&mut self, max_rows: usize) -> Result<Option<RecordBatch>> {
        if self.consumer.is_none() {
            let (consumer, next, check) = self.spec.open(self.partition, self.position)?;
            self.consumer = Some(consumer);
            self.next = next;
            self.resume_check = check;
        }
        let consumer = self.consumer.as_ref().expect("opened above");
        let mut values: Vec<Option<Vec<u8>>> = Vec::new();
        let mut meta: Vec<MessageMetadata> = Vec::new();
        let wants_meta = !self.spec.metadata.is_empty();
        while values.len() < max_rows {
            match consumer.poll(Duration::ZERO) {
                None => break,
                Some(Ok(message)) => {
                    if let Some(check) = &mut self.resume_check {
                        match check.judge(message.offset()) {
                            Verdict::Drop => continue,
                            Verdict::SeekBack(offset) => {
                                self.spec.assign(
                                    consumer,
                                    self.partition,
                                    Offset::Offset(offset),
                                )?;
                                break;
                            }
                            Verdict::Deliver => {
                                if message.offset() > check.expected() {
                                    tracing::warn!(
                                        topic = %self.spec.topic,
                                        partition = self.partition,
                                        expected = check.expected(),
                                        found = message.offset(),
                                        "kafka: the partition resumes after the checkpoint's \
                                         position (compacted or deleted messages)"
                                    );
                                }
                                self.resume_check = None;
                            }
                        }
                    }
                    self.next = Some(message.offset() + 1);
                    values.push(message.payload().map(<[u8]>::to_vec));
                    if wants_meta {
                        meta.push(MessageMetadata::of(&message));
                    }
                }
                Some(Err(e)) => {
                    // The client reconnects by itself; the error is only worth a log line.
                    tracing::warn!(topic = %self.spec.topic, "kafka: {e}");
                    break;
                }
            }
        }
        if values.is_empty()
            && let Some(check) = &mut self.resume_check
            && let Some(Verdict::SeekBack(offset)) = check.silent()
        {
            self.spec
                .assign(consumer, self.partition, Offset::Offset(offset))?;
        }
        let (value_batch, keep) = match &self.spec.payload {
            PayloadFormat::Bytes => (
                RecordBatch::try_new(
                    self.spec.value_schema.clone(),
                    vec![std::sync::Arc::new(BinaryArray::from_iter(
                        values.iter().map(|v| v.as_deref()),
                    ))],
                )?,
                None,
            ),
            PayloadFormat::Avro(decoder) => {
                let decoded = values
                    .iter()
                    .map(|v| decoder.fields(v.as_deref(), &self.spec.value_schema))
                    .collect::<Result<Vec<_>>>()?;
                let fields: Vec<Option<Vec<Option<String>>>> =
                    decoded.iter().map(|d| d.as_ref().ok().cloned()).collect();
                let (batch, keep) = records::cast_fields(&fields, &self.spec.value_schema)?;
                for ((value, decoded), ok) in values.iter().zip(&decoded).zip(&keep) {
                    if !ok {
                        self.rejected.push(records::Rejected {
                            record: super::avro::shown(value.as_deref()),
                            error: match decoded {
                                Err(why) => why.clone(),
                                Ok(fields) => {
                                    records::why_not_cast(fields, &self.spec.value_schema)
                                }
                            },
                        });
                    }
                }
                self.malformed += keep.iter().filter(|k| !*k).count() as u64;
                (batch, Some(keep))
            }
            PayloadFormat::Records(format) => {
                // A message without a value (a tombstone) or not UTF-8 is malformed.
                let texts: Vec<&str> = values
                    .iter()
                    .map(|v| {
                        v.as_deref()
                            .and_then(|b| std::str::from_utf8(b).ok())
                            .unwrap_or("\u{0}")
                    })
                    .collect();
                let (batch, keep) = records::decode_unfiltered(
                    texts.iter().copied(),
                    &self.spec.value_schema,
                    format,
                )?;
                let mut rejected =
                    records::rejections(&texts, &keep, &self.spec.value_schema, format);
                for r in &mut rejected {
                    if r.record == "\u{0}" {
                        r.record = String::new();
                        r.error = "no value (a tombstone), or a value that is not UTF-8".into();
                    }
                }
                self.malformed += rejected.len() as u64;
                self.rejected.extend(rejected);
                (batch, Some(keep))
            }
        };
        let batch = if wants_meta {
            self.with_metadata(&value_batch, &meta)?
        } else {
            value_batch
        };
        Ok(Some(match keep {
            Some(keep) => arrow::compute::filter_record_batch(
                &batch,
                &arrow::array::BooleanArray::from(keep),
            )?,
            None => batch,
        }))
    }

    /// The value columns with the metadata columns put in their places.
    fn with_metadata(&self, values: &RecordBatch, meta: &[MessageMetadata]) -> Result<RecordBatch> {
        use arrow::array::{ArrayRef, StringArray, TimestampMillisecondArray};
        let mut value_columns = values.columns().iter();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.spec.schema.fields().len());
        for (index, field) in self.spec.schema.fields().iter().enumerate() {
            let Some((_, kind)) = self.spec.metadata.iter().find(|(m, _)| *m == index) else {
                columns.push(value_columns.next().expect("one value column each").clone());
                continue;
            };
            let column: ArrayRef = match kind {
                Metadata::Key => std::sync::Arc::new(BinaryArray::from_iter(
                    meta.iter().map(|m| m.key.as_deref()),
                )),
                Metadata::Partition => std::sync::Arc::new(StringArray::from_iter_values(
                    meta.iter().map(|m| m.partition.to_string()),
                )),
                Metadata::Offset => std::sync::Arc::new(StringArray::from_iter_values(
                    meta.iter().map(|m| m.offset.to_string()),
                )),
                Metadata::Timestamp => std::sync::Arc::new(
                    TimestampMillisecondArray::from_iter(meta.iter().map(|m| m.timestamp_ms))
                        .with_timezone("+00:00"),
                ),
                Metadata::Header(name) => {
                    std::sync::Arc::new(BinaryArray::from_iter(meta.iter().map(|m| {
                        m.headers
                            .iter()
                            .find(|(k, _)| k == name)
                            .and_then(|(_, v)| v.as_deref())
                    })))
                }
            };
            columns.push(arrow::compute::cast(&column, field.data_type())?);
        }
        Ok(RecordBatch::try_new(self.spec.schema.clone(), columns)?)
    }

    pub fn offset(&self) -> u64 {
        self.next.map(|o| o as u64 + 1).unwrap_or(self.position)
    }

    pub fn malformed(&self) -> u64 {
        self.malformed
    }

    /// Messages after the next offset: the partition's high watermark, asked for at most
    /// every few seconds with a short timeout (a slow broker only leaves the lag unknown).
    pub fn lag(&mut self) -> Option<u64> {
        let stale = self
            .high_watermark
            .is_none_or(|(_, asked)| asked.elapsed() >= LAG_REFRESH);
        if stale
            && let Some(consumer) = &self.consumer
            && let Ok((_, high)) =
                consumer.fetch_watermarks(&self.spec.topic, self.partition, LAG_TIMEOUT)
        {
            self.high_watermark = Some((high, std::time::Instant::now()));
        }
        let (high, _) = self.high_watermark?;
        Some((high - self.next?).max(0) as u64)
    }
}

/// What `INCLUDE` can take from one message.
struct MessageMetadata {
    key: Option<Vec<u8>>,
    partition: i32,
    offset: i64,
    timestamp_ms: Option<i64>,
    headers: Vec<(String, Option<Vec<u8>>)>,
}

impl MessageMetadata {
    fn of(message: &rdkafka::message::BorrowedMessage<'_>) -> Self {
        use rdkafka::message::Headers;
        Self {
            key: message.key().map(<[u8]>::to_vec),
            partition: message.partition(),
            offset: message.offset(),
            timestamp_ms: message.timestamp().to_millis(),
            headers: message
                .headers()
                .map(|headers| {
                    headers
                        .iter()
                        .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}
