//! Casts from `jsonb` to other types, as RisingWave defines them: to text, the value's
//! JSON text (a string keeps its quotes: `->>` is the way to get it unquoted); to a
//! number or a boolean, the JSON number or boolean itself, anything else an error
//! (`cannot cast jsonb string to type integer`). A number cast to an integer type rounds
//! half to even (RisingWave keeps JSON numbers as doubles; PostgreSQL would round half
//! away from zero).
//!
//! DataFusion sees `jsonb` as a string, so without this analyzer rule a cast would parse
//! the JSON text as the target type (`'true'` works, `'2.5'` to an integer fails) and a
//! cast to text would keep the `jsonb` type.

use super::functions::udf;
use arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{Cast, Expr, ExprSchemable, LogicalPlan, TryCast};
use datafusion::optimizer::AnalyzerRule;

#[derive(Debug, Default)]
pub struct JsonbCasts;

impl AnalyzerRule for JsonbCasts {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        let rewritten = crate::plan_helpers::rewrite_expressions(plan, rewrite_cast)?;
        if !rewritten.transformed {
            return Ok(rewritten.data);
        }
        // The casts' output fields lost the `jsonb` metadata their input had: every
        // schema above them is computed again.
        rewritten
            .data
            .transform_up_with_subqueries(|node| Ok(Transformed::yes(node.recompute_schema()?)))
            .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "eddy_jsonb_casts"
    }
}

fn rewrite_cast(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let (inner, target) = match &expr {
        Expr::Cast(Cast { expr, field }) | Expr::TryCast(TryCast { expr, field }) => {
            (expr.as_ref(), field.data_type().clone())
        }
        _ => return Ok(Transformed::no(expr)),
    };
    let Ok((_, field)) = inner.to_field(schema) else {
        return Ok(Transformed::no(expr));
    };
    if !super::is_jsonb(&field) {
        return Ok(Transformed::no(expr));
    }
    let call = |name: &str, args: Vec<Expr>| {
        Expr::ScalarFunction(ScalarFunction::new_udf(udf(name), args))
    };
    let converted = match &target {
        DataType::Utf8 => return Ok(Transformed::yes(call("jsonb_text", vec![inner.clone()]))),
        DataType::LargeUtf8 | DataType::Utf8View => call("jsonb_text", vec![inner.clone()]),
        other => match target_name(other) {
            Some(name) => call(
                "jsonb_scalar",
                vec![
                    inner.clone(),
                    Expr::Literal(ScalarValue::Utf8(Some(name.to_string())), None),
                ],
            ),
            None => return Ok(Transformed::no(expr)),
        },
    };
    Ok(Transformed::yes(match expr {
        Expr::TryCast(c) => Expr::TryCast(TryCast::new_from_field(Box::new(converted), c.field)),
        Expr::Cast(c) => Expr::Cast(Cast::new_from_field(Box::new(converted), c.field)),
        other => other,
    }))
}

/// PostgreSQL's name of a type a `jsonb` scalar casts to.
fn target_name(data_type: &DataType) -> Option<&'static str> {
    Some(match data_type {
        DataType::Boolean => "boolean",
        DataType::Int16 => "smallint",
        DataType::Int32 => "integer",
        DataType::Int64 => "bigint",
        DataType::Float32 => "real",
        DataType::Float64 => "double precision",
        DataType::Decimal128(..) | DataType::Decimal256(..) => "numeric",
        _ => return None,
    })
}
