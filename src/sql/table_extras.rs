//! RisingWave's additions to `CREATE TABLE` that sqlparser does not read:
//! `WATERMARK FOR column AS expression` among the columns and a final `APPEND ONLY`.
//! They are cut out here; the rest goes to sqlparser as usual.

use super::source::{identifier, is_word, significant_tokens};
use crate::error::{EddyError, Result};
use datafusion::sql::sqlparser::tokenizer::Token;

#[derive(Debug, Clone, PartialEq)]
pub struct CreateTableExtras {
    /// The statement without the extra clauses.
    pub statement: String,
    /// (column, expression) of `WATERMARK FOR`.
    pub watermark: Option<(String, String)>,
    pub append_only: bool,
    /// The statement as written (for `SHOW CREATE TABLE`).
    pub original: String,
}

fn join(tokens: &[Token]) -> String {
    tokens
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `Some` when `sql` is a `CREATE TABLE` with a watermark or `APPEND ONLY`.
pub fn parse(sql: &str) -> Option<Result<CreateTableExtras>> {
    let mut tokens = significant_tokens(sql).ok()?;
    if !(is_word(tokens.first(), "create") && is_word(tokens.get(1), "table")) {
        return None;
    }
    let n = tokens.len();
    let append_only =
        n >= 2 && is_word(tokens.get(n - 2), "append") && is_word(tokens.get(n - 1), "only");
    if append_only {
        tokens.truncate(n - 2);
    }
    // The column list: the first parenthesis, split at its top-level commas.
    let open = tokens.iter().position(|t| *t == Token::LParen)?;
    let mut depth = 0;
    let mut items: Vec<(usize, usize)> = Vec::new();
    let mut item_start = open + 1;
    let mut close = None;
    for (k, t) in tokens.iter().enumerate().skip(open) {
        match t {
            Token::LParen => depth += 1,
            Token::RParen => {
                depth -= 1;
                if depth == 0 {
                    items.push((item_start, k));
                    close = Some(k);
                    break;
                }
            }
            Token::Comma if depth == 1 => {
                items.push((item_start, k));
                item_start = k + 1;
            }
            _ => {}
        }
    }
    let close = close?;
    let watermark_items: Vec<&(usize, usize)> = items
        .iter()
        .filter(|(from, _)| is_word(tokens.get(*from), "watermark"))
        .collect();
    if watermark_items.is_empty() && !append_only {
        return None;
    }
    let parse = || -> Result<CreateTableExtras> {
        if watermark_items.len() > 1 {
            return Err(EddyError::syntax("a table can have only one WATERMARK"));
        }
        let watermark = match watermark_items.first() {
            Some((from, to)) => {
                let item = &tokens[*from..*to];
                if !is_word(item.get(1), "for") || !is_word(item.get(3), "as") || item.len() < 5 {
                    return Err(EddyError::syntax(
                        "expected WATERMARK FOR column AS expression",
                    ));
                }
                Some((identifier(item.get(2))?, join(&item[4..])))
            }
            None => None,
        };
        let columns: Vec<String> = items
            .iter()
            .filter(|(from, _)| !is_word(tokens.get(*from), "watermark"))
            .map(|(from, to)| join(&tokens[*from..*to]))
            .collect();
        let statement = format!(
            "{} ({}) {}",
            join(&tokens[..open]),
            columns.join(", "),
            join(&tokens[close + 1..])
        );
        Ok(CreateTableExtras {
            statement,
            watermark,
            append_only,
            original: sql.trim().trim_end_matches(';').trim().to_string(),
        })
    };
    Some(parse())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_out_watermark_and_append_only() {
        let e = parse(
            "CREATE TABLE t (id INT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) APPEND ONLY;",
        )
        .unwrap()
        .unwrap();
        assert_eq!(e.statement.trim(), "CREATE TABLE t (id INT, ts TIMESTAMP)");
        assert_eq!(
            e.watermark,
            Some(("ts".into(), "ts - INTERVAL '5' SECOND".into()))
        );
        assert!(e.append_only);
        assert!(parse("CREATE TABLE t (a INT)").is_none());
        assert!(
            parse("CREATE TABLE t (a INT, WATERMARK ts AS ts)")
                .unwrap()
                .is_err()
        );
    }
}
