//! `ALTER MATERIALIZED VIEW name SET PARALLELISM { = | TO } n` (and `ALTER SINK`), as in
//! RisingWave: the job restarts at the new parallelism from its state, moving whole key
//! groups between subtasks. sqlparser does not read it, so it is cut out here.

use crate::error::{EddyError, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterParallelism {
    /// `MATERIALIZED VIEW` or `SINK`.
    pub kind: String,
    pub name: String,
    pub parallelism: String,
}

/// `Some` when `sql` is an `ALTER ... SET PARALLELISM` statement.
pub fn parse(sql: &str) -> Option<Result<AlterParallelism>> {
    let text = sql.trim().trim_end_matches(';').trim();
    let words: Vec<&str> = text.split_whitespace().collect();
    let lower: Vec<String> = words.iter().map(|w| w.to_ascii_lowercase()).collect();
    let (kind, rest) = match lower.as_slice() {
        [alter, m, v, ..] if alter == "alter" && m == "materialized" && v == "view" => {
            ("MATERIALIZED VIEW", 3)
        }
        [alter, s, ..] if alter == "alter" && s == "sink" => ("SINK", 2),
        _ => return None,
    };
    let tail: Vec<&str> = words[rest..].to_vec();
    let tail_lower: Vec<&str> = lower[rest..].iter().map(String::as_str).collect();
    if tail_lower.len() < 3 || tail_lower[1] != "set" || !tail_lower[2].starts_with("parallelism") {
        // Another ALTER: not Eddy's to read.
        return None;
    }
    let after = tail[2..].join(" ");
    let value = after["parallelism".len()..]
        .trim()
        .trim_start_matches('=')
        .trim();
    let value = if value.to_ascii_lowercase().starts_with("to ") {
        value[3..].trim()
    } else {
        value
    };
    if value.is_empty() {
        return Some(Err(EddyError::syntax(format!(
            "expected ALTER {kind} name SET PARALLELISM = n"
        ))));
    }
    Some(Ok(AlterParallelism {
        kind: kind.to_string(),
        name: tail[0].trim_matches('"').to_string(),
        parallelism: value.trim_matches('\'').to_string(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_alter_parallelism() {
        let a = parse("ALTER MATERIALIZED VIEW mv SET PARALLELISM = 4;")
            .unwrap()
            .unwrap();
        assert_eq!(
            (a.kind.as_str(), a.name.as_str(), a.parallelism.as_str()),
            ("MATERIALIZED VIEW", "mv", "4")
        );
        let b = parse("alter sink s set parallelism to 2").unwrap().unwrap();
        assert_eq!((b.kind.as_str(), b.parallelism.as_str()), ("SINK", "2"));
        assert!(parse("ALTER MATERIALIZED VIEW mv RENAME TO x").is_none());
        assert!(
            parse("ALTER MATERIALIZED VIEW mv SET PARALLELISM")
                .unwrap()
                .is_err()
        );
    }
}
