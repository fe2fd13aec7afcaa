//! Flink's windowing table-valued functions, so that Flink SQL runs unchanged:
//!
//! ```sql
//! FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
//! FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '5' SECOND, INTERVAL '10' SECOND))
//! ```
//!
//! sqlparser cannot parse `TABLE t` or `DESCRIPTOR(c)` as function arguments, so the
//! call is rewritten on the token stream, before parsing, into the window function
//! Eddy plans (RisingWave's form, `TUMBLE(bid, date_time, INTERVAL '10' SECOND)`), under
//! a name that also adds Flink's `window_time` column (the window's end less a
//! millisecond). Working on tokens leaves strings, comments and quoted names as they
//! were. `CUMULATE(TABLE t, DESCRIPTOR(ts), step, size)` becomes `CUMULATE(t, ts, step,
//! size)`; `SESSION(TABLE t [PARTITION BY k], DESCRIPTOR(ts), gap)` becomes
//! `__eddy_flink_session(t, ts, gap, k)`.

use super::{Cursor, is_word, trim};
use crate::error::{EddyError, Result};
use datafusion::sql::sqlparser::tokenizer::{Token, Whitespace};

/// The window functions Flink's windows become (planned by `planner::window_tvf`).
pub use crate::planner::window_tvf::{FLINK_CUMULATE, FLINK_HOP, FLINK_SESSION, FLINK_TUMBLE};

/// A Flink window call starting at `start` (`TABLE(<fn>(TABLE ...`): its replacement and
/// the index after it.
pub(super) fn window_call(tokens: &[Token], start: usize) -> Result<Option<(Vec<Token>, usize)>> {
    let mut c = Cursor::new(tokens, start);
    if !is_word(c.next(), "TABLE") || !c.token(&Token::LParen) {
        return Ok(None);
    }
    let function = match c.next() {
        Some(Token::Word(w)) if w.quote_style.is_none() => w.value.to_ascii_uppercase(),
        _ => return Ok(None),
    };
    if !matches!(function.as_str(), "TUMBLE" | "HOP" | "CUMULATE" | "SESSION")
        || !c.token(&Token::LParen)
        || !is_word(c.peek(), "TABLE")
    {
        return Ok(None);
    }
    c.next();
    let malformed = || {
        EddyError::syntax(format!(
            "{function} expects (TABLE <relation>, DESCRIPTOR(<time column>), <interval>, ...)"
        ))
    };
    let relation = c.until_separator(Some("PARTITION"));
    // SESSION's partition keys: `PARTITION BY a, b` or `PARTITION BY (a, b)`.
    let mut partition_keys = Vec::new();
    if c.word("PARTITION") {
        if function != "SESSION" || !c.word("BY") {
            return Err(malformed());
        }
        while !is_word(c.peek(), "DESCRIPTOR") {
            match c.peek() {
                Some(Token::LParen | Token::RParen | Token::Comma) => {
                    c.next();
                }
                Some(_) => {
                    let key = c.until_separator(Some("DESCRIPTOR"));
                    if key.is_empty() {
                        return Err(malformed());
                    }
                    partition_keys.push(key);
                }
                None => return Err(malformed()),
            }
        }
    } else if !c.token(&Token::Comma) {
        return Err(malformed());
    }
    if !c.word("DESCRIPTOR") || !c.token(&Token::LParen) {
        return Err(malformed());
    }
    let column = c.until_separator(None);
    if !c.token(&Token::RParen) {
        return Err(malformed());
    }
    let mut arguments = Vec::new();
    while c.peek() == Some(&Token::Comma) {
        c.next();
        arguments.push(c.until_separator(None));
    }
    if !c.token(&Token::RParen) || !c.token(&Token::RParen) {
        return Err(malformed());
    }
    let name = match function.as_str() {
        "TUMBLE" => FLINK_TUMBLE,
        "HOP" => FLINK_HOP,
        "CUMULATE" => FLINK_CUMULATE,
        _ => FLINK_SESSION,
    };
    let mut out = vec![Token::make_word(name, None), Token::LParen];
    let parts = [relation, column]
        .into_iter()
        .chain(arguments)
        .chain(partition_keys);
    for (i, part) in parts.enumerate() {
        if i > 0 {
            out.extend([Token::Comma, Token::Whitespace(Whitespace::Space)]);
        }
        out.extend(trim(part));
    }
    out.push(Token::RParen);
    Ok(Some((out, c.at)))
}

#[cfg(test)]
mod tests {
    use super::super::rewrite;

    #[test]
    fn flink_calls_become_window_functions() {
        let sql = "SELECT window_start, count(*) FROM TABLE(\n  TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) GROUP BY 1";
        assert_eq!(
            rewrite(sql).unwrap().unwrap(),
            "SELECT window_start, count(*) FROM __eddy_flink_tumble(bid, date_time, INTERVAL '10' SECOND) GROUP BY 1"
        );
        let sql = "select * from table(hop(table s.bid, descriptor(\"ts\"), interval '2' second, interval '4' second)) as w";
        assert_eq!(
            rewrite(sql).unwrap().unwrap(),
            "select * from __eddy_flink_hop(s.bid, \"ts\", interval '2' second, interval '4' second) as w"
        );
    }

    #[test]
    fn other_statements_are_left_alone() {
        assert_eq!(
            rewrite("SELECT 'TABLE(TUMBLE(TABLE x' AS descriptor").unwrap(),
            None
        );
        assert_eq!(rewrite("SELECT 1").unwrap(), None);
        assert_eq!(
            rewrite("SELECT * FROM TUMBLE(bid, date_time, INTERVAL '1' SECOND)").unwrap(),
            None
        );
    }

    #[test]
    fn unsupported_and_malformed_calls_are_errors() {
        let session = "SELECT * FROM TABLE(SESSION(TABLE bid PARTITION BY (bidder, auction), DESCRIPTOR(date_time), INTERVAL '10' SECOND))";
        assert_eq!(
            rewrite(session).unwrap().unwrap(),
            "SELECT * FROM __eddy_flink_session(bid, date_time, INTERVAL '10' SECOND, bidder, auction)"
        );
        let malformed = "SELECT * FROM TABLE(TUMBLE(TABLE bid DESCRIPTOR(date_time)))";
        assert!(
            rewrite(malformed)
                .unwrap_err()
                .to_string()
                .contains("TUMBLE expects (TABLE <relation>, DESCRIPTOR(<time column>)")
        );
    }
}
