//! Avro message values in Confluent's wire format: a zero byte, the writer schema's id in
//! the schema registry (4 bytes, big endian), then the Avro binary encoding of one record.
//!
//! A source's columns are the record's fields, by name (derived from the subject's latest
//! schema when `CREATE SOURCE` declares none). Each message is decoded with the schema its
//! id names (fetched once per id), and each field becomes the text form of its column,
//! which the shared record decoder then casts column by column ([`super::records`]), so
//! Avro and JSON values follow one set of conversion rules. Nested records, arrays and
//! maps become JSON text (`JSONB` columns).

use super::schema_registry::SchemaRegistry;
use crate::catalog::Column;
use crate::catalog::types::SqlType;
use crate::error::{EddyError, Result, sqlstate};
use apache_avro::Schema;
use apache_avro::types::Value;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// The first byte of a value in Confluent's wire format.
pub const MAGIC_BYTE: u8 = 0;

/// The registry subject of a topic's value schemas (Confluent's `TopicNameStrategy`).
pub fn value_subject(topic: &str) -> String {
    format!("{topic}-value")
}

fn unsupported(message: impl Into<String>) -> EddyError {
    EddyError::not_supported(message)
}

/// Parses an Avro schema's JSON text.
pub fn parse_schema(text: &str) -> Result<Schema> {
    Schema::parse_str(text).map_err(|e| {
        EddyError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("not a valid Avro schema: {e}"),
        )
    })
}

/// The columns of a record schema's fields, in order (all nullable).
pub fn columns_of(schema: &Schema) -> Result<Vec<Column>> {
    let Schema::Record(record) = schema else {
        return Err(unsupported(
            "an Avro value schema must be a record to give a source its columns",
        ));
    };
    record
        .fields
        .iter()
        .map(|field| {
            let (sql_type, _) = sql_type_of(&field.schema).map_err(|e| {
                unsupported(format!("Avro field \"{}\": {}", field.name, e.message))
            })?;
            // A source's columns admit NULL whatever the schema says (as RisingWave's
            // do): a malformed message must not fail the batch it came in.
            Ok(Column {
                name: field.name.clone(),
                sql_type,
                nullable: true,
                hidden: false,
                default: None,
                generated: None,
                description: None,
            })
        })
        .collect()
}

/// The columns of the row record inside a Debezium envelope schema (the record a
/// `before` or `after` field holds).
pub fn debezium_row_columns(schema: &Schema) -> Result<Vec<Column>> {
    let Schema::Record(envelope) = schema else {
        return Err(unsupported("a Debezium value schema must be a record"));
    };
    let row = envelope
        .fields
        .iter()
        .filter(|f| f.name == "before" || f.name == "after")
        .find_map(|f| match &f.schema {
            Schema::Union(u) => u.variants().iter().find(|v| matches!(v, Schema::Record(_))),
            record @ Schema::Record(_) => Some(record),
            _ => None,
        })
        .ok_or_else(|| {
            unsupported("a Debezium value schema needs a record in its before or after field")
        })?;
    columns_of(row)
}

/// The column type of an Avro type, and whether it admits NULL (a union with `null`).
fn sql_type_of(schema: &Schema) -> Result<(SqlType, bool)> {
    Ok(match schema {
        Schema::Union(union) => {
            let variants = union.variants();
            let others: Vec<&Schema> = variants
                .iter()
                .filter(|v| !matches!(v, Schema::Null))
                .collect();
            match others.as_slice() {
                [one] => (sql_type_of(one)?.0, others.len() < variants.len()),
                _ => return Err(unsupported("a union of several types is not supported")),
            }
        }
        Schema::Boolean => (SqlType::Boolean, false),
        Schema::Int => (SqlType::Int, false),
        Schema::Long => (SqlType::BigInt, false),
        Schema::Float => (SqlType::Real, false),
        Schema::Double => (SqlType::Double, false),
        Schema::String | Schema::Enum(_) | Schema::Uuid => (SqlType::Varchar(None), false),
        Schema::Date => (SqlType::Date, false),
        Schema::TimeMillis | Schema::TimeMicros => (SqlType::Time, false),
        Schema::TimestampMillis | Schema::TimestampMicros | Schema::TimestampNanos => {
            (SqlType::Timestamptz, false)
        }
        Schema::LocalTimestampMillis
        | Schema::LocalTimestampMicros
        | Schema::LocalTimestampNanos => (SqlType::Timestamp, false),
        Schema::Decimal(d) if d.precision <= 38 => (
            SqlType::Numeric {
                precision: Some(d.precision as u8),
                scale: Some(d.scale as i8),
            },
            false,
        ),
        Schema::BigDecimal | Schema::Decimal(_) => (
            SqlType::Numeric {
                precision: None,
                scale: None,
            },
            false,
        ),
        Schema::Record(_) | Schema::Array(_) | Schema::Map(_) => (SqlType::Jsonb, false),
        other => {
            return Err(unsupported(format!(
                "Avro type {other:?} is not supported yet"
            )));
        }
    })
}

/// Decodes message values with the writer schemas their ids name.
#[derive(Debug)]
pub struct AvroDecoder {
    registry: SchemaRegistry,
    /// Writer schemas by id, fetched once each.
    schemas: Mutex<HashMap<u32, Arc<Schema>>>,
}

impl PartialEq for AvroDecoder {
    fn eq(&self, other: &Self) -> bool {
        self.registry == other.registry
    }
}

impl AvroDecoder {
    pub fn new(registry: SchemaRegistry) -> Self {
        Self {
            registry,
            schemas: Mutex::new(HashMap::new()),
        }
    }

    fn schema(&self, id: u32) -> Result<Arc<Schema>> {
        if let Some(schema) = self.schemas.lock().get(&id) {
            return Ok(schema.clone());
        }
        let schema = Arc::new(parse_schema(&self.registry.by_id(id)?)?);
        self.schemas.lock().insert(id, schema.clone());
        Ok(schema)
    }

    /// The text of each of `columns` in one message value (`None` for a NULL or a
    /// field the record lacks); `Ok(Err(why))` when the value is malformed (not in the
    /// wire format, or not decodable with its schema). An error when the registry cannot
    /// be asked for the schema: skipping the message would lose it.
    pub fn fields(
        &self,
        value: Option<&[u8]>,
        columns: &arrow::datatypes::Schema,
    ) -> Result<std::result::Result<Vec<Option<String>>, String>> {
        let (id, schema, fields) = match self.record(value)? {
            Ok(decoded) => decoded,
            Err(why) => return Ok(Err(why)),
        };
        let Schema::Record(record) = schema.as_ref() else {
            return Ok(Err(format!("schema {id} is not a record")));
        };
        Ok(Ok(column_texts(&fields, record, columns)))
    }

    /// A value's record: the writer schema's id, the schema, and the record's fields.
    #[allow(clippy::type_complexity)]
    fn record(
        &self,
        value: Option<&[u8]>,
    ) -> Result<std::result::Result<(u32, Arc<Schema>, Vec<(String, Value)>), String>> {
        let Some(value) = value else {
            return Ok(Err("no value (a tombstone)".into()));
        };
        if value.len() < 5 || value[0] != MAGIC_BYTE {
            return Ok(Err(
                "not in Confluent's Avro wire format (magic byte 0, schema id)".into(),
            ));
        }
        let id = u32::from_be_bytes(value[1..5].try_into().expect("4 bytes"));
        let schema = self.schema(id)?;
        Ok(
            match apache_avro::from_avro_datum(&schema, &mut &value[5..], None) {
                Ok(Value::Record(fields)) => Ok((id, schema, fields)),
                Ok(_) => Err(format!("schema {id} is not a record")),
                Err(e) => Err(format!("does not decode with schema {id}: {e}")),
            },
        )
    }

    /// A Debezium change envelope (`before`, `after`, `op`) in Avro: its operation and
    /// the text of `columns` in each row it carries.
    pub fn debezium(
        &self,
        value: Option<&[u8]>,
        columns: &arrow::datatypes::Schema,
    ) -> Result<std::result::Result<DebeziumChange, String>> {
        let (id, schema, fields) = match self.record(value)? {
            Ok(decoded) => decoded,
            Err(why) => return Ok(Err(why)),
        };
        let not_envelope = || format!("schema {id} is not a Debezium envelope");
        let Schema::Record(envelope) = schema.as_ref() else {
            return Ok(Err(not_envelope()));
        };
        // The row record is defined inline in one of `before` and `after`, named in the
        // other.
        let row_schema = ["before", "after"].iter().find_map(|name| {
            let field = envelope.fields.get(*envelope.lookup.get(*name)?)?;
            match &field.schema {
                Schema::Union(u) => u.variants().iter().find_map(|v| match v {
                    Schema::Record(r) => Some(r),
                    _ => None,
                }),
                Schema::Record(r) => Some(r),
                _ => None,
            }
        });
        let Some(row_schema) = row_schema else {
            return Ok(Err(not_envelope()));
        };
        let field = |name: &str| fields.iter().find(|(n, _)| n == name).map(|(_, v)| v);
        let row = |name: &str| -> Option<Vec<Option<String>>> {
            let mut value = field(name)?;
            while let Value::Union(_, inner) = value {
                value = inner;
            }
            match value {
                Value::Record(row) => Some(column_texts(row, row_schema, columns)),
                _ => None,
            }
        };
        let op = match field("op") {
            Some(Value::String(op)) | Some(Value::Enum(_, op)) => op.clone(),
            _ => return Ok(Err(not_envelope())),
        };
        Ok(Ok(DebeziumChange {
            op,
            before: row("before"),
            after: row("after"),
        }))
    }
}

/// A Debezium change: `op` (`c`, `r`, `u`, `d`) and the rows before and after it.
pub struct DebeziumChange {
    pub op: String,
    pub before: Option<Vec<Option<String>>>,
    pub after: Option<Vec<Option<String>>>,
}

/// The text of each of `columns` in a record's fields, matched by name (exactly, else
/// ignoring case).
fn column_texts(
    fields: &[(String, Value)],
    record: &apache_avro::schema::RecordSchema,
    columns: &arrow::datatypes::Schema,
) -> Vec<Option<String>> {
    let position = |name: &str| {
        record.lookup.get(name).copied().or_else(|| {
            record
                .fields
                .iter()
                .position(|f| f.name.eq_ignore_ascii_case(name))
        })
    };
    columns
        .fields()
        .iter()
        .map(|column| {
            position(column.name())
                .and_then(|i| Some((fields.get(i)?, &record.fields.get(i)?.schema)))
                .and_then(|(field, schema)| text_of(&field.1, schema))
        })
        .collect()
}

/// A message value as a dead letter shows it: its text if it is UTF-8 without control
/// characters, otherwise its bytes in hex (`\x...`, as PostgreSQL shows `bytea`).
pub fn shown(value: Option<&[u8]>) -> String {
    let Some(value) = value else {
        return String::new();
    };
    match std::str::from_utf8(value) {
        Ok(text)
            if !text
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t') =>
        {
            text.to_string()
        }
        _ => {
            let mut out = String::from("\\x");
            for b in value {
                out.push_str(&format!("{b:02x}"));
            }
            out
        }
    }
}

/// Writes rows as Avro records in Confluent's wire format, under a schema registered for
/// them (a Kafka sink's values, and its keys for `FORMAT UPSERT`). Every column is a
/// nullable field (`["null", T]`): decimals keep their precision and scale, timestamps
/// are microseconds (`timestamp-micros` with a zone, `local-timestamp-micros` without),
/// types Avro lacks (intervals, arrays, JSON) are strings.
#[derive(Debug)]
pub struct AvroEncoder {
    id: u32,
    schema: Schema,
}

impl AvroEncoder {
    /// Registers the schema of `columns` (a record named `name`) under `subject`.
    pub fn register(
        registry: &SchemaRegistry,
        subject: &str,
        name: &str,
        columns: &arrow::datatypes::Schema,
    ) -> Result<Self> {
        let text = schema_of_columns(name, columns)?;
        let schema = parse_schema(&text)?;
        let id = registry.register(subject, &text)?;
        Ok(Self { id, schema })
    }

    /// Registers, under `subject`, Debezium's change envelope around the record of
    /// `columns` (named `name`): `before` and `after` (each the row or null), `op` and
    /// `ts_ms`. The encoder writes rows as bare records ([`AvroEncoder::encode_datums`]),
    /// which [`AvroEncoder::debezium_envelope`] wraps.
    pub fn register_debezium(
        registry: &SchemaRegistry,
        subject: &str,
        name: &str,
        columns: &arrow::datatypes::Schema,
    ) -> Result<Self> {
        let (envelope, row_text) = debezium_schemas(name, columns)?;
        let id = registry.register(subject, &envelope)?;
        Ok(Self {
            id,
            schema: parse_schema(&row_text)?,
        })
    }

    /// A Debezium envelope in the wire format: `before` and `after` are bare records from
    /// [`AvroEncoder::encode_datums`]. Avro writes a record as its fields one after the
    /// other and a union as its branch's index then the value, so the envelope is
    /// assembled from the rows' bytes as they are.
    pub fn debezium_envelope(
        &self,
        before: Option<&[u8]>,
        after: Option<&[u8]>,
        op: &str,
        ts_ms: i64,
    ) -> Vec<u8> {
        let mut out = vec![MAGIC_BYTE];
        out.extend_from_slice(&self.id.to_be_bytes());
        for row in [before, after] {
            match row {
                None => put_long(&mut out, 0),
                Some(row) => {
                    put_long(&mut out, 1);
                    out.extend_from_slice(row);
                }
            }
        }
        put_long(&mut out, op.len() as i64);
        out.extend_from_slice(op.as_bytes());
        put_long(&mut out, 1);
        put_long(&mut out, ts_ms);
        out
    }

    /// Each row of `batch` as one message value.
    pub fn encode(&self, batch: &arrow::array::RecordBatch) -> Result<Vec<Vec<u8>>> {
        let header = self.id.to_be_bytes();
        Ok(self
            .encode_datums(batch)?
            .into_iter()
            .map(|datum| {
                let mut out = Vec::with_capacity(5 + datum.len());
                out.push(MAGIC_BYTE);
                out.extend_from_slice(&header);
                out.extend(datum);
                out
            })
            .collect())
    }

    /// Each row of `batch` as a bare Avro record (no wire-format header).
    pub fn encode_datums(&self, batch: &arrow::array::RecordBatch) -> Result<Vec<Vec<u8>>> {
        let columns = batch
            .columns()
            .iter()
            .map(column_values)
            .collect::<Result<Vec<_>>>()?;
        let names: Vec<&String> = batch
            .schema_ref()
            .fields()
            .iter()
            .map(|f| f.name())
            .collect();
        (0..batch.num_rows())
            .map(|row| {
                let record = Value::Record(
                    names
                        .iter()
                        .zip(&columns)
                        .map(|(name, values)| (name.to_string(), values[row].clone()))
                        .collect(),
                );
                apache_avro::to_avro_datum(&self.schema, record)
                    .map_err(|e| EddyError::internal(format!("cannot encode a row as Avro: {e}")))
            })
            .collect()
    }
}

/// The JSON text of Debezium's envelope schema around the record of `columns`, and of
/// that record's schema.
fn debezium_schemas(name: &str, columns: &arrow::datatypes::Schema) -> Result<(String, String)> {
    let row_text = schema_of_columns(name, columns)?;
    let row: serde_json::Value = serde_json::from_str(&row_text)
        .map_err(|e| EddyError::internal(format!("a row schema is not JSON: {e}")))?;
    let row_name = row["name"].clone();
    let envelope = serde_json::json!({
        "type": "record",
        "name": "Envelope",
        "namespace": format!("eddy.{}", row_name.as_str().unwrap_or("row")),
        "fields": [
            {"name": "before", "type": ["null", row], "default": null},
            {"name": "after", "type": ["null", row_name], "default": null},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": null},
        ],
    })
    .to_string();
    parse_schema(&envelope)?;
    Ok((envelope, row_text))
}

/// Avro's encoding of a `long` (and of lengths and union indexes): zig-zag, then 7 bits
/// a byte, low bits first.
fn put_long(out: &mut Vec<u8>, v: i64) {
    let mut n = ((v << 1) ^ (v >> 63)) as u64;
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// The Avro type of a column (before making it nullable).
fn avro_type_of(data_type: &arrow::datatypes::DataType) -> serde_json::Value {
    use arrow::datatypes::DataType::*;
    use serde_json::json;
    match data_type {
        Boolean => json!("boolean"),
        Int8 | Int16 | Int32 | UInt8 | UInt16 => json!("int"),
        Int64 | UInt32 | UInt64 => json!("long"),
        Float16 | Float32 => json!("float"),
        Float64 => json!("double"),
        Binary | LargeBinary | BinaryView => json!("bytes"),
        Decimal128(p, s) => {
            json!({"type": "bytes", "logicalType": "decimal", "precision": p, "scale": s})
        }
        Date32 => json!({"type": "int", "logicalType": "date"}),
        Time64(_) | Time32(_) => json!({"type": "long", "logicalType": "time-micros"}),
        Timestamp(_, Some(_)) => json!({"type": "long", "logicalType": "timestamp-micros"}),
        Timestamp(_, None) => json!({"type": "long", "logicalType": "local-timestamp-micros"}),
        _ => json!("string"),
    }
}

/// The JSON text of the record schema of `columns`.
pub fn schema_of_columns(name: &str, columns: &arrow::datatypes::Schema) -> Result<String> {
    let valid = |n: &str| {
        let mut chars = n.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let record_name: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let mut fields = Vec::new();
    for field in columns.fields() {
        if !valid(field.name()) {
            return Err(unsupported(format!(
                "column \"{}\" is not a valid Avro field name (letters, digits and _)",
                field.name()
            )));
        }
        fields.push(serde_json::json!({
            "name": field.name(),
            "type": ["null", avro_type_of(field.data_type())],
            "default": null,
        }));
    }
    Ok(serde_json::json!({
        "type": "record",
        "name": if valid(&record_name) { record_name } else { format!("_{record_name}") },
        "fields": fields,
    })
    .to_string())
}

/// A column's values as nullable Avro values (`Union(0, Null)` or `Union(1, v)`).
fn column_values(array: &arrow::array::ArrayRef) -> Result<Vec<Value>> {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::DataType::*;
    use arrow::datatypes::*;
    let cast =
        |to: &DataType| -> Result<arrow::array::ArrayRef> { Ok(arrow::compute::cast(array, to)?) };
    let present = |row: usize| array.is_valid(row);
    let values: Vec<Value> = match array.data_type() {
        Boolean => {
            let a = array.as_boolean();
            (0..a.len()).map(|r| Value::Boolean(a.value(r))).collect()
        }
        Int8 | Int16 | Int32 | UInt8 | UInt16 => {
            let a = cast(&Int32)?;
            let a = a.as_primitive::<Int32Type>();
            (0..a.len()).map(|r| Value::Int(a.value(r))).collect()
        }
        Int64 | UInt32 | UInt64 => {
            let a = cast(&Int64)?;
            let a = a.as_primitive::<Int64Type>();
            (0..a.len()).map(|r| Value::Long(a.value(r))).collect()
        }
        Float16 | Float32 => {
            let a = cast(&Float32)?;
            let a = a.as_primitive::<Float32Type>();
            (0..a.len()).map(|r| Value::Float(a.value(r))).collect()
        }
        Float64 => {
            let a = array.as_primitive::<Float64Type>();
            (0..a.len()).map(|r| Value::Double(a.value(r))).collect()
        }
        Binary | LargeBinary | BinaryView => {
            let a = cast(&Binary)?;
            let a = a.as_binary::<i32>();
            (0..a.len())
                .map(|r| Value::Bytes(a.value(r).to_vec()))
                .collect()
        }
        Decimal128(..) => {
            let a = array.as_primitive::<Decimal128Type>();
            (0..a.len())
                .map(|r| {
                    Value::Decimal(apache_avro::Decimal::from(
                        a.value(r).to_be_bytes().to_vec(),
                    ))
                })
                .collect()
        }
        Date32 => {
            let a = array.as_primitive::<Date32Type>();
            (0..a.len()).map(|r| Value::Date(a.value(r))).collect()
        }
        Time64(_) | Time32(_) => {
            let a = cast(&Time64(TimeUnit::Microsecond))?;
            let a = a.as_primitive::<Time64MicrosecondType>();
            (0..a.len())
                .map(|r| Value::TimeMicros(a.value(r)))
                .collect()
        }
        Timestamp(_, zone) => {
            let a = cast(&Timestamp(TimeUnit::Microsecond, zone.clone()))?;
            let a = a.as_primitive::<TimestampMicrosecondType>();
            (0..a.len())
                .map(|r| {
                    if zone.is_some() {
                        Value::TimestampMicros(a.value(r))
                    } else {
                        Value::LocalTimestampMicros(a.value(r))
                    }
                })
                .collect()
        }
        _ => {
            let a = cast(&Utf8)?;
            let a = a.as_string::<i32>();
            (0..a.len())
                .map(|r| Value::String(a.value(r).to_string()))
                .collect()
        }
    };
    Ok(values
        .into_iter()
        .enumerate()
        .map(|(row, v)| {
            if present(row) {
                Value::Union(1, Box::new(v))
            } else {
                Value::Union(0, Box::new(Value::Null))
            }
        })
        .collect())
}

/// A value as the text its column casts from (`None`: NULL).
fn text_of(value: &Value, schema: &Schema) -> Option<String> {
    use chrono::{DateTime, NaiveDate, NaiveTime};
    let timestamp = |seconds: i64, nanos: u32, zone: bool| {
        let t = DateTime::from_timestamp(seconds, nanos)?;
        Some(if zone {
            t.format("%Y-%m-%dT%H:%M:%S%.fZ").to_string()
        } else {
            t.naive_utc().format("%Y-%m-%dT%H:%M:%S%.f").to_string()
        })
    };
    let split = |v: i64, per_second: i64| (v.div_euclid(per_second), v.rem_euclid(per_second));
    Some(match value {
        Value::Null => return None,
        Value::Union(index, inner) => {
            let variant = match schema {
                Schema::Union(u) => u.variants().get(*index as usize)?,
                other => other,
            };
            return text_of(inner, variant);
        }
        Value::Boolean(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Long(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Double(f) => f.to_string(),
        Value::String(s) | Value::Enum(_, s) => s.clone(),
        Value::Uuid(u) => u.to_string(),
        Value::Date(days) => (NaiveDate::from_ymd_opt(1970, 1, 1)?
            + chrono::Duration::days(*days as i64))
        .to_string(),
        Value::TimeMillis(ms) => {
            let (s, ms) = split(*ms as i64, 1000);
            NaiveTime::from_num_seconds_from_midnight_opt(s as u32, ms as u32 * 1_000_000)?
                .format("%H:%M:%S%.f")
                .to_string()
        }
        Value::TimeMicros(us) => {
            let (s, us) = split(*us, 1_000_000);
            NaiveTime::from_num_seconds_from_midnight_opt(s as u32, us as u32 * 1000)?
                .format("%H:%M:%S%.f")
                .to_string()
        }
        Value::TimestampMillis(v) | Value::LocalTimestampMillis(v) => {
            let (s, ms) = split(*v, 1000);
            timestamp(
                s,
                ms as u32 * 1_000_000,
                matches!(value, Value::TimestampMillis(_)),
            )?
        }
        Value::TimestampMicros(v) | Value::LocalTimestampMicros(v) => {
            let (s, us) = split(*v, 1_000_000);
            timestamp(
                s,
                us as u32 * 1000,
                matches!(value, Value::TimestampMicros(_)),
            )?
        }
        Value::TimestampNanos(v) | Value::LocalTimestampNanos(v) => {
            let (s, ns) = split(*v, 1_000_000_000);
            timestamp(s, ns as u32, matches!(value, Value::TimestampNanos(_)))?
        }
        Value::Decimal(d) => {
            let scale = match schema {
                Schema::Decimal(s) => s.scale,
                _ => 0,
            };
            let bytes = Vec::<u8>::try_from(d).ok()?;
            decimal_text(&bytes, scale)?
        }
        Value::BigDecimal(d) => d.to_string(),
        Value::Record(_) | Value::Array(_) | Value::Map(_) => {
            let json: serde_json::Value = value.clone().try_into().ok()?;
            json.to_string()
        }
        _ => return None,
    })
}

/// The text of a decimal given as its unscaled value's big-endian two's complement
/// bytes (at most 16) and its scale.
fn decimal_text(bytes: &[u8], scale: usize) -> Option<String> {
    if bytes.is_empty() || bytes.len() > 16 {
        return None;
    }
    let fill = if bytes[0] & 0x80 != 0 { 0xff } else { 0 };
    let mut wide = [fill; 16];
    wide[16 - bytes.len()..].copy_from_slice(bytes);
    let unscaled = i128::from_be_bytes(wide);
    let digits = unscaled.unsigned_abs().to_string();
    let sign = if unscaled < 0 { "-" } else { "" };
    if scale == 0 {
        return Some(format!("{sign}{digits}"));
    }
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (whole, fraction) = padded.split_at(padded.len() - scale);
    Some(format!("{sign}{whole}.{fraction}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_debezium_envelope_assembled_from_row_bytes_decodes_with_its_schema() {
        use arrow::array::{Int64Array, RecordBatch, StringArray};
        use arrow::datatypes::{DataType, Field, Schema as ArrowSchema};
        let columns = Arc::new(ArrowSchema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let (envelope_text, row_text) = debezium_schemas("accounts", &columns).unwrap();
        let encoder = AvroEncoder {
            id: 7,
            schema: parse_schema(&row_text).unwrap(),
        };
        let batch = RecordBatch::try_new(
            columns.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1, 300])),
                Arc::new(StringArray::from(vec![Some("before"), None])),
            ],
        )
        .unwrap();
        let rows = encoder.encode_datums(&batch).unwrap();
        let message =
            encoder.debezium_envelope(Some(&rows[0]), Some(&rows[1]), "u", 1_700_000_000_123);
        assert_eq!(&message[..5], &[0, 0, 0, 0, 7]);
        let envelope = parse_schema(&envelope_text).unwrap();
        let decoded = apache_avro::from_avro_datum(&envelope, &mut &message[5..], None).unwrap();
        let Value::Record(fields) = decoded else {
            panic!("{decoded:?}")
        };
        let texts = |v: &Value| {
            let Value::Union(1, row) = v else {
                panic!("{v:?}")
            };
            let Schema::Record(record) = parse_schema(&row_text).unwrap() else {
                panic!()
            };
            let Value::Record(row) = row.as_ref() else {
                panic!()
            };
            column_texts(row, &record, &columns)
        };
        assert_eq!(
            texts(&fields[0].1),
            vec![Some("1".into()), Some("before".into())]
        );
        assert_eq!(texts(&fields[1].1), vec![Some("300".into()), None]);
        assert_eq!(fields[2].1, Value::String("u".into()));
        assert_eq!(
            fields[3].1,
            Value::Union(1, Box::new(Value::Long(1_700_000_000_123)))
        );
        let created = encoder.debezium_envelope(None, Some(&rows[0]), "c", -1);
        let Value::Record(fields) =
            apache_avro::from_avro_datum(&envelope, &mut &created[5..], None).unwrap()
        else {
            panic!()
        };
        assert_eq!(fields[0].1, Value::Union(0, Box::new(Value::Null)));
        assert_eq!(fields[3].1, Value::Union(1, Box::new(Value::Long(-1))));
    }

    use super::*;

    #[test]
    fn decimals_keep_sign_and_scale() {
        assert_eq!(decimal_text(&[0x04, 0xd2], 2).unwrap(), "12.34");
        assert_eq!(decimal_text(&[0xfb, 0x2e], 2).unwrap(), "-12.34");
        assert_eq!(decimal_text(&[0x05], 3).unwrap(), "0.005");
        assert_eq!(decimal_text(&[0xff], 0).unwrap(), "-1");
    }

    #[test]
    fn record_fields_become_columns_and_values_their_text() {
        let schema = parse_schema(
            r#"{"type": "record", "name": "order", "fields": [
                {"name": "id", "type": "long"},
                {"name": "note", "type": ["null", "string"]},
                {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
                {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
                {"name": "tags", "type": {"type": "array", "items": "string"}}
            ]}"#,
        )
        .unwrap();
        let columns = columns_of(&schema).unwrap();
        let shown: Vec<(String, bool)> = columns
            .iter()
            .map(|c| (format!("{} {:?}", c.name, c.sql_type), c.nullable))
            .collect();
        assert_eq!(shown[0], ("id BigInt".into(), true));
        assert_eq!(shown[1], ("note Varchar(None)".into(), true));
        assert!(shown[2].0.starts_with("amount Numeric"), "{shown:?}");
        assert_eq!(shown[3], ("at Timestamptz".into(), true));
        assert_eq!(shown[4], ("tags Jsonb".into(), true));

        let record = Value::Record(vec![
            ("id".into(), Value::Long(7)),
            ("note".into(), Value::Union(0, Box::new(Value::Null))),
            (
                "amount".into(),
                Value::Decimal(apache_avro::Decimal::from(vec![0xfb, 0x2e])),
            ),
            ("at".into(), Value::TimestampMillis(1_700_000_000_123)),
            ("tags".into(), Value::Array(vec![Value::String("a".into())])),
        ]);
        let Schema::Record(r) = &schema else { panic!() };
        let texts: Vec<Option<String>> = match &record {
            Value::Record(fields) => fields
                .iter()
                .zip(&r.fields)
                .map(|((_, v), f)| text_of(v, &f.schema))
                .collect(),
            _ => unreachable!(),
        };
        assert_eq!(
            texts,
            vec![
                Some("7".into()),
                None,
                Some("-12.34".into()),
                Some("2023-11-14T22:13:20.123Z".into()),
                Some(r#"["a"]"#.into()),
            ]
        );
        // The same record through the wire format.
        let mut wire = vec![MAGIC_BYTE, 0, 0, 0, 1];
        wire.extend(apache_avro::to_avro_datum(&schema, record).unwrap());
        let decoder = AvroDecoder::new(SchemaRegistry::new("http://127.0.0.1:1").unwrap());
        decoder.schemas.lock().insert(1, Arc::new(schema));
        let arrow_columns = arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("amount", arrow::datatypes::DataType::Utf8, true),
            arrow::datatypes::Field::new("ID", arrow::datatypes::DataType::Utf8, true),
            arrow::datatypes::Field::new("missing", arrow::datatypes::DataType::Utf8, true),
        ]);
        assert_eq!(
            decoder.fields(Some(&wire), &arrow_columns).unwrap(),
            Ok(vec![Some("-12.34".into()), Some("7".into()), None])
        );
        let not_wire = decoder.fields(Some(b"{}"), &arrow_columns).unwrap();
        assert!(not_wire.unwrap_err().contains("wire format"));
        wire.truncate(7);
        let truncated = decoder.fields(Some(&wire), &arrow_columns).unwrap();
        assert!(
            truncated
                .unwrap_err()
                .contains("does not decode with schema 1")
        );
        assert_eq!(super::shown(Some(&[0, 1, 0xff])), "\\x0001ff");
        assert_eq!(super::shown(Some(b"{\"a\": 1}")), "{\"a\": 1}");
    }
}
