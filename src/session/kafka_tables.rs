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
use crate::connectors::table_letters;
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

/// Writes, in one write, each partition's next offset, the count of malformed messages
/// grown by `malformed`, and the dead letters of this batch.
fn store_offsets(
    engine: &Engine,
    rel: &Relation,
    offsets: &HashMap<i32, i64>,
    malformed: u64,
    letters: &[(&Received, &str)],
) -> Result<()> {
    let state = offsets_state(engine, rel);
    let mut batch = crate::state::StateWrites::default();
    for (partition, next) in offsets {
        state.put_unkeyed(&mut batch, &partition.to_be_bytes(), &next.to_le_bytes());
    }
    if malformed > 0 {
        let total = table_letters::malformed_count(&engine.store, rel.id)? + malformed;
        table_letters::put_malformed_count(&state, &mut batch, total);
    }
    for (index, (message, why)) in letters.iter().enumerate() {
        let letter = table_letters::TableLetter {
            partition: message.partition,
            offset: message.offset,
            record: crate::connectors::avro::shown(
                message.value.as_deref().or(message.key.as_deref()),
            ),
            error: why.to_string(),
        };
        table_letters::put_letter(&state, &mut batch, index, &letter);
    }
    engine.store.write(batch.into_batch())
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

/// The Kafka reader's spec of a table's options (`error.policy` is the task's, checked
/// here).
pub(super) fn table_spec(
    schema: &arrow::datatypes::SchemaRef,
    options: &BTreeMap<String, String>,
) -> Result<KafkaSpec> {
    crate::connectors::error_policy(options)?;
    let mut options = options.clone();
    options.remove(crate::connectors::ERROR_POLICY_OPTION);
    KafkaSpec::from_options(schema, &options)
}

/// Starts (or restarts) a table's task.
pub(super) fn start(engine: &Arc<Engine>, rel: &Relation) -> Result<()> {
    let spec = table_spec(&rel.arrow_schema(), &rel.options)?;
    let (stop, stopped) = watch::channel(false);
    if let Some(old) = engine.cdc.insert_task(&rel.name, stop) {
        old.send_replace(true);
    }
    let task = KafkaTableTask {
        engine: Arc::downgrade(engine),
        rel: rel.clone(),
        spec,
        error_policy: crate::connectors::error_policy(&rel.options)?,
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
    /// With `error.policy = 'dead_letter'`, malformed messages are kept.
    error_policy: crate::connectors::ErrorPolicy,
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
            let polled = self.poll(&engine, &mut consumer);
            // Views reading the table that fell behind hold the consumer back (the
            // topic, not memory, keeps what they have not read yet).
            let readers = match &polled {
                Ok(true) => engine.schema_provider.state_table_for(&self.rel).ok(),
                _ => None,
            };
            let wait = match polled {
                Ok(true) => Duration::ZERO,
                Ok(false) => IDLE_WAIT,
                Err(e) => {
                    tracing::warn!(table = %self.rel.name, "kafka table: {e}");
                    consumer = None;
                    RETRY_WAIT
                }
            };
            std::mem::drop(engine);
            if let Some(table) = readers {
                tokio::select! {
                    _ = table.changes().wait_for_readers(0) => {}
                    _ = stopped.changed() => return,
                }
            }
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
        let mut messages: Vec<Received> = Vec::new();
        let mut offsets = HashMap::new();
        while messages.len() < BATCH_MESSAGES {
            match reader.poll(Duration::ZERO) {
                None => break,
                Some(Ok(m)) => {
                    offsets.insert(m.partition(), m.offset() + 1);
                    messages.push(Received {
                        partition: m.partition(),
                        offset: m.offset(),
                        key: m.key().map(<[u8]>::to_vec),
                        value: m.payload().map(<[u8]>::to_vec),
                    });
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
        let mut rejected: Vec<(usize, String)> = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            let change = match &self.spec.payload {
                crate::connectors::kafka::PayloadFormat::Avro(decoder) => avro_change_of(
                    decoder,
                    self.spec.envelope,
                    &table,
                    m.key.as_deref(),
                    m.value.as_deref(),
                )?,
                _ => json_change_of(
                    self.spec.envelope,
                    &table,
                    m.key.as_deref(),
                    m.value.as_deref(),
                ),
            };
            match change {
                Ok(Some((delete, row))) => changes.push(Change {
                    delete,
                    row,
                    message: i,
                }),
                Ok(None) => {}
                Err(why) => rejected.push((i, why)),
            }
        }
        rejected.extend(apply(&table, &self.spec, changes)?);
        if !rejected.is_empty() {
            tracing::warn!(
                table = %self.rel.name,
                "kafka table: {} messages skipped (not decodable, or missing required columns)",
                rejected.len()
            );
        }
        // After the rows: a checkpoint never holds offsets ahead of them. The malformed
        // messages' count and dead letters go in the same write as the offsets.
        let letters = match self.error_policy {
            crate::connectors::ErrorPolicy::DeadLetter => rejected
                .iter()
                .map(|(i, why)| (&messages[*i], why.as_str()))
                .collect(),
            crate::connectors::ErrorPolicy::Skip => vec![],
        };
        store_offsets(engine, &self.rel, &offsets, rejected.len() as u64, &letters)?;
        Ok(true)
    }
}

/// A message as read: where it was, its key and its value (either may be missing).
struct Received {
    partition: i32,
    offset: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
}

/// What a message does to the table: `Ok(Some((delete, row)))`, `Ok(None)` when it says
/// nothing (a tombstone without a key), `Err(why)` when it is malformed.
type MessageChange = std::result::Result<Option<(bool, Row)>, String>;

/// What a JSON (or CSV) message does.
fn json_change_of(
    envelope: Envelope,
    table: &StateTable,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> MessageChange {
    let text = |b: Option<&[u8]>| -> std::result::Result<Option<String>, String> {
        b.map(|b| {
            std::str::from_utf8(b)
                .map(str::to_string)
                .map_err(|_| "not UTF-8 text".to_string())
        })
        .transpose()
    };
    match envelope {
        Envelope::Plain => match text(value)? {
            Some(v) => Ok(Some((false, Row::Json(v)))),
            None => Err("no value (a tombstone)".into()),
        },
        Envelope::Upsert => match text(value)? {
            Some(row) => Ok(Some((false, Row::Json(row)))),
            None => match text(key)? {
                Some(k) => key_object(table, k)
                    .map(|k| Some((true, Row::Json(k))))
                    .ok_or_else(|| {
                        "a tombstone whose key is not a JSON object of the key columns".into()
                    }),
                None => Ok(None),
            },
        },
        Envelope::Debezium => match text(value)? {
            Some(v) => debezium_change_of(&v)
                .map(Some)
                .ok_or_else(|| "not a Debezium change envelope (op, before, after)".into()),
            None => Ok(None), // Debezium's tombstone after a delete
        },
    }
}

/// What a Debezium JSON envelope does: `after` upserted (`op` c, r, u), `before` deleted.
fn debezium_change_of(value: &str) -> Option<(bool, Row)> {
    let mut envelope: serde_json::Value = serde_json::from_str(value).ok()?;
    // With schemas on, the envelope is under `payload`.
    if let Some(payload) = envelope.get_mut("payload").map(serde_json::Value::take)
        && payload.is_object()
    {
        envelope = payload;
    }
    match envelope.get("op")?.as_str()? {
        "d" => Some((true, Row::Json(envelope.get("before")?.to_string()))),
        _ => Some((false, Row::Json(envelope.get("after")?.to_string()))),
    }
}

/// What one Avro message does: its value's record is the row (upserted); an upsert
/// topic's tombstone deletes the row its key names — an Avro record of the key columns,
/// or (not in the wire format) the bare value of a one-column key; a Debezium envelope
/// deletes `before` (`op` d) or upserts `after`. An error only when the schema registry
/// cannot be asked: skipping the message would lose it.
fn avro_change_of(
    decoder: &crate::connectors::avro::AvroDecoder,
    envelope: Envelope,
    table: &StateTable,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> Result<MessageChange> {
    let schema = table.schema();
    if envelope == Envelope::Debezium {
        if value.is_none() {
            return Ok(Ok(None)); // Debezium's tombstone after a delete
        }
        return Ok(decoder.debezium(value, schema)?.and_then(|change| {
            let missing = || format!("a Debezium change (op {}) without its row", change.op);
            if change.op == "d" {
                let before = change.before.clone().ok_or_else(missing)?;
                Ok(Some((true, Row::Fields(before))))
            } else {
                let after = change.after.clone().ok_or_else(missing)?;
                Ok(Some((false, Row::Fields(after))))
            }
        }));
    }
    if value.is_some() || envelope != Envelope::Upsert {
        return Ok(decoder
            .fields(value, schema)?
            .map(|fields| Some((false, Row::Fields(fields)))));
    }
    let Some(key) = key else {
        return Ok(Ok(None));
    };
    if let Ok(fields) = decoder.fields(Some(key), schema)? {
        return Ok(Ok(Some((true, Row::Fields(fields)))));
    }
    let not_a_key =
        || "a tombstone whose key is neither an Avro record nor a one-column key".to_string();
    let [only] = table.pk_indices() else {
        return Ok(Err(not_a_key()));
    };
    let Ok(text) = std::str::from_utf8(key) else {
        return Ok(Err(not_a_key()));
    };
    let mut fields = vec![None; schema.fields().len()];
    fields[*only] = Some(text.to_string());
    Ok(Ok(Some((true, Row::Fields(fields)))))
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

/// One message's change: an upsert of its row, or a delete of the row its key columns
/// name; `message` is its index in the batch read.
struct Change {
    delete: bool,
    row: Row,
    message: usize,
}

/// A row as a message carries it.
enum Row {
    /// A JSON object (or for `ENCODE CSV`, a line).
    Json(String),
    /// The text of each of the table's columns, decoded from Avro (`None`: NULL or not
    /// in the record).
    Fields(Vec<Option<String>>),
}

/// The rows of a run as a batch of `schema` (those that decode), the message each row of
/// it came from, and the messages whose rows did not decode, with why.
#[allow(clippy::type_complexity)]
fn decode_rows(
    rows: &[(usize, Row)],
    schema: &arrow::datatypes::SchemaRef,
    format: &RecordFormat,
) -> Result<(RecordBatch, Vec<usize>, Vec<(usize, String)>)> {
    let mut texts = Vec::new();
    let mut fields = Vec::new();
    for (_, row) in rows {
        match row {
            Row::Json(text) => texts.push(text.as_str()),
            Row::Fields(f) => fields.push(Some(f.clone())),
        }
    }
    let (batch, keep, reasons): (RecordBatch, Vec<bool>, Vec<String>) = if fields.is_empty() {
        let (batch, keep) = records::decode_unfiltered(texts.iter().copied(), schema, format)?;
        let reasons = records::rejections(&texts, &keep, schema, format)
            .into_iter()
            .map(|r| r.error)
            .collect();
        (batch, keep, reasons)
    } else {
        let (batch, keep) = records::cast_fields(&fields, schema)?;
        let reasons = fields
            .iter()
            .zip(&keep)
            .filter(|(_, ok)| !**ok)
            .map(|(f, _)| records::why_not_cast(f.as_deref().unwrap_or_default(), schema))
            .collect();
        (batch, keep, reasons)
    };
    let mut reasons = reasons.into_iter();
    let mut kept = Vec::new();
    let mut rejected = Vec::new();
    for ((message, _), ok) in rows.iter().zip(&keep) {
        if *ok {
            kept.push(*message);
        } else {
            rejected.push((*message, reasons.next().unwrap_or_default()));
        }
    }
    let keep = arrow::array::BooleanArray::from(keep);
    Ok((
        arrow::compute::filter_record_batch(&batch, &keep)?,
        kept,
        rejected,
    ))
}

/// Applies the changes in order: runs of upserts and runs of deletes, each one write.
/// Returns the messages whose rows were skipped — not decodable, or without their key or
/// a `NOT NULL` column — with why.
fn apply(
    table: &Arc<StateTable>,
    spec: &KafkaSpec,
    changes: Vec<Change>,
) -> Result<Vec<(usize, String)>> {
    let format = match &spec.payload {
        crate::connectors::kafka::PayloadFormat::Records(f) => *f,
        // Refused at CREATE TABLE.
        crate::connectors::kafka::PayloadFormat::Bytes
        | crate::connectors::kafka::PayloadFormat::Avro(_) => RecordFormat::Json,
    };
    // Decoded with every column nullable: a record missing its key is dropped below,
    // not an error for the whole batch.
    let schema = nullable(table.schema());
    let mut run: Vec<(usize, Row)> = Vec::new();
    let mut run_is_delete = false;
    let mut skipped = Vec::new();
    let mut flush = |rows: &mut Vec<(usize, Row)>, delete: bool| -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let (batch, origins, rejected) = decode_rows(rows, &schema, &format)?;
        skipped.extend(rejected);
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
        let complete: Vec<bool> = (0..batch.num_rows())
            .map(|r| required.iter().all(|c| batch.column(*c).is_valid(r)))
            .collect();
        for (message, ok) in origins.iter().zip(&complete) {
            if !ok {
                let what = if delete {
                    "its key"
                } else {
                    "its key or a NOT NULL column"
                };
                skipped.push((*message, format!("the row lacks {what}")));
            }
        }
        let complete = arrow::array::BooleanArray::from(complete);
        let batch = arrow::compute::filter_record_batch(&batch, &complete)?;
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
        if change.delete != run_is_delete {
            flush(&mut run, run_is_delete)?;
            run_is_delete = change.delete;
        }
        run.push((change.message, change.row));
    }
    flush(&mut run, run_is_delete)?;
    Ok(skipped)
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
