//! `CREATE SOURCE`, `DROP SOURCE`, `SHOW SOURCES`.
//!
//! Creating a source checks its columns, its watermark and its connector options, and
//! records it in the catalog. Streaming jobs read sources; a plain `SELECT` does not
//! (see [`crate::catalog::schema_provider`]).

use super::ddl::columns_from_defs;
use super::{Outcome, Session};
use crate::catalog::SqlType;
use crate::catalog::{Relation, RelationKind, WatermarkSpec};
use crate::connectors::ConnectorSpec;
use crate::error::{EddyError, Result, sqlstate};
use crate::sql::CreateSource;
use arrow::datatypes::{DataType, Field};
use datafusion::common::DFSchema;
use datafusion::logical_expr::ExprSchemable;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

pub(super) fn create_source(session: &Session, create: CreateSource) -> Result<Outcome> {
    let catalog = &session.engine.catalog;
    if catalog.get(&create.name).is_some() && create.if_not_exists {
        return Ok(Outcome::Command("CREATE SOURCE".into()));
    }
    let (columns, primary_key) = columns_from_defs(&create.name, &create.columns)?;
    if !primary_key.is_empty() {
        return Err(EddyError::not_supported(
            "a source cannot have a primary key",
        ));
    }
    let mut rel = Relation {
        columns,
        options: create.options.clone(),
        ..Relation::new(create.name.clone(), RelationKind::Source)
    };
    if let Some(derived) = avro_value_columns(&create)? {
        // The value's fields first, then the INCLUDE columns declared.
        let mut columns = derived;
        columns.append(&mut rel.columns);
        rel.columns = columns;
    }
    if let Some((column, expression)) = &create.watermark {
        rel.watermark = Some(watermark_spec(session, &rel, column, expression)?);
    }
    if !create.proctime_columns.is_empty() {
        for name in &create.proctime_columns {
            let field = rel
                .arrow_schema()
                .field_with_name(name)
                .map_err(|_| {
                    EddyError::new(
                        crate::error::sqlstate::UNDEFINED_COLUMN,
                        format!("column \"{name}\" does not exist"),
                    )
                })?
                .clone();
            if !matches!(field.data_type(), arrow::datatypes::DataType::Timestamp(..)) {
                return Err(EddyError::new(
                    crate::error::sqlstate::DATATYPE_MISMATCH,
                    format!("column \"{name}\" AS PROCTIME() must be a timestamp or timestamptz"),
                ));
            }
        }
        rel.options.insert(
            crate::connectors::processing_time::PROCTIME_OPTION.into(),
            create.proctime_columns.join(","),
        );
    }
    if let Some((format, encode)) = &create.format {
        if matches!(format.as_str(), "upsert" | "debezium") {
            return Err(EddyError::not_supported(format!(
                "FORMAT {} updates rows: use a table with a primary key, CREATE TABLE t (..., PRIMARY KEY (...)) \
                 WITH (connector = 'kafka', ...) FORMAT {0} ENCODE JSON",
                format.to_ascii_uppercase()
            )));
        }
        if format != "plain" {
            return Err(EddyError::not_supported(format!(
                "FORMAT {format} is not supported; use FORMAT PLAIN"
            )));
        }
        if !matches!(
            encode.as_str(),
            "json" | "csv" | "bytes" | "parquet" | "avro"
        ) {
            return Err(EddyError::not_supported(format!(
                "ENCODE {encode} is not supported; use JSON, CSV, AVRO, PARQUET or BYTES"
            )));
        }
        rel.options.insert("format".into(), format.clone());
        rel.options.insert("encode".into(), encode.clone());
        for (k, v) in &create.encode_options {
            rel.options.insert(format!("encode.{k}"), v.clone());
        }
    }
    // Validate the connector options against the schema now, not when a job starts.
    if !create.includes.is_empty() {
        let kafka = rel
            .options
            .get("connector")
            .is_some_and(|c| c.eq_ignore_ascii_case("kafka"));
        if !kafka {
            return Err(EddyError::not_supported(
                "INCLUDE is supported for kafka sources only",
            ));
        }
        let encoded: Vec<String> = create.includes.iter().map(|i| i.encode()).collect();
        rel.options.insert(
            crate::connectors::kafka::INCLUDE_OPTION.into(),
            encoded.join(";"),
        );
    }
    if super::cdc::has_cdc_connector(&rel) {
        // A shared CDC source: checked here, read by the tables made FROM it.
        crate::connectors::postgres_cdc::check_source_options(&rel.options)?;
        rel.definition = source_definition(&create);
        catalog.create_relation(rel)?;
        return Ok(Outcome::Command("CREATE SOURCE".into()));
    }
    let included = |name: &str| create.includes.iter().any(|i| i.column == name);
    if rel.columns.iter().all(|c| included(&c.name)) {
        return Err(EddyError::syntax(
            "CREATE SOURCE needs a column list: CREATE SOURCE s (col type, ...) \
             (only ENCODE AVRO takes its columns from the schema registry)",
        ));
    }
    let spec = ConnectorSpec::from_options(&rel.arrow_schema(), &rel.options)?;
    if let ConnectorSpec::Kafka(kafka) = &spec {
        // Jobs can then start while the broker is unreachable.
        rel.options.insert(
            crate::connectors::kafka::PARTITIONS_OPTION.into(),
            kafka.partitions.to_string(),
        );
    }
    rel.definition = source_definition(&create);
    catalog.create_relation(rel)?;
    Ok(Outcome::Command("CREATE SOURCE".into()))
}

/// For a kafka table `ENCODE AVRO (schema.registry = '...')`: the registry must answer
/// for the topic's value subject, and each of the table's columns be a field of its
/// latest schema (with `debezium`, of the row record in the envelope's `before` or
/// `after`).
pub(super) fn check_avro_table_columns(
    rel: &crate::catalog::Relation,
    options: &std::collections::BTreeMap<String, String>,
    debezium: bool,
) -> Result<()> {
    let url = options
        .get("encode.schema.registry")
        .or_else(|| options.get("schema.registry"))
        .ok_or_else(|| {
            EddyError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                "ENCODE AVRO needs its schema registry: ENCODE AVRO (schema.registry = 'http://...')",
            )
        })?;
    let topic = options.get("topic").ok_or_else(|| {
        EddyError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            "a kafka table needs option topic",
        )
    })?;
    let registry = crate::connectors::schema_registry::SchemaRegistry::new(url)?;
    let (_, text) = registry.latest(&crate::connectors::avro::value_subject(topic))?;
    let schema = crate::connectors::avro::parse_schema(&text)?;
    let fields = if debezium {
        crate::connectors::avro::debezium_row_columns(&schema)?
    } else {
        crate::connectors::avro::columns_of(&schema)?
    };
    for column in &rel.columns {
        if !fields
            .iter()
            .any(|f| f.name.eq_ignore_ascii_case(&column.name))
        {
            return Err(EddyError::new(
                sqlstate::UNDEFINED_COLUMN,
                format!(
                    "column \"{}\" is not a field of the Avro schema of topic \"{topic}\"",
                    column.name
                ),
            ));
        }
    }
    Ok(())
}

/// For a kafka source `ENCODE AVRO (schema.registry = '...')`: the latest schema of the
/// topic's value subject is fetched (the registry must answer, and the subject exist),
/// and when the statement declares no columns but `INCLUDE`d ones, the record's fields
/// become the columns (returned); declared columns must each be a field of it.
fn avro_value_columns(create: &CreateSource) -> Result<Option<Vec<crate::catalog::Column>>> {
    let is_avro = create
        .format
        .as_ref()
        .is_some_and(|(_, encode)| encode == "avro");
    if !is_avro {
        return Ok(None);
    }
    let kafka = create
        .options
        .get("connector")
        .is_some_and(|c| c.eq_ignore_ascii_case("kafka"));
    if !kafka {
        return Err(EddyError::not_supported(
            "ENCODE AVRO is supported for kafka sources only",
        ));
    }
    let url = create
        .encode_options
        .get("schema.registry")
        .ok_or_else(|| {
            EddyError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                "ENCODE AVRO needs its schema registry: ENCODE AVRO (schema.registry = 'http://...')",
            )
        })?;
    let topic = create.options.get("topic").ok_or_else(|| {
        EddyError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            "a kafka source needs option topic",
        )
    })?;
    let registry = crate::connectors::schema_registry::SchemaRegistry::new(url)?;
    let (_, text) = registry.latest(&crate::connectors::avro::value_subject(topic))?;
    let fields =
        crate::connectors::avro::columns_of(&crate::connectors::avro::parse_schema(&text)?)?;
    let included: Vec<&str> = create.includes.iter().map(|i| i.column.as_str()).collect();
    let declared: Vec<&str> = create
        .columns
        .iter()
        .map(|c| c.name.value.as_str())
        .filter(|name| !included.contains(name))
        .collect();
    if declared.is_empty() {
        return Ok(Some(fields));
    }
    for name in declared {
        if !fields.iter().any(|f| f.name.eq_ignore_ascii_case(name)) {
            return Err(EddyError::new(
                sqlstate::UNDEFINED_COLUMN,
                format!("column \"{name}\" is not a field of the Avro schema of topic \"{topic}\""),
            ));
        }
    }
    Ok(None)
}

/// Checks `WATERMARK FOR column AS expression` of a source or table: the column exists,
/// the expression is of the column's type, and that is a timestamp.
pub(super) fn watermark_spec(
    session: &Session,
    rel: &Relation,
    column: &str,
    expression: &str,
) -> Result<WatermarkSpec> {
    let field = rel
        .columns
        .iter()
        .find(|c| c.name == column)
        .ok_or_else(|| {
            EddyError::new(
                sqlstate::UNDEFINED_COLUMN,
                format!(
                    "watermark column \"{column}\" is not a column of {} \"{}\"",
                    rel.kind.sql_name(),
                    rel.name
                ),
            )
        })?;
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(expression)
        .and_then(|mut p| p.parse_expr())
        .map_err(|e| EddyError::syntax(format!("invalid watermark expression: {e}")))?;
    let schema = DFSchema::try_from(rel.arrow_schema().as_ref().clone())?;
    let planned = session
        .engine
        .ctx
        .state()
        .create_logical_expr(expression, &schema)?;
    let returned = SqlType::from_arrow(&Field::new("", planned.get_type(&schema)?, true));
    // Compared by SQL type, so a time zone spelled another way or another precision of
    // the same timestamp type still matches.
    if returned.pg_name() != field.sql_type.pg_name() {
        return Err(EddyError::new(
            sqlstate::DATATYPE_MISMATCH,
            format!(
                "The return value type of the watermark expression must be identical to the \
                 watermark column data type. Current data type of watermark return value: \
                 `{}`, column `{}`",
                returned.pg_name(),
                field.sql_type.pg_name()
            ),
        ));
    }
    if !matches!(field.sql_type.to_arrow(), DataType::Timestamp(..)) {
        return Err(EddyError::new(
            sqlstate::DATATYPE_MISMATCH,
            format!("watermark column \"{column}\" must be a timestamp or timestamptz"),
        ));
    }
    Ok(WatermarkSpec {
        column: column.to_string(),
        expression: expression.to_string(),
    })
}

/// The statement as it would be written again (for `SHOW CREATE SOURCE` and the docs).
fn source_definition(create: &CreateSource) -> String {
    let mut items: Vec<String> = create
        .columns
        .iter()
        .map(|c| {
            let proctime = create
                .proctime_columns
                .iter()
                .any(|p| *p == c.name.value.to_lowercase());
            if proctime {
                format!("{c} AS PROCTIME()")
            } else {
                c.to_string()
            }
        })
        .collect();
    if let Some((column, expression)) = &create.watermark {
        items.push(format!("WATERMARK FOR {column} AS {expression}"));
    }
    let options: Vec<String> = create
        .options
        .iter()
        .map(|(k, v)| format!("{k} = '{}'", v.replace('\'', "''")))
        .collect();
    let mut sql = format!(
        "CREATE SOURCE {} ({}) WITH ({})",
        create.name,
        items.join(", "),
        options.join(", ")
    );
    if let Some((format, encode)) = &create.format {
        sql.push_str(&format!(
            " FORMAT {} ENCODE {}",
            format.to_uppercase(),
            encode.to_uppercase()
        ));
    }
    sql
}

pub(super) fn drop_sources(
    session: &Session,
    names: Vec<String>,
    if_exists: bool,
    cascade: bool,
) -> Result<Outcome> {
    let engine = &session.engine;
    for rel in engine.catalog.resolve_drop(
        &names,
        RelationKind::Source,
        if_exists,
        sqlstate::UNDEFINED_OBJECT,
    )? {
        super::drop::drop_relation(engine, &rel, cascade)?;
    }
    Ok(Outcome::Command("DROP SOURCE".into()))
}
