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
//! with whatever projections and `HAVING` follow them, `UNION ALL`, unnest (`HOP`),
//! joins (inner, outer, semi, anti: a fragment whose two inputs are hashed on the join
//! key).
//! Anything else is refused with SQLSTATE 0A000 naming the construct.

use crate::catalog::{Catalog, Relation, RelationKind};
use crate::connectors::ConnectorSpec;
use crate::error::{EddyError, Result};
use crate::state::keys::MAX_PARALLELISM;
use crate::stream::graph::{
    Exchange, Fragment, FragmentInput, OperatorFactory, OperatorSpec, StreamGraph,
};
use crate::stream::operators::Operator;
use crate::stream::operators::drop_keys::DropKeys;
use crate::stream::operators::filter::Filter;
use crate::stream::operators::hash_agg::{AggCall, AggKind, HashAgg, PostOp};
use crate::stream::operators::hash_join::cleanup::StateCleanup;
use crate::stream::operators::hash_join::{HashJoin, JoinKind, JoinSpec};
use crate::stream::operators::project::Project;
use crate::stream::operators::tag_keys::TagKeys;
use crate::stream::operators::unnest::Unnest;
use crate::stream::watermark::{SourceWatermark, WatermarkMapping, monotone_column};
use arrow::datatypes::SchemaRef;
use datafusion::common::DFSchema;
use datafusion::common::tree_node::TreeNode;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::execution_props::ExecutionProps;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan};
use datafusion::physical_expr::{PhysicalExpr, create_physical_expr};
use std::sync::Arc;

pub mod changelog;
mod grouping_sets;
mod not_in;
mod over_window;

/// The always-true, volatile function that marks the table side of a temporal join
/// (`FOR SYSTEM_TIME AS OF`): the SQL rewrite filters the table by it.
pub const TEMPORAL_JOIN_MARKER: &str = "__eddy_temporal_join";
mod temporal_filter;
mod top_n;
mod values;
pub mod window_tvf;

pub use temporal_filter::NOW_FUNCTION;

/// A stream plan before it is cut into fragments.
enum Node {
    Connector {
        source: Relation,
        spec: ConnectorSpec,
        projection: Option<Vec<usize>>,
        watermark: Option<SourceWatermark>,
    },
    Changes {
        relation: Relation,
        projection: Option<Vec<usize>>,
        watermark: Option<SourceWatermark>,
    },
    /// A stateless operator (filter, projection, unnest).
    Op {
        spec: OperatorSpec,
        input: Box<Node>,
        /// Output columns that carry a watermark.
        watermarks: Vec<usize>,
        /// The operator turns every change into an inserted row without a key (a
        /// changelog): its output is append-only whatever its input.
        appends_only: bool,
    },
    /// A stateful operator keeping its state by key (an aggregate by its group, a
    /// top-N by its partition) behind a hash exchange on that key.
    Keyed {
        spec: OperatorSpec,
        /// Empty for a global aggregate or top-N (one key, one subtask).
        keys: Vec<Arc<dyn PhysicalExpr>>,
        key_types: Vec<arrow::datatypes::DataType>,
        key_names: String,
        /// The operator outputs inserts only, without keys (rows buffered until the
        /// watermark passes them).
        append_only_output: bool,
        /// The operator emits a window's rows once its watermark has passed (`EMIT ON
        /// WINDOW CLOSE`), so nothing above it needs to hold rows back.
        emits_on_window_close: bool,
        input: Box<Node>,
        watermarks: Vec<usize>,
    },
    /// A stateful operator over updatable rows keeping its state by their stream key,
    /// behind a hash exchange on it (a temporal filter).
    StreamKeyed {
        spec: OperatorSpec,
        input: Box<Node>,
        watermarks: Vec<usize>,
    },
    Union {
        inputs: Vec<Node>,
        watermarks: Vec<usize>,
    },
    /// Two inputs, each hash-distributed on its join key (both to one subtask when
    /// there is no equality to join on).
    Join {
        spec: OperatorSpec,
        keyed: bool,
        /// Per side: the key expressions and their description.
        keys: [Vec<Arc<dyn PhysicalExpr>>; 2],
        key_types: Vec<arrow::datatypes::DataType>,
        key_names: [String; 2],
        inputs: Box<[Node; 2]>,
    },
}

impl Node {
    /// Whether the rows come from connector sources through stateless operators only
    /// (so none is behind a source's watermark).
    fn reads_sources_only(&self) -> bool {
        match self {
            Node::Connector { .. } => true,
            Node::Op { input, .. } => input.reads_sources_only(),
            Node::Union { inputs, .. } => inputs.iter().all(Node::reads_sources_only),
            Node::Changes { .. }
            | Node::Keyed { .. }
            | Node::StreamKeyed { .. }
            | Node::Join { .. } => false,
        }
    }

    /// Whether the rows carry stream keys (they may be updated or deleted).
    fn keyed(&self) -> bool {
        match self {
            Node::Connector { .. } => false,
            // An append-only table's changes are inserts only; their keys are dropped.
            Node::Changes { relation, .. } => !relation.is_append_only(),
            Node::Keyed {
                append_only_output, ..
            } => !append_only_output,
            Node::StreamKeyed { .. } => true,
            Node::Op {
                input,
                appends_only,
                ..
            } => !appends_only && input.keyed(),
            Node::Union { inputs, .. } => inputs.iter().any(Node::keyed),
            Node::Join { keyed, .. } => *keyed,
        }
    }

    /// Output columns that carry a watermark.
    fn watermarks(&self) -> Vec<usize> {
        match self {
            Node::Connector { watermark, .. } | Node::Changes { watermark, .. } => watermark
                .as_ref()
                .and_then(|w| w.output_column)
                .into_iter()
                .collect(),
            Node::Op { watermarks, .. }
            | Node::Keyed { watermarks, .. }
            | Node::StreamKeyed { watermarks, .. }
            | Node::Union { watermarks, .. } => watermarks.clone(),
            // A stored row joined with a new one can carry any older time.
            Node::Join { .. } => vec![],
        }
    }
}

/// What planning needs besides the plan.
pub struct PlanContext<'a> {
    pub catalog: &'a Catalog,
    /// Plans the watermark expressions of sources.
    pub state: &'a SessionState,
    /// The job's parallelism (the session's `streaming_parallelism`).
    pub parallelism: usize,
    /// `EMIT ON WINDOW CLOSE`: aggregates emit each window once, when it closes.
    pub emit_on_window_close: bool,
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
    /// Output columns (after the post operators so far) that carry a watermark.
    watermarks: Vec<usize>,
    /// With `EMIT ON WINDOW CLOSE`: the group key position of the window column.
    window_close: Option<usize>,
    /// The first group key that is a watermarked input column (its position among the
    /// group keys).
    watermarked_key: Option<usize>,
}

/// A plan visited so far: a finished node, or an aggregate still taking the operators
/// that follow it. (Short-lived while planning, so the size of its variants does not
/// matter.)
#[allow(clippy::large_enum_variant)]
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
        let describe = match agg.window_close {
            Some(key) => format!(
                "{describe} emit on window close of {}",
                agg.group_names[key]
            ),
            None => describe,
        };
        let append_only = !agg.input.keyed();
        // Without EMIT ON WINDOW CLOSE, the groups of passed windows can still be dropped
        // when no row behind the watermark can reach the aggregate: rows straight from
        // sources, which drop their late rows (a join or another aggregate may emit rows
        // behind it).
        let forget_window = match agg.window_close {
            None if append_only && agg.input.reads_sources_only() => agg.watermarked_key,
            _ => None,
        };
        let (exprs, types, calls, schema, post, window_close) = (
            agg.group_exprs.clone(),
            agg.group_types.clone(),
            agg.calls,
            agg.schema,
            agg.post,
            agg.window_close,
        );
        let build: OperatorFactory = Arc::new(move || {
            let agg = HashAgg::new(
                exprs.clone(),
                types.clone(),
                calls.clone(),
                schema.clone(),
                post.clone(),
            )?
            .append_only_input(append_only);
            Ok(Box::new(match (window_close, forget_window) {
                (Some(key), _) => agg.emit_on_window_close(key)?,
                (None, Some(key)) => agg.forget_closed_windows(key)?,
                (None, None) => agg,
            }) as Box<dyn Operator>)
        });
        Ok(Node::Keyed {
            spec: OperatorSpec { describe, build },
            keys: agg.group_exprs,
            key_types: agg.group_types,
            key_names: agg.group_names.join(", "),
            append_only_output: false,
            emits_on_window_close: agg.window_close.is_some(),
            input: Box::new(agg.input),
            watermarks: agg.watermarks,
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
    if expr
        .exists(|e| Ok(matches!(e, Expr::ScalarSubquery(_))))
        .unwrap_or(false)
    {
        return Err(unsupported(
            "a scalar subquery that neither refers to the outer query nor is an aggregate without GROUP BY",
        ));
    }
    // `now()` has a meaning in a view only as a temporal filter (planned apart).
    if temporal_filter::mentions_now(expr) {
        return Err(unsupported(
            "now() other than in a WHERE condition comparing a time with now() plus or minus a constant interval",
        ));
    }
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

fn stateless(
    describe: String,
    build: OperatorFactory,
    input: Node,
    watermarks: Vec<usize>,
) -> Node {
    Node::Op {
        spec: OperatorSpec { describe, build },
        input: Box::new(input),
        watermarks,
        appends_only: false,
    }
}

/// The rows of a relation a view reads: a source's from its connector, a table's or
/// materialized view's from its changes.
fn relation_input(
    rel: Relation,
    projection: Option<Vec<usize>>,
    watermark: Option<SourceWatermark>,
) -> Result<Node> {
    Ok(match rel.kind {
        RelationKind::Source => {
            let spec = ConnectorSpec::from_options(&rel.arrow_schema(), &rel.options)?;
            Node::Connector {
                source: rel,
                spec,
                projection,
                watermark,
            }
        }
        RelationKind::Table | RelationKind::MaterializedView => Node::Changes {
            relation: rel,
            projection,
            watermark,
        },
        _ => {
            return Err(EddyError::not_supported(format!(
                "a materialized view over {} \"{}\" is not supported",
                rel.kind.sql_name(),
                rel.name
            )));
        }
    })
}

/// A projection of `exprs` (planned as `physical`) over `input`.
fn project_node(
    exprs: &[Expr],
    input_schema: &DFSchema,
    physical: Vec<Arc<dyn PhysicalExpr>>,
    schema: SchemaRef,
    input: Node,
) -> Result<Node> {
    let mappings = projection_watermarks(exprs, input_schema, &input.watermarks())?;
    let watermarks = mappings.iter().map(|m| m.output).collect();
    let project = Project::new(physical, schema).with_watermarks(mappings);
    let describe = format!(
        "Project({})",
        exprs
            .iter()
            .map(|e| e.schema_name().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(stateless(
        describe,
        Arc::new(move || Ok(Box::new(project.clone()) as Box<dyn Operator>)),
        input,
        watermarks,
    ))
}

fn filter_node(predicate: Arc<dyn PhysicalExpr>, input: Node) -> Node {
    let describe = format!("Filter({predicate})");
    let watermarks = input.watermarks();
    stateless(
        describe,
        Arc::new(move || Ok(Box::new(Filter::new(predicate.clone())) as Box<dyn Operator>)),
        input,
        watermarks,
    )
}

/// How the output columns of a projection carry the watermarks of its input.
fn projection_watermarks(
    exprs: &[Expr],
    input_schema: &DFSchema,
    watermarked: &[usize],
) -> Result<Vec<WatermarkMapping>> {
    let mut mappings = Vec::new();
    for (output, expr) in exprs.iter().enumerate() {
        if let Some(input) = monotone_column(expr, input_schema, watermarked) {
            mappings.push(WatermarkMapping {
                input,
                output,
                expr: physical(expr, input_schema)?,
                input_schema: Arc::new(input_schema.as_arrow().clone()),
            });
        }
    }
    Ok(mappings)
}

/// The watermark a source declares (`WATERMARK FOR col AS expr`), as the job reads it.
fn source_watermark(
    rel: &Relation,
    projection: &Option<Vec<usize>>,
    ctx: &PlanContext,
) -> Result<Option<SourceWatermark>> {
    let Some(spec) = &rel.watermark else {
        return Ok(None);
    };
    let schema = DFSchema::try_from(rel.arrow_schema().as_ref().clone())?;
    let time_column = rel
        .columns
        .iter()
        .position(|c| c.name == spec.column)
        .ok_or_else(|| {
            EddyError::internal(format!("watermark column {} is not a column", spec.column))
        })?;
    let expr = ctx.state.create_logical_expr(&spec.expression, &schema)?;
    let output_column = match projection {
        Some(p) => p.iter().position(|c| *c == time_column),
        None => Some(time_column),
    };
    Ok(Some(SourceWatermark {
        time_column,
        grows_with_time: monotone_column(&expr, &schema, &[time_column]) == Some(time_column),
        expr: physical(&expr, &schema)?,
        output_column,
    }))
}

/// Plans a view's query as a stream graph running at `parallelism` (the session's
/// `streaming_parallelism`).
pub fn plan_job(plan: &LogicalPlan, ctx: &PlanContext) -> Result<StreamGraph> {
    let parallelism = ctx.parallelism;
    let mut root = visit(plan, ctx)?.finish()?;
    if ctx.emit_on_window_close && !root_has_window_close(&root) {
        // Without such an aggregate: append-only rows are released as the watermark
        // passes them.
        match root.watermarks().first() {
            Some(&column) if !root.keyed() => {
                root = eowc_sort_node(column, plan.schema(), root)?;
            }
            _ => {
                return Err(EddyError::not_supported(
                    "this query cannot be executed in Emit-On-Window-Close mode: \
                     EMIT ON WINDOW CLOSE needs a GROUP BY on a column with a watermark \
                     (such as window_start of TUMBLE or HOP over a source with WATERMARK FOR), \
                     or append-only rows with a watermarked column",
                ));
            }
        }
    }
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

/// `EMIT ON WINDOW CLOSE` over append-only rows: each row held until the watermark of
/// `column` passes it, behind a hash exchange on the whole row.
fn eowc_sort_node(column: usize, schema: &DFSchema, input: Node) -> Result<Node> {
    let (keys, key_types) = whole_row_key(schema.as_arrow());
    held_until_watermark(
        column,
        schema,
        input,
        EowcRouting::WholeRow { keys, key_types },
    )
}

/// Every column of `schema`, as the key of an operator keyed by the whole row: the
/// columns' expressions and their types.
fn whole_row_key(
    schema: &arrow::datatypes::Schema,
) -> (Vec<Arc<dyn PhysicalExpr>>, Vec<arrow::datatypes::DataType>) {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let column = datafusion::physical_expr::expressions::Column::new(f.name(), i);
            (
                Arc::new(column) as Arc<dyn PhysicalExpr>,
                f.data_type().clone(),
            )
        })
        .unzip()
}

/// How an `EowcSort`'s input is routed to its subtasks.
enum EowcRouting {
    WholeRow {
        keys: Vec<Arc<dyn PhysicalExpr>>,
        key_types: Vec<arrow::datatypes::DataType>,
    },
    /// By a key (a window top-N's partition), so that a window's rows come out together.
    Key {
        keys: Vec<Arc<dyn PhysicalExpr>>,
        key_types: Vec<arrow::datatypes::DataType>,
        key_names: String,
    },
}

/// An `EowcSort` node holding `input`'s rows until the watermark of `column` passes them.
fn held_until_watermark(
    column: usize,
    schema: &DFSchema,
    input: Node,
    routing: EowcRouting,
) -> Result<Node> {
    use crate::stream::operators::eowc_sort::EowcSort;
    let schema: SchemaRef = Arc::new(schema.as_arrow().clone());
    let (keys, key_types, key_names, routed) = match routing {
        EowcRouting::WholeRow { keys, key_types } => {
            (keys, key_types, "the whole row".to_string(), false)
        }
        // Without a key there is one subtask, which holds every key group.
        EowcRouting::Key {
            keys,
            key_types,
            key_names,
        } => {
            let routed = !keys.is_empty();
            (keys, key_types, key_names, routed)
        }
    };
    let describe = format!(
        "EowcSort(rows released as the watermark of {} passes)",
        schema.field(column).name()
    );
    let (build_keys, build_types) = (keys.clone(), key_types.clone());
    let build = move || -> Result<Box<dyn Operator>> {
        let sort = EowcSort::new(column, schema.clone())?;
        Ok(Box::new(if routed {
            sort.routed_by(build_keys.clone(), build_types.clone())?
        } else {
            sort
        }))
    };
    build()?;
    let watermarks = input.watermarks();
    Ok(Node::Keyed {
        spec: OperatorSpec {
            describe,
            build: Arc::new(build),
        },
        keys,
        key_types,
        key_names,
        append_only_output: true,
        emits_on_window_close: true,
        input: Box::new(input),
        watermarks,
    })
}

/// Whether an aggregate of the plan emits on window close.
fn root_has_window_close(node: &Node) -> bool {
    match node {
        Node::Connector { .. } | Node::Changes { .. } => false,
        Node::Op { input, .. } => root_has_window_close(input),
        Node::Keyed {
            emits_on_window_close,
            input,
            ..
        } => *emits_on_window_close || root_has_window_close(input),
        Node::StreamKeyed { input, .. } => root_has_window_close(input),
        Node::Union { inputs, .. } => inputs.iter().any(root_has_window_close),
        Node::Join { inputs, .. } => inputs.iter().any(root_has_window_close),
    }
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
            watermark,
        } => {
            let splits = spec.split_count().max(1);
            let subtasks = match spec {
                // One subtask per file would be too many; files are dealt to subtasks.
                _ if spec.name() == "file" => splits.min(parallelism),
                _ => splits,
            }
            .min(MAX_PARALLELISM as usize);
            fragments.push(Fragment {
                input: FragmentInput::Connector {
                    source: input_relation(&source),
                    spec,
                    projection,
                    watermark,
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
            watermark,
        } => {
            let append_only = relation.is_append_only();
            let chain = if append_only {
                vec![OperatorSpec {
                    describe: "DropKeys".to_string(),
                    build: Arc::new(|| Ok(Box::new(DropKeys) as Box<dyn Operator>)),
                }]
            } else {
                vec![]
            };
            // A view's change stream is read at the job's parallelism, each subtask
            // owning a share of its stream keys; a table's has one writer at a time and
            // carries the table's log position (and watermark generator) in one subtask.
            let subtasks = if relation.kind == RelationKind::MaterializedView && watermark.is_none()
            {
                parallelism
            } else {
                1
            };
            fragments.push(Fragment {
                input: FragmentInput::Changes {
                    relation: input_relation(&relation),
                    projection,
                    watermark,
                },
                chain,
                parallelism: subtasks,
                keyed: !append_only,
            });
            fragments.len() - 1
        }
        Node::Op {
            spec,
            input,
            appends_only,
            ..
        } => {
            // Chained onto whatever computes its input: filtering and projecting before
            // rows move between subtasks costs nothing and moves fewer rows.
            let f = fragment_of(*input, fragments, parallelism);
            fragments[f].chain.push(spec);
            if appends_only {
                fragments[f].keyed = false;
            }
            f
        }
        Node::Keyed {
            spec,
            keys,
            key_types,
            key_names,
            append_only_output,
            input,
            ..
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
                keyed: !append_only_output,
            });
            fragments.len() - 1
        }
        Node::StreamKeyed { spec, input, .. } => {
            let from = fragment_of(*input, fragments, parallelism);
            let exchange = if fragments[from].parallelism == 1 && parallelism == 1 {
                Exchange::Forward
            } else {
                Exchange::HashStreamKey
            };
            fragments.push(Fragment {
                input: FragmentInput::Upstream(vec![(from, exchange)]),
                chain: vec![spec],
                parallelism,
                keyed: true,
            });
            fragments.len() - 1
        }
        Node::Join {
            spec,
            keyed,
            keys,
            key_types,
            key_names,
            inputs,
        } => {
            let [left, right] = *inputs;
            let [left_keys, right_keys] = keys;
            let [left_names, right_names] = key_names;
            let left = fragment_of(left, fragments, parallelism);
            let right = fragment_of(right, fragments, parallelism);
            let (edges, subtasks) = if key_types.is_empty() {
                (vec![(left, Exchange::Single), (right, Exchange::Single)], 1)
            } else {
                let hash = |keys, describe| Exchange::Hash {
                    keys,
                    key_types: key_types.clone(),
                    describe,
                };
                (
                    vec![
                        (left, hash(left_keys, left_names)),
                        (right, hash(right_keys, right_names)),
                    ],
                    parallelism,
                )
            };
            fragments.push(Fragment {
                input: FragmentInput::Upstream(edges),
                chain: vec![spec],
                parallelism: subtasks,
                keyed,
            });
            fragments.len() - 1
        }
        Node::Union { inputs, .. } => {
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

/// What the runtime needs of a relation a fragment reads.
fn input_relation(rel: &Relation) -> crate::stream::graph::InputRelation {
    crate::stream::graph::InputRelation {
        id: rel.id,
        name: rel.name.clone(),
        kind: rel.kind.sql_name(),
        is_table: rel.kind == RelationKind::Table,
        options: rel.options.clone(),
    }
}

fn visit(plan: &LogicalPlan, ctx: &PlanContext) -> Result<Partial> {
    let plain = |node| Ok(Partial::Node(node));
    match plan {
        LogicalPlan::TableScan(scan) => {
            if let Some(table) = changelog::of_scan(scan) {
                return changelog::lower(scan, &table, ctx);
            }
            let name = scan.table_name.table();
            let rel = ctx
                .catalog
                .get(name)
                .ok_or_else(|| EddyError::undefined_table(name))?;
            if scan.fetch.is_some() {
                return Err(unsupported("LIMIT"));
            }
            let projection = scan.projection.clone();
            let watermark = source_watermark(&rel, &projection, ctx)?;
            let mut node = relation_input(rel, projection, watermark)?;
            for f in &scan.filters {
                node = filter_node(physical(f, &scan.projected_schema)?, node);
            }
            plain(node)
        }
        LogicalPlan::Filter(filter) => {
            if temporal_filter::mentions_now(&filter.predicate) {
                let schema = filter.input.schema();
                let (bounds, rest) = temporal_filter::split(&filter.predicate, schema)?;
                let mut input = visit(&filter.input, ctx)?.finish()?;
                if let Some(rest) = datafusion::logical_expr::utils::conjunction(rest) {
                    input = filter_node(physical(&rest, schema)?, input);
                }
                return plain(temporal_filter::node(bounds, input, ctx, schema)?);
            }
            if let Some(node) = top_n::ranking_filter(filter, ctx)? {
                return plain(node);
            }
            let predicate = physical(&filter.predicate, filter.input.schema())?;
            Ok(match visit(&filter.input, ctx)? {
                Partial::Agg(mut agg) => {
                    agg.post.push(PostOp::Filter(predicate));
                    Partial::Agg(agg)
                }
                Partial::Node(node) => Partial::Node(filter_node(predicate, node)),
            })
        }
        LogicalPlan::Projection(projection) => {
            let input_schema = projection.input.schema();
            let exprs = projection
                .expr
                .iter()
                .map(|e| physical(e, input_schema))
                .collect::<Result<Vec<_>>>()?;
            let schema = Arc::new(projection.schema.as_arrow().clone());
            Ok(match visit(&projection.input, ctx)? {
                Partial::Agg(mut agg) => {
                    let mappings =
                        projection_watermarks(&projection.expr, input_schema, &agg.watermarks)?;
                    agg.watermarks = mappings.iter().map(|m| m.output).collect();
                    agg.post.push(PostOp::Project(
                        Project::new(exprs, schema).with_watermarks(mappings),
                    ));
                    Partial::Agg(agg)
                }
                Partial::Node(node) => Partial::Node(project_node(
                    &projection.expr,
                    input_schema,
                    exprs,
                    schema,
                    node,
                )?),
            })
        }
        LogicalPlan::SubqueryAlias(alias) => visit(&alias.input, ctx),
        LogicalPlan::Unnest(unnest) => {
            let Partial::Node(input) = visit(&unnest.input, ctx)? else {
                return Err(unsupported("unnest after an aggregate"));
            };
            let [(list_column, list)] = unnest.list_type_columns.as_slice() else {
                return Err(unsupported("unnest of several lists"));
            };
            if list.depth != 1 || !unnest.struct_type_columns.is_empty() {
                return Err(unsupported("nested or struct unnest"));
            }
            let list_column = *list_column;
            let sources = unnest.dependency_indices.clone();
            let input_watermarks = input.watermarks();
            let watermarks = sources
                .iter()
                .enumerate()
                .filter(|(_, s)| input_watermarks.contains(s))
                .map(|(output, _)| output)
                .collect();
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
                watermarks,
            ))
        }
        LogicalPlan::Aggregate(aggregate) => {
            if let [Expr::GroupingSet(set)] = aggregate.group_expr.as_slice() {
                return grouping_sets::aggregate(aggregate, set, ctx);
            }
            if aggregate
                .group_expr
                .iter()
                .any(|e| matches!(e, Expr::GroupingSet(_)))
            {
                return Err(unsupported("GROUPING SETS mixed with other group keys"));
            }
            if let Some(node) = top_n::first_values(aggregate, ctx)? {
                return plain(node);
            }
            let input = visit(&aggregate.input, ctx)?.finish()?;
            let input_schema = aggregate.input.schema();
            let input_watermarks = input.watermarks();
            // Group keys that are watermarked input columns keep the watermark.
            let watermark_keys: Vec<usize> = aggregate
                .group_expr
                .iter()
                .enumerate()
                .filter(|(_, e)| {
                    matches!(e, Expr::Column(c)
                        if input_schema.index_of_column(c).is_ok_and(|i| input_watermarks.contains(&i)))
                })
                .map(|(k, _)| k)
                .collect();
            let watermarked_key = watermark_keys.first().copied();
            let window_close = if ctx.emit_on_window_close {
                watermarked_key
            } else {
                None
            };
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
                watermarks: watermark_keys,
                window_close,
                watermarked_key,
            }))
        }
        LogicalPlan::Union(union) => {
            let inputs = union
                .inputs
                .iter()
                .map(|i| visit(i, ctx)?.finish())
                .collect::<Result<Vec<_>>>()?;
            // A column keeps a watermark only if every input has one on it.
            let mut watermarks = inputs.first().map(Node::watermarks).unwrap_or_default();
            for input in &inputs[1..] {
                let theirs = input.watermarks();
                watermarks.retain(|c| theirs.contains(c));
            }
            plain(Node::Union { inputs, watermarks })
        }
        LogicalPlan::Join(join) => plain(join_node(join, ctx)?),
        // A view's rows have no order: ORDER BY matters only with a LIMIT.
        LogicalPlan::Sort(sort) => match sort.fetch {
            None => visit(&sort.input, ctx),
            Some(fetch) => plain(top_n::limit_node(&sort.expr, 0, fetch, &sort.input, ctx)?),
        },
        LogicalPlan::Limit(limit) => plain(top_n::limit(limit, ctx)?),
        LogicalPlan::Window(window) => plain(over_window::window_node(window, ctx)?),
        LogicalPlan::Distinct(_) => Err(unsupported("DISTINCT")),
        LogicalPlan::Values(v) => plain(values::values_node(&v.schema, &v.values)?),
        LogicalPlan::EmptyRelation(e) => plain(values::empty_relation_node(e.produce_one_row)?),
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
    let name = f.func.name().to_ascii_lowercase();
    let filter = params
        .filter
        .as_ref()
        .map(|f| physical(f, schema))
        .transpose()?;
    // DISTINCT changes nothing for min, max, bool_and and bool_or, nor ORDER BY for
    // these and count, sum and avg: those are maintained incrementally.
    let distinct_is_moot = matches!(name.as_str(), "min" | "max" | "bool_and" | "bool_or");
    let native = match name.as_str() {
        "count" => Some(AggKind::Count),
        "sum" => Some(AggKind::Sum),
        // false < true: every value true is the least one true, any true the largest.
        "min" | "bool_and" => Some(AggKind::Min),
        "max" | "bool_or" => Some(AggKind::Max),
        "avg" | "mean" => Some(AggKind::Avg),
        _ => None,
    }
    .filter(|_| params.args.len() <= 1)
    .filter(|kind| {
        !params.distinct || distinct_is_moot || matches!(kind, AggKind::Count | AggKind::Sum)
    });
    let Some(kind) = native else {
        return general_agg_call(f, schema, output_type, filter);
    };
    let (arg, arg_type) = match params.args.as_slice() {
        [] => (None, arrow::datatypes::DataType::Null),
        [a] => (Some(physical(a, schema)?), a.get_type(schema)?),
        _ => return Err(unsupported(&format!("{name} with several arguments"))),
    };
    let kind = match (kind, params.distinct, arg.is_some()) {
        (AggKind::Count, true, true) => AggKind::CountDistinct,
        (AggKind::Count, _, false) => AggKind::CountStar,
        (AggKind::Sum, true, true) => AggKind::SumDistinct,
        (kind, _, _) => kind,
    };
    Ok(AggCall {
        kind,
        arg,
        arg_type,
        output_type,
        filter,
        general: None,
    })
}

/// An aggregate Eddy does not maintain incrementally: each group keeps its rows and the
/// result is recomputed by DataFusion's accumulator (see `hash_agg::GeneralAgg`).
fn general_agg_call(
    f: &datafusion::logical_expr::expr::AggregateFunction,
    schema: &DFSchema,
    output_type: arrow::datatypes::DataType,
    filter: Option<Arc<dyn datafusion::physical_expr::PhysicalExpr>>,
) -> Result<AggCall> {
    use crate::stream::operators::hash_agg::{GeneralAgg, OrderKey};
    let params = &f.params;
    let args = params
        .args
        .iter()
        .map(|a| Ok((physical(a, schema)?, a.to_field(schema)?.1.as_ref().clone())))
        .collect::<Result<Vec<_>>>()?;
    let order = params
        .order_by
        .iter()
        .map(|s| {
            Ok(OrderKey {
                expr: physical(&s.expr, schema)?,
                data_type: s.expr.get_type(schema)?,
                options: arrow::compute::SortOptions {
                    descending: !s.asc,
                    nulls_first: s.nulls_first,
                },
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let ignore_nulls = matches!(
        params.null_treatment,
        Some(datafusion::logical_expr::expr::NullTreatment::IgnoreNulls)
    );
    let general = GeneralAgg::new(f.func.clone(), args, order, params.distinct, ignore_nulls)
        .map_err(|e| unsupported(&format!("{} in a view ({})", f.func.name(), e.message)))?;
    general.check_arguments()?;
    Ok(AggCall {
        kind: AggKind::General,
        arg: None,
        arg_type: arrow::datatypes::DataType::Null,
        output_type,
        filter,
        general: Some(Arc::new(general)),
    })
}

/// How each side's rows expire: from the equalities of `ON` and the comparisons of its
/// condition (`BETWEEN` included), a pair `x <= y` where `x` is a watermarked column of
/// one side and `y` an expression over the other side's columns alone says that rows of
/// the other side match nothing once `x`'s watermark passes `y`.
fn join_state_cleanup(
    join: &datafusion::logical_expr::logical_plan::Join,
    watermarks: [Vec<usize>; 2],
) -> Result<[Option<StateCleanup>; 2]> {
    use datafusion::logical_expr::{Between, BinaryExpr, Operator as BinaryOp};
    let schemas = [join.left.schema(), join.right.schema()];
    let mut at_most: Vec<(Expr, Expr)> = Vec::new();
    for (l, r) in &join.on {
        at_most.push((l.clone(), r.clone()));
        at_most.push((r.clone(), l.clone()));
    }
    let conjuncts = join
        .filter
        .as_ref()
        .map(datafusion::logical_expr::utils::split_conjunction)
        .unwrap_or_default();
    for c in conjuncts {
        match c {
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
                BinaryOp::Lt | BinaryOp::LtEq => at_most.push((*left.clone(), *right.clone())),
                BinaryOp::Gt | BinaryOp::GtEq => at_most.push((*right.clone(), *left.clone())),
                BinaryOp::Eq => {
                    at_most.push((*left.clone(), *right.clone()));
                    at_most.push((*right.clone(), *left.clone()));
                }
                _ => {}
            },
            Expr::Between(Between {
                expr,
                negated: false,
                low,
                high,
            }) => {
                at_most.push((*low.clone(), *expr.clone()));
                at_most.push((*expr.clone(), *high.clone()));
            }
            _ => {}
        }
    }
    let mut cleanup: [Option<StateCleanup>; 2] = [None, None];
    for (x, y) in at_most {
        // `col ± k <= y` is `col <= y ∓ k`.
        let (x, y) = isolate_column(x, y);
        let Expr::Column(column) = &x else {
            continue;
        };
        for w in 0..2 {
            let other = 1 - w;
            let Ok(index) = schemas[w].index_of_column(column) else {
                continue;
            };
            let refs = y.column_refs();
            let only_other_side = !refs.is_empty()
                && refs.iter().all(|c| {
                    schemas[other].index_of_column(c).is_ok()
                        && schemas[w].index_of_column(c).is_err()
                });
            if !watermarks[w].contains(&index) || !only_other_side || cleanup[other].is_some() {
                continue;
            }
            cleanup[other] = Some(StateCleanup {
                watermark_column: index,
                bound: physical(&y, schemas[other])?,
                bound_type: schemas[w].field(index).data_type().clone(),
                describe: format!("{x} <= {y}"),
            });
        }
    }
    Ok(cleanup)
}

/// `x <= y` with constants added to or subtracted from a column on the left moved to
/// the right.
fn isolate_column(x: Expr, y: Expr) -> (Expr, Expr) {
    use datafusion::logical_expr::{BinaryExpr, Operator as BinaryOp};
    match x {
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if matches!(right.as_ref(), Expr::Literal(..))
                && matches!(op, BinaryOp::Plus | BinaryOp::Minus) =>
        {
            let inverse = if op == BinaryOp::Plus {
                BinaryOp::Minus
            } else {
                BinaryOp::Plus
            };
            isolate_column(
                *left,
                Expr::BinaryExpr(BinaryExpr::new(Box::new(y), inverse, right)),
            )
        }
        x => (x, y),
    }
}

/// Whether a join input is the table of a temporal join: a scan filtered by
/// [`TEMPORAL_JOIN_MARKER`] (under aliases and projections).
fn is_temporal_table(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::SubqueryAlias(a) => is_temporal_table(&a.input),
        LogicalPlan::Projection(p) => is_temporal_table(&p.input),
        LogicalPlan::Filter(f) => {
            let marked = f
                .predicate
                .exists(|e| {
                    Ok(matches!(e, Expr::ScalarFunction(call) if call.name() == TEMPORAL_JOIN_MARKER))
                })
                .unwrap_or(false);
            marked || is_temporal_table(&f.input)
        }
        _ => false,
    }
}

/// A join of two inputs on the equalities of `ON` (and its other conditions).
fn join_node(
    join: &datafusion::logical_expr::logical_plan::Join,
    ctx: &PlanContext,
) -> Result<Node> {
    use datafusion::common::{JoinType, NullEquality};
    let kind = match join.join_type {
        JoinType::Inner => JoinKind::Inner,
        JoinType::Left => JoinKind::Left,
        JoinType::Right => JoinKind::Right,
        JoinType::Full => JoinKind::Full,
        JoinType::LeftSemi => JoinKind::LeftSemi,
        JoinType::RightSemi => JoinKind::RightSemi,
        JoinType::LeftAnti if join.null_aware => return not_in::null_aware_anti_join(join, ctx),
        JoinType::RightAnti if join.null_aware => {
            return Err(unsupported("a right null-aware anti join"));
        }
        JoinType::LeftAnti => JoinKind::LeftAnti,
        JoinType::RightAnti => JoinKind::RightAnti,
        other => return Err(unsupported(&format!("a {other} join"))),
    };
    let temporal = is_temporal_table(&join.right);
    if is_temporal_table(&join.left) {
        return Err(unsupported(
            "a temporal join with the table (FOR SYSTEM_TIME AS OF) on the left",
        ));
    }
    let left = visit(&join.left, ctx)?.finish()?;
    let right = visit(&join.right, ctx)?.finish()?;
    if temporal {
        if !matches!(kind, JoinKind::Inner | JoinKind::Left) {
            return Err(unsupported(&format!(
                "a {} temporal join (only inner and left joins are)",
                kind.sql_name()
            )));
        }
        if join.on.is_empty() {
            return Err(unsupported(
                "a temporal join without an equality on the table's columns",
            ));
        }
    }
    let schemas = [join.left.schema(), join.right.schema()];
    let mut keys: [Vec<Arc<dyn PhysicalExpr>>; 2] = [vec![], vec![]];
    let mut key_types = Vec::new();
    let mut names: [Vec<String>; 2] = [vec![], vec![]];
    for (l, r) in &join.on {
        let left_type = l.get_type(schemas[0])?;
        // Both sides must encode a key alike, or equal keys would reach different
        // subtasks.
        let r = if r.get_type(schemas[1])? == left_type {
            r.clone()
        } else {
            r.clone().cast_to(&left_type, schemas[1])?
        };
        keys[0].push(physical(l, schemas[0])?);
        keys[1].push(physical(&r, schemas[1])?);
        names[0].push(l.schema_name().to_string());
        names[1].push(r.schema_name().to_string());
        key_types.push(left_type);
    }
    // Rows of an append-only side expire when the other side's watermark passes the
    // time bound the condition puts on their matches (interval and window joins).
    let cleanup = if !temporal && !left.keyed() && !right.keyed() {
        join_state_cleanup(join, [left.watermarks(), right.watermarks()])?
    } else {
        [None, None]
    };
    // The extra condition reads both sides' columns (a semi join outputs only one).
    let both = schemas[0].join(schemas[1])?;
    let filter = join
        .filter
        .as_ref()
        .map(|f| physical(f, &both))
        .transpose()?;
    let spec = JoinSpec {
        kind,
        keys: keys.clone(),
        key_types: key_types.clone(),
        inputs: [
            Arc::new(schemas[0].as_arrow().clone()),
            Arc::new(schemas[1].as_arrow().clone()),
        ],
        keyed_inputs: [left.keyed(), right.keyed()],
        filter,
        nulls_equal: join.null_equality == NullEquality::NullEqualsNull,
        temporal,
        cleanup: cleanup.clone(),
        output: Arc::new(join.schema.as_arrow().clone()),
    };
    let keyed = spec.output_keyed();
    let on: Vec<String> = names[0]
        .iter()
        .zip(&names[1])
        .map(|(l, r)| format!("{l} = {r}"))
        .collect();
    let mut state = String::new();
    for (side, name) in ["left", "right"].iter().enumerate() {
        let append_only = ![&left, &right][side].keyed();
        match &cleanup[side] {
            Some(c) => state.push_str(&format!(", {name} rows expire by {}", c.describe)),
            // Rows of a stream are kept for ever (a table's or view's only while they live).
            None if append_only && !(temporal && side == 0) => {
                state.push_str(&format!(", {name} state unbounded"))
            }
            None => {}
        }
    }
    let describe = format!(
        "{}({}, on: [{}]{}{state})",
        if temporal { "TemporalJoin" } else { "HashJoin" },
        kind.sql_name(),
        on.join(", "),
        join.filter
            .as_ref()
            .map(|f| format!(", filter: {f}"))
            .unwrap_or_default()
    );
    let build: OperatorFactory =
        Arc::new(move || Ok(Box::new(HashJoin::new(spec.clone())?) as Box<dyn Operator>));
    Ok(Node::Join {
        spec: OperatorSpec { describe, build },
        keyed,
        keys,
        key_types,
        key_names: names.map(|n| n.join(", ")),
        inputs: Box::new([left, right]),
    })
}
