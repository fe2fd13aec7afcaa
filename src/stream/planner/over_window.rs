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
use crate::stream::operators::over_window::{OverWindow, OverWindowSpec};
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
    let describe = format!(
        "OverWindow({}, partition: [{}], order: [{}])",
        names.join(", "),
        partition_names.join(", "),
        order_by
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(", ")
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
    };
    let build: OperatorFactory =
        Arc::new(move || Ok(Box::new(OverWindow::new(spec.clone())?) as Box<dyn Operator>));
    Ok(Node::Keyed {
        spec: OperatorSpec { describe, build },
        keys: partition,
        key_types: partition_types,
        key_names: partition_names.join(", "),
        append_only_output: false,
        input: Box::new(input),
        watermarks: watermarks.iter().map(|(_, output)| *output).collect(),
    })
}

fn unalias(expr: &Expr) -> &Expr {
    match expr {
        Expr::Alias(a) => unalias(&a.expr),
        e => e,
    }
}
