//! Exposes the catalog to DataFusion as the `public` schema of database `dev`.

use super::{Catalog, Relation, RelationKind};
use crate::error::EddyError;
use crate::serving::StoredTable;
use crate::state::{StateStore, StateTable};
use async_trait::async_trait;
use datafusion::catalog::view::ViewTable;
use datafusion::catalog::{SchemaProvider, TableProvider};
use datafusion::common::{DataFusionError, Result as DFResult};
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::{LogicalPlanBuilder, col};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, Weak};

pub struct CatalogSchemaProvider {
    catalog: Arc<Catalog>,
    store: Arc<StateStore>,
    /// The committed epoch materialized views are read at.
    serving: Arc<crate::state::ServingEpoch>,
    /// State tables by relation id, so the row codecs are built once per table.
    tables: Mutex<HashMap<u32, Arc<StateTable>>>,
    /// The session state views are planned in; set once the context exists.
    planner: OnceLock<Weak<RwLock<SessionState>>>,
    /// RisingWave's `rw_catalog` lists, also read without their schema (`rw_sinks`).
    unqualified_lists: OnceLock<Arc<dyn SchemaProvider>>,
}

impl std::fmt::Debug for CatalogSchemaProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CatalogSchemaProvider")
    }
}

impl CatalogSchemaProvider {
    pub fn new(
        catalog: Arc<Catalog>,
        store: Arc<StateStore>,
        serving: Arc<crate::state::ServingEpoch>,
    ) -> Self {
        Self {
            catalog,
            store,
            serving,
            tables: Mutex::new(HashMap::new()),
            planner: OnceLock::new(),
            unqualified_lists: OnceLock::new(),
        }
    }

    pub fn set_planner(&self, state: Weak<RwLock<SessionState>>) {
        let _ = self.planner.set(state);
    }

    /// Where the `rw_catalog` lists read without their schema come from.
    pub fn set_unqualified_lists(&self, lists: Arc<dyn SchemaProvider>) {
        let _ = self.unqualified_lists.set(lists);
    }

    /// The state table holding the rows of a `CREATE TABLE` relation.
    pub fn state_table_for(&self, rel: &Relation) -> crate::error::Result<Arc<StateTable>> {
        if let Some(t) = self.tables.lock().get(&rel.id) {
            return Ok(t.clone());
        }
        let table = Arc::new(StateTable::new(
            rel.id,
            rel.arrow_schema(),
            rel.primary_key.clone(),
            self.store.clone(),
        )?);
        self.tables.lock().insert(rel.id, table.clone());
        Ok(table)
    }

    /// The open tables whose changes are logged (views or sinks read them).
    pub fn logged_tables(&self) -> Vec<Arc<StateTable>> {
        self.tables
            .lock()
            .values()
            .filter(|t| t.changes().is_logged())
            .cloned()
            .collect()
    }

    /// Forgets the cached state table of a dropped relation.
    pub fn forget(&self, id: u32) {
        self.tables.lock().remove(&id);
    }

    async fn view_table(
        &self,
        definition: &str,
        columns: Vec<String>,
    ) -> DFResult<Arc<dyn TableProvider>> {
        let state = self
            .planner
            .get()
            .and_then(Weak::upgrade)
            .ok_or_else(|| DataFusionError::Internal("view planner is not set".into()))?;
        let state = state.read().clone();
        let marked = crate::session::sql_rewrite::mark_counted_set_operations_in(definition);
        let plan = crate::sql::star_except::plan(&state, marked.as_deref().unwrap_or(definition))
            .await
            .map_err(crate::error::EddyError::into_datafusion)?;
        let plan = crate::session::set_operations::rewrite(plan)
            .map_err(crate::error::EddyError::into_datafusion)?;
        // Rename the query's output columns to the names the view was created with.
        let exprs = plan
            .schema()
            .columns()
            .into_iter()
            .zip(columns.iter())
            .map(|(c, name)| col(c).alias(name))
            .collect::<Vec<_>>();
        let plan = LogicalPlanBuilder::from(plan).project(exprs)?.build()?;
        Ok(Arc::new(ViewTable::new(plan, Some(definition.to_string()))))
    }
}

#[async_trait]
impl SchemaProvider for CatalogSchemaProvider {
    fn table_names(&self) -> Vec<String> {
        self.catalog
            .relations()
            .into_iter()
            .filter(|r| !matches!(r.kind, RelationKind::Sink | RelationKind::Index))
            .map(|r| r.name)
            .collect()
    }

    async fn table(&self, name: &str) -> DFResult<Option<Arc<dyn TableProvider>>> {
        let Some(rel) = self.catalog.get(name) else {
            return match self.unqualified_lists.get() {
                Some(lists) if super::rw_catalog::is_list(name) => lists.table(name).await,
                _ => Ok(None),
            };
        };
        match rel.kind {
            RelationKind::Sink | RelationKind::Index => Ok(None),
            RelationKind::Table => {
                let table = self
                    .state_table_for(&rel)
                    .map_err(EddyError::into_datafusion)?;
                let table = StoredTable::new(table).on_conflict(
                    crate::state::OnConflict::from_option_value(
                        rel.options.get("on_conflict").map(String::as_str),
                    ),
                );
                Ok(Some(Arc::new(if rel.is_append_only() {
                    table.append_only(&rel.name)
                } else {
                    table
                })))
            }
            RelationKind::MaterializedView => {
                let table = self
                    .state_table_for(&rel)
                    .map_err(EddyError::into_datafusion)?;
                Ok(Some(Arc::new(
                    StoredTable::read_only(table, &rel.name, self.serving.clone())
                        .scan_order(rel.scan_order.clone()),
                )))
            }
            RelationKind::Source => Ok(Some(Arc::new(SourceRelation {
                name: rel.name.clone(),
                schema: rel.arrow_schema(),
            }))),
            RelationKind::View => {
                let columns = rel.columns.iter().map(|c| c.name.clone()).collect();
                Ok(Some(self.view_table(&rel.definition, columns).await?))
            }
        }
    }

    fn table_exist(&self, name: &str) -> bool {
        match self.catalog.get(name) {
            Some(r) => !matches!(r.kind, RelationKind::Sink | RelationKind::Index),
            None => self.unqualified_lists.get().is_some() && super::rw_catalog::is_list(name),
        }
    }
}

/// A source as DataFusion sees it: it has columns (catalog queries list them), but reading
/// it with a batch `SELECT` is refused; streaming jobs read sources.
#[derive(Debug)]
struct SourceRelation {
    name: String,
    schema: arrow::datatypes::SchemaRef,
}

#[async_trait]
impl TableProvider for SourceRelation {
    fn schema(&self) -> arrow::datatypes::SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> datafusion::datasource::TableType {
        datafusion::datasource::TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn datafusion::catalog::Session,
        _projection: Option<&Vec<usize>>,
        _filters: &[datafusion::logical_expr::Expr],
        _limit: Option<usize>,
    ) -> DFResult<Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
        Err(EddyError::not_supported(format!(
            "cannot SELECT from source \"{}\": a source is a stream; create a materialized view over it and query the view",
            self.name
        ))
        .into_datafusion())
    }
}
