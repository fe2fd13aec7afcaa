//! `UNION | INTERSECT | EXCEPT [ALL | DISTINCT] CORRESPONDING [BY (c, ...)]` (SQL
//! standard, RisingWave): the two sides are matched by column name, not position.
//! sqlparser does not parse it, so the `CORRESPONDING` clause is taken out here and its
//! columns carried to the AST as a marker call, the first select item of the right
//! side: `... UNION ALL SELECT eddy_corresponding('c,d'), ...` (`''` without `BY`).
//! [`crate::session::corresponding`] then projects both sides onto the columns.

use super::{Cursor, is_word};
use crate::error::{EddyError, Result};
use datafusion::sql::sqlparser::tokenizer::{Token, Whitespace};

/// The marker function; only ever the first select item of a set operation's right side.
pub const CORRESPONDING_MARKER: &str = "eddy_corresponding";

/// A set operator followed by `CORRESPONDING` at `start`.
pub(super) fn corresponding(tokens: &[Token], start: usize) -> Result<Option<(Vec<Token>, usize)>> {
    if !["UNION", "INTERSECT", "EXCEPT"]
        .iter()
        .any(|op| is_word(tokens.get(start), op))
    {
        return Ok(None);
    }
    let mut c = Cursor::new(tokens, start + 1);
    let mut out = vec![tokens[start].clone()];
    for quantifier in ["ALL", "DISTINCT"] {
        if c.word(quantifier) {
            out.push(Token::Whitespace(Whitespace::Space));
            out.push(Token::make_keyword(quantifier));
        }
    }
    if !c.word("CORRESPONDING") {
        return Ok(None);
    }
    let mut columns = Vec::new();
    if c.word("BY") {
        if !c.token(&Token::LParen) {
            return Err(EddyError::syntax(
                "CORRESPONDING BY needs a column list: BY (c, ...)",
            ));
        }
        loop {
            match c.next() {
                Some(Token::Word(w)) => columns.push(if w.quote_style.is_some() {
                    w.value.clone()
                } else {
                    w.value.to_lowercase()
                }),
                _ => return Err(EddyError::syntax("CORRESPONDING BY lists column names")),
            }
            match c.next() {
                Some(Token::Comma) => continue,
                Some(Token::RParen) => break,
                _ => return Err(EddyError::syntax("CORRESPONDING BY lists column names")),
            }
        }
    }
    // The right side: a SELECT, perhaps in parentheses.
    out.push(Token::Whitespace(Whitespace::Space));
    while c.peek() == Some(&Token::LParen) {
        out.push(c.next().expect("peeked").clone());
    }
    if !c.word("SELECT") {
        return Err(EddyError::not_supported(
            "CORRESPONDING with a right side that is not a SELECT",
        ));
    }
    out.push(Token::make_keyword("SELECT"));
    out.push(Token::Whitespace(Whitespace::Space));
    for quantifier in ["ALL", "DISTINCT"] {
        if c.word(quantifier) {
            if is_word(c.peek(), "ON") {
                return Err(EddyError::not_supported(
                    "CORRESPONDING with a right side that is SELECT DISTINCT ON",
                ));
            }
            out.push(Token::make_keyword(quantifier));
            out.push(Token::Whitespace(Whitespace::Space));
        }
    }
    out.push(Token::make_word(CORRESPONDING_MARKER, None));
    out.push(Token::LParen);
    out.push(Token::SingleQuotedString(columns.join(",")));
    out.push(Token::RParen);
    out.push(Token::Comma);
    out.push(Token::Whitespace(Whitespace::Space));
    Ok(Some((out, c.at)))
}
