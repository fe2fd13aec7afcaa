//! `jsonb`: PostgreSQL's binary JSON type, as RisingWave offers it.
//!
//! A `jsonb` value travels as its canonical text ([`text`]) in an Arrow `Utf8` column
//! whose field carries the `jsonb` type in its metadata, so the wire protocol reports
//! the type and functions know a JSON value from a plain string. What this module adds
//! to DataFusion:
//!
//! - casts (`'...'::jsonb`) and values written into `jsonb` columns are parsed and
//!   stored canonically ([`normalize_columns`]); bad JSON is an error (22P02);
//! - the operators `->`, `->>`, `#>`, `#>>`, `@>`, `<@`, `?`, `?|`, `?&`, and `||` and
//!   `-` on `jsonb` ([`operators`]);
//! - casts to text, numbers and booleans ([`casts`]);
//! - functions ([`functions`]) and the aggregates `jsonb_agg` and `jsonb_object_agg`
//!   ([`aggregates`]), which views maintain like any other aggregate; the
//!   set-returning functions in `FROM` ([`table_functions`]).

pub mod aggregates;
mod casts;
mod convert;
pub mod functions;
pub mod operators;
mod table_functions;
pub mod text;

use crate::catalog::types::PG_TYPE_METADATA;
use crate::error::{EddyError, Result, sqlstate};
use arrow::array::{ArrayRef, AsArray, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::execution::context::SessionContext;
use std::collections::HashMap;
use std::sync::Arc;

pub use convert::value_of;

/// Adds the `jsonb` functions, aggregates and operators to a session.
pub fn register(ctx: &SessionContext) -> Result<()> {
    for udf in functions::all() {
        ctx.register_udf(udf.as_ref().clone());
    }
    for udaf in aggregates::all() {
        ctx.register_udaf(udaf);
    }
    for (name, udtf) in table_functions::all() {
        ctx.register_udtf(name, udtf);
    }
    ctx.add_analyzer_rule(Arc::new(casts::JsonbCasts));
    use datafusion::execution::FunctionRegistry;
    ctx.state_ref()
        .write()
        .register_expr_planner(Arc::new(operators::JsonbOperators))?;
    Ok(())
}

/// Whether a field holds `jsonb` values.
pub fn is_jsonb(field: &Field) -> bool {
    field.metadata().get(PG_TYPE_METADATA).map(String::as_str) == Some("jsonb")
}

/// A nullable `jsonb` field.
pub fn jsonb_field(name: &str) -> Field {
    Field::new(name, DataType::Utf8, true).with_metadata(HashMap::from([(
        PG_TYPE_METADATA.to_string(),
        "jsonb".to_string(),
    )]))
}

/// `batch` with every `jsonb` column of `schema` in canonical form; an invalid value is
/// PostgreSQL's error (22P02). Used where values enter a table.
pub fn normalize_columns(batch: &RecordBatch, schema: &Schema) -> Result<RecordBatch> {
    if !schema.fields().iter().any(|f| is_jsonb(f)) {
        return Ok(batch.clone());
    }
    let mut columns = batch.columns().to_vec();
    for (i, field) in schema.fields().iter().enumerate() {
        if is_jsonb(field) && i < columns.len() {
            columns[i] = normalize_array(&columns[i])?;
        }
    }
    Ok(RecordBatch::try_new(batch.schema(), columns)?)
}

/// A string array of JSON texts in canonical form.
pub fn normalize_array(array: &ArrayRef) -> Result<ArrayRef> {
    let texts = arrow::compute::cast(array, &DataType::Utf8)?;
    let texts = texts.as_string::<i32>();
    let normalized = texts
        .iter()
        .map(|t| t.map(text::normalize).transpose())
        .collect::<std::result::Result<StringArray, String>>()
        .map_err(invalid_json)?;
    Ok(arrow::compute::cast(
        &(Arc::new(normalized) as ArrayRef),
        array.data_type(),
    )?)
}

pub(crate) fn invalid_json(message: String) -> EddyError {
    EddyError::new(sqlstate::INVALID_TEXT_REPRESENTATION, message)
}
