//! `CREATE TABLE`, `CREATE VIEW` and `DROP`: changes to the catalog.

use super::{Outcome, Session};
use crate::catalog::{Column, DEFAULT_SCHEMA, Relation, RelationKind, SqlType};
use crate::error::{EddyError, Result, sqlstate};
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{
    self, ColumnDef, ColumnOption, CreateTable, CreateView, Ident, ObjectName, ObjectType,
    TableConstraint,
};

/// The name a user's identifier stands for: unquoted identifiers fold to lower case.
pub(crate) fn ident_name(ident: &Ident) -> String {
    if ident.quote_style.is_some() {
        ident.value.clone()
    } else {
        ident.value.to_lowercase()
    }
}

/// The relation name of `name` or `public.name`; other schemas do not exist.
pub(crate) fn relation_name(name: &ObjectName) -> Result<String> {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|p| match p.as_ident() {
            Some(i) => Ok(ident_name(i)),
            None => Err(EddyError::syntax(format!("invalid name {name}"))),
        })
        .collect::<Result<_>>()?;
    match parts.as_slice() {
        [n] => Ok(n.clone()),
        [schema, n] if schema == DEFAULT_SCHEMA => Ok(n.clone()),
        [db, schema, n] if db == crate::catalog::DATABASE_NAME && schema == DEFAULT_SCHEMA => {
            Ok(n.clone())
        }
        _ => Err(EddyError::new(
            "3F000",
            format!("schema of \"{name}\" does not exist; Eddy has only schema \"public\""),
        )),
    }
}

pub(super) async fn create_table(
    session: &Session,
    create: CreateTable,
    extras: Option<crate::sql::table_extras::CreateTableExtras>,
) -> Result<Outcome> {
    let name = relation_name(&create.name)?;
    if create.query.is_some() {
        if extras.is_some() {
            return Err(EddyError::not_supported(
                "CREATE TABLE ... AS SELECT takes no WITH options, watermark, APPEND ONLY or ON CONFLICT",
            ));
        }
        return create_table_as(session, create).await;
    }
    if create.like.is_some() || create.clone.is_some() {
        return Err(EddyError::not_supported(
            "CREATE TABLE ... LIKE/CLONE is not supported",
        ));
    }
    if create.temporary {
        return Err(EddyError::not_supported(
            "temporary tables are not supported",
        ));
    }
    if session.engine.catalog.get(&name).is_some() && create.if_not_exists {
        return Ok(Outcome::command("CREATE TABLE"));
    }
    if create.columns.is_empty() {
        return Err(EddyError::syntax("a table needs at least one column"));
    }

    let (mut columns, mut primary_key) = columns_from_defs(&name, &create.columns)?;
    for constraint in &create.constraints {
        match constraint {
            TableConstraint::PrimaryKey(pk) => {
                if !primary_key.is_empty() {
                    return Err(multiple_primary_keys(&name));
                }
                for c in &pk.columns {
                    match &c.column.expr {
                        ast::Expr::Identifier(i) => primary_key.push(ident_name(i)),
                        other => {
                            return Err(EddyError::syntax(format!(
                                "primary key must name columns, found {other}"
                            )));
                        }
                    }
                }
            }
            other => {
                return Err(EddyError::not_supported(format!(
                    "table constraint {other} is not supported"
                )));
            }
        }
    }
    let mut pk_indices = Vec::with_capacity(primary_key.len());
    for key in &primary_key {
        let idx = columns.iter().position(|c| &c.name == key).ok_or_else(|| {
            EddyError::new(
                sqlstate::UNDEFINED_COLUMN,
                format!("column \"{key}\" named in key does not exist"),
            )
        })?;
        if pk_indices.contains(&idx) {
            return Err(EddyError::new(
                "42701",
                format!("column \"{key}\" appears twice in primary key constraint"),
            ));
        }
        // As in PostgreSQL, primary key columns are implicitly NOT NULL.
        columns[idx].nullable = false;
        pk_indices.push(idx);
    }

    let mut rel = Relation {
        columns,
        primary_key: pk_indices,
        definition: ast::Statement::CreateTable(create).to_string(),
        ..Relation::new(name, RelationKind::Table)
    };
    if let Some(extras) = extras {
        if let Some((column, expression)) = &extras.watermark {
            rel.watermark = Some(super::sources::watermark_spec(
                session, &rel, column, expression,
            )?);
        }
        if extras.append_only {
            rel.options.insert("append_only".into(), "true".into());
        }
        if let Some(policy) = extras.on_conflict {
            if rel.primary_key.is_empty() {
                return Err(EddyError::new(
                    "42P10",
                    "ON CONFLICT needs a table with a primary key",
                ));
            }
            if extras.append_only {
                return Err(EddyError::not_supported(
                    "ON CONFLICT is not supported on an APPEND ONLY table",
                ));
            }
            rel.options
                .insert("on_conflict".into(), policy.option_value().into());
        }
        let connector_options = connector_options(session, &extras)?;
        rel.definition = extras.original;
        if !connector_options.is_empty() {
            if rel.options.contains_key("append_only") || rel.options.contains_key("on_conflict") {
                return Err(EddyError::not_supported(
                    "a table fed by a connector takes no APPEND ONLY or ON CONFLICT",
                ));
            }
            if super::kafka_tables::is_kafka(&connector_options) {
                if rel.primary_key.is_empty() {
                    return Err(EddyError::new(
                        sqlstate::INVALID_PARAMETER_VALUE,
                        "a table fed by kafka needs a PRIMARY KEY (the rows its messages upsert)",
                    ));
                }
                let spec =
                    super::kafka_tables::table_spec(&rel.arrow_schema(), &connector_options)?;
                if let crate::connectors::kafka::PayloadFormat::Avro(_) = &spec.payload {
                    let debezium = spec.envelope == crate::connectors::kafka::Envelope::Debezium;
                    super::sources::check_avro_table_columns(&rel, &connector_options, debezium)?;
                }
                // Restarts can then start while the broker is unreachable.
                rel.options.insert(
                    crate::connectors::kafka::PARTITIONS_OPTION.into(),
                    spec.partitions.to_string(),
                );
            } else {
                crate::connectors::postgres_cdc::CdcSpec::from_options(
                    &connector_options,
                    &rel.name,
                )?;
            }
            rel.options.extend(connector_options);
        }
    }
    let rel = session.engine.catalog.create_relation(rel)?;
    if super::kafka_tables::is_kafka_table(&rel)
        && let Err(e) = super::kafka_tables::start(&session.engine, &rel)
    {
        super::drop::drop_relation(&session.engine, &rel, false)?;
        return Err(e);
    }
    if super::cdc::is_cdc_table(&rel)
        && let Err(e) = super::cdc::create(&session.engine, &rel).await
    {
        super::drop::drop_relation(&session.engine, &rel, false)?;
        return Err(e);
    }
    Ok(Outcome::command("CREATE TABLE"))
}

/// `CREATE TABLE t [(names)] AS query`: a table with the query's columns (named as a
/// view's would be, every one nullable, no primary key), filled with its rows in the
/// same statement; dropped again if the rows cannot be written.
async fn create_table_as(session: &Session, create: CreateTable) -> Result<Outcome> {
    let name = relation_name(&create.name)?;
    let catalog = &session.engine.catalog;
    if catalog.get(&name).is_some() {
        if create.if_not_exists {
            return Ok(Outcome::command("CREATE TABLE AS"));
        }
        return Err(EddyError::new(
            sqlstate::DUPLICATE_TABLE,
            format!("relation \"{name}\" already exists"),
        ));
    }
    let query = create.query.clone().expect("a query");
    let plan = session.plan(ast::Statement::Query(query.clone())).await?;
    let fields = plan.schema().as_arrow().fields().clone();
    let names: Vec<String> = if create.columns.is_empty() {
        super::column_names::view_column_names(&query, &fields)
    } else {
        if create.columns.len() > fields.len() {
            return Err(EddyError::syntax(
                "CREATE TABLE AS specifies too many column names",
            ));
        }
        // As in PostgreSQL, names may be given for the first columns only.
        create
            .columns
            .iter()
            .map(|c| ident_name(&c.name))
            .chain(
                super::column_names::view_column_names(&query, &fields)
                    .into_iter()
                    .skip(create.columns.len()),
            )
            .collect()
    };
    let columns = view_columns(names, &fields)?;
    let definition = format!(
        "CREATE TABLE {name} ({})",
        columns
            .iter()
            .map(|c| format!("{} {}", c.name, c.sql_type.pg_name()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let rel = catalog.create_relation(Relation {
        columns,
        definition,
        ..Relation::new(name.clone(), RelationKind::Table)
    })?;
    let mut insert = session
        .engine
        .parse(&format!(
            "INSERT INTO \"{}\" SELECT 1",
            rel.name.replace('"', "\"\"")
        ))?
        .pop()
        .ok_or_else(|| EddyError::internal("an INSERT parses"))?;
    if let ast::Statement::Insert(i) = &mut insert {
        i.source = Some(query);
    }
    let written = async {
        let plan = session.plan(insert).await?;
        session.run_plan(plan).await
    }
    .await;
    match written {
        Ok(Outcome::Command(tag)) => Ok(Outcome::Command(tag.replacen("INSERT 0", "SELECT", 1))),
        Ok(other) => Ok(other),
        Err(e) => {
            super::drop::drop_relation(&session.engine, &rel, false)?;
            Err(e)
        }
    }
}

/// The connector options of a table: its own `WITH (connector = 'postgres-cdc', ...)`, or
/// a shared CDC source's with the table `FROM source TABLE 'schema.table'` names.
fn connector_options(
    session: &Session,
    extras: &crate::sql::table_extras::CreateTableExtras,
) -> Result<std::collections::BTreeMap<String, String>> {
    let mut options = extras.options.clone();
    if let Some((source, upstream)) = &extras.from_source {
        let shared = session
            .engine
            .catalog
            .get(source)
            .filter(|r| r.kind == RelationKind::Source)
            .ok_or_else(|| {
                EddyError::new(
                    sqlstate::UNDEFINED_OBJECT,
                    format!("source \"{source}\" does not exist"),
                )
            })?;
        if !super::cdc::has_cdc_connector(&shared) {
            return Err(EddyError::new(
                sqlstate::WRONG_OBJECT_TYPE,
                format!("source \"{source}\" is not a postgres-cdc source"),
            ));
        }
        options = shared.options.clone();
        let (schema, table) = upstream
            .split_once('.')
            .unwrap_or(("public", upstream.as_str()));
        options.insert("schema.name".into(), schema.to_string());
        options.insert("table.name".into(), table.to_string());
    }
    match options.get("connector").map(|c| c.to_ascii_lowercase()) {
        None => Ok(Default::default()),
        Some(c) if c == "postgres-cdc" || c == "kafka" => Ok(options),
        Some(other) => Err(EddyError::not_supported(format!(
            "tables fed by connector '{other}' are not supported; use CREATE SOURCE (tables take connector 'postgres-cdc' or 'kafka')"
        ))),
    }
}

/// The columns of a view (plain or materialized) from its names and the query's fields:
/// names must be distinct; types follow the query; every column is nullable.
pub(super) fn view_columns(
    names: Vec<String>,
    fields: &arrow::datatypes::Fields,
) -> Result<Vec<Column>> {
    for (i, n) in names.iter().enumerate() {
        if names[..i].contains(n) {
            return Err(EddyError::new(
                "42701",
                format!("column \"{n}\" specified more than once"),
            ));
        }
    }
    Ok(names
        .into_iter()
        .zip(fields)
        .map(|(name, f)| Column {
            name,
            sql_type: SqlType::from_arrow(f),
            nullable: true,
            hidden: false,
            default: None,
            generated: None,
            description: None,
        })
        .collect())
}

/// Column definitions → columns, and the column named `PRIMARY KEY` inline (if any).
pub(super) fn columns_from_defs(
    table: &str,
    defs: &[ColumnDef],
) -> Result<(Vec<Column>, Vec<String>)> {
    let mut columns: Vec<Column> = Vec::with_capacity(defs.len());
    let mut primary_key: Vec<String> = Vec::new();
    for def in defs {
        let col_name = ident_name(&def.name);
        if columns.iter().any(|c| c.name == col_name) {
            return Err(EddyError::new(
                "42701",
                format!("column \"{col_name}\" specified more than once"),
            ));
        }
        let sql_type = SqlType::from_ast(&def.data_type)?;
        let mut nullable = true;
        let mut default = None;
        let mut generated = None;
        for opt in &def.options {
            match &opt.option {
                ColumnOption::NotNull => nullable = false,
                ColumnOption::Null => nullable = true,
                ColumnOption::Default(expr) => {
                    super::column_values::check_default(&col_name, expr)?;
                    default = Some(expr.to_string());
                }
                ColumnOption::Generated {
                    generation_expr: Some(expr),
                    generation_expr_mode,
                    ..
                } => {
                    if matches!(
                        generation_expr_mode,
                        Some(ast::GeneratedExpressionMode::Virtual)
                    ) {
                        return Err(EddyError::not_supported(
                            "virtual generated columns are not supported; generated columns are STORED",
                        ));
                    }
                    generated = Some(expr.to_string());
                }
                ColumnOption::PrimaryKey(_) => {
                    if !primary_key.is_empty() {
                        return Err(multiple_primary_keys(table));
                    }
                    primary_key.push(col_name.clone());
                }
                other => {
                    return Err(EddyError::not_supported(format!(
                        "column option {other} is not supported"
                    )));
                }
            }
        }
        if default.is_some() && generated.is_some() {
            return Err(EddyError::syntax(format!(
                "both default and generation expression specified for column \"{col_name}\""
            )));
        }
        columns.push(Column {
            name: col_name,
            sql_type,
            nullable,
            hidden: false,
            default,
            generated,
            description: None,
        });
    }
    super::column_values::check_generated(&columns)?;
    Ok((columns, primary_key))
}

fn multiple_primary_keys(table: &str) -> EddyError {
    EddyError::new(
        "42P16",
        format!("multiple primary keys for table \"{table}\" are not allowed"),
    )
}

pub(super) async fn create_view(session: &Session, view: CreateView) -> Result<Outcome> {
    let name = relation_name(&view.name)?;
    let catalog = &session.engine.catalog;
    if let Some(existing) = catalog.get(&name) {
        if view.if_not_exists {
            return Ok(Outcome::command("CREATE VIEW"));
        }
        if !(view.or_replace && existing.kind == RelationKind::View) {
            return Err(EddyError::new(
                sqlstate::DUPLICATE_TABLE,
                format!("relation \"{name}\" already exists"),
            ));
        }
    }
    let query_sql = view.query.to_string();
    let plan = session
        .plan(ast::Statement::Query(view.query.clone()))
        .await?;
    if !plan.get_parameter_types()?.is_empty() {
        return Err(EddyError::syntax(
            "there is no parameter $1 in a view definition",
        ));
    }
    let schema = plan.schema();
    let names: Vec<String> = if view.columns.is_empty() {
        super::column_names::view_column_names(&view.query, schema.fields())
    } else {
        if view.columns.len() > schema.fields().len() {
            return Err(EddyError::syntax(
                "CREATE VIEW specifies more column names than columns",
            ));
        }
        let mut names: Vec<String> = view.columns.iter().map(|c| ident_name(&c.name)).collect();
        names.extend(
            schema
                .fields()
                .iter()
                .skip(view.columns.len())
                .map(|f| f.name().clone()),
        );
        names
    };
    let columns = view_columns(names, schema.fields())?;
    let depends_on = referenced_relations(session, &view.query)?;
    if view.or_replace && catalog.get(&name).is_some() {
        catalog.drop_relation(&name)?;
    }
    catalog.create_relation(Relation {
        columns,
        definition: query_sql,
        depends_on,
        ..Relation::new(name, RelationKind::View)
    })?;
    Ok(Outcome::command("CREATE VIEW"))
}

/// Ids of the catalog relations a query names (a view's own dependencies are recorded
/// with the view, so a view over a view depends on that view, not on its tables).
fn referenced_relations(session: &Session, query: &ast::Query) -> Result<Vec<u32>> {
    let statement =
        DFStatement::Statement(Box::new(ast::Statement::Query(Box::new(query.clone()))));
    let references = session
        .engine
        .ctx
        .state()
        .resolve_table_references(&statement)?;
    let mut ids = Vec::new();
    for r in references {
        if let Some(rel) = session.engine.catalog.get(r.table())
            && !ids.contains(&rel.id)
        {
            ids.push(rel.id);
        }
    }
    Ok(ids)
}

pub(super) async fn drop(
    session: &Session,
    object_type: ObjectType,
    if_exists: bool,
    names: Vec<ObjectName>,
    cascade: bool,
) -> Result<Outcome> {
    let (kind, tag) = match object_type {
        ObjectType::Table => (RelationKind::Table, "DROP TABLE"),
        ObjectType::View => (RelationKind::View, "DROP VIEW"),
        ObjectType::Index => (RelationKind::Index, "DROP INDEX"),
        other => {
            return Err(EddyError::not_supported(format!(
                "DROP {other} is not supported"
            )));
        }
    };
    let catalog = &session.engine.catalog;
    let names = names
        .iter()
        .map(relation_name)
        .collect::<Result<Vec<_>>>()?;
    let to_drop = catalog.resolve_drop(&names, kind, if_exists, sqlstate::UNDEFINED_TABLE)?;
    for rel in to_drop {
        super::drop::drop_relation(&session.engine, &rel, cascade)?;
    }
    Ok(Outcome::command(tag))
}
