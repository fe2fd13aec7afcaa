//! RisingWave's generated-column shorthand `CREATE TABLE t (v1 int, v2 int AS v1 + 1)`
//! (the expression in parentheses or not), which sqlparser does not parse: written out
//! as PostgreSQL's `v2 int GENERATED ALWAYS AS (v1 + 1) STORED`.

use super::{Cursor, is_word};
use crate::error::Result;
use datafusion::sql::sqlparser::tokenizer::{Token, Whitespace};

/// Column definition elements that start with these words are not columns.
const NOT_COLUMNS: [&str; 7] = [
    "WATERMARK",
    "PRIMARY",
    "CONSTRAINT",
    "UNIQUE",
    "CHECK",
    "FOREIGN",
    "INDEX",
];

/// `AS expr` at `start` inside a `CREATE TABLE`'s column list, after a column's type.
pub(super) fn generated_shorthand(
    tokens: &[Token],
    start: usize,
) -> Result<Option<(Vec<Token>, usize)>> {
    let mut c = Cursor::new(tokens, start);
    if !is_word(c.next(), "AS") || !in_column_definition(tokens, start) {
        return Ok(None);
    }
    let mut out = vec![
        Token::make_keyword("GENERATED"),
        Token::Whitespace(Whitespace::Space),
        Token::make_keyword("ALWAYS"),
        Token::Whitespace(Whitespace::Space),
    ];
    out.extend_from_slice(&tokens[start..c.at]);
    // The expression, in parentheses or not: up to the column's end.
    let expression = super::trim(c.until_separator(None));
    if expression.is_empty() {
        return Ok(None);
    }
    out.push(Token::LParen);
    out.extend(expression);
    out.push(Token::RParen);
    out.push(Token::Whitespace(Whitespace::Space));
    out.push(Token::make_keyword("STORED"));
    Ok(Some((out, c.at)))
}

/// Whether `at` is directly inside the column list of a `CREATE TABLE` statement, in a
/// column's definition after its name and type (not `GENERATED ALWAYS AS`, a watermark
/// or a constraint).
fn in_column_definition(tokens: &[Token], at: usize) -> bool {
    let statement_start = tokens[..at]
        .iter()
        .rposition(|t| *t == Token::SemiColon)
        .map_or(0, |i| i + 1);
    let mut words = tokens[statement_start..at]
        .iter()
        .filter(|t| matches!(t, Token::Word(_)));
    if !is_word(words.next(), "CREATE") || !is_word(words.next(), "TABLE") {
        return false;
    }
    let mut depth = 0usize;
    let mut element_start = None;
    for (i, t) in tokens.iter().enumerate().take(at).skip(statement_start) {
        match t {
            Token::LParen => {
                depth += 1;
                if depth == 1 {
                    element_start = Some(i + 1);
                }
            }
            Token::RParen => depth = depth.saturating_sub(1),
            Token::Comma if depth == 1 => element_start = Some(i + 1),
            _ => {}
        }
    }
    let Some(element_start) = element_start.filter(|_| depth == 1) else {
        return false;
    };
    let element: Vec<&Token> = tokens[element_start..at]
        .iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect();
    // A name and a type at least; the word before AS is not GENERATED ALWAYS's.
    element.len() >= 2
        && !NOT_COLUMNS
            .iter()
            .any(|w| is_word(element.first().copied(), w))
        && !is_word(element.last().copied(), "ALWAYS")
}
