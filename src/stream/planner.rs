//! From a DataFusion logical plan to a streaming job: the source it reads and the chain
//! of operators that turns the source's rows into the view's rows.
//!
//! Supported today: a source scan, filters, projections, and one `GROUP BY` aggregate
//! (`count`, `sum`, `min`, `max`, `avg`) with whatever projections and `HAVING` follow it.
//! Anything else is refused with SQLSTATE 0A000 naming the construct.

use super::operators::Operator;
use super::operators::filter::Filter;
use super::operators::hash_agg::{AggCall, AggKind, HashAgg, PostOp};
use super::operators::project::Project;
use crate::catalog::{Catalog, Relation, RelationKind};
use crate::error::{EddyError, Result};
use arrow::datatypes::SchemaRef;
use datafusion::common::DFSchema;
use datafusion::logical_expr::execution_props::ExecutionProps;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan};
use datafusion::physical_expr::{PhysicalExpr, create_physical_expr};
use std::sync::Arc;

/// What a materialized view's job runs.
pub struct JobPlan {
    pub source: Relation,
    /// Columns of the source the job reads, by index.
    pub source_projection: Option<Vec<usize>>,
    pub operators: Vec<Box<dyn Operator>>,
    /// The view's columns.
    pub schema: SchemaRef,
}

struct AggParts {
    group_exprs: Vec<Arc<dyn PhysicalExpr>>,
    group_types: Vec<arrow::datatypes::DataType>,
    calls: Vec<AggCall>,
    schema: SchemaRef,
    post: Vec<PostOp>,
}

struct Partial {
    source: Relation,
    source_projection: Option<Vec<usize>>,
    operators: Vec<Box<dyn Operator>>,
    agg: Option<AggParts>,
}

fn physical(expr: &Expr, schema: &DFSchema) -> Result<Arc<dyn PhysicalExpr>> {
    Ok(create_physical_expr(
        expr,
        schema,
        &ExecutionProps::new(),
        &PhysicalPlanningContext::default(),
    )?)
}

fn unsupported(what: &str) -> EddyError {
    EddyError::not_supported(format!(
        "{what} is not supported in a materialized view yet"
    ))
}

pub fn plan_job(plan: &LogicalPlan, catalog: &Catalog) -> Result<JobPlan> {
    let partial = visit(plan, catalog)?;
    let schema: SchemaRef = Arc::new(plan.schema().as_arrow().clone());
    let mut operators = partial.operators;
    if let Some(agg) = partial.agg {
        operators.push(Box::new(HashAgg::new(
            agg.group_exprs,
            agg.group_types,
            agg.calls,
            agg.schema,
            agg.post,
        )?));
    }
    Ok(JobPlan {
        source: partial.source,
        source_projection: partial.source_projection,
        operators,
        schema,
    })
}

fn visit(plan: &LogicalPlan, catalog: &Catalog) -> Result<Partial> {
    match plan {
        LogicalPlan::TableScan(scan) => {
            let name = scan.table_name.table();
            let rel = catalog
                .get(name)
                .ok_or_else(|| EddyError::undefined_table(name))?;
            if rel.kind != RelationKind::Source {
                return Err(EddyError::not_supported(format!(
                    "a materialized view over {} \"{name}\" is not supported yet; only sources can feed materialized views",
                    rel.kind.sql_name()
                )));
            }
            let mut operators: Vec<Box<dyn Operator>> = Vec::new();
            for f in &scan.filters {
                operators.push(Box::new(Filter::new(physical(f, &scan.projected_schema)?)));
            }
            if scan.fetch.is_some() {
                return Err(unsupported("LIMIT"));
            }
            Ok(Partial {
                source: rel,
                source_projection: scan.projection.clone(),
                operators,
                agg: None,
            })
        }
        LogicalPlan::Filter(filter) => {
            let mut p = visit(&filter.input, catalog)?;
            let predicate = physical(&filter.predicate, filter.input.schema())?;
            match &mut p.agg {
                Some(agg) => agg.post.push(PostOp::Filter(predicate)),
                None => p.operators.push(Box::new(Filter::new(predicate))),
            }
            Ok(p)
        }
        LogicalPlan::Projection(projection) => {
            let mut p = visit(&projection.input, catalog)?;
            let exprs = projection
                .expr
                .iter()
                .map(|e| physical(e, projection.input.schema()))
                .collect::<Result<Vec<_>>>()?;
            let project = Project::new(exprs, Arc::new(projection.schema.as_arrow().clone()));
            match &mut p.agg {
                Some(agg) => agg.post.push(PostOp::Project(project)),
                None => p.operators.push(Box::new(project)),
            }
            Ok(p)
        }
        LogicalPlan::SubqueryAlias(alias) => visit(&alias.input, catalog),
        LogicalPlan::Unnest(unnest) => {
            let mut p = visit(&unnest.input, catalog)?;
            if p.agg.is_some() {
                return Err(unsupported("unnest after an aggregate"));
            }
            let [(list_column, list)] = unnest.list_type_columns.as_slice() else {
                return Err(unsupported("unnest of several lists"));
            };
            if list.depth != 1 || !unnest.struct_type_columns.is_empty() {
                return Err(unsupported("nested or struct unnest"));
            }
            p.operators
                .push(Box::new(super::operators::unnest::Unnest::new(
                    *list_column,
                    unnest.dependency_indices.clone(),
                    Arc::new(unnest.schema.as_arrow().clone()),
                )));
            Ok(p)
        }
        LogicalPlan::Aggregate(aggregate) => {
            let mut p = visit(&aggregate.input, catalog)?;
            if p.agg.is_some() {
                return Err(unsupported("an aggregate over an aggregate"));
            }
            let input_schema = aggregate.input.schema();
            let group_exprs = aggregate
                .group_expr
                .iter()
                .map(|e| physical(e, input_schema))
                .collect::<Result<Vec<_>>>()?;
            let group_types = aggregate
                .group_expr
                .iter()
                .map(|e| Ok(e.get_type(input_schema)?))
                .collect::<Result<Vec<_>>>()?;
            let calls = aggregate
                .aggr_expr
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    let output_type = aggregate
                        .schema
                        .field(aggregate.group_expr.len() + i)
                        .data_type()
                        .clone();
                    agg_call(e, input_schema, output_type)
                })
                .collect::<Result<Vec<_>>>()?;
            p.agg = Some(AggParts {
                group_exprs,
                group_types,
                calls,
                schema: Arc::new(aggregate.schema.as_arrow().clone()),
                post: vec![],
            });
            Ok(p)
        }
        LogicalPlan::Join(_) => Err(unsupported("JOIN")),
        LogicalPlan::Sort(_) => Err(unsupported("ORDER BY")),
        LogicalPlan::Limit(_) => Err(unsupported("LIMIT")),
        LogicalPlan::Window(_) => Err(unsupported("a window function (OVER)")),
        LogicalPlan::Union(_) => Err(unsupported("UNION")),
        LogicalPlan::Distinct(_) => Err(unsupported("DISTINCT")),
        other => Err(unsupported(
            other
                .display()
                .to_string()
                .split(':')
                .next()
                .unwrap_or("this query"),
        )),
    }
}

fn agg_call(
    expr: &Expr,
    schema: &DFSchema,
    output_type: arrow::datatypes::DataType,
) -> Result<AggCall> {
    let expr = match expr {
        Expr::Alias(a) => a.expr.as_ref(),
        e => e,
    };
    let Expr::AggregateFunction(f) = expr else {
        return Err(unsupported(&format!("aggregate expression {expr}")));
    };
    let params = &f.params;
    let name_lower = f.func.name().to_ascii_lowercase();
    if params.distinct && name_lower != "count" {
        return Err(unsupported(&format!("{name_lower}(DISTINCT ...)")));
    }
    if params.filter.is_some() || !params.order_by.is_empty() {
        return Err(unsupported("an aggregate FILTER or ORDER BY"));
    }
    let name = f.func.name().to_ascii_lowercase();
    let kind = match name.as_str() {
        "count" => AggKind::Count,
        "sum" => AggKind::Sum,
        "min" => AggKind::Min,
        "max" => AggKind::Max,
        "avg" | "mean" => AggKind::Avg,
        other => return Err(unsupported(&format!("aggregate function {other}"))),
    };
    let arg = match params.args.as_slice() {
        [] => None,
        [a] => Some(physical(a, schema)?),
        _ => return Err(unsupported(&format!("{name} with several arguments"))),
    };
    let kind = match (kind, params.distinct, arg.is_some()) {
        (AggKind::Count, true, true) => AggKind::CountDistinct,
        (AggKind::Count, _, false) => AggKind::CountStar,
        (kind, _, _) => kind,
    };
    Ok(AggCall {
        kind,
        arg,
        output_type,
    })
}
