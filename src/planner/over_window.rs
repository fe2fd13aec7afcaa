//! Planning window functions over partitions (`... OVER (PARTITION BY ... ORDER BY ...)`)
//! that are not a bounded ranking (those are a top-N, see [`super::top_n`]): one
//! [`OverWindow`] per DataFusion `Window` node, behind a hash exchange on the partition
//! key (a single subtask without one). The functions are DataFusion's own window
//! expressions, evaluated by the operator over each changed partition.

use super::top_n::PartitionedOrder;
use super::{Node, PlanContext, unsupported, visit};
use crate::error::Result;
use crate::stream::graph::{OperatorFactory, OperatorSpec};
use crate::stream::operators::Operator;
use crate::stream::operators::over_window::{EowcOrder, OverWindow, OverWindowSpec};
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::execution_props::ExecutionProps;
use datafusion::logical_expr::logical_plan::Window;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::physical_planner::create_window_expr;
use std::sync::Arc;

pub(super) fn window_node(window: &Window, ctx: &PlanContext) -> Result<Node> {
    let schema = window.input.schema();
    let mut shared: Option<(&[Expr], &[datafusion::logical_expr::SortExpr])> = None;
    let mut functions = Vec::new();
    let mut names = Vec::new();
    for e in &window.window_expr {
        let Expr::WindowFunction(f) = unalias(e) else {
            return Err(unsupported(&format!("window expression {e}")));
        };
        let p = &f.params;
        let spec = (p.partition_by.as_slice(), p.order_by.as_slice());
        match shared {
            None => shared = Some(spec),
            Some(s) if s == spec => {}
            Some(_) => {
                return Err(unsupported(
                    "window functions with different PARTITION BY or ORDER BY in one window",
                ));
            }
        }
        functions.push(create_window_expr(
            e,
            schema,
            &ExecutionProps::new(),
            &PhysicalPlanningContext::default(),
        )?);
        names.push(f.fun.name().to_string());
    }
    let Some((partition_by, order_by)) = shared else {
        return Err(unsupported("a window without functions"));
    };
    let input = visit(&window.input, ctx)?.finish()?;
    // A session's end over an append-only input carries the input time's watermark.
    let input_watermarks = input.watermarks();
    let mut watermarks = Vec::new();
    if !input.keyed() {
        for (i, e) in window.window_expr.iter().enumerate() {
            if let Expr::WindowFunction(f) = unalias(e)
                && f.fun.name() == "session_end"
                && let Some(Expr::Column(c)) = f.params.args.first()
                && let Ok(index) = schema.index_of_column(c)
                && input_watermarks.contains(&index)
            {
                watermarks.push((index, schema.fields().len() + i));
            }
        }
    }
    let PartitionedOrder {
        partition,
        partition_types,
        partition_names,
        order,
        order_fields,
    } = PartitionedOrder::plan(partition_by, order_by, schema)?;
    let eowc = if ctx.emit_on_window_close {
        Some(eowc_order(window, order_by, &input)?)
    } else {
        None
    };
    let describe = format!(
        "OverWindow({}, partition: [{}], order: [{}]{})",
        names.join(", "),
        partition_names.join(", "),
        order_by
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        if eowc.is_some() {
            ", emit on window close"
        } else {
            ""
        }
    );
    let spec = OverWindowSpec {
        partition: partition.clone(),
        partition_types: partition_types.clone(),
        order,
        order_fields,
        functions,
        input: Arc::new(schema.as_arrow().clone()),
        output: Arc::new(window.schema.as_arrow().clone()),
        watermarks: watermarks.clone(),
        eowc,
    };
    let build: OperatorFactory =
        Arc::new(move || Ok(Box::new(OverWindow::new(spec.clone())?) as Box<dyn Operator>));
    Ok(Node::Keyed {
        spec: OperatorSpec { describe, build },
        keys: partition,
        key_types: partition_types,
        key_names: partition_names.join(", "),
        append_only_output: eowc.is_some(),
        emits_on_window_close: eowc.is_some(),
        input: Box::new(input),
        watermarks: watermarks.iter().map(|(_, output)| *output).collect(),
    })
}

/// `EMIT ON WINDOW CLOSE` over window functions: the input must be append-only and
/// ordered first by a column with a watermark, ascending; a row is final once as many
/// rows follow it as its functions look ahead.
fn eowc_order(
    window: &Window,
    order_by: &[datafusion::logical_expr::SortExpr],
    input: &Node,
) -> Result<EowcOrder> {
    use datafusion::logical_expr::{WindowFrameBound, WindowFrameUnits};
    let refuse = |why: &str| {
        crate::error::EddyError::not_supported(format!(
            "EMIT ON WINDOW CLOSE over window functions {why}"
        ))
    };
    if input.keyed() {
        return Err(refuse("needs an append-only input"));
    }
    let time_column = match order_by.first() {
        Some(sort) if sort.asc => match &sort.expr {
            Expr::Column(c) => window.input.schema().index_of_column(c).ok(),
            _ => None,
        },
        _ => None,
    }
    .filter(|c| input.watermarks().contains(c))
    .ok_or_else(|| refuse("needs ORDER BY a column with a watermark, ascending, first"))?;
    let mut following = 0usize;
    for e in &window.window_expr {
        let Expr::WindowFunction(f) = unalias(e) else {
            continue;
        };
        let name = f.fun.name();
        let ahead = match name {
            "lag" | "row_number" | "rank" | "dense_rank" => 0,
            "lead" => match f.params.args.get(1) {
                None => 1,
                Some(Expr::Literal(v, _)) => v
                    .to_string()
                    .parse::<usize>()
                    .map_err(|_| refuse("needs lead's offset to be a positive constant"))?,
                Some(_) => return Err(refuse("needs lead's offset to be a constant")),
            },
            "ntile" | "cume_dist" | "percent_rank" => {
                return Err(refuse(&format!(
                    "cannot run {name}, which needs the whole partition"
                )));
            }
            _ => {
                let frame = &f.params.window_frame;
                match &frame.end_bound {
                    WindowFrameBound::CurrentRow | WindowFrameBound::Preceding(_) => 0,
                    WindowFrameBound::Following(v) if v.is_null() => {
                        return Err(refuse("cannot run frames up to UNBOUNDED FOLLOWING"));
                    }
                    WindowFrameBound::Following(v) => {
                        let n = v.to_string().parse::<usize>().unwrap_or(usize::MAX);
                        match frame.units {
                            WindowFrameUnits::Rows => n,
                            _ if n == 0 => 0,
                            _ => {
                                return Err(refuse(
                                    "needs frames ending at a number of ROWS FOLLOWING",
                                ));
                            }
                        }
                    }
                }
            }
        };
        following = following.max(ahead);
    }
    Ok(EowcOrder {
        time_column,
        following,
    })
}

fn unalias(expr: &Expr) -> &Expr {
    match expr {
        Expr::Alias(a) => unalias(&a.expr),
        e => e,
    }
}
