//! Time zones: the names a session may set (`SET TIME ZONE`) and the wall-clock time and
//! offset of an instant in a zone, which is how a `timestamp with time zone` is shown.
//!
//! A `timestamptz` value is always an instant (microseconds since the epoch, UTC); the
//! zone an Arrow column is labelled with only says in which zone to show it and to do
//! calendar arithmetic. Stored columns are labelled `+00:00`; a session in another zone
//! relabels what it computes and shows (see `session/session_time_zone.rs`).

use arrow::array::timezone::Tz;
use chrono::{DateTime, NaiveDateTime, Offset, TimeZone};

/// Eddy's zone when a session sets none, as sessions show it.
pub const UTC: &str = "UTC";

/// The zone a name selects, spelled as IANA spells it (`us/pacific` is `US/Pacific`), or
/// `None` for a name no zone has.
pub fn canonical_name(name: &str) -> Option<String> {
    let name = name.trim();
    if is_utc(name)
        || matches!(
            name.to_ascii_uppercase().as_str(),
            "GMT" | "UCT" | "ZULU" | "ETC/UTC" | "ETC/GMT"
        )
    {
        return Some(UTC.to_string());
    }
    chrono_tz::TZ_VARIANTS
        .iter()
        .find(|tz| tz.name().eq_ignore_ascii_case(name))
        .map(|tz| tz.name().to_string())
}

/// Whether a zone label is UTC (Eddy's stored columns say `+00:00`).
pub fn is_utc(label: &str) -> bool {
    matches!(
        label.to_ascii_uppercase().as_str(),
        "+00:00" | "+00" | "+0000" | "UTC" | "Z"
    )
}

/// A zone label as Arrow reads it: an IANA name or a fixed offset (`+05:30`).
pub fn parse(label: &str) -> Option<Tz> {
    label.parse().ok()
}

/// The wall-clock time of instant `micros` in `zone`, and the zone's offset from UTC
/// then, in seconds east.
pub fn local_time(micros: i64, zone: &Tz) -> Option<(NaiveDateTime, i32)> {
    let instant = DateTime::from_timestamp_micros(micros)?;
    let local = zone.from_utc_datetime(&instant.naive_utc());
    Some((local.naive_local(), local.offset().fix().local_minus_utc()))
}

/// An offset as RisingWave shows it after a time: `+00:00`, `-08:00`, `+05:30`, and with
/// seconds where a zone's historical offset has them (`-07:52:58`).
pub fn format_offset(seconds_east: i32) -> String {
    let sign = if seconds_east < 0 { '-' } else { '+' };
    let total = seconds_east.unsigned_abs();
    let (hours, minutes, seconds) = (total / 3600, total / 60 % 60, total % 60);
    if seconds == 0 {
        format!("{sign}{hours:02}:{minutes:02}")
    } else {
        format!("{sign}{hours:02}:{minutes:02}:{seconds:02}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_canonical_and_case_insensitive() {
        assert_eq!(canonical_name("us/pacific").as_deref(), Some("US/Pacific"));
        assert_eq!(
            canonical_name("europe/london").as_deref(),
            Some("Europe/London")
        );
        assert_eq!(canonical_name("utc").as_deref(), Some("UTC"));
        assert_eq!(canonical_name("Mars/Olympus"), None);
    }

    #[test]
    fn local_time_follows_daylight_saving() {
        let zone = parse("America/Los_Angeles").unwrap();
        // 2022-01-01 00:00 UTC is 16:00 the day before in Los Angeles (PST, -8).
        let (local, offset) = local_time(1_640_995_200_000_000, &zone).unwrap();
        assert_eq!(local.to_string(), "2021-12-31 16:00:00");
        assert_eq!(format_offset(offset), "-08:00");
        // 2022-07-01 00:00 UTC is in PDT (-7).
        let (_, offset) = local_time(1_656_633_600_000_000, &zone).unwrap();
        assert_eq!(format_offset(offset), "-07:00");
        assert_eq!(format_offset(5 * 3600 + 30 * 60), "+05:30");
        assert_eq!(format_offset(-(7 * 3600 + 52 * 60 + 58)), "-07:52:58");
    }
}
