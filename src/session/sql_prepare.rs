//! SQL-level `PREPARE name [(types)] AS statement`, `EXECUTE name [(values)]` and
//! `DEALLOCATE [PREPARE] name | ALL`, as psql scripts use them (the extended protocol's
//! own prepared statements are separate, as in PostgreSQL's wire protocol they are
//! unnamed or named apart from these).
//!
//! `PREPARE` plans the statement once to check it; `EXECUTE` evaluates its values, casts
//! them to the declared types and runs the statement with them bound to `$1`, `$2`, ...

use super::{Outcome, Session, ddl::ident_name, with_postgres_names};
use crate::catalog::SqlType;
use crate::error::{EddyError, Result};
use arrow::datatypes::DataType;
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::sql::sqlparser::ast::{DataType as SqlDataType, Expr, Ident, Statement};
use std::collections::HashMap;

/// A session's SQL-level prepared statements, by name.
#[derive(Default)]
pub(super) struct PreparedStatements(HashMap<String, PreparedStatement>);

struct PreparedStatement {
    statement: Statement,
    /// Declared parameter types, in order (fewer than the statement's parameters is
    /// allowed: the others take the type the plan infers).
    types: Vec<DataType>,
}

const UNDEFINED_PREPARED_STATEMENT: &str = "26000";
const DUPLICATE_PREPARED_STATEMENT: &str = "42P05";

pub(super) async fn prepare(
    session: &Session,
    name: &Ident,
    data_types: &[SqlDataType],
    statement: Statement,
) -> Result<Outcome> {
    let name = ident_name(name);
    if session.sql_prepared.lock().0.contains_key(&name) {
        return Err(EddyError::new(
            DUPLICATE_PREPARED_STATEMENT,
            format!("prepared statement \"{name}\" already exists"),
        ));
    }
    if !super::runs_in_datafusion(&statement) {
        return Err(EddyError::not_supported(
            "PREPARE takes a query, INSERT, UPDATE or DELETE",
        ));
    }
    let types = data_types
        .iter()
        .map(|t| Ok(SqlType::from_ast(t)?.to_arrow()))
        .collect::<Result<Vec<_>>>()?;
    // Planned now so that a statement that cannot run is refused at PREPARE.
    session.plan(statement.clone()).await?;
    session
        .sql_prepared
        .lock()
        .0
        .insert(name, PreparedStatement { statement, types });
    Ok(Outcome::command("PREPARE"))
}

pub(super) async fn execute(session: &Session, name: &str, parameters: &[Expr]) -> Result<Outcome> {
    let (statement, types) = {
        let prepared = session.sql_prepared.lock();
        let p = prepared.0.get(name).ok_or_else(|| {
            EddyError::new(
                UNDEFINED_PREPARED_STATEMENT,
                format!("prepared statement \"{name}\" does not exist"),
            )
        })?;
        (p.statement.clone(), p.types.clone())
    };
    let plan = session.plan(statement.clone()).await?;
    let inferred = plan.get_parameter_types()?;
    let mut values = Vec::with_capacity(parameters.len());
    for (i, value) in evaluate(session, parameters).await?.into_iter().enumerate() {
        let target = types
            .get(i)
            .cloned()
            .or_else(|| inferred.get(&format!("${}", i + 1)).cloned().flatten());
        values.push(match target {
            Some(t) if value.data_type() != t => value.cast_to(&t)?,
            _ => value,
        });
    }
    if values.len() != inferred.len() {
        return Err(EddyError::syntax(format!(
            "wrong number of parameters for prepared statement \"{name}\": expected {}, got {}",
            inferred.len(),
            values.len()
        )));
    }
    let plan = plan.with_param_values(ParamValues::from(values))?;
    let outcome = session.run_plan(plan).await?;
    Ok(with_postgres_names(outcome, &statement))
}

/// The columns `EXECUTE name` returns (for the extended protocol's Describe), `None`
/// for a data change or an unknown name (EXECUTE then reports the error).
pub(super) async fn result_schema(
    session: &Session,
    name: &str,
) -> Result<Option<arrow::datatypes::SchemaRef>> {
    let Some(statement) = session
        .sql_prepared
        .lock()
        .0
        .get(name)
        .map(|p| p.statement.clone())
    else {
        return Ok(None);
    };
    let plan = session.plan(statement.clone()).await?;
    if matches!(plan, datafusion::logical_expr::LogicalPlan::Dml(_)) {
        return Ok(None);
    }
    let schema = session.described_schema(&plan);
    Ok(Some(
        match super::column_names::postgres_names(&statement) {
            Some(names) => super::column_names::rename(&schema, &names),
            None => schema,
        },
    ))
}

pub(super) fn deallocate(session: &Session, name: &Ident) -> Result<Outcome> {
    let mut prepared = session.sql_prepared.lock();
    if name.quote_style.is_none() && name.value.eq_ignore_ascii_case("all") {
        prepared.0.clear();
    } else {
        let name = ident_name(name);
        if prepared.0.remove(&name).is_none() {
            return Err(EddyError::new(
                UNDEFINED_PREPARED_STATEMENT,
                format!("prepared statement \"{name}\" does not exist"),
            ));
        }
    }
    Ok(Outcome::command("DEALLOCATE"))
}

/// Forgets every prepared statement (`DISCARD ALL`).
pub(super) fn clear(session: &Session) {
    session.sql_prepared.lock().0.clear();
}

/// The values of `EXECUTE`'s expressions (constants, or anything a `SELECT` without
/// `FROM` computes).
async fn evaluate(session: &Session, parameters: &[Expr]) -> Result<Vec<ScalarValue>> {
    if parameters.is_empty() {
        return Ok(vec![]);
    }
    let mut query = super::sql_rewrite::parse_query("SELECT 1")?;
    if let datafusion::sql::sqlparser::ast::SetExpr::Select(select) = query.body.as_mut() {
        select.projection = parameters
            .iter()
            .map(|p| datafusion::sql::sqlparser::ast::SelectItem::UnnamedExpr(p.clone()))
            .collect();
    }
    let plan = session.plan(Statement::Query(Box::new(query))).await?;
    let Outcome::Rows { batches, .. } = session.run_plan(plan).await? else {
        return Err(EddyError::internal("a SELECT gives rows"));
    };
    let batch = batches
        .iter()
        .find(|b| b.num_rows() > 0)
        .ok_or_else(|| EddyError::internal("EXECUTE's values give one row"))?;
    batch
        .columns()
        .iter()
        .map(|c| Ok(ScalarValue::try_from_array(c, 0)?))
        .collect()
}
