//! `COPY table [(columns)] FROM STDIN` in PostgreSQL's text and CSV formats.
//!
//! The statement puts the session into copy-in mode; the wire layer then hands every
//! `CopyData` payload to [`CopyIn::push`] and finishes with [`CopyIn::finish`]. Complete
//! lines are parsed as they arrive and written to the table every [`FLUSH_ROWS`] rows, so a
//! large load does not have to fit in memory.

use super::ddl::{ident_name, relation_name};
use super::pg_semantics::{parse_bytea, parse_interval};
use super::{Outcome, Session};
use crate::catalog::RelationKind;
use crate::error::{EddyError, Result, sqlstate};
use crate::state::StateTable;
use arrow::array::{ArrayRef, RecordBatch, StringArray, new_null_array};
use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::{DataType, Schema};
use datafusion::sql::sqlparser::ast::{
    CopyLegacyCsvOption, CopyLegacyOption, CopyOption, CopySource, CopyTarget, Ident, ObjectName,
};
use std::sync::Arc;

/// Rows parsed before they are written to the table.
const FLUSH_ROWS: usize = 8192;

#[derive(Debug, Clone)]
struct Format {
    csv: bool,
    delimiter: u8,
    null: String,
    header: bool,
    quote: u8,
    escape: u8,
}

/// A `COPY ... FROM STDIN` in progress.
pub struct CopyIn {
    table_name: String,
    table: Arc<StateTable>,
    /// For each input field, the table column it fills.
    targets: Vec<usize>,
    format: Format,
    /// Bytes received but not yet parsed (an incomplete last line).
    pending: Vec<u8>,
    /// Parsed rows not yet written: one text value (or NULL) per input field.
    rows: Vec<Vec<Option<String>>>,
    header_skipped: bool,
    ended: bool,
    /// The first error; the rest of the data is ignored and the copy fails at the end.
    error: Option<EddyError>,
    line_number: u64,
    written: u64,
    /// The explicit transaction the copy runs in: rows are staged there until `COMMIT`.
    txn: Option<Arc<crate::state::Transaction>>,
}

pub(super) fn start(
    session: &Session,
    source: CopySource,
    to: bool,
    target: CopyTarget,
    options: Vec<CopyOption>,
    legacy: Vec<CopyLegacyOption>,
) -> Result<Outcome> {
    if to || !matches!(target, CopyTarget::Stdin) {
        return Err(EddyError::not_supported(
            "only COPY ... FROM STDIN is supported (COPY TO and server-side files are not)",
        ));
    }
    let CopySource::Table {
        table_name,
        columns,
    } = source
    else {
        return Err(EddyError::not_supported("COPY (query) FROM is not valid"));
    };
    let format = parse_format(options, legacy)?;
    let (table, targets) = resolve_target(session, &table_name, &columns)?;
    let ncols = targets.len();
    *session.copy.lock() = Some(CopyIn {
        table_name: relation_name(&table_name)?,
        table,
        targets,
        format,
        pending: Vec::new(),
        rows: Vec::new(),
        header_skipped: false,
        ended: false,
        error: None,
        line_number: 0,
        written: 0,
        txn: session.open_transaction(),
    });
    Ok(Outcome::CopyIn { columns: ncols })
}

fn resolve_target(
    session: &Session,
    table_name: &ObjectName,
    columns: &[Ident],
) -> Result<(Arc<StateTable>, Vec<usize>)> {
    let name = relation_name(table_name)?;
    let rel = session
        .engine
        .catalog
        .get(&name)
        .ok_or_else(|| EddyError::undefined_table(&name))?;
    if rel.kind != RelationKind::Table {
        return Err(EddyError::new(
            sqlstate::WRONG_OBJECT_TYPE,
            format!("cannot copy to {} \"{name}\"", rel.kind.sql_name()),
        ));
    }
    let targets = if columns.is_empty() {
        (0..rel.columns.len()).collect()
    } else {
        columns
            .iter()
            .map(|c| {
                let c = ident_name(c);
                rel.columns
                    .iter()
                    .position(|col| col.name == c)
                    .ok_or_else(|| {
                        EddyError::new(
                            sqlstate::UNDEFINED_COLUMN,
                            format!("column \"{c}\" of relation \"{name}\" does not exist"),
                        )
                    })
            })
            .collect::<Result<Vec<_>>>()?
    };
    let table = session.engine.schema_provider.state_table_for(&rel)?;
    Ok((table, targets))
}

fn parse_format(options: Vec<CopyOption>, legacy: Vec<CopyLegacyOption>) -> Result<Format> {
    let mut f = Format {
        csv: false,
        delimiter: b'\t',
        null: "\\N".into(),
        header: false,
        quote: b'"',
        escape: b'"',
    };
    let mut delimiter = None;
    let mut null = None;
    let single_byte = |c: char, what: &str| -> Result<u8> {
        if c.is_ascii() {
            Ok(c as u8)
        } else {
            Err(EddyError::not_supported(format!(
                "COPY {what} must be a single one-byte character"
            )))
        }
    };
    for o in options {
        match o {
            CopyOption::Format(name) => match name.value.to_ascii_lowercase().as_str() {
                "csv" => f.csv = true,
                "text" => f.csv = false,
                other => {
                    return Err(EddyError::not_supported(format!(
                        "COPY format \"{other}\" is not supported"
                    )));
                }
            },
            CopyOption::Delimiter(c) => delimiter = Some(single_byte(c, "delimiter")?),
            CopyOption::Null(s) => null = Some(s),
            CopyOption::Header(h) => f.header = h,
            CopyOption::Quote(c) => f.quote = single_byte(c, "quote")?,
            CopyOption::Escape(c) => f.escape = single_byte(c, "escape")?,
            CopyOption::Encoding(e)
                if e.eq_ignore_ascii_case("utf8") || e.eq_ignore_ascii_case("utf-8") => {}
            other => {
                return Err(EddyError::not_supported(format!(
                    "COPY option {other} is not supported"
                )));
            }
        }
    }
    for o in legacy {
        match o {
            CopyLegacyOption::Csv(csv_opts) => {
                f.csv = true;
                for c in csv_opts {
                    match c {
                        CopyLegacyCsvOption::Header => f.header = true,
                        CopyLegacyCsvOption::Quote(q) => f.quote = single_byte(q, "quote")?,
                        CopyLegacyCsvOption::Escape(e) => f.escape = single_byte(e, "escape")?,
                        other => {
                            return Err(EddyError::not_supported(format!(
                                "COPY option {other} is not supported"
                            )));
                        }
                    }
                }
            }
            CopyLegacyOption::Delimiter(c) => delimiter = Some(single_byte(c, "delimiter")?),
            CopyLegacyOption::Null(s) => null = Some(s),
            CopyLegacyOption::Binary => {
                return Err(EddyError::not_supported(
                    "COPY BINARY is not supported; use text or CSV",
                ));
            }
            other => {
                return Err(EddyError::not_supported(format!(
                    "COPY option {other} is not supported"
                )));
            }
        }
    }
    if f.csv {
        f.delimiter = delimiter.unwrap_or(b',');
        f.null = null.unwrap_or_default();
    } else {
        f.delimiter = delimiter.unwrap_or(b'\t');
        f.null = null.unwrap_or_else(|| "\\N".into());
    }
    Ok(f)
}

impl CopyIn {
    /// Takes one `CopyData` payload.
    pub fn push(&mut self, data: &[u8]) {
        if self.error.is_some() {
            return;
        }
        self.pending.extend_from_slice(data);
        let result = self.parse_complete_lines(false).and_then(|_| {
            if self.rows.len() >= FLUSH_ROWS {
                self.flush()
            } else {
                Ok(())
            }
        });
        if let Err(e) = result {
            self.error = Some(e);
        }
    }

    /// Parses what is left and writes it; returns the number of rows copied.
    pub fn finish(mut self) -> Result<u64> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.parse_complete_lines(true)?;
        self.flush()?;
        Ok(self.written)
    }

    /// Splits off every complete line (for CSV: a newline outside quotes) and parses it.
    fn parse_complete_lines(&mut self, at_end: bool) -> Result<()> {
        let mut start = 0;
        let mut in_quotes = false;
        let mut i = 0;
        let buf = std::mem::take(&mut self.pending);
        while i < buf.len() {
            let b = buf[i];
            if self.format.csv && b == self.format.quote {
                in_quotes = !in_quotes;
            } else if b == b'\n' && !in_quotes {
                let line = &buf[start..i];
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                self.take_line(line)?;
                start = i + 1;
            }
            i += 1;
        }
        if at_end && start < buf.len() {
            let line = &buf[start..];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            self.take_line(line)?;
        } else {
            self.pending = buf[start..].to_vec();
        }
        Ok(())
    }

    fn take_line(&mut self, line: &[u8]) -> Result<()> {
        self.line_number += 1;
        if self.ended {
            return Ok(());
        }
        if line == b"\\." {
            self.ended = true;
            return Ok(());
        }
        if self.format.header && !self.header_skipped {
            self.header_skipped = true;
            return Ok(());
        }
        let text = std::str::from_utf8(line).map_err(|_| {
            EddyError::new(
                "22021",
                format!(
                    "invalid byte sequence for encoding \"UTF8\" on line {}",
                    self.line_number
                ),
            )
        })?;
        let fields = if self.format.csv {
            split_csv(text, &self.format)
        } else {
            split_text(text, &self.format)
        }
        .map_err(|m| self.error_at(m))?;
        if fields.len() != self.targets.len() {
            return Err(self.error_at(format!(
                "expected {} columns, found {}",
                self.targets.len(),
                fields.len()
            )));
        }
        self.rows.push(fields);
        Ok(())
    }

    fn error_at(&self, message: String) -> EddyError {
        EddyError::new(
            "22P04",
            format!(
                "COPY {}, line {}: {message}",
                self.table_label(),
                self.line_number
            ),
        )
    }

    fn table_label(&self) -> String {
        self.table_name.clone()
    }

    /// Converts the parsed text rows to the table's types and writes them.
    fn flush(&mut self) -> Result<()> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let schema: Arc<Schema> = self.table.schema().clone();
        let nrows = self.rows.len();
        let mut columns: Vec<ArrayRef> = schema
            .fields()
            .iter()
            .map(|f| new_null_array(f.data_type(), nrows))
            .collect();
        for (field_idx, &col) in self.targets.iter().enumerate() {
            let text: StringArray = self.rows.iter().map(|r| r[field_idx].as_deref()).collect();
            let target = schema.field(col).data_type();
            columns[col] = text_to_column(&text, target).map_err(|e| {
                EddyError::new(
                    e.code,
                    format!(
                        "COPY column \"{}\": {}",
                        schema.field(col).name(),
                        e.message
                    ),
                )
            })?;
        }
        let relaxed = Arc::new(Schema::new(
            schema
                .fields()
                .iter()
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect::<Vec<_>>(),
        ));
        let batch = RecordBatch::try_new(relaxed, columns)?;
        self.written += match &self.txn {
            Some(txn) => txn.upsert(&self.table, &batch)?,
            None => self.table.upsert(&batch)?,
        } as u64;
        self.rows.clear();
        Ok(())
    }
}

/// Casts text values to a column type the way PostgreSQL's input functions read them.
pub(super) fn text_to_column(text: &StringArray, target: &DataType) -> Result<ArrayRef> {
    if matches!(target, DataType::Binary) {
        let bytes: arrow::array::BinaryArray = text
            .iter()
            .map(|v| v.map(parse_bytea).transpose())
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .collect();
        return Ok(Arc::new(bytes));
    }
    let options = CastOptions {
        safe: false,
        ..Default::default()
    };
    if matches!(
        target,
        DataType::Interval(arrow::datatypes::IntervalUnit::MonthDayNano)
    ) {
        let parsed: Option<Vec<Option<arrow::datatypes::IntervalMonthDayNano>>> = text
            .iter()
            .map(|v| match v {
                None => Some(None),
                Some(s) => parse_interval(s).map(Some),
            })
            .collect();
        if let Some(values) = parsed {
            return Ok(Arc::new(arrow::array::IntervalMonthDayNanoArray::from(
                values,
            )));
        }
    }
    if matches!(target, DataType::Boolean) {
        // PostgreSQL spells booleans t/f in its own output; accept them back.
        let normalized: StringArray = text
            .iter()
            .map(|v| {
                v.map(|s| match s.trim().to_ascii_lowercase().as_str() {
                    "t" | "y" | "yes" | "on" | "1" => "true".to_string(),
                    "f" | "n" | "no" | "off" | "0" => "false".to_string(),
                    other => other.to_string(),
                })
            })
            .collect();
        return Ok(cast_with_options(&normalized, target, &options)?);
    }
    Ok(cast_with_options(text, target, &options)?)
}

/// Text format: fields split by the delimiter, `\N` for NULL, backslash escapes.
fn split_text(line: &str, f: &Format) -> Result<Vec<Option<String>>, String> {
    let delimiter = f.delimiter as char;
    let mut fields = Vec::new();
    let mut current = String::new();
    let mut raw = String::new(); // the field as written, to compare with the NULL marker
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == delimiter {
            fields.push(finish_text_field(&raw, &current, f));
            current.clear();
            raw.clear();
            continue;
        }
        raw.push(c);
        if c != '\\' {
            current.push(c);
            continue;
        }
        let Some(e) = chars.next() else {
            return Err("end-of-line after backslash".into());
        };
        raw.push(e);
        match e {
            'n' => current.push('\n'),
            't' => current.push('\t'),
            'r' => current.push('\r'),
            'b' => current.push('\u{8}'),
            'f' => current.push('\u{c}'),
            'v' => current.push('\u{b}'),
            other => current.push(other),
        }
    }
    fields.push(finish_text_field(&raw, &current, f));
    Ok(fields)
}

fn finish_text_field(raw: &str, value: &str, f: &Format) -> Option<String> {
    if raw == f.null {
        None
    } else {
        Some(value.to_string())
    }
}

fn split_csv(line: &str, f: &Format) -> Result<Vec<Option<String>>, String> {
    crate::connectors::csv_line::split(
        line,
        f.delimiter as char,
        f.quote as char,
        f.escape as char,
        &f.null,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text() -> Format {
        Format {
            csv: false,
            delimiter: b'\t',
            null: "\\N".into(),
            header: false,
            quote: b'"',
            escape: b'"',
        }
    }

    fn csv() -> Format {
        Format {
            csv: true,
            delimiter: b',',
            null: String::new(),
            header: false,
            quote: b'"',
            escape: b'"',
        }
    }

    #[test]
    fn text_format_fields() {
        let f = text();
        assert_eq!(
            split_text("1\tab\\tc\t\\N", &f).unwrap(),
            vec![Some("1".into()), Some("ab\tc".into()), None]
        );
    }

    #[test]
    fn csv_format_fields() {
        let f = csv();
        assert_eq!(
            split_csv("1,\"a,b\",,\"\",\"say \"\"hi\"\"\"", &f).unwrap(),
            vec![
                Some("1".into()),
                Some("a,b".into()),
                None,
                Some("".into()),
                Some("say \"hi\"".into())
            ]
        );
        assert!(split_csv("1,\"open", &f).is_err());
    }
}
