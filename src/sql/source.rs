//! `CREATE SOURCE`, in RisingWave's syntax:
//!
//! ```sql
//! CREATE SOURCE [IF NOT EXISTS] name (
//!     column type, ...
//!     [, WATERMARK FOR column AS expression]
//! ) WITH (connector = 'datagen', fields.v.kind = 'sequence', ...)
//! [FORMAT PLAIN ENCODE JSON | CSV [( option = value, ... )]];
//! ```
//!
//! sqlparser knows no `CREATE SOURCE` and reads option keys only as single identifiers, so
//! the statement is split here: the column list goes to sqlparser as a `CREATE TABLE`,
//! the watermark and the options are read from tokens.

use crate::error::{EddyError, Result};
use datafusion::sql::sqlparser::ast::{ColumnDef, Statement};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq)]
pub struct CreateSource {
    pub name: String,
    pub if_not_exists: bool,
    pub columns: Vec<ColumnDef>,
    /// `WATERMARK FOR column AS expression`: the column and the expression's SQL text.
    pub watermark: Option<(String, String)>,
    /// `WITH (...)` options, keys lower-cased.
    pub options: BTreeMap<String, String>,
    /// `FORMAT x ENCODE y`, lower-cased.
    pub format: Option<(String, String)>,
    /// Options of the encoding, `ENCODE CSV (delimiter = ',')`.
    pub encode_options: BTreeMap<String, String>,
    /// Columns declared `AS PROCTIME()`: the processing time each row was read at.
    pub proctime_columns: Vec<String>,
    /// `INCLUDE key | partition | offset | timestamp | header 'name' [AS column]`: message
    /// metadata as extra columns (Kafka), as (what, header name, column).
    pub includes: Vec<Include>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Include {
    pub what: String,
    pub header: Option<String>,
    pub column: String,
}

impl Include {
    /// The column's type.
    pub fn sql_type(&self) -> &'static str {
        match self.what.as_str() {
            "partition" | "offset" => "VARCHAR",
            "timestamp" => "TIMESTAMPTZ",
            _ => "BYTEA",
        }
    }

    /// How the connector option records it: `what[:header]=column`.
    pub fn encode(&self) -> String {
        match &self.header {
            Some(h) => format!("{}:{h}={}", self.what, self.column),
            None => format!("{}={}", self.what, self.column),
        }
    }
}

/// `INCLUDE ...` clauses from token `i`; the includes and the next token's index.
fn parse_includes(tokens: &[Token], mut i: usize) -> Result<(Vec<Include>, usize)> {
    let mut includes = Vec::new();
    while is_word(tokens.get(i), "include") {
        let what = identifier(tokens.get(i + 1))?.to_ascii_lowercase();
        if !matches!(
            what.as_str(),
            "key" | "partition" | "offset" | "timestamp" | "header"
        ) {
            return Err(EddyError::syntax(format!(
                "INCLUDE {what} is not known; expected key, partition, offset, timestamp or header"
            )));
        }
        i += 2;
        let mut header = None;
        if what == "header" {
            match tokens.get(i) {
                Some(Token::SingleQuotedString(name)) => {
                    header = Some(name.clone());
                    i += 1;
                }
                _ => {
                    return Err(EddyError::syntax(
                        "expected INCLUDE header 'name' [AS column]",
                    ));
                }
            }
        }
        let column = if is_word(tokens.get(i), "as") {
            i += 2;
            identifier(tokens.get(i - 1))?
        } else {
            match &header {
                Some(h) => format!("_rw_kafka_header_{h}"),
                None => format!("_rw_kafka_{what}"),
            }
        };
        includes.push(Include {
            what,
            header,
            column,
        });
    }
    Ok((includes, i))
}

pub(crate) fn significant_tokens(sql: &str) -> Result<Vec<Token>> {
    let mut tokens: Vec<Token> = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize()
        .map_err(|e| EddyError::syntax(e.to_string()))?
        .into_iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect();
    while matches!(tokens.last(), Some(Token::SemiColon)) {
        tokens.pop();
    }
    Ok(tokens)
}

pub(crate) fn is_word(t: Option<&Token>, word: &str) -> bool {
    matches!(t, Some(Token::Word(w)) if w.value.eq_ignore_ascii_case(word))
}

pub(crate) fn identifier(t: Option<&Token>) -> Result<String> {
    match t {
        Some(Token::Word(w)) if w.quote_style.is_some() => Ok(w.value.clone()),
        Some(Token::Word(w)) => Ok(w.value.to_lowercase()),
        other => Err(EddyError::syntax(format!(
            "expected a name, found {}",
            other
                .map(|t| t.to_string())
                .unwrap_or_else(|| "end of input".into())
        ))),
    }
}

/// Reads `CREATE <kind> [IF NOT EXISTS] name` (the caller checked the first two words);
/// returns whether `IF NOT EXISTS` was given, the name, and the index after it.
pub(crate) fn create_header(tokens: &[Token]) -> Result<(bool, String, usize)> {
    let mut i = 2;
    let mut if_not_exists = false;
    if is_word(tokens.get(i), "if")
        && is_word(tokens.get(i + 1), "not")
        && is_word(tokens.get(i + 2), "exists")
    {
        if_not_exists = true;
        i += 3;
    }
    let name = identifier(tokens.get(i))?;
    Ok((if_not_exists, name, i + 1))
}

/// `Some` when `sql` is a `CREATE SOURCE` statement.
pub fn parse_create_source(sql: &str) -> Option<Result<CreateSource>> {
    let tokens = significant_tokens(sql).ok()?;
    if !(is_word(tokens.first(), "create") && is_word(tokens.get(1), "source")) {
        return None;
    }
    Some(parse_tokens(&tokens))
}

fn parse_tokens(tokens: &[Token]) -> Result<CreateSource> {
    let (if_not_exists, name, i) = create_header(tokens)?;

    // A shared CDC source names no columns: its tables do.
    if is_word(tokens.get(i), "with") && tokens.get(i + 1) == Some(&Token::LParen) {
        let (options, end) = parse_options(tokens, i + 1)?;
        let cdc = options
            .get("connector")
            .is_some_and(|c| c.eq_ignore_ascii_case("postgres-cdc"));
        if cdc && end == tokens.len() {
            return Ok(CreateSource {
                name,
                if_not_exists,
                columns: vec![],
                watermark: None,
                options,
                format: None,
                encode_options: BTreeMap::new(),
                proctime_columns: vec![],
                includes: vec![],
            });
        }
    }
    // The parenthesised column list (none: the columns come from the encoding's schema,
    // ENCODE AVRO; checked when the source is created).
    let (columns, watermark, proctime_columns, end) = if tokens.get(i) == Some(&Token::LParen) {
        parse_column_list(tokens, i)?
    } else {
        (vec![], None, vec![], i - 1)
    };

    let (includes, with_at) = parse_includes(tokens, end + 1)?;
    let mut columns = columns;
    for include in &includes {
        let sql = format!("CREATE TABLE t ({} {})", include.column, include.sql_type());
        if let Ok(mut parsed) = Parser::parse_sql(&PostgreSqlDialect {}, &sql)
            && let Some(Statement::CreateTable(ct)) = parsed.pop()
        {
            columns.extend(ct.columns);
        }
    }
    let end = with_at - 1;
    if !is_word(tokens.get(end + 1), "with") {
        return Err(EddyError::syntax(
            "CREATE SOURCE needs WITH (connector = '...', ...)",
        ));
    }
    let (options, i) = parse_options(tokens, end + 2)?;
    let (format, encode_options, i) = parse_format_clause(tokens, i)?;
    if let Some(extra) = tokens.get(i) {
        return Err(EddyError::syntax(format!(
            "unexpected {extra} at the end of CREATE SOURCE"
        )));
    }
    Ok(CreateSource {
        name,
        if_not_exists,
        columns,
        watermark,
        options,
        format,
        encode_options,
        proctime_columns,
        includes,
    })
}

/// The column list of `CREATE SOURCE` starting at token `i` (a `(`): the columns, the
/// `WATERMARK FOR` clause, the `AS PROCTIME()` columns, and the index of the closing `)`.
#[allow(clippy::type_complexity)]
fn parse_column_list(
    tokens: &[Token],
    i: usize,
) -> Result<(Vec<ColumnDef>, Option<(String, String)>, Vec<String>, usize)> {
    // The parenthesised column list, split at top-level commas.
    let mut depth = 0;
    let mut items: Vec<Vec<Token>> = vec![vec![]];
    let mut end = None;
    for (k, t) in tokens.iter().enumerate().skip(i) {
        match t {
            Token::LParen => {
                depth += 1;
                if depth == 1 {
                    continue;
                }
            }
            Token::RParen => {
                depth -= 1;
                if depth == 0 {
                    end = Some(k);
                    break;
                }
            }
            Token::Comma if depth == 1 => {
                items.push(vec![]);
                continue;
            }
            _ => {}
        }
        items
            .last_mut()
            .expect("items is never empty")
            .push(t.clone());
    }
    let end = end.ok_or_else(|| EddyError::syntax("unbalanced parentheses in CREATE SOURCE"))?;
    let mut watermark = None;
    let mut column_sql = Vec::new();
    let mut proctime_columns = Vec::new();
    for mut item in items {
        // `name type AS PROCTIME()`: a column the connector does not make.
        let n = item.len();
        if n >= 6
            && is_word(item.get(n - 4), "as")
            && is_word(item.get(n - 3), "proctime")
            && item[n - 2] == Token::LParen
            && item[n - 1] == Token::RParen
        {
            item.truncate(n - 4);
            proctime_columns.push(identifier(item.first())?);
        }
        if is_word(item.first(), "watermark") {
            if !is_word(item.get(1), "for") || !is_word(item.get(3), "as") {
                return Err(EddyError::syntax(
                    "expected WATERMARK FOR column AS expression",
                ));
            }
            if watermark.is_some() {
                return Err(EddyError::syntax("a source can have only one WATERMARK"));
            }
            let column = identifier(item.get(2))?;
            let expr: String = item[4..]
                .iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(" ");
            if expr.is_empty() {
                return Err(EddyError::syntax("WATERMARK needs an expression"));
            }
            watermark = Some((column, expr));
        } else if !item.is_empty() {
            column_sql.push(
                item.iter()
                    .map(|t| t.to_string())
                    .collect::<Vec<_>>()
                    .join(" "),
            );
        }
    }
    if column_sql.is_empty() {
        return Ok((vec![], watermark, proctime_columns, end));
    }
    let table_sql = format!("CREATE TABLE t ({})", column_sql.join(", "));
    let columns = match Parser::parse_sql(&PostgreSqlDialect {}, &table_sql)
        .map_err(|e| EddyError::syntax(e.to_string().replace("sql parser error: ", "")))?
        .pop()
    {
        Some(Statement::CreateTable(ct)) => {
            if !ct.constraints.is_empty() {
                return Err(EddyError::not_supported(
                    "constraints on a source are not supported",
                ));
            }
            ct.columns
        }
        _ => return Err(EddyError::syntax("invalid column list")),
    };
    Ok((columns, watermark, proctime_columns, end))
}

/// `[FORMAT <format> ENCODE <encoding> [(options)]]` at token `i`: the format and
/// encoding (lowercase as written), the encoding's options, and the next token's index.
#[allow(clippy::type_complexity)]
pub(crate) fn parse_format_clause(
    tokens: &[Token],
    mut i: usize,
) -> Result<(Option<(String, String)>, BTreeMap<String, String>, usize)> {
    let mut format = None;
    let mut encode_options = BTreeMap::new();
    if is_word(tokens.get(i), "format") {
        let f = identifier(tokens.get(i + 1))?;
        if !is_word(tokens.get(i + 2), "encode") {
            return Err(EddyError::syntax(
                "expected FORMAT <format> ENCODE <encoding>",
            ));
        }
        let e = identifier(tokens.get(i + 3))?;
        format = Some((f, e));
        i += 4;
        if tokens.get(i) == Some(&Token::LParen) {
            let (parsed, next) = parse_options(tokens, i)?;
            encode_options = parsed;
            i = next;
        }
    }
    Ok((format, encode_options, i))
}

/// `DROP SOURCE|SINK [IF EXISTS] name [, ...]`.
pub fn parse_drop(sql: &str) -> Option<Result<super::EddyStatement>> {
    let tokens = significant_tokens(sql).ok()?;
    let sink = is_word(tokens.get(1), "sink");
    if !(is_word(tokens.first(), "drop") && (is_word(tokens.get(1), "source") || sink)) {
        return None;
    }
    let parse = || -> Result<super::EddyStatement> {
        let mut i = 2;
        let mut if_exists = false;
        if is_word(tokens.get(i), "if") && is_word(tokens.get(i + 1), "exists") {
            if_exists = true;
            i += 2;
        }
        let mut names = Vec::new();
        let mut cascade = false;
        loop {
            names.push(identifier(tokens.get(i))?);
            i += 1;
            match tokens.get(i) {
                Some(Token::Comma) => i += 1,
                None => break,
                Some(t) if is_word(Some(t), "cascade") && tokens.get(i + 1).is_none() => {
                    cascade = true;
                    break;
                }
                Some(t) if is_word(Some(t), "restrict") && tokens.get(i + 1).is_none() => break,
                Some(t) => return Err(EddyError::syntax(format!("unexpected {t} in DROP"))),
            }
        }
        Ok(if sink {
            super::EddyStatement::DropSink {
                names,
                if_exists,
                cascade,
            }
        } else {
            super::EddyStatement::DropSource {
                names,
                if_exists,
                cascade,
            }
        })
    };
    Some(parse())
}

/// `( key = value, ... )` starting at `tokens[start]`; keys may be dotted
/// (`fields.v.kind`). Returns the options and the index after `)`.
pub(crate) fn parse_options(
    tokens: &[Token],
    start: usize,
) -> Result<(BTreeMap<String, String>, usize)> {
    if tokens.get(start) != Some(&Token::LParen) {
        return Err(EddyError::syntax("expected ( after WITH"));
    }
    let mut options = BTreeMap::new();
    let mut i = start + 1;
    loop {
        if tokens.get(i) == Some(&Token::RParen) {
            return Ok((options, i + 1));
        }
        let mut key = String::new();
        while let Some(t) = tokens.get(i) {
            match t {
                Token::Eq => break,
                Token::Word(w) => key.push_str(&w.value.to_lowercase()),
                Token::Period => key.push('.'),
                Token::Number(n, _) => key.push_str(n),
                // RisingWave's older form: WITH ('appendonly' = true).
                Token::SingleQuotedString(s) => key.push_str(&s.to_lowercase()),
                other => {
                    return Err(EddyError::syntax(format!(
                        "unexpected {other} in option name"
                    )));
                }
            }
            i += 1;
        }
        if tokens.get(i) != Some(&Token::Eq) || key.is_empty() {
            return Err(EddyError::syntax("expected option = value"));
        }
        i += 1;
        let value = match tokens.get(i) {
            Some(Token::SingleQuotedString(s)) => s.clone(),
            Some(Token::Number(n, _)) => n.clone(),
            Some(Token::Minus) => match tokens.get(i + 1) {
                Some(Token::Number(n, _)) => {
                    i += 1;
                    format!("-{n}")
                }
                _ => return Err(EddyError::syntax("expected a number after -")),
            },
            Some(Token::Word(w)) => w.value.clone(),
            other => {
                return Err(EddyError::syntax(format!(
                    "expected a value for option {key}, found {}",
                    other
                        .map(|t| t.to_string())
                        .unwrap_or_else(|| "end of input".into())
                )));
            }
        };
        if options.insert(key.clone(), value).is_some() {
            return Err(EddyError::syntax(format!("option {key} given twice")));
        }
        i += 1;
        match tokens.get(i) {
            Some(Token::Comma) => i += 1,
            Some(Token::RParen) => return Ok((options, i + 1)),
            other => {
                return Err(EddyError::syntax(format!(
                    "expected , or ) in options, found {}",
                    other
                        .map(|t| t.to_string())
                        .unwrap_or_else(|| "end of input".into())
                )));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_risingwave_source_syntax() {
        let s = parse_create_source(
            "CREATE SOURCE IF NOT EXISTS Bids (auction BIGINT, price INT, ts TIMESTAMP, \
             WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) \
             WITH (connector = 'datagen', fields.price.kind = 'random', fields.price.min = -5, datagen.rows.per.second = 10) \
             FORMAT PLAIN ENCODE CSV (delimiter = ';');",
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.name, "bids");
        assert!(s.if_not_exists);
        assert_eq!(s.columns.len(), 3);
        assert_eq!(s.watermark.as_ref().unwrap().0, "ts");
        assert!(s.watermark.as_ref().unwrap().1.contains("INTERVAL"));
        assert_eq!(s.options["connector"], "datagen");
        assert_eq!(s.options["fields.price.min"], "-5");
        assert_eq!(s.options["datagen.rows.per.second"], "10");
        assert_eq!(s.format, Some(("plain".into(), "csv".into())));
        assert_eq!(s.encode_options["delimiter"], ";");
    }

    #[test]
    fn rejects_malformed_sources() {
        assert!(parse_create_source("SELECT 1").is_none());
        // No column list parses (ENCODE AVRO takes its columns from the registry); the
        // other encodings are refused when the source is created (connectors.slt).
        assert!(
            parse_create_source("CREATE SOURCE s WITH (connector = 'x')")
                .unwrap()
                .unwrap()
                .columns
                .is_empty()
        );
        assert!(
            parse_create_source("CREATE SOURCE s (a INT)")
                .unwrap()
                .is_err()
        );
        assert!(
            parse_create_source("CREATE SOURCE s (a INT) WITH (connector)")
                .unwrap()
                .is_err()
        );
        assert!(
            parse_create_source("CREATE SOURCE s (a INT) WITH (a = 1, a = 2)")
                .unwrap()
                .is_err()
        );
    }
}
