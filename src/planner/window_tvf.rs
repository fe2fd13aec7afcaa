//! `TUMBLE` and `HOP` in `FROM` as a logical plan node.
//!
//! `FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND [, offset])` and
//! `FROM HOP(bid, date_time, slide, size [, offset])` (RisingWave's forms; Flink's
//! `TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), ...))` arrives here in that form too,
//! under the names of [`FLINK_TUMBLE`] / [`FLINK_HOP`], and adds `window_time`) are planned
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
//! window it falls in; `window_end = window_start + size`.

use arrow::datatypes::IntervalMonthDayNano;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{Column, DFSchemaRef, Result, ScalarValue, plan_err};
use datafusion::config::ConfigOptions;
use datafusion::logical_expr::planner::{
    PlannedRelation, RelationPlanner, RelationPlannerContext, RelationPlanning,
};
use datafusion::logical_expr::{
    Expr, Extension, LogicalPlan, LogicalPlanBuilder, ScalarUDF, UserDefinedLogicalNodeCore, cast,
    lit,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::sql::sqlparser::ast::{Expr as SqlExpr, FunctionArg, FunctionArgExpr, TableFactor};
use std::sync::Arc;

/// The function name a Flink `TUMBLE` becomes before parsing (see
/// `session::token_rewrites::windows`).
pub const FLINK_TUMBLE: &str = "__eddy_flink_tumble";
/// The function name a Flink `HOP` becomes.
pub const FLINK_HOP: &str = "__eddy_flink_hop";

/// The list of window starts a `HOP` unnests, by its internal name.
const HOP_STARTS: &str = "__eddy_hop_starts";

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub enum WindowKind {
    Tumble,
    Hop {
        slide: Expr,
        /// The session's `hop_window_starts` function.
        starts: Arc<ScalarUDF>,
    },
}

/// A window table function over `input`: its columns, then `window_start`,
/// `window_end` (and Flink's `window_time`, the end less a millisecond).
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
        let with_window = |start: Expr, mut exprs: Vec<Expr>| {
            let end = start.clone() + self.size.clone();
            exprs.push(start.alias("window_start"));
            if self.window_time {
                exprs.push(end.clone().alias("window_end"));
                exprs.push((end - millisecond.clone()).alias("window_time"));
            } else {
                exprs.push(end.alias("window_end"));
            }
            exprs
        };
        match &self.kind {
            WindowKind::Tumble => {
                let epoch = lit(ScalarValue::TimestampNanosecond(Some(0), None));
                let origin = match self.offset_interval() {
                    Some(offset) => epoch + offset,
                    None => epoch,
                };
                let start = datafusion::functions::datetime::expr_fn::date_bin(
                    self.size.clone(),
                    self.time.clone(),
                    origin,
                );
                LogicalPlanBuilder::from(self.input.clone())
                    .project(with_window(start, input_columns))?
                    .build()
            }
            WindowKind::Hop { slide, starts } => {
                let mut args = vec![self.time.clone(), slide.clone(), self.size.clone()];
                args.extend(self.offset_interval());
                let starts = Expr::ScalarFunction(
                    datafusion::logical_expr::expr::ScalarFunction::new_udf(starts.clone(), args),
                );
                let mut listed = input_columns.clone();
                listed.push(starts.alias(HOP_STARTS));
                LogicalPlanBuilder::from(self.input.clone())
                    .project(listed)?
                    // A NULL time is in no window.
                    .unnest_column_with_options(
                        HOP_STARTS,
                        datafusion::common::UnnestOptions::new().with_preserve_nulls(false),
                    )?
                    .project(with_window(
                        Expr::Column(Column::from_name(HOP_STARTS)),
                        input_columns,
                    ))?
                    .build()
            }
        }
    }
}

impl UserDefinedLogicalNodeCore for WindowTvf {
    fn name(&self) -> &str {
        match self.kind {
            WindowKind::Tumble => "Tumble",
            WindowKind::Hop { .. } => "Hop",
        }
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        let mut exprs = vec![self.time.clone(), self.size.clone()];
        if let WindowKind::Hop { slide, .. } = &self.kind {
            exprs.push(slide.clone());
        }
        exprs.extend(self.offset.clone());
        exprs
    }

    fn fmt_for_explain(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{}: time={}, size={}", self.name(), self.time, self.size)?;
        if let WindowKind::Hop { slide, .. } = &self.kind {
            write!(f, ", slide={slide}")?;
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

/// Plans `TUMBLE(...)` and `HOP(...)` in `FROM` as a [`WindowTvf`].
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
        let (hop, window_time) = match function.as_str() {
            "tumble" => (false, false),
            "hop" => (true, false),
            FLINK_TUMBLE => (false, true),
            FLINK_HOP => (true, true),
            _ => return Ok(RelationPlanning::Original(Box::new(relation))),
        };
        let display = if hop { "HOP" } else { "TUMBLE" };
        let args = args
            .args
            .iter()
            .map(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Ok(e.clone()),
                other => plan_err!("{display} does not take the argument {other}"),
            })
            .collect::<Result<Vec<SqlExpr>>>()?;
        let (wanted, usage) = if hop {
            (4..=5, "HOP(relation, time_column, slide, size [, offset])")
        } else {
            (3..=4, "TUMBLE(relation, time_column, size [, offset])")
        };
        if !wanted.contains(&args.len()) {
            return plan_err!("{display} takes {usage}");
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
        let offset_at = args.len() - 1;
        let has_offset = args.len() == *wanted.end();
        let mut exprs = args[1..]
            .iter()
            .enumerate()
            .map(|(i, a)| {
                // An offset given as text may carry a sign Arrow's interval parser does not
                // take (`'+6 hours'`).
                let a = match a {
                    SqlExpr::Value(v) if has_offset && i + 1 == offset_at => match &v.value {
                        datafusion::sql::sqlparser::ast::Value::SingleQuotedString(text) => {
                            SqlExpr::value(
                                datafusion::sql::sqlparser::ast::Value::SingleQuotedString(
                                    text.replace('+', ""),
                                ),
                            )
                        }
                        _ => a.clone(),
                    },
                    _ => a.clone(),
                };
                context.sql_to_expr(a, &schema)
            })
            .collect::<Result<Vec<Expr>>>()?
            .into_iter();
        let time = exprs.next().expect("arity checked");
        let (kind, size) = if hop {
            let slide = exprs.next().expect("arity checked");
            let size = exprs.next().expect("arity checked");
            let Some(starts) = context
                .context_provider()
                .get_function_meta("hop_window_starts")
            else {
                return plan_err!("hop_window_starts is not registered");
            };
            (WindowKind::Hop { slide, starts }, size)
        } else {
            (WindowKind::Tumble, exprs.next().expect("arity checked"))
        };
        let node = WindowTvf::try_new(input, kind, time, size, exprs.next(), window_time)?;
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
}
