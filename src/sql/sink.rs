//! `CREATE SINK`, in RisingWave's syntax:
//!
//! ```sql
//! CREATE SINK [IF NOT EXISTS] name AS query WITH (connector = '...', ...)
//!     [FORMAT PLAIN ENCODE JSON [(option = 'value', ...)]];
//! CREATE SINK [IF NOT EXISTS] name FROM relation WITH (connector = '...', ...) [FORMAT ...];
//! CREATE SINK [IF NOT EXISTS] name INTO table [(column, ...)] {AS query | FROM relation}
//!     [WITH (type = 'append-only', force_append_only = 'true')];
//! ```
//!
//! The options are the last top-level `WITH (...)`, so a query may use `WITH` for CTEs;
//! `FORMAT f ENCODE e (k = v)` lands in them as `format`, `encode` and `encode.k`.

use super::source::{is_word, parse_options, significant_tokens};
use crate::error::{EddyError, Result};
use datafusion::sql::sqlparser::tokenizer::Token;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq)]
pub struct CreateSink {
    pub name: String,
    pub if_not_exists: bool,
    /// The query whose rows go to the sink (`FROM x` becomes `SELECT * FROM x`).
    pub query: String,
    /// Set for `FROM relation`.
    pub from: Option<String>,
    pub options: BTreeMap<String, String>,
    /// `INTO table [(columns)]`: the rows go into an Eddy table.
    pub into: Option<SinkTarget>,
}

/// The table a `CREATE SINK ... INTO` writes, and the columns its query's columns fill
/// (all the table's, in order, when none are named).
#[derive(Debug, Clone, PartialEq)]
pub struct SinkTarget {
    pub table: String,
    pub columns: Vec<String>,
}

pub fn parse_create_sink(sql: &str) -> Option<Result<CreateSink>> {
    let tokens = significant_tokens(sql).ok()?;
    if !(is_word(tokens.first(), "create") && is_word(tokens.get(1), "sink")) {
        return None;
    }
    Some(parse(&tokens))
}

fn parse(tokens: &[Token]) -> Result<CreateSink> {
    let (if_not_exists, name, mut i) = super::source::create_header(tokens)?;
    let into = if is_word(tokens.get(i), "into") {
        let table = super::source::identifier(tokens.get(i + 1))?;
        i += 2;
        let mut columns = Vec::new();
        if tokens.get(i) == Some(&Token::LParen) {
            loop {
                columns.push(super::source::identifier(tokens.get(i + 1))?);
                i += 2;
                match tokens.get(i) {
                    Some(Token::Comma) => continue,
                    Some(Token::RParen) => break,
                    _ => {
                        return Err(EddyError::syntax(
                            "expected , or ) in the sink's column list",
                        ));
                    }
                }
            }
            i += 1;
        }
        Some(SinkTarget { table, columns })
    } else {
        None
    };
    // The last `WITH (` at depth 0 starts the options.
    let mut depth = 0;
    let mut with_at = None;
    for (k, t) in tokens.iter().enumerate().skip(i) {
        match t {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            _ if depth == 0
                && is_word(Some(t), "with")
                && tokens.get(k + 1) == Some(&Token::LParen) =>
            {
                with_at = Some(k)
            }
            _ => {}
        }
    }
    // A sink into a table needs no options.
    let (with_at, (mut options, end)) = match (with_at, &into) {
        (Some(at), _) => (at, parse_options(tokens, at + 1)?),
        (None, Some(_)) => (tokens.len(), (BTreeMap::new(), tokens.len())),
        (None, None) => {
            return Err(EddyError::syntax(
                "CREATE SINK needs WITH (connector = '...')",
            ));
        }
    };
    let (format, encode_options, end) = super::source::parse_format_clause(tokens, end)?;
    if let Some((format, encode)) = format {
        options.insert("format".into(), format.to_ascii_lowercase());
        options.insert("encode".into(), encode.to_ascii_lowercase());
    }
    for (key, value) in encode_options {
        options.insert(format!("encode.{key}"), value);
    }
    if let Some(extra) = tokens.get(end) {
        return Err(EddyError::syntax(format!(
            "unexpected {extra} at the end of CREATE SINK"
        )));
    }
    let body: Vec<String> = tokens[i + 1..with_at]
        .iter()
        .map(|t| t.to_string())
        .collect();
    if is_word(tokens.get(i), "from") {
        let from = super::source::identifier(tokens.get(i + 1))?;
        if with_at != i + 2 {
            return Err(EddyError::syntax(
                "expected CREATE SINK name FROM relation WITH (...)",
            ));
        }
        return Ok(CreateSink {
            name,
            if_not_exists,
            query: format!("SELECT * FROM {from}"),
            from: Some(from),
            options,
            into,
        });
    }
    if !is_word(tokens.get(i), "as") || body.is_empty() {
        return Err(EddyError::syntax(
            "expected CREATE SINK name AS query WITH (...) or CREATE SINK name FROM relation WITH (...)",
        ));
    }
    Ok(CreateSink {
        name,
        if_not_exists,
        query: body.join(" "),
        from: None,
        options,
        into,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_forms() {
        let s = parse_create_sink("CREATE SINK out AS WITH x AS (SELECT 1 AS a) SELECT a FROM x WITH (connector = 'blackhole')")
            .unwrap()
            .unwrap();
        assert_eq!(s.name, "out");
        assert!(s.query.starts_with("WITH x AS"), "{}", s.query);
        assert_eq!(s.options["connector"], "blackhole");
        let s = parse_create_sink(
            "CREATE SINK IF NOT EXISTS out FROM mv WITH (connector = 'blackhole')",
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.from.as_deref(), Some("mv"));
        assert!(
            parse_create_sink("CREATE SINK out AS SELECT 1")
                .unwrap()
                .is_err()
        );
        assert!(parse_create_sink("SELECT 1").is_none());
        let s = parse_create_sink(
            "CREATE SINK f FROM mv WITH (connector = 'file', path = '/tmp/x') FORMAT PLAIN ENCODE CSV (delimiter = ';')",
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.options["format"], "plain");
        assert_eq!(s.options["encode"], "csv");
        assert_eq!(s.options["encode.delimiter"], ";");
        let s = parse_create_sink("CREATE SINK s INTO t (a, \"B\") AS SELECT x, y FROM u")
            .unwrap()
            .unwrap();
        assert_eq!(
            s.into,
            Some(SinkTarget {
                table: "t".into(),
                columns: vec!["a".into(), "B".into()]
            })
        );
        assert_eq!(s.query, "SELECT x , y FROM u");
        let s = parse_create_sink("CREATE SINK s INTO t FROM u WITH (type = 'append-only')")
            .unwrap()
            .unwrap();
        assert_eq!(s.from.as_deref(), Some("u"));
        assert_eq!(s.options["type"], "append-only");
    }
}
