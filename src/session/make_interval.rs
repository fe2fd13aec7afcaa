//! `make_interval(years, months, weeks, days, hours, mins, secs)`, as in PostgreSQL:
//! every argument optional (0), `secs` a `double precision`, the others integers; also
//! called with named arguments (`make_interval(days => 10)`), which are put in their
//! places before DataFusion sees the call (it cannot skip a parameter by name).
//!
//! Years and months add up to the interval's months, weeks and days to its days, the
//! rest to its time; a part that does not fit (or a `secs` that is not finite) is error
//! 22008, never a wrapped value.

use crate::error::{EddyError, sqlstate};
use arrow::array::{Array, ArrayRef, AsArray, IntervalMonthDayNanoBuilder};
use arrow::datatypes::{DataType, Float64Type, Int32Type, IntervalMonthDayNano, IntervalUnit};
use datafusion::common::{Result, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::sql::sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArgOperator, FunctionArguments, Value, VisitorMut,
};
use std::ops::ControlFlow;
use std::sync::Arc;

/// The parameters, in order.
const PARAMETERS: [&str; 7] = ["years", "months", "weeks", "days", "hours", "mins", "secs"];

pub fn udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(MakeInterval {
        signature: Signature::user_defined(Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct MakeInterval {
    signature: Signature,
}

impl ScalarUDFImpl for MakeInterval {
    fn name(&self) -> &str {
        "make_interval"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        if arg_types.len() > PARAMETERS.len() {
            return plan_err!("make_interval takes at most 7 arguments");
        }
        arg_types
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let fits = t.is_integer() || t.is_null() || matches!(t, DataType::Utf8);
                let is_secs = i == PARAMETERS.len() - 1;
                if is_secs && (t.is_numeric() || fits) {
                    Ok(DataType::Float64)
                } else if fits {
                    Ok(DataType::Int32)
                } else {
                    plan_err!(
                        "make_interval's {} must be an integer, not {t}",
                        PARAMETERS[i]
                    )
                }
            })
            .collect()
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Interval(IntervalUnit::MonthDayNano))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let all_scalars = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let columns: Vec<ArrayRef> = args
            .args
            .iter()
            .map(|a| a.to_array(rows))
            .collect::<Result<_>>()?;
        let mut out = IntervalMonthDayNanoBuilder::with_capacity(rows);
        'rows: for row in 0..rows {
            let mut parts = [0i64; 6];
            for (i, part) in parts.iter_mut().enumerate() {
                if let Some(column) = columns.get(i) {
                    if column.is_null(row) {
                        out.append_null();
                        continue 'rows;
                    }
                    *part = column.as_primitive::<Int32Type>().value(row) as i64;
                }
            }
            let secs = match columns.get(6) {
                Some(column) if column.is_null(row) => {
                    out.append_null();
                    continue 'rows;
                }
                Some(column) => column.as_primitive::<Float64Type>().value(row),
                None => 0.0,
            };
            out.append_value(interval_of(parts, secs)?);
        }
        let array: ArrayRef = Arc::new(out.finish());
        if all_scalars {
            Ok(ColumnarValue::Scalar(
                datafusion::common::ScalarValue::try_from_array(&array, 0)?,
            ))
        } else {
            Ok(ColumnarValue::Array(array))
        }
    }
}

/// The interval of `[years, months, weeks, days, hours, mins]` and `secs`.
fn interval_of(parts: [i64; 6], secs: f64) -> Result<IntervalMonthDayNano> {
    let [years, months, weeks, days, hours, mins] = parts;
    let out_of_range = || {
        EddyError::new(sqlstate::DATETIME_FIELD_OVERFLOW, "interval out of range").into_datafusion()
    };
    let months = years
        .checked_mul(12)
        .and_then(|m| m.checked_add(months))
        .and_then(|m| i32::try_from(m).ok())
        .ok_or_else(out_of_range)?;
    let days = weeks
        .checked_mul(7)
        .and_then(|d| d.checked_add(days))
        .and_then(|d| i32::try_from(d).ok())
        .ok_or_else(out_of_range)?;
    let secs_nanos = (secs * 1e9).round();
    if !secs_nanos.is_finite() || secs_nanos.abs() >= i64::MAX as f64 {
        return Err(out_of_range());
    }
    let nanos = hours
        .checked_mul(3_600_000_000_000)
        .and_then(|n| n.checked_add(mins.checked_mul(60_000_000_000)?))
        .and_then(|n| n.checked_add(secs_nanos as i64))
        .ok_or_else(out_of_range)?;
    Ok(IntervalMonthDayNano::new(months, days, nanos))
}

/// Puts `make_interval`'s named arguments in their places, the skipped ones 0.
pub struct NamedArguments;

impl VisitorMut for NamedArguments {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let Expr::Function(function) = expr else {
            return ControlFlow::Continue(());
        };
        if !function
            .name
            .to_string()
            .eq_ignore_ascii_case("make_interval")
        {
            return ControlFlow::Continue(());
        }
        let FunctionArguments::List(list) = &mut function.args else {
            return ControlFlow::Continue(());
        };
        let named = |a: &FunctionArg| {
            matches!(a, FunctionArg::Named { .. } | FunctionArg::ExprNamed { .. })
        };
        if !list.args.iter().any(named) {
            return ControlFlow::Continue(());
        }
        let mut placed: Vec<Option<FunctionArgExpr>> = vec![None; PARAMETERS.len()];
        for (position, arg) in list.args.iter().enumerate() {
            let (slot, value) = match arg {
                FunctionArg::Unnamed(value) => (Some(position), value),
                FunctionArg::Named {
                    name,
                    arg: value,
                    operator: FunctionArgOperator::RightArrow | FunctionArgOperator::Assignment,
                } => (parameter_position(&name.value), value),
                FunctionArg::ExprNamed {
                    name: Expr::Identifier(name),
                    arg: value,
                    operator: FunctionArgOperator::RightArrow | FunctionArgOperator::Assignment,
                } => (parameter_position(&name.value), value),
                // Left for DataFusion to refuse.
                _ => return ControlFlow::Continue(()),
            };
            match slot {
                Some(slot) if slot < PARAMETERS.len() && placed[slot].is_none() => {
                    placed[slot] = Some(value.clone())
                }
                _ => return ControlFlow::Continue(()),
            }
        }
        let last = placed.iter().rposition(Option::is_some).unwrap_or(0);
        list.args = placed
            .into_iter()
            .take(last + 1)
            .map(|value| {
                FunctionArg::Unnamed(value.unwrap_or_else(|| {
                    FunctionArgExpr::Expr(Expr::value(Value::Number("0".into(), false)))
                }))
            })
            .collect();
        ControlFlow::Continue(())
    }
}

fn parameter_position(name: &str) -> Option<usize> {
    PARAMETERS.iter().position(|p| p.eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_add_up_and_overflow_is_an_error() {
        let v = interval_of([1, 14, 1, 2, 3, 4], 5.5).unwrap();
        assert_eq!(v.months, 26);
        assert_eq!(v.days, 9);
        assert_eq!(
            v.nanoseconds,
            ((3 * 60 + 4) * 60) * 1_000_000_000 + 5_500_000_000
        );
        assert!(interval_of([178_956_971, 0, 0, 0, 0, 0], 0.0).is_err());
        assert!(interval_of([0, 0, 306_783_379, 0, 0, 0], 0.0).is_err());
        assert!(interval_of([0, 0, 0, 0, 0, 0], f64::NAN).is_err());
        assert!(interval_of([0, 0, 0, 0, 0, 0], 1e18).is_err());
    }
}
