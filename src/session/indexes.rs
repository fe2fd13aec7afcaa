//! `CREATE INDEX` and `DROP INDEX`.
//!
//! Nothing in Eddy reads through an index: a batch query scans its table, and a temporal
//! join keeps the table's rows by its join key itself (the lookup an index serves in
//! RisingWave). An index is therefore a catalog entry only: checked when created (its
//! table and columns exist, its name is free), shown by `SHOW CREATE INDEX`, dropped by
//! `DROP INDEX` or with its table — so that schemas and test files written for PostgreSQL
//! or RisingWave load unchanged. A `UNIQUE` index is refused: it would be a constraint
//! that Eddy does not enforce.

use super::ddl::{ident_name, relation_name};
use super::{Outcome, Session};
use crate::catalog::{Relation, RelationKind};
use crate::error::{EddyError, Result, sqlstate};
use datafusion::sql::sqlparser::ast::{CreateIndex, Expr};

pub(super) fn create(session: &Session, create: CreateIndex) -> Result<Outcome> {
    if create.unique {
        return Err(EddyError::not_supported(
            "CREATE UNIQUE INDEX is not supported (Eddy would not enforce it); use a PRIMARY KEY",
        ));
    }
    if create.predicate.is_some() {
        return Err(EddyError::not_supported(
            "a partial index (CREATE INDEX ... WHERE) is not supported",
        ));
    }
    let catalog = &session.engine.catalog;
    let table_name = relation_name(&create.table_name)?;
    let table = catalog
        .get(&table_name)
        .ok_or_else(|| EddyError::undefined_table(&table_name))?;
    if !matches!(
        table.kind,
        RelationKind::Table | RelationKind::MaterializedView
    ) {
        return Err(EddyError::new(
            sqlstate::WRONG_OBJECT_TYPE,
            format!(
                "cannot create an index on {} \"{table_name}\"",
                table.kind.sql_name()
            ),
        ));
    }
    let mut named = Vec::new();
    for column in &create.columns {
        let Expr::Identifier(ident) = &column.column.expr else {
            return Err(EddyError::not_supported(format!(
                "an index on an expression is not supported: {}; index plain columns",
                column.column.expr
            )));
        };
        named.push(ident_name(ident));
    }
    named.extend(create.include.iter().map(ident_name));
    let mut columns = Vec::new();
    for name in &named {
        let column = table
            .columns
            .iter()
            .find(|c| &c.name == name)
            .ok_or_else(|| {
                EddyError::new(
                    sqlstate::UNDEFINED_COLUMN,
                    format!("column \"{name}\" does not exist in \"{table_name}\""),
                )
            })?;
        if !columns.contains(column) {
            columns.push(column.clone());
        }
    }
    // PostgreSQL's name for an unnamed index: table, columns, `idx`.
    let name = match &create.name {
        Some(name) => relation_name(name)?,
        None => format!(
            "{table_name}_{}_idx",
            named[..create.columns.len()].join("_")
        ),
    };
    if catalog.get(&name).is_some() && create.if_not_exists {
        return Ok(Outcome::command("CREATE INDEX"));
    }
    catalog.create_relation(Relation {
        columns,
        definition: create.to_string(),
        depends_on: vec![table.id],
        ..Relation::new(name, RelationKind::Index)
    })?;
    Ok(Outcome::command("CREATE INDEX"))
}
