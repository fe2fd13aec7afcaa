//! Encodes a sink's rows into the bytes of one file: JSON lines, CSV or Parquet
//! (`FORMAT PLAIN ENCODE JSON | CSV | PARQUET`), a whole Arrow batch at a time.
//!
//! Values keep their type where the format has it (numbers, booleans, strings; Parquet
//! keeps dates, timestamps and decimals too); the others are written as PostgreSQL's text
//! of the value (`2024-01-02 03:04:05+00:00`, `1 day 02:00:00`, `12.50`), so that a
//! decimal never goes through a float and a file reads back into the same values.

use super::invalid;
use crate::error::{EddyError, Result};
use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::parquet::arrow::ArrowWriter;
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq)]
pub enum FileEncoding {
    JsonLines,
    Csv { delimiter: u8, header: bool },
    Parquet,
}

impl FileEncoding {
    /// From `FORMAT ... ENCODE ...` and its options (`encode.delimiter`,
    /// `encode.without_header` for CSV).
    pub fn from_options(options: &BTreeMap<String, String>) -> Result<Self> {
        if let Some(format) = options.get("format")
            && !format.eq_ignore_ascii_case("plain")
        {
            return Err(invalid(format!(
                "a file sink writes FORMAT PLAIN, not FORMAT {}",
                format.to_ascii_uppercase()
            )));
        }
        let encoding = match options
            .get("encode")
            .map(|e| e.to_ascii_lowercase())
            .as_deref()
        {
            Some("json") => FileEncoding::JsonLines,
            Some("parquet") => FileEncoding::Parquet,
            Some("csv") => {
                let delimiter = match options.get("encode.delimiter") {
                    Some(d) if d.len() == 1 => d.as_bytes()[0],
                    Some(d) => {
                        return Err(invalid(format!(
                            "delimiter must be one character, not '{d}'"
                        )));
                    }
                    None => b',',
                };
                let header = match options.get("encode.without_header").map(String::as_str) {
                    None | Some("false") => true,
                    Some("true") => false,
                    Some(v) => {
                        return Err(invalid(format!(
                            "invalid value for option without_header: '{v}' (true or false)"
                        )));
                    }
                };
                FileEncoding::Csv { delimiter, header }
            }
            Some(other) => {
                return Err(invalid(format!(
                    "a file sink encodes JSON, CSV or PARQUET, not {}",
                    other.to_ascii_uppercase()
                )));
            }
            None => {
                return Err(invalid(
                    "a file sink needs FORMAT PLAIN ENCODE JSON | CSV | PARQUET",
                ));
            }
        };
        for key in options.keys().filter(|k| k.starts_with("encode.")) {
            let known = matches!(encoding, FileEncoding::Csv { .. })
                && matches!(key.as_str(), "encode.delimiter" | "encode.without_header");
            if !known {
                return Err(invalid(format!(
                    "unknown option '{}' for ENCODE {}",
                    key.trim_start_matches("encode."),
                    options["encode"].to_ascii_uppercase()
                )));
            }
        }
        Ok(encoding)
    }

    pub fn extension(&self) -> &'static str {
        match self {
            FileEncoding::JsonLines => "json",
            FileEncoding::Csv { .. } => "csv",
            FileEncoding::Parquet => "parquet",
        }
    }

    /// Whether a column of this type is written as its PostgreSQL text.
    fn as_text(&self, data_type: &DataType) -> bool {
        let native = match self {
            FileEncoding::Csv { .. } => false,
            FileEncoding::JsonLines => matches!(
                data_type,
                DataType::Boolean
                    | DataType::Int8
                    | DataType::Int16
                    | DataType::Int32
                    | DataType::Int64
                    | DataType::UInt8
                    | DataType::UInt16
                    | DataType::UInt32
                    | DataType::UInt64
                    | DataType::Float32
                    | DataType::Float64
                    | DataType::Utf8
                    | DataType::LargeUtf8
                    | DataType::Utf8View
                    // Nested objects and arrays.
                    | DataType::Struct(_)
                    | DataType::List(_)
                    | DataType::LargeList(_)
            ),
            FileEncoding::Parquet => !matches!(data_type, DataType::Interval(_)),
        };
        !native
    }

    /// The schema of the file for a sink of `schema`.
    pub fn file_schema(&self, schema: &SchemaRef) -> SchemaRef {
        Arc::new(Schema::new(
            schema
                .fields()
                .iter()
                .map(|f| {
                    if self.as_text(f.data_type()) {
                        Arc::new(Field::new(f.name(), DataType::Utf8, true))
                    } else {
                        f.clone()
                    }
                })
                .collect::<Vec<_>>(),
        ))
    }
}

/// One file being written, in memory.
pub struct FileEncoder {
    encoding: FileEncoding,
    schema: SchemaRef,
    bytes: Vec<u8>,
    parquet: Option<ArrowWriter<Vec<u8>>>,
    rows: usize,
}

/// JSON lines of a batch with `jsonb` columns, whose values are embedded as JSON (not
/// as strings of JSON); the other columns as the JSON writer writes them. Keys follow
/// the column order.
fn json_lines_embedding_jsonb(batch: &RecordBatch, out: &mut Vec<u8>) -> Result<()> {
    let schema = batch.schema();
    for row in 0..batch.num_rows() {
        out.push(b'{');
        for (i, (field, column)) in schema.fields().iter().zip(batch.columns()).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let value = match crate::jsonb::value_of(column.as_ref(), field, row) {
                Ok(value) => value,
                // Not JSON after all (stored jsonb always is): written as a string.
                Err(_) => {
                    let plain = Field::new(field.name(), field.data_type().clone(), true);
                    crate::jsonb::value_of(column.as_ref(), &plain, row)?
                }
            };
            serde_json::to_writer(&mut *out, field.name()).map_err(encode_error)?;
            out.push(b':');
            serde_json::to_writer(&mut *out, &value).map_err(encode_error)?;
        }
        out.extend_from_slice(b"}\n");
    }
    Ok(())
}

fn encode_error(e: impl std::fmt::Display) -> EddyError {
    EddyError::internal(format!("cannot encode the sink's rows: {e}"))
}

impl FileEncoder {
    pub fn new(encoding: &FileEncoding, sink_schema: &SchemaRef) -> Result<Self> {
        let schema = encoding.file_schema(sink_schema);
        let parquet = match encoding {
            FileEncoding::Parquet => {
                Some(ArrowWriter::try_new(Vec::new(), schema.clone(), None).map_err(encode_error)?)
            }
            _ => None,
        };
        Ok(Self {
            encoding: encoding.clone(),
            schema,
            bytes: Vec::new(),
            parquet,
            rows: 0,
        })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let columns = batch
            .columns()
            .iter()
            .map(|c| {
                Ok(if self.encoding.as_text(c.data_type()) {
                    Arc::new(crate::pg_text::text_column(c)?) as ArrayRef
                } else {
                    c.clone()
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let batch = RecordBatch::try_new(self.schema.clone(), columns)?;
        match &self.encoding {
            FileEncoding::JsonLines
                if self
                    .schema
                    .fields()
                    .iter()
                    .any(|f| crate::jsonb::is_jsonb(f)) =>
            {
                json_lines_embedding_jsonb(&batch, &mut self.bytes)?;
            }
            FileEncoding::JsonLines => {
                let mut writer = arrow::json::WriterBuilder::new()
                    .with_explicit_nulls(true)
                    .build::<_, arrow::json::writer::LineDelimited>(&mut self.bytes);
                writer.write(&batch).map_err(encode_error)?;
                writer.finish().map_err(encode_error)?;
            }
            FileEncoding::Csv { delimiter, header } => {
                let mut writer = arrow::csv::WriterBuilder::new()
                    .with_delimiter(*delimiter)
                    .with_header(*header && self.rows == 0)
                    .build(&mut self.bytes);
                writer.write(&batch).map_err(encode_error)?;
            }
            FileEncoding::Parquet => {
                let writer = self
                    .parquet
                    .as_mut()
                    .expect("a Parquet encoder has a writer");
                writer.write(&batch).map_err(encode_error)?;
            }
        }
        self.rows += batch.num_rows();
        Ok(())
    }

    /// The file's bytes.
    pub fn finish(self) -> Result<Vec<u8>> {
        match self.parquet {
            Some(writer) => writer.into_inner().map_err(encode_error),
            None => Ok(self.bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Decimal128Array, Int64Array, StringArray};

    fn batch() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("price", DataType::Decimal128(10, 2), true),
            Field::new("note", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![Some(1), None])),
                Arc::new(
                    Decimal128Array::from(vec![Some(1250), Some(-5)])
                        .with_precision_and_scale(10, 2)
                        .unwrap(),
                ),
                Arc::new(StringArray::from(vec![Some("a,\"b\""), None])),
            ],
        )
        .unwrap()
    }

    fn encode(encoding: FileEncoding) -> Vec<u8> {
        let b = batch();
        let mut encoder = FileEncoder::new(&encoding, &b.schema()).unwrap();
        encoder.write(&b).unwrap();
        encoder.write(&b.slice(0, 1)).unwrap();
        assert_eq!(encoder.rows(), 3);
        encoder.finish().unwrap()
    }

    #[test]
    fn json_lines_keep_numbers_and_write_decimals_exactly() {
        let text = String::from_utf8(encode(FileEncoding::JsonLines)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            vec![
                r#"{"id":1,"price":"12.50","note":"a,\"b\""}"#,
                r#"{"id":null,"price":"-0.05","note":null}"#,
                r#"{"id":1,"price":"12.50","note":"a,\"b\""}"#,
            ]
        );
    }

    #[test]
    fn json_lines_embed_jsonb_and_nest_structs_and_arrays() {
        let fields = vec![
            Field::new("id", DataType::Int64, true),
            crate::jsonb::jsonb_field("doc"),
            Field::new("tags", DataType::new_list(DataType::Utf8, true), true),
        ];
        let schema = Arc::new(Schema::new(fields));
        let mut tags = arrow::array::ListBuilder::new(arrow::array::StringBuilder::new());
        tags.values().append_value("a");
        tags.append(true);
        tags.append(false);
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec![Some(r#"{"k": [1, 2]}"#), None])),
                Arc::new(tags.finish()),
            ],
        )
        .unwrap();
        let mut encoder = FileEncoder::new(&FileEncoding::JsonLines, &schema).unwrap();
        encoder.write(&batch).unwrap();
        let text = String::from_utf8(encoder.finish().unwrap()).unwrap();
        assert_eq!(
            text.lines().collect::<Vec<_>>(),
            vec![
                r#"{"id":1,"doc":{"k":[1,2]},"tags":["a"]}"#,
                r#"{"id":2,"doc":null,"tags":null}"#,
            ]
        );
    }

    #[test]
    fn csv_has_one_header_and_quotes_what_needs_it() {
        let text = String::from_utf8(encode(FileEncoding::Csv {
            delimiter: b',',
            header: true,
        }))
        .unwrap();
        assert_eq!(
            text,
            "id,price,note\n1,12.50,\"a,\"\"b\"\"\"\n,-0.05,\n1,12.50,\"a,\"\"b\"\"\"\n"
        );
    }

    #[test]
    fn parquet_reads_back_with_its_types() {
        let bytes = bytes::Bytes::from(encode(FileEncoding::Parquet));
        let reader = datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(
            bytes, 1024,
        )
        .unwrap();
        let batches: Vec<RecordBatch> = reader.map(|b| b.unwrap()).collect();
        let all = arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap();
        assert_eq!(all.num_rows(), 3);
        assert_eq!(
            all.schema().field(1).data_type(),
            &DataType::Decimal128(10, 2)
        );
        assert_eq!(
            arrow::util::pretty::pretty_format_batches(&[all])
                .unwrap()
                .to_string()
                .lines()
                .nth(3)
                .unwrap(),
            "| 1  | 12.50 | a,\"b\" |"
        );
    }
}
