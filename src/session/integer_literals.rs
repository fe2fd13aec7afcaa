//! Numbers typed as PostgreSQL types them (this module's rules; the others follow).
//!
//! Integer literals typed as PostgreSQL types them: `integer` when the value fits in 32
//! bits, `bigint` otherwise. DataFusion makes every integer literal a `bigint`, so
//! `SELECT 1` reached clients as `int8` and `int_column + 1` was a `bigint` (PostgreSQL
//! and RisingWave: `integer`, and `2147483647 + 1` is out of range).
//!
//! Run before type coercion (and before Eddy's rules that type aggregates), over every
//! expression of the plan but these, which keep DataFusion's types: a literal that is
//! itself an aggregate's or window function's argument (`count(1)` is how `count(*)` is
//! planned; `lag(x, 1)`, `ntile(4)` take a `bigint`), and the nodes whose schema is not
//! derived from their expressions (`VALUES`, `LIMIT`, DML, `UNION`, extension nodes).

use arrow::datatypes::DataType;
use datafusion::common::DFSchema;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{BinaryExpr, Expr, ExprSchemable, LogicalPlan, Operator, cast};
use datafusion::optimizer::AnalyzerRule;

#[derive(Debug, Default)]
pub struct IntegerLiterals;

impl AnalyzerRule for IntegerLiterals {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        let skip = |node: &LogicalPlan| {
            keeps_its_types(node) || matches!(node, LogicalPlan::Limit(_) | LogicalPlan::Union(_))
        };
        rewrite_expressions(plan, skip, |expr, _| narrow_literals(expr))
    }

    fn name(&self) -> &str {
        "eddy_integer_literals"
    }
}

/// Nodes whose schema is not derived from their expressions (or that are not Eddy's to
/// retype): both rules leave them alone.
fn keeps_its_types(node: &LogicalPlan) -> bool {
    matches!(
        node,
        LogicalPlan::Values(_)
            | LogicalPlan::Dml(_)
            | LogicalPlan::Ddl(_)
            | LogicalPlan::Extension(_)
            | LogicalPlan::TableScan(_)
    )
}

/// The expression with its 32-bit integer literals typed `Int32`, outside aggregate and
/// window function arguments.
fn narrow_literals(expr: Expr) -> Result<Transformed<Expr>> {
    expr.transform_down(|e| match e {
        Expr::AggregateFunction(mut aggregate) => {
            let changed = narrow_arguments(&mut aggregate.params.args)?;
            Ok(Transformed::new(
                Expr::AggregateFunction(aggregate),
                changed,
                TreeNodeRecursion::Jump,
            ))
        }
        Expr::WindowFunction(mut window) => {
            let changed = narrow_arguments(&mut window.params.args)?;
            Ok(Transformed::new(
                Expr::WindowFunction(window),
                changed,
                TreeNodeRecursion::Jump,
            ))
        }
        Expr::Literal(ScalarValue::Int64(Some(v)), metadata) => match i32::try_from(v) {
            Ok(v) => Ok(Transformed::yes(Expr::Literal(
                ScalarValue::Int32(Some(v)),
                metadata,
            ))),
            Err(_) => Ok(Transformed::no(Expr::Literal(
                ScalarValue::Int64(Some(v)),
                metadata,
            ))),
        },
        other => Ok(Transformed::no(other)),
    })
}

/// An aggregate's or window function's arguments: a literal argument keeps its type,
/// literals inside the others are narrowed (`sum(int_column + 1)` sums integers).
fn narrow_arguments(args: &mut [Expr]) -> Result<bool> {
    let mut changed = false;
    for arg in args.iter_mut() {
        if matches!(arg, Expr::Literal(..)) {
            continue;
        }
        let narrowed = narrow_literals(arg.clone())?;
        changed |= narrowed.transformed;
        *arg = narrowed.data;
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::logical_expr::{col, lit};

    #[test]
    fn literals_that_fit_in_32_bits_become_integers() {
        let narrowed = narrow_literals(col("a") + lit(1i64) + lit(5_000_000_000i64)).unwrap();
        assert!(narrowed.transformed);
        assert_eq!(narrowed.data, col("a") + lit(1i32) + lit(5_000_000_000i64));
    }

    #[test]
    fn a_literal_argument_of_an_aggregate_keeps_its_type() {
        use datafusion::functions_aggregate::{count::count, sum::sum};
        let narrowed = narrow_literals(count(lit(1i64))).unwrap();
        assert!(!narrowed.transformed);
        assert_eq!(narrowed.data, count(lit(1i64)));
        let narrowed = narrow_literals(sum(col("a") + lit(1i64))).unwrap();
        assert_eq!(narrowed.data, sum(col("a") + lit(1i32)));
    }
}

/// `integer` and `smallint` arithmetic that fails on overflow, as in PostgreSQL
/// (`2147483647 + 1` is "integer out of range"), where DataFusion's wraps around: after
/// type coercion, `a + b`, `a - b` and `a * b` of two 32- or 16-bit integers are computed
/// as `bigint`s (which cannot overflow there) and cast back, and the cast fails when the
/// result does not fit.
#[derive(Debug, Default)]
pub struct CheckedIntegerArithmetic;

impl AnalyzerRule for CheckedIntegerArithmetic {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        rewrite_expressions(plan, keeps_its_types, |expr, schema| {
            expr.transform_up(|e| widen_integer_arithmetic(e, schema))
        })
    }

    fn name(&self) -> &str {
        "eddy_checked_integer_arithmetic"
    }
}

/// `real` arithmetic with an integer or a `numeric` is `double precision`, as in
/// PostgreSQL and RisingWave (DataFusion computes it as a `real`). Before type coercion.
#[derive(Debug, Default)]
pub struct RealWithExactNumbers;

impl AnalyzerRule for RealWithExactNumbers {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        rewrite_expressions(plan, keeps_its_types, |expr, schema| {
            expr.transform_up(|e| promote_real_arithmetic(e, schema))
        })
    }

    fn name(&self) -> &str {
        "eddy_real_with_exact_numbers"
    }
}

/// Rewrites every expression of the plan's nodes but the `skip`ped ones with `rewrite`,
/// given the columns the expression reads, keeping output column names (nodes above
/// refer to them by name).
fn rewrite_expressions(
    plan: LogicalPlan,
    skip: impl Fn(&LogicalPlan) -> bool,
    rewrite: impl Fn(Expr, &DFSchema) -> Result<Transformed<Expr>>,
) -> Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|node| {
        if skip(&node) {
            return Ok(Transformed::no(node));
        }
        // The columns the node's expressions read: a join's both sides, otherwise its
        // (first) input's.
        let schema = match &node {
            LogicalPlan::Join(join) => Some(join.schema.clone()),
            _ => node.inputs().first().map(|input| input.schema().clone()),
        };
        let Some(schema) = schema else {
            return Ok(Transformed::no(node));
        };
        let names = NamePreserver::new(&node);
        let rewritten = node.map_expressions(|expr| {
            let name = names.save(&expr);
            rewrite(expr, &schema)?.map_data(|e| Ok(name.restore(e)))
        })?;
        if rewritten.transformed {
            rewritten.map_data(|node| node.recompute_schema())
        } else {
            Ok(rewritten)
        }
    })
    .map(|t| t.data)
}

/// The operands of `expr` and their types when it is an arithmetic `op` of `ops`.
fn arithmetic_operands<'a>(
    expr: &'a Expr,
    schema: &DFSchema,
    ops: &[Operator],
) -> Option<(&'a Expr, Operator, &'a Expr, DataType, DataType)> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = expr else {
        return None;
    };
    if !ops.contains(op) {
        return None;
    }
    let left_type = left.get_type(schema).ok()?;
    let right_type = right.get_type(schema).ok()?;
    Some((left, *op, right, left_type, right_type))
}

/// `l op r` of a `Float32` and an integer or decimal as the `Float64`s of both.
fn promote_real_arithmetic(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    use Operator::*;
    let Some((left, op, right, left_type, right_type)) =
        arithmetic_operands(&expr, schema, &[Plus, Minus, Multiply, Divide, Modulo])
    else {
        return Ok(Transformed::no(expr));
    };
    let exact = |t: &DataType| {
        t.is_integer() || matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..))
    };
    let mixed = (left_type == DataType::Float32 && exact(&right_type))
        || (exact(&left_type) && right_type == DataType::Float32);
    if !mixed {
        return Ok(Transformed::no(expr));
    }
    Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
        Box::new(cast(left.clone(), DataType::Float64)),
        op,
        Box::new(cast(right.clone(), DataType::Float64)),
    ))))
}

/// `l op r` of two `Int32`s (or `Int16`s) as `CAST(CAST(l AS Int64) op CAST(r AS Int64)
/// AS Int32)`.
fn widen_integer_arithmetic(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    use Operator::*;
    let Some((left, op, right, left_type, right_type)) =
        arithmetic_operands(&expr, schema, &[Plus, Minus, Multiply])
    else {
        return Ok(Transformed::no(expr));
    };
    let narrow = match (&left_type, &right_type) {
        (DataType::Int32, DataType::Int32) => DataType::Int32,
        (DataType::Int16, DataType::Int16) => DataType::Int16,
        _ => return Ok(Transformed::no(expr)),
    };
    let wide = Expr::BinaryExpr(BinaryExpr::new(
        Box::new(cast(left.clone(), DataType::Int64)),
        op,
        Box::new(cast(right.clone(), DataType::Int64)),
    ));
    Ok(Transformed::yes(cast(wide, narrow)))
}
