//! Window table functions in `FROM` as a logical plan node.
//!
//! `FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND [, offset])`,
//! `FROM HOP(bid, date_time, slide, size [, offset])` (RisingWave's forms),
//! `CUMULATE(bid, date_time, step, size [, offset])` and
//! `SESSION(bid, date_time, gap [, partition keys...])` (Flink's windows; Flink's
//! `TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), ...))` arrives here in this form too,
//! under the names of [`FLINK_TUMBLE`] and the others, and adds `window_time`) are planned
//! by [`WindowPlanner`], a DataFusion relation planner: it plans the relation the
//! window reads (a table, source, view or CTE), turns the other arguments into
//! expressions over it, and returns a [`WindowTvf`] node whose output is the relation's
//! columns followed by `window_start` and `window_end`. Eddy's parsing hands the relation
//! over as `(SELECT * FROM bid)` and names the window `bid` when it has no alias
//! (`session::sql_rewrite`), because DataFusion resolves only the relations a statement
//! names before planning it; the view's stored query keeps the call in that form, and
//! nothing is rewritten as SQL text.
//!
//! [`ExpandWindows`], the first analyzer rule, replaces the node with ordinary plan nodes
//! built from expressions, which both batch queries and the stream planner run:
//! `window_start = date_bin(size, time, origin)` for a tumbling window; for a hopping one
//! the list `hop_window_starts(time, slide, size [, offset])` unnested, each row once per
//! window it falls in; `window_end = window_start + size`. A cumulating window's start
//! is its `size` window's, its ends the unnested `cumulate_window_ends(...)`; a session
//! window's bounds are the window functions `session_start(time, gap)` and
//! `session_end(time, gap)` `OVER (PARTITION BY keys ORDER BY time)`.

use arrow::datatypes::IntervalMonthDayNano;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{Column, DFSchemaRef, Result, ScalarValue, plan_err};
use datafusion::config::ConfigOptions;
use datafusion::logical_expr::expr::{ScalarFunction, WindowFunction};
use datafusion::logical_expr::planner::{
    PlannedRelation, RelationPlanner, RelationPlannerContext, RelationPlanning,
};
use datafusion::logical_expr::{
    Expr, ExprFunctionExt, Extension, LogicalPlan, LogicalPlanBuilder, ScalarUDF,
    UserDefinedLogicalNodeCore, WindowFunctionDefinition, WindowUDF, cast, lit,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::sql::sqlparser::ast::{
    Expr as SqlExpr, FunctionArg, FunctionArgExpr, TableFactor, Value as SqlValue,
};
use std::sync::Arc;

/// The function name a Flink `TUMBLE` becomes before parsing (see
/// `session::token_rewrites::windows`).
pub const FLINK_TUMBLE: &str = "__eddy_flink_tumble";
/// The function name a Flink `HOP` becomes.
pub const FLINK_HOP: &str = "__eddy_flink_hop";
/// The function name a Flink `CUMULATE` becomes.
pub const FLINK_CUMULATE: &str = "__eddy_flink_cumulate";
/// The function name a Flink `SESSION` becomes: (relation, time, gap, partition keys...).
pub const FLINK_SESSION: &str = "__eddy_flink_session";

/// The list of window bounds a `HOP` or `CUMULATE` unnests, by its internal name.
const BOUNDS: &str = "__eddy_window_bounds";

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub enum WindowKind {
    Tumble,
    Hop {
        slide: Expr,
        /// The session's `hop_window_starts` function.
        starts: Arc<ScalarUDF>,
    },
    Cumulate {
        step: Expr,
        /// The session's `cumulate_window_ends` function.
        ends: Arc<ScalarUDF>,
    },
    /// `size` is the gap.
    Session {
        keys: Vec<Expr>,
        start: Arc<WindowUDF>,
        end: Arc<WindowUDF>,
    },
}

/// A window table function over `input`: its columns, then `window_start`,
/// `window_end` (and Flink's `window_time`, the end less a millisecond). `size` is a
/// session window's gap.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WindowTvf {
    pub input: LogicalPlan,
    pub kind: WindowKind,
    /// The time column the windows are of.
    pub time: Expr,
    pub size: Expr,
    pub offset: Option<Expr>,
    pub window_time: bool,
    schema: DFSchemaRef,
}

impl PartialOrd for WindowTvf {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        (
            &self.input,
            &self.kind,
            &self.time,
            &self.size,
            &self.offset,
            self.window_time,
        )
            .partial_cmp(&(
                &other.input,
                &other.kind,
                &other.time,
                &other.size,
                &other.offset,
                other.window_time,
            ))
    }
}

impl WindowTvf {
    pub fn try_new(
        input: LogicalPlan,
        kind: WindowKind,
        time: Expr,
        size: Expr,
        offset: Option<Expr>,
        window_time: bool,
    ) -> Result<Self> {
        let mut node = Self {
            input,
            kind,
            time,
            size,
            offset,
            window_time,
            schema: Arc::new(datafusion::common::DFSchema::empty()),
        };
        node.schema = node.expand()?.schema().clone();
        Ok(node)
    }

    /// The offset as an interval (RisingWave also takes it as a string).
    fn offset_interval(&self) -> Option<Expr> {
        self.offset.clone().map(|o| {
            cast(
                o,
                arrow::datatypes::DataType::Interval(arrow::datatypes::IntervalUnit::MonthDayNano),
            )
        })
    }

    /// The node as ordinary plan nodes computing the window columns.
    pub fn expand(&self) -> Result<LogicalPlan> {
        let input_columns: Vec<Expr> = self
            .input
            .schema()
            .columns()
            .into_iter()
            .map(Expr::Column)
            .collect();
        let millisecond = lit(ScalarValue::IntervalMonthDayNano(Some(
            IntervalMonthDayNano::new(0, 0, 1_000_000),
        )));
        // The input's columns, then the window's start and end (`start + size` unless
        // given) and Flink's `window_time`.
        let with_window = |start: Expr, end: Option<Expr>, mut exprs: Vec<Expr>| {
            let end = end.unwrap_or_else(|| start.clone() + self.size.clone());
            exprs.push(start.alias("window_start"));
            if self.window_time {
                exprs.push(end.clone().alias("window_end"));
                exprs.push((end - millisecond.clone()).alias("window_time"));
            } else {
                exprs.push(end.alias("window_end"));
            }
            exprs
        };
        let epoch = lit(ScalarValue::TimestampNanosecond(Some(0), None));
        let origin = match self.offset_interval() {
            Some(offset) => epoch + offset,
            None => epoch,
        };
        let size_window_start = datafusion::functions::datetime::expr_fn::date_bin(
            self.size.clone(),
            self.time.clone(),
            origin,
        );
        let input = LogicalPlanBuilder::from(self.input.clone());
        match &self.kind {
            WindowKind::Tumble => input
                .project(with_window(size_window_start, None, input_columns))?
                .build(),
            WindowKind::Hop { slide, starts } => {
                let mut args = vec![self.time.clone(), slide.clone(), self.size.clone()];
                args.extend(self.offset_interval());
                let bounds = Expr::ScalarFunction(ScalarFunction::new_udf(starts.clone(), args));
                let mut listed = input_columns.clone();
                listed.push(bounds.alias(BOUNDS));
                unnest_bounds(input.project(listed)?)?
                    .project(with_window(bound(), None, input_columns))?
                    .build()
            }
            WindowKind::Cumulate { step, ends } => {
                let mut args = vec![self.time.clone(), step.clone(), self.size.clone()];
                args.extend(self.offset_interval());
                let bounds = Expr::ScalarFunction(ScalarFunction::new_udf(ends.clone(), args));
                let mut listed = input_columns.clone();
                listed.push(size_window_start.alias("window_start"));
                listed.push(bounds.alias(BOUNDS));
                let start = Expr::Column(Column::from_name("window_start"));
                unnest_bounds(input.project(listed)?)?
                    .project(with_window(start, Some(bound()), input_columns))?
                    .build()
            }
            WindowKind::Session { keys, start, end } => {
                let over = |f: &Arc<WindowUDF>| {
                    Expr::from(WindowFunction::new(
                        WindowFunctionDefinition::WindowUDF(f.clone()),
                        vec![self.time.clone(), self.size.clone()],
                    ))
                    .partition_by(keys.clone())
                    .order_by(vec![self.time.clone().sort(true, false)])
                    .build()
                };
                let windowed = input.window(vec![over(start)?, over(end)?])?;
                let fields = windowed.schema().fields().len();
                let column =
                    |i: usize| Expr::Column(Column::from(windowed.schema().qualified_field(i)));
                let (start, end) = (column(fields - 2), column(fields - 1));
                windowed
                    .project(with_window(start, Some(end), input_columns))?
                    .build()
            }
        }
    }
}

/// The unnested window bounds, by their internal name.
fn bound() -> Expr {
    Expr::Column(Column::from_name(BOUNDS))
}

/// Each row once per element of its window bounds list; a NULL time is in no window.
fn unnest_bounds(plan: LogicalPlanBuilder) -> Result<LogicalPlanBuilder> {
    plan.unnest_column_with_options(
        BOUNDS,
        datafusion::common::UnnestOptions::new().with_preserve_nulls(false),
    )
}

impl UserDefinedLogicalNodeCore for WindowTvf {
    fn name(&self) -> &str {
        match self.kind {
            WindowKind::Tumble => "Tumble",
            WindowKind::Hop { .. } => "Hop",
            WindowKind::Cumulate { .. } => "Cumulate",
            WindowKind::Session { .. } => "Session",
        }
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    /// The time column, the size (gap), the slide, step or partition keys, the offset.
    fn expressions(&self) -> Vec<Expr> {
        let mut exprs = vec![self.time.clone(), self.size.clone()];
        match &self.kind {
            WindowKind::Tumble => {}
            WindowKind::Hop { slide, .. } => exprs.push(slide.clone()),
            WindowKind::Cumulate { step, .. } => exprs.push(step.clone()),
            WindowKind::Session { keys, .. } => exprs.extend(keys.iter().cloned()),
        }
        exprs.extend(self.offset.clone());
        exprs
    }

    fn fmt_for_explain(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{}: time={}, size={}", self.name(), self.time, self.size)?;
        match &self.kind {
            WindowKind::Tumble => {}
            WindowKind::Hop { slide, .. } => write!(f, ", slide={slide}")?,
            WindowKind::Cumulate { step, .. } => write!(f, ", step={step}")?,
            WindowKind::Session { keys, .. } => {
                let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
                write!(f, ", partition by [{}]", keys.join(", "))?
            }
        }
        if let Some(offset) = &self.offset {
            write!(f, ", offset={offset}")?;
        }
        Ok(())
    }

    fn with_exprs_and_inputs(
        &self,
        exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> Result<Self> {
        let (Some(input), 1) = (inputs.pop(), inputs.len() + 1) else {
            return plan_err!("a window has one input");
        };
        let mut exprs = exprs.into_iter();
        let (Some(time), Some(size)) = (exprs.next(), exprs.next()) else {
            return plan_err!("a window needs its time column and size");
        };
        let kind = match &self.kind {
            WindowKind::Tumble => WindowKind::Tumble,
            WindowKind::Hop { starts, .. } => match exprs.next() {
                Some(slide) => WindowKind::Hop {
                    slide,
                    starts: starts.clone(),
                },
                None => return plan_err!("a hopping window needs its slide"),
            },
            WindowKind::Cumulate { ends, .. } => match exprs.next() {
                Some(step) => WindowKind::Cumulate {
                    step,
                    ends: ends.clone(),
                },
                None => return plan_err!("a cumulating window needs its step"),
            },
            WindowKind::Session { keys, start, end } => WindowKind::Session {
                keys: exprs.by_ref().take(keys.len()).collect(),
                start: start.clone(),
                end: end.clone(),
            },
        };
        Self::try_new(input, kind, time, size, exprs.next(), self.window_time)
    }
}

/// Replaces every [`WindowTvf`] with the plan nodes that compute it. Runs first, so the
/// expressions it builds are type-checked and coerced by the rules after it.
#[derive(Debug, Default)]
pub struct ExpandWindows;

impl AnalyzerRule for ExpandWindows {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| match &node {
            LogicalPlan::Extension(Extension { node: ext }) => {
                match ext.as_any().downcast_ref::<WindowTvf>() {
                    Some(window) => Ok(Transformed::yes(window.expand()?)),
                    None => Ok(Transformed::no(node)),
                }
            }
            _ => Ok(Transformed::no(node)),
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "expand_windows"
    }
}

/// The window functions planned here, before their arguments are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Tumble,
    Hop,
    Cumulate,
    Session,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Tumble => "TUMBLE",
            Shape::Hop => "HOP",
            Shape::Cumulate => "CUMULATE",
            Shape::Session => "SESSION",
        }
    }

    /// The fewest and most arguments.
    fn arity(self) -> (usize, usize) {
        match self {
            Shape::Tumble => (3, 4),
            Shape::Hop | Shape::Cumulate => (4, 5),
            Shape::Session => (3, usize::MAX),
        }
    }

    fn usage(self) -> &'static str {
        match self {
            Shape::Tumble => "TUMBLE(relation, time_column, size [, offset])",
            Shape::Hop => "HOP(relation, time_column, slide, size [, offset])",
            Shape::Cumulate => "CUMULATE(relation, time_column, step, size [, offset])",
            Shape::Session => "SESSION(relation, time_column, gap [, partition keys])",
        }
    }
}

/// Whether a function called in `FROM` is a window planned here.
pub fn is_window_function(function: &str) -> bool {
    window_shape(&function.to_ascii_lowercase()).is_some()
}

/// The window a function name in `FROM` is, and whether it adds Flink's `window_time`.
fn window_shape(function: &str) -> Option<(Shape, bool)> {
    Some(match function {
        "tumble" => (Shape::Tumble, false),
        "hop" => (Shape::Hop, false),
        "cumulate" => (Shape::Cumulate, false),
        "session" => (Shape::Session, false),
        FLINK_TUMBLE => (Shape::Tumble, true),
        FLINK_HOP => (Shape::Hop, true),
        FLINK_CUMULATE => (Shape::Cumulate, true),
        FLINK_SESSION => (Shape::Session, true),
        _ => return None,
    })
}

/// Plans `TUMBLE`, `HOP`, `CUMULATE` and `SESSION` in `FROM` as a [`WindowTvf`].
#[derive(Debug, Default)]
pub struct WindowPlanner;

impl RelationPlanner for WindowPlanner {
    fn plan_relation(
        &self,
        relation: TableFactor,
        context: &mut dyn RelationPlannerContext,
    ) -> Result<RelationPlanning> {
        let TableFactor::Table {
            name,
            args: Some(args),
            alias,
            ..
        } = &relation
        else {
            return Ok(RelationPlanning::Original(Box::new(relation)));
        };
        let function = name.to_string().to_ascii_lowercase();
        let Some((shape, window_time)) = window_shape(&function) else {
            return Ok(RelationPlanning::Original(Box::new(relation)));
        };
        let display = shape.name();
        let args = args
            .args
            .iter()
            .map(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Ok(e.clone()),
                other => plan_err!("{display} does not take the argument {other}"),
            })
            .collect::<Result<Vec<SqlExpr>>>()?;
        let (fewest, most) = shape.arity();
        if args.len() < fewest || args.len() > most {
            return plan_err!("{display} takes {}", shape.usage());
        }
        // The relation read, as Eddy's parsing hands it over: `(SELECT * FROM name)`, so
        // that DataFusion resolves the name before planning (it looks up only the tables a
        // statement names as relations); the window already has the relation's name as
        // its alias when it had none.
        let input_factor = match &args[0] {
            SqlExpr::Subquery(query) => TableFactor::Derived {
                lateral: false,
                subquery: query.clone(),
                alias: None,
                sample: None,
            },
            other => {
                return plan_err!(
                    "{display}'s first argument is the table, source or view it reads, not {other}"
                );
            }
        };
        let input = context.plan(input_factor)?;
        let schema = input.schema().clone();
        // The offset, when given, is the last argument (never for SESSION, whose extra
        // arguments are partition keys).
        let offset_at = (shape != Shape::Session && args.len() == most).then_some(args.len() - 1);
        let mut exprs = Vec::new();
        for (i, arg) in args.iter().enumerate().skip(1) {
            // An offset given as text may carry a sign Arrow's interval parser does not
            // take (`'+6 hours'`).
            let arg = match arg {
                SqlExpr::Value(v) if Some(i) == offset_at => match &v.value {
                    SqlValue::SingleQuotedString(text) => {
                        SqlExpr::value(SqlValue::SingleQuotedString(text.replace('+', "")))
                    }
                    _ => arg.clone(),
                },
                _ => arg.clone(),
            };
            exprs.push(context.sql_to_expr(arg, &schema)?);
        }
        let mut exprs = exprs.into_iter();
        let mut next = || exprs.next().expect("arity checked");
        let scalar = |name: &str| {
            context
                .context_provider()
                .get_function_meta(name)
                .ok_or_else(|| {
                    datafusion::error::DataFusionError::Plan(format!("{name} is not registered"))
                })
        };
        let time = next();
        let (kind, size) = match shape {
            Shape::Tumble => (WindowKind::Tumble, next()),
            Shape::Hop => {
                let slide = next();
                let starts = scalar("hop_window_starts")?;
                (WindowKind::Hop { slide, starts }, next())
            }
            Shape::Cumulate => {
                let step = next();
                let ends = scalar("cumulate_window_ends")?;
                (WindowKind::Cumulate { step, ends }, next())
            }
            Shape::Session => {
                let gap = next();
                let window = |name: &str| {
                    context
                        .context_provider()
                        .get_window_meta(name)
                        .ok_or_else(|| {
                            datafusion::error::DataFusionError::Plan(format!(
                                "{name} is not registered"
                            ))
                        })
                };
                let (start, end) = (window("session_start")?, window("session_end")?);
                let keys = exprs.by_ref().collect();
                (WindowKind::Session { keys, start, end }, gap)
            }
        };
        let offset = exprs.next();
        let node = WindowTvf::try_new(input, kind, time, size, offset, window_time)?;
        Ok(RelationPlanning::Planned(Box::new(PlannedRelation::new(
            LogicalPlan::Extension(Extension {
                node: Arc::new(node),
            }),
            alias.clone(),
        ))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{RecordBatch, StringArray, TimestampMicrosecondArray};
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use datafusion::common::tree_node::TreeNode;
    use datafusion::execution::session_state::SessionStateBuilder;
    use datafusion::prelude::SessionContext;

    /// A context planning windows as Eddy's does, over `clicks(ts, page)`.
    fn context() -> SessionContext {
        let state = SessionStateBuilder::new()
            .with_default_features()
            .with_relation_planners(vec![Arc::new(WindowPlanner)])
            .build();
        let ctx = SessionContext::new_with_state(state);
        ctx.add_analyzer_rule(Arc::new(ExpandWindows));
        crate::session::functions::register(&ctx);
        let second = 1_000_000i64;
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
                Field::new("page", DataType::Utf8, true),
            ])),
            vec![
                Arc::new(TimestampMicrosecondArray::from(vec![
                    Some(1_704_067_201 * second),
                    Some(1_704_067_207 * second),
                    None,
                ])),
                Arc::new(StringArray::from(vec!["a", "b", "z"])),
            ],
        )
        .unwrap();
        ctx.register_batch("clicks", batch).unwrap();
        ctx
    }

    async fn rows(ctx: &SessionContext, sql: &str) -> Vec<String> {
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let text = arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        text.lines().map(str::to_string).collect()
    }

    #[tokio::test]
    async fn a_window_is_a_plan_node_until_analysis_expands_it() {
        let ctx = context();
        let sql = "SELECT window_start, count(*) FROM TUMBLE((SELECT * FROM clicks), ts, INTERVAL '5' SECOND) AS clicks GROUP BY window_start";
        let plan = ctx.state().create_logical_plan(sql).await.unwrap();
        let planned = plan.display_indent().to_string();
        assert!(planned.contains("Tumble: time=clicks.ts"), "{planned}");
        assert!(!planned.contains("date_bin"), "{planned}");
        let analyzed = ExpandWindows
            .analyze(plan, &ConfigOptions::default())
            .unwrap()
            .display_indent()
            .to_string();
        assert!(!analyzed.contains("Tumble"), "{analyzed}");
        assert!(analyzed.contains("date_bin"), "{analyzed}");
    }

    #[tokio::test]
    async fn windows_give_the_rows_of_their_expressions() {
        let ctx = context();
        let tumble = rows(
            &ctx,
            "SELECT page, window_start, window_end FROM TUMBLE((SELECT * FROM clicks), ts, INTERVAL '5' SECOND, INTERVAL '2' SECOND) AS c ORDER BY page",
        )
        .await;
        let by_hand = rows(
            &ctx,
            "SELECT page, date_bin(INTERVAL '5' SECOND, ts, TIMESTAMP '1970-01-01 00:00:02') AS window_start, \
             date_bin(INTERVAL '5' SECOND, ts, TIMESTAMP '1970-01-01 00:00:02') + INTERVAL '5' SECOND AS window_end \
             FROM clicks ORDER BY page",
        )
        .await;
        assert_eq!(tumble, by_hand);
        // Each row once per hopping window holding it; a NULL time is in none.
        let hop = rows(
            &ctx,
            "SELECT c.page, c.window_start, c.window_end FROM HOP((SELECT * FROM clicks), ts, INTERVAL '5' SECOND, INTERVAL '10' SECOND) AS c ORDER BY page, window_start",
        )
        .await;
        assert_eq!(hop.len(), 4 + 4, "header lines and four windows: {hop:?}");
        assert!(
            hop[3].contains("| a    | 2023-12-31T23:59:55 | 2024-01-01T00:00:05 |"),
            "{hop:?}"
        );
        assert!(!hop.iter().any(|l| l.contains("| z ")), "{hop:?}");
    }

    #[tokio::test]
    async fn a_window_over_anything_but_a_relation_is_refused() {
        let ctx = context();
        let err = ctx
            .sql("SELECT * FROM TUMBLE(1, ts, INTERVAL '5' SECOND)")
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("TUMBLE's first argument"), "{err}");
        let err = ctx
            .sql("SELECT * FROM HOP((SELECT * FROM clicks), ts, INTERVAL '5' SECOND)")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("HOP takes HOP(relation, time_column, slide, size [, offset])"),
            "{err}"
        );
    }

    /// The window node of a planned query.
    fn window_of(plan: &LogicalPlan) -> WindowTvf {
        let mut found = None;
        plan.apply(|node| {
            if let LogicalPlan::Extension(ext) = node
                && let Some(w) = ext.node.as_any().downcast_ref::<WindowTvf>()
            {
                found = Some(w.clone());
            }
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        })
        .unwrap();
        found.expect("a window node")
    }

    #[tokio::test]
    async fn every_window_rebuilds_from_its_expressions() {
        let ctx = context();
        for sql in [
            "SELECT * FROM TUMBLE((SELECT * FROM clicks), ts, INTERVAL '5' SECOND, INTERVAL '1' SECOND) AS c",
            "SELECT * FROM HOP((SELECT * FROM clicks), ts, INTERVAL '5' SECOND, INTERVAL '10' SECOND) AS c",
            "SELECT * FROM CUMULATE((SELECT * FROM clicks), ts, INTERVAL '2' SECOND, INTERVAL '6' SECOND) AS c",
            "SELECT * FROM SESSION((SELECT * FROM clicks), ts, INTERVAL '5' SECOND, page) AS c",
            "SELECT * FROM __eddy_flink_session((SELECT * FROM clicks), ts, INTERVAL '5' SECOND) AS c",
        ] {
            let plan = ctx.state().create_logical_plan(sql).await.unwrap();
            let window = window_of(&plan);
            let rebuilt = window
                .with_exprs_and_inputs(window.expressions(), vec![window.input.clone()])
                .unwrap();
            assert_eq!(rebuilt, window, "{sql}");
            // And it runs, with the window columns last.
            let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
            let schema = batches[0].schema();
            let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            assert_eq!(
                &names[..4],
                &["ts", "page", "window_start", "window_end"],
                "{sql}"
            );
        }
    }

    #[tokio::test]
    async fn cumulating_and_session_windows_match_their_definitions() {
        let ctx = context();
        // 00:00:01 is in the cumulating windows [00:00, 00:02), [00:00, 00:04) and
        // [00:00, 00:06); 00:00:07 in [00:06, 00:08), [00:06, 00:10), [00:06, 00:12).
        let cumulate = rows(
            &ctx,
            "SELECT page, window_start, window_end FROM CUMULATE((SELECT * FROM clicks), ts, INTERVAL '2' SECOND, INTERVAL '6' SECOND) AS c ORDER BY page, window_end",
        )
        .await;
        assert_eq!(cumulate.len(), 4 + 6, "{cumulate:?}");
        assert!(
            cumulate[3].contains("| a    | 2024-01-01T00:00:00 | 2024-01-01T00:00:02 |"),
            "{cumulate:?}"
        );
        assert!(
            cumulate[8].contains("| b    | 2024-01-01T00:00:06 | 2024-01-01T00:00:12 |"),
            "{cumulate:?}"
        );
        // Six seconds apart with a five-second gap: two sessions; with a ten-second gap, one.
        let sessions = |gap: &str| {
            format!(
                "SELECT count(DISTINCT window_start) AS n FROM SESSION((SELECT * FROM clicks), ts, INTERVAL '{gap}' SECOND) AS c WHERE ts IS NOT NULL"
            )
        };
        assert!(rows(&ctx, &sessions("5")).await[3].contains("| 2 |"));
        assert!(rows(&ctx, &sessions("10")).await[3].contains("| 1 |"));
    }
}
