//! `to_char(timestamp | date, template)` with PostgreSQL's template patterns
//! (`YYYY-MM-DD HH24:MI:SS`, `Mon`, `FMDay`, `HH12:MI AM`, `"quoted text"`, ...), as
//! RisingWave and PostgreSQL read them; DataFusion's own `to_char` takes chrono's
//! `%Y-%m-%d`. Other argument types (intervals, durations) go to DataFusion's function.
//! Timestamps with time zone are shown in the zone their values are labelled with (the
//! session's, `session_time_zone.rs`), UTC for stored columns.

use arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use arrow::datatypes::{DataType, TimeUnit};
use chrono::{Datelike, NaiveDateTime, Offset, Timelike};
use chrono_tz::OffsetName;
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use std::sync::Arc;

pub fn udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(ToChar {
        signature: Signature::any(2, Volatility::Immutable),
        fallback: datafusion::functions::datetime::to_char(),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ToChar {
    signature: Signature,
    fallback: Arc<ScalarUDF>,
}

impl ScalarUDFImpl for ToChar {
    fn name(&self) -> &str {
        "to_char"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let value_type = args.args[0].data_type();
        // The zone a `timestamptz` is shown in: the one its values are labelled with (the
        // session's).
        let zone = match &value_type {
            DataType::Timestamp(_, Some(label)) => Some(
                label
                    .parse::<chrono_tz::Tz>()
                    .ok()
                    .filter(|_| !crate::time_zones::is_utc(label))
                    .unwrap_or(chrono_tz::Tz::UTC),
            ),
            DataType::Timestamp(_, None) | DataType::Date32 | DataType::Date64 | DataType::Null => {
                None
            }
            _ => return self.fallback.invoke_with_args(args),
        };
        let rows = args.number_rows;
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let values = args.args[0].to_array(rows)?;
        let values =
            arrow::compute::cast(&values, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
        let values = values.as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
        let templates = args.args[1].to_array(rows)?;
        let templates = arrow::compute::cast(&templates, &DataType::Utf8)?;
        let templates = templates.as_string::<i32>();
        let mut parsed: Option<(String, Vec<Item>)> = None;
        let mut out = StringBuilder::new();
        for i in 0..values.len() {
            if values.is_null(i) || templates.is_null(i) {
                out.append_null();
                continue;
            }
            let template = templates.value(i);
            if parsed.as_ref().is_none_or(|(t, _)| t != template) {
                parsed = Some((template.to_string(), parse(template)));
            }
            let Some(time) = chrono::DateTime::from_timestamp_micros(values.value(i)) else {
                return exec_err!("timestamp out of range");
            };
            let items = &parsed.as_ref().expect("parsed above").1;
            match zone {
                Some(tz) => {
                    let local = time.with_timezone(&tz);
                    let shown = ShownZone {
                        abbreviation: local.offset().abbreviation().unwrap_or("").to_string(),
                        seconds_east: local.offset().fix().local_minus_utc(),
                    };
                    out.append_value(format(items, &local.naive_local(), Some(&shown)));
                }
                None => out.append_value(format(items, &time.naive_utc(), None)),
            }
        }
        let array: ArrayRef = Arc::new(out.finish());
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&array, 0)?)
        } else {
            ColumnarValue::Array(array)
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Case {
    Upper,
    Capital,
    Lower,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Field {
    Year4,
    YearComma,
    Year3,
    Year2,
    Year1,
    IsoYear,
    Century,
    Quarter,
    Month,
    MonthName,
    MonthAbbrev,
    RomanMonth,
    WeekOfYear,
    IsoWeek,
    WeekOfMonth,
    DayOfYear,
    IsoDayOfYear,
    Day,
    DayOfWeek,
    IsoDayOfWeek,
    DayName,
    DayAbbrev,
    Julian,
    Hour24,
    Hour12,
    Minute,
    Second,
    SecondsOfDay,
    Millis,
    Micros,
    Fraction(u8),
    Meridiem { dots: bool },
    ZoneName,
    ZoneOffset,
    ZoneHours,
    ZoneMinutes,
}

#[derive(Debug, Clone, PartialEq)]
enum Item {
    Literal(String),
    Field {
        field: Field,
        case: Case,
        fill_mode: bool,
        ordinal: Option<Case>,
    },
}

/// Patterns, longest first where one is a prefix of another; matched ignoring case.
const PATTERNS: &[(&str, Field)] = &[
    ("Y,YYY", Field::YearComma),
    ("YYYY", Field::Year4),
    ("YYY", Field::Year3),
    ("YY", Field::Year2),
    ("Y", Field::Year1),
    ("IYYY", Field::IsoYear),
    ("IDDD", Field::IsoDayOfYear),
    ("ID", Field::IsoDayOfWeek),
    ("IW", Field::IsoWeek),
    ("CC", Field::Century),
    ("Q", Field::Quarter),
    ("MONTH", Field::MonthName),
    ("MON", Field::MonthAbbrev),
    ("MM", Field::Month),
    ("MS", Field::Millis),
    ("MI", Field::Minute),
    ("RM", Field::RomanMonth),
    ("WW", Field::WeekOfYear),
    ("W", Field::WeekOfMonth),
    ("DDD", Field::DayOfYear),
    ("DD", Field::Day),
    ("DAY", Field::DayName),
    ("DY", Field::DayAbbrev),
    ("D", Field::DayOfWeek),
    ("J", Field::Julian),
    ("HH24", Field::Hour24),
    ("HH12", Field::Hour12),
    ("HH", Field::Hour12),
    ("SSSSS", Field::SecondsOfDay),
    ("SSSS", Field::SecondsOfDay),
    ("SS", Field::Second),
    ("US", Field::Micros),
    ("FF1", Field::Fraction(1)),
    ("FF2", Field::Fraction(2)),
    ("FF3", Field::Fraction(3)),
    ("FF4", Field::Fraction(4)),
    ("FF5", Field::Fraction(5)),
    ("FF6", Field::Fraction(6)),
    ("A.M.", Field::Meridiem { dots: true }),
    ("P.M.", Field::Meridiem { dots: true }),
    ("AM", Field::Meridiem { dots: false }),
    ("PM", Field::Meridiem { dots: false }),
    ("TZH", Field::ZoneHours),
    ("TZM", Field::ZoneMinutes),
    ("TZ", Field::ZoneName),
    ("OF", Field::ZoneOffset),
];

fn case_of(text: &str) -> Case {
    let mut letters = text.chars().filter(|c| c.is_ascii_alphabetic());
    match (letters.next(), letters.next()) {
        (Some(a), Some(b)) if a.is_ascii_uppercase() && b.is_ascii_uppercase() => Case::Upper,
        (Some(a), None) if a.is_ascii_uppercase() => Case::Upper,
        (Some(a), _) if a.is_ascii_uppercase() => Case::Capital,
        _ => Case::Lower,
    }
}

fn parse(template: &str) -> Vec<Item> {
    let mut items = Vec::new();
    let mut literal = String::new();
    let mut rest = template;
    while !rest.is_empty() {
        if let Some(quoted) = rest.strip_prefix('"') {
            // "text": copied as is (\" inside is a quote).
            let mut chars = quoted.char_indices();
            let mut end = quoted.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, next)) = chars.next() {
                            literal.push(next);
                        }
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    c => literal.push(c),
                }
            }
            rest = &quoted[end.min(quoted.len())..];
            continue;
        }
        let fill_mode = rest.len() >= 2 && rest[..2].eq_ignore_ascii_case("FM");
        let body = if fill_mode { &rest[2..] } else { rest };
        let found = PATTERNS.iter().find(|(p, _)| {
            body.len() >= p.len()
                && body.is_char_boundary(p.len())
                && body[..p.len()].eq_ignore_ascii_case(p)
        });
        match found {
            Some((pattern, field)) => {
                if !literal.is_empty() {
                    items.push(Item::Literal(std::mem::take(&mut literal)));
                }
                let written = &body[..pattern.len()];
                let mut after = &body[pattern.len()..];
                let ordinal = if after.len() >= 2 && after[..2].eq_ignore_ascii_case("TH") {
                    let case = case_of(&after[..2]);
                    after = &after[2..];
                    Some(case)
                } else {
                    None
                };
                items.push(Item::Field {
                    field: *field,
                    case: case_of(written),
                    fill_mode,
                    ordinal,
                });
                rest = after;
            }
            None => {
                let c = rest.chars().next().expect("not empty");
                if c == '\\' && rest[1..].starts_with('"') {
                    literal.push('"');
                    rest = &rest[2..];
                } else {
                    literal.push(c);
                    rest = &rest[c.len_utf8()..];
                }
            }
        }
    }
    if !literal.is_empty() {
        items.push(Item::Literal(literal));
    }
    items
}

/// The chrono parsing format of a PostgreSQL template (for `to_timestamp(text,
/// template)`), or `None` when it uses a field that cannot be parsed back.
pub(super) fn chrono_format(template: &str) -> Option<String> {
    let mut out = String::new();
    for item in parse(template) {
        match item {
            Item::Literal(text) => out.push_str(&text.replace('%', "%%")),
            Item::Field { field, .. } => out.push_str(match field {
                Field::Year4 => "%Y",
                Field::Year2 => "%y",
                Field::Month => "%m",
                Field::MonthName => "%B",
                Field::MonthAbbrev => "%b",
                Field::Day => "%d",
                Field::DayOfYear => "%j",
                Field::DayName => "%A",
                Field::DayAbbrev => "%a",
                Field::Hour24 => "%H",
                Field::Hour12 => "%I",
                Field::Minute => "%M",
                Field::Second => "%S",
                Field::Millis => "%3f",
                Field::Micros => "%6f",
                Field::Fraction(_) => "%f",
                Field::Meridiem { dots: false } => "%p",
                Field::ZoneOffset | Field::ZoneHours => "%#z",
                _ => return None,
            }),
        }
    }
    Some(out)
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const ROMAN: [&str; 12] = [
    "I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X", "XI", "XII",
];

fn cased(text: &str, case: Case) -> String {
    match case {
        Case::Upper => text.to_uppercase(),
        Case::Lower => text.to_lowercase(),
        Case::Capital => text.to_string(),
    }
}

fn ordinal_suffix(n: i64, case: Case) -> String {
    let suffix = match (n % 100, n % 10) {
        (11..=13, _) => "th",
        (_, 1) => "st",
        (_, 2) => "nd",
        (_, 3) => "rd",
        _ => "th",
    };
    if case == Case::Upper {
        suffix.to_uppercase()
    } else {
        suffix.to_string()
    }
}

/// A zone offset's signed hours, `+00`, `-08`.
fn zone_hours(seconds_east: i32) -> String {
    let sign = if seconds_east < 0 { '-' } else { '+' };
    format!("{sign}{:02}", seconds_east.unsigned_abs() / 3600)
}

/// The zone a `timestamptz` is shown in, at the time shown.
struct ShownZone {
    /// `UTC`, `PST`, or the offset where the zone has no abbreviation (`+0530`).
    abbreviation: String,
    seconds_east: i32,
}

/// `t` (wall-clock time) as `items` say; `zone` for a `timestamptz`.
fn format(items: &[Item], t: &NaiveDateTime, zone: Option<&ShownZone>) -> String {
    let mut out = String::new();
    for item in items {
        let (field, case, fill_mode, ordinal) = match item {
            Item::Literal(s) => {
                out.push_str(s);
                continue;
            }
            Item::Field {
                field,
                case,
                fill_mode,
                ordinal,
            } => (*field, *case, *fill_mode, *ordinal),
        };
        // A number padded to `width` digits (unless FM), or text.
        let number = |n: i64, width: usize| -> (i64, String) {
            let s = if fill_mode {
                n.to_string()
            } else if n < 0 {
                format!("-{:0width$}", -n, width = width)
            } else {
                format!("{n:0width$}")
            };
            (n, s)
        };
        let padded_name = |name: &str| {
            let name = cased(name, case);
            if fill_mode {
                name
            } else {
                format!("{name:<9}")
            }
        };
        let hour12 = match t.hour() % 12 {
            0 => 12,
            h => h,
        };
        let micros = (t.nanosecond() / 1000) as i64;
        let (n, text): (Option<i64>, String) = match field {
            Field::Year4 => {
                let (n, s) = number(t.year() as i64, 4);
                (Some(n), s)
            }
            Field::YearComma => {
                let y = t.year();
                (None, format!("{},{:03}", y / 1000, y % 1000))
            }
            Field::Year3 => {
                let (n, s) = number((t.year() % 1000) as i64, 3);
                (Some(n), s)
            }
            Field::Year2 => {
                let (n, s) = number((t.year() % 100) as i64, 2);
                (Some(n), s)
            }
            Field::Year1 => {
                let (n, s) = number((t.year() % 10) as i64, 1);
                (Some(n), s)
            }
            Field::IsoYear => {
                let (n, s) = number(t.iso_week().year() as i64, 4);
                (Some(n), s)
            }
            Field::Century => {
                let y = t.year();
                let c = if y > 0 { (y + 99) / 100 } else { y / 100 - 1 };
                let (n, s) = number(c as i64, 2);
                (Some(n), s)
            }
            Field::Quarter => {
                let (n, s) = number((t.month0() / 3 + 1) as i64, 1);
                (Some(n), s)
            }
            Field::Month => {
                let (n, s) = number(t.month() as i64, 2);
                (Some(n), s)
            }
            Field::MonthName => (None, padded_name(MONTHS[t.month0() as usize])),
            Field::MonthAbbrev => (None, cased(&MONTHS[t.month0() as usize][..3], case)),
            Field::RomanMonth => {
                let r = cased(ROMAN[t.month0() as usize], case);
                (None, if fill_mode { r } else { format!("{r:<4}") })
            }
            Field::WeekOfYear => {
                let (n, s) = number((t.ordinal0() / 7 + 1) as i64, 2);
                (Some(n), s)
            }
            Field::IsoWeek => {
                let (n, s) = number(t.iso_week().week() as i64, 2);
                (Some(n), s)
            }
            Field::WeekOfMonth => {
                let (n, s) = number((t.day0() / 7 + 1) as i64, 1);
                (Some(n), s)
            }
            Field::DayOfYear => {
                let (n, s) = number(t.ordinal() as i64, 3);
                (Some(n), s)
            }
            Field::IsoDayOfYear => {
                let d = (t.iso_week().week0() * 7 + t.weekday().number_from_monday()) as i64;
                let (n, s) = number(d, 3);
                (Some(n), s)
            }
            Field::Day => {
                let (n, s) = number(t.day() as i64, 2);
                (Some(n), s)
            }
            Field::DayOfWeek => {
                let (n, s) = number(t.weekday().number_from_sunday() as i64, 1);
                (Some(n), s)
            }
            Field::IsoDayOfWeek => {
                let (n, s) = number(t.weekday().number_from_monday() as i64, 1);
                (Some(n), s)
            }
            Field::DayName => (
                None,
                padded_name(DAYS[t.weekday().num_days_from_sunday() as usize]),
            ),
            Field::DayAbbrev => (
                None,
                cased(
                    &DAYS[t.weekday().num_days_from_sunday() as usize][..3],
                    case,
                ),
            ),
            Field::Julian => {
                let j = t.date().num_days_from_ce() as i64 + 1_721_425;
                (Some(j), j.to_string())
            }
            Field::Hour24 => {
                let (n, s) = number(t.hour() as i64, 2);
                (Some(n), s)
            }
            Field::Hour12 => {
                let (n, s) = number(hour12 as i64, 2);
                (Some(n), s)
            }
            Field::Minute => {
                let (n, s) = number(t.minute() as i64, 2);
                (Some(n), s)
            }
            Field::Second => {
                let (n, s) = number(t.second() as i64, 2);
                (Some(n), s)
            }
            Field::SecondsOfDay => {
                let (n, s) = number(t.num_seconds_from_midnight() as i64, 1);
                (Some(n), s)
            }
            Field::Millis => {
                let (n, s) = number(micros / 1000, 3);
                (Some(n), s)
            }
            Field::Micros => {
                let (n, s) = number(micros, 6);
                (Some(n), s)
            }
            Field::Fraction(digits) => {
                let scaled = micros / 10i64.pow(6 - digits as u32);
                let (n, s) = number(scaled, digits as usize);
                (Some(n), s)
            }
            Field::Meridiem { dots } => {
                let pm = t.hour() >= 12;
                let text = match (pm, dots) {
                    (false, false) => "AM",
                    (true, false) => "PM",
                    (false, true) => "A.M.",
                    (true, true) => "P.M.",
                };
                let lower = case == Case::Lower;
                (
                    None,
                    if lower {
                        text.to_lowercase()
                    } else {
                        text.to_string()
                    },
                )
            }
            Field::ZoneName => (
                None,
                zone.map(|z| cased(&z.abbreviation, case))
                    .unwrap_or_default(),
            ),
            // PostgreSQL's `OF`: `+00`, `-08`, `+05:30`.
            Field::ZoneOffset => (
                None,
                zone.map(|z| {
                    let minutes = z.seconds_east.unsigned_abs() / 60 % 60;
                    let hours = zone_hours(z.seconds_east);
                    if minutes == 0 {
                        hours
                    } else {
                        format!("{hours}:{minutes:02}")
                    }
                })
                .unwrap_or_default(),
            ),
            Field::ZoneHours => (
                None,
                zone.map(|z| zone_hours(z.seconds_east)).unwrap_or_default(),
            ),
            Field::ZoneMinutes => (
                None,
                zone.map(|z| format!("{:02}", z.seconds_east.unsigned_abs() / 60 % 60))
                    .unwrap_or_default(),
            ),
        };
        out.push_str(&text);
        if let (Some(case), Some(n)) = (ordinal, n) {
            out.push_str(&ordinal_suffix(n, case));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f").unwrap()
    }

    fn fmt(template: &str, time: &str) -> String {
        let utc = ShownZone {
            abbreviation: "UTC".into(),
            seconds_east: 0,
        };
        format(&parse(template), &at(time), Some(&utc))
    }

    #[test]
    fn formats_zone_fields_of_other_zones() {
        let india = ShownZone {
            abbreviation: "IST".into(),
            seconds_east: 5 * 3600 + 30 * 60,
        };
        let t = at("2024-03-05 13:04:05");
        assert_eq!(
            format(&parse("TZ OF TZH:TZM"), &t, Some(&india)),
            "IST +05:30 +05:30"
        );
        let pacific = ShownZone {
            abbreviation: "PST".into(),
            seconds_east: -8 * 3600,
        };
        assert_eq!(format(&parse("tz OF"), &t, Some(&pacific)), "pst -08");
        assert_eq!(format(&parse("HH24 TZ"), &t, None), "13 ");
    }

    #[test]
    fn formats_postgres_templates() {
        let t = "2024-03-05 13:04:05.123456";
        assert_eq!(fmt("YYYY-MM-DD HH24:MI:SS", t), "2024-03-05 13:04:05");
        assert_eq!(fmt("yyyy-mm-dd", t), "2024-03-05");
        assert_eq!(fmt("HH:MI AM", t), "01:04 PM");
        assert_eq!(fmt("HH12:MI a.m.", t), "01:04 p.m.");
        assert_eq!(fmt("Month|MONTH|month", t), "March    |MARCH    |march    ");
        assert_eq!(fmt("FMMonth FMDDth, YYYY", t), "March 5th, 2024");
        assert_eq!(fmt("Dy DY day", t), "Tue TUE tuesday  ");
        assert_eq!(fmt("Mon DDD D ID Q WW IW", t), "Mar 065 3 2 1 10 10");
        assert_eq!(fmt("SS.MS US FF3", t), "05.123 123456 123");
        assert_eq!(
            fmt("\"Year\" YYYY, \"quarter\" Q", t),
            "Year 2024, quarter 1"
        );
        assert_eq!(fmt("J CC RM", t), "2460375 21 III ");
        assert_eq!(
            fmt("YYYY-MM-DD HH24:MI:SS TZ OF", t),
            "2024-03-05 13:04:05 UTC +00"
        );
        assert_eq!(fmt("DDth DDTH", "2024-03-22 00:00:00"), "22nd 22ND");
        assert_eq!(fmt("HH12 AM", "2024-03-22 00:30:00"), "12 AM");
    }
}
