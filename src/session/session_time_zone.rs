//! A session's time zone (`SET TIME ZONE 'Europe/London'`), as PostgreSQL applies it.
//!
//! A `timestamptz` is an instant; the session's zone decides how it is read from and
//! turned into wall-clock values, and how it is shown:
//! - text without an offset, a `timestamp` and a `date` cast to `timestamptz` are read
//!   as wall-clock time in the session's zone (`'2022-01-01'::timestamptz` is midnight
//!   there);
//! - a `timestamptz` cast to `timestamp`, `date`, `time` or text, `date_trunc`,
//!   `extract`, `to_char` and adding or subtracting an interval (days and months follow
//!   the zone's calendar across daylight-saving changes) use its wall-clock time there;
//! - results show `timestamptz` columns in the zone with its offset
//!   (`2022-01-01 00:00:00-08:00`).
//!
//! Stored columns keep instants labelled `+00:00`; this analyzer rule, run last (after
//! type coercion has made every implicit cast explicit), relabels a `timestamptz`
//! where it meets one of those operations with the session's zone (Arrow computes
//! dates, times, truncation and calendar arithmetic in the label's zone) and labels the
//! result back, so no column changes type. Casts between wall-clock values and instants
//! go through `timezone(zone, x)` (`AT TIME ZONE`), which resolves daylight-saving gaps
//! and overlaps as PostgreSQL does; Arrow's own casts only relabel. In UTC, the default,
//! the rule is not installed and nothing changes.

use super::at_time_zone;
use arrow::array::{Array, ArrayRef, AsArray, StringBuilder, TimestampMicrosecondArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, TimeUnit, TimestampMicrosecondType};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result, ScalarValue, plan_err};
use datafusion::logical_expr::expr::{ScalarFunction, TryCast};
use datafusion::logical_expr::{
    BinaryExpr, Cast, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility, lit,
};
use datafusion::optimizer::AnalyzerRule;
use std::sync::Arc;

/// Functions whose result depends on the zone a `timestamptz` argument is labelled with.
const ZONE_SENSITIVE_FUNCTIONS: &[&str] = &[
    "date_trunc",
    "date_part",
    "to_char",
    // The text of any value (`x::text`, `x || 'suffix'`): see `struct_casts.rs`.
    "eddy_value_to_text",
];

/// The analyzer rule of a session whose zone is not UTC.
#[derive(Debug)]
pub struct SessionTimeZone {
    /// The zone's IANA name, as `time_zones::canonical_name` spells it.
    zone: Arc<str>,
}

impl SessionTimeZone {
    pub fn new(zone: &str) -> Self {
        Self { zone: zone.into() }
    }

    fn zoned(&self, unit: TimeUnit) -> DataType {
        DataType::Timestamp(unit, Some(self.zone.clone()))
    }

    /// Whether a type is a `timestamptz` labelled with another zone than the session's.
    fn other_zone(&self, data_type: &DataType) -> Option<TimeUnit> {
        match data_type {
            DataType::Timestamp(unit, Some(label)) if **label != *self.zone => Some(*unit),
            _ => None,
        }
    }

    /// `x` relabelled with the session's zone, if it is a `timestamptz` in another.
    fn relabel(&self, expr: Expr, schema: &DFSchema) -> (Expr, bool) {
        match expr.get_type(schema).ok().and_then(|t| self.other_zone(&t)) {
            Some(unit) => (cast_to(expr, self.zoned(unit)), true),
            None => (expr, false),
        }
    }

    /// `timezone(zone, x)`: a wall-clock `timestamp` read in the session's zone (an
    /// instant), or an instant's wall-clock time there.
    fn at_session_zone(&self, x: Expr) -> Expr {
        Expr::ScalarFunction(ScalarFunction::new_udf(
            Arc::new(at_time_zone::udf()),
            vec![lit(self.zone.to_string()), x],
        ))
    }

    fn rewrite(&self, expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
        let (inner, target, try_cast) = match &expr {
            Expr::Cast(Cast { expr, field }) => (expr, field.data_type(), false),
            Expr::TryCast(TryCast { expr, field }) => (expr, field.data_type(), true),
            Expr::ScalarFunction(f)
                if ZONE_SENSITIVE_FUNCTIONS.contains(&f.func.name())
                    || f.func.name() == "eddy_date_trunc_by_row" =>
            {
                return self.relabel_arguments(expr, schema);
            }
            Expr::BinaryExpr(BinaryExpr {
                op: Operator::Plus | Operator::Minus,
                ..
            }) => return self.relabel_calendar_arithmetic(expr, schema),
            _ => return Ok(Transformed::no(expr)),
        };
        let Ok(source) = inner.get_type(schema) else {
            return Ok(Transformed::no(expr));
        };
        let naive_micros = DataType::Timestamp(TimeUnit::Microsecond, None);
        let utc_micros = DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()));
        let converted = match (&source, target) {
            // Wall-clock values read in the session's zone.
            (
                DataType::Timestamp(_, None) | DataType::Date32 | DataType::Date64,
                DataType::Timestamp(_, Some(_)),
            ) => self.at_session_zone(cast_to((**inner).clone(), naive_micros)),
            (
                DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8,
                DataType::Timestamp(_, Some(_)),
            ) if !try_cast => Expr::ScalarFunction(ScalarFunction::new_udf(
                Arc::new(text_in_zone_udf()),
                vec![
                    cast_to((**inner).clone(), DataType::Utf8),
                    lit(self.zone.to_string()),
                ],
            )),
            // An instant's wall-clock time in the session's zone.
            (DataType::Timestamp(_, Some(_)), DataType::Timestamp(_, None)) => {
                self.at_session_zone(cast_to((**inner).clone(), utc_micros))
            }
            (
                DataType::Timestamp(unit, Some(label)),
                DataType::Date32
                | DataType::Date64
                | DataType::Time32(_)
                | DataType::Time64(_)
                | DataType::Utf8
                | DataType::Utf8View
                | DataType::LargeUtf8,
            ) if **label != *self.zone => cast_to((**inner).clone(), self.zoned(*unit)),
            _ => return Ok(Transformed::no(expr)),
        };
        let target = target.clone();
        Ok(Transformed::yes(if try_cast {
            Expr::TryCast(TryCast::new(Box::new(converted), target))
        } else {
            cast_to(converted, target)
        }))
    }

    /// A zone-sensitive function with its `timestamptz` arguments in the session's zone,
    /// its result (if a `timestamptz`) labelled as before.
    fn relabel_arguments(&self, expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
        let Ok(result_type) = expr.get_type(schema) else {
            return Ok(Transformed::no(expr));
        };
        let Expr::ScalarFunction(ScalarFunction { func, args }) = expr else {
            unreachable!("called for function calls")
        };
        let mut changed = false;
        let args = args
            .into_iter()
            .map(|a| {
                let (a, relabelled) = self.relabel(a, schema);
                changed |= relabelled;
                a
            })
            .collect();
        let call = Expr::ScalarFunction(ScalarFunction { func, args });
        if !changed {
            return Ok(Transformed::no(call));
        }
        Ok(Transformed::yes(match result_type {
            DataType::Timestamp(_, Some(_)) => cast_to(call, result_type),
            _ => call,
        }))
    }

    /// `timestamptz ± interval` computed in the session's zone's calendar.
    fn relabel_calendar_arithmetic(
        &self,
        expr: Expr,
        schema: &DFSchema,
    ) -> Result<Transformed<Expr>> {
        let Expr::BinaryExpr(BinaryExpr { left, op, right }) = &expr else {
            unreachable!("called for binary expressions")
        };
        let (Ok(left_type), Ok(right_type)) = (left.get_type(schema), right.get_type(schema))
        else {
            return Ok(Transformed::no(expr));
        };
        let is_interval = |t: &DataType| matches!(t, DataType::Interval(_));
        let relabelled = match (self.other_zone(&left_type), self.other_zone(&right_type)) {
            (Some(unit), None) if is_interval(&right_type) => BinaryExpr::new(
                Box::new(cast_to((**left).clone(), self.zoned(unit))),
                *op,
                right.clone(),
            ),
            (None, Some(unit)) if is_interval(&left_type) && *op == Operator::Plus => {
                BinaryExpr::new(
                    left.clone(),
                    *op,
                    Box::new(cast_to((**right).clone(), self.zoned(unit))),
                )
            }
            _ => return Ok(Transformed::no(expr)),
        };
        let result_type = match expr.get_type(schema) {
            Ok(t) => t,
            Err(_) => return Ok(Transformed::no(expr)),
        };
        Ok(Transformed::yes(cast_to(
            Expr::BinaryExpr(relabelled),
            result_type,
        )))
    }
}

fn cast_to(expr: Expr, data_type: DataType) -> Expr {
    Expr::Cast(Cast::new(Box::new(expr), data_type))
}

impl AnalyzerRule for SessionTimeZone {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        crate::plan_helpers::rewrite_expressions(plan, |e, schema| self.rewrite(e, schema))
            .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "eddy_session_time_zone"
    }
}

/// `eddy_timestamptz_in_zone(text, zone)`: text read as a `timestamptz`, in `zone` when
/// it names no zone or offset itself.
fn text_in_zone_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(TextInZone {
        signature: Signature::exact(vec![DataType::Utf8, DataType::Utf8], Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct TextInZone {
    signature: Signature,
}

impl ScalarUDFImpl for TextInZone {
    fn name(&self) -> &str {
        "eddy_timestamptz_in_zone"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Timestamp(
            TimeUnit::Microsecond,
            Some("+00:00".into()),
        ))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let scalar = crate::plan_helpers::all_scalar(&args.args);
        let texts = args.args[0].to_array(rows)?;
        let texts = texts.as_string::<i32>();
        let ColumnarValue::Scalar(ScalarValue::Utf8(Some(zone))) = &args.args[1] else {
            return plan_err!("the session's zone is a constant");
        };
        let zone = at_time_zone::parse_zone(zone)?;
        // Texts with their own zone are read as DataFusion reads them; the others as
        // wall-clock times, then placed in the session's zone.
        let mut with_zone = StringBuilder::new();
        let mut wall_clock = StringBuilder::new();
        for text in texts.iter() {
            match text {
                Some(t) if names_a_zone(t) => {
                    with_zone.append_value(t);
                    wall_clock.append_null();
                }
                Some(t) => {
                    with_zone.append_null();
                    wall_clock.append_value(t);
                }
                None => {
                    with_zone.append_null();
                    wall_clock.append_null();
                }
            }
        }
        let utc_micros = DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()));
        let with_zone = cast(&with_zone.finish(), &utc_micros)?;
        let with_zone = with_zone.as_primitive::<TimestampMicrosecondType>();
        let wall_clock = cast(
            &wall_clock.finish(),
            &DataType::Timestamp(TimeUnit::Microsecond, None),
        )?;
        let wall_clock = wall_clock.as_primitive::<TimestampMicrosecondType>();
        let mut out = Vec::with_capacity(rows);
        for row in 0..texts.len() {
            out.push(if with_zone.is_valid(row) {
                Some(with_zone.value(row))
            } else if wall_clock.is_valid(row) {
                Some(at_time_zone::instant(wall_clock.value(row), zone)?)
            } else {
                None
            });
        }
        let array: ArrayRef =
            Arc::new(TimestampMicrosecondArray::from(out).with_timezone("+00:00"));
        crate::plan_helpers::columnar_result(array, scalar)
    }
}

/// Whether a timestamp's text names its zone or offset after the time of day
/// (`... 00:00:00-08:00`, `...T00:00:00Z`, `... 12:00 UTC`); a date alone names none.
fn names_a_zone(text: &str) -> bool {
    let text = text.trim();
    let Some(colon) = text.find(':') else {
        return false;
    };
    // The time of day runs from the colon over digits, colons and a fraction.
    let rest = &text[colon..];
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == ':' || c == '.'))
        .unwrap_or(rest.len());
    !rest[end..].trim().is_empty()
}

/// Result batches with their `timestamptz` columns labelled with the session's zone, so
/// they are shown in it.
pub fn label_output(
    schema: arrow::datatypes::SchemaRef,
    batches: Vec<arrow::array::RecordBatch>,
    zone: &str,
) -> Result<(arrow::datatypes::SchemaRef, Vec<arrow::array::RecordBatch>)> {
    let relabel = |t: &DataType| relabelled_type(t, zone);
    if !schema
        .fields()
        .iter()
        .any(|f| relabel(f.data_type()).is_some())
    {
        return Ok((schema, batches));
    }
    let fields: Vec<_> = schema
        .fields()
        .iter()
        .map(|f| match relabel(f.data_type()) {
            Some(t) => Arc::new(f.as_ref().clone().with_data_type(t)),
            None => f.clone(),
        })
        .collect();
    let labelled = Arc::new(arrow::datatypes::Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    ));
    let batches = batches
        .into_iter()
        .map(|b| {
            let columns = b
                .columns()
                .iter()
                .map(|c| match relabel(c.data_type()) {
                    Some(t) => Ok(cast(c, &t)?),
                    None => Ok(c.clone()),
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(arrow::array::RecordBatch::try_new(
                labelled.clone(),
                columns,
            )?)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((labelled, batches))
}

/// `data_type` with every `timestamptz` in it (also inside arrays and structs) labelled
/// with `zone`; `None` if it holds none.
fn relabelled_type(data_type: &DataType, zone: &str) -> Option<DataType> {
    let field = |f: &arrow::datatypes::FieldRef| {
        relabelled_type(f.data_type(), zone).map(|t| Arc::new(f.as_ref().clone().with_data_type(t)))
    };
    match data_type {
        DataType::Timestamp(unit, Some(_)) => Some(DataType::Timestamp(*unit, Some(zone.into()))),
        DataType::List(element) => field(element).map(DataType::List),
        DataType::LargeList(element) => field(element).map(DataType::LargeList),
        DataType::Struct(fields) => {
            let relabelled: Vec<_> = fields.iter().map(field).collect();
            if relabelled.iter().all(Option::is_none) {
                return None;
            }
            Some(DataType::Struct(
                fields
                    .iter()
                    .zip(relabelled)
                    .map(|(f, r)| r.unwrap_or_else(|| f.clone()))
                    .collect(),
            ))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::names_a_zone;

    #[test]
    fn texts_naming_a_zone() {
        assert!(names_a_zone("2022-01-01 00:00:00-08:00"));
        assert!(names_a_zone("2022-01-01T00:00:00Z"));
        assert!(names_a_zone("2024-11-20 20:00:00 UTC"));
        assert!(names_a_zone("2022-01-01 00:00:00.5+05:30"));
        assert!(!names_a_zone("2022-01-01 00:00:00"));
        assert!(!names_a_zone("2022-01-01 00:00:00.123456"));
        assert!(!names_a_zone("2022-01-01"));
    }
}
