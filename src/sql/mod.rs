//! Eddy's own statements, recognised before the query goes to sqlparser.
//!
//! sqlparser reads `CREATE USER` in Snowflake's form (PostgreSQL's
//! `CREATE USER name WITH PASSWORD '...'` is parsed here instead) and knows nothing of
//! sources (`CREATE SOURCE`, `DROP SOURCE`, in [`source`]).

pub mod alter_parallelism;
pub mod alter_rename;
pub mod alter_system;
pub mod sink;
pub mod source;
pub mod star_except;
pub mod struct_types;
pub mod table_extras;

/// Whether a statement's text holds `marker` (any case): the AST passes that resolve a
/// rewrite's marker run only then.
pub fn mentions(sql: &str, marker: &str) -> bool {
    sql.as_bytes()
        .windows(marker.len())
        .any(|w| w.eq_ignore_ascii_case(marker.as_bytes()))
}

pub use sink::CreateSink;
pub use source::CreateSource;

/// A statement sqlparser does not parse.
#[derive(Debug, Clone, PartialEq)]
pub enum EddyStatement {
    User(UserStatement),
    CreateSource(CreateSource),
    DropSource {
        names: Vec<String>,
        if_exists: bool,
        cascade: bool,
    },
    CreateSink(CreateSink),
    DropSink {
        names: Vec<String>,
        if_exists: bool,
        cascade: bool,
    },
    /// `SHOW CREATE {TABLE | VIEW | MATERIALIZED VIEW | SOURCE | SINK} name`.
    ShowCreate {
        kind: String,
        name: String,
    },
    /// `FLUSH`: wait until earlier writes are visible everywhere.
    Flush,
    /// `ALTER SYSTEM SET name = value`.
    AlterSystem(alter_system::AlterSystem),
    /// `ALTER {MATERIALIZED VIEW | SINK} name SET PARALLELISM = n`.
    AlterParallelism(alter_parallelism::AlterParallelism),
    AlterRename(alter_rename::AlterRename),
    /// `CREATE TABLE` with `WATERMARK FOR` or `APPEND ONLY`.
    CreateTable(table_extras::CreateTableExtras),
    /// `[EXPLAIN] CREATE MATERIALIZED VIEW ... EMIT ON WINDOW CLOSE`: the statement
    /// without its last clause, which sqlparser does not know.
    EmitOnWindowClose(String),
}

/// Splits a query string into its statements at top-level semicolons, so that Eddy's own
/// statements can be mixed with ordinary SQL in one simple-protocol query.
pub fn split_statements(sql: &str) -> Vec<String> {
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize_with_location() else {
        // Let the parser report the error on the whole text.
        return vec![sql.to_string()];
    };
    // Byte offset of each line's start, to turn token locations (line, column in
    // characters) back into positions in the original text.
    let mut line_starts = vec![0usize];
    line_starts.extend(sql.match_indices('\n').map(|(i, _)| i + 1));
    let offset_of = |line: u64, column: u64| -> usize {
        let start = line_starts
            .get(line.saturating_sub(1) as usize)
            .copied()
            .unwrap_or(sql.len());
        sql[start..]
            .char_indices()
            .nth(column.saturating_sub(1) as usize)
            .map(|(i, _)| start + i)
            .unwrap_or(sql.len())
    };
    let mut statements = Vec::new();
    let mut begin = 0usize;
    let mut depth = 0i32;
    for t in tokens {
        match t.token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            Token::SemiColon if depth == 0 => {
                let at = offset_of(t.span.start.line, t.span.start.column);
                if !sql[begin..at].trim().is_empty() {
                    statements.push(sql[begin..at].to_string());
                }
                begin = at + 1;
            }
            _ => {}
        }
    }
    if begin < sql.len() && !sql[begin..].trim().is_empty() {
        statements.push(sql[begin..].to_string());
    }
    statements
}

#[cfg(test)]
mod split_tests {
    use super::split_statements;

    #[test]
    fn splits_at_top_level_semicolons_only() {
        let parts = split_statements(
            "SELECT 'a;b', 'it''s';\nCREATE SOURCE s (a INT) WITH (x = ';');  ;SELECT (1)",
        );
        assert_eq!(
            parts,
            vec![
                "SELECT 'a;b', 'it''s'".to_string(),
                "\nCREATE SOURCE s (a INT) WITH (x = ';')".to_string(),
                "SELECT (1)".to_string()
            ]
        );
    }
}

/// `Some` when `sql` is one of Eddy's own statements.
pub fn parse_eddy_statement(sql: &str) -> Option<Result<EddyStatement>> {
    let with_structs = match struct_types::rewrite(sql) {
        Ok(rewritten) => rewritten,
        Err(e) => return Some(Err(e)),
    };
    let sql = with_structs.as_deref().unwrap_or(sql);
    if let Some(user) = parse_user_statement(sql) {
        return Some(user.map(EddyStatement::User));
    }
    if let Some(source) = source::parse_create_source(sql) {
        return Some(source.map(EddyStatement::CreateSource));
    }
    if let Some(sink) = sink::parse_create_sink(sql) {
        return Some(sink.map(EddyStatement::CreateSink));
    }
    if let Some(show) = parse_show_create(sql) {
        return Some(show);
    }
    if sql
        .trim()
        .trim_end_matches(';')
        .trim()
        .eq_ignore_ascii_case("flush")
    {
        return Some(Ok(EddyStatement::Flush));
    }
    if let Some(alter) = alter_parallelism::parse(sql) {
        return Some(alter.map(EddyStatement::AlterParallelism));
    }
    if let Some(alter) = alter_rename::parse(sql) {
        return Some(alter.map(EddyStatement::AlterRename));
    }
    if let Some(alter) = alter_system::parse(sql) {
        return Some(alter.map(EddyStatement::AlterSystem));
    }
    if let Some(table) = table_extras::parse(sql) {
        return Some(table.map(EddyStatement::CreateTable));
    }
    if let Some(statement) =
        strip_emit_on_window_close(sql).or_else(|| strip_leading_emit_on_window_close(sql))
    {
        return Some(Ok(EddyStatement::EmitOnWindowClose(statement)));
    }
    source::parse_drop(sql)
}

/// `sql` without a final `EMIT ON WINDOW CLOSE`, if it ends with one.
fn strip_emit_on_window_close(sql: &str) -> Option<String> {
    let body = sql.trim().trim_end_matches(';').trim_end();
    let lower = body.to_ascii_lowercase();
    let at = lower.rfind("emit")?;
    let clause: Vec<&str> = lower[at..].split_whitespace().collect();
    let before = &body[..at];
    let separated = before.ends_with(|c: char| c.is_whitespace() || c == ')');
    (clause == ["emit", "on", "window", "close"] && separated)
        .then(|| before.trim_end().to_string())
}

/// `CREATE MATERIALIZED VIEW name EMIT ON WINDOW CLOSE AS query` (RisingWave's other
/// place for the clause) without the clause, if `sql` is such a statement.
fn strip_leading_emit_on_window_close(sql: &str) -> Option<String> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let words: Vec<(usize, String)> = tokens
        .iter()
        .enumerate()
        .filter(|(_, t)| !matches!(t, Token::Whitespace(_)))
        .map(|(i, t)| match t {
            Token::Word(w) if w.quote_style.is_none() => (i, w.value.to_ascii_uppercase()),
            other => (i, other.to_string()),
        })
        .collect();
    let is = |at: usize, expected: &[&str]| {
        expected
            .iter()
            .enumerate()
            .all(|(k, e)| words.get(at + k).is_some_and(|(_, w)| w == e))
    };
    if !is(0, &["CREATE", "MATERIALIZED", "VIEW"]) {
        return None;
    }
    // The clause sits between the name and the first AS.
    let first_as = words.iter().position(|(_, w)| w == "AS")?;
    let clause = first_as.checked_sub(4)?;
    if clause < 4 || !is(clause, &["EMIT", "ON", "WINDOW", "CLOSE"]) {
        return None;
    }
    let (from, to) = (words[clause].0, words[clause + 3].0);
    let kept: String = tokens
        .iter()
        .enumerate()
        .filter(|(i, _)| *i < from || *i > to)
        .map(|(_, t)| t.to_string())
        .collect();
    Some(kept.trim().trim_end_matches(';').to_string())
}

use crate::error::{EddyError, Result};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

#[derive(Debug, Clone, PartialEq)]
pub enum UserStatement {
    Create {
        name: String,
        password: Option<String>,
        superuser: bool,
    },
    Alter {
        name: String,
        password: Option<Option<String>>,
        superuser: Option<bool>,
    },
    Drop {
        names: Vec<String>,
        if_exists: bool,
    },
}

/// Parses `CREATE|ALTER|DROP USER|ROLE ...` if that is what `sql` holds (one statement).
pub fn parse_user_statement(sql: &str) -> Option<Result<UserStatement>> {
    let tokens: Vec<Token> = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize()
        .ok()?
        .into_iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect();
    let mut tokens: Vec<Token> = tokens;
    while matches!(tokens.last(), Some(Token::SemiColon)) {
        tokens.pop();
    }
    let word = |t: &Token| match t {
        Token::Word(w) => Some(w.value.to_ascii_uppercase()),
        _ => None,
    };
    let verb = word(tokens.first()?)?;
    let noun = word(tokens.get(1)?)?;
    if !matches!(verb.as_str(), "CREATE" | "ALTER" | "DROP")
        || !matches!(noun.as_str(), "USER" | "ROLE")
    {
        return None;
    }
    if tokens.contains(&Token::SemiColon) {
        return Some(Err(EddyError::not_supported(
            "send user statements one at a time, not with other statements",
        )));
    }
    Some(parse_tokens(&verb, &tokens[2..]))
}

fn parse_show_create(sql: &str) -> Option<Result<EddyStatement>> {
    use source::{identifier, is_word, significant_tokens};
    let tokens = significant_tokens(sql).ok()?;
    if !(is_word(tokens.first(), "show") && is_word(tokens.get(1), "create")) {
        return None;
    }
    let (kind, at) = if is_word(tokens.get(2), "materialized") && is_word(tokens.get(3), "view") {
        ("materialized view", 4)
    } else if ["table", "view", "source", "sink", "index"]
        .iter()
        .any(|k| is_word(tokens.get(2), k))
    {
        match &tokens[2] {
            Token::Word(w) => (
                match w.value.to_ascii_lowercase().as_str() {
                    "table" => "table",
                    "view" => "view",
                    "source" => "source",
                    "index" => "index",
                    _ => "sink",
                },
                3,
            ),
            _ => return None,
        }
    } else {
        return None;
    };
    Some(identifier(tokens.get(at)).and_then(|name| {
        if tokens.len() > at + 1 {
            Err(EddyError::syntax(format!(
                "unexpected {} in SHOW CREATE",
                tokens[at + 1]
            )))
        } else {
            Ok(EddyStatement::ShowCreate {
                kind: kind.to_string(),
                name,
            })
        }
    }))
}

fn name_of(t: Option<&Token>) -> Result<String> {
    match t {
        Some(Token::Word(w)) if w.quote_style.is_some() => Ok(w.value.clone()),
        Some(Token::Word(w)) => Ok(w.value.to_lowercase()),
        other => Err(EddyError::syntax(format!(
            "expected a user name, found {}",
            other
                .map(|t| t.to_string())
                .unwrap_or_else(|| "end of input".into())
        ))),
    }
}

fn parse_tokens(verb: &str, rest: &[Token]) -> Result<UserStatement> {
    if verb == "DROP" {
        let mut i = 0;
        let mut if_exists = false;
        if rest.len() >= 2
            && matches!(&rest[0], Token::Word(w) if w.value.eq_ignore_ascii_case("if"))
            && matches!(&rest[1], Token::Word(w) if w.value.eq_ignore_ascii_case("exists"))
        {
            if_exists = true;
            i = 2;
        }
        let mut names = Vec::new();
        loop {
            names.push(name_of(rest.get(i))?);
            i += 1;
            match rest.get(i) {
                Some(Token::Comma) => i += 1,
                None => break,
                Some(t) => return Err(EddyError::syntax(format!("unexpected {t} in DROP USER"))),
            }
        }
        return Ok(UserStatement::Drop { names, if_exists });
    }
    let name = name_of(rest.first())?;
    let mut password: Option<Option<String>> = None;
    let mut superuser: Option<bool> = None;
    let mut i = 1;
    while i < rest.len() {
        let Token::Word(w) = &rest[i] else {
            return Err(EddyError::syntax(format!(
                "unexpected {} in {verb} USER",
                rest[i]
            )));
        };
        match w.value.to_ascii_uppercase().as_str() {
            "WITH" | "LOGIN" | "NOLOGIN" | "INHERIT" | "NOINHERIT" | "CREATEDB" | "NOCREATEDB" => {}
            "SUPERUSER" => superuser = Some(true),
            "NOSUPERUSER" => superuser = Some(false),
            "ENCRYPTED" => {}
            "PASSWORD" => {
                i += 1;
                password = Some(match rest.get(i) {
                    Some(Token::SingleQuotedString(s)) => Some(s.clone()),
                    Some(Token::Word(w)) if w.value.eq_ignore_ascii_case("null") => None,
                    _ => {
                        return Err(EddyError::syntax(
                            "PASSWORD must be followed by a string or NULL",
                        ));
                    }
                });
            }
            other => {
                return Err(EddyError::not_supported(format!(
                    "user option {other} is not supported"
                )));
            }
        }
        i += 1;
    }
    Ok(if verb == "CREATE" {
        UserStatement::Create {
            name,
            password: password.flatten(),
            superuser: superuser.unwrap_or(false),
        }
    } else {
        UserStatement::Alter {
            name,
            password,
            superuser,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emit_on_window_close_before_as_is_taken_out() {
        assert_eq!(
            strip_leading_emit_on_window_close(
                "create materialized view mv\nemit on window close\nas\nselect 'a b' from t;"
            )
            .as_deref(),
            Some("create materialized view mv\n\nas\nselect 'a b' from t")
        );
        assert_eq!(
            strip_leading_emit_on_window_close("CREATE MATERIALIZED VIEW mv AS SELECT 1"),
            None
        );
        assert_eq!(
            strip_leading_emit_on_window_close("SELECT emit FROM t"),
            None
        );
    }

    #[test]
    fn parses_postgres_user_statements() {
        assert_eq!(
            parse_user_statement("CREATE USER Alice WITH PASSWORD 'p''w';")
                .unwrap()
                .unwrap(),
            UserStatement::Create {
                name: "alice".into(),
                password: Some("p'w".into()),
                superuser: false
            }
        );
        assert_eq!(
            parse_user_statement("alter user bob with password 'x' superuser")
                .unwrap()
                .unwrap(),
            UserStatement::Alter {
                name: "bob".into(),
                password: Some(Some("x".into())),
                superuser: Some(true)
            }
        );
        assert_eq!(
            parse_user_statement("DROP USER IF EXISTS a, \"B\"")
                .unwrap()
                .unwrap(),
            UserStatement::Drop {
                names: vec!["a".into(), "B".into()],
                if_exists: true
            }
        );
        assert!(parse_user_statement("SELECT 1").is_none());
        assert!(parse_user_statement("CREATE USER").unwrap().is_err());
    }
}
