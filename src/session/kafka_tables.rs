//! Tables fed by a Kafka topic: `CREATE TABLE t (..., PRIMARY KEY (...)) WITH (connector =
//! 'kafka', ...) FORMAT UPSERT | DEBEZIUM | PLAIN ENCODE JSON` (or `ENCODE AVRO
//! (schema.registry = '...')`: values, upsert keys and Debezium envelopes as Avro records
//! in Confluent's wire format; a key not in that format is the bare value of a one-column
//! key). As in RisingWave, messages
//! that update and delete rows go into a table (its primary key names the row), and views
//! read the table's changes like any table's.
//!
//! One task per table reads every partition and applies the messages in order:
//! `UPSERT` — the value is the row (upserted), no value (a tombstone) deletes the row the
//! message key names (a JSON object of the key columns, or for a one-column key its bare
//! value); `DEBEZIUM` — `after` is upserted (`op` c, r, u), `before` deleted (`op` d);
//! `PLAIN` — every value upserted. Exactly once as for CDC tables (`session::cdc`): after
//! each batch of messages is applied, the partitions' next offsets are written to the
//! table's internal state, so a checkpoint never holds an offset ahead of its rows; after
//! a restore the task resumes from the restored offsets, and re-applying a keyed upsert or
//! delete leaves the same rows.

use super::Engine;
use crate::catalog::{Relation, RelationKind};
use crate::connectors::kafka::{Envelope, KafkaSpec};
use crate::connectors::records::{self, RecordFormat};
use crate::error::Result;
use crate::state::operator_state::internal_table_id;
use crate::state::{OperatorState, StateTable};
use arrow::array::{Array, RecordBatch};
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::watch;

/// Messages applied per batch.
const BATCH_MESSAGES: usize = 4096;
const IDLE_WAIT: Duration = Duration::from_millis(50);
const RETRY_WAIT: Duration = Duration::from_secs(2);

pub fn is_kafka(options: &BTreeMap<String, String>) -> bool {
    options
        .get("connector")
        .is_some_and(|c| c.eq_ignore_ascii_case("kafka"))
}

pub fn is_kafka_table(rel: &Relation) -> bool {
    rel.kind == RelationKind::Table && is_kafka(&rel.options)
}

fn offsets_state(engine: &Engine, rel: &Relation) -> OperatorState {
    OperatorState::new(internal_table_id(rel.id, 0), engine.store.clone(), 0, 1)
}

/// Each partition's next offset, as applied to the table.
fn load_offsets(engine: &Engine, rel: &Relation) -> Result<HashMap<i32, i64>> {
    let mut offsets = HashMap::new();
    offsets_state(engine, rel).scan_unkeyed(|k, v| {
        if k.len() == 4 && v.len() == 8 {
            offsets.insert(
                i32::from_be_bytes(k.try_into().expect("4 bytes")),
                i64::from_le_bytes(v.try_into().expect("8 bytes")),
            );
        }
        Ok(())
    })?;
    Ok(offsets)
}

fn store_offsets(engine: &Engine, rel: &Relation, offsets: &HashMap<i32, i64>) -> Result<()> {
    let state = offsets_state(engine, rel);
    let mut batch = rocksdb::WriteBatch::default();
    for (partition, next) in offsets {
        state.put_unkeyed(&mut batch, &partition.to_be_bytes(), &next.to_le_bytes());
    }
    engine.store.write(batch)
}

/// Starts the task of every Kafka table (at server start, after the restore).
pub fn start_all(engine: &Arc<Engine>) -> Result<()> {
    for rel in engine.catalog.relations() {
        if is_kafka_table(&rel) {
            start(engine, &rel)?;
        }
    }
    Ok(())
}

/// Starts (or restarts) a table's task.
pub(super) fn start(engine: &Arc<Engine>, rel: &Relation) -> Result<()> {
    let spec = KafkaSpec::from_options(&rel.arrow_schema(), &rel.options)?;
    let (stop, stopped) = watch::channel(false);
    if let Some(old) = engine.cdc.insert_task(&rel.name, stop) {
        old.send_replace(true);
    }
    let task = KafkaTableTask {
        engine: Arc::downgrade(engine),
        rel: rel.clone(),
        spec,
    };
    tokio::spawn(task.run(stopped));
    Ok(())
}

/// Stops a dropped table's task and forgets its offsets.
pub(super) fn drop(engine: &Engine, rel: &Relation) -> Result<()> {
    engine.cdc.stop_task(&rel.name);
    let (start, end) = crate::state::operator_state::internal_table_range(rel.id);
    engine
        .store
        .delete_range(&start.to_be_bytes(), &end.to_be_bytes())
}

struct KafkaTableTask {
    engine: Weak<Engine>,
    rel: Relation,
    spec: KafkaSpec,
}

impl KafkaTableTask {
    async fn run(self, mut stopped: watch::Receiver<bool>) {
        let mut consumer: Option<BaseConsumer> = None;
        loop {
            if *stopped.borrow() {
                return;
            }
            let Some(engine) = self.engine.upgrade() else {
                return;
            };
            let wait = match self.poll(&engine, &mut consumer) {
                Ok(true) => Duration::ZERO,
                Ok(false) => IDLE_WAIT,
                Err(e) => {
                    tracing::warn!(table = %self.rel.name, "kafka table: {e}");
                    consumer = None;
                    RETRY_WAIT
                }
            };
            std::mem::drop(engine);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stopped.changed() => return,
            }
        }
    }

    /// A consumer of every partition from the applied offsets (or the startup mode).
    fn open(&self, engine: &Engine) -> Result<BaseConsumer> {
        let offsets = load_offsets(engine, &self.rel)?;
        let consumer: BaseConsumer = self.spec.client_config().create().map_err(|e| {
            crate::error::EddyError::internal(format!("cannot create a Kafka client: {e}"))
        })?;
        let mut assignment = rdkafka::TopicPartitionList::new();
        for partition in 0..self.spec.partitions as i32 {
            let start = match offsets.get(&partition) {
                Some(next) => rdkafka::Offset::Offset(*next),
                None => match self.spec.startup {
                    crate::connectors::kafka::StartupMode::Latest => rdkafka::Offset::End,
                    _ => rdkafka::Offset::Beginning,
                },
            };
            assignment
                .add_partition_offset(&self.spec.topic, partition, start)
                .map_err(|e| crate::error::EddyError::internal(e.to_string()))?;
        }
        consumer
            .assign(&assignment)
            .map_err(|e| crate::error::EddyError::internal(e.to_string()))?;
        Ok(consumer)
    }

    /// Reads what has arrived (up to a batch) and applies it; `Ok(true)` when it did.
    fn poll(&self, engine: &Engine, consumer: &mut Option<BaseConsumer>) -> Result<bool> {
        if consumer.is_none() {
            *consumer = Some(self.open(engine)?);
        }
        let reader = consumer.as_ref().expect("opened above");
        let mut messages: Vec<KeyAndValue> = Vec::new();
        let mut offsets = HashMap::new();
        while messages.len() < BATCH_MESSAGES {
            match reader.poll(Duration::ZERO) {
                None => break,
                Some(Ok(m)) => {
                    offsets.insert(m.partition(), m.offset() + 1);
                    messages.push((m.key().map(<[u8]>::to_vec), m.payload().map(<[u8]>::to_vec)));
                }
                Some(Err(e)) => {
                    tracing::warn!(table = %self.rel.name, "kafka: {e}");
                    break;
                }
            }
        }
        if messages.is_empty() {
            return Ok(false);
        }
        let table = engine.schema_provider.state_table_for(&self.rel)?;
        let mut changes: Vec<Change> = Vec::with_capacity(messages.len());
        for (key, value) in &messages {
            if let Some(change) = self.change_of(&table, key.as_deref(), value.as_deref())? {
                changes.push(change);
            }
        }
        apply(&table, &self.spec, changes)?;
        // After the rows: a checkpoint never holds offsets ahead of them.
        store_offsets(engine, &self.rel, &offsets)?;
        Ok(true)
    }

    /// What one message does to the table (`None`: nothing it can say, e.g. a tombstone
    /// without a usable key). An error only when the schema registry cannot be asked:
    /// skipping the message would lose it.
    fn change_of(
        &self,
        table: &StateTable,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Result<Option<Change>> {
        if let crate::connectors::kafka::PayloadFormat::Avro(decoder) = &self.spec.payload {
            return avro_change_of(decoder, self.spec.envelope, table, key, value);
        }
        let text = |b: Option<&[u8]>| {
            b.and_then(|b| std::str::from_utf8(b).ok())
                .map(str::to_string)
        };
        let json = |row: String| Row::Json(row);
        Ok(match self.spec.envelope {
            Envelope::Plain => text(value).map(|v| Change::Upsert(json(v))),
            Envelope::Upsert => match text(value) {
                Some(row) => Some(Change::Upsert(json(row))),
                None => text(key)
                    .and_then(|k| key_object(table, k))
                    .map(|k| Change::Delete(json(k))),
            },
            Envelope::Debezium => text(value).and_then(|v| debezium_change_of(&v)),
        })
    }
}

/// What a Debezium JSON envelope does: `after` upserted (`op` c, r, u), `before` deleted.
fn debezium_change_of(value: &str) -> Option<Change> {
    let mut envelope: serde_json::Value = serde_json::from_str(value).ok()?;
    // With schemas on, the envelope is under `payload`.
    if let Some(payload) = envelope.get_mut("payload").map(serde_json::Value::take)
        && payload.is_object()
    {
        envelope = payload;
    }
    match envelope.get("op")?.as_str()? {
        "d" => Some(Change::Delete(Row::Json(
            envelope.get("before")?.to_string(),
        ))),
        _ => Some(Change::Upsert(Row::Json(
            envelope.get("after")?.to_string(),
        ))),
    }
}

/// What one Avro message does: its value's record is the row (upserted); an upsert
/// topic's tombstone deletes the row its key names — an Avro record of the key columns,
/// or (not in the wire format) the bare value of a one-column key. Undecodable values are
/// skipped and logged.
fn avro_change_of(
    decoder: &crate::connectors::avro::AvroDecoder,
    envelope: Envelope,
    table: &StateTable,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> Result<Option<Change>> {
    let schema = table.schema();
    if envelope == Envelope::Debezium {
        return Ok(match decoder.debezium(value, schema)? {
            Ok(change) if change.op == "d" => change.before.map(|r| Change::Delete(Row::Fields(r))),
            Ok(change) => change.after.map(|r| Change::Upsert(Row::Fields(r))),
            Err(why) => {
                tracing::warn!("kafka table: a message skipped: {why}");
                None
            }
        });
    }
    if value.is_some() || envelope != Envelope::Upsert {
        return Ok(match decoder.fields(value, schema)? {
            Ok(fields) => Some(Change::Upsert(Row::Fields(fields))),
            Err(why) => {
                tracing::warn!("kafka table: a message skipped: {why}");
                None
            }
        });
    }
    let Some(key) = key else {
        return Ok(None);
    };
    if let Ok(fields) = decoder.fields(Some(key), schema)? {
        return Ok(Some(Change::Delete(Row::Fields(fields))));
    }
    let [only] = table.pk_indices() else {
        return Ok(None);
    };
    let Ok(text) = std::str::from_utf8(key) else {
        return Ok(None);
    };
    let mut fields = vec![None; schema.fields().len()];
    fields[*only] = Some(text.to_string());
    Ok(Some(Change::Delete(Row::Fields(fields))))
}

/// A message key as a JSON object of the key columns: as it is when it is one, else (a
/// one-column key) the bare value under the key column's name.
fn key_object(table: &StateTable, key: String) -> Option<String> {
    if serde_json::from_str::<serde_json::Value>(&key).is_ok_and(|k| k.is_object()) {
        return Some(key);
    }
    match table.pk_indices() {
        [only] => {
            let name = table.schema().field(*only).name().clone();
            let value = serde_json::from_str::<serde_json::Value>(&key)
                .unwrap_or(serde_json::Value::String(key));
            Some(serde_json::json!({ name: value }).to_string())
        }
        _ => None,
    }
}

/// A message's key and value (either may be missing).
type KeyAndValue = (Option<Vec<u8>>, Option<Vec<u8>>);

enum Change {
    /// A row.
    Upsert(Row),
    /// The key columns of a row to delete.
    Delete(Row),
}

/// A row as a message carries it.
enum Row {
    /// A JSON object (or for `ENCODE CSV`, a line).
    Json(String),
    /// The text of each of the table's columns, decoded from Avro (`None`: NULL or not
    /// in the record).
    Fields(Vec<Option<String>>),
}

/// The rows of a run as a batch of `schema`, with how many did not decode.
fn decode_rows(
    rows: &[Row],
    schema: &arrow::datatypes::SchemaRef,
    format: &RecordFormat,
) -> Result<(RecordBatch, u64)> {
    let mut texts = Vec::new();
    let mut fields = Vec::new();
    for row in rows {
        match row {
            Row::Json(text) => texts.push(text.as_str()),
            Row::Fields(f) => fields.push(Some(f.clone())),
        }
    }
    if fields.is_empty() {
        return records::decode(texts.into_iter(), schema, format);
    }
    let (batch, keep) = records::cast_fields(&fields, schema)?;
    let malformed = keep.iter().filter(|k| !**k).count() as u64;
    let keep = arrow::array::BooleanArray::from(keep);
    Ok((
        arrow::compute::filter_record_batch(&batch, &keep)?,
        malformed,
    ))
}

/// Applies the changes in order: runs of upserts and runs of deletes, each one write.
/// Values that do not decode are skipped (and logged).
fn apply(table: &Arc<StateTable>, spec: &KafkaSpec, changes: Vec<Change>) -> Result<()> {
    let format = match &spec.payload {
        crate::connectors::kafka::PayloadFormat::Records(f) => *f,
        // Refused at CREATE TABLE.
        crate::connectors::kafka::PayloadFormat::Bytes
        | crate::connectors::kafka::PayloadFormat::Avro(_) => RecordFormat::Json,
    };
    // Decoded with every column nullable: a record missing its key is dropped below,
    // not an error for the whole batch.
    let schema = nullable(table.schema());
    let mut run: Vec<Row> = Vec::new();
    let mut run_is_delete = false;
    let flush = |rows: &mut Vec<Row>, delete: bool| -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let (batch, malformed) = decode_rows(rows, &schema, &format)?;
        // A row without its whole key cannot be stored (or deleted), nor one with a NULL
        // where the table allows none.
        let required: Vec<usize> = if delete {
            table.pk_indices().to_vec()
        } else {
            (0..batch.num_columns())
                .filter(|c| {
                    !table.schema().field(*c).is_nullable() || table.pk_indices().contains(c)
                })
                .collect()
        };
        let complete: arrow::array::BooleanArray = (0..batch.num_rows())
            .map(|r| Some(required.iter().all(|c| batch.column(*c).is_valid(r))))
            .collect();
        let incomplete = complete.false_count() as u64;
        let batch = arrow::compute::filter_record_batch(&batch, &complete)?;
        if malformed + incomplete > 0 {
            tracing::warn!(
                "kafka table: {} messages skipped (not decodable, or missing required columns)",
                malformed + incomplete
            );
        }
        let batch = if delete {
            batch
        } else {
            RecordBatch::try_new(table.schema().clone(), batch.columns().to_vec())?
        };
        if delete {
            table.delete_rows_with_keys_of(&batch)?;
        } else {
            table.upsert(&batch)?;
        }
        rows.clear();
        Ok(())
    };
    for change in changes {
        let (row, delete) = match change {
            Change::Upsert(row) => (row, false),
            Change::Delete(row) => (row, true),
        };
        if delete != run_is_delete {
            flush(&mut run, run_is_delete)?;
            run_is_delete = delete;
        }
        run.push(row);
    }
    flush(&mut run, run_is_delete)
}

/// `schema` with every column nullable.
pub(super) fn nullable(schema: &arrow::datatypes::SchemaRef) -> arrow::datatypes::SchemaRef {
    Arc::new(arrow::datatypes::Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ))
}
