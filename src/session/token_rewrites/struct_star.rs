//! `(v).*`: every field of a struct as its own column (PostgreSQL's and RisingWave's
//! composite-value expansion), which sqlparser does not parse. It becomes the marker call
//! `eddy_struct_star(v)`, which [`crate::session::struct_star`] expands in the select list
//! once the struct's fields are known from the catalog.

use datafusion::sql::sqlparser::tokenizer::Token;

use crate::error::Result;

/// The marker function standing for `(expr).*` in a select list.
pub const STRUCT_STAR_MARKER: &str = "eddy_struct_star";

/// `( ... ).*` starting at `start`.
pub(super) fn struct_star(tokens: &[Token], start: usize) -> Result<Option<(Vec<Token>, usize)>> {
    if tokens.get(start) != Some(&Token::LParen) {
        return Ok(None);
    }
    let mut depth = 0usize;
    let mut close = start;
    loop {
        match tokens.get(close) {
            Some(Token::LParen) => depth += 1,
            Some(Token::RParen) => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            None => return Ok(None),
            _ => {}
        }
        close += 1;
    }
    if tokens.get(close + 1) != Some(&Token::Period) || tokens.get(close + 2) != Some(&Token::Mul) {
        return Ok(None);
    }
    let mut out = vec![Token::make_word(STRUCT_STAR_MARKER, None), Token::LParen];
    out.extend_from_slice(&tokens[start + 1..close]);
    out.push(Token::RParen);
    Ok(Some((out, close + 3)))
}
