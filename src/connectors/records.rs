//! Decodes text records — lines of a file, payloads of Kafka messages — into an Arrow
//! batch of a source's schema: JSON objects (fields by column name) or CSV lines. Each
//! column is cast as a whole; a record that cannot be split, or has a value that does not
//! cast to its column's type, is dropped and counted as malformed, never an error.

use super::csv_line;
use crate::error::Result;
use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, StringArray};
use arrow::compute::{CastOptions, cast_with_options, filter_record_batch};
use arrow::datatypes::{DataType, SchemaRef};

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RecordFormat {
    Json,
    Csv { delimiter: char },
}

/// `ENCODE CSV (delimiter = ';', without_header = 'true')` of a source: the delimiter
/// (default `,`) and whether files start with a header line (default yes).
pub fn csv_options(options: &std::collections::BTreeMap<String, String>) -> Result<(char, bool)> {
    let delimiter = match options.get("encode.delimiter") {
        Some(d) if d.chars().count() == 1 => d.chars().next().expect("one char"),
        Some(d) => {
            return Err(crate::error::EddyError::new(
                crate::error::sqlstate::INVALID_PARAMETER_VALUE,
                format!("delimiter must be one character, not '{d}'"),
            ));
        }
        None => ',',
    };
    let header = options
        .get("encode.without_header")
        .map(|v| v.to_ascii_lowercase())
        != Some("true".into());
    Ok((delimiter, header))
}

/// The records that decode, as a batch, and how many did not.
pub fn decode<'a>(
    records: impl Iterator<Item = &'a str>,
    schema: &SchemaRef,
    format: &RecordFormat,
) -> Result<(RecordBatch, u64)> {
    let (batch, ok) = decode_unfiltered(records, schema, format)?;
    let malformed = ok.iter().filter(|k| !**k).count() as u64;
    Ok((
        filter_record_batch(&batch, &BooleanArray::from(ok))?,
        malformed,
    ))
}

/// A record that did not decode, and why: what a source with `error.policy =
/// 'dead_letter'` keeps in `eddy_catalog.dead_letters`.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejected {
    pub record: String,
    pub error: String,
}

/// The records that decode, as a batch, and the others with why they did not.
pub fn decode_rejecting(
    records: &[&str],
    schema: &SchemaRef,
    format: &RecordFormat,
) -> Result<(RecordBatch, Vec<Rejected>)> {
    let (batch, ok) = decode_unfiltered(records.iter().copied(), schema, format)?;
    let rejected = rejections(records, &ok, schema, format);
    Ok((
        filter_record_batch(&batch, &BooleanArray::from(ok))?,
        rejected,
    ))
}

/// The records `ok` marks as not decoded, with why (worked out again for those only).
pub fn rejections(
    records: &[&str],
    ok: &[bool],
    schema: &SchemaRef,
    format: &RecordFormat,
) -> Vec<Rejected> {
    records
        .iter()
        .zip(ok)
        .filter(|(_, ok)| !**ok)
        .map(|(record, _)| Rejected {
            record: record.to_string(),
            error: match split(record, schema, format) {
                Some(fields) => why_not_cast(&fields, schema),
                None => match format {
                    RecordFormat::Json => "not a JSON object".to_string(),
                    RecordFormat::Csv { .. } => {
                        format!("not a CSV line of {} fields", schema.fields().len())
                    }
                },
            },
        })
        .collect()
}

/// Why a record's fields do not fit the schema: the first value that does not cast to
/// its column's type.
pub fn why_not_cast(fields: &[Option<String>], schema: &SchemaRef) -> String {
    for (field, text) in schema.fields().iter().zip(fields) {
        let Some(text) = text else { continue };
        let one = StringArray::from(vec![text.as_str()]);
        let cast = cast_with_options(
            &one,
            field.data_type(),
            &CastOptions {
                safe: true,
                ..Default::default()
            },
        );
        if cast.map(|c| c.is_null(0)).unwrap_or(true) {
            return format!(
                "column \"{}\": '{}' is not a valid {}",
                field.name(),
                text,
                crate::catalog::types::SqlType::from_arrow(field).pg_name()
            );
        }
    }
    "the record does not fit the source's columns".to_string()
}

/// A record's fields as text, by column; `None` when it cannot be split.
fn split(record: &str, schema: &SchemaRef, format: &RecordFormat) -> Option<Vec<Option<String>>> {
    match format {
        RecordFormat::Json => json_fields(record, schema),
        RecordFormat::Csv { delimiter } => csv_line::split(record, *delimiter, '"', '"', "")
            .ok()
            .filter(|f| f.len() == schema.fields().len()),
    }
}

/// Every record as a row (malformed ones with whatever cast), and which decoded.
pub fn decode_unfiltered<'a>(
    records: impl Iterator<Item = &'a str>,
    schema: &SchemaRef,
    format: &RecordFormat,
) -> Result<(RecordBatch, Vec<bool>)> {
    // Every record as text fields; one that cannot be split is malformed.
    let fields: Vec<Option<Vec<Option<String>>>> = records
        .map(|record| split(record, schema, format))
        .collect();
    cast_fields(&fields, schema)
}

/// Records given as the text of each column (`None`: a record that could not be read)
/// as a batch of `schema`, each column cast as a whole; a value that does not cast makes
/// its record malformed. Returns which records decoded.
pub fn cast_fields(
    fields: &[Option<Vec<Option<String>>>],
    schema: &SchemaRef,
) -> Result<(RecordBatch, Vec<bool>)> {
    let width = schema.fields().len();
    let mut ok: Vec<bool> = fields.iter().map(Option::is_some).collect();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(width);
    for (c, field) in schema.fields().iter().enumerate() {
        let mut text: StringArray = fields
            .iter()
            .map(|f| f.as_ref().and_then(|f| f[c].clone()))
            .collect();
        if crate::jsonb::is_jsonb(field) {
            // Canonical JSON text; a value that is not JSON makes its record malformed.
            text = text
                .iter()
                .enumerate()
                .map(|(row, t)| {
                    let normalized = t.map(crate::jsonb::text::normalize);
                    if let Some(Err(_)) = normalized {
                        ok[row] = false;
                    }
                    normalized.and_then(|n| n.ok())
                })
                .collect();
        }
        let cast = if field.data_type().is_nested() {
            nested_from_json(&text, field, &mut ok)?
        } else {
            cast_with_options(
                &text,
                field.data_type(),
                &CastOptions {
                    safe: true,
                    ..Default::default()
                },
            )?
        };
        for (row, keep) in ok.iter_mut().enumerate() {
            if *keep
                && text.is_valid(row)
                && cast.is_null(row)
                && field.data_type() != &DataType::Utf8
            {
                *keep = false;
            }
        }
        columns.push(cast);
    }
    Ok((
        RecordBatch::try_new_with_options(
            schema.clone(),
            columns,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(fields.len())),
        )?,
        ok,
    ))
}

/// A column of a nested type (struct, array) from each value's JSON text: decoded by
/// Arrow's JSON reader as a whole, or, when that fails, value by value, a value that
/// does not decode making its record malformed.
fn nested_from_json(
    text: &StringArray,
    field: &arrow::datatypes::Field,
    ok: &mut [bool],
) -> Result<ArrayRef> {
    let schema = std::sync::Arc::new(arrow::datatypes::Schema::new(vec![
        field.clone().with_name("v").with_nullable(true),
    ]));
    let decode = |values: &mut dyn Iterator<Item = Option<&str>>| -> Option<ArrayRef> {
        let mut decoder = arrow::json::ReaderBuilder::new(schema.clone())
            .build_decoder()
            .ok()?;
        let mut lines = String::new();
        for v in values {
            lines.push_str("{\"v\": ");
            lines.push_str(v.unwrap_or("null"));
            lines.push_str("}\n");
        }
        decoder.decode(lines.as_bytes()).ok()?;
        decoder.flush().ok()?.map(|b| b.column(0).clone())
    };
    if text.is_empty() {
        return Ok(arrow::array::new_empty_array(field.data_type()));
    }
    if let Some(column) = decode(&mut text.iter()).filter(|c| c.len() == text.len()) {
        return Ok(column);
    }
    let mut parts = Vec::with_capacity(text.len());
    for (row, value) in text.iter().enumerate() {
        match decode(&mut std::iter::once(value)).filter(|c| c.len() == 1) {
            Some(one) => parts.push(one),
            None => {
                ok[row] = false;
                parts.push(arrow::array::new_null_array(field.data_type(), 1));
            }
        }
    }
    let parts: Vec<&dyn Array> = parts.iter().map(|p| p.as_ref()).collect();
    Ok(arrow::compute::concat(&parts)?)
}

/// A JSON object's fields as text, by column name; `None` when the record is not an
/// object.
fn json_fields(record: &str, schema: &SchemaRef) -> Option<Vec<Option<String>>> {
    let serde_json::Value::Object(map) = serde_json::from_str::<serde_json::Value>(record).ok()?
    else {
        return None;
    };
    Some(
        schema
            .fields()
            .iter()
            .map(|f| match map.get(f.name()) {
                None | Some(serde_json::Value::Null) => None,
                // A `jsonb` column takes the JSON value itself, strings quoted.
                Some(value) if crate::jsonb::is_jsonb(f) => Some(crate::jsonb::text::render(value)),
                Some(serde_json::Value::String(s)) => Some(s.clone()),
                Some(other) => Some(other.to_string()),
            })
            .collect(),
    )
}
