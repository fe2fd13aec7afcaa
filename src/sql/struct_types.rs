//! `struct<name type, ...>`: RisingWave's struct type, which sqlparser's PostgreSQL
//! dialect does not parse. Before any statement is parsed (Eddy's own, such as
//! `CREATE SOURCE`, and those sqlparser reads), each such type becomes one quoted name:
//! a custom type that `catalog::types::SqlType::parse_struct` reads back, so it can
//! stand wherever a type can (column definitions, casts, `struct<...>[]`).

use crate::error::{EddyError, Result};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer, Word};

/// The statement with its struct types rewritten, or `None` when it has none (or does
/// not tokenize: the parser then reports the error).
pub fn rewrite(sql: &str) -> Result<Option<String>> {
    if !sql.to_ascii_lowercase().contains("struct") {
        return Ok(None);
    }
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize() else {
        return Ok(None);
    };
    let mut out: Vec<Token> = Vec::with_capacity(tokens.len());
    let mut i = 0;
    let mut changed = false;
    while i < tokens.len() {
        if let Some((name, end)) = struct_type(&tokens, i)? {
            out.push(name);
            i = end;
            changed = true;
        } else {
            out.push(tokens[i].clone());
            i += 1;
        }
    }
    Ok(changed.then(|| out.iter().map(Token::to_string).collect()))
}

/// `struct<...>` starting at `start`: the quoted name standing for it (its text,
/// normalized) and the index after it.
fn struct_type(tokens: &[Token], start: usize) -> Result<Option<(Token, usize)>> {
    let is_struct = matches!(&tokens[start], Token::Word(w)
        if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("struct"));
    let mut at = start + 1;
    while matches!(tokens.get(at), Some(Token::Whitespace(_))) {
        at += 1;
    }
    if !is_struct || tokens.get(at) != Some(&Token::Lt) {
        return Ok(None);
    }
    at += 1;
    let mut depth = 1i32;
    let mut text = String::from("struct<");
    while depth > 0 {
        let Some(token) = tokens.get(at) else {
            return Err(EddyError::syntax("unterminated struct<...> type"));
        };
        at += 1;
        match token {
            Token::Lt => depth += 1,
            // `>>` and `>>>` close several at once.
            other => {
                let text = other.to_string();
                if !text.is_empty() && text.chars().all(|c| c == '>') {
                    depth -= text.len() as i32;
                }
            }
        }
        if depth < 0 {
            return Err(EddyError::syntax("unbalanced '>' in a struct<...> type"));
        }
        match token {
            Token::Whitespace(_) => {
                if !text.ends_with([' ', '<', ',']) {
                    text.push(' ');
                }
            }
            Token::Comma => text.push_str(", "),
            Token::Word(w) if w.quote_style.is_none() => {
                text.push_str(&w.value.to_ascii_lowercase())
            }
            other => text.push_str(&other.to_string()),
        }
    }
    let text = text
        .replace(" >", ">")
        .replace(" <", "<")
        .replace(", ,", ",");
    Ok(Some((
        Token::Word(Word {
            value: text,
            quote_style: Some('"'),
            keyword: Keyword::NoKeyword,
        }),
        at,
    )))
}

#[cfg(test)]
mod tests {
    #[test]
    fn nested_structs_become_one_type_name() {
        let sql = "create table t(v2 struct<v1 int, v2 struct<v1 int, v2 struct <v1 int, v2 int>>>, v1 int)";
        let rewritten = super::rewrite(sql).unwrap().unwrap();
        assert_eq!(
            rewritten,
            "create table t(v2 \"struct<v1 int, v2 struct<v1 int, v2 struct<v1 int, v2 int>>>\", v1 int)"
        );
    }
}
