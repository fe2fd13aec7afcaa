//! Aggregates of integers typed as PostgreSQL and RisingWave type them, where DataFusion
//! differs: `sum` of `bigint` is a `numeric` (it cannot overflow), and `avg` of any
//! integer is a `numeric`, not a `double precision`, and of a `numeric` is RisingWave's
//! quotient, not DataFusion's (4 more digits than the input): RisingWave divides the
//! exact sum by the count as a decimal (`avg` of 2 and 3 is `2.50`, of 1, 2 and 2 is
//! `1.6666666666666666666666666667`).
//!
//! A `sum` of `bigint` becomes the sum of its argument cast to `numeric` (a cast does not
//! change the column's name).
//! Run before type coercion, this rule replaces every `avg(x)` of an integer or decimal `x` in an
//! aggregate by `sum(x::numeric)` and `count(x)` (with the same `DISTINCT` and `FILTER`)
//! and puts a projection over the aggregate computing their quotient under the
//! average's name. Batch queries and materialized views then need nothing of their own:
//! a view keeps the sum and the count as it keeps any other, and divides on the way out.
//! `avg(x) OVER (...)` of integers is split the same way, into `sum` and `count` over
//! the same window.

use crate::catalog::types::{AVERAGE_SCALE, average_type};
use arrow::array::{Array, ArrayRef, AsArray, Decimal256Builder};
use arrow::datatypes::{DataType, Decimal128Type, Int64Type, i256};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{Column, DFSchema, DFSchemaRef, Result};
use datafusion::functions_aggregate::count::count_udaf;
use datafusion::functions_aggregate::sum::sum_udaf;
use datafusion::logical_expr::expr::{
    AggregateFunction, ScalarFunction, WindowFunction, WindowFunctionDefinition,
};
use datafusion::logical_expr::{
    Aggregate, AggregateUDF, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Projection,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility, Window,
};
use datafusion::optimizer::AnalyzerRule;
use rust_decimal::Decimal;
use std::sync::{Arc, LazyLock};

/// The exact type the sum of integers is taken in.
const SUM_TYPE: DataType = DataType::Decimal128(38, 0);

#[derive(Debug, Default)]
pub struct IntegerAggregates;

impl AnalyzerRule for IntegerAggregates {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        let split = plan.transform_up_with_subqueries(|node| match node {
            LogicalPlan::Aggregate(aggregate) => {
                let widened = widen_aggregate_sums(aggregate)?;
                let split = split_averages(widened.data)?;
                Ok(Transformed::new_transformed(
                    split.data,
                    widened.transformed || split.transformed,
                ))
            }
            LogicalPlan::Window(window) => {
                let widened = widen_window_sums(window)?;
                let split = split_window_averages(widened.data)?;
                Ok(Transformed::new_transformed(
                    split.data,
                    widened.transformed || split.transformed,
                ))
            }
            other => Ok(Transformed::no(other)),
        })?;
        if !split.transformed {
            return Ok(split.data);
        }
        // The nodes above typed the changed aggregates as DataFusion does.
        split
            .data
            .transform_up_with_subqueries(|node| node.recompute_schema().map(Transformed::yes))
            .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "eddy_integer_aggregates"
    }
}

/// `sum(x)` of a `bigint` `x` as `sum(x::numeric)`, under an alias or not.
fn widened_sum(e: &Expr, schema: &DFSchema) -> Result<Option<Expr>> {
    let is_bigint = |arg: &Expr| arg.get_type(schema).is_ok_and(|t| t == DataType::Int64);
    Ok(match e {
        Expr::Alias(alias) => widened_sum(&alias.expr, schema)?
            .map(|inner| inner.alias_qualified(alias.relation.clone(), alias.name.clone())),
        Expr::AggregateFunction(call)
            if call.func.name() == "sum"
                && matches!(call.params.args.as_slice(), [arg] if is_bigint(arg)) =>
        {
            let mut call = call.clone();
            call.params.args[0] = call.params.args[0].clone().cast_to(&SUM_TYPE, schema)?;
            Some(Expr::AggregateFunction(call))
        }
        Expr::WindowFunction(call)
            if matches!(&call.fun, WindowFunctionDefinition::AggregateUDF(f) if f.name() == "sum")
                && matches!(call.params.args.as_slice(), [arg] if is_bigint(arg)) =>
        {
            let mut call = call.clone();
            call.params.args[0] = call.params.args[0].clone().cast_to(&SUM_TYPE, schema)?;
            Some(Expr::WindowFunction(call))
        }
        _ => None,
    })
}

/// Every expression of `exprs` with its `bigint` sums widened; `None` if there is none.
fn widen_sums(exprs: &[Expr], schema: &DFSchema) -> Result<Option<Vec<Expr>>> {
    let mut any = false;
    let widened = exprs
        .iter()
        .map(|e| {
            Ok(match widened_sum(e, schema)? {
                Some(w) => {
                    any = true;
                    w
                }
                None => e.clone(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(any.then_some(widened))
}

fn widen_aggregate_sums(aggregate: Aggregate) -> Result<Transformed<Aggregate>> {
    match widen_sums(&aggregate.aggr_expr, aggregate.input.schema())? {
        Some(aggr_expr) => Ok(Transformed::yes(Aggregate::try_new(
            aggregate.input,
            aggregate.group_expr,
            aggr_expr,
        )?)),
        None => Ok(Transformed::no(aggregate)),
    }
}

fn widen_window_sums(window: Window) -> Result<Transformed<Window>> {
    match widen_sums(&window.window_expr, window.input.schema())? {
        Some(window_expr) => Ok(Transformed::yes(Window::try_new(
            window_expr,
            window.input,
        )?)),
        None => Ok(Transformed::no(window)),
    }
}

/// What one aggregate expression of the original node becomes.
enum Output {
    /// Kept as it was, at this index of the new expression list.
    Kept(usize),
    /// An average: the indexes of its sum and its count.
    Average { sum: usize, count: usize },
}

/// A node's aggregate (or window) expressions with each integer average replaced by
/// its sum and count: the new list, and where each original expression went. `None`
/// when there is no integer average.
fn split_expressions(
    exprs: &[Expr],
    sum_and_count: impl Fn(&Expr) -> Result<Option<(Expr, Expr)>>,
) -> Result<Option<(Vec<Expr>, Vec<Output>)>> {
    let mut new_exprs: Vec<Expr> = Vec::new();
    // An expression the query already has (`count(x)` next to `avg(x)`) is computed
    // once: a node's output columns are named by their expressions, and one name is one
    // computation.
    let position = |e: Expr, list: &mut Vec<Expr>| {
        let name = e.schema_name().to_string();
        match list
            .iter()
            .position(|x| x.schema_name().to_string() == name)
        {
            Some(i) => i,
            None => {
                list.push(e);
                list.len() - 1
            }
        }
    };
    let mut outputs = Vec::with_capacity(exprs.len());
    let mut any = false;
    for e in exprs {
        match sum_and_count(e)? {
            Some((sum, count)) => {
                any = true;
                outputs.push(Output::Average {
                    sum: position(sum, &mut new_exprs),
                    count: position(count, &mut new_exprs),
                });
            }
            None => outputs.push(Output::Kept(position(e.clone(), &mut new_exprs))),
        }
    }
    Ok(any.then_some((new_exprs, outputs)))
}

/// The projection over the rebuilt node giving the original node's columns: its first
/// `leading` columns (group keys, or a window's input) as they are, each average as the
/// quotient of its sum and count.
fn project_averages(
    original: &DFSchemaRef,
    leading: usize,
    outputs: &[Output],
    split: LogicalPlan,
) -> Result<Transformed<LogicalPlan>> {
    let split_schema = split.schema().clone();
    let column_of = |index: usize| {
        let (qualifier, field) = split_schema.qualified_field(leading + index);
        Expr::Column(Column::new(qualifier.cloned(), field.name()))
    };
    let mut projection = Vec::with_capacity(original.fields().len());
    for (i, (qualifier, field)) in original.iter().enumerate() {
        let expr = if i < leading {
            Expr::Column(Column::new(qualifier.cloned(), field.name()))
        } else {
            match outputs[i - leading] {
                Output::Kept(index) => column_of(index),
                Output::Average { sum, count } => Expr::ScalarFunction(ScalarFunction::new_udf(
                    quotient_udf(),
                    vec![column_of(sum), column_of(count)],
                )),
            }
        };
        projection.push(expr.alias_qualified(qualifier.cloned(), field.name()));
    }
    let projection = Projection::try_new(projection, Arc::new(split))?;
    Ok(Transformed::yes(LogicalPlan::Projection(projection)))
}

/// The name of the numeric sum standing in for an average: a cast does not show in a
/// name, and `sum(x)` may be in the query too, summing in the integer type.
fn sum_name(average: &Expr) -> String {
    format!("{} numeric sum", average.schema_name())
}

/// The numeric sum (named after the average) and the count standing in for `average`
/// when its one argument is an integer or a decimal; `None` otherwise (floats keep
/// DataFusion's `double precision` average, as in PostgreSQL). `call_with` makes the same call
/// (its `DISTINCT`, `FILTER`, window) of another aggregate function on another argument.
fn integer_sum_and_count(
    average: &Expr,
    args: &[Expr],
    schema: &DFSchema,
    call_with: impl Fn(Arc<AggregateUDF>, Expr) -> Expr,
) -> Result<Option<(Expr, Expr)>> {
    let [arg] = args else {
        return Ok(None);
    };
    let sum_type = match arg.get_type(schema) {
        Ok(t) if t.is_integer() => SUM_TYPE,
        Ok(DataType::Decimal128(_, scale)) if (0..=AVERAGE_SCALE).contains(&scale) => {
            DataType::Decimal128(38, scale)
        }
        _ => return Ok(None),
    };
    let sum = call_with(sum_udaf(), arg.clone().cast_to(&sum_type, schema)?);
    let count = call_with(count_udaf(), arg.clone());
    Ok(Some((sum.alias(sum_name(average)), count)))
}

fn split_averages(aggregate: Aggregate) -> Result<Transformed<LogicalPlan>> {
    let input_schema = aggregate.input.schema().clone();
    let sum_and_count = |e: &Expr| -> Result<Option<(Expr, Expr)>> {
        let Some(call) = average_call(e) else {
            return Ok(None);
        };
        let params = &call.params;
        integer_sum_and_count(e, &params.args, &input_schema, |func, arg| {
            Expr::AggregateFunction(AggregateFunction::new_udf(
                func,
                vec![arg],
                params.distinct,
                params.filter.clone(),
                params.order_by.clone(),
                params.null_treatment,
            ))
        })
    };
    let Some((aggregates, outputs)) = split_expressions(&aggregate.aggr_expr, sum_and_count)?
    else {
        return Ok(Transformed::no(LogicalPlan::Aggregate(aggregate)));
    };
    let original = aggregate.schema.clone();
    let leading = original.fields().len() - aggregate.aggr_expr.len();
    let split = Aggregate::try_new(aggregate.input, aggregate.group_expr, aggregates)?;
    project_averages(&original, leading, &outputs, LogicalPlan::Aggregate(split))
}

/// `avg(x) OVER (...)` of integers, the same way: `sum` and `count` over the same window.
fn split_window_averages(window: Window) -> Result<Transformed<LogicalPlan>> {
    let input_schema = window.input.schema().clone();
    let sum_and_count = |e: &Expr| -> Result<Option<(Expr, Expr)>> {
        let Some(call) = window_average_call(e) else {
            return Ok(None);
        };
        integer_sum_and_count(e, &call.params.args, &input_schema, |func, arg| {
            let mut params = call.params.clone();
            params.args = vec![arg];
            Expr::WindowFunction(Box::new(WindowFunction {
                fun: WindowFunctionDefinition::AggregateUDF(func),
                params,
            }))
        })
    };
    let Some((window_exprs, outputs)) = split_expressions(&window.window_expr, sum_and_count)?
    else {
        return Ok(Transformed::no(LogicalPlan::Window(window)));
    };
    let original = window.schema.clone();
    let leading = input_schema.fields().len();
    let split = Window::try_new(window_exprs, window.input)?;
    project_averages(&original, leading, &outputs, LogicalPlan::Window(split))
}

/// The `avg` call an aggregate expression is, under an alias or not.
fn average_call(e: &Expr) -> Option<&AggregateFunction> {
    match e {
        Expr::Alias(alias) => average_call(&alias.expr),
        Expr::AggregateFunction(call) if call.func.name() == "avg" => Some(call),
        _ => None,
    }
}

/// The `avg(...) OVER (...)` a window expression is, under an alias or not.
fn window_average_call(e: &Expr) -> Option<&WindowFunction> {
    match e {
        Expr::Alias(alias) => window_average_call(&alias.expr),
        Expr::WindowFunction(call) if matches!(&call.fun, WindowFunctionDefinition::AggregateUDF(f) if f.name() == "avg") => {
            Some(call)
        }
        _ => None,
    }
}

/// `sum / count` as RisingWave divides them ([`average_type`] of the sum's scale).
pub fn quotient_udf() -> Arc<ScalarUDF> {
    static UDF: LazyLock<Arc<ScalarUDF>> =
        LazyLock::new(|| Arc::new(ScalarUDF::new_from_impl(AverageQuotient::new())));
    UDF.clone()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct AverageQuotient {
    signature: Signature,
}

impl AverageQuotient {
    fn new() -> Self {
        Self {
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for AverageQuotient {
    fn name(&self) -> &str {
        "eddy_average_quotient"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args {
            [DataType::Decimal128(_, scale), DataType::Int64] => Ok(average_type(*scale)),
            other => datafusion::common::internal_err!("an average of {other:?}"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let sums = arrays[0].as_primitive::<Decimal128Type>();
        let counts = arrays[1].as_primitive::<Int64Type>();
        let sum_scale = sums.scale();
        let mut out = Decimal256Builder::with_capacity(rows);
        for row in 0..rows {
            if sums.is_null(row) || counts.is_null(row) || counts.value(row) == 0 {
                out.append_null();
            } else {
                out.append_value(average(sums.value(row), sum_scale, counts.value(row)));
            }
        }
        let DataType::Decimal256(precision, scale) = average_type(sum_scale) else {
            unreachable!("an average is a 256-bit decimal")
        };
        let array: ArrayRef = Arc::new(out.finish().with_precision_and_scale(precision, scale)?);
        Ok(ColumnarValue::Array(array))
    }
}

/// The average of a sum at `sum_scale`, at scale 28: RisingWave's quotient (a 96-bit
/// decimal division) when the sum fits one, else the quotient rounded half away from
/// zero at scale 28.
fn average(sum: i128, sum_scale: i8, count: i64) -> i256 {
    let ten = i256::from_i128(10);
    if let Ok(sum) = Decimal::try_from_i128_with_scale(sum, sum_scale as u32)
        && let Some(quotient) = sum.checked_div(Decimal::from(count))
    {
        let shift = ten.wrapping_pow(AVERAGE_SCALE as u32 - quotient.scale());
        return i256::from_i128(quotient.mantissa()).wrapping_mul(shift);
    }
    let (numerator, count) = (
        i256::from_i128(sum).wrapping_mul(ten.wrapping_pow((AVERAGE_SCALE - sum_scale) as u32)),
        i256::from(count),
    );
    let quotient = numerator.wrapping_div(count);
    let remainder = numerator.wrapping_sub(quotient.wrapping_mul(count));
    let twice = remainder.wrapping_mul(i256::from_i128(2)).wrapping_abs();
    if twice >= count.wrapping_abs() {
        quotient.wrapping_add(if numerator.is_negative() != count.is_negative() {
            i256::MINUS_ONE
        } else {
            i256::ONE
        })
    } else {
        quotient
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::types::display_decimal256;
    use crate::pg_text::format_decimal;

    fn shown(sum: i128, count: i64) -> String {
        shown_at(sum, 0, count)
    }

    fn shown_at(sum: i128, sum_scale: i8, count: i64) -> String {
        let DataType::Decimal256(p, s) = average_type(sum_scale) else {
            unreachable!()
        };
        let (value, scale) = display_decimal256(average(sum, sum_scale, count), p, s).unwrap();
        format_decimal(value, scale)
    }

    #[test]
    fn averages_of_decimals_keep_at_least_the_sum_scale() {
        assert_eq!(shown_at(105, 2, 1), "1.05");
        assert_eq!(shown_at(200, 2, 2), "1.00");
        assert_eq!(shown_at(1951, 2, 2), "9.7550");
        assert_eq!(shown_at(725, 2, 1), "7.25");
        assert_eq!(shown_at(100, 2, 3), "0.3333333333333333333333333333");
    }

    #[test]
    fn averages_show_as_risingwave_shows_them() {
        // Figures from RisingWave's Nexmark q17 and q4 results.
        assert_eq!(shown(178_092_420, 24), "7420517.50");
        assert_eq!(shown(96_653_255, 4), "24163313.75");
        assert_eq!(shown(190, 1), "190");
        assert_eq!(shown(789_590, 3), "263196.66666666666666666666667");
        assert_eq!(shown(25_407_484, 3), "8469161.333333333333333333333");
        assert_eq!(shown(210_766, 2), "105383");
        assert_eq!(shown(78_284_993, 5), "15656998.60");
        assert_eq!(shown(1, 8), "0.125");
        assert_eq!(shown(1, 16), "0.0625");
        assert_eq!(shown(1, 1024), "0.00097656250");
        assert_eq!(shown(-5, 2), "-2.50");
        assert_eq!(shown(1, 3), "0.3333333333333333333333333333");
    }

    #[test]
    fn sums_beyond_96_bits_are_rounded_at_scale_28() {
        let huge = 10i128.pow(30);
        assert_eq!(
            average(huge, 0, 3),
            i256::from_string(&"3".repeat(58)).unwrap()
        );
        assert_eq!(
            average(-2 * huge, 0, 3),
            i256::from_string(&format!("-{}7", "6".repeat(57))).unwrap()
        );
    }
}
