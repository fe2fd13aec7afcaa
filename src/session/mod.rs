//! Sessions: what one client connection can do, independent of the wire protocol.
//!
//! The [`Engine`] is shared by every connection: storage, catalog and the DataFusion
//! context that plans and runs batch SQL. A [`Session`] belongs to one connection and
//! holds its variables. The server turns wire messages into calls to
//! [`Session::execute_sql`] (simple protocol) or [`Session::prepare`] and
//! [`Session::execute_prepared`] (extended protocol), and turns [`Outcome`]s back into
//! wire messages.

mod age_function;
mod alter_columns;
mod arg_min_max;
mod at_time_zone;
mod bytea_escape;
pub mod cdc;
mod changelog_function;
mod client_queries;
mod column_names;
mod column_values;
mod comments;
mod copy;
mod corresponding;
mod date_difference;
mod date_function;
mod date_trunc_by_row;
mod date_trunc_units;
mod ddl;
mod dml_subqueries;
pub mod drop;
mod exists_in_select;
mod failover;
mod float_extremes;
mod format_function;
pub mod functions;
mod hidden_columns;
mod indexes;
mod integer_aggregates;
mod integer_literals;
mod integral_decimal;
mod interval_arithmetic;
mod interval_avg;
pub mod jobs;
mod joined_dml;
mod justify_functions;
pub mod kafka_tables;
mod lateral_aggregates;
mod make_interval;
pub mod materialized_views;
mod numeric_division;
mod ordered_set_aggregates;
mod pg_semantics;
mod regexp;
mod rename;
mod returning;
mod round_places;
pub mod rounding_casts;
mod scalar_subqueries;
mod scan_order;
mod session_time_zone;
mod session_windows;
pub mod set_operations;
mod show;
mod similar_to;
mod sink_into_table;
mod sinks;
mod sources;
mod sql_functions;
mod sql_prepare;
pub mod sql_rewrite;
mod string_agg_by_row;
mod struct_casts;
mod struct_star;
mod system_params;
mod time_literals;
mod timestamp_difference;
mod to_char;
mod to_timestamp;
mod token_rewrites;
pub mod users;
mod using_joins;
pub mod vars;

use crate::catalog::schema_provider::CatalogSchemaProvider;
use crate::catalog::{Catalog, DATABASE_NAME, DEFAULT_SCHEMA};
use crate::config::Config;
use crate::error::{EddyError, Result, sqlstate};
use crate::state::StateStore;
use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::execution::context::{SQLOptions, SessionConfig, SessionContext};
use datafusion::logical_expr::{LogicalPlan, WriteOp};
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{self, Statement};
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;
use parking_lot::Mutex;
use std::sync::Arc;
use vars::SessionVars;

/// What executing one statement produced.
#[derive(Debug)]
pub enum Outcome {
    /// A result set.
    Rows {
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    },
    /// A command that returns no rows; the tag is the full command tag (`INSERT 0 3`).
    Command(String),
    TransactionStart(String),
    TransactionEnd(String),
    /// `COPY ... FROM STDIN` started: the client now sends rows with this many fields.
    CopyIn {
        columns: usize,
    },
    Empty,
}

impl Outcome {
    fn command(tag: impl Into<String>) -> Self {
        Outcome::Command(tag.into())
    }
}

/// A statement parsed (and, where DataFusion runs it, planned) once for the extended
/// protocol, then executed any number of times with parameters.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub sql: String,
    /// `None` for an empty query.
    pub statement: Option<Statement>,
    /// The DataFusion plan, with `$n` placeholders, for queries and DML.
    pub plan: Option<LogicalPlan>,
    /// The Arrow type of each `$n`, where it could be inferred.
    pub param_types: Vec<Option<DataType>>,
    /// Columns of the result, `None` when the statement returns no rows.
    pub result_schema: Option<SchemaRef>,
    /// One of Eddy's own statements, which sqlparser does not parse.
    pub eddy_statement: Option<crate::sql::EddyStatement>,
}

/// Everything shared by all sessions.
pub struct Engine {
    pub config: Config,
    pub store: Arc<StateStore>,
    pub catalog: Arc<Catalog>,
    pub schema_provider: Arc<CatalogSchemaProvider>,
    pub jobs: Arc<crate::stream::job::JobRegistry>,
    /// Injects barriers (checkpoint epochs) into every job; `FLUSH` runs a round.
    pub checkpoints: Arc<crate::checkpoint::Coordinator>,
    /// The checkpoint restored at start, if any: its jobs resume from it.
    pub restored: Option<crate::checkpoint::manifest::Manifest>,
    /// Tables fed by PostgreSQL change data capture, and their tasks.
    pub cdc: cdc::CdcTables,
    pub(crate) ctx: SessionContext,
    parser: PostgresCompatibilityParser,
}

impl Engine {
    /// Opens the data dir with no checkpoint to restore: every job starts afresh.
    pub fn open(config: Config) -> Result<Arc<Self>> {
        let storage = Arc::new(crate::checkpoint::storage::CheckpointStorage::open(
            &config,
        )?);
        Self::open_restoring(config, storage, None)
    }

    /// Opens the data dir after [`crate::checkpoint::recovery::prepare`]: the jobs'
    /// state is put back as of the restored checkpoint, whose epoch the coordinator
    /// continues from.
    pub fn open_restoring(
        config: Config,
        storage: Arc<crate::checkpoint::storage::CheckpointStorage>,
        restored: Option<&crate::checkpoint::recovery::Restored>,
    ) -> Result<Arc<Self>> {
        let store = Arc::new(StateStore::open(
            &config.data_dir.join("state"),
            config.state_cache_bytes,
        )?);
        let catalog = Arc::new(Catalog::load(store.clone())?);
        if let Some(restored) = restored {
            crate::checkpoint::recovery::restore_job_state(&store, restored, &catalog.relations())?;
        }
        let restored = restored.map(|r| r.manifest.clone());
        // Views are read as of the restored (committed) epoch until the next commit.
        let serving = Arc::new(crate::state::ServingEpoch::default());
        serving.publish(crate::state::ServingSnapshot::take(
            &store,
            restored.as_ref().map_or(0, |m| m.epoch),
        ));
        let schema_provider = Arc::new(CatalogSchemaProvider::new(
            catalog.clone(),
            store.clone(),
            serving.clone(),
        ));

        let session_config = SessionConfig::new()
            .with_default_catalog_and_schema(DATABASE_NAME, DEFAULT_SCHEMA)
            .with_create_default_catalog_and_schema(true)
            .with_information_schema(true)
            .set_str("datafusion.sql_parser.dialect", "PostgreSQL")
            // `1.5` is a numeric, as in PostgreSQL (`0.1 + 0.2` is `0.3`), not a double.
            .set_bool("datafusion.sql_parser.parse_float_as_decimal", true)
            // `timestamptz` values and casts are in UTC (Eddy's one time zone), as the
            // columns of `TIMESTAMPTZ` type are; without it DataFusion casts to a
            // timestamp without a zone.
            .set_str("datafusion.execution.time_zone", "+00:00");
        // Eddy's analyzer rules that must see the plan before type coercion go first.
        let default_state = SessionContext::new_with_config(session_config).state();
        // Windows in FROM become plan nodes (a relation planner), expanded into the plan
        // nodes computing them before anything else analyzes the plan.
        let mut analyzer_rules: Vec<Arc<dyn datafusion::optimizer::AnalyzerRule + Send + Sync>> = vec![
            Arc::new(crate::planner::window_tvf::ExpandWindows),
            Arc::new(integer_literals::IntegerLiterals),
            Arc::new(integer_literals::RealWithExactNumbers),
            Arc::new(round_places::RoundPlaces),
            Arc::new(timestamp_difference::TimestampDifference),
            Arc::new(integer_aggregates::IntegerAggregates),
        ];
        analyzer_rules.extend(default_state.analyzer().rules.iter().cloned());
        let ctx = SessionContext::new_with_state(
            datafusion::execution::session_state::SessionStateBuilder::new_from_existing(
                default_state,
            )
            .with_analyzer_rules(analyzer_rules)
            .with_relation_planners(vec![Arc::new(crate::planner::window_tvf::WindowPlanner)])
            .build(),
        );
        ctx.add_analyzer_rule(Arc::new(integer_literals::CheckedIntegerArithmetic));
        ctx.add_analyzer_rule(Arc::new(numeric_division::NumericDivision));
        ctx.add_analyzer_rule(Arc::new(date_trunc_by_row::DateTruncByRow));
        ctx.add_analyzer_rule(Arc::new(time_literals::TimeLiterals));
        ctx.add_analyzer_rule(Arc::new(struct_casts::StructCasts));
        ctx.add_analyzer_rule(Arc::new(rounding_casts::RoundingCasts::new(
            integral_decimal::round_udf(),
        )));
        ctx.register_udf(struct_casts::udf().as_ref().clone());
        {
            use datafusion::execution::FunctionRegistry;
            ctx.state_ref()
                .write()
                .register_expr_planner(Arc::new(interval_arithmetic::IntervalProducts))?;
            ctx.state_ref()
                .write()
                .register_expr_planner(Arc::new(interval_arithmetic::IntervalComparisons))?;
            ctx.state_ref()
                .write()
                .register_expr_planner(Arc::new(date_difference::DateDifference))?;
        }
        ctx.catalog(DATABASE_NAME)
            .expect("default catalog exists")
            .register_schema(DEFAULT_SCHEMA, schema_provider.clone())
            .map_err(EddyError::from)?;
        schema_provider.set_planner(Arc::downgrade(&ctx.state_ref()));
        let jobs = Arc::new(crate::stream::job::JobRegistry::new(
            config.workers,
            config.slots_per_worker,
        )?);
        datafusion_pg_catalog::setup_pg_catalog(
            &ctx,
            DATABASE_NAME,
            datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider,
        )
        .map_err(|e| EddyError::from(*e))?;
        crate::catalog::pg_catalog::EddyPgCatalog::install(&ctx, DATABASE_NAME, catalog.clone())?;
        ctx.add_analyzer_rule(Arc::new(
            crate::catalog::information_schema::PostgresColumnTypes::new(catalog.clone()),
        ));
        functions::register(&ctx);
        for udf in regexp::udfs() {
            ctx.register_udf(udf);
        }
        crate::jsonb::register(&ctx)?;
        float_extremes::register(&ctx);
        interval_avg::register(&ctx);
        changelog_function::register(&ctx, catalog.clone());

        let checkpoints = Arc::new(crate::checkpoint::Coordinator::new(
            jobs.clone(),
            store.clone(),
            catalog.clone(),
            storage,
            serving,
            &config,
            restored.as_ref().map(|m| m.epoch).unwrap_or(0),
        ));
        // Tables' change logs are cut below what the oldest kept checkpoint needs.
        let logged = Arc::downgrade(&schema_provider);
        checkpoints.set_retention_hook(Arc::new(move |oldest_kept| {
            let Some(provider) = logged.upgrade() else {
                return;
            };
            for table in provider.logged_tables() {
                if let Err(e) = table.cut_log_before(oldest_kept) {
                    tracing::warn!(
                        table = table.table_id(),
                        "cannot cut a table's change log: {e}"
                    );
                }
            }
        }));
        let system_sources = Arc::new(crate::catalog::system_tables::SystemSources {
            jobs: jobs.clone(),
            checkpoints: checkpoints.clone(),
            cache_budget: store.cache_budget().clone(),
            store: store.clone(),
            catalog: catalog.clone(),
        });
        let rw_catalog = Arc::new(crate::catalog::system_tables::SystemSchema::risingwave(
            system_sources.clone(),
        ));
        schema_provider.set_unqualified_lists(rw_catalog.clone());
        let database = ctx.catalog(DATABASE_NAME).expect("default catalog exists");
        database
            .register_schema(
                crate::catalog::system_tables::SYSTEM_SCHEMA,
                Arc::new(crate::catalog::system_tables::SystemSchema::new(
                    system_sources,
                )),
            )
            .map_err(EddyError::from)?;
        database
            .register_schema(crate::catalog::rw_catalog::SCHEMA, rw_catalog)
            .map_err(EddyError::from)?;
        if tokio::runtime::Handle::try_current().is_ok() {
            checkpoints.start();
        }
        let engine = Arc::new(Self {
            config,
            store,
            catalog,
            schema_provider,
            jobs,
            checkpoints,
            restored,
            cdc: Default::default(),
            ctx,
            parser: PostgresCompatibilityParser::new(),
        });
        system_params::load(&engine)?;
        if tokio::runtime::Handle::try_current().is_ok() {
            failover::start(&engine);
        }
        Ok(engine)
    }

    /// Plans a streaming query: parsed, planned and optimized by DataFusion, ready for
    /// [`crate::planner::plan_job`]; `time_zone` is the session's zone the query was
    /// written in, if not UTC (see `session_time_zone.rs`).
    pub async fn plan_streaming_query(
        &self,
        sql: &str,
        time_zone: Option<&str>,
    ) -> Result<LogicalPlan> {
        let mut state = self.ctx.state();
        if let Some(zone) = time_zone {
            state.add_analyzer_rule(Arc::new(session_time_zone::SessionTimeZone::new(zone)));
        }
        // A sink's query comes here as text without going through `parse`.
        let stars = hidden_columns::expand_stars_in(sql, &self.catalog);
        let sql = stars.as_deref().unwrap_or(sql);
        let with_now = sql_rewrite::streaming_now(sql);
        let sql = with_now.as_deref().unwrap_or(sql);
        let marked = sql_rewrite::mark_counted_set_operations_in(sql);
        let sql = marked.as_deref().unwrap_or(sql);
        let plan = crate::sql::star_except::plan(&state, sql).await?;
        let plan = set_operations::rewrite(plan)?;
        let plan = scalar_subqueries::rewrite(plan)?;
        // DataFusion's rules, less those whose output a streaming job cannot run:
        // `count(DISTINCT x)` stays an aggregate (HashAgg counts distinct values itself)
        // instead of becoming an aggregate over an aggregate; a `LIMIT` stays one top-N
        // instead of being copied into scans and join inputs as a hint that only saves
        // work in batch.
        let rules = datafusion::optimizer::Optimizer::new()
            .rules
            .into_iter()
            .filter(|r| {
                !matches!(
                    r.name(),
                    "single_distinct_aggregation_to_group_by" | "push_down_limit"
                )
            })
            .collect();
        let streaming =
            datafusion::execution::session_state::SessionStateBuilder::new_from_existing(state)
                .with_optimizer_rules(rules)
                .build();
        Ok(streaming.optimize(&plan)?)
    }

    pub fn parse(&self, sql: &str) -> Result<Vec<Statement>> {
        let replaced = client_queries::replacement(sql);
        let sql = replaced.as_deref().unwrap_or(sql);
        let with_structs = crate::sql::struct_types::rewrite(sql)?;
        let sql = with_structs.as_deref().unwrap_or(sql);
        let rewritten = token_rewrites::rewrite(sql)?;
        let sql = rewritten.as_deref().unwrap_or(sql);
        let mut statements = self
            .parser
            .parse(sql)
            .map_err(|e| EddyError::syntax(e.to_string().replace("sql parser error: ", "")))?;
        sql_rewrite::restore_select_list_subqueries(sql, &mut statements);
        for statement in statements.iter_mut() {
            sql_functions::inline(statement, &self.catalog)?;
            using_joins::rewrite(statement, &self.catalog);
            sql_rewrite::rewrite(statement)?;
        }
        let corresponding = corresponding::mentioned(sql);
        let struct_star = struct_star::mentioned(sql);
        let star_except = crate::sql::star_except::mentioned(sql);
        for statement in statements.iter_mut() {
            if star_except {
                crate::sql::star_except::fold(statement)?;
            }
            if corresponding {
                corresponding::rewrite(statement, &self.catalog)?;
            }
            if struct_star {
                struct_star::expand(statement, &self.catalog)?;
            }
            hidden_columns::expand_stars(statement, &self.catalog);
        }
        Ok(statements)
    }
}

/// Where a session is in PostgreSQL's transaction states.
enum TransactionState {
    /// Autocommit: every statement is its own transaction.
    Idle,
    /// After `BEGIN`: DML is staged in the transaction until `COMMIT`.
    Open(Arc<crate::state::Transaction>),
    /// A statement failed inside the transaction: everything but `COMMIT`/`ROLLBACK`
    /// is refused (25P02) and the transaction's changes are dropped.
    Aborted,
}

/// One client connection's state.
pub struct Session {
    engine: Arc<Engine>,
    user: String,
    vars: Mutex<SessionVars>,
    /// The `COPY FROM STDIN` in progress, if any.
    copy: Mutex<Option<copy::CopyIn>>,
    transaction: Mutex<TransactionState>,
    /// `PREPARE`d statements (SQL-level, not the extended protocol's).
    sql_prepared: Mutex<sql_prepare::PreparedStatements>,
}

impl Session {
    pub fn new(engine: Arc<Engine>, user: String) -> Self {
        Self {
            engine,
            user,
            vars: Mutex::new(SessionVars::default()),
            copy: Mutex::new(None),
            transaction: Mutex::new(TransactionState::Idle),
            sql_prepared: Mutex::new(Default::default()),
        }
    }

    /// The explicit transaction DML now runs in, if one is open.
    pub(crate) fn open_transaction(&self) -> Option<Arc<crate::state::Transaction>> {
        match &*self.transaction.lock() {
            TransactionState::Open(txn) => Some(txn.clone()),
            _ => None,
        }
    }

    /// A statement failed: an open transaction becomes aborted, as in PostgreSQL.
    fn statement_failed(&self) {
        let mut state = self.transaction.lock();
        if matches!(*state, TransactionState::Open(_)) {
            *state = TransactionState::Aborted;
        }
    }

    /// Refuses a statement in an aborted transaction (only its end is accepted).
    fn check_not_aborted(&self) -> Result<()> {
        match *self.transaction.lock() {
            TransactionState::Aborted => Err(EddyError::new(
                sqlstate::IN_FAILED_SQL_TRANSACTION,
                "current transaction is aborted, commands ignored until end of transaction block",
            )),
            _ => Ok(()),
        }
    }

    /// `BEGIN` / `START TRANSACTION`.
    fn begin(&self) -> Outcome {
        let mut state = self.transaction.lock();
        if matches!(*state, TransactionState::Idle) {
            *state = TransactionState::Open(Arc::default());
        }
        Outcome::TransactionStart("BEGIN".into())
    }

    /// `COMMIT`: the staged changes in one write (an aborted transaction rolls back).
    async fn commit(&self) -> Result<Outcome> {
        let state = std::mem::replace(&mut *self.transaction.lock(), TransactionState::Idle);
        match state {
            TransactionState::Open(txn) => {
                txn.commit(&self.engine.store)?;
                self.implicit_flush().await?;
                Ok(Outcome::TransactionEnd("COMMIT".into()))
            }
            TransactionState::Aborted => Ok(Outcome::TransactionEnd("ROLLBACK".into())),
            TransactionState::Idle => Ok(Outcome::TransactionEnd("COMMIT".into())),
        }
    }

    /// `ROLLBACK`: the staged changes are dropped.
    fn rollback(&self) -> Outcome {
        *self.transaction.lock() = TransactionState::Idle;
        Outcome::TransactionEnd("ROLLBACK".into())
    }

    /// With `RW_IMPLICIT_FLUSH` on (RisingWave's setting), a write returns only once it
    /// is visible in every view reading the table; inside a transaction, at `COMMIT`.
    async fn implicit_flush(&self) -> Result<()> {
        let on = vars::bool_setting("RW_IMPLICIT_FLUSH", &self.var("RW_IMPLICIT_FLUSH")?)?;
        if on && self.open_transaction().is_none() {
            sink_into_table::flush(&self.engine).await;
        }
        Ok(())
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    pub fn user(&self) -> &str {
        &self.user
    }

    pub fn var(&self, name: &str) -> Result<String> {
        self.vars.lock().get(name)
    }

    /// Takes one `CopyData` payload of the `COPY FROM STDIN` in progress. A bad row is
    /// remembered and reported when the client ends the copy, as the protocol expects the
    /// client to finish sending first.
    pub fn copy_data(&self, data: &[u8]) {
        if let Some(c) = self.copy.lock().as_mut() {
            c.push(data);
        }
    }

    /// Ends the `COPY FROM STDIN` in progress; returns the number of rows copied.
    pub fn copy_done(&self) -> Result<u64> {
        let copy = self.copy.lock().take();
        match copy {
            Some(c) => {
                let copied = c.finish();
                if copied.is_err() {
                    self.statement_failed();
                }
                copied
            }
            None => Err(EddyError::new(
                sqlstate::PROTOCOL_VIOLATION,
                "no COPY in progress",
            )),
        }
    }

    /// Abandons the `COPY FROM STDIN` in progress (rows already flushed stay).
    pub fn copy_fail(&self) {
        self.copy.lock().take();
    }

    /// Runs every statement of a simple-protocol query string, stopping at the first error.
    pub async fn execute_sql(&self, sql: &str) -> Vec<Result<Outcome>> {
        let pieces = crate::sql::split_statements(sql);
        if pieces.is_empty() {
            return vec![Ok(Outcome::Empty)];
        }
        let mut out = Vec::with_capacity(pieces.len());
        for piece in pieces {
            let results = match crate::sql::parse_eddy_statement(&piece) {
                Some(Ok(stmt)) => vec![guarded(self.execute_eddy_statement(stmt)).await],
                Some(Err(e)) => vec![Err(e)],
                None => self.execute_parsed(&piece).await,
            };
            for result in results {
                let failed = result.is_err();
                out.push(result);
                if failed {
                    self.statement_failed();
                    return out;
                }
            }
        }
        out
    }

    /// Runs the statements sqlparser reads from `sql`, stopping at the first error.
    async fn execute_parsed(&self, sql: &str) -> Vec<Result<Outcome>> {
        let statements = match self.engine.parse(sql) {
            Ok(s) => s,
            Err(e) => return vec![Err(e)],
        };
        let mut out = Vec::with_capacity(statements.len());
        for stmt in statements {
            let result = guarded(self.execute_statement(stmt)).await;
            let failed = result.is_err();
            out.push(result);
            if failed {
                break;
            }
        }
        out
    }

    /// Parses and plans one statement for the extended protocol (a failure aborts an
    /// open transaction, as in PostgreSQL).
    pub async fn prepare(&self, sql: &str) -> Result<Prepared> {
        let prepared = guarded(self.prepare_statement(sql)).await;
        if prepared.is_err() {
            self.statement_failed();
        }
        prepared
    }

    async fn prepare_statement(&self, sql: &str) -> Result<Prepared> {
        if let Some(stmt) = crate::sql::parse_eddy_statement(sql) {
            return Ok(Prepared {
                sql: sql.to_string(),
                statement: None,
                plan: None,
                param_types: vec![],
                result_schema: match &stmt {
                    Ok(crate::sql::EddyStatement::ShowCreate { .. }) => {
                        Some(Arc::new(Schema::new(vec![
                            Field::new("Name", DataType::Utf8, false),
                            Field::new("Create Sql", DataType::Utf8, false),
                        ])))
                    }
                    Ok(crate::sql::EddyStatement::EmitOnWindowClose(sql))
                        if sql.trim_start().to_ascii_lowercase().starts_with("explain") =>
                    {
                        Some(Arc::new(Schema::new(vec![Field::new(
                            "QUERY PLAN",
                            DataType::Utf8,
                            true,
                        )])))
                    }
                    _ => None,
                },
                eddy_statement: Some(stmt?),
            });
        }
        let mut statements = self.engine.parse(sql)?;
        if statements.len() > 1 {
            return Err(EddyError::syntax(
                "cannot insert multiple commands into a prepared statement",
            ));
        }
        let Some(statement) = statements.pop() else {
            return Ok(Prepared {
                sql: sql.to_string(),
                statement: None,
                plan: None,
                param_types: vec![],
                result_schema: None,
                eddy_statement: None,
            });
        };
        let (plan, param_types, result_schema) = if returning::has_returning(&statement) {
            let (param_types, schema) = returning::describe(self, &statement).await?;
            (None, param_types, Some(schema))
        } else if runs_in_datafusion(&statement) {
            let plan = self.plan(statement.clone()).await?;
            let types = plan.get_parameter_types().map_err(EddyError::from)?;
            let mut param_types = vec![None; types.len()];
            for (name, ty) in types {
                if let Some(idx) = name.strip_prefix('$').and_then(|n| n.parse::<usize>().ok())
                    && idx >= 1
                {
                    if idx > param_types.len() {
                        param_types.resize(idx, None);
                    }
                    param_types[idx - 1] = ty;
                }
            }
            let schema = match &plan {
                LogicalPlan::Dml(_) => None,
                p => {
                    let schema = self.described_schema(p);
                    Some(match column_names::postgres_names(&statement) {
                        Some(names) => column_names::rename(&schema, &names),
                        None => schema,
                    })
                }
            };
            (Some(plan), param_types, schema)
        } else if let Statement::Execute {
            name: Some(name), ..
        } = &statement
        {
            let name = ddl::relation_name(name)?;
            (None, vec![], sql_prepare::result_schema(self, &name).await?)
        } else {
            (None, vec![], show::result_schema(&statement))
        };
        Ok(Prepared {
            sql: sql.to_string(),
            statement: Some(statement),
            plan,
            param_types,
            result_schema,
            eddy_statement: None,
        })
    }

    /// Executes a prepared statement with bound parameter values.
    pub async fn execute_prepared(
        &self,
        prepared: &Prepared,
        params: Vec<ScalarValue>,
    ) -> Result<Outcome> {
        let result = guarded(self.execute_prepared_statement(prepared, params)).await;
        if result.is_err() {
            self.statement_failed();
        }
        result
    }

    async fn execute_prepared_statement(
        &self,
        prepared: &Prepared,
        params: Vec<ScalarValue>,
    ) -> Result<Outcome> {
        if let Some(stmt) = &prepared.eddy_statement {
            return self.execute_eddy_statement(stmt.clone()).await;
        }
        let Some(statement) = &prepared.statement else {
            return Ok(Outcome::Empty);
        };
        if returning::has_returning(statement) {
            self.check_not_aborted()?;
            return returning::execute(self, statement.clone(), params).await;
        }
        match &prepared.plan {
            Some(plan) => {
                self.check_not_aborted()?;
                let plan = if params.is_empty() && prepared.param_types.is_empty() {
                    plan.clone()
                } else {
                    plan.clone()
                        .with_param_values(ParamValues::from(params))
                        .map_err(EddyError::from)?
                };
                let outcome = self.run_plan(plan).await?;
                Ok(with_postgres_names(outcome, statement))
            }
            None => {
                if !params.is_empty() {
                    return Err(EddyError::new(
                        sqlstate::PROTOCOL_VIOLATION,
                        "this statement does not take parameters",
                    ));
                }
                self.execute_statement(statement.clone()).await
            }
        }
    }

    async fn execute_eddy_statement(&self, stmt: crate::sql::EddyStatement) -> Result<Outcome> {
        use crate::sql::EddyStatement;
        self.check_not_aborted()?;
        match stmt {
            EddyStatement::User(u) => users::execute(self, u),
            EddyStatement::CreateSource(s) => sources::create_source(self, s),
            EddyStatement::DropSource {
                names,
                if_exists,
                cascade,
            } => sources::drop_sources(self, names, if_exists, cascade),
            EddyStatement::CreateSink(s) => sinks::create(self, s).await,
            EddyStatement::DropSink {
                names, if_exists, ..
            } => sinks::drop(self, names, if_exists),
            EddyStatement::ShowCreate { kind, name } => show::show_create(self, &kind, &name),
            EddyStatement::CreateTable(extras) => match self.engine.parse(&extras.statement)?.pop()
            {
                Some(Statement::CreateTable(create)) => {
                    ddl::create_table(self, create, Some(extras)).await
                }
                _ => Err(EddyError::syntax("expected CREATE TABLE")),
            },
            EddyStatement::EmitOnWindowClose(sql) => {
                let mut statements = self.engine.parse(&sql)?;
                match (statements.len(), statements.pop()) {
                    (1, Some(Statement::CreateView(view))) if view.materialized => {
                        materialized_views::create(self, view, true).await
                    }
                    (1, Some(Statement::Explain { statement, .. })) => match *statement {
                        Statement::CreateView(view) if view.materialized => {
                            materialized_views::explain(self, &view, true).await
                        }
                        _ => Err(emit_on_window_close_misplaced()),
                    },
                    _ => Err(emit_on_window_close_misplaced()),
                }
            }
            // A barrier through every job: earlier writes are then in every view.
            EddyStatement::AlterSystem(alter) => system_params::alter(&self.engine, &alter),
            EddyStatement::AlterParallelism(alter) => {
                materialized_views::alter_parallelism(&self.engine, &alter).await
            }
            EddyStatement::AlterRename(alter) => rename::execute(self, alter).await,
            EddyStatement::Flush => {
                sink_into_table::flush(&self.engine).await;
                Ok(Outcome::Command("FLUSH".into()))
            }
        }
    }

    async fn execute_statement(&self, stmt: Statement) -> Result<Outcome> {
        if !matches!(stmt, Statement::Commit { .. } | Statement::Rollback { .. }) {
            self.check_not_aborted()?;
        }
        match stmt {
            Statement::CreateTable(create) => ddl::create_table(self, create, None).await,
            Statement::CreateView(view) if view.materialized => {
                materialized_views::create(self, view, false).await
            }
            Statement::Explain { statement, .. } if matches!(statement.as_ref(), Statement::CreateView(v) if v.materialized) =>
            {
                let Statement::CreateView(view) = *statement else {
                    unreachable!("matched above")
                };
                materialized_views::explain(self, &view, false).await
            }
            Statement::CreateView(view) => ddl::create_view(self, view).await,
            Statement::AlterTable(alter) => alter_columns::execute(self, alter).await,
            Statement::CreateFunction(create) => sql_functions::create(self, create).await,
            Statement::DropFunction(drop) => sql_functions::drop(self, drop),
            Statement::CreateIndex(create) => indexes::create(self, create),
            Statement::Drop {
                object_type: ast::ObjectType::MaterializedView,
                if_exists,
                names,
                cascade,
                ..
            } => materialized_views::drop(self, &names, if_exists, cascade).await,
            Statement::Drop {
                object_type,
                if_exists,
                names,
                cascade,
                ..
            } => ddl::drop(self, object_type, if_exists, names, cascade).await,
            Statement::Set(set) => self.set(set),
            Statement::Copy {
                source,
                to,
                target,
                options,
                legacy_options,
                ..
            } => copy::start(self, source, to, target, options, legacy_options),
            Statement::ShowVariable { variable } => show::show_variable(self, &variable),
            Statement::ShowTables { .. } => show::show_tables(self),
            Statement::ShowDatabases { .. } => show::show_databases(),
            Statement::ShowSchemas { .. } => show::show_schemas(),
            Statement::ShowColumns { show_options, .. } => show::show_columns(self, &show_options),
            Statement::ShowViews { materialized, .. } => show::show_list(
                self,
                if materialized {
                    crate::catalog::RelationKind::MaterializedView
                } else {
                    crate::catalog::RelationKind::View
                },
            ),
            Statement::ExplainTable { table_name, .. } => show::describe(self, &table_name),
            Statement::StartTransaction { .. } => Ok(self.begin()),
            Statement::Commit { .. } => self.commit().await,
            Statement::Rollback { .. } => Ok(self.rollback()),
            Statement::Comment {
                object_type,
                object_name,
                comment,
                if_exists,
            } => comments::comment(self, object_type, &object_name, comment, if_exists),
            Statement::Prepare {
                name,
                data_types,
                statement,
            } => sql_prepare::prepare(self, &name, &data_types, *statement).await,
            Statement::Execute {
                name: Some(name),
                parameters,
                immediate: false,
                ..
            } => {
                let name = ddl::relation_name(&name)?;
                sql_prepare::execute(self, &name, &parameters).await
            }
            Statement::Deallocate { name, .. } => sql_prepare::deallocate(self, &name),
            Statement::Discard { .. } => {
                sql_prepare::clear(self);
                self.vars.lock().reset_all();
                Ok(Outcome::command("DISCARD ALL"))
            }
            stmt if returning::has_returning(&stmt) => returning::execute(self, stmt, vec![]).await,
            stmt if runs_in_datafusion(&stmt) => {
                let plan = self.plan(stmt.clone()).await?;
                let outcome = self.run_plan(plan).await?;
                Ok(with_postgres_names(outcome, &stmt))
            }
            other => Err(EddyError::not_supported(format!(
                "statement not supported: {}",
                first_words(&other.to_string())
            ))),
        }
    }

    /// The columns a planned query returns, as its analyzed plan types them (Eddy's
    /// analyzer rules change types: `avg` of integers is a `numeric`, `ts - ts` an
    /// interval). A plan whose parameters cannot be typed yet keeps the planner's types.
    fn described_schema(&self, plan: &LogicalPlan) -> SchemaRef {
        let state = self.engine.ctx.state();
        let analyzed =
            state
                .analyzer()
                .execute_and_check(plan.clone(), state.config_options(), |_, _| {});
        let plan = analyzed.as_ref().unwrap_or(plan);
        Arc::new(plan.schema().as_arrow().clone())
    }

    /// Plans a query or DML statement with DataFusion. DDL never reaches DataFusion: Eddy
    /// owns the catalog.
    async fn plan(&self, mut stmt: Statement) -> Result<LogicalPlan> {
        sql_rewrite::mark_counted_set_operations(&mut stmt);
        let state = self.engine.ctx.state();
        let source_width = match column_values::source_to_measure(&stmt, &self.engine.catalog) {
            Some(source) => Some(
                state
                    .statement_to_plan(DFStatement::Statement(Box::new(Statement::Query(
                        Box::new(source),
                    ))))
                    .await?
                    .schema()
                    .fields()
                    .len(),
            ),
            None => None,
        };
        column_values::rewrite(&mut stmt, &self.engine.catalog, source_width)?;
        joined_dml::rewrite_delete_using(&mut stmt)?;
        let plan = match joined_dml::plan_update_from(&stmt, &state).await? {
            Some(plan) => plan,
            None => {
                state
                    .statement_to_plan(DFStatement::Statement(Box::new(stmt)))
                    .await?
            }
        };
        let plan = pg_semantics::rewrite(plan)?;
        let plan = set_operations::rewrite(plan)?;
        SQLOptions::new()
            .with_allow_ddl(false)
            .with_allow_statements(false)
            .verify_plan(&plan)?;
        Ok(plan)
    }

    /// The state one statement runs in: one snapshot for every materialized view it
    /// reads, and the open transaction (DML inside BEGIN ... COMMIT is staged in it and
    /// reads see what it staged).
    fn statement_state(&self) -> datafusion::execution::SessionState {
        let mut state = self.engine.ctx.state();
        if let Some(zone) = self.time_zone() {
            state.add_analyzer_rule(Arc::new(session_time_zone::SessionTimeZone::new(&zone)));
        }
        state
            .config_mut()
            .set_extension(Arc::new(crate::state::PinnedSnapshot(
                self.engine.checkpoints.serving().current(),
            )));
        state
            .config_mut()
            .set_extension(Arc::new(crate::serving::stored_table::TransactionSlot(
                self.open_transaction(),
            )));
        state
    }

    async fn run_plan(&self, plan: LogicalPlan) -> Result<Outcome> {
        let dml = match &plan {
            LogicalPlan::Dml(d) => Some(d.op.clone()),
            _ => None,
        };
        if joined_dml::applies(&plan) {
            let count = joined_dml::execute(plan, self.statement_state()).await?;
            self.implicit_flush().await?;
            let verb = match dml {
                Some(WriteOp::Update) => "UPDATE",
                _ => "DELETE",
            };
            return Ok(Outcome::Command(format!("{verb} {count}")));
        }
        let mut state = self.statement_state();
        if matches!(dml, Some(WriteOp::Update | WriteOp::Delete)) {
            state = simplifier_only(state);
        }
        let plan = dml_subqueries::evaluate(plan, &state).await?;
        let (schema, batches) =
            collect_typed(datafusion::dataframe::DataFrame::new(state, plan)).await?;
        match dml {
            None => {
                let (schema, batches) = match self.time_zone() {
                    Some(zone) => session_time_zone::label_output(schema, batches, &zone)?,
                    None => (schema, batches),
                };
                Ok(Outcome::Rows { schema, batches })
            }
            Some(op) => {
                self.implicit_flush().await?;
                let count = dml_count(&batches);
                let tag = match op {
                    WriteOp::Insert(_) => format!("INSERT 0 {count}"),
                    WriteOp::Update => format!("UPDATE {count}"),
                    WriteOp::Delete => format!("DELETE {count}"),
                    WriteOp::Truncate => "TRUNCATE TABLE".to_string(),
                    WriteOp::Ctas => format!("SELECT {count}"),
                    other => format!("{other} {count}"),
                };
                Ok(Outcome::Command(tag))
            }
        }
    }

    /// A parameter the client gave when it connected (`TimeZone`), as `SET` would set it.
    pub fn set_startup_parameter(&self, name: &str, value: &str) -> Result<()> {
        self.vars.lock().set(name, value)
    }

    /// The session's time zone (`SET TIME ZONE`), unless it is UTC, Eddy's default.
    pub(crate) fn time_zone(&self) -> Option<String> {
        let zone = self.vars.lock().get("TimeZone").ok()?;
        (zone != crate::time_zones::UTC).then_some(zone)
    }

    /// The parallelism of jobs created now: `SET streaming_parallelism`, by default the
    /// number of streaming workers.
    pub(crate) fn streaming_parallelism(&self) -> Result<usize> {
        Ok(self
            .chosen_streaming_parallelism()?
            .unwrap_or_else(|| self.engine.jobs.worker_count()))
    }

    /// `streaming_parallelism` when the session set it (not 0 or default): jobs record it
    /// and keep it; otherwise they follow the number of workers, also after a restart
    /// with another `--workers`.
    pub(crate) fn chosen_streaming_parallelism(&self) -> Result<Option<usize>> {
        let value = self.vars.lock().get("streaming_parallelism")?;
        Ok(match value.parse::<usize>() {
            Ok(n) if n > 0 => Some(n.min(crate::state::MAX_PARALLELISM as usize)),
            _ => None,
        })
    }

    fn set(&self, set: ast::Set) -> Result<Outcome> {
        match set {
            ast::Set::SingleAssignment {
                variable, values, ..
            } => {
                let name = variable.to_string();
                let value = values
                    .iter()
                    .map(set_value_text)
                    .collect::<Vec<_>>()
                    .join(", ");
                if value.eq_ignore_ascii_case("default") {
                    self.vars.lock().reset(&name)?;
                } else {
                    self.vars.lock().set(&name, &value)?;
                }
                Ok(Outcome::command("SET"))
            }
            ast::Set::SetTimeZone { value, .. } => {
                self.vars.lock().set("TimeZone", &set_value_text(&value))?;
                Ok(Outcome::command("SET"))
            }
            ast::Set::SetNames { charset_name, .. } => {
                self.vars
                    .lock()
                    .set("client_encoding", &charset_name.to_string())?;
                Ok(Outcome::command("SET"))
            }
            ast::Set::SetTransaction { .. } => Ok(Outcome::command("SET")),
            other => Err(EddyError::not_supported(format!(
                "{other} is not supported"
            ))),
        }
    }
}

/// The state for an UPDATE or DELETE: of the logical optimizer, only the expression
/// simplifier (which also fixes `now()` for the statement). DataFusion hands the table the
/// assignments it reads from the projection under the DML node and the predicates of the
/// filters over the table's scan; the other rules rewrite exactly those — a filter that
/// is always false becomes an empty input, leaving no predicate, so
/// `DELETE FROM t WHERE 1 = 0` deleted every row, and common subexpressions moved into a
/// projection below leave assignments naming columns that do not exist. The table
/// evaluates the predicates itself, so there is nothing else to optimize.
fn simplifier_only(
    state: datafusion::execution::SessionState,
) -> datafusion::execution::SessionState {
    let rules = state
        .optimizers()
        .iter()
        .filter(|r| r.name() == "simplify_expressions")
        .cloned()
        .collect();
    datafusion::execution::session_state::SessionStateBuilder::new_from_existing(state)
        .with_optimizer_rules(rules)
        .build()
}

/// Renames result columns the way PostgreSQL names them.
fn with_postgres_names(outcome: Outcome, stmt: &Statement) -> Outcome {
    match (outcome, column_names::postgres_names(stmt)) {
        (Outcome::Rows { schema, batches }, Some(names)) => Outcome::Rows {
            schema: column_names::rename(&schema, &names),
            batches,
        },
        (outcome, _) => outcome,
    }
}

fn emit_on_window_close_misplaced() -> EddyError {
    EddyError::syntax("EMIT ON WINDOW CLOSE ends a CREATE MATERIALIZED VIEW statement")
}

/// Statements whose planning and execution DataFusion does.
fn runs_in_datafusion(stmt: &Statement) -> bool {
    if let Statement::Explain { statement, .. } = stmt
        && matches!(statement.as_ref(), Statement::CreateView(_))
    {
        // EXPLAIN CREATE MATERIALIZED VIEW shows the stream plan (Eddy's own).
        return false;
    }
    matches!(
        stmt,
        Statement::Query(_)
            | Statement::Insert(_)
            | Statement::Update(_)
            | Statement::Delete(_)
            | Statement::Explain { .. }
            | Statement::Truncate(_)
    )
}

/// Runs a query; returns its rows and their columns as the analyzed plan types them
/// (Eddy's analyzer rules change types: integer literals, averages), which the
/// unanalyzed plan's schema does not know.
pub(crate) async fn collect_typed(
    df: datafusion::dataframe::DataFrame,
) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let task_context = Arc::new(df.task_ctx());
    let physical = df.create_physical_plan().await?;
    let schema = physical.schema();
    let batches = datafusion::physical_plan::collect(physical, task_context).await?;
    Ok((schema, batches))
}

fn dml_count(batches: &[RecordBatch]) -> u64 {
    batches
        .iter()
        .filter(|b| b.num_columns() > 0 && b.num_rows() > 0)
        .filter_map(|b| {
            b.column(0)
                .as_any()
                .downcast_ref::<arrow::array::UInt64Array>()
                .map(|a| a.iter().flatten().sum::<u64>())
        })
        .sum()
}

/// The text of a `SET` value: quoted strings lose their quotes, identifiers keep their
/// spelling, numbers stay as written.
fn set_value_text(expr: &ast::Expr) -> String {
    match expr {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::SingleQuotedString(s) | ast::Value::DoubleQuotedString(s) => s.clone(),
            other => other.to_string(),
        },
        ast::Expr::Identifier(ident) => ident.value.clone(),
        other => other.to_string(),
    }
}

fn first_words(sql: &str) -> String {
    sql.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// A one-column text result, for `SHOW` and friends.
pub(crate) fn text_rows(column: &str, values: Vec<String>) -> Result<Outcome> {
    let schema = Arc::new(Schema::new(vec![Field::new(column, DataType::Utf8, true)]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(arrow::array::StringArray::from(values))],
    )?;
    Ok(Outcome::Rows {
        schema,
        batches: vec![batch],
    })
}

/// Runs a statement, turning a panic inside it (a bug in Eddy or in a library it calls)
/// into an error for that statement (SQLSTATE XX000) instead of closing the client's
/// connection: the session, and every other one, goes on.
async fn guarded<T>(statement: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    use futures::FutureExt;
    // Boxed: a statement's future is large, and moving it by value into the wrapper
    // would put it on the worker's stack.
    match std::panic::AssertUnwindSafe(Box::pin(statement))
        .catch_unwind()
        .await
    {
        Ok(result) => result,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown cause".to_string());
            Err(EddyError::internal(format!(
                "internal error while running the statement: {message}"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_statement_is_an_internal_error() {
        let failed = guarded(async {
            if true {
                panic!("a bug");
            }
            Ok(())
        })
        .await
        .unwrap_err();
        assert_eq!(failed.code, sqlstate::INTERNAL_ERROR, "{failed}");
        assert!(failed.to_string().contains("a bug"), "{failed}");
        assert_eq!(guarded(async { Ok(7) }).await.unwrap(), 7);
    }
}
