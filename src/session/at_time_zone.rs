//! `x AT TIME ZONE zone`, PostgreSQL's `timezone(zone, x)`, and `date_trunc(unit, x,
//! zone)`.
//!
//! - A `timestamp with time zone` at a zone is the wall-clock time there, a `timestamp`
//!   without one (`'2024-03-10 12:00:00+00'` at `'America/New_York'` is `08:00`).
//! - A `timestamp` at a zone is read as that zone's wall-clock time: the instant, a
//!   `timestamp with time zone`. As in PostgreSQL, a wall-clock time a daylight-saving
//!   change skips is read an hour later, and one it repeats is read in standard time.
//! - `date_trunc(unit, x, zone)` truncates the wall-clock time of `x` in `zone` and
//!   gives the instant again.
//!
//! DataFusion plans `AT TIME ZONE` as a cast that only relabels the zone, so a
//! `timestamp with time zone` came back unchanged; the syntax is rewritten into this
//! function before planning. Zones are IANA names (`Europe/Paris`) or `UTC`.

use super::sql_rewrite::function_call as call;
use arrow::array::{Array, ArrayRef, AsArray, TimestampMicrosecondArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, TimeUnit, TimestampMicrosecondType};
use chrono::{DateTime, LocalResult, NaiveDateTime, TimeZone};
use chrono_tz::Tz;
use datafusion::common::{Result, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::sql::sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, SelectItem, VisitorMut,
};
use std::ops::ControlFlow;
use std::sync::Arc;

/// The function's name, PostgreSQL's.
const NAME: &str = "timezone";

pub fn udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(AtTimeZone {
        signature: Signature::user_defined(Volatility::Immutable),
    })
}

fn zoned() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))
}

fn naive() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, None)
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct AtTimeZone {
    signature: Signature,
}

impl ScalarUDFImpl for AtTimeZone {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let [zone, time] = arg_types else {
            return plan_err!("timezone takes a zone and a timestamp");
        };
        if !matches!(zone, DataType::Utf8 | DataType::Utf8View | DataType::Null) {
            return plan_err!("a time zone is text, not {zone}");
        }
        let time = match time {
            DataType::Timestamp(_, Some(_)) => zoned(),
            // Text, like a timestamp literal, reads as a timestamp with time zone.
            DataType::Utf8 | DataType::Utf8View => zoned(),
            DataType::Timestamp(_, None) | DataType::Date32 | DataType::Null => naive(),
            other => return plan_err!("AT TIME ZONE is not defined for {other}"),
        };
        Ok(vec![DataType::Utf8, time])
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(match &arg_types[1] {
            DataType::Timestamp(_, Some(_)) => naive(),
            _ => zoned(),
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let scalar = crate::plan_helpers::all_scalar(&args.args);
        let zones = args.args[0].to_array(rows)?;
        let zones = zones.as_string::<i32>();
        let times = args.args[1].to_array(rows)?;
        let to_wall_clock = matches!(times.data_type(), DataType::Timestamp(_, Some(_)));
        let micros = cast(&times, &naive())?;
        let micros = micros.as_primitive::<TimestampMicrosecondType>();
        let mut zone: Option<(String, Tz)> = None;
        let mut out = Vec::with_capacity(rows);
        for row in 0..rows {
            if zones.is_null(row) || micros.is_null(row) {
                out.push(None);
                continue;
            }
            let name = zones.value(row);
            if zone.as_ref().is_none_or(|(n, _)| n != name) {
                zone = Some((name.to_string(), parse_zone(name)?));
            }
            let tz = zone.as_ref().expect("set above").1;
            let value = micros.value(row);
            out.push(Some(if to_wall_clock {
                wall_clock(value, tz)?
            } else {
                instant(value, tz)?
            }));
        }
        let out = TimestampMicrosecondArray::from(out);
        let array: ArrayRef = if to_wall_clock {
            Arc::new(out)
        } else {
            Arc::new(out.with_timezone("+00:00"))
        };
        crate::plan_helpers::columnar_result(array, scalar)
    }
}

/// A time zone by its IANA name in any case (`us/pacific`) or `UTC`.
pub(super) fn parse_zone(name: &str) -> Result<Tz> {
    if let Ok(tz) = name.trim().parse::<Tz>() {
        return Ok(tz);
    }
    match crate::time_zones::canonical_name(name).and_then(|n| n.parse::<Tz>().ok()) {
        Some(tz) => Ok(tz),
        None => Err(crate::error::EddyError::new(
            crate::error::sqlstate::INVALID_PARAMETER_VALUE,
            format!("time zone \"{name}\" not recognized"),
        )
        .into_datafusion()),
    }
}

/// The wall-clock time in `tz` of the instant `micros` (since the epoch, UTC).
fn wall_clock(micros: i64, tz: Tz) -> Result<i64> {
    let Some(instant) = DateTime::from_timestamp_micros(micros) else {
        return exec_err!("timestamp out of range");
    };
    Ok(instant
        .with_timezone(&tz)
        .naive_local()
        .and_utc()
        .timestamp_micros())
}

/// The instant of the wall-clock time `micros` in `tz`.
pub(super) fn instant(micros: i64, tz: Tz) -> Result<i64> {
    let Some(local) = DateTime::from_timestamp_micros(micros).map(|t| t.naive_utc()) else {
        return exec_err!("timestamp out of range");
    };
    let resolve = |local: NaiveDateTime| match tz.from_local_datetime(&local) {
        LocalResult::Single(t) | LocalResult::Ambiguous(_, t) => Some(t.timestamp_micros()),
        LocalResult::None => None,
    };
    match resolve(local).or_else(|| resolve(local + chrono::Duration::hours(1))) {
        Some(v) => Ok(v),
        None => exec_err!("timestamp out of range"),
    }
}

/// Rewrites `x AT TIME ZONE zone` into `timezone(zone, x)` and `date_trunc(unit, x,
/// zone)` into `timezone(zone, date_trunc(unit, timezone(zone, x)))`; a select item
/// that was such a `date_trunc` keeps its name.
pub struct AtTimeZoneSyntax;

/// The arguments of `date_trunc(unit, x, zone)`, if `expr` is one.
fn zoned_date_trunc(expr: &Expr) -> Option<[Expr; 3]> {
    let Expr::Function(f) = expr else {
        return None;
    };
    if !f.name.to_string().eq_ignore_ascii_case("date_trunc") {
        return None;
    }
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    let args: Vec<Expr> = list
        .args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.clone()),
            _ => None,
        })
        .collect::<Option<_>>()?;
    args.try_into().ok()
}

impl VisitorMut for AtTimeZoneSyntax {
    type Break = ();

    fn pre_visit_select(
        &mut self,
        select: &mut datafusion::sql::sqlparser::ast::Select,
    ) -> ControlFlow<()> {
        // Named before the call is rewritten, as PostgreSQL names it.
        for item in select.projection.iter_mut() {
            if let SelectItem::UnnamedExpr(expr) = item
                && zoned_date_trunc(expr).is_some()
            {
                *item = SelectItem::ExprWithAlias {
                    expr: expr.clone(),
                    alias: Ident::new("date_trunc"),
                };
            }
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Expr::AtTimeZone {
            timestamp,
            time_zone,
        } = expr
        {
            *expr = call(
                NAME,
                vec![time_zone.as_ref().clone(), timestamp.as_ref().clone()],
            );
        } else if let Some([unit, time, zone]) = zoned_date_trunc(expr) {
            let local = call(NAME, vec![zone.clone(), time]);
            let truncated = call("date_trunc", vec![unit, local]);
            *expr = call(NAME, vec![zone, truncated]);
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_clock_and_back() {
        let tz: Tz = "America/New_York".parse().unwrap();
        // 2024-03-10 12:00 UTC is 08:00 in New York (daylight time began at 02:00).
        let noon_utc = 1_710_072_000_000_000;
        let eight = wall_clock(noon_utc, tz).unwrap();
        assert_eq!(eight, noon_utc - 4 * 3_600_000_000);
        assert_eq!(instant(eight, tz).unwrap(), noon_utc);
        // 02:30 that day does not exist there: read as 03:30 EDT (07:30 UTC).
        let skipped = 1_710_037_800_000_000; // 2024-03-10 02:30 as a wall-clock time
        assert_eq!(instant(skipped, tz).unwrap(), skipped + 5 * 3_600_000_000);
        // 01:30 on 2024-11-03 happens twice there: standard time (06:30 UTC) is taken.
        let repeated = 1_730_597_400_000_000; // 2024-11-03 01:30 as a wall-clock time
        assert_eq!(instant(repeated, tz).unwrap(), repeated + 5 * 3_600_000_000);
        assert!(parse_zone("Mars/Base").is_err());
        assert_eq!(parse_zone("utc").unwrap(), Tz::UTC);
    }
}
