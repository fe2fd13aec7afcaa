//! PostgreSQL's text output of Arrow values — what PostgreSQL 15 prints with its default
//! settings (`DateStyle = ISO`, `IntervalStyle = postgres`, `extra_float_digits = 1`).
//! The wire protocol's text format (`server::encode`), sinks writing CSV or into
//! PostgreSQL, and casts to text (a struct as a record) all print values through here.

use crate::catalog::types::{display_decimal, display_decimal256};
use crate::error::{EddyError, Result};
use arrow::array::{Array, ArrayRef, AsArray};
use arrow::compute::cast;
use arrow::datatypes::*;
use bytes::{BufMut, BytesMut};
use chrono::{DateTime, Datelike, NaiveDate, NaiveTime, Timelike};
use std::fmt::Write;

/// A column as PostgreSQL's text output of each value (NULLs stay NULL): what sinks send
/// to PostgreSQL, which reads back exactly the value, and write to CSV files.
pub fn text_column(array: &ArrayRef) -> Result<arrow::array::StringArray> {
    let column = normalize(array)?;
    let nulls = column.logical_nulls();
    let mut buf = BytesMut::with_capacity(32);
    let mut out = arrow::array::StringBuilder::with_capacity(column.len(), column.len() * 8);
    for row in 0..column.len() {
        if nulls.as_ref().is_some_and(|n| n.is_null(row)) {
            out.append_null();
            continue;
        }
        buf.clear();
        write_text(&column, row, &mut buf, false)?;
        out.append_value(String::from_utf8_lossy(&buf));
    }
    Ok(out.finish())
}

/// Casts the Arrow types that have several layouts to the one the writers handle.
pub(crate) fn normalize(array: &ArrayRef) -> Result<ArrayRef> {
    let target = match array.data_type() {
        DataType::Dictionary(_, v) => Some(v.as_ref().clone()),
        DataType::LargeUtf8 | DataType::Utf8View => Some(DataType::Utf8),
        DataType::LargeBinary | DataType::BinaryView | DataType::FixedSizeBinary(_) => {
            Some(DataType::Binary)
        }
        DataType::Date64 => Some(DataType::Date32),
        DataType::Timestamp(unit, tz) if *unit != TimeUnit::Microsecond => {
            Some(DataType::Timestamp(TimeUnit::Microsecond, tz.clone()))
        }
        DataType::Time32(_) | DataType::Time64(TimeUnit::Nanosecond) => {
            Some(DataType::Time64(TimeUnit::Microsecond))
        }
        // A `Duration` (a difference of timestamps the planner did not already make an
        // interval) is shown as the interval of the same length.
        DataType::Interval(IntervalUnit::YearMonth | IntervalUnit::DayTime)
        | DataType::Duration(_) => Some(DataType::Interval(IntervalUnit::MonthDayNano)),
        DataType::Float16 => Some(DataType::Float32),
        DataType::Decimal32(p, s) | DataType::Decimal64(p, s) => Some(DataType::Decimal128(*p, *s)),
        DataType::Decimal256(p, s) if *p <= 38 => Some(DataType::Decimal128(*p, *s)),
        DataType::LargeList(f) | DataType::FixedSizeList(f, _) => Some(DataType::List(f.clone())),
        _ => None,
    };
    match target {
        Some(t) => Ok(cast(array, &t)?),
        None => Ok(array.clone()),
    }
}

// ---------------------------------------------------------------------------------------
// Text format

pub(crate) fn write_text(
    array: &ArrayRef,
    row: usize,
    buf: &mut BytesMut,
    in_array: bool,
) -> Result<()> {
    let mut s = String::new();
    match array.data_type() {
        DataType::Boolean => {
            buf.put_slice(if array.as_boolean().value(row) {
                b"t"
            } else {
                b"f"
            });
            return Ok(());
        }
        DataType::Int8 => write!(s, "{}", array.as_primitive::<Int8Type>().value(row)),
        DataType::Int16 => write!(s, "{}", array.as_primitive::<Int16Type>().value(row)),
        DataType::Int32 => write!(s, "{}", array.as_primitive::<Int32Type>().value(row)),
        DataType::Int64 => write!(s, "{}", array.as_primitive::<Int64Type>().value(row)),
        DataType::UInt8 => write!(s, "{}", array.as_primitive::<UInt8Type>().value(row)),
        DataType::UInt16 => write!(s, "{}", array.as_primitive::<UInt16Type>().value(row)),
        DataType::UInt32 => write!(s, "{}", array.as_primitive::<UInt32Type>().value(row)),
        DataType::UInt64 => write!(s, "{}", array.as_primitive::<UInt64Type>().value(row)),
        DataType::Float32 => {
            s = format_float(
                array.as_primitive::<Float32Type>().value(row) as f64,
                6,
                true,
            );
            Ok(())
        }
        DataType::Float64 => {
            s = format_float(array.as_primitive::<Float64Type>().value(row), 15, false);
            Ok(())
        }
        DataType::Decimal128(precision, scale) => {
            let value = array.as_primitive::<Decimal128Type>().value(row);
            let (value, scale) = display_decimal(value, *precision, *scale);
            s = format_decimal(value, scale);
            Ok(())
        }
        DataType::Decimal256(precision, scale) => {
            let value = array.as_primitive::<Decimal256Type>().value(row);
            s = match display_decimal256(value, *precision, *scale) {
                Some((value, scale)) => format_decimal(value, scale),
                None => format_wide_decimal(value, *scale),
            };
            Ok(())
        }
        DataType::Utf8 => {
            buf.put_slice(array.as_string::<i32>().value(row).as_bytes());
            return Ok(());
        }
        DataType::Binary => {
            let bytes = array.as_binary::<i32>().value(row);
            s.reserve(2 + bytes.len() * 2);
            s.push_str(if in_array { "\\\\x" } else { "\\x" });
            for b in bytes {
                let _ = write!(s, "{b:02x}");
            }
            Ok(())
        }
        DataType::Date32 => {
            s = format_date(array.as_primitive::<Date32Type>().value(row));
            Ok(())
        }
        DataType::Time64(TimeUnit::Microsecond) => {
            s = format_time(array.as_primitive::<Time64MicrosecondType>().value(row));
            Ok(())
        }
        DataType::Timestamp(TimeUnit::Microsecond, tz) => {
            let micros = array.as_primitive::<TimestampMicrosecondType>().value(row);
            s = match tz.as_deref() {
                Some(zone) if !crate::time_zones::is_utc(zone) => {
                    format_timestamp_in_zone(micros, zone)
                }
                zone => format_timestamp(micros, zone.is_some()),
            };
            Ok(())
        }
        DataType::Interval(IntervalUnit::MonthDayNano) => {
            let v = array.as_primitive::<IntervalMonthDayNanoType>().value(row);
            s = format_interval(v.months, v.days, v.nanoseconds);
            Ok(())
        }
        DataType::List(_) => {
            s = format_list(array.as_list::<i32>().value(row))?;
            Ok(())
        }
        DataType::Struct(_) => {
            s = format_record(array.as_struct(), row)?;
            Ok(())
        }
        _ => {
            let formatter = arrow::util::display::ArrayFormatter::try_new(
                array.as_ref(),
                &arrow::util::display::FormatOptions::default(),
            )?;
            write!(s, "{}", formatter.value(row))
        }
    }
    .map_err(|e| EddyError::internal(e.to_string()))?;
    buf.put_slice(s.as_bytes());
    Ok(())
}

/// A float the way PostgreSQL prints it: the shortest text that reads back to the same
/// value, in exponent form when the decimal exponent is below -4 or at least `max_digits`.
pub fn format_float(v: f64, max_digits: i32, single: bool) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.into();
    }
    // Shortest round-trip digits and exponent, as `1.2345e6`.
    let sci = if single {
        format!("{:e}", v as f32)
    } else {
        format!("{v:e}")
    };
    let (mantissa, exp) = sci.split_once('e').expect("{:e} output has an exponent");
    let exp: i32 = exp.parse().expect("exponent is an integer");
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let mut out = String::new();
    if negative {
        out.push('-');
    }
    if exp < -4 || exp >= max_digits {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    } else if exp < 0 {
        out.push_str("0.");
        for _ in 0..(-exp - 1) {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        let int_len = exp as usize + 1;
        if digits.len() <= int_len {
            out.push_str(&digits);
            for _ in digits.len()..int_len {
                out.push('0');
            }
        } else {
            out.push_str(&digits[..int_len]);
            out.push('.');
            out.push_str(&digits[int_len..]);
        }
    }
    out
}

pub fn format_decimal(v: i128, scale: i8) -> String {
    format_decimal_digits(v < 0, v.unsigned_abs().to_string(), scale)
}

/// A decimal of more than 128 bits, shown at its type's scale.
fn format_wide_decimal(v: i256, scale: i8) -> String {
    let text = v.to_string();
    match text.strip_prefix('-') {
        Some(digits) => format_decimal_digits(true, digits.to_string(), scale),
        None => format_decimal_digits(false, text, scale),
    }
}

/// The digits of a decimal's magnitude with the point put `scale` digits from the right.
fn format_decimal_digits(negative: bool, digits: String, scale: i8) -> String {
    let sign = if negative && digits.bytes().any(|d| d != b'0') {
        "-"
    } else {
        ""
    };
    if scale <= 0 {
        let mut s = format!("{sign}{digits}");
        if scale < 0 && digits != "0" {
            for _ in 0..(-scale) {
                s.push('0');
            }
        }
        return s;
    }
    let scale = scale as usize;
    let digits = if digits.len() <= scale {
        format!("{}{}", "0".repeat(scale + 1 - digits.len()), digits)
    } else {
        digits
    };
    let (int, frac) = digits.split_at(digits.len() - scale);
    format!("{sign}{int}.{frac}")
}

/// A date (days since 1970-01-01) as PostgreSQL writes it.
pub fn format_date(days: i32) -> String {
    match NaiveDate::from_num_days_from_ce_opt(days + 719_163) {
        Some(d) => with_era(
            d.year(),
            |year| format!("{year:04}-{}", d.format("%m-%d")),
            "",
        ),
        None => days.to_string(),
    }
}

/// A date or timestamp text as PostgreSQL writes it: years before 1 AD as `0044-03-15 BC`
/// (year 0 is 1 BC), after `suffix` (a timestamp's zone).
fn with_era(year: i32, text: impl Fn(i32) -> String, suffix: &str) -> String {
    if year > 0 {
        format!("{}{suffix}", text(year))
    } else {
        format!("{}{suffix} BC", text(1 - year))
    }
}

fn push_fraction(out: &mut String, micros: u32) {
    if micros > 0 {
        let frac = format!("{micros:06}");
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
}

fn format_time(micros: i64) -> String {
    let secs = micros.div_euclid(1_000_000);
    let frac = micros.rem_euclid(1_000_000) as u32;
    match NaiveTime::from_num_seconds_from_midnight_opt(secs as u32, 0) {
        Some(t) => {
            let mut s = t.format("%H:%M:%S").to_string();
            push_fraction(&mut s, frac);
            s
        }
        None => micros.to_string(),
    }
}

pub fn format_timestamp(micros: i64, with_tz: bool) -> String {
    let Some(dt) = DateTime::from_timestamp_micros(micros) else {
        return micros.to_string();
    };
    let naive = dt.naive_utc();
    let text = |year: i32| {
        let mut s = format!("{year:04}-{}", naive.format("%m-%d %H:%M:%S"));
        push_fraction(&mut s, naive.nanosecond() / 1000);
        s
    };
    with_era(naive.year(), text, if with_tz { "+00:00" } else { "" })
}

/// A `timestamp with time zone` shown in `zone` (an IANA name or an offset): its
/// wall-clock time there and the offset then, `2022-01-01 00:00:00-08:00`.
pub fn format_timestamp_in_zone(micros: i64, zone: &str) -> String {
    // The zone's name is parsed once per thread and zone, not once per value shown.
    thread_local! {
        static LAST_ZONE: std::cell::RefCell<Option<(String, arrow::array::timezone::Tz)>> =
            const { std::cell::RefCell::new(None) };
    }
    let local = LAST_ZONE.with(|last| {
        let mut last = last.borrow_mut();
        if last.as_ref().is_none_or(|(name, _)| name != zone) {
            *last = crate::time_zones::parse(zone).map(|tz| (zone.to_string(), tz));
        }
        last.as_ref()
            .and_then(|(_, tz)| crate::time_zones::local_time(micros, tz))
    });
    let Some((naive, offset)) = local else {
        return format_timestamp(micros, true);
    };
    let text = |year: i32| {
        let mut s = format!("{year:04}-{}", naive.format("%m-%d %H:%M:%S"));
        push_fraction(&mut s, naive.nanosecond() / 1000);
        s
    };
    with_era(
        naive.year(),
        text,
        &crate::time_zones::format_offset(offset),
    )
}

/// An interval in PostgreSQL's default `postgres` style: `1 year 2 mons 3 days 04:05:06`.
pub fn format_interval(months: i32, days: i32, nanos: i64) -> String {
    let mut parts: Vec<String> = Vec::new();
    let years = months / 12;
    let mons = months % 12;
    // As PostgreSQL writes them: plural but for exactly 1 (`-1 days`), and once a part was
    // negative, later positive ones signed (`-1 days +02:00:00`).
    let part = |parts: &Vec<String>, n: i64, unit: &str| {
        let sign = if n > 0 && parts.iter().any(|p| p.starts_with('-')) {
            "+"
        } else {
            ""
        };
        format!("{sign}{n} {unit}{}", if n == 1 { "" } else { "s" })
    };
    if years != 0 {
        parts.push(part(&parts, years as i64, "year"));
    }
    if mons != 0 {
        parts.push(part(&parts, mons as i64, "mon"));
    }
    if days != 0 {
        parts.push(part(&parts, days as i64, "day"));
    }
    let micros = nanos / 1000;
    if micros != 0 || parts.is_empty() {
        let negative = micros < 0;
        let abs = micros.unsigned_abs();
        let total_secs = abs / 1_000_000;
        let frac = (abs % 1_000_000) as u32;
        let mut t = format!(
            "{}{:02}:{:02}:{:02}",
            if negative {
                "-"
            } else if parts.iter().any(|p| p.starts_with('-')) {
                "+"
            } else {
                ""
            },
            total_secs / 3600,
            (total_secs / 60) % 60,
            total_secs % 60
        );
        push_fraction(&mut t, frac);
        parts.push(t);
    }
    parts.join(" ")
}

/// An array literal: `{1,2,NULL}`, with elements quoted where PostgreSQL quotes them.
fn format_list(values: ArrayRef) -> Result<String> {
    let values = normalize(&values)?;
    // Logical nulls: an array of NULLs alone (`ARRAY[NULL]`) has no null buffer.
    let nulls = values.logical_nulls();
    let mut out = String::from("{");
    for i in 0..values.len() {
        if i > 0 {
            out.push(',');
        }
        if nulls.as_ref().is_some_and(|n| n.is_null(i)) {
            out.push_str("NULL");
            continue;
        }
        let mut buf = BytesMut::new();
        write_text(&values, i, &mut buf, true)?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let needs_quotes = text.is_empty()
            || text.eq_ignore_ascii_case("null")
            || text
                .chars()
                .any(|c| matches!(c, '{' | '}' | ',' | '"' | '\\') || c.is_whitespace());
        if needs_quotes {
            push_quoted(&mut out, &text, '\\');
        } else {
            out.push_str(&text);
        }
    }
    out.push('}');
    Ok(out)
}

/// A struct value as PostgreSQL prints a record: `(1,"a b",)` — fields in order, NULL as
/// nothing, a field quoted when it is empty or holds `(),"\` or whitespace (so a nested
/// struct is quoted: `(1,"(2,3)")`, as in PostgreSQL and RisingWave's batch tests).
fn format_record(record: &arrow::array::StructArray, row: usize) -> Result<String> {
    let mut out = String::from("(");
    for (i, column) in record.columns().iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        // This row's value only: normalizing the whole column would cost its length per row.
        let value = normalize(&column.slice(row, 1))?;
        if value.logical_nulls().is_some_and(|n| n.is_null(0)) {
            continue;
        }
        let mut buf = BytesMut::new();
        write_text(&value, 0, &mut buf, false)?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let needs_quotes = text.is_empty()
            || text
                .chars()
                .any(|c| matches!(c, '(' | ')' | ',' | '"' | '\\') || c.is_whitespace());
        if needs_quotes {
            // A record doubles `"` and `\` inside quotes.
            push_quoted(&mut out, &text, '\0');
        } else {
            out.push_str(&text);
        }
    }
    out.push(')');
    Ok(out)
}

/// `text` in double quotes, each `"` and `\` in it preceded by `escape` (an array
/// element's backslash), or doubled when `escape` is NUL (a record field).
fn push_quoted(out: &mut String, text: &str, escape: char) {
    out.push('"');
    for c in text.chars() {
        if c == '"' || c == '\\' {
            out.push(if escape == '\0' { c } else { escape });
        }
        out.push(c);
    }
    out.push('"');
}

#[cfg(test)]
mod era_tests {
    use super::{format_date, format_timestamp};

    #[test]
    fn years_before_1_ad_are_bc() {
        // 0001-01-01 is day -719 162; the day before it is 31 December 1 BC.
        assert_eq!(format_date(-719_162), "0001-01-01");
        assert_eq!(format_date(-719_163), "0001-12-31 BC");
        let micros = -719_163i64 * 86_400_000_000 + 3_600_000_000;
        assert_eq!(
            format_timestamp(micros, true),
            "0001-12-31 01:00:00+00:00 BC"
        );
    }
}
