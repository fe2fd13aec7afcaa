//! `ALTER {TABLE | VIEW | MATERIALIZED VIEW | SOURCE | SINK | INDEX} name RENAME TO new`.
//!
//! Relations are stored, read and checkpointed by id, but definitions name what they
//! read, and a restart plans views and sinks again from their definitions. So a rename
//! rewrites, in the same catalog write, every definition that names the relation (the
//! queries of views, materialized views and sinks, the `ON` of indexes) and the
//! relation's own `CREATE` statement. A materialized view's or sink's job (and every job
//! reading its view) restarts under the new name from the last barrier, as
//! `ALTER ... SET PARALLELISM` restarts it, and a barrier round then records the new
//! names in the next checkpoint.

use super::{Outcome, Session};
use crate::catalog::{DEFAULT_SCHEMA, Relation, RelationKind};
use crate::error::{EddyError, Result, sqlstate};
use crate::sql::alter_rename::AlterRename;
use datafusion::sql::sqlparser::ast::{
    Ident, ObjectName, ObjectNamePart, TableAlias, TableFactor, VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer, Whitespace};
use std::ops::ControlFlow;

pub(super) async fn execute(session: &Session, alter: AlterRename) -> Result<Outcome> {
    let engine = &session.engine;
    let kind = match alter.kind.as_str() {
        "TABLE" => RelationKind::Table,
        "VIEW" => RelationKind::View,
        "MATERIALIZED VIEW" => RelationKind::MaterializedView,
        "SOURCE" => RelationKind::Source,
        "SINK" => RelationKind::Sink,
        _ => RelationKind::Index,
    };
    let tag = Outcome::Command(format!("ALTER {}", alter.kind));
    let Some(rel) = engine.catalog.get(&alter.name) else {
        if alter.if_exists {
            return Ok(tag);
        }
        return Err(EddyError::new(
            sqlstate::UNDEFINED_TABLE,
            format!(
                "{} \"{}\" does not exist",
                alter.kind.to_lowercase(),
                alter.name
            ),
        ));
    };
    if rel.kind != kind {
        return Err(EddyError::new(
            sqlstate::WRONG_OBJECT_TYPE,
            format!("\"{}\" is not a {}", rel.name, alter.kind.to_lowercase()),
        ));
    }
    if alter.new_name.contains('.') {
        return Err(EddyError::new(
            "3F000",
            format!(
                "schema of \"{}\" does not exist; Eddy has only schema \"public\"",
                alter.new_name
            ),
        ));
    }
    if rel.kind == RelationKind::Table && rel.options.contains_key("connector") {
        return Err(EddyError::not_supported(
            "renaming a table fed by a connector is not supported",
        ));
    }
    if engine.catalog.get(&alter.new_name).is_some() {
        return Err(EddyError::new(
            sqlstate::DUPLICATE_TABLE,
            format!("relation \"{}\" already exists", alter.new_name),
        ));
    }
    let rewritten = rewritten_definitions(&engine.catalog.relations(), &rel, &alter.new_name)?;
    let rename = || {
        engine
            .catalog
            .rename(&rel.name, &alter.new_name, rewritten.clone())
            .map(|_| ())
    };
    match rel.kind {
        RelationKind::MaterializedView | RelationKind::Sink => {
            super::jobs::restart_around(engine, &rel, rename).await?
        }
        _ => rename()?,
    }
    Ok(tag)
}

/// The relations whose definitions name `renamed`, with those names changed to
/// `new_name`; the renamed relation's own `CREATE` statement too.
fn rewritten_definitions(
    relations: &[Relation],
    renamed: &Relation,
    new_name: &str,
) -> Result<Vec<Relation>> {
    let mut out = Vec::new();
    for r in relations {
        let definition = if r.id == renamed.id {
            match r.kind {
                RelationKind::Table => rename_after(&r.definition, &["TABLE"], None, new_name),
                RelationKind::Source => rename_after(&r.definition, &["SOURCE"], None, new_name),
                RelationKind::Index => rename_after(&r.definition, &["INDEX"], None, new_name),
                _ => None,
            }
        } else {
            match r.kind {
                RelationKind::View | RelationKind::MaterializedView | RelationKind::Sink => {
                    rename_in_query(&r.definition, &renamed.name, new_name)?
                }
                RelationKind::Index if r.depends_on.contains(&renamed.id) => {
                    rename_after(&r.definition, &["ON"], Some(&renamed.name), new_name)
                }
                _ => None,
            }
        };
        if let Some(definition) = definition {
            out.push(Relation {
                definition,
                ..r.clone()
            });
        }
    }
    Ok(out)
}

/// A query's text with every reference to the relation `old` renamed, or `None` when it
/// has none.
fn rename_in_query(sql: &str, old: &str, new_name: &str) -> Result<Option<String>> {
    let Ok(mut statements) = crate::sql::star_except::parse(sql) else {
        // Every stored query parses: it was written from a parsed statement.
        return Err(EddyError::internal(format!(
            "a stored definition does not parse: {sql}"
        )));
    };
    let mut renamer = Renamer {
        old,
        new_name,
        changed: false,
    };
    for statement in statements.iter_mut() {
        let _ = statement.visit(&mut renamer);
    }
    Ok(renamer.changed.then(|| {
        statements
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    }))
}

/// Renames the relation `old` where a query reads it; a reference without an alias
/// gets the old name as its alias, so that columns qualified by it still resolve.
struct Renamer<'a> {
    old: &'a str,
    new_name: &'a str,
    changed: bool,
}

impl VisitorMut for Renamer<'_> {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        if let TableFactor::Table { name, alias, .. } = factor
            && names_relation(name, self.old)
        {
            *name = ObjectName::from(vec![identifier(self.new_name)]);
            if alias.is_none() {
                *alias = Some(TableAlias {
                    explicit: true,
                    name: identifier(self.old),
                    columns: vec![],
                    at: None,
                });
            }
            self.changed = true;
        }
        ControlFlow::Continue(())
    }
}

/// Whether `name` (`t`, `public.t`, `dev.public.t`) is the relation `relation`.
fn names_relation(name: &ObjectName, relation: &str) -> bool {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|p| match p {
            ObjectNamePart::Identifier(i) => super::ddl::ident_name(i),
            other => other.to_string(),
        })
        .collect();
    match parts.as_slice() {
        [n] => n == relation,
        [schema, n] => schema == DEFAULT_SCHEMA && n == relation,
        [db, schema, n] => {
            db == crate::catalog::DATABASE_NAME && schema == DEFAULT_SCHEMA && n == relation
        }
        _ => false,
    }
}

/// An identifier for `name`, quoted when folding would change it.
fn identifier(name: &str) -> Ident {
    if super::format_function::is_plain_identifier(name) {
        Ident::new(name)
    } else {
        Ident::with_quote('"', name)
    }
}

/// A statement's text with the (possibly qualified) name that follows the words `after`
/// (skipping `IF [NOT] EXISTS`) replaced by `new_name` — only if it is `expected`, when
/// given. Works on tokens, so Eddy's own clauses (`WITH (...)`, `FORMAT ...`) stay as
/// they were written.
fn rename_after(
    sql: &str,
    after: &[&str],
    expected: Option<&str>,
    new_name: &str,
) -> Option<String> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let significant: Vec<usize> = (0..tokens.len())
        .filter(|i| !matches!(tokens[*i], Token::Whitespace(_)))
        .collect();
    let is_word = |i: usize, w: &str| matches!(&tokens[i], Token::Word(word) if word.quote_style.is_none() && word.value.eq_ignore_ascii_case(w));
    let start = (0..significant.len()).find(|&k| {
        after
            .iter()
            .enumerate()
            .all(|(j, w)| significant.get(k + j).is_some_and(|&i| is_word(i, w)))
    })?;
    let mut k = start + after.len();
    while significant.get(k).is_some_and(|&i| {
        is_word(i, "IF") || is_word(i, "NOT") || is_word(i, "EXISTS") || is_word(i, "ONLY")
    }) {
        k += 1;
    }
    // The name: words joined by periods.
    let first = *significant.get(k)?;
    let mut last = first;
    let mut parts = Vec::new();
    loop {
        let Token::Word(word) = &tokens[last] else {
            return None;
        };
        parts.push(if word.quote_style.is_some() {
            word.value.clone()
        } else {
            word.value.to_lowercase()
        });
        match significant.get(k + 1) {
            Some(&p) if tokens[p] == Token::Period => {
                last = *significant.get(k + 2)?;
                k += 2;
            }
            _ => break,
        }
    }
    if let Some(expected) = expected {
        let name = ObjectName::from(
            parts
                .iter()
                .map(|p| Ident::new(p.as_str()))
                .collect::<Vec<_>>(),
        );
        if !names_relation(&name, expected) {
            return None;
        }
    }
    let mut out: Vec<Token> = tokens[..first].to_vec();
    out.push(Token::Word(datafusion::sql::sqlparser::tokenizer::Word {
        value: new_name.to_string(),
        quote_style: identifier(new_name).quote_style,
        keyword: datafusion::sql::sqlparser::keywords::Keyword::NoKeyword,
    }));
    if matches!(tokens.get(last + 1), Some(Token::LParen)) {
        out.push(Token::Whitespace(Whitespace::Space));
    }
    out.extend_from_slice(&tokens[last + 1..]);
    Some(out.iter().map(ToString::to_string).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renames_the_created_name_only() {
        assert_eq!(
            rename_after(
                "CREATE TABLE IF NOT EXISTS t (a INT) APPEND ONLY",
                &["TABLE"],
                None,
                "t2"
            )
            .unwrap(),
            "CREATE TABLE IF NOT EXISTS t2 (a INT) APPEND ONLY"
        );
        assert_eq!(
            rename_after("CREATE INDEX i ON public.t(a)", &["ON"], Some("t"), "New").unwrap(),
            "CREATE INDEX i ON \"New\" (a)"
        );
        assert!(rename_after("CREATE INDEX i ON u(a)", &["ON"], Some("t"), "x").is_none());
    }

    #[test]
    fn renames_references_in_queries() {
        let renamed = rename_in_query(
            "SELECT t.a, s.b FROM t JOIN public.t AS s ON t.a = s.a WHERE a IN (SELECT a FROM t)",
            "t",
            "t2",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            renamed,
            "SELECT t.a, s.b FROM t2 AS t JOIN t2 AS s ON t.a = s.a WHERE a IN (SELECT a FROM t2 AS t)"
        );
        assert!(
            rename_in_query("SELECT * FROM u", "t", "x")
                .unwrap()
                .is_none()
        );
    }
}
