//! Connectors: where streams come from.
//!
//! A source is declared with `CREATE SOURCE ... WITH (connector = '...', ...)`; its
//! options are checked here when the source is created, so a typo is an error then and
//! not when a job starts. Each connector produces Arrow batches of the source's schema and
//! reports its position per split, so a checkpoint can rewind it.

pub mod datagen;

use crate::error::{EddyError, Result, sqlstate};
use arrow::datatypes::SchemaRef;
use std::collections::BTreeMap;

/// The connectors Eddy knows, with what they need.
#[derive(Debug, Clone, PartialEq)]
pub enum ConnectorSpec {
    Datagen(datagen::DatagenSpec),
}

impl ConnectorSpec {
    /// Checks a source's options against its schema and builds the connector's spec.
    pub fn from_options(schema: &SchemaRef, options: &BTreeMap<String, String>) -> Result<Self> {
        let connector = options.get("connector").ok_or_else(|| {
            EddyError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                "a source needs WITH (connector = '...'); available: datagen",
            )
        })?;
        match connector.to_ascii_lowercase().as_str() {
            "datagen" => Ok(ConnectorSpec::Datagen(datagen::DatagenSpec::from_options(
                schema, options,
            )?)),
            "nexmark" | "file" => Err(EddyError::not_supported(format!(
                "connector '{connector}' is not supported yet; available: datagen"
            ))),
            other => Err(EddyError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!("unknown connector '{other}'; available: datagen"),
            )),
        }
    }
}

/// Reads an option as a number, with the option's name in the error.
pub(crate) fn parse_option<T: std::str::FromStr>(key: &str, value: &str) -> Result<T> {
    value.trim().parse::<T>().map_err(|_| {
        EddyError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("invalid value for option {key}: '{value}'"),
        )
    })
}
