//! RisingWave's `rw_catalog` relation lists, which its users and test files query
//! (`SELECT name FROM rw_sinks`): `rw_tables`, `rw_materialized_views`, `rw_views`,
//! `rw_sources`, `rw_sinks` and `rw_indexes`, each with the relation's `id`, `name`,
//! `schema_id` (of `public`), `owner` and `definition` (the query Eddy keeps for views
//! and sinks, the column list for tables and sources). Also found without the schema,
//! as in RisingWave.

use super::RelationKind;
use super::system_tables::{RowBuilder, SystemSources};
use arrow::array::{Int32Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::Result as DFResult;
use std::sync::Arc;

pub const SCHEMA: &str = "rw_catalog";

/// The oid PostgreSQL gives schema `public`.
const PUBLIC_SCHEMA_ID: i32 = 2200;

pub(super) const TABLES: &[(&str, RowBuilder)] = &[
    ("rw_tables", |s, schema| {
        rows_of(s, schema, RelationKind::Table)
    }),
    ("rw_materialized_views", |s, schema| {
        rows_of(s, schema, RelationKind::MaterializedView)
    }),
    ("rw_views", |s, schema| {
        rows_of(s, schema, RelationKind::View)
    }),
    ("rw_sources", |s, schema| {
        rows_of(s, schema, RelationKind::Source)
    }),
    ("rw_sinks", |s, schema| {
        rows_of(s, schema, RelationKind::Sink)
    }),
    ("rw_indexes", |s, schema| {
        rows_of(s, schema, RelationKind::Index)
    }),
];

/// Whether `name` is one of the lists (for reading them without the schema).
pub fn is_list(name: &str) -> bool {
    TABLES.iter().any(|(n, _)| *n == name)
}

pub(super) fn relations_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int32, false),
        Field::new("name", DataType::Utf8, false),
        Field::new("schema_id", DataType::Int32, false),
        Field::new("owner", DataType::Int32, false),
        Field::new("definition", DataType::Utf8, true),
    ]))
}

fn rows_of(
    sources: &SystemSources,
    schema: SchemaRef,
    kind: RelationKind,
) -> DFResult<RecordBatch> {
    let mut relations: Vec<_> = sources
        .catalog
        .relations()
        .into_iter()
        .filter(|r| r.kind == kind)
        .collect();
    relations.sort_by_key(|r| r.id);
    let definition = |r: &super::Relation| match kind {
        RelationKind::Table | RelationKind::Source => format!(
            "CREATE {} {} ({})",
            kind.sql_name().to_uppercase(),
            r.name,
            r.columns
                .iter()
                .filter(|c| !c.hidden)
                .map(|c| format!("{} {}", c.name, c.sql_type.pg_name().to_uppercase()))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        _ => r.definition.clone(),
    };
    Ok(RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int32Array::from_iter_values(
                relations.iter().map(|r| r.id as i32),
            )),
            Arc::new(StringArray::from_iter_values(
                relations.iter().map(|r| r.name.as_str()),
            )),
            Arc::new(Int32Array::from_iter_values(
                relations.iter().map(|_| PUBLIC_SCHEMA_ID),
            )),
            Arc::new(Int32Array::from_iter_values(relations.iter().map(|_| 1))),
            Arc::new(StringArray::from_iter_values(
                relations.iter().map(definition),
            )),
        ],
    )?)
}
