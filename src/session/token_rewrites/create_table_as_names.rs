//! PostgreSQL's `CREATE TABLE t (a, b) AS query` (column names without types), which
//! sqlparser does not parse: written as `CREATE TABLE t AS SELECT * FROM (query) AS
//! __eddy_ctas(a, b)`, naming the query's columns.

use super::{Cursor, is_word};
use crate::error::Result;
use datafusion::sql::sqlparser::tokenizer::{Token, Whitespace};

/// `CREATE TABLE [IF NOT EXISTS] name (ident, ...) AS query` starting at `start`.
pub(super) fn names_only_column_list(
    tokens: &[Token],
    start: usize,
) -> Result<Option<(Vec<Token>, usize)>> {
    let mut c = Cursor::new(tokens, start);
    if !is_word(c.next(), "CREATE") || !c.word("TABLE") {
        return Ok(None);
    }
    if c.word("IF") && !(c.word("NOT") && c.word("EXISTS")) {
        return Ok(None);
    }
    // The table's name: words joined by periods.
    loop {
        if !matches!(c.next(), Some(Token::Word(_))) {
            return Ok(None);
        }
        if c.peek() != Some(&Token::Period) {
            break;
        }
        c.next();
    }
    let header_end = c.at;
    if !c.token(&Token::LParen) {
        return Ok(None);
    }
    let mut names = Vec::new();
    loop {
        match c.next() {
            Some(name @ Token::Word(_)) => names.push(name.clone()),
            _ => return Ok(None),
        }
        match c.next() {
            Some(Token::Comma) => continue,
            Some(Token::RParen) => break,
            _ => return Ok(None), // a name followed by a type: an ordinary column list
        }
    }
    if !c.word("AS") {
        return Ok(None);
    }
    // The query runs to the statement's end.
    let query_start = c.at;
    let query_end = tokens[query_start..]
        .iter()
        .position(|t| *t == Token::SemiColon)
        .map_or(tokens.len(), |i| query_start + i);
    let space = Token::Whitespace(Whitespace::Space);
    let mut out = tokens[start..header_end].to_vec();
    out.extend([
        space.clone(),
        Token::make_keyword("AS"),
        space.clone(),
        Token::make_keyword("SELECT"),
        space.clone(),
        Token::Mul,
        space.clone(),
        Token::make_keyword("FROM"),
        space.clone(),
        Token::LParen,
    ]);
    out.extend_from_slice(&tokens[query_start..query_end]);
    out.extend([
        Token::RParen,
        space.clone(),
        Token::make_keyword("AS"),
        space,
        Token::make_word("__eddy_ctas", None),
        Token::LParen,
    ]);
    for (i, name) in names.into_iter().enumerate() {
        if i > 0 {
            out.push(Token::Comma);
        }
        out.push(name);
    }
    out.push(Token::RParen);
    Ok(Some((out, query_end)))
}
