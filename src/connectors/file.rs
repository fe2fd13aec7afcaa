//! The `file` connector: CSV or JSON-lines files from a local path, directory or glob,
//! read in name order, one split per file.
//!
//! `WITH (connector = 'file', path = '/data/*.csv') FORMAT PLAIN ENCODE CSV
//! [(delimiter = ',', without_header = 'true')]` or `... ENCODE JSON`. A line that does
//! not fit the declared schema (wrong number of fields, a value of the wrong type, invalid
//! JSON) is skipped and counted (`eddy_catalog.jobs.malformed_rows`), never a crash.

use crate::error::{EddyError, Result, sqlstate};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq)]
pub struct FileSpec {
    pub schema: SchemaRef,
    pub files: Vec<PathBuf>,
    pub json: bool,
    pub delimiter: char,
    pub header: bool,
}

impl FileSpec {
    pub fn from_options(schema: &SchemaRef, options: &BTreeMap<String, String>) -> Result<Self> {
        let invalid = |m: String| EddyError::new(sqlstate::INVALID_PARAMETER_VALUE, m);
        for key in options.keys() {
            let known = matches!(key.as_str(), "connector" | "path" | "format" | "encode")
                || matches!(key.as_str(), "encode.delimiter" | "encode.without_header");
            if !known {
                return Err(invalid(format!(
                    "unknown option '{key}' for connector file"
                )));
            }
        }
        let path = options
            .get("path")
            .ok_or_else(|| invalid("a file source needs WITH (path = '...')".into()))?;
        let json = match options.get("encode").map(String::as_str) {
            Some("json") => true,
            Some("csv") => false,
            _ => {
                return Err(invalid(
                    "a file source needs FORMAT PLAIN ENCODE CSV or ENCODE JSON".into(),
                ));
            }
        };
        let (delimiter, header) = super::records::csv_options(options)?;
        let files = expand(path)?;
        Ok(Self {
            schema: schema.clone(),
            files,
            json,
            delimiter,
            header,
        })
    }

    pub fn split_reader(&self, split: u32, offset: u64) -> FileSplit {
        FileSplit {
            spec: self.clone(),
            file: split as usize,
            lines: None,
            offset,
            malformed: 0,
            rejected: vec![],
        }
    }
}

/// The files a path names: the file itself, a directory's files, or a glob's matches,
/// sorted by name.
fn expand(path: &str) -> Result<Vec<PathBuf>> {
    let p = PathBuf::from(path);
    let mut files: Vec<PathBuf> = if p.is_dir() {
        std::fs::read_dir(&p)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|f| f.is_file())
            .collect()
    } else if path.contains(['*', '?', '[']) {
        glob::glob(path)
            .map_err(|e| {
                EddyError::new(
                    sqlstate::INVALID_PARAMETER_VALUE,
                    format!("invalid path pattern: {e}"),
                )
            })?
            .filter_map(|f| f.ok())
            .filter(|f| f.is_file())
            .collect()
    } else if p.is_file() {
        vec![p]
    } else {
        return Err(EddyError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("no file or directory at path '{path}'"),
        ));
    };
    files.sort();
    Ok(files)
}

/// One file; `offset` counts the data lines consumed.
pub struct FileSplit {
    spec: FileSpec,
    file: usize,
    lines: Option<Vec<String>>,
    offset: u64,
    malformed: u64,
    /// Records skipped since the reader last took them.
    pub(super) rejected: Vec<super::records::Rejected>,
}

impl FileSplit {
    pub fn offset(&self) -> u64 {
        self.offset
    }

    pub fn malformed(&self) -> u64 {
        self.malformed
    }

    pub fn next_batch(&mut self, max_rows: usize) -> Result<Option<RecordBatch>> {
        if self.lines.is_none() {
            let text = std::fs::read_to_string(&self.spec.files[self.file])?;
            let mut lines: Vec<String> = text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_string)
                .collect();
            if self.spec.header && !self.spec.json && !lines.is_empty() {
                lines.remove(0);
            }
            self.lines = Some(lines);
        }
        let lines = self.lines.as_ref().expect("lines were just read");
        let start = self.offset as usize;
        if start >= lines.len() {
            return Ok(None);
        }
        let end = (start + max_rows).min(lines.len());
        let chunk = &lines[start..end];
        self.offset = end as u64;
        let records: Vec<&str> = chunk.iter().map(String::as_str).collect();
        let (batch, rejected) =
            super::records::decode_rejecting(&records, &self.spec.schema, &self.spec.format())?;
        self.malformed += rejected.len() as u64;
        self.rejected.extend(rejected);
        Ok(Some(batch))
    }
}

impl FileSpec {
    fn format(&self) -> super::records::RecordFormat {
        if self.json {
            super::records::RecordFormat::Json
        } else {
            super::records::RecordFormat::Csv {
                delimiter: self.delimiter,
            }
        }
    }
}
