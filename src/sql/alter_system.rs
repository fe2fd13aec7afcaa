//! `ALTER SYSTEM SET name { = | TO } value`: a server-wide setting, as in RisingWave
//! (`barrier_interval_ms`). sqlparser does not read it, so it is cut out here.

use crate::error::{EddyError, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterSystem {
    pub name: String,
    pub value: String,
}

/// `Some` when `sql` is an `ALTER SYSTEM` statement.
pub fn parse(sql: &str) -> Option<Result<AlterSystem>> {
    let text = sql.trim().trim_end_matches(';').trim();
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.len() < 2
        || !words[0].eq_ignore_ascii_case("alter")
        || !words[1].eq_ignore_ascii_case("system")
    {
        return None;
    }
    let rest = words[2..].join(" ");
    let Some(assignment) = rest
        .strip_prefix("SET ")
        .or_else(|| rest.strip_prefix("set "))
    else {
        return Some(Err(EddyError::syntax(
            "expected ALTER SYSTEM SET name = value",
        )));
    };
    let (name, value) = match assignment.split_once('=') {
        Some((n, v)) => (n.trim(), v.trim()),
        None => match assignment.split_once(|c: char| c.is_whitespace()) {
            Some((n, v)) if v.trim_start().to_ascii_lowercase().starts_with("to ") => {
                (n.trim(), v.trim_start()[3..].trim())
            }
            _ => {
                return Some(Err(EddyError::syntax(
                    "expected ALTER SYSTEM SET name = value",
                )));
            }
        },
    };
    if name.is_empty() || value.is_empty() {
        return Some(Err(EddyError::syntax(
            "expected ALTER SYSTEM SET name = value",
        )));
    }
    let value = value.trim_matches('\'').to_string();
    Some(Ok(AlterSystem {
        name: name.trim_matches('"').to_ascii_lowercase(),
        value,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_forms() {
        let expected = AlterSystem {
            name: "barrier_interval_ms".into(),
            value: "500".into(),
        };
        assert_eq!(
            parse("ALTER SYSTEM SET barrier_interval_ms = 500;")
                .unwrap()
                .unwrap(),
            expected
        );
        assert_eq!(
            parse("alter system set barrier_interval_ms to '500'")
                .unwrap()
                .unwrap(),
            expected
        );
        assert!(parse("ALTER SYSTEM barrier_interval_ms").unwrap().is_err());
        assert!(parse("ALTER TABLE t ADD COLUMN x int").is_none());
    }
}
