//! Rewrites of DataFusion plans where PostgreSQL means something else by the same SQL.
//!
//! - `'\x0102'::bytea`: PostgreSQL reads a string as bytea in hex (or escape) format;
//!   Arrow's cast would take the string's UTF-8 bytes verbatim.
//! - `'1 day 02:00:00'::interval`: PostgreSQL's own interval output must read back;
//!   Arrow's parser does not accept the `HH:MM:SS` part.

use crate::error::{EddyError, Result, sqlstate};
use arrow::datatypes::{DataType, IntervalMonthDayNano, IntervalUnit};
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::logical_expr::{Cast, Expr, LogicalPlan};

pub fn rewrite(plan: LogicalPlan) -> Result<LogicalPlan> {
    let rewritten = plan.transform_up_with_subqueries(|node| {
        node.map_expressions(|e| e.transform_up(typed_literal))
    })?;
    Ok(rewritten.data)
}

/// Replaces a cast of a string literal to bytea or interval by the value PostgreSQL
/// reads from that string.
fn typed_literal(expr: Expr) -> datafusion::common::Result<Transformed<Expr>> {
    let Expr::Cast(Cast { expr: inner, field }) = &expr else {
        return Ok(Transformed::no(expr));
    };
    let Expr::Literal(ScalarValue::Utf8(Some(text)), _) = inner.as_ref() else {
        return Ok(Transformed::no(expr));
    };
    let value = match field.data_type() {
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
            let bytes = parse_bytea(text).map_err(EddyError::into_datafusion)?;
            ScalarValue::Binary(Some(bytes)).cast_to(field.data_type())?
        }
        DataType::Interval(IntervalUnit::MonthDayNano) => match parse_interval(text) {
            Some(v) => ScalarValue::IntervalMonthDayNano(Some(v)),
            None => return Ok(Transformed::no(expr)),
        },
        _ => return Ok(Transformed::no(expr)),
    };
    Ok(Transformed::yes(Expr::Literal(value, None)))
}

/// Parses PostgreSQL's interval input in its `postgres` style: `<n> <unit>` pairs
/// (years, months, weeks, days, hours, minutes, seconds, milliseconds, microseconds),
/// an optional signed `[H]H:MM[:SS[.ffffff]]`, and an optional trailing `ago`.
/// Returns `None` for anything else, which Arrow's parser then gets to try.
pub fn parse_interval(text: &str) -> Option<IntervalMonthDayNano> {
    let mut months: i64 = 0;
    let mut days: i64 = 0;
    let mut nanos: i128 = 0;
    let mut tokens: Vec<&str> = text.split_whitespace().collect();
    let ago = tokens.last().is_some_and(|t| t.eq_ignore_ascii_case("ago"));
    if ago {
        tokens.pop();
    }
    if tokens.is_empty() {
        return None;
    }
    let mut i = 0;
    while i < tokens.len() {
        let tok = tokens[i];
        if tok.contains(':') {
            nanos += parse_clock(tok)?;
            i += 1;
            continue;
        }
        let number: f64 = tok.parse().ok()?;
        let unit = tokens.get(i + 1)?.to_ascii_lowercase();
        let unit = unit.trim_end_matches(',');
        const NS: f64 = 1e9;
        match unit {
            "year" | "years" | "yr" | "yrs" | "y" => months += (number * 12.0).round() as i64,
            "month" | "months" | "mon" | "mons" => months += number.trunc() as i64,
            "week" | "weeks" | "w" => days += (number * 7.0).round() as i64,
            "day" | "days" | "d" => days += number.trunc() as i64,
            "hour" | "hours" | "hr" | "hrs" | "h" => nanos += (number * 3600.0 * NS) as i128,
            "minute" | "minutes" | "min" | "mins" | "m" => nanos += (number * 60.0 * NS) as i128,
            "second" | "seconds" | "sec" | "secs" | "s" => nanos += (number * NS) as i128,
            "millisecond" | "milliseconds" | "ms" => nanos += (number * 1e6) as i128,
            "microsecond" | "microseconds" | "us" => nanos += (number * 1e3) as i128,
            _ => return None,
        }
        i += 2;
    }
    let sign = if ago { -1 } else { 1 };
    Some(IntervalMonthDayNano::new(
        i32::try_from(sign * months).ok()?,
        i32::try_from(sign * days).ok()?,
        i64::try_from(sign as i128 * nanos).ok()?,
    ))
}

/// `[-]H:MM[:SS[.fraction]]` in nanoseconds.
fn parse_clock(tok: &str) -> Option<i128> {
    let (negative, body) = match tok.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, tok.strip_prefix('+').unwrap_or(tok)),
    };
    let parts: Vec<&str> = body.split(':').collect();
    if parts.len() < 2 || parts.len() > 3 {
        return None;
    }
    let hours: i128 = parts[0].parse().ok()?;
    let minutes: i128 = parts[1].parse().ok()?;
    let (secs, frac_nanos) = match parts.get(2) {
        None => (0i128, 0i128),
        Some(s) => match s.split_once('.') {
            None => (s.parse().ok()?, 0),
            Some((whole, frac)) => {
                if frac.is_empty() || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                let padded = format!("{frac:0<9}");
                (whole.parse().ok()?, padded.parse().ok()?)
            }
        },
    };
    let total = ((hours * 60 + minutes) * 60 + secs) * 1_000_000_000 + frac_nanos;
    Some(if negative { -total } else { total })
}

/// Parses PostgreSQL's bytea input: `\x` followed by hex digit pairs, or the escape
/// format where `\\` is a backslash and `\nnn` an octal byte.
pub fn parse_bytea(text: &str) -> Result<Vec<u8>> {
    let invalid = || {
        EddyError::new(
            sqlstate::INVALID_TEXT_REPRESENTATION,
            format!("invalid input syntax for type bytea: \"{text}\""),
        )
    };
    if let Some(hex) = text
        .strip_prefix("\\x")
        .or_else(|| text.strip_prefix("\\X"))
    {
        let digits: Vec<u8> = hex.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        if !digits.len().is_multiple_of(2) {
            return Err(invalid());
        }
        return digits
            .chunks(2)
            .map(|pair| {
                let s = std::str::from_utf8(pair).map_err(|_| invalid())?;
                u8::from_str_radix(s, 16).map_err(|_| invalid())
            })
            .collect();
    }
    parse_bytea_escape(text)
}

/// Parses bytea's escape format (`\\` a backslash, `\nnn` an octal byte, any other
/// character its UTF-8 bytes): what `decode(text, 'escape')` reads.
pub fn parse_bytea_escape(text: &str) -> Result<Vec<u8>> {
    let invalid = || {
        EddyError::new(
            sqlstate::INVALID_TEXT_REPRESENTATION,
            format!("invalid input syntax for type bytea: \"{text}\""),
        )
    };
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            out.push(bytes[i]);
            i += 1;
        } else if bytes.get(i + 1) == Some(&b'\\') {
            out.push(b'\\');
            i += 2;
        } else {
            let octal = bytes.get(i + 1..i + 4).ok_or_else(invalid)?;
            let s = std::str::from_utf8(octal).map_err(|_| invalid())?;
            out.push(u8::from_str_radix(s, 8).map_err(|_| invalid())?);
            i += 4;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{parse_bytea, parse_interval};
    use arrow::datatypes::IntervalMonthDayNano;

    #[test]
    fn hex_and_escape_formats() {
        assert_eq!(parse_bytea("\\x0102ff").unwrap(), vec![1, 2, 255]);
        assert_eq!(parse_bytea("\\x").unwrap(), Vec::<u8>::new());
        assert_eq!(parse_bytea("ab\\\\c\\001").unwrap(), b"ab\\c\x01".to_vec());
        assert!(parse_bytea("\\x0").is_err());
        assert!(parse_bytea("\\xzz").is_err());
    }

    #[test]
    fn postgres_interval_output_reads_back() {
        let hour = 3_600_000_000_000;
        assert_eq!(
            parse_interval("1 day 02:00:00"),
            Some(IntervalMonthDayNano::new(0, 1, 2 * hour))
        );
        assert_eq!(
            parse_interval("1 year 2 mons"),
            Some(IntervalMonthDayNano::new(14, 0, 0))
        );
        assert_eq!(
            parse_interval("3 months"),
            Some(IntervalMonthDayNano::new(3, 0, 0))
        );
        assert_eq!(
            parse_interval("-00:00:01.5"),
            Some(IntervalMonthDayNano::new(0, 0, -1_500_000_000))
        );
        assert_eq!(
            parse_interval("5 minutes ago"),
            Some(IntervalMonthDayNano::new(0, 0, -300_000_000_000))
        );
        assert_eq!(parse_interval("P1D"), None);
        assert_eq!(parse_interval("nonsense"), None);
    }
}
