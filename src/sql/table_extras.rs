//! RisingWave's additions to `CREATE TABLE` that sqlparser does not read:
//! `WATERMARK FOR column AS expression` among the columns, `APPEND ONLY` and
//! `ON CONFLICT {DO NOTHING | OVERWRITE | DO UPDATE FULL | DO UPDATE IF NOT NULL}` after
//! them.
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
    /// `ON CONFLICT ...`, when given.
    pub on_conflict: Option<crate::state::OnConflict>,
    /// The statement as written (for `SHOW CREATE TABLE`).
    pub original: String,
    /// `WITH (...)` after the columns (RisingWave's dotted keys, which sqlparser does not
    /// read): a table fed by a connector (`connector = 'postgres-cdc'`).
    pub options: std::collections::BTreeMap<String, String>,
    /// `FROM source TABLE 'schema.table'`: a table fed by a shared CDC source.
    pub from_source: Option<(String, String)>,
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
    let on_conflict = match cut_on_conflict(&mut tokens) {
        Ok(c) => c,
        Err(e) => return Some(Err(e)),
    };
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
    let mut from_source = None;
    if is_word(tokens.get(close + 1), "from") && is_word(tokens.get(close + 3), "table") {
        let parsed = match (tokens.get(close + 2), tokens.get(close + 4)) {
            (Some(source), Some(Token::SingleQuotedString(table))) => {
                identifier(Some(source)).map(|s| (s, table.clone()))
            }
            _ => Err(EddyError::syntax(
                "expected FROM source TABLE 'schema.table'",
            )),
        };
        match parsed {
            Ok(found) => from_source = Some(found),
            Err(e) => return Some(Err(e)),
        }
        tokens.drain(close + 1..close + 5);
    }
    let mut options = std::collections::BTreeMap::new();
    let with_at = (close + 1..tokens.len())
        .find(|k| is_word(tokens.get(*k), "with") && tokens.get(k + 1) == Some(&Token::LParen));
    if let Some(at) = with_at {
        let parsed = super::source::parse_options(&tokens, at + 1).and_then(|(parsed, end)| {
            // `FORMAT f ENCODE e (...)` after the options (a table fed by Kafka).
            let (format, encode_options, end) = super::source::parse_format_clause(&tokens, end)?;
            Ok((parsed, format, encode_options, end))
        });
        match parsed {
            Ok((parsed, format, encode_options, end)) => {
                options = parsed;
                if let Some((format, encode)) = format {
                    options.insert("format".into(), format.to_ascii_lowercase());
                    options.insert("encode".into(), encode.to_ascii_lowercase());
                }
                for (k, v) in encode_options {
                    options.insert(format!("encode.{k}"), v);
                }
                tokens.drain(at..end);
            }
            Err(e) => return Some(Err(e)),
        }
    }
    // RisingWave's older spelling of APPEND ONLY: WITH ('appendonly' = true).
    let append_only = append_only
        || options
            .remove("appendonly")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let watermark_items: Vec<&(usize, usize)> = items
        .iter()
        .filter(|(from, _)| is_word(tokens.get(*from), "watermark"))
        .collect();
    if watermark_items.is_empty()
        && !append_only
        && on_conflict.is_none()
        && options.is_empty()
        && from_source.is_none()
    {
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
            on_conflict,
            original: sql.trim().trim_end_matches(';').trim().to_string(),
            options: options.clone(),
            from_source: from_source.clone(),
        })
    };
    Some(parse())
}

/// Removes `ON CONFLICT <action>` following the column list (it runs up to `WITH`,
/// `APPEND`, or the end) and returns the action.
fn cut_on_conflict(tokens: &mut Vec<Token>) -> Result<Option<crate::state::OnConflict>> {
    let mut depth = 0i32;
    let mut at = None;
    for (k, t) in tokens.iter().enumerate() {
        match t {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            _ if depth == 0 && is_word(Some(t), "on") && is_word(tokens.get(k + 1), "conflict") => {
                at = Some(k);
                break;
            }
            _ => {}
        }
    }
    let Some(at) = at else {
        return Ok(None);
    };
    let end = (at + 2..tokens.len())
        .find(|k| {
            is_word(tokens.get(*k), "with")
                || is_word(tokens.get(*k), "append")
                || tokens[*k] == Token::SemiColon
        })
        .unwrap_or(tokens.len());
    let words = tokens[at + 2..end]
        .iter()
        .map(|t| t.to_string().to_ascii_lowercase())
        .collect::<Vec<_>>();
    let policy = crate::state::OnConflict::from_words(&words)?;
    tokens.drain(at..end);
    Ok(Some(policy))
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
        assert_eq!(e.on_conflict, None);
        assert!(parse("CREATE TABLE t (a INT)").is_none());
        let e = parse("CREATE TABLE t (a INT) WITH ('appendonly' = true)")
            .unwrap()
            .unwrap();
        assert!(e.append_only);
        assert!(e.options.is_empty());
        assert_eq!(e.statement.trim(), "CREATE TABLE t (a INT)");
        let e =
            parse("CREATE TABLE t (id INT PRIMARY KEY, v INT) ON CONFLICT DO UPDATE IF NOT NULL")
                .unwrap()
                .unwrap();
        assert_eq!(
            e.statement.trim(),
            "CREATE TABLE t (id INT PRIMARY KEY, v INT)"
        );
        assert_eq!(
            e.on_conflict,
            Some(crate::state::OnConflict::UpdateIfNotNull)
        );
        assert!(
            parse("CREATE TABLE t (id INT) ON CONFLICT DO SOMETHING")
                .unwrap()
                .is_err()
        );
        let e = parse(
            "CREATE TABLE t (id INT PRIMARY KEY) WITH (connector = 'postgres-cdc', database.name = 'd')",
        )
        .unwrap()
        .unwrap();
        assert_eq!(e.statement.trim(), "CREATE TABLE t (id INT PRIMARY KEY)");
        assert_eq!(e.options["database.name"], "d");
        let e = parse("CREATE TABLE t (id INT PRIMARY KEY) FROM pg TABLE 'public.orders'")
            .unwrap()
            .unwrap();
        assert_eq!(e.from_source, Some(("pg".into(), "public.orders".into())));
        assert_eq!(e.statement.trim(), "CREATE TABLE t (id INT PRIMARY KEY)");
        assert!(
            parse("CREATE TABLE t (a INT, WATERMARK ts AS ts)")
                .unwrap()
                .is_err()
        );
    }
}
