//! From a DataFusion logical plan to a job's [`StreamGraph`].
//!
//! The plan is first turned into a tree of stream nodes (sources, change streams of
//! tables and views, stateless operators, aggregates, unions), then cut into fragments:
//! stateless operators are chained onto the fragment below them; an aggregate starts a
//! fragment behind a hash exchange on its group keys (a global one runs in a single
//! subtask); a union starts one that merges its inputs; an append-only output whose
//! fragment runs at another parallelism than the job's is rebalanced to it.
//!
//! Supported: sources, tables and materialized views as inputs, filters, projections,
//! `GROUP BY` / global aggregates (`count`, `count(DISTINCT)`, `sum`, `min`, `max`, `avg`)
//! with whatever projections and `HAVING` follow them, `UNION ALL`, unnest (`HOP`).
//! Anything else is refused with SQLSTATE 0A000 naming the construct.

use super::graph::{Exchange, Fragment, FragmentInput, OperatorFactory, OperatorSpec, StreamGraph};
use super::operators::Operator;
use super::operators::filter::Filter;
use super::operators::hash_agg::{AggCall, AggKind, HashAgg, PostOp};
use super::operators::project::Project;
use super::operators::tag_keys::TagKeys;
use super::operators::unnest::Unnest;
use crate::catalog::{Catalog, Relation, RelationKind};
use crate::connectors::ConnectorSpec;
use crate::error::{EddyError, Result};
use crate::state::keys::MAX_PARALLELISM;
use arrow::datatypes::SchemaRef;
use datafusion::common::DFSchema;
use datafusion::logical_expr::execution_props::ExecutionProps;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan};
use datafusion::physical_expr::{PhysicalExpr, create_physical_expr};
use std::sync::Arc;

/// A stream plan before it is cut into fragments.
enum Node {
    Connector {
        source: Relation,
        spec: ConnectorSpec,
        projection: Option<Vec<usize>>,
    },
    Changes {
        relation: Relation,
        projection: Option<Vec<usize>>,
    },
    /// A stateless operator (filter, projection, unnest).
    Op {
        spec: OperatorSpec,
        input: Box<Node>,
    },
    Agg {
        spec: OperatorSpec,
        /// Empty for a global aggregate (one group, one subtask).
        keys: Vec<Arc<dyn PhysicalExpr>>,
        key_types: Vec<arrow::datatypes::DataType>,
        key_names: String,
        input: Box<Node>,
    },
    Union {
        inputs: Vec<Node>,
    },
}

impl Node {
    /// Whether the rows carry stream keys (they may be updated or deleted).
    fn keyed(&self) -> bool {
        match self {
            Node::Connector { .. } => false,
            Node::Changes { .. } | Node::Agg { .. } => true,
            Node::Op { input, .. } => input.keyed(),
            Node::Union { inputs } => inputs.iter().any(Node::keyed),
        }
    }
}

/// An aggregate being planned: the projections and filters that follow it in the query
/// are folded into it (see [`PostOp`]).
struct AggParts {
    group_exprs: Vec<Arc<dyn PhysicalExpr>>,
    group_types: Vec<arrow::datatypes::DataType>,
    group_names: Vec<String>,
    calls: Vec<AggCall>,
    call_names: Vec<String>,
    schema: SchemaRef,
    post: Vec<PostOp>,
    input: Node,
}

/// A plan visited so far: a finished node, or an aggregate still taking the operators
/// that follow it.
enum Partial {
    Node(Node),
    Agg(AggParts),
}

impl Partial {
    fn finish(self) -> Result<Node> {
        let agg = match self {
            Partial::Node(node) => return Ok(node),
            Partial::Agg(agg) => agg,
        };
        let describe = format!(
            "HashAgg(group: [{}], aggs: [{}]{})",
            agg.group_names.join(", "),
            agg.call_names.join(", "),
            if agg.post.is_empty() {
                String::new()
            } else {
                format!(", then {}", describe_post(&agg.post))
            }
        );
        let (exprs, types, calls, schema, post) = (
            agg.group_exprs.clone(),
            agg.group_types.clone(),
            agg.calls,
            agg.schema,
            agg.post,
        );
        let build: OperatorFactory = Arc::new(move || {
            Ok(Box::new(HashAgg::new(
                exprs.clone(),
                types.clone(),
                calls.clone(),
                schema.clone(),
                post.clone(),
            )?) as Box<dyn Operator>)
        });
        Ok(Node::Agg {
            spec: OperatorSpec { describe, build },
            keys: agg.group_exprs,
            key_types: agg.group_types,
            key_names: agg.group_names.join(", "),
            input: Box::new(agg.input),
        })
    }
}

fn describe_post(post: &[PostOp]) -> String {
    post.iter()
        .map(|p| match p {
            PostOp::Project(_) => "Project".to_string(),
            PostOp::Filter(f) => format!("Filter({f})"),
        })
        .collect::<Vec<_>>()
        .join(", ")
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

fn stateless(describe: String, build: OperatorFactory, input: Node) -> Node {
    Node::Op {
        spec: OperatorSpec { describe, build },
        input: Box::new(input),
    }
}

fn filter_node(predicate: Arc<dyn PhysicalExpr>, input: Node) -> Node {
    let describe = format!("Filter({predicate})");
    stateless(
        describe,
        Arc::new(move || Ok(Box::new(Filter::new(predicate.clone())) as Box<dyn Operator>)),
        input,
    )
}

/// Plans a view's query as a stream graph running at `parallelism` (the session's
/// `streaming_parallelism`).
pub fn plan_job(plan: &LogicalPlan, catalog: &Catalog, parallelism: usize) -> Result<StreamGraph> {
    let root = visit(plan, catalog)?.finish()?;
    let schema: SchemaRef = Arc::new(plan.schema().as_arrow().clone());
    let keyed = root.keyed();
    let mut fragments = Vec::new();
    let mut last = fragment_of(root, &mut fragments, parallelism);
    // The output runs at the job's parallelism; keyed rows stay where their key lives.
    if !keyed && fragments[last].parallelism != parallelism {
        last = redistribute(last, &mut fragments, parallelism);
    }
    debug_assert_eq!(last, fragments.len() - 1);
    Ok(StreamGraph {
        fragments,
        schema,
        keyed,
    })
}

/// A new fragment at `parallelism` reading fragment `from`: rebalanced if its rows are
/// append-only, by stream key if they can be updated.
fn redistribute(from: usize, fragments: &mut Vec<Fragment>, parallelism: usize) -> usize {
    let keyed = fragments[from].keyed;
    let exchange = if fragments[from].parallelism == parallelism {
        Exchange::Forward
    } else if keyed {
        Exchange::HashStreamKey
    } else {
        Exchange::Rebalance
    };
    fragments.push(Fragment {
        input: FragmentInput::Upstream(vec![(from, exchange)]),
        chain: vec![],
        parallelism,
        keyed,
    });
    fragments.len() - 1
}

/// Adds the fragments computing `node` and returns the one whose chain ends with it.
fn fragment_of(node: Node, fragments: &mut Vec<Fragment>, parallelism: usize) -> usize {
    match node {
        Node::Connector {
            source,
            spec,
            projection,
        } => {
            let splits = spec.split_count().max(1);
            let subtasks = match spec {
                // One subtask per file would be too many; files are dealt to subtasks.
                ConnectorSpec::File(_) => splits.min(parallelism),
                _ => splits,
            }
            .min(MAX_PARALLELISM as usize);
            fragments.push(Fragment {
                input: FragmentInput::Connector {
                    source,
                    spec,
                    projection,
                },
                chain: vec![],
                parallelism: subtasks,
                keyed: false,
            });
            fragments.len() - 1
        }
        Node::Changes {
            relation,
            projection,
        } => {
            fragments.push(Fragment {
                input: FragmentInput::Changes {
                    relation,
                    projection,
                },
                chain: vec![],
                parallelism: 1,
                keyed: true,
            });
            fragments.len() - 1
        }
        Node::Op { spec, input } => {
            // Chained onto whatever computes its input: filtering and projecting before
            // rows move between subtasks costs nothing and moves fewer rows.
            let f = fragment_of(*input, fragments, parallelism);
            fragments[f].chain.push(spec);
            f
        }
        Node::Agg {
            spec,
            keys,
            key_types,
            key_names,
            input,
        } => {
            let from = fragment_of(*input, fragments, parallelism);
            let (exchange, subtasks) = if keys.is_empty() {
                (Exchange::Single, 1)
            } else {
                (
                    Exchange::Hash {
                        keys,
                        key_types,
                        describe: key_names,
                    },
                    parallelism,
                )
            };
            fragments.push(Fragment {
                input: FragmentInput::Upstream(vec![(from, exchange)]),
                chain: vec![spec],
                parallelism: subtasks,
                keyed: true,
            });
            fragments.len() - 1
        }
        Node::Union { inputs } => {
            let mut edges = Vec::new();
            let mut keyed = false;
            for (i, input) in inputs.into_iter().enumerate() {
                let input_keyed = input.keyed();
                keyed |= input_keyed;
                let f = fragment_of(input, fragments, parallelism);
                if input_keyed {
                    // Keys of different inputs must not collide in the view.
                    fragments[f].chain.push(OperatorSpec {
                        describe: format!("TagKeys(input {i})"),
                        build: Arc::new(move || Ok(Box::new(TagKeys::new(i)) as Box<dyn Operator>)),
                    });
                }
                let exchange = if fragments[f].parallelism == parallelism {
                    Exchange::Forward
                } else if input_keyed {
                    Exchange::HashStreamKey
                } else {
                    Exchange::Rebalance
                };
                edges.push((f, exchange));
            }
            fragments.push(Fragment {
                input: FragmentInput::Upstream(edges),
                chain: vec![],
                parallelism,
                keyed,
            });
            fragments.len() - 1
        }
    }
}

fn visit(plan: &LogicalPlan, catalog: &Catalog) -> Result<Partial> {
    let plain = |node| Ok(Partial::Node(node));
    match plan {
        LogicalPlan::TableScan(scan) => {
            let name = scan.table_name.table();
            let rel = catalog
                .get(name)
                .ok_or_else(|| EddyError::undefined_table(name))?;
            if scan.fetch.is_some() {
                return Err(unsupported("LIMIT"));
            }
            let projection = scan.projection.clone();
            let mut node = match rel.kind {
                RelationKind::Source => {
                    let spec = ConnectorSpec::from_options(&rel.arrow_schema(), &rel.options)?;
                    Node::Connector {
                        source: rel,
                        spec,
                        projection,
                    }
                }
                RelationKind::Table | RelationKind::MaterializedView => Node::Changes {
                    relation: rel,
                    projection,
                },
                _ => {
                    return Err(EddyError::not_supported(format!(
                        "a materialized view over {} \"{name}\" is not supported",
                        rel.kind.sql_name()
                    )));
                }
            };
            for f in &scan.filters {
                node = filter_node(physical(f, &scan.projected_schema)?, node);
            }
            plain(node)
        }
        LogicalPlan::Filter(filter) => {
            let predicate = physical(&filter.predicate, filter.input.schema())?;
            Ok(match visit(&filter.input, catalog)? {
                Partial::Agg(mut agg) => {
                    agg.post.push(PostOp::Filter(predicate));
                    Partial::Agg(agg)
                }
                Partial::Node(node) => Partial::Node(filter_node(predicate, node)),
            })
        }
        LogicalPlan::Projection(projection) => {
            let exprs = projection
                .expr
                .iter()
                .map(|e| physical(e, projection.input.schema()))
                .collect::<Result<Vec<_>>>()?;
            let project = Project::new(exprs, Arc::new(projection.schema.as_arrow().clone()));
            Ok(match visit(&projection.input, catalog)? {
                Partial::Agg(mut agg) => {
                    agg.post.push(PostOp::Project(project));
                    Partial::Agg(agg)
                }
                Partial::Node(node) => {
                    let describe = format!(
                        "Project({})",
                        projection
                            .expr
                            .iter()
                            .map(|e| e.schema_name().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                    Partial::Node(stateless(
                        describe,
                        Arc::new(move || Ok(Box::new(project.clone()) as Box<dyn Operator>)),
                        node,
                    ))
                }
            })
        }
        LogicalPlan::SubqueryAlias(alias) => visit(&alias.input, catalog),
        LogicalPlan::Unnest(unnest) => {
            let Partial::Node(input) = visit(&unnest.input, catalog)? else {
                return Err(unsupported("unnest after an aggregate"));
            };
            let [(list_column, list)] = unnest.list_type_columns.as_slice() else {
                return Err(unsupported("unnest of several lists"));
            };
            if list.depth != 1 || !unnest.struct_type_columns.is_empty() {
                return Err(unsupported("nested or struct unnest"));
            }
            if input.keyed() {
                return Err(unsupported("unnest over a table or an aggregate"));
            }
            let list_column = *list_column;
            let sources = unnest.dependency_indices.clone();
            let schema = Arc::new(unnest.schema.as_arrow().clone());
            plain(stateless(
                format!("Unnest(column {list_column})"),
                Arc::new(move || {
                    Ok(
                        Box::new(Unnest::new(list_column, sources.clone(), schema.clone()))
                            as Box<dyn Operator>,
                    )
                }),
                input,
            ))
        }
        LogicalPlan::Aggregate(aggregate) => {
            let input = visit(&aggregate.input, catalog)?.finish()?;
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
            Ok(Partial::Agg(AggParts {
                group_exprs,
                group_types,
                group_names: aggregate
                    .group_expr
                    .iter()
                    .map(|e| e.schema_name().to_string())
                    .collect(),
                calls,
                call_names: aggregate
                    .aggr_expr
                    .iter()
                    .map(|e| e.schema_name().to_string())
                    .collect(),
                schema: Arc::new(aggregate.schema.as_arrow().clone()),
                post: vec![],
                input,
            }))
        }
        LogicalPlan::Union(union) => {
            let inputs = union
                .inputs
                .iter()
                .map(|i| visit(i, catalog)?.finish())
                .collect::<Result<Vec<_>>>()?;
            plain(Node::Union { inputs })
        }
        LogicalPlan::Join(_) => Err(unsupported("JOIN")),
        LogicalPlan::Sort(_) => Err(unsupported("ORDER BY")),
        LogicalPlan::Limit(_) => Err(unsupported("LIMIT")),
        LogicalPlan::Window(_) => Err(unsupported("a window function (OVER)")),
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
    let (arg, arg_type) = match params.args.as_slice() {
        [] => (None, arrow::datatypes::DataType::Null),
        [a] => (Some(physical(a, schema)?), a.get_type(schema)?),
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
        arg_type,
        output_type,
    })
}
