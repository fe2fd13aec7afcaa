//! A comma after the last column of `CREATE TABLE` or `CREATE SOURCE`
//! (`CREATE TABLE t (a int, b float,)`), which RisingWave accepts and sqlparser does not:
//! the comma is dropped.

use super::{Cursor, is_word};
use crate::error::Result;
use datafusion::sql::sqlparser::tokenizer::Token;

/// `CREATE [OR REPLACE] TABLE|SOURCE [IF NOT EXISTS] name (..., )` starting at `start`:
/// the tokens up to the column list's closing parenthesis, without the trailing comma.
pub(super) fn column_list_trailing_comma(
    tokens: &[Token],
    start: usize,
) -> Result<Option<(Vec<Token>, usize)>> {
    let mut c = Cursor::new(tokens, start);
    if !is_word(c.next(), "CREATE") {
        return Ok(None);
    }
    if c.word("OR") && !c.word("REPLACE") {
        return Ok(None);
    }
    if !(c.word("TABLE") || c.word("SOURCE")) {
        return Ok(None);
    }
    // Up to the column list's opening parenthesis: the name (and `IF NOT EXISTS`).
    loop {
        match c.next() {
            Some(Token::LParen) => break,
            Some(Token::Word(_) | Token::Period) => {}
            _ => return Ok(None),
        }
    }
    let mut depth = 1usize;
    let mut last_comma = None;
    while let Some(token) = tokens.get(c.at) {
        match token {
            Token::LParen => depth += 1,
            Token::RParen if depth == 1 => break,
            Token::RParen => depth -= 1,
            Token::Comma if depth == 1 => last_comma = Some(c.at),
            Token::Whitespace(_) => {
                c.at += 1;
                continue;
            }
            _ => {}
        }
        if !matches!(token, Token::Comma) {
            last_comma = None;
        }
        c.at += 1;
    }
    let (Some(comma), Some(Token::RParen)) = (last_comma, tokens.get(c.at)) else {
        return Ok(None);
    };
    let mut out = tokens[start..comma].to_vec();
    out.extend_from_slice(&tokens[comma + 1..=c.at]);
    Ok(Some((out, c.at + 1)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn drops_only_a_comma_before_the_closing_parenthesis() {
        let rewritten =
            super::super::rewrite("CREATE TABLE t (a int, b numeric(10, 2),\n) APPEND ONLY")
                .unwrap()
                .unwrap();
        assert_eq!(
            rewritten,
            "CREATE TABLE t (a int, b numeric(10, 2)\n) APPEND ONLY"
        );
        assert_eq!(
            super::super::rewrite("CREATE TABLE t (a int, b int)").unwrap(),
            None
        );
        assert_eq!(
            super::super::rewrite(
                "CREATE SOURCE IF NOT EXISTS s (a int,) WITH (connector = 'datagen')"
            )
            .unwrap()
            .unwrap(),
            "CREATE SOURCE IF NOT EXISTS s (a int) WITH (connector = 'datagen')"
        );
    }
}
