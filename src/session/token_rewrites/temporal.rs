//! `JOIN t FOR SYSTEM_TIME AS OF PROCTIME() [AS] r ON ...`: a temporal (lookup) join, in
//! Flink's and RisingWave's syntax, which sqlparser's PostgreSQL dialect does not parse.
//!
//! The table reference becomes `(SELECT * FROM t WHERE <marker>()) AS r`: a derived table
//! over the table, filtered by a volatile function that is always true (so a batch
//! query joins with the table's current rows) and that the stream planner recognises to
//! plan the join as a lookup into the table ([`TEMPORAL_JOIN_MARKER`]). Only processing
//! time is supported, as in RisingWave: whatever follows `AS OF` is not evaluated.

use super::{Cursor, is_word, trim};
use crate::error::Result;
use crate::planner::TEMPORAL_JOIN_MARKER;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, Whitespace};

/// `name FOR SYSTEM_TIME AS OF expr [[AS] alias]` starting at `start`.
pub(super) fn for_system_time(
    tokens: &[Token],
    start: usize,
) -> Result<Option<(Vec<Token>, usize)>> {
    let mut c = Cursor::new(tokens, start);
    // The table's (possibly qualified) name: any word, keywords too (`version` is one),
    // since only `FOR SYSTEM_TIME AS OF` after it makes this a temporal join.
    let mut name = Vec::new();
    loop {
        match c.next() {
            Some(t @ Token::Word(_)) => name.push(t.clone()),
            _ => return Ok(None),
        }
        if c.peek() != Some(&Token::Period) {
            break;
        }
        name.push(c.next().expect("peeked").clone());
    }
    if !c.word("FOR") || !c.word("SYSTEM_TIME") || !c.word("AS") || !c.word("OF") {
        return Ok(None);
    }
    // The time: a name (`PROCTIME`, `o.proc_time`) and perhaps its arguments.
    if !matches!(c.next(), Some(Token::Word(_))) {
        return Ok(None);
    }
    while c.peek() == Some(&Token::Period) {
        c.next();
        c.next();
    }
    if c.peek() == Some(&Token::LParen) {
        c.next();
        c.until_separator(None);
        c.next();
    }
    let alias = if c.word("AS") {
        c.next().cloned()
    } else {
        match c.peek() {
            Some(t @ Token::Word(w))
                if w.quote_style.is_some() || w.keyword == Keyword::NoKeyword =>
            {
                c.next();
                Some(t.clone())
            }
            _ => None,
        }
    };
    let alias = alias.unwrap_or_else(|| name.last().expect("a name").clone());
    let space = || Token::Whitespace(Whitespace::Space);
    let mut out = vec![
        Token::LParen,
        Token::make_keyword("SELECT"),
        space(),
        Token::Mul,
        space(),
        Token::make_keyword("FROM"),
        space(),
    ];
    out.extend(trim(name));
    out.extend([
        space(),
        Token::make_keyword("WHERE"),
        space(),
        Token::make_word(TEMPORAL_JOIN_MARKER, None),
        Token::LParen,
        Token::RParen,
        Token::RParen,
        space(),
        Token::make_keyword("AS"),
        space(),
        alias,
    ]);
    debug_assert!(!is_word(out.first(), "FOR"));
    Ok(Some((out, c.at)))
}

#[cfg(test)]
mod tests {
    use super::super::rewrite;

    #[test]
    fn the_table_becomes_a_marked_derived_table() {
        assert_eq!(
            rewrite("SELECT * FROM s JOIN t FOR SYSTEM_TIME AS OF PROCTIME() ON s.k = t.k")
                .unwrap()
                .unwrap(),
            "SELECT * FROM s JOIN (SELECT * FROM t WHERE __eddy_temporal_join()) AS t ON s.k = t.k"
        );
        assert_eq!(
            rewrite("select * from o left join db.c for system_time as of o.proc_time as r on o.id = r.id").unwrap().unwrap(),
            "select * from o left join (SELECT * FROM db.c WHERE __eddy_temporal_join()) AS r on o.id = r.id"
        );
        assert_eq!(
            rewrite("SELECT 1 FROM s JOIN t FOR SYSTEM_TIME AS OF NOW() x ON true")
                .unwrap()
                .unwrap(),
            "SELECT 1 FROM s JOIN (SELECT * FROM t WHERE __eddy_temporal_join()) AS x ON true"
        );
        // A table named by a keyword.
        assert_eq!(
            rewrite("select * from stream left join version FOR SYSTEM_TIME AS OF PROCTIME() on id1 = id2")
                .unwrap()
                .unwrap(),
            "select * from stream left join (SELECT * FROM version WHERE __eddy_temporal_join()) AS version on id1 = id2"
        );
    }

    #[test]
    fn other_uses_of_the_words_are_left_alone() {
        assert_eq!(
            rewrite("SELECT 'FOR SYSTEM_TIME AS OF' FROM t").unwrap(),
            None
        );
    }
}
