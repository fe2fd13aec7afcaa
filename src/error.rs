//! One error type for everything a statement can fail with.
//!
//! Every error carries the SQLSTATE the client will see, so the wire layer never has to
//! guess. Errors from DataFusion and Arrow are classified once, here, by
//! [`EddyError::from_datafusion`].

use datafusion::error::DataFusionError;
use std::fmt;
use std::sync::Arc;

/// SQLSTATE codes Eddy reports (PostgreSQL's appendix A).
pub mod sqlstate {
    pub const SYNTAX_ERROR: &str = "42601";
    pub const UNDEFINED_TABLE: &str = "42P01";
    pub const UNDEFINED_COLUMN: &str = "42703";
    pub const UNDEFINED_OBJECT: &str = "42704";
    pub const UNDEFINED_FUNCTION: &str = "42883";
    pub const DUPLICATE_TABLE: &str = "42P07";
    pub const DUPLICATE_OBJECT: &str = "42710";
    pub const DATATYPE_MISMATCH: &str = "42804";
    pub const WRONG_OBJECT_TYPE: &str = "42809";
    pub const INVALID_TEXT_REPRESENTATION: &str = "22P02";
    pub const NUMERIC_VALUE_OUT_OF_RANGE: &str = "22003";
    pub const DIVISION_BY_ZERO: &str = "22012";
    pub const DATETIME_FIELD_OVERFLOW: &str = "22008";
    pub const SUBSTRING_ERROR: &str = "22011";
    pub const DATA_EXCEPTION: &str = "22000";
    pub const NOT_NULL_VIOLATION: &str = "23502";
    pub const FEATURE_NOT_SUPPORTED: &str = "0A000";
    pub const INVALID_PARAMETER_VALUE: &str = "22023";
    pub const UNDEFINED_PARAMETER: &str = "42704";
    pub const DEPENDENT_OBJECTS_STILL_EXIST: &str = "2BP01";
    pub const QUERY_CANCELED: &str = "57014";
    pub const INVALID_PASSWORD: &str = "28P01";
    pub const PROTOCOL_VIOLATION: &str = "08P01";
    pub const IN_FAILED_SQL_TRANSACTION: &str = "25P02";
    pub const INTERNAL_ERROR: &str = "XX000";
    pub const IO_ERROR: &str = "58030";
}

/// An error a statement or a job failed with: a SQLSTATE, a message a person can act on,
/// and the error that caused it, if any (a RocksDB, I/O, object store or client library
/// error, or another `EddyError` given context with [`EddyError::context`]). The chain
/// is kept as errors, not flattened into text: [`EddyError::report`] writes all of it
/// for logs and `eddy_catalog.jobs`, and `std::error::Error::source` walks it.
#[derive(Debug, Clone)]
pub struct EddyError {
    pub code: &'static str,
    pub message: String,
    source: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
}

/// Two errors are equal when the client would see the same thing (the causes are not
/// compared).
impl PartialEq for EddyError {
    fn eq(&self, other: &Self) -> bool {
        self.code == other.code && self.message == other.message
    }
}

impl Eq for EddyError {}

pub type Result<T, E = EddyError> = std::result::Result<T, E>;

impl EddyError {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            source: None,
        }
    }

    /// An error caused by `source`, whose text the message need not repeat.
    pub fn caused_by(
        code: &'static str,
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            code,
            message: message.into(),
            source: Some(Arc::new(source)),
        }
    }

    /// This error as the cause of a new one saying what was being done (`uploading the
    /// checkpoint of epoch 7`); the SQLSTATE stays, the message becomes
    /// `what: <this message>`.
    pub fn context(self, what: impl fmt::Display) -> Self {
        Self {
            code: self.code,
            message: format!("{what}: {}", self.message),
            source: Some(Arc::new(self)),
        }
    }

    /// The message and every cause below it that it does not already spell out, joined
    /// by `: ` — what logs and `eddy_catalog.jobs` show.
    pub fn report(&self) -> String {
        let mut text = self.message.clone();
        let mut cause = std::error::Error::source(self);
        while let Some(e) = cause {
            let part = match e.downcast_ref::<EddyError>() {
                Some(eddy) => eddy.message.clone(),
                None => e.to_string(),
            };
            if !text.contains(&part) {
                text.push_str(": ");
                text.push_str(&part);
            }
            cause = e.source();
        }
        text
    }

    pub fn syntax(message: impl Into<String>) -> Self {
        Self::new(sqlstate::SYNTAX_ERROR, message)
    }

    pub fn not_supported(message: impl Into<String>) -> Self {
        Self::new(sqlstate::FEATURE_NOT_SUPPORTED, message)
    }

    pub fn undefined_table(name: &str) -> Self {
        Self::new(
            sqlstate::UNDEFINED_TABLE,
            format!("relation \"{name}\" does not exist"),
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(sqlstate::INTERNAL_ERROR, message)
    }

    /// Classifies a DataFusion error by what went wrong, so the client gets the same
    /// SQLSTATE PostgreSQL would send for the same mistake.
    pub fn from_datafusion(err: DataFusionError) -> Self {
        let err = strip_context(err);
        match err {
            DataFusionError::SQL(e, _) => Self::syntax(e.to_string()),
            DataFusionError::NotImplemented(m) => Self::not_supported(m),
            DataFusionError::SchemaError(e, _) => {
                if let datafusion::common::SchemaError::FieldNotFound { field, .. } = e.as_ref() {
                    // PostgreSQL's wording, with the column as written (`t.a` or `a`).
                    return Self::new(
                        sqlstate::UNDEFINED_COLUMN,
                        format!("column \"{}\" does not exist", field.flat_name()),
                    );
                }
                let text = e.to_string();
                let code = if text.contains("No field named") || text.contains("not found") {
                    sqlstate::UNDEFINED_COLUMN
                } else if text.contains("ambiguous") || text.contains("Ambiguous") {
                    "42702"
                } else {
                    sqlstate::DATATYPE_MISMATCH
                };
                Self::new(code, clean_message(&text))
            }
            DataFusionError::Plan(m) => {
                if let Some(name) = missing_relation(&m) {
                    return Self::undefined_table(&name);
                }
                if m.starts_with("Too many columns! The subquery should only return one column") {
                    // PostgreSQL's words.
                    return Self::syntax("subquery must return only one column");
                }
                Self::new(classify_plan_message(&m), clean_message(&m))
            }
            DataFusionError::ArrowError(e, _) => Self::from_arrow_message(&e.to_string()),
            DataFusionError::Execution(m) => {
                if let Some(code) = parse_tagged(&m) {
                    return Self::new(code.0, code.1);
                }
                Self::from_arrow_message(&m)
            }
            DataFusionError::External(e) => {
                if let Some(eddy) = e.downcast_ref::<EddyError>() {
                    return eddy.clone();
                }
                Self::from_arrow_message(&e.to_string())
            }
            DataFusionError::ResourcesExhausted(m) => Self::new("53200", m),
            other => {
                let text = other.to_string();
                if let Some(code) = parse_tagged(&text) {
                    return Self::new(code.0, code.1);
                }
                Self::from_arrow_message(&text)
            }
        }
    }

    fn from_arrow_message(text: &str) -> Self {
        let lower = text.to_ascii_lowercase();
        if lower.contains("declared as non-nullable but contains null values") {
            // Arrow's check while building an INSERT's rows for a NOT NULL column.
            return Self::new(
                sqlstate::NOT_NULL_VIOLATION,
                format!(
                    "null value violates not-null constraint ({})",
                    clean_message(text)
                ),
            );
        }
        if lower.contains("negative count not allowed") {
            // DataFusion's `substr` refusing a negative length: PostgreSQL's error, with
            // RisingWave's words too (its test files match them).
            return Self::new(
                sqlstate::SUBSTRING_ERROR,
                "negative substring length not allowed (the length in substr should be non-negative)",
            );
        }
        if lower.contains("divide by zero") || lower.contains("division by zero") {
            // PostgreSQL's words first (clients and test files match them), then Arrow's.
            return Self::new(
                sqlstate::DIVISION_BY_ZERO,
                format!("division by zero ({})", clean_message(text)),
            );
        }
        // A number that does not fit an integer type (Arrow's checked cast; checked
        // integer arithmetic is planned as one): PostgreSQL's words.
        for (arrow_type, sql_type) in [
            ("Int16", "smallint"),
            ("Int32", "integer"),
            ("Int64", "bigint"),
        ] {
            if text.contains("Can't cast value") && text.contains(&format!("to type {arrow_type}"))
            {
                return Self::new(
                    sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
                    format!("{sql_type} out of range"),
                );
            }
        }
        if let Some(message) = postgres_cast_message(text) {
            return Self::new(sqlstate::INVALID_TEXT_REPRESENTATION, message);
        }
        let code = if lower.contains("invalid function") {
            sqlstate::UNDEFINED_FUNCTION
        } else if lower.contains("overflow") || lower.contains("out of range") {
            sqlstate::NUMERIC_VALUE_OUT_OF_RANGE
        } else if lower.contains("cannot cast")
            || lower.contains("cast error")
            || lower.contains("parser error")
            || lower.contains("invalid")
            || lower.contains("can't parse")
            || lower.contains("cannot parse")
        {
            sqlstate::INVALID_TEXT_REPRESENTATION
        } else {
            sqlstate::DATA_EXCEPTION
        };
        Self::new(code, clean_message(text))
    }

    /// Wraps this error so it can travel through DataFusion and come out unchanged.
    pub fn into_datafusion(self) -> DataFusionError {
        DataFusionError::External(Box::new(self))
    }
}

impl fmt::Display for EddyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for EddyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// PostgreSQL's words for Arrow's refusal to read text as a type: `invalid input syntax
/// for type integer: "a"` for `Cannot cast string 'a' to value of Int32 type`.
fn postgres_cast_message(text: &str) -> Option<String> {
    const START: &str = "Cannot cast string '";
    let rest = &text[text.find(START)? + START.len()..];
    let (value, rest) = rest.split_once("' to value of ")?;
    let arrow_type = rest.split(" type").next()?;
    let pg_type = match arrow_type {
        "Int16" => "smallint",
        "Int32" => "integer",
        "Int64" => "bigint",
        "Float32" => "real",
        "Float64" => "double precision",
        "Boolean" => "boolean",
        "Date32" | "Date64" => "date",
        t if t.starts_with("Decimal") => "numeric",
        t if t.starts_with("Timestamp") && t.contains(", None") => "timestamp",
        t if t.starts_with("Timestamp") => "timestamp with time zone",
        t if t.starts_with("Time") => "time",
        t if t.starts_with("Interval") => "interval",
        _ => return None,
    };
    Some(format!(
        "invalid input syntax for type {pg_type}: \"{value}\""
    ))
}

impl From<DataFusionError> for EddyError {
    fn from(e: DataFusionError) -> Self {
        Self::from_datafusion(e)
    }
}

impl From<arrow::error::ArrowError> for EddyError {
    fn from(e: arrow::error::ArrowError) -> Self {
        Self::from_arrow_message(&e.to_string())
    }
}

impl From<rocksdb::Error> for EddyError {
    fn from(e: rocksdb::Error) -> Self {
        Self::caused_by(sqlstate::IO_ERROR, format!("storage error: {e}"), e)
    }
}

impl From<std::io::Error> for EddyError {
    fn from(e: std::io::Error) -> Self {
        Self::caused_by(sqlstate::IO_ERROR, format!("I/O error: {e}"), e)
    }
}

impl From<object_store::Error> for EddyError {
    fn from(e: object_store::Error) -> Self {
        Self::caused_by(sqlstate::IO_ERROR, format!("object store: {e}"), e)
    }
}

/// The relation DataFusion's `table 'dev.public.t' not found` names (`t`): PostgreSQL
/// says `relation "t" does not exist`, and clients and test files match those words.
fn missing_relation(message: &str) -> Option<String> {
    let quoted = message
        .strip_prefix("table '")?
        .strip_suffix("' not found")?;
    let parts: Vec<&str> = quoted.split('.').collect();
    match parts.as_slice() {
        [.., schema, name] if *schema == crate::catalog::DEFAULT_SCHEMA => Some(name.to_string()),
        [name] => Some(name.to_string()),
        _ => Some(quoted.to_string()),
    }
}

/// DataFusion wraps errors in `Context` and `Diagnostic` layers; the innermost one
/// says what actually went wrong.
fn strip_context(err: DataFusionError) -> DataFusionError {
    match err {
        DataFusionError::Context(_, inner) => strip_context(*inner),
        DataFusionError::Diagnostic(_, inner) => strip_context(*inner),
        DataFusionError::Shared(inner) => match std::sync::Arc::try_unwrap(inner) {
            Ok(e) => strip_context(e),
            Err(arc) => DataFusionError::Execution(arc.to_string()),
        },
        other => other,
    }
}

fn classify_plan_message(m: &str) -> &'static str {
    let lower = m.to_ascii_lowercase();
    if lower.contains("table") && lower.contains("not found") {
        sqlstate::UNDEFINED_TABLE
    } else if lower.contains("no field named")
        || lower.contains("column") && lower.contains("not found")
    {
        sqlstate::UNDEFINED_COLUMN
    } else if lower.contains("invalid function")
        || lower.contains("function") && lower.contains("not found")
    {
        sqlstate::UNDEFINED_FUNCTION
    } else if lower.contains("coercion")
        || lower.contains("cannot infer common")
        || lower.contains("does not support")
        || lower.contains("failed to coerce")
        || lower.contains("mismatch")
    {
        sqlstate::DATATYPE_MISMATCH
    } else if lower.contains("unsupported") || lower.contains("not supported") {
        sqlstate::FEATURE_NOT_SUPPORTED
    } else {
        sqlstate::SYNTAX_ERROR
    }
}

/// Eddy code running inside DataFusion reports its own SQLSTATE as `[SQLSTATE xxxxx] msg`.
fn parse_tagged(m: &str) -> Option<(&'static str, String)> {
    let start = m.find("[SQLSTATE ")?;
    let code = m.get(start + 10..start + 15)?;
    let rest = m.get(start + 17..).unwrap_or("").to_string();
    let code: &'static str = match code {
        "23502" => sqlstate::NOT_NULL_VIOLATION,
        "22P02" => sqlstate::INVALID_TEXT_REPRESENTATION,
        "22003" => sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
        "42703" => sqlstate::UNDEFINED_COLUMN,
        "0A000" => sqlstate::FEATURE_NOT_SUPPORTED,
        _ => sqlstate::DATA_EXCEPTION,
    };
    Some((code, rest))
}

/// Drops DataFusion's internal prefixes ("Error during planning: ") and backtraces.
fn clean_message(m: &str) -> String {
    let mut s = m.trim();
    for prefix in [
        "Error during planning: ",
        "Schema error: ",
        "Arrow error: ",
        "Execution error: ",
        "External error: ",
        "Cast error: ",
        "Parser error: ",
        "Compute error: ",
        "Invalid argument error: ",
    ] {
        while let Some(rest) = s.strip_prefix(prefix) {
            s = rest;
        }
    }
    s.split("\nbacktrace")
        .next()
        .unwrap_or(s)
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    #[test]
    fn causes_are_kept_and_reported() {
        let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "no access");
        let err = EddyError::from(io).context("uploading sst/000012.sst");
        let err = err.context("checkpoint of epoch 7 not committed");
        assert_eq!(err.code, sqlstate::IO_ERROR);
        assert_eq!(
            err.report(),
            "checkpoint of epoch 7 not committed: uploading sst/000012.sst: I/O error: no access"
        );
        // Walk the chain down to the I/O error itself.
        let mut depth = 0;
        let mut cause = err.source();
        let mut last = None;
        while let Some(e) = cause {
            depth += 1;
            last = Some(e.to_string());
            cause = e.source();
        }
        assert_eq!(depth, 3);
        assert_eq!(last.as_deref(), Some("no access"));
        // A cause the message does not spell out is added to the report.
        let quiet = EddyError::caused_by(
            sqlstate::IO_ERROR,
            "sink \"s\" cannot write",
            std::io::Error::other("broken pipe"),
        );
        assert_eq!(quiet.report(), "sink \"s\" cannot write: broken pipe");
        assert_eq!(quiet.message, "sink \"s\" cannot write");
    }
}
