//! `COMMENT ON {TABLE | VIEW | MATERIALIZED VIEW | INDEX | COLUMN} name IS 'text' | NULL`:
//! descriptions kept in the catalog with the relation (and renamed and dropped with it),
//! shown by `DESCRIBE`.

use super::ddl::{ident_name, relation_name};
use super::{Outcome, Session};
use crate::catalog::RelationKind;
use crate::error::{EddyError, Result, sqlstate};
use datafusion::sql::sqlparser::ast::{CommentObject, ObjectName};

pub(super) fn comment(
    session: &Session,
    object_type: CommentObject,
    object_name: &ObjectName,
    comment: Option<String>,
    if_exists: bool,
) -> Result<Outcome> {
    let catalog = &session.engine.catalog;
    // An empty comment removes it, as in PostgreSQL.
    let comment = comment.filter(|c| !c.is_empty());
    let done = Ok(Outcome::Command("COMMENT".into()));
    let (relation, column) = match object_type {
        CommentObject::Column => {
            let Some((column, table)) = object_name.0.split_last() else {
                return Err(EddyError::syntax("COMMENT ON COLUMN needs table.column"));
            };
            if table.is_empty() {
                return Err(EddyError::syntax("COMMENT ON COLUMN needs table.column"));
            }
            let column = column
                .as_ident()
                .map(ident_name)
                .ok_or_else(|| EddyError::syntax(format!("invalid column name {object_name}")))?;
            (relation_name(&ObjectName(table.to_vec()))?, Some(column))
        }
        CommentObject::Table
        | CommentObject::View
        | CommentObject::MaterializedView
        | CommentObject::Index => (relation_name(object_name)?, None),
        other => {
            return Err(EddyError::not_supported(format!(
                "COMMENT ON {other} is not supported"
            )));
        }
    };
    let Some(rel) = catalog.get(&relation) else {
        if if_exists {
            return done;
        }
        return Err(EddyError::undefined_table(&relation));
    };
    let expected: &[RelationKind] = match object_type {
        CommentObject::Table => &[RelationKind::Table, RelationKind::Source],
        CommentObject::View => &[RelationKind::View],
        CommentObject::MaterializedView => &[RelationKind::MaterializedView],
        CommentObject::Index => &[RelationKind::Index],
        _ => &[],
    };
    if column.is_none() && !expected.contains(&rel.kind) {
        return Err(EddyError::new(
            sqlstate::WRONG_OBJECT_TYPE,
            format!(
                "\"{}\" is not a {}",
                rel.name,
                object_type.to_string().to_lowercase()
            ),
        ));
    }
    let index = match &column {
        Some(name) => Some(
            rel.columns
                .iter()
                .position(|c| &c.name == name)
                .ok_or_else(|| {
                    EddyError::new(
                        sqlstate::UNDEFINED_COLUMN,
                        format!(
                            "column \"{name}\" of relation \"{}\" does not exist",
                            rel.name
                        ),
                    )
                })?,
        ),
        None => None,
    };
    catalog.set_description(&rel.name, index, comment)?;
    done
}
