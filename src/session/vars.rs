//! Session variables: what `SET` changes and `SHOW` reports.
//!
//! Defaults follow PostgreSQL 15 so that drivers which read them at connect time
//! (psycopg2 wants `client_encoding`, JDBC reads `DateStyle`) find what they expect.

use crate::error::{EddyError, Result, sqlstate};
use std::collections::BTreeMap;

/// (name, default value, description). Names are matched case-insensitively.
const DEFAULTS: &[(&str, &str, &str)] = &[
    (
        "application_name",
        "",
        "Sets the application name to be reported.",
    ),
    (
        "client_encoding",
        "UTF8",
        "Sets the client's character set encoding.",
    ),
    (
        "client_min_messages",
        "notice",
        "Sets the message levels that are sent to the client.",
    ),
    (
        "DateStyle",
        "ISO, MDY",
        "Sets the display format for date and time values.",
    ),
    (
        "default_transaction_isolation",
        "read committed",
        "Sets the transaction isolation level of each new transaction.",
    ),
    (
        "default_transaction_read_only",
        "off",
        "Sets the default read-only status of new transactions.",
    ),
    (
        "extra_float_digits",
        "1",
        "Sets the number of digits displayed for floating-point values.",
    ),
    (
        "integer_datetimes",
        "on",
        "Shows whether datetimes are integer based.",
    ),
    (
        "IntervalStyle",
        "postgres",
        "Sets the display format for interval values.",
    ),
    (
        "is_superuser",
        "on",
        "Shows whether the current user is a superuser.",
    ),
    ("lc_collate", "C", "Shows the collation order locale."),
    (
        "lc_ctype",
        "C",
        "Shows the character classification and case conversion locale.",
    ),
    (
        "lc_messages",
        "C",
        "Sets the language in which messages are displayed.",
    ),
    (
        "lc_monetary",
        "C",
        "Sets the locale for formatting monetary amounts.",
    ),
    ("lc_numeric", "C", "Sets the locale for formatting numbers."),
    (
        "lc_time",
        "C",
        "Sets the locale for formatting date and time values.",
    ),
    (
        "max_identifier_length",
        "63",
        "Shows the maximum identifier length.",
    ),
    (
        "query_mode",
        "auto",
        "How batch queries run (RisingWave's setting: auto, local or distributed; all run alike).",
    ),
    // RisingWave's tuning settings, which its test files and users set: accepted and
    // shown, with no effect on what Eddy computes (its plans have no such choices).
    (
        "allow_drop_cascade",
        "true",
        "RisingWave's setting, accepted with no effect: DROP ... CASCADE is always allowed.",
    ),
    (
        "background_ddl",
        "false",
        "RisingWave's setting, accepted with no effect: CREATE waits for the view's rows.",
    ),
    (
        "batch_parallelism",
        "0",
        "RisingWave's setting, accepted with no effect.",
    ),
    (
        "create_compaction_group_for_mv",
        "false",
        "RisingWave's setting, accepted with no effect.",
    ),
    (
        "enable_two_phase_agg",
        "true",
        "RisingWave's setting, accepted with no effect (forced on by rw_force_two_phase_agg).",
    ),
    (
        "rw_enable_join_ordering",
        "true",
        "RisingWave's setting, accepted with no effect.",
    ),
    (
        "rw_enable_share_plan",
        "true",
        "RisingWave's setting, accepted with no effect.",
    ),
    (
        "rw_enable_two_phase_agg",
        "true",
        "RisingWave's setting, accepted with no effect.",
    ),
    (
        "rw_force_split_distinct_agg",
        "false",
        "RisingWave's setting, accepted with no effect.",
    ),
    (
        "rw_force_two_phase_agg",
        "false",
        "RisingWave's setting, accepted with no effect.",
    ),
    (
        "rw_streaming_enable_bushy_join",
        "true",
        "RisingWave's setting, accepted with no effect.",
    ),
    (
        "rw_streaming_enable_delta_join",
        "false",
        "RisingWave's setting, accepted with no effect.",
    ),
    (
        "sink_decouple",
        "default",
        "RisingWave's setting, accepted with no effect.",
    ),
    (
        "streaming_enable_bushy_join",
        "true",
        "RisingWave's setting, accepted with no effect.",
    ),
    (
        "streaming_enable_delta_join",
        "false",
        "RisingWave's setting, accepted with no effect.",
    ),
    (
        "streaming_max_parallelism",
        "256",
        "RisingWave's setting, accepted with no effect.",
    ),
    (
        "streaming_over_window_cache_policy",
        "full",
        "RisingWave's setting, accepted with no effect.",
    ),
    (
        "streaming_use_arrangement_backfill",
        "true",
        "RisingWave's setting, accepted with no effect.",
    ),
    (
        "streaming_use_snapshot_backfill",
        "false",
        "RisingWave's setting, accepted with no effect.",
    ),
    (
        "visibility_mode",
        "default",
        "RisingWave's setting, accepted with no effect.",
    ),
    (
        "RW_IMPLICIT_FLUSH",
        "false",
        "Whether each INSERT, UPDATE and DELETE returns only once its changes are in every view.",
    ),
    (
        "search_path",
        "\"$user\", public",
        "Sets the schema search order for names that are not schema-qualified.",
    ),
    (
        "server_encoding",
        "UTF8",
        "Shows the server (database) character set encoding.",
    ),
    ("server_version", "15.0", "Shows the server version."),
    (
        "server_version_num",
        "150000",
        "Shows the server version as an integer.",
    ),
    (
        "standard_conforming_strings",
        "on",
        "Causes '...' strings to treat backslashes literally.",
    ),
    (
        "statement_timeout",
        "0",
        "Sets the maximum allowed duration of any statement.",
    ),
    (
        "streaming_parallelism",
        "default",
        "Parallelism of streaming jobs created in this session.",
    ),
    (
        "TimeZone",
        "UTC",
        "Sets the time zone for displaying and interpreting time stamps.",
    ),
    (
        "transaction_isolation",
        "read committed",
        "Sets the current transaction's isolation level.",
    ),
    (
        "transaction_read_only",
        "off",
        "Sets the current transaction's read-only status.",
    ),
];

/// Variables a session may read but not change.
const READ_ONLY: &[&str] = &[
    "integer_datetimes",
    "is_superuser",
    "lc_collate",
    "lc_ctype",
    "max_identifier_length",
    "server_encoding",
    "server_version",
    "server_version_num",
];

#[derive(Debug, Clone)]
pub struct SessionVars {
    values: BTreeMap<String, (String, String)>,
}

impl Default for SessionVars {
    fn default() -> Self {
        Self {
            values: DEFAULTS
                .iter()
                .map(|(n, v, _)| (n.to_ascii_lowercase(), (n.to_string(), v.to_string())))
                .collect(),
        }
    }
}

/// Normalises the spellings clients use (`SHOW TRANSACTION ISOLATION LEVEL`).
fn canonical(name: &str) -> String {
    let lower = name.trim().to_ascii_lowercase();
    match lower.as_str() {
        "transaction isolation level" => "transaction_isolation".into(),
        "time zone" => "timezone".into(),
        "names" => "client_encoding".into(),
        _ => lower,
    }
}

impl SessionVars {
    pub fn get(&self, name: &str) -> Result<String> {
        self.values
            .get(&canonical(name))
            .map(|(_, v)| v.clone())
            .ok_or_else(|| unknown(name))
    }

    /// The name as PostgreSQL spells it (`DateStyle`), for `SHOW` column headers.
    pub fn display_name(&self, name: &str) -> String {
        self.values
            .get(&canonical(name))
            .map(|(n, _)| n.clone())
            .unwrap_or_else(|| name.to_string())
    }

    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        let key = canonical(name);
        if READ_ONLY.contains(&key.as_str()) {
            return Err(EddyError::new(
                "55P02",
                format!("parameter \"{name}\" cannot be changed"),
            ));
        }
        let value = match key.as_str() {
            "client_encoding" => {
                let v = value.to_ascii_uppercase().replace('-', "");
                if v != "UTF8" && v != "UNICODE" {
                    return Err(EddyError::not_supported(format!(
                        "client encoding \"{value}\" is not supported; only UTF8 is"
                    )));
                }
                "UTF8".to_string()
            }
            // `LOCAL` and `DEFAULT` are the server's zone, UTC.
            "timezone"
                if matches!(
                    value.trim().to_ascii_uppercase().as_str(),
                    "LOCAL" | "DEFAULT" | "0"
                ) =>
            {
                crate::time_zones::UTC.to_string()
            }
            "timezone" => crate::time_zones::canonical_name(value).ok_or_else(|| {
                EddyError::new(
                    sqlstate::INVALID_PARAMETER_VALUE,
                    format!(
                        "invalid value for parameter \"TimeZone\": \"{}\"",
                        value.trim()
                    ),
                )
            })?,
            // 0 means the default, as in RisingWave.
            "streaming_parallelism" => {
                let value = value.trim().to_ascii_lowercase();
                if value != "default" && value.parse::<u32>().is_err() {
                    return Err(EddyError::new(
                        sqlstate::INVALID_PARAMETER_VALUE,
                        format!(
                            "invalid value for parameter \"streaming_parallelism\": \"{value}\""
                        ),
                    ));
                }
                value.to_string()
            }
            "rw_implicit_flush" | "rw_force_two_phase_agg" | "enable_two_phase_agg" => {
                bool_setting(name, value)?.to_string()
            }
            "query_mode" => {
                let v = value.trim().to_ascii_lowercase();
                if !matches!(v.as_str(), "auto" | "local" | "distributed") {
                    return Err(invalid_value(name, value));
                }
                v
            }
            _ => value.to_string(),
        };
        // As in RisingWave, forcing two-phase aggregation turns it on.
        if key == "rw_force_two_phase_agg"
            && value == "true"
            && let Some(entry) = self.values.get_mut("enable_two_phase_agg")
        {
            entry.1 = "true".to_string();
        }
        match self.values.get_mut(&key) {
            Some(entry) => entry.1 = value,
            None => {
                // PostgreSQL accepts custom variables with a dot (`myapp.x`).
                if !key.contains('.') {
                    return Err(unknown(name));
                }
                self.values.insert(key, (name.to_string(), value));
            }
        }
        Ok(())
    }

    pub fn reset(&mut self, name: &str) -> Result<()> {
        let key = canonical(name);
        let default = DEFAULTS
            .iter()
            .find(|(n, _, _)| n.eq_ignore_ascii_case(&key))
            .map(|(_, v, _)| v.to_string())
            .ok_or_else(|| unknown(name))?;
        self.values.insert(key, (self.display_name(name), default));
        Ok(())
    }

    pub fn reset_all(&mut self) {
        *self = Self::default();
    }

    /// Every variable as (name, value, description), for `SHOW ALL`.
    pub fn all(&self) -> Vec<(String, String, String)> {
        self.values
            .iter()
            .map(|(key, (name, value))| {
                let desc = DEFAULTS
                    .iter()
                    .find(|(n, _, _)| n.eq_ignore_ascii_case(key))
                    .map(|(_, _, d)| d.to_string())
                    .unwrap_or_default();
                (name.clone(), value.clone(), desc)
            })
            .collect()
    }
}

/// A boolean setting's value in PostgreSQL's spellings (`on`, `true`, `1`, `yes`, ...).
pub fn bool_setting(name: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "on" | "yes" | "1" | "t" | "y" => Ok(true),
        "false" | "off" | "no" | "0" | "f" | "n" => Ok(false),
        _ => Err(EddyError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("parameter \"{name}\" requires a Boolean value"),
        )),
    }
}

fn invalid_value(name: &str, value: &str) -> EddyError {
    EddyError::new(
        sqlstate::INVALID_PARAMETER_VALUE,
        format!("invalid value for parameter \"{name}\": \"{value}\""),
    )
}

fn unknown(name: &str) -> EddyError {
    EddyError::new(
        sqlstate::UNDEFINED_OBJECT,
        format!("unrecognized configuration parameter \"{name}\""),
    )
}
