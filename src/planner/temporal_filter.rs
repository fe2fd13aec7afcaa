//! Temporal filters: the conditions of a `WHERE` that compare a row's time with
//! `now()` (`ts > now() - INTERVAL '1 hour'`, `ts + INTERVAL '1' DAY <= now()`), planned
//! as a [`TemporalFilter`] keyed by the whole row, behind a hash exchange on it. The
//! other conditions stay an ordinary filter in front of it.

use super::{Node, PlanContext, physical, unsupported};
use crate::error::Result;
use crate::stream::graph::OperatorSpec;
use crate::stream::operators::Operator;
use crate::stream::operators::temporal_filter::{BoundKind, TemporalFilter, TimeBound};
use arrow::datatypes::DataType;
use datafusion::common::tree_node::TreeNode;
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::logical_expr::{BinaryExpr, Expr, ExprSchemable, Operator as BinaryOp};
use std::sync::Arc;

/// The function `now()` becomes in a view's query (see `sql_rewrite::streaming_now`).
pub const NOW_FUNCTION: &str = "__eddy_now";

pub(super) fn mentions_now(expr: &Expr) -> bool {
    expr.exists(|e| Ok(matches!(e, Expr::ScalarFunction(f) if f.name() == NOW_FUNCTION)))
        .unwrap_or(false)
}

fn refused() -> crate::error::EddyError {
    unsupported(
        "now() other than in a WHERE condition comparing a time with now() plus or minus a constant interval",
    )
}

/// Splits a filter's conditions into the temporal ones, as bounds, and the others.
pub(super) fn split(predicate: &Expr, schema: &DFSchema) -> Result<(Vec<TimeBound>, Vec<Expr>)> {
    let mut bounds = Vec::new();
    let mut rest = Vec::new();
    for conjunct in datafusion::logical_expr::utils::split_conjunction(predicate) {
        if mentions_now(conjunct) {
            bounds.push(bound(conjunct, schema)?);
        } else {
            rest.push(conjunct.clone());
        }
    }
    Ok((bounds, rest))
}

/// `row op now() + d` as a bound on `now` against `row - d`.
fn bound(condition: &Expr, schema: &DFSchema) -> Result<TimeBound> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = condition else {
        return Err(refused());
    };
    // Flipped so that `now` is on the left: `now op row - d`.
    let (now_side, op, row_side) = match (mentions_now(left), mentions_now(right)) {
        (true, false) => (left, *op, right),
        (false, true) => (
            right,
            match op {
                BinaryOp::Lt => BinaryOp::Gt,
                BinaryOp::LtEq => BinaryOp::GtEq,
                BinaryOp::Gt => BinaryOp::Lt,
                BinaryOp::GtEq => BinaryOp::LtEq,
                _ => return Err(refused()),
            },
            left,
        ),
        _ => return Err(refused()),
    };
    let offset = now_offset(now_side).ok_or_else(refused)?;
    match row_side.get_type(schema)? {
        DataType::Timestamp(..) | DataType::Date32 | DataType::Date64 => {}
        _ => return Err(refused()),
    }
    // now < t: shown until t; now <= t: until just after t; now > t: from just after t;
    // now >= t: from t.
    let (kind, adjust) = match op {
        BinaryOp::Lt => (BoundKind::VisibleBefore, 0),
        BinaryOp::LtEq => (BoundKind::VisibleBefore, 1),
        BinaryOp::Gt => (BoundKind::VisibleFrom, 1),
        BinaryOp::GtEq => (BoundKind::VisibleFrom, 0),
        _ => return Err(refused()),
    };
    Ok(TimeBound {
        time: physical(row_side, schema)?,
        offset_micros: adjust - offset,
        kind,
    })
}

/// `now()`, `now() + i`, `now() - i` (through casts): the constant offset in µs.
fn now_offset(expr: &Expr) -> Option<i64> {
    match expr {
        Expr::ScalarFunction(f) if f.name() == NOW_FUNCTION => Some(0),
        Expr::Cast(c) => now_offset(&c.expr),
        Expr::TryCast(c) => now_offset(&c.expr),
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            BinaryOp::Plus if mentions_now(left) => Some(now_offset(left)? + interval(right)?),
            BinaryOp::Plus => Some(now_offset(right)? + interval(left)?),
            BinaryOp::Minus => Some(now_offset(left)? - interval(right)?),
            _ => None,
        },
        _ => None,
    }
}

/// A constant interval of fixed length (no months), in µs.
fn interval(expr: &Expr) -> Option<i64> {
    let value = match expr {
        Expr::Literal(v, _) => v.clone(),
        Expr::Cast(c) => return interval(&c.expr),
        _ => return None,
    };
    match value {
        ScalarValue::IntervalMonthDayNano(Some(v)) if v.months == 0 => {
            Some(v.days as i64 * 86_400_000_000 + v.nanoseconds / 1000)
        }
        ScalarValue::IntervalDayTime(Some(v)) => {
            Some(v.days as i64 * 86_400_000_000 + v.milliseconds as i64 * 1000)
        }
        ScalarValue::DurationMicrosecond(Some(v)) => Some(v),
        ScalarValue::DurationMillisecond(Some(v)) => Some(v * 1000),
        ScalarValue::DurationSecond(Some(v)) => Some(v * 1_000_000),
        ScalarValue::DurationNanosecond(Some(v)) => Some(v / 1000),
        _ => None,
    }
}

/// The temporal filter over `input`, keyed (and distributed) by the whole row.
pub(super) fn node(
    bounds: Vec<TimeBound>,
    input: Node,
    ctx: &PlanContext,
    schema: &DFSchema,
) -> Result<Node> {
    let _ = ctx;
    let arrow_schema = Arc::new(schema.as_arrow().clone());
    let (keys, key_types) = super::whole_row_key(&arrow_schema);
    let describe = format!(
        "TemporalFilter({})",
        bounds
            .iter()
            .map(|b| {
                let shown = match b.kind {
                    BoundKind::VisibleBefore => "shown while now <",
                    BoundKind::VisibleFrom => "shown once now >=",
                };
                format!("{shown} {} + {}µs", b.time, b.offset_micros)
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    // Updatable rows go by their stream key (every change of a row to one subtask);
    // append-only rows, which get their keys here, by the whole row.
    let by_stream_key = input.keyed();
    TemporalFilter::new(bounds.clone(), arrow_schema.clone(), by_stream_key)?;
    // Rows shown once time reaches them come late: no watermark survives those.
    let watermarks = if bounds.iter().any(|b| b.kind == BoundKind::VisibleFrom) {
        vec![]
    } else {
        input.watermarks()
    };
    let spec = OperatorSpec {
        describe,
        build: Arc::new(move || {
            Ok(Box::new(TemporalFilter::new(
                bounds.clone(),
                arrow_schema.clone(),
                by_stream_key,
            )?) as Box<dyn Operator>)
        }),
    };
    Ok(if by_stream_key {
        Node::StreamKeyed {
            spec,
            input: Box::new(input),
            watermarks,
        }
    } else {
        Node::Keyed {
            spec,
            keys,
            key_types,
            key_names: "the whole row".into(),
            append_only_output: false,
            emits_on_window_close: false,
            input: Box::new(input),
            watermarks,
        }
    })
}
