//! PostgreSQL's regular-expression functions that DataFusion lacks:
//! `regexp_matches(text, pattern [, flags])` (set-returning: one `text[]` of capture
//! groups per match, every match with flag `g`), `regexp_split_to_array` and
//! `regexp_split_to_table`. The set-returning ones are their list functions
//! ([`MATCHES_LIST`], `regexp_split_to_array`) unnested by the select-list rewrite in
//! `sql_rewrite`. Flags: `g` (all matches), `i`/`c` (case), `n`/`m` (newline-sensitive),
//! `s`, `x`; as in PostgreSQL, `.` matches a newline unless `n` is given.

use crate::error::{EddyError, sqlstate};
use arrow::array::{Array, ArrayRef, AsArray, ListBuilder, StringBuilder};
use arrow::datatypes::{DataType, Field};
use datafusion::common::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use regex::Regex;
use std::sync::Arc;

/// The list behind `regexp_matches`: per row, one list of capture groups per match.
pub const MATCHES_LIST: &str = "regexp_matches_list";

pub fn udfs() -> Vec<ScalarUDF> {
    [Kind::MatchesList, Kind::SplitToArray]
        .into_iter()
        .map(|kind| {
            ScalarUDF::new_from_impl(RegexpFunction {
                kind,
                signature: Signature::variadic_any(Volatility::Immutable),
            })
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    MatchesList,
    SplitToArray,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct RegexpFunction {
    kind: Kind,
    signature: Signature,
}

fn text_list() -> DataType {
    DataType::new_list(DataType::Utf8, true)
}

impl ScalarUDFImpl for RegexpFunction {
    fn name(&self) -> &str {
        match self.kind {
            Kind::MatchesList => MATCHES_LIST,
            Kind::SplitToArray => "regexp_split_to_array",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        if !(2..=3).contains(&args.len()) {
            return Err(EddyError::new(
                sqlstate::UNDEFINED_FUNCTION,
                format!("function {}() takes 2 or 3 arguments", self.name()),
            )
            .into_datafusion());
        }
        Ok(match self.kind {
            Kind::MatchesList => DataType::List(Arc::new(Field::new("item", text_list(), true))),
            Kind::SplitToArray => text_list(),
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let texts: Vec<ArrayRef> = ColumnarValue::values_to_arrays(&args.args)?
            .iter()
            .map(|a| arrow::compute::cast(a, &DataType::Utf8))
            .collect::<std::result::Result<_, _>>()?;
        let text = |i: usize, row: usize| {
            let a = texts[i].as_string::<i32>();
            (!a.is_null(row) && texts[i].data_type() != &DataType::Null).then(|| a.value(row))
        };
        let mut cached: Option<(String, String, Regex)> = None;
        let mut matches = ListBuilder::new(ListBuilder::new(StringBuilder::new()));
        let mut parts = ListBuilder::new(StringBuilder::new());
        for row in 0..rows {
            let flags = if texts.len() > 2 {
                text(2, row)
            } else {
                Some("")
            };
            let (Some(value), Some(pattern), Some(flags)) = (text(0, row), text(1, row), flags)
            else {
                match self.kind {
                    Kind::MatchesList => matches.append_null(),
                    Kind::SplitToArray => parts.append_null(),
                }
                continue;
            };
            if !cached
                .as_ref()
                .is_some_and(|(p, f, _)| p == pattern && f == flags)
            {
                cached = Some((pattern.into(), flags.into(), compile(pattern, flags)?));
            }
            let regex = &cached.as_ref().expect("compiled above").2;
            match self.kind {
                Kind::MatchesList => {
                    let global = flags.contains('g');
                    for captures in
                        regex
                            .captures_iter(value)
                            .take(if global { usize::MAX } else { 1 })
                    {
                        let groups = matches.values();
                        if captures.len() == 1 {
                            groups
                                .values()
                                .append_option(captures.get(0).map(|m| m.as_str()));
                        } else {
                            for group in captures.iter().skip(1) {
                                groups.values().append_option(group.map(|m| m.as_str()));
                            }
                        }
                        groups.append(true);
                    }
                    matches.append(true);
                }
                Kind::SplitToArray => {
                    for piece in regex.split(value) {
                        parts.values().append_value(piece);
                    }
                    parts.append(true);
                }
            }
        }
        Ok(ColumnarValue::Array(match self.kind {
            Kind::MatchesList => Arc::new(matches.finish()),
            Kind::SplitToArray => Arc::new(parts.finish()),
        }))
    }
}

/// A PostgreSQL pattern with its flags as a Rust regex.
fn compile(pattern: &str, flags: &str) -> Result<Regex> {
    let mut inline = String::new();
    for flag in flags.chars() {
        match flag {
            'g' | 'c' => {}
            'i' => inline.push('i'),
            'x' => inline.push('x'),
            'n' | 'm' => inline.push('m'),
            's' => {}
            other => {
                return Err(EddyError::new(
                    sqlstate::INVALID_PARAMETER_VALUE,
                    format!("invalid regular expression option: \"{other}\""),
                )
                .into_datafusion());
            }
        }
    }
    if !flags.contains('n') && !flags.contains('m') {
        inline.push('s');
    }
    Regex::new(&format!("(?{inline}){pattern}")).map_err(|e| {
        EddyError::new(
            "2201B",
            format!(
                "invalid regular expression: {}",
                e.to_string().lines().last().unwrap_or("")
            ),
        )
        .into_datafusion()
    })
}
