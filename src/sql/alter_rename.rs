//! `ALTER {TABLE | VIEW | MATERIALIZED VIEW | SOURCE | SINK | INDEX} [IF EXISTS] name
//! RENAME TO new_name`, as in PostgreSQL and RisingWave. sqlparser reads only some of
//! these forms, so all of them are read here, on the token stream.

use crate::error::{EddyError, Result};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterRename {
    /// The kind as the statement spells it: `TABLE`, `MATERIALIZED VIEW`, ...
    pub kind: String,
    pub name: String,
    pub new_name: String,
    pub if_exists: bool,
}

const KINDS: [&[&str]; 6] = [
    &["TABLE"],
    &["MATERIALIZED", "VIEW"],
    &["VIEW"],
    &["SOURCE"],
    &["SINK"],
    &["INDEX"],
];

/// `Some` when `sql` is an `ALTER ... RENAME TO` statement.
pub fn parse(sql: &str) -> Option<Result<AlterRename>> {
    let tokens: Vec<Token> = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize()
        .ok()?
        .into_iter()
        .filter(|t| !matches!(t, Token::Whitespace(_) | Token::SemiColon))
        .collect();
    if !is_word(tokens.first(), "ALTER") {
        return None;
    }
    let kind = KINDS.iter().find(|kind| {
        kind.iter()
            .enumerate()
            .all(|(i, w)| is_word(tokens.get(1 + i), w))
    })?;
    let mut at = 1 + kind.len();
    let if_exists = is_word(tokens.get(at), "IF") && is_word(tokens.get(at + 1), "EXISTS");
    if if_exists {
        at += 2;
    }
    let (name, after_name) = name_at(&tokens, at)?;
    if !is_word(tokens.get(after_name), "RENAME") {
        return None; // another ALTER: not this one's to read
    }
    if is_word(tokens.get(after_name + 1), "COLUMN") {
        return Some(Err(EddyError::not_supported(
            "ALTER ... RENAME COLUMN is not supported",
        )));
    }
    let parsed = (|| {
        if !is_word(tokens.get(after_name + 1), "TO") {
            return None;
        }
        let (new_name, end) = name_at(&tokens, after_name + 2)?;
        (end == tokens.len()).then_some(new_name)
    })();
    let kind = kind.join(" ");
    Some(match parsed {
        Some(new_name) => Ok(AlterRename {
            kind,
            name,
            new_name,
            if_exists,
        }),
        None => Err(EddyError::syntax(format!(
            "expected ALTER {kind} name RENAME TO new_name"
        ))),
    })
}

/// A relation's name at `at` (`name`, `"Name"`, `public.name`), folded as PostgreSQL
/// folds identifiers, and the index after it.
fn name_at(tokens: &[Token], at: usize) -> Option<(String, usize)> {
    let mut parts = Vec::new();
    let mut i = at;
    loop {
        let Some(Token::Word(w)) = tokens.get(i) else {
            return None;
        };
        parts.push(if w.quote_style.is_some() {
            w.value.clone()
        } else {
            w.value.to_lowercase()
        });
        i += 1;
        if tokens.get(i) != Some(&Token::Period) {
            break;
        }
        i += 1;
    }
    // Only the one schema exists; the session layer refuses other qualifiers.
    let name = match parts.as_slice() {
        [schema, name] if schema == crate::catalog::DEFAULT_SCHEMA => name.clone(),
        _ => parts.join("."),
    };
    Some((name, i))
}

fn is_word(token: Option<&Token>, expected: &str) -> bool {
    matches!(token, Some(Token::Word(w)) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(expected))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_kind_and_folds_names() {
        let a = parse("ALTER MATERIALIZED VIEW Mv RENAME TO \"New\";")
            .unwrap()
            .unwrap();
        assert_eq!(
            (a.kind.as_str(), a.name.as_str(), a.new_name.as_str()),
            ("MATERIALIZED VIEW", "mv", "New")
        );
        let b = parse("alter table if exists public.t rename to t2")
            .unwrap()
            .unwrap();
        assert_eq!(
            (b.kind.as_str(), b.name.as_str(), b.if_exists),
            ("TABLE", "t", true)
        );
        assert_eq!(
            parse("ALTER VIEW v RENAME TO w").unwrap().unwrap().kind,
            "VIEW"
        );
        assert_eq!(
            parse("ALTER SINK s RENAME TO x").unwrap().unwrap().kind,
            "SINK"
        );
    }

    #[test]
    fn leaves_other_alters_and_reports_bad_ones() {
        assert!(parse("ALTER MATERIALIZED VIEW mv SET PARALLELISM = 2").is_none());
        assert!(parse("ALTER TABLE t ADD COLUMN c INT").is_none());
        assert!(parse("SELECT 1").is_none());
        assert!(parse("ALTER TABLE t RENAME TO").unwrap().is_err());
        assert!(
            parse("ALTER TABLE t RENAME COLUMN a TO b")
                .unwrap()
                .is_err()
        );
    }
}
