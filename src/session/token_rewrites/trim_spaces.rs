//! `trim(BOTH FROM s)`, `trim(LEADING FROM s)`, `trim(TRAILING FROM s)` and `trim(FROM s)`:
//! PostgreSQL's spellings without the characters to trim (spaces), which sqlparser does
//! not parse. The characters are written out: `trim(BOTH ' ' FROM s)`. PostgreSQL also
//! takes them after the string, `trim(BOTH FROM s, 'xy')`: that becomes
//! `trim(BOTH 'xy' FROM s)`.

use super::{Cursor, is_word, trim};
use crate::error::Result;
use datafusion::sql::sqlparser::tokenizer::{Token, Whitespace};

/// `TRIM ( [BOTH | LEADING | TRAILING] FROM` starting at `start`: the same with `' '`
/// before `FROM`.
pub(super) fn trim_without_characters(
    tokens: &[Token],
    start: usize,
) -> Result<Option<(Vec<Token>, usize)>> {
    let mut c = Cursor::new(tokens, start);
    if !is_word(c.next(), "TRIM") || c.next() != Some(&Token::LParen) {
        return Ok(None);
    }
    let mut out = tokens[start..c.at].to_vec();
    for side in ["BOTH", "LEADING", "TRAILING"] {
        if is_word(c.peek(), side) {
            out.push(c.next().expect("peeked").clone());
            out.push(Token::Whitespace(Whitespace::Space));
            break;
        }
    }
    if !is_word(c.peek(), "FROM") {
        return Ok(None);
    }
    let from = c.next().expect("peeked").clone();
    let source = trim(c.until_separator(None));
    // `FROM source, characters`: the characters go before `FROM`.
    let characters = if c.peek() == Some(&Token::Comma) {
        c.next();
        let characters = trim(c.until_separator(None));
        if characters.is_empty() || c.peek() != Some(&Token::RParen) {
            return Ok(None);
        }
        characters
    } else {
        vec![Token::SingleQuotedString(" ".into())]
    };
    out.extend(characters);
    out.push(Token::Whitespace(Whitespace::Space));
    out.push(from);
    out.push(Token::Whitespace(Whitespace::Space));
    out.extend(source);
    Ok(Some((out, c.at)))
}
