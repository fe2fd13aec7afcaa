//! Numeric division with PostgreSQL's precision.
//!
//! Arrow divides decimals to the dividend's scale plus 4 digits, so `1 / 3.0` would be
//! `0.3333`; PostgreSQL gives a quotient at least 16 significant digits. This analyzer
//! rule, run after type coercion, widens the dividend's scale (as far as its precision
//! allows without overflowing the multiplication Arrow does first) so that the quotient
//! has 16 fractional digits. The quotient is typed as a widest-precision decimal, so it
//! is shown without trailing zeros (`7.0 / 2` is `3.5`, as RisingWave shows it) like
//! other values computed from unconstrained `numeric`.

use crate::catalog::types::DEFAULT_NUMERIC_SCALE;
use arrow::datatypes::{DECIMAL128_MAX_PRECISION, DataType};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::{BinaryExpr, Cast, Expr, ExprSchemable, LogicalPlan, Operator};
use datafusion::optimizer::AnalyzerRule;

/// Fractional digits of a quotient of decimals (PostgreSQL's minimum significant digits).
const QUOTIENT_SCALE: i8 = 16;
/// The digits Arrow adds to the dividend's scale for the quotient.
const ARROW_DIVISION_EXTRA_SCALE: i8 = 4;

#[derive(Debug, Default)]
pub struct NumericDivision;

impl AnalyzerRule for NumericDivision {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            let schema = merged_input_schema(&node);
            let rewritten =
                node.map_expressions(|e| e.transform_up(|e| widen_dividend(e, &schema)))?;
            // The node's output types changed with its expressions.
            if rewritten.transformed {
                rewritten.map_data(|p| p.recompute_schema())
            } else {
                Ok(rewritten)
            }
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "eddy_numeric_division"
    }
}

/// The schema a node's expressions are evaluated against: its inputs' columns.
pub(super) fn merged_input_schema(node: &LogicalPlan) -> DFSchema {
    let mut schema = DFSchema::empty();
    for input in node.inputs() {
        schema.merge(input.schema());
    }
    schema
}

fn widen_dividend(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let Expr::BinaryExpr(BinaryExpr {
        left,
        op: Operator::Divide,
        right,
    }) = &expr
    else {
        return Ok(Transformed::no(expr));
    };
    let (Ok(DataType::Decimal128(p1, s1)), Ok(DataType::Decimal128(_, s2))) =
        (left.get_type(schema), right.get_type(schema))
    else {
        return Ok(Transformed::no(expr));
    };
    // Arrow multiplies the dividend by 10^(4 + s2) before dividing: its integer digits
    // plus the new scale plus those must fit in 38 digits.
    let integer_digits = p1 as i8 - s1;
    let room = DECIMAL128_MAX_PRECISION as i8 - integer_digits - ARROW_DIVISION_EXTRA_SCALE - s2;
    let scale = (QUOTIENT_SCALE - ARROW_DIVISION_EXTRA_SCALE).min(room);
    if scale <= s1 {
        return Ok(Transformed::no(expr));
    }
    let precision = ((integer_digits + scale) as u8).min(DECIMAL128_MAX_PRECISION);
    let widened = Expr::Cast(Cast::new(
        left.clone(),
        DataType::Decimal128(precision, scale),
    ));
    let quotient = Expr::BinaryExpr(BinaryExpr::new(
        Box::new(widened),
        Operator::Divide,
        right.clone(),
    ));
    let quotient_scale = (scale + ARROW_DIVISION_EXTRA_SCALE).max(DEFAULT_NUMERIC_SCALE);
    Ok(Transformed::yes(Expr::Cast(Cast::new(
        Box::new(quotient),
        DataType::Decimal128(DECIMAL128_MAX_PRECISION, quotient_scale),
    ))))
}
