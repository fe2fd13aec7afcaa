//! The Kafka sink: `connector = 'kafka'`, `topic`, `properties.bootstrap.server`, and
//!
//! - `FORMAT PLAIN ENCODE JSON`: each inserted row a message whose value is the row as a
//!   JSON object (append-only queries, or `force_append_only`);
//! - `FORMAT UPSERT ENCODE JSON` with `primary_key`: the key is the key columns as a JSON
//!   object, the value the row, or no value (a tombstone) when the key's row is deleted;
//! - `FORMAT DEBEZIUM ENCODE JSON` with `primary_key`: Debezium's change envelope,
//!   `{"before": ..., "after": ..., "op": "c" | "u" | "d", "ts_ms": ...}`;
//! - `FORMAT PLAIN | UPSERT | DEBEZIUM ENCODE AVRO (schema.registry = '...')`: values (and
//!   upsert and Debezium keys) as Avro records in Confluent's wire format, their schemas
//!   registered under `<topic>-value` (and `<topic>-key`) when the sink's job starts; a
//!   Debezium value is the envelope record around the row's
//!   (`AvroEncoder::debezium_envelope`).
//!
//! Values are encoded as the JSON file sink writes them (numbers and booleans as JSON
//! values, decimals, timestamps and intervals as PostgreSQL's text). Plain messages are
//! sent as chunks arrive; upsert and Debezium changes are reduced per key over the epoch
//! (one message per changed key: a delete and an insert of the same key are one update)
//! and sent at the barrier. Delivery is at least once by default: the barrier waits until
//! the broker has acknowledged every message, so an epoch's checkpoint is only taken once
//! its messages are in the topic; after a crash the epochs since the last checkpoint are
//! sent again. With `sink.delivery = 'exactly_once'` the messages are staged at the
//! barrier instead and published once the epoch's checkpoint is committed
//! ([`super::kafka_commit`]).

use super::super::avro::AvroEncoder;
use super::super::schema_registry::SchemaRegistry;
use super::encode::{FileEncoder, FileEncoding};
use super::kafka_commit::{self, EpochBuffer, KafkaCommitter, KafkaStaging};
use super::{SinkContext, SinkMode, check_known, inserted_rows, invalid, primary_key};
use crate::error::{EddyError, Result, sqlstate};
use crate::stream::sink::{SinkFactory, SinkWriter};
use crate::stream::{Op, StreamChunk};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

type Client = BaseProducer<DeliveryReport>;
use std::collections::BTreeMap;
use std::time::Duration;

/// How long a barrier waits for the broker to acknowledge the epoch's messages.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Envelope {
    Plain,
    Upsert,
    Debezium,
}

pub struct KafkaSinkSpec {
    sink: String,
    topic: String,
    config: ClientConfig,
    brokers: String,
    envelope: Envelope,
    schema: SchemaRef,
    key: Vec<usize>,
    encoding: Encoding,
    /// With `sink.delivery = 'exactly_once'`: where the epochs are staged.
    staging: Option<std::sync::Arc<KafkaStaging>>,
}

/// How rows become message values and keys.
#[derive(Clone)]
enum Encoding {
    Json,
    /// Values, and keys (for `FORMAT UPSERT` and `DEBEZIUM`), as Avro. With `debezium`
    /// the value schema registered is the change envelope, and `value` writes the rows
    /// that go into it.
    Avro {
        value: std::sync::Arc<AvroEncoder>,
        key: Option<std::sync::Arc<AvroEncoder>>,
        debezium: bool,
    },
}

impl KafkaSinkSpec {
    pub fn from_options(
        options: &BTreeMap<String, String>,
        context: &SinkContext<'_>,
    ) -> Result<Self> {
        let mut plain_options = options.clone();
        plain_options.retain(|k, _| !k.starts_with("properties.") && !k.starts_with("encode."));
        check_known(
            "kafka",
            &plain_options,
            &["topic", kafka_commit::DELIVERY_OPTION],
        )?;
        let staging = if kafka_commit::exactly_once(options)? {
            Some(std::sync::Arc::new(KafkaStaging::open(
                context.id,
                context.state_store,
                context.s3,
            )?))
        } else {
            None
        };
        let required = |key: &str| {
            options
                .get(key)
                .filter(|v| !v.trim().is_empty())
                .cloned()
                .ok_or_else(|| invalid(format!("sink connector kafka needs option {key}")))
        };
        let topic = required("topic")?;
        let brokers = match options.get("properties.bootstrap.servers") {
            Some(b) => b.clone(),
            None => required("properties.bootstrap.server")?,
        };
        let envelope = match options
            .get("format")
            .map(|f| f.to_ascii_lowercase())
            .as_deref()
        {
            Some("plain") => Envelope::Plain,
            Some("upsert") => Envelope::Upsert,
            Some("debezium") => Envelope::Debezium,
            Some(other) => {
                return Err(invalid(format!(
                    "a kafka sink writes FORMAT PLAIN, UPSERT or DEBEZIUM, not {}",
                    other.to_ascii_uppercase()
                )));
            }
            None => {
                return Err(invalid(
                    "a kafka sink needs FORMAT PLAIN | UPSERT | DEBEZIUM ENCODE JSON",
                ));
            }
        };
        let avro = match options
            .get("encode")
            .map(|e| e.to_ascii_lowercase())
            .as_deref()
        {
            Some("json") => false,
            Some("avro") => true,
            Some(other) => {
                return Err(EddyError::not_supported(format!(
                    "ENCODE {} is not supported for kafka sinks yet; use ENCODE JSON or AVRO",
                    other.to_ascii_uppercase()
                )));
            }
            None => return Err(invalid("a kafka sink needs ENCODE JSON | AVRO")),
        };
        let allowed: &[&str] = if avro {
            &["encode.schema.registry"]
        } else {
            &[]
        };
        if let Some(key) = options
            .keys()
            .find(|k| k.starts_with("encode.") && !allowed.contains(&k.as_str()))
        {
            return Err(invalid(format!(
                "unknown option '{}' for ENCODE {}",
                key.trim_start_matches("encode."),
                if avro { "AVRO" } else { "JSON" }
            )));
        }
        let key = primary_key(options, context)?;
        match envelope {
            Envelope::Plain => {
                SinkMode::from_options(options, context, SinkMode::AppendOnly, false)?;
            }
            Envelope::Upsert | Envelope::Debezium => {
                if key.is_empty() {
                    return Err(invalid(format!(
                        "FORMAT {} needs primary_key = '<columns>'",
                        if envelope == Envelope::Upsert {
                            "UPSERT"
                        } else {
                            "DEBEZIUM"
                        }
                    )));
                }
            }
        }
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &brokers)
            .set("message.timeout.ms", "30000");
        for (k, v) in options {
            if let Some(property) = k.strip_prefix("properties.")
                && property != "bootstrap.server"
                && property != "bootstrap.servers"
            {
                config.set(property, v);
            }
        }
        let encoding = if avro {
            let url = options.get("encode.schema.registry").ok_or_else(|| {
                invalid("ENCODE AVRO needs its schema registry: ENCODE AVRO (schema.registry = 'http://...')")
            })?;
            let registry = SchemaRegistry::new(url)?;
            let debezium = envelope == Envelope::Debezium;
            let register = if debezium {
                AvroEncoder::register_debezium
            } else {
                AvroEncoder::register
            };
            let value = register(
                &registry,
                &super::super::avro::value_subject(&topic),
                context.name,
                &context.schema,
            )?;
            let key = match envelope {
                Envelope::Upsert | Envelope::Debezium => {
                    Some(std::sync::Arc::new(AvroEncoder::register(
                        &registry,
                        &format!("{topic}-key"),
                        &format!("{}_key", context.name),
                        &context.schema.project(&key)?,
                    )?))
                }
                Envelope::Plain => None,
            };
            Encoding::Avro {
                value: std::sync::Arc::new(value),
                key,
                debezium,
            }
        } else {
            Encoding::Json
        };
        Ok(Self {
            sink: context.name.to_string(),
            topic,
            config,
            brokers,
            envelope,
            schema: context.schema.clone(),
            key,
            encoding,
            staging,
        })
    }

    /// With `sink.delivery = 'exactly_once'`: what publishes the staged epochs.
    pub fn exactly_once_committer(&self) -> Result<Option<KafkaCommitter>> {
        Ok(self.staging.as_ref().map(|staging| {
            KafkaCommitter::new(
                &self.sink,
                staging.clone(),
                &self.topic,
                self.config.clone(),
            )
        }))
    }

    fn producer(&self) -> Result<Client> {
        self.config
            .create_with_context(DeliveryReport::default())
            .map_err(|e| {
                invalid(format!(
                    "sink \"{}\": cannot create a Kafka client for '{}': {e}",
                    self.sink, self.brokers
                ))
            })
    }

    /// Checks that the broker answers and the topic exists (at `CREATE SINK`).
    pub fn check_target(&self) -> Result<()> {
        let producer = self.producer()?;
        let metadata = producer
            .client()
            .fetch_metadata(Some(&self.topic), Duration::from_secs(10))
            .map_err(|e| {
                EddyError::new(
                    sqlstate::IO_ERROR,
                    format!(
                        "sink \"{}\": cannot reach Kafka at {}: {e}",
                        self.sink, self.brokers
                    ),
                )
            })?;
        let exists = metadata
            .topics()
            .iter()
            .any(|t| t.name() == self.topic && t.error().is_none() && !t.partitions().is_empty());
        if !exists {
            return Err(EddyError::new(
                sqlstate::UNDEFINED_OBJECT,
                format!(
                    "sink \"{}\": topic '{}' does not exist at {}",
                    self.sink, self.topic, self.brokers
                ),
            ));
        }
        Ok(())
    }
}

impl SinkFactory for KafkaSinkSpec {
    fn name(&self) -> &'static str {
        "KafkaSink"
    }

    fn writer(&self, subtask: usize) -> Result<Box<dyn SinkWriter>> {
        Ok(Box::new(KafkaSinkWriter {
            sink: self.sink.clone(),
            topic: self.topic.clone(),
            producer: self.producer()?,
            envelope: self.envelope,
            schema: self.schema.clone(),
            key: self.key.clone(),
            encoding: self.encoding.clone(),
            changes: KeyedChanges::default(),
            staged: self.staging.as_ref().map(|staging| StagedEpoch {
                staging: staging.clone(),
                subtask,
                buffer: EpochBuffer::default(),
            }),
        }))
    }
}

struct KafkaSinkWriter {
    sink: String,
    topic: String,
    producer: Client,
    envelope: Envelope,
    schema: SchemaRef,
    key: Vec<usize>,
    encoding: Encoding,
    /// Upsert and Debezium: the epoch's changes per key, in the order keys were first
    /// changed.
    changes: KeyedChanges,
    /// Exactly once: the epoch's messages, staged at the barrier instead of sent.
    staged: Option<StagedEpoch>,
}

struct StagedEpoch {
    staging: std::sync::Arc<KafkaStaging>,
    subtask: usize,
    buffer: EpochBuffer,
}

/// An epoch's changes reduced per key: the row before the epoch (if the key's first
/// change removed one) and the row after it (if its last change inserted one).
/// An encoded key or row (JSON text or an Avro message).
type Encoded = Vec<u8>;

#[derive(Default)]
struct KeyedChanges {
    order: Vec<Encoded>,
    by_key: std::collections::HashMap<Encoded, (Option<Encoded>, Option<Encoded>)>,
}

impl KeyedChanges {
    fn apply(&mut self, key: &[u8], op: Op, row: &[u8]) {
        let entry = match self.by_key.get_mut(key) {
            Some(entry) => entry,
            None => {
                self.order.push(key.to_vec());
                let before = (!op.is_insert()).then(|| row.to_vec());
                self.by_key.entry(key.to_vec()).or_insert((before, None))
            }
        };
        entry.1 = op.is_insert().then(|| row.to_vec());
    }

    /// Each changed key with its rows before and after the epoch (keys inserted and
    /// deleted again within it are left out).
    #[allow(clippy::type_complexity)]
    fn take(&mut self) -> Vec<(Encoded, Option<Encoded>, Option<Encoded>)> {
        let mut by_key = std::mem::take(&mut self.by_key);
        std::mem::take(&mut self.order)
            .into_iter()
            .filter_map(|key| {
                let (before, after) = by_key.remove(&key)?;
                (before.is_some() || after.is_some()).then_some((key, before, after))
            })
            .collect()
    }
}

/// Each row of a batch as a JSON object.
fn json_rows(batch: &RecordBatch, schema: &SchemaRef) -> Result<Vec<String>> {
    let mut encoder = FileEncoder::new(&FileEncoding::JsonLines, schema)?;
    encoder.write(batch)?;
    let bytes = encoder.finish()?;
    let text = String::from_utf8(bytes).map_err(|e| EddyError::internal(e.to_string()))?;
    Ok(text.lines().map(str::to_string).collect())
}

impl KafkaSinkWriter {
    /// Each row of `batch` encoded as a message value, or as a message key (`key`: the
    /// batch holds the key columns).
    fn encode(&self, batch: &RecordBatch, key: bool) -> Result<Vec<Encoded>> {
        match &self.encoding {
            Encoding::Json => {
                let schema = if key {
                    std::sync::Arc::new(self.schema.project(&self.key)?)
                } else {
                    self.schema.clone()
                };
                Ok(json_rows(batch, &schema)?
                    .into_iter()
                    .map(String::into_bytes)
                    .collect())
            }
            Encoding::Avro {
                value,
                key: keys,
                debezium,
            } => match (key, keys) {
                (false, _) if *debezium => value.encode_datums(batch),
                (false, _) => value.encode(batch),
                (true, Some(keys)) => keys.encode(batch),
                (true, None) => Err(EddyError::internal("an Avro sink without a key schema")),
            },
        }
    }

    /// Queues one message; when the client's queue is full, waits for deliveries to make
    /// room (without blocking the worker thread).
    async fn send(&mut self, key: Option<&[u8]>, value: Option<&[u8]>) -> Result<()> {
        if let Some(staged) = &mut self.staged {
            staged.buffer.push(key, value);
            return Ok(());
        }
        let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&self.topic);
        if let Some(key) = key {
            record = record.key(key);
        }
        if let Some(value) = value {
            record = record.payload(value);
        }
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((
                    rdkafka::error::KafkaError::MessageProduction(
                        rdkafka::types::RDKafkaErrorCode::QueueFull,
                    ),
                    returned,
                )) => {
                    self.producer.poll(Duration::ZERO);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    record = returned;
                }
                Err((e, _)) => {
                    return Err(EddyError::new(
                        sqlstate::IO_ERROR,
                        format!("sink \"{}\": cannot send to Kafka: {e}", self.sink),
                    ));
                }
            }
        }
    }
}

/// Counts the messages the broker did not take (the client reports each delivery).
#[derive(Default)]
pub struct DeliveryReport {
    failed: std::sync::atomic::AtomicU64,
    last_error: parking_lot::Mutex<Option<String>>,
}

impl DeliveryReport {
    /// The deliveries that failed since the last call, as an error naming the last one.
    pub(super) fn take_failures(&self) -> std::result::Result<(), String> {
        let failed = self.failed.swap(0, std::sync::atomic::Ordering::Relaxed);
        if failed == 0 {
            return Ok(());
        }
        Err(format!(
            "Kafka refused {failed} messages: {}",
            self.last_error.lock().clone().unwrap_or_default()
        ))
    }
}

impl rdkafka::ClientContext for DeliveryReport {}

impl rdkafka::producer::ProducerContext for DeliveryReport {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.failed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            *self.last_error.lock() = Some(e.to_string());
        }
    }
}

#[async_trait::async_trait]
impl SinkWriter for KafkaSinkWriter {
    async fn write(&mut self, chunk: StreamChunk) -> Result<()> {
        match self.envelope {
            Envelope::Plain => {
                for value in self.encode(&inserted_rows(&chunk)?, false)? {
                    self.send(None, Some(value.as_slice())).await?;
                }
            }
            Envelope::Upsert | Envelope::Debezium => {
                let rows = self.encode(&chunk.batch, false)?;
                let keys = self.encode(&chunk.batch.project(&self.key)?, true)?;
                for ((key, row), op) in keys.iter().zip(&rows).zip(&chunk.ops) {
                    self.changes.apply(key, *op, row);
                }
            }
        }
        self.producer.poll(Duration::ZERO);
        Ok(())
    }

    async fn barrier(&mut self, epoch: u64) -> Result<()> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        for (key, before, after) in self.changes.take() {
            match self.envelope {
                // The key's row after the epoch, or a tombstone.
                Envelope::Upsert => self.send(Some(key.as_slice()), after.as_deref()).await?,
                Envelope::Debezium => {
                    let code = match (&before, &after) {
                        (None, _) => "c",
                        (Some(_), Some(_)) => "u",
                        (Some(_), None) => "d",
                    };
                    let envelope = match &self.encoding {
                        // The rows are bare Avro records.
                        Encoding::Avro { value, .. } => value.debezium_envelope(
                            before.as_deref(),
                            after.as_deref(),
                            code,
                            now as i64,
                        ),
                        // The rows are JSON text.
                        Encoding::Json => {
                            let text = |row: &Option<Encoded>| {
                                row.as_deref()
                                    .map(String::from_utf8_lossy)
                                    .unwrap_or("null".into())
                                    .into_owned()
                            };
                            format!(
                                "{{\"before\":{},\"after\":{},\"op\":\"{code}\",\"ts_ms\":{now}}}",
                                text(&before),
                                text(&after),
                            )
                            .into_bytes()
                        }
                    };
                    self.send(Some(key.as_slice()), Some(envelope.as_slice()))
                        .await?;
                }
                Envelope::Plain => {}
            }
        }
        if let Some(staged) = &mut self.staged {
            let bytes = staged.buffer.take();
            if !bytes.is_empty() {
                staged.staging.stage(epoch, staged.subtask, bytes).await?;
            }
            return Ok(());
        }
        // Every message of the epoch acknowledged (or failed) before the barrier passes.
        let deadline = std::time::Instant::now() + FLUSH_TIMEOUT;
        while self.producer.in_flight_count() > 0 {
            self.producer.poll(Duration::ZERO);
            if std::time::Instant::now() > deadline {
                return Err(EddyError::new(
                    sqlstate::IO_ERROR,
                    format!(
                        "sink \"{}\": Kafka did not acknowledge {} messages within {} s",
                        self.sink,
                        self.producer.in_flight_count(),
                        FLUSH_TIMEOUT.as_secs()
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        self.producer
            .context()
            .take_failures()
            .map_err(|e| EddyError::new(sqlstate::IO_ERROR, format!("sink \"{}\": {e}", self.sink)))
    }
}
