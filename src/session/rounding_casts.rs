//! A `numeric` or float cast to an integer type rounds, as in PostgreSQL (`3.7::int` is
//! 4; `2.5::numeric::int` is 3, half away from zero; `2.5::float8::int` is 2, half to
//! even), where Arrow's cast truncates. This analyzer rule, run after type coercion, makes
//! such a cast round first (`round`, whose float form rounds half to even:
//! [`super::integral_decimal`]); the cast's type does not change.

use arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{Cast, Expr, ExprSchemable, LogicalPlan, TryCast};
use datafusion::optimizer::AnalyzerRule;
use std::sync::Arc;

#[derive(Debug)]
pub struct RoundingCasts {
    round: Arc<datafusion::logical_expr::ScalarUDF>,
}

impl RoundingCasts {
    /// With the session's `round` (PostgreSQL's rounding of floats).
    pub fn new(round: Arc<datafusion::logical_expr::ScalarUDF>) -> Self {
        Self { round }
    }
}

impl AnalyzerRule for RoundingCasts {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        crate::plan_helpers::rewrite_expressions(plan, |expr, schema| {
            self.round_first(expr, schema)
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "eddy_rounding_casts"
    }
}

fn has_fraction(t: &DataType) -> bool {
    match t {
        DataType::Decimal128(_, s) | DataType::Decimal256(_, s) => *s > 0,
        other => other.is_floating(),
    }
}

impl RoundingCasts {
    fn round_first(&self, expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
        let (inner, target) = match &expr {
            Expr::Cast(Cast { expr: inner, field }) => (inner, field.data_type()),
            Expr::TryCast(TryCast { expr: inner, field }) => (inner, field.data_type()),
            _ => return Ok(Transformed::no(expr)),
        };
        if !target.is_integer() {
            return Ok(Transformed::no(expr));
        }
        let Ok(source) = inner.get_type(schema) else {
            return Ok(Transformed::no(expr));
        };
        // Already rounded (the rule may see its own output again).
        let rounded_already =
            matches!(inner.as_ref(), Expr::ScalarFunction(f) if f.name() == "round");
        if !has_fraction(&source) || rounded_already {
            return Ok(Transformed::no(expr));
        }
        let rounded = Box::new(Expr::ScalarFunction(ScalarFunction::new_udf(
            self.round.clone(),
            vec![inner.as_ref().clone()],
        )));
        Ok(Transformed::yes(match expr {
            Expr::Cast(Cast { field, .. }) => Expr::Cast(Cast {
                expr: rounded,
                field,
            }),
            Expr::TryCast(TryCast { field, .. }) => Expr::TryCast(TryCast {
                expr: rounded,
                field,
            }),
            other => other,
        }))
    }
}

/// Gives a plain DataFusion context PostgreSQL's rounding as Eddy's sessions have it
/// (this rule, and `round`, `ceil` and `floor` as [`super::integral_decimal`] defines
/// them): the batch references of Eddy's tests and benchmarks compute casts as Eddy does.
pub fn install(ctx: &datafusion::prelude::SessionContext) {
    for f in super::integral_decimal::udfs() {
        ctx.register_udf(f);
    }
    ctx.add_analyzer_rule(Arc::new(RoundingCasts::new(
        super::integral_decimal::round_udf(),
    )));
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn a_plain_context_rounds_casts_to_integers() {
        let ctx = datafusion::prelude::SessionContext::new();
        super::install(&ctx);
        let batches = ctx
            .sql("SELECT CAST(2.5 AS BIGINT) AS a, CAST(0.908 * x AS BIGINT) AS b, CAST(CAST(-2.5 AS DECIMAL(5, 1)) AS INT) AS c FROM (VALUES (1000.6)) AS t(x)")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let text = arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        assert!(text.contains("| 2 | 909 | -3 |"), "{text}");
    }
}
