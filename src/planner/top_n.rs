//! Planning the queries a [`TopN`] computes, from the shapes DataFusion gives them:
//!
//! - `ORDER BY ... LIMIT n [OFFSET m]`: a `Limit` over a `Sort`, or a `Sort` with a fetch;
//! - `ROW_NUMBER()`, `RANK()` or `DENSE_RANK() OVER (PARTITION BY ... ORDER BY ...)`
//!   under a filter that bounds it (`<= n`, `< n`, `= n`, with lower bounds too): a
//!   `Filter` over the `Window` node, perhaps through projections of plain columns;
//! - `DISTINCT ON (...) ... ORDER BY ...` (and `first_value(x ORDER BY ...)` per group),
//!   which DataFusion turns into an aggregate of `first_value`s sharing one order: the
//!   first row of each group.
//!
//! A top-N keeps its state by partition, behind a hash exchange on the partition key
//! (a single subtask without one), like an aggregate.

use super::{Node, PlanContext, filter_node, physical, project_node, unsupported, visit};
use crate::error::Result;
use crate::stream::graph::{OperatorFactory, OperatorSpec};
use crate::stream::operators::Operator;
use crate::stream::operators::top_n::{RankKind, TopN, TopNSpec};
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, SchemaRef};
use arrow::row::SortField;
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::logical_expr::logical_plan::{Aggregate, Filter, Limit};
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{
    BinaryExpr, Expr, ExprSchemable, FetchType, LogicalPlan, LogicalPlanBuilder,
    Operator as BinaryOp, SkipType, SortExpr,
};
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;

/// What a top-N computes, before its input is planned.
struct TopNParts<'a> {
    partition: &'a [Expr],
    order: &'a [SortExpr],
    rank: RankKind,
    ranks: (u64, u64),
    /// The rank is the output's last column.
    rank_column: bool,
}

/// `LIMIT` (with `OFFSET`) over an `ORDER BY`.
pub(super) fn limit(limit: &Limit, ctx: &PlanContext) -> Result<Node> {
    let (SkipType::Literal(skip), FetchType::Literal(fetch)) =
        (limit.get_skip_type()?, limit.get_fetch_type()?)
    else {
        return Err(unsupported("LIMIT or OFFSET with a non-constant count"));
    };
    let Some(fetch) = fetch else {
        return Err(unsupported("OFFSET without LIMIT"));
    };
    match limit.input.as_ref() {
        LogicalPlan::Sort(sort) => limit_node(&sort.expr, skip, fetch, &sort.input, ctx),
        input => {
            // Without `ORDER BY` any `n` rows would do; RisingWave's answer, which keeps
            // the view deterministic, is the first `n` in the order of the columns
            // (the stream key breaking the remaining ties).
            if input.schema().fields().is_empty() {
                return columnless_limit(skip, fetch, input, ctx);
            }
            limit_node(&in_column_order(input.schema()), skip, fetch, input, ctx)
        }
    }
}

/// A `LIMIT` over rows of no columns (`SELECT 1 FROM (SELECT x FROM t LIMIT n)`, whose
/// `x` the optimizer prunes): the top-N keeps rows, so it gets one constant column to
/// keep, every row tying on it (the stream key decides), and loses it after.
fn columnless_limit(
    skip: usize,
    fetch: usize,
    input: &LogicalPlan,
    ctx: &PlanContext,
) -> Result<Node> {
    let tie = Expr::Literal(ScalarValue::Boolean(Some(true)), None).alias("__eddy_tie");
    let with_tie = LogicalPlanBuilder::from(input.clone())
        .project(vec![tie])?
        .build()?;
    let order = in_column_order(with_tie.schema());
    let node = limit_node(&order, skip, fetch, &with_tie, ctx)?;
    project_node(
        &[],
        with_tie.schema(),
        vec![],
        Arc::new(input.schema().as_arrow().clone()),
        node,
    )
}

/// Every column of `schema`, ascending, in the schema's order.
fn in_column_order(schema: &DFSchema) -> Vec<SortExpr> {
    schema
        .columns()
        .into_iter()
        .map(|c| SortExpr::new(Expr::Column(c), true, false))
        .collect()
}

/// The rows `skip + 1 ..= skip + fetch` of `input` in the order `sort`.
pub(super) fn limit_node(
    sort: &[SortExpr],
    skip: usize,
    fetch: usize,
    input: &LogicalPlan,
    ctx: &PlanContext,
) -> Result<Node> {
    let parts = TopNParts {
        partition: &[],
        order: sort,
        rank: RankKind::RowNumber,
        ranks: (skip as u64 + 1, skip as u64 + fetch as u64),
        rank_column: false,
    };
    top_n_node(
        parts,
        input,
        Arc::new(input.schema().as_arrow().clone()),
        ctx,
    )
}

/// A filter that bounds a ranking window function: the top-N it asks for, then the
/// projections between the two and what is left of the filter. `None` when the filter
/// is not over such a function, or leaves its rank unbounded.
pub(super) fn ranking_filter(filter: &Filter, ctx: &PlanContext) -> Result<Option<Node>> {
    // Projections of plain columns may sit between the filter and the window.
    let mut projections = Vec::new();
    let mut plan = filter.input.as_ref();
    loop {
        match plan {
            LogicalPlan::Projection(p) if p.expr.iter().all(is_column) => {
                projections.push(p);
                plan = &p.input;
            }
            LogicalPlan::SubqueryAlias(a) => plan = &a.input,
            _ => break,
        }
    }
    let LogicalPlan::Window(window) = plan else {
        return Ok(None);
    };
    let [window_expr] = window.window_expr.as_slice() else {
        return Ok(None);
    };
    let Expr::WindowFunction(function) = unalias(window_expr) else {
        return Ok(None);
    };
    let rank = match function.fun.name() {
        "row_number" => RankKind::RowNumber,
        "rank" => RankKind::Rank,
        "dense_rank" => RankKind::DenseRank,
        _ => return Ok(None),
    };
    let rank_name = window_expr.schema_name().to_string();
    let (mut low, mut high) = (1u64, u64::MAX);
    let mut rest = Vec::new();
    for conjunct in split_conjunction(&filter.predicate) {
        match rank_bound(conjunct, &rank_name) {
            Some((op, value)) => match op {
                BinaryOp::Lt => high = high.min(value.saturating_sub(1)),
                BinaryOp::LtEq => high = high.min(value),
                BinaryOp::Eq => {
                    low = low.max(value);
                    high = high.min(value);
                }
                BinaryOp::Gt => low = low.max(value.saturating_add(1)),
                BinaryOp::GtEq => low = low.max(value),
                _ => rest.push(conjunct.clone()),
            },
            None => rest.push(conjunct.clone()),
        }
    }
    if high == u64::MAX {
        // Every row would have to be shown and renumbered: not a top-N.
        return Ok(None);
    }
    let params = &function.params;
    let parts = TopNParts {
        partition: &params.partition_by,
        order: &params.order_by,
        rank,
        ranks: (low, high),
        rank_column: true,
    };
    let mut node = top_n_node(
        parts,
        &window.input,
        Arc::new(window.schema.as_arrow().clone()),
        ctx,
    )?;
    for p in projections.iter().rev() {
        let input_schema = p.input.schema();
        let exprs = p
            .expr
            .iter()
            .map(|e| physical(e, input_schema))
            .collect::<Result<Vec<_>>>()?;
        let schema = Arc::new(p.schema.as_arrow().clone());
        node = project_node(&p.expr, input_schema, exprs, schema, node)?;
    }
    if let Some(rest) = conjunction(rest) {
        node = filter_node(physical(&rest, filter.input.schema())?, node);
    }
    Ok(Some(node))
}

/// An aggregate of only `first_value`s sharing one `ORDER BY` (what `DISTINCT ON`
/// becomes): the first row of each group, projected to the group keys and the values.
pub(super) fn first_values(aggregate: &Aggregate, ctx: &PlanContext) -> Result<Option<Node>> {
    let mut order: Option<&[SortExpr]> = None;
    let mut values = Vec::new();
    for e in &aggregate.aggr_expr {
        let Expr::AggregateFunction(f) = unalias(e) else {
            return Ok(None);
        };
        let p = &f.params;
        let [arg] = p.args.as_slice() else {
            return Ok(None);
        };
        if f.func.name() != "first_value"
            || p.distinct
            || p.filter.is_some()
            || p.order_by.is_empty()
            || order.is_some_and(|o| o != p.order_by.as_slice())
        {
            return Ok(None);
        }
        order = Some(&p.order_by);
        values.push(arg.clone());
    }
    let Some(order) = order else {
        return Ok(None);
    };
    let parts = TopNParts {
        partition: &aggregate.group_expr,
        order,
        rank: RankKind::RowNumber,
        ranks: (1, 1),
        rank_column: false,
    };
    let input_schema = aggregate.input.schema();
    let node = top_n_node(
        parts,
        &aggregate.input,
        Arc::new(input_schema.as_arrow().clone()),
        ctx,
    )?;
    let exprs: Vec<Expr> = aggregate.group_expr.iter().cloned().chain(values).collect();
    let physical_exprs = exprs
        .iter()
        .map(|e| physical(e, input_schema))
        .collect::<Result<Vec<_>>>()?;
    let schema = Arc::new(aggregate.schema.as_arrow().clone());
    Ok(Some(project_node(
        &exprs,
        input_schema,
        physical_exprs,
        schema,
        node,
    )?))
}

fn top_n_node(
    parts: TopNParts,
    input_plan: &LogicalPlan,
    output: SchemaRef,
    ctx: &PlanContext,
) -> Result<Node> {
    if parts.order.is_empty() {
        return Err(unsupported(&format!(
            "{}() without ORDER BY",
            parts.rank.sql_name()
        )));
    }
    let input = visit(input_plan, ctx)?.finish()?;
    let schema = input_plan.schema();
    let PartitionedOrder {
        partition,
        partition_types,
        partition_names,
        order,
        order_fields,
    } = PartitionedOrder::plan(parts.partition, parts.order, schema)?;
    let order_names: Vec<String> = parts.order.iter().map(|s| s.to_string()).collect();
    // `EMIT ON WINDOW CLOSE` over append-only rows: rows reach the top-N only once the
    // watermark passes them, routed by its partition. By a watermarked partition column
    // (a window top-N), each window is ranked once all of its rows are in; by an
    // ascending, watermarked first `ORDER BY` column, rows come in time order, so a row
    // once ranked in is never pushed out by a later one.
    let input = if ctx.emit_on_window_close {
        let watermarked = |e: &Expr| match e {
            Expr::Column(c) => schema
                .index_of_column(c)
                .ok()
                .filter(|i| input.watermarks().contains(i)),
            _ => None,
        };
        let column = parts
            .partition
            .iter()
            .find_map(watermarked)
            .or_else(|| {
                parts
                    .order
                    .first()
                    .filter(|s| s.asc && !s.nulls_first)
                    .and_then(|s| watermarked(&s.expr))
            })
            .filter(|_| !input.keyed())
            .ok_or_else(|| {
                crate::error::EddyError::not_supported(
                    "this top-N cannot be executed in Emit-On-Window-Close mode: it needs \
                     append-only rows partitioned by a column with a watermark (such as \
                     window_start), or ordered first by one, ascending",
                )
            })?;
        super::held_until_watermark(
            column,
            schema,
            input,
            super::EowcRouting::Key {
                keys: partition.clone(),
                key_types: partition_types.clone(),
                key_names: partition_names.join(", "),
            },
        )?
    } else {
        input
    };
    let (low, high) = parts.ranks;
    let describe = format!(
        "TopN({}order: [{}], {} {low}..={high}{})",
        if partition_names.is_empty() {
            String::new()
        } else {
            format!("partition: [{}], ", partition_names.join(", "))
        },
        order_names.join(", "),
        parts.rank.sql_name(),
        if ctx.emit_on_window_close {
            ", emit on window close"
        } else {
            ""
        }
    );
    let spec = TopNSpec {
        partition: partition.clone(),
        partition_types: partition_types.clone(),
        order,
        order_fields,
        rank: parts.rank,
        ranks: parts.ranks,
        input: Arc::new(schema.as_arrow().clone()),
        output,
        rank_column: parts.rank_column,
        keyed_input: input.keyed(),
    };
    let build: OperatorFactory =
        Arc::new(move || Ok(Box::new(TopN::new(spec.clone())?) as Box<dyn Operator>));
    Ok(Node::Keyed {
        spec: OperatorSpec { describe, build },
        keys: partition,
        key_types: partition_types,
        key_names: partition_names.join(", "),
        append_only_output: false,
        emits_on_window_close: ctx.emit_on_window_close,
        input: Box::new(input),
        watermarks: vec![],
    })
}

/// A window's `PARTITION BY` and `ORDER BY`, planned over its input: the partition key
/// (expressions, types, names) and the sort (expressions, and the fields that encode them
/// in order, directions and NULL placement included).
pub(super) struct PartitionedOrder {
    pub partition: Vec<Arc<dyn PhysicalExpr>>,
    pub partition_types: Vec<DataType>,
    pub partition_names: Vec<String>,
    pub order: Vec<Arc<dyn PhysicalExpr>>,
    pub order_fields: Vec<SortField>,
}

impl PartitionedOrder {
    pub fn plan(partition: &[Expr], order: &[SortExpr], schema: &DFSchema) -> Result<Self> {
        Ok(Self {
            partition: partition
                .iter()
                .map(|e| physical(e, schema))
                .collect::<Result<Vec<_>>>()?,
            partition_types: partition
                .iter()
                .map(|e| Ok(e.get_type(schema)?))
                .collect::<Result<Vec<DataType>>>()?,
            partition_names: partition
                .iter()
                .map(|e| e.schema_name().to_string())
                .collect(),
            order: order
                .iter()
                .map(|s| physical(&s.expr, schema))
                .collect::<Result<Vec<_>>>()?,
            order_fields: order
                .iter()
                .map(|s| {
                    let options = SortOptions {
                        descending: !s.asc,
                        nulls_first: s.nulls_first,
                    };
                    Ok(SortField::new_with_options(
                        s.expr.get_type(schema)?,
                        options,
                    ))
                })
                .collect::<Result<Vec<_>>>()?,
        })
    }
}

fn unalias(expr: &Expr) -> &Expr {
    match expr {
        Expr::Alias(a) => unalias(&a.expr),
        e => e,
    }
}

fn is_column(expr: &Expr) -> bool {
    matches!(unalias(expr), Expr::Column(_))
}

/// `rank <op> n` (or `n <op> rank`) as `(op, n)` with the rank on the left.
fn rank_bound(expr: &Expr, rank_name: &str) -> Option<(BinaryOp, u64)> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = expr else {
        return None;
    };
    let is_rank = |e: &Expr| matches!(unalias(e), Expr::Column(c) if c.name == rank_name);
    let (op, value) = match (left.as_ref(), right.as_ref()) {
        (l, Expr::Literal(v, _)) if is_rank(l) => (*op, v),
        (Expr::Literal(v, _), r) if is_rank(r) => (op.swap()?, v),
        _ => return None,
    };
    // A bound below 1 admits no rank (`rank < 0`), one past u64 none either.
    let value = match value.cast_to(&DataType::Int64).ok()? {
        ScalarValue::Int64(Some(v)) => v.max(0) as u64,
        _ => return None,
    };
    Some((op, value))
}
