//! Exactly-once delivery for the Kafka sink (`sink.delivery = 'exactly_once'`).
//!
//! The broker this project tests against has no transactions (tansu answers no
//! `EndTxn`), so exactly once is built from what every Kafka-protocol broker has:
//!
//! 1. **Stage.** At each barrier a subtask writes the epoch's encoded messages to the state
//!    store (`sink_staging/<sink id>/<epoch>/<subtask>.messages`, next to the
//!    checkpoints) before acknowledging the barrier; nothing reaches the topic yet. A
//!    committed checkpoint therefore promises its epochs' messages durably, even if the
//!    data directory is lost.
//! 2. **Publish on commit.** Once the checkpoint holding epoch *e* is committed, the
//!    [`KafkaCommitter`] sends the staged parts up to *e*, in epoch order, one at a time,
//!    each message tagged with headers naming the sink, epoch, subtask and its sequence
//!    number in the part, then deletes the part. Before the first message of a part it
//!    records every partition's end offset (`<subtask>.offsets`).
//! 3. **Resume without repeating.** A part that was being sent when the server died still
//!    has its offsets file: the committer reads the topic from those offsets and skips
//!    the messages of that part already there, so each message lands once.
//!
//! Readers see an epoch's messages only after its checkpoint is committed (as with
//! `read_committed` consumers of a transactional sink); after a crash the staged epochs
//! past the checkpoint the job resumes from are dropped, because their rows come again.

use super::SinkCommitter;
use super::kafka::DeliveryReport;
use crate::connectors::object_location::{ObjectLocation, object_store_error};
use crate::error::{EddyError, Result, sqlstate};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStoreExt, PutPayload};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

/// The option that asks for it, and its two values.
pub const DELIVERY_OPTION: &str = "sink.delivery";

/// Where staged epochs wait, under the state store's root.
const STAGING: &str = "sink_staging";

/// The headers every published message carries.
const SINK_HEADER: &str = "eddy-sink";
const EPOCH_HEADER: &str = "eddy-epoch";
const SUBTASK_HEADER: &str = "eddy-subtask";
const SEQUENCE_HEADER: &str = "eddy-seq";

/// How long the broker may take to answer a lookup or acknowledge a part.
const BROKER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long reading back an interrupted part may take, and how long the topic must stay
/// quiet before the read-back ends: after its last message, or from the start when none
/// comes at all (the consumer may take a while to connect and fetch).
const READ_BACK_TIMEOUT: Duration = Duration::from_secs(120);
const QUIET: Duration = Duration::from_secs(1);
const QUIET_BEFORE_ANY: Duration = Duration::from_secs(5);

/// Whether the sink's options ask for exactly-once delivery (`at_least_once`, the
/// default, otherwise); other values are errors.
pub fn exactly_once(options: &BTreeMap<String, String>) -> Result<bool> {
    match options
        .get(DELIVERY_OPTION)
        .map(|v| v.trim().to_ascii_lowercase())
        .as_deref()
    {
        None | Some("at_least_once") => Ok(false),
        Some("exactly_once") => Ok(true),
        Some(other) => Err(super::invalid(format!(
            "{DELIVERY_OPTION} must be 'at_least_once' or 'exactly_once', not '{other}'"
        ))),
    }
}

/// One staged message: its key and value (either may be absent: a tombstone has no value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedMessage {
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
}

/// A subtask's messages of one epoch, encoded as they come: per message a flags byte
/// (1: has a key, 2: has a value), then each present part as a 4-byte length and bytes.
#[derive(Default)]
pub struct EpochBuffer {
    bytes: Vec<u8>,
}

impl EpochBuffer {
    pub fn push(&mut self, key: Option<&[u8]>, value: Option<&[u8]>) {
        let flags = u8::from(key.is_some()) | (u8::from(value.is_some()) << 1);
        self.bytes.push(flags);
        for part in [key, value].into_iter().flatten() {
            self.bytes
                .extend_from_slice(&(part.len() as u32).to_be_bytes());
            self.bytes.extend_from_slice(part);
        }
    }

    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.bytes)
    }
}

/// The messages of a staged part, in the order they were staged.
pub fn decode_part(bytes: &[u8]) -> Result<Vec<StagedMessage>> {
    let corrupt = || EddyError::internal("a staged Kafka sink part is corrupt");
    let mut messages = Vec::new();
    let mut at = 0;
    let field = |at: &mut usize| -> Result<Vec<u8>> {
        let len_bytes = bytes.get(*at..*at + 4).ok_or_else(corrupt)?;
        let len = u32::from_be_bytes(len_bytes.try_into().expect("4 bytes")) as usize;
        let value = bytes.get(*at + 4..*at + 4 + len).ok_or_else(corrupt)?;
        *at += 4 + len;
        Ok(value.to_vec())
    };
    while at < bytes.len() {
        let flags = bytes[at];
        at += 1;
        let key = if flags & 1 != 0 {
            Some(field(&mut at)?)
        } else {
            None
        };
        let value = if flags & 2 != 0 {
            Some(field(&mut at)?)
        } else {
            None
        };
        messages.push(StagedMessage { key, value });
    }
    Ok(messages)
}

/// Where one sink's epochs are staged; shared by its writers and its committer.
pub struct KafkaStaging {
    /// The sink's relation id: stable across renames, never reused after a drop.
    sink_id: u32,
    location: ObjectLocation,
}

impl KafkaStaging {
    pub fn open(sink_id: u32, state_store: &str, s3: &crate::config::S3Options) -> Result<Self> {
        Ok(Self {
            sink_id,
            location: ObjectLocation::open(state_store, s3)?,
        })
    }

    fn root(&self) -> ObjectPath {
        self.location.path(&format!("{STAGING}/{}", self.sink_id))
    }

    fn part_path(&self, epoch: u64, subtask: usize, suffix: &str) -> ObjectPath {
        self.location.path(&format!(
            "{STAGING}/{}/{epoch:020}/{subtask:05}.{suffix}",
            self.sink_id
        ))
    }

    /// Writes a subtask's messages of `epoch` (called at the epoch's barrier).
    pub async fn stage(&self, epoch: u64, subtask: usize, bytes: Vec<u8>) -> Result<()> {
        self.location
            .store
            .put(
                &self.part_path(epoch, subtask, "messages"),
                PutPayload::from(bytes),
            )
            .await
            .map_err(object_store_error)?;
        Ok(())
    }

    /// The staged parts, in publishing order: (epoch, subtask).
    async fn parts(&self) -> Result<Vec<(u64, usize)>> {
        let mut parts = Vec::new();
        for (_, names) in self.location.list_below(&self.root()).await? {
            if let [epoch, file] = names.as_slice()
                && let Some(subtask) = file.strip_suffix(".messages")
                && let (Ok(epoch), Ok(subtask)) = (epoch.parse::<u64>(), subtask.parse::<usize>())
            {
                parts.push((epoch, subtask));
            }
        }
        parts.sort_unstable();
        Ok(parts)
    }

    async fn read(&self, path: &ObjectPath) -> Result<Option<Vec<u8>>> {
        match self.location.store.get(path).await {
            Ok(got) => Ok(Some(
                got.bytes().await.map_err(object_store_error)?.to_vec(),
            )),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(object_store_error(e)),
        }
    }

    async fn delete(&self, path: &ObjectPath) -> Result<()> {
        match self.location.store.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(object_store_error(e)),
        }
    }

    /// Removes a part: its messages first, so a part is never seen half removed as one
    /// to publish.
    async fn remove_part(&self, epoch: u64, subtask: usize) -> Result<()> {
        self.delete(&self.part_path(epoch, subtask, "messages"))
            .await?;
        self.delete(&self.part_path(epoch, subtask, "offsets"))
            .await
    }
}

/// Deletes what a dropped sink still had staged (its epochs are not published).
pub async fn delete_staged(
    sink_id: u32,
    state_store: &str,
    s3: &crate::config::S3Options,
) -> Result<()> {
    let staging = KafkaStaging::open(sink_id, state_store, s3)?;
    let lock = PUBLISHING.lock().remove(&sink_id);
    // Wait for a publication under way to end.
    let _publishing = match &lock {
        Some(lock) => Some(lock.lock().await),
        None => None,
    };
    for (epoch, subtask) in staging.parts().await? {
        staging.remove_part(epoch, subtask).await?;
    }
    Ok(())
}

/// One publication at a time per sink, across the committers a sink has over its job's
/// restarts (a failover makes a new one while the old may still be publishing).
static PUBLISHING: LazyLock<parking_lot::Mutex<HashMap<u32, Arc<tokio::sync::Mutex<()>>>>> =
    LazyLock::new(Default::default);

/// Publishes an exactly-once Kafka sink's staged epochs as checkpoints commit.
pub struct KafkaCommitter {
    sink: String,
    staging: Arc<KafkaStaging>,
    topic: String,
    config: ClientConfig,
    producer: parking_lot::Mutex<Option<Arc<BaseProducer<DeliveryReport>>>>,
}

impl KafkaCommitter {
    pub fn new(sink: &str, staging: Arc<KafkaStaging>, topic: &str, config: ClientConfig) -> Self {
        Self {
            sink: sink.to_string(),
            staging,
            topic: topic.to_string(),
            config,
            producer: parking_lot::Mutex::new(None),
        }
    }

    fn producer(&self) -> Result<Arc<BaseProducer<DeliveryReport>>> {
        let mut held = self.producer.lock();
        if let Some(p) = held.as_ref() {
            return Ok(p.clone());
        }
        let producer: BaseProducer<DeliveryReport> = self
            .config
            .create_with_context(DeliveryReport::default())
            .map_err(|e| self.broker_error(format!("cannot create a Kafka client: {e}")))?;
        let producer = Arc::new(producer);
        *held = Some(producer.clone());
        Ok(producer)
    }

    fn broker_error(&self, message: String) -> EddyError {
        EddyError::new(
            sqlstate::IO_ERROR,
            format!("sink \"{}\": {message}", self.sink),
        )
    }

    /// Sends one staged part, skipping what an interrupted earlier try already sent.
    async fn publish_part(&self, epoch: u64, subtask: usize) -> Result<()> {
        let messages_path = self.staging.part_path(epoch, subtask, "messages");
        let offsets_path = self.staging.part_path(epoch, subtask, "offsets");
        let Some(bytes) = self.staging.read(&messages_path).await? else {
            return Ok(()); // published and removed meanwhile
        };
        let messages = decode_part(&bytes)?;
        let part = PartId {
            sink: self.staging.sink_id,
            epoch,
            subtask,
        };
        let sent = match self.staging.read(&offsets_path).await? {
            // Tried before: what of it is in the topic already.
            Some(offsets) => {
                let offsets: BTreeMap<i32, i64> = serde_json::from_slice(&offsets)
                    .map_err(|e| EddyError::internal(format!("staged offsets: {e}")))?;
                let (config, topic) = (self.config.clone(), self.topic.clone());
                let sink = self.sink.clone();
                let count = messages.len();
                blocking(move || sent_since(&config, &topic, &offsets, part, count))
                    .await
                    .map_err(|e| self.broker_error(format!("cannot read back '{}': {e}", sink)))?
            }
            None => {
                let producer = self.producer()?;
                let topic = self.topic.clone();
                let ends = blocking(move || end_offsets(&producer, &topic))
                    .await
                    .map_err(|e| self.broker_error(e))?;
                let json = serde_json::to_vec(&ends).expect("offsets serialize");
                self.staging
                    .location
                    .store
                    .put(&offsets_path, PutPayload::from(json))
                    .await
                    .map_err(object_store_error)?;
                HashSet::new()
            }
        };
        let producer = self.producer()?;
        let topic = self.topic.clone();
        blocking(move || send_part(&producer, &topic, part, &messages, &sent))
            .await
            .map_err(|e| self.broker_error(e))?;
        self.staging.remove_part(epoch, subtask).await
    }
}

#[async_trait::async_trait]
impl SinkCommitter for KafkaCommitter {
    async fn publish_upto(&self, epoch: u64) -> Result<usize> {
        let lock = PUBLISHING
            .lock()
            .entry(self.staging.sink_id)
            .or_default()
            .clone();
        let _publishing = lock.lock().await;
        let mut published = 0;
        for (staged_epoch, subtask) in self.staging.parts().await? {
            if staged_epoch > epoch {
                break;
            }
            self.publish_part(staged_epoch, subtask).await?;
            published += 1;
        }
        Ok(published)
    }

    async fn recover(&self, committed: u64, resumed_at: u64) -> Result<()> {
        self.publish_upto(committed).await?;
        for (epoch, subtask) in self.staging.parts().await? {
            if epoch > resumed_at {
                self.staging.remove_part(epoch, subtask).await?;
            }
        }
        Ok(())
    }
}

/// Which staged part a message comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PartId {
    sink: u32,
    epoch: u64,
    subtask: usize,
}

/// Runs a call into the Kafka client (which blocks) off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::result::Result<T, String> + Send + 'static,
) -> std::result::Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| e.to_string())?
}

/// The partitions of `topic` the broker's metadata lists.
fn partitions_of(metadata: &rdkafka::metadata::Metadata, topic: &str) -> Vec<i32> {
    metadata
        .topics()
        .iter()
        .filter(|t| t.name() == topic)
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect()
}

/// Every partition's end offset now.
fn end_offsets(
    producer: &BaseProducer<DeliveryReport>,
    topic: &str,
) -> std::result::Result<BTreeMap<i32, i64>, String> {
    let metadata = producer
        .client()
        .fetch_metadata(Some(topic), BROKER_TIMEOUT)
        .map_err(|e| format!("cannot read topic '{topic}': {e}"))?;
    let partitions = partitions_of(&metadata, topic);
    if partitions.is_empty() {
        return Err(format!("topic '{topic}' does not exist"));
    }
    let mut ends = BTreeMap::new();
    for partition in partitions {
        let (_, high) = producer
            .client()
            .fetch_watermarks(topic, partition, BROKER_TIMEOUT)
            .map_err(|e| format!("cannot read the end of {topic}/{partition}: {e}"))?;
        ends.insert(partition, high);
    }
    Ok(ends)
}

fn header_text<'a>(message: &'a impl Message, key: &str) -> Option<&'a str> {
    let headers = message.headers()?;
    headers
        .iter()
        .find(|h| h.key == key)
        .and_then(|h| std::str::from_utf8(h.value?).ok())
}

/// The sequence numbers of `part` already in the topic, read from the offsets recorded
/// before the part was first sent (partitions added since are read from their start).
///
/// The read ends once all `count` messages of the part are found, or once nothing new has
/// come for [`QUIET`] (or [`QUIET_BEFORE_ANY`] when nothing came) after every
/// partition's reported end: a broker's reported end
/// offsets are not trusted alone (tansu's can lag behind its last batch), and the part's
/// only writer is gone, so a quiet topic holds all it ever wrote.
fn sent_since(
    config: &ClientConfig,
    topic: &str,
    offsets: &BTreeMap<i32, i64>,
    part: PartId,
    count: usize,
) -> std::result::Result<HashSet<u64>, String> {
    let mut config = config.clone();
    config
        .set("group.id", format!("eddy-sink-{}", part.sink))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false");
    let consumer: BaseConsumer = config.create().map_err(|e| e.to_string())?;
    let metadata = consumer
        .fetch_metadata(Some(topic), BROKER_TIMEOUT)
        .map_err(|e| e.to_string())?;
    let partitions = partitions_of(&metadata, topic);
    // Each partition's reported end: the read goes at least that far.
    let mut behind: HashMap<i32, i64> = HashMap::new();
    let mut assignment = TopicPartitionList::new();
    for partition in partitions {
        let (_, high) = consumer
            .fetch_watermarks(topic, partition, BROKER_TIMEOUT)
            .map_err(|e| e.to_string())?;
        let from = offsets.get(&partition).copied().unwrap_or(0);
        if from < high {
            behind.insert(partition, high);
        }
        assignment
            .add_partition_offset(topic, partition, Offset::Offset(from))
            .map_err(|e| e.to_string())?;
    }
    consumer.assign(&assignment).map_err(|e| e.to_string())?;
    let (sink, epoch, subtask) = (
        part.sink.to_string(),
        part.epoch.to_string(),
        part.subtask.to_string(),
    );
    let mut sent = HashSet::new();
    let started = Instant::now();
    let deadline = started + READ_BACK_TIMEOUT;
    let mut last_seen: Option<Instant> = None;
    let quiet = |last_seen: Option<Instant>| match last_seen {
        Some(at) => at.elapsed() >= QUIET,
        None => started.elapsed() >= QUIET_BEFORE_ANY,
    };
    while sent.len() < count && !(behind.is_empty() && quiet(last_seen)) {
        if Instant::now() > deadline {
            return Err(format!(
                "{topic} could not be read back within {READ_BACK_TIMEOUT:?}"
            ));
        }
        let Some(polled) = consumer.poll(Duration::from_millis(50)) else {
            continue;
        };
        let message = polled.map_err(|e| e.to_string())?;
        last_seen = Some(Instant::now());
        if header_text(&message, SINK_HEADER) == Some(sink.as_str())
            && header_text(&message, EPOCH_HEADER) == Some(epoch.as_str())
            && header_text(&message, SUBTASK_HEADER) == Some(subtask.as_str())
            && let Some(seq) = header_text(&message, SEQUENCE_HEADER).and_then(|s| s.parse().ok())
        {
            sent.insert(seq);
        }
        let partition = message.partition();
        if behind
            .get(&partition)
            .is_some_and(|high| message.offset() + 1 >= *high)
        {
            behind.remove(&partition);
        }
    }
    Ok(sent)
}

/// Sends the part's messages not in `sent`, each with its headers, and waits until the
/// broker has acknowledged them all.
fn send_part(
    producer: &BaseProducer<DeliveryReport>,
    topic: &str,
    part: PartId,
    messages: &[StagedMessage],
    sent: &HashSet<u64>,
) -> std::result::Result<(), String> {
    let (sink, epoch, subtask) = (
        part.sink.to_string(),
        part.epoch.to_string(),
        part.subtask.to_string(),
    );
    for (seq, message) in messages.iter().enumerate() {
        let seq = seq as u64;
        if sent.contains(&seq) {
            continue;
        }
        let seq_text = seq.to_string();
        let headers = [
            (SINK_HEADER, sink.as_str()),
            (EPOCH_HEADER, epoch.as_str()),
            (SUBTASK_HEADER, subtask.as_str()),
            (SEQUENCE_HEADER, seq_text.as_str()),
        ]
        .into_iter()
        .fold(
            OwnedHeaders::new_with_capacity(4),
            |headers, (key, value)| {
                headers.insert(Header {
                    key,
                    value: Some(value),
                })
            },
        );
        let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic).headers(headers);
        if let Some(key) = &message.key {
            record = record.key(key.as_slice());
        }
        if let Some(value) = &message.value {
            record = record.payload(value.as_slice());
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((
                    rdkafka::error::KafkaError::MessageProduction(
                        rdkafka::types::RDKafkaErrorCode::QueueFull,
                    ),
                    returned,
                )) => {
                    producer.poll(Duration::from_millis(1));
                    record = returned;
                }
                Err((e, _)) => return Err(format!("cannot send to Kafka: {e}")),
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer
        .flush(BROKER_TIMEOUT)
        .map_err(|e| format!("Kafka did not acknowledge the epoch's messages: {e}"))?;
    producer.context().take_failures()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_staged_part_reads_back_as_written() {
        let mut buffer = EpochBuffer::default();
        buffer.push(Some(b"k1"), Some(b"{\"a\":1}"));
        buffer.push(Some(b"k2"), None);
        buffer.push(None, Some(b""));
        let messages = decode_part(&buffer.take()).unwrap();
        assert_eq!(
            messages,
            vec![
                StagedMessage {
                    key: Some(b"k1".to_vec()),
                    value: Some(b"{\"a\":1}".to_vec())
                },
                StagedMessage {
                    key: Some(b"k2".to_vec()),
                    value: None
                },
                StagedMessage {
                    key: None,
                    value: Some(vec![])
                },
            ]
        );
        assert!(
            decode_part(&[3, 0, 0]).is_err(),
            "a truncated part is refused"
        );
    }

    #[test]
    fn delivery_option_values() {
        let options = |v: &str| BTreeMap::from([(DELIVERY_OPTION.to_string(), v.to_string())]);
        assert!(!exactly_once(&BTreeMap::new()).unwrap());
        assert!(!exactly_once(&options("at_least_once")).unwrap());
        assert!(exactly_once(&options("EXACTLY_ONCE")).unwrap());
        let err = exactly_once(&options("twice")).unwrap_err().to_string();
        assert!(err.contains("sink.delivery"), "{err}");
    }
}
