//! RisingWave's changelog CTE, `WITH sub AS changelog FROM t`, which sqlparser cannot
//! parse: written as `sub AS (SELECT * FROM eddy_changelog('t', with_row_id))`, the table
//! function the stream planner lowers to the changes of `t` as rows
//! (`planner::changelog`). The hidden `_changelog_row_id` column is added only when the
//! statement names it, so `SELECT *` shows the relation's columns and `changelog_op`, as
//! in RisingWave.

use super::Cursor;
use crate::error::Result;
use crate::planner::changelog::{FUNCTION, ROW_ID_COLUMN};
use datafusion::sql::sqlparser::tokenizer::{Token, Whitespace};

/// `name AS changelog FROM relation` starting at `start`.
pub(super) fn changelog_cte(tokens: &[Token], start: usize) -> Result<Option<(Vec<Token>, usize)>> {
    let mut c = Cursor::new(tokens, start);
    let Some(name @ Token::Word(_)) = c.next() else {
        return Ok(None);
    };
    if !(c.word("AS") && c.word("CHANGELOG") && c.word("FROM")) {
        return Ok(None);
    }
    // The relation's name: words joined by periods; only its last part names it (the
    // one schema is `public`).
    let relation = loop {
        let Some(Token::Word(part)) = c.next() else {
            return Ok(None);
        };
        if c.peek() != Some(&Token::Period) {
            break part.clone();
        }
        c.next();
    };
    let relation_name = if relation.quote_style.is_some() {
        relation.value
    } else {
        relation.value.to_lowercase()
    };
    let with_row_id = tokens
        .iter()
        .any(|t| matches!(t, Token::Word(w) if w.value.eq_ignore_ascii_case(ROW_ID_COLUMN)));
    let space = Token::Whitespace(Whitespace::Space);
    let out = vec![
        name.clone(),
        space.clone(),
        Token::make_keyword("AS"),
        space.clone(),
        Token::LParen,
        Token::make_keyword("SELECT"),
        space.clone(),
        Token::Mul,
        space.clone(),
        Token::make_keyword("FROM"),
        space.clone(),
        Token::make_word(FUNCTION, None),
        Token::LParen,
        Token::SingleQuotedString(relation_name),
        Token::Comma,
        space,
        Token::make_keyword(if with_row_id { "TRUE" } else { "FALSE" }),
        Token::RParen,
        Token::RParen,
    ];
    Ok(Some((out, c.at)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn changelog_ctes_read_the_table_function() {
        assert_eq!(
            super::super::rewrite("CREATE MATERIALIZED VIEW mv AS WITH sub AS changelog FROM public.t1 SELECT * FROM sub")
                .unwrap()
                .unwrap(),
            "CREATE MATERIALIZED VIEW mv AS WITH sub AS (SELECT * FROM eddy_changelog('t1', FALSE)) SELECT * FROM sub"
        );
        assert_eq!(
            super::super::rewrite("WITH s1 AS changelog FROM T1, s2 AS changelog FROM t2 SELECT s1._changelog_row_id FROM s1, s2")
                .unwrap()
                .unwrap(),
            "WITH s1 AS (SELECT * FROM eddy_changelog('t1', TRUE)), s2 AS (SELECT * FROM eddy_changelog('t2', TRUE)) SELECT s1._changelog_row_id FROM s1, s2"
        );
    }
}
