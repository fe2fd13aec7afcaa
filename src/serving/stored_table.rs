//! [`StoredTable`]: a `CREATE TABLE` table as a DataFusion `TableProvider`.

use crate::error::EddyError;
use crate::state::state_table::ScannedBatch;
use crate::state::{StateTable, Transaction};
use arrow::array::{ArrayRef, BooleanArray, RecordBatch, UInt32Array, UInt64Array};
use arrow::compute::{
    SortOptions, and, cast, concat_batches, filter_record_batch, take_record_batch,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{DFSchema, Result as DFResult};
use datafusion::datasource::TableType;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::sink::{DataSink, DataSinkExec};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::execution_props::ExecutionProps;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::create_physical_expr;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan};
use futures::StreamExt;
use std::sync::Arc;

#[derive(Debug)]
pub struct StoredTable {
    table: Arc<StateTable>,
    /// Set for materialized views: their rows are written by their job, never by DML.
    read_only: Option<String>,
    /// For materialized views: the committed epoch they are read at.
    serving: Option<Arc<crate::state::ServingEpoch>>,
    /// Set for `APPEND ONLY` tables: rows are only ever inserted (views read them as an
    /// append-only stream).
    append_only: Option<String>,
    /// What an `INSERT` of a stored primary key does.
    on_conflict: crate::state::OnConflict,
    /// For materialized views whose query ends in `ORDER BY`: the order a scan returns.
    scan_order: Vec<crate::catalog::ScanOrder>,
}

impl std::fmt::Debug for StateTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateTable")
            .field("table_id", &self.table_id())
            .finish()
    }
}

impl StoredTable {
    pub fn new(table: Arc<StateTable>) -> Self {
        Self {
            table,
            read_only: None,
            serving: None,
            append_only: None,
            on_conflict: Default::default(),
            scan_order: vec![],
        }
    }

    /// A table with `ON CONFLICT DO NOTHING` or `DO UPDATE IF NOT NULL`.
    pub fn on_conflict(mut self, policy: crate::state::OnConflict) -> Self {
        self.on_conflict = policy;
        self
    }

    /// An `APPEND ONLY` table: `INSERT` only.
    pub fn append_only(mut self, name: &str) -> Self {
        self.append_only = Some(name.to_string());
        self
    }

    /// `UPDATE` and `DELETE` (and `TRUNCATE`) are refused on an append-only table.
    fn check_deletable(&self) -> DFResult<()> {
        match &self.append_only {
            Some(name) => Err(EddyError::not_supported(format!(
                "cannot update or delete rows of append-only table \"{name}\""
            ))
            .into_datafusion()),
            None => Ok(()),
        }
    }

    /// A materialized view: readable (as of the last committed epoch), not writable.
    pub fn read_only(
        table: Arc<StateTable>,
        name: &str,
        serving: Arc<crate::state::ServingEpoch>,
    ) -> Self {
        Self {
            table,
            read_only: Some(name.to_string()),
            serving: Some(serving),
            append_only: None,
            on_conflict: Default::default(),
            scan_order: vec![],
        }
    }

    /// Scans return the rows in `order` (a view's `ORDER BY`), ties in key order.
    pub fn scan_order(mut self, order: Vec<crate::catalog::ScanOrder>) -> Self {
        self.scan_order = order;
        self
    }

    /// The rows of `batches` sorted by [`StoredTable::scan_order`] (a stable sort, so
    /// rows that tie stay in key order).
    fn sorted(&self, batches: Vec<RecordBatch>) -> DFResult<Vec<RecordBatch>> {
        if self.scan_order.is_empty() || batches.is_empty() {
            return Ok(batches);
        }
        let all = concat_batches(self.table.schema(), &batches)?;
        let fields = self
            .scan_order
            .iter()
            .map(|o| {
                SortField::new_with_options(
                    all.schema().field(o.column).data_type().clone(),
                    SortOptions {
                        descending: o.descending,
                        nulls_first: o.nulls_first,
                    },
                )
            })
            .collect();
        let columns: Vec<ArrayRef> = self
            .scan_order
            .iter()
            .map(|o| all.column(o.column).clone())
            .collect();
        let rows = RowConverter::new(fields)?.convert_columns(&columns)?;
        let mut indices: Vec<u32> = (0..all.num_rows() as u32).collect();
        indices.sort_by(|a, b| rows.row(*a as usize).cmp(&rows.row(*b as usize)));
        Ok(vec![take_record_batch(&all, &UInt32Array::from(indices))?])
    }

    fn check_writable(&self) -> DFResult<()> {
        match &self.read_only {
            Some(name) => Err(EddyError::new(
                crate::error::sqlstate::WRONG_OBJECT_TYPE,
                format!("cannot change materialized view \"{name}\": its rows come from its query"),
            )
            .into_datafusion()),
            None => Ok(()),
        }
    }

    /// Every row; a materialized view's as of the snapshot the statement pinned (or the
    /// last committed one), a table's with the changes of the session's open
    /// transaction applied.
    fn read_all(&self, session: Option<&dyn Session>) -> DFResult<Vec<ScannedBatch>> {
        if self.read_only.is_none()
            && let Some(txn) = session.and_then(transaction_of)
        {
            return txn.scan(&self.table).map_err(EddyError::into_datafusion);
        }
        let snapshot = match &self.serving {
            None => None,
            Some(serving) => match session
                .and_then(|s| s.config().get_extension::<crate::state::PinnedSnapshot>())
            {
                Some(pinned) => pinned.0.clone(),
                None => serving.current(),
            },
        };
        self.table
            .scan_at(snapshot.as_deref())
            .map_err(EddyError::into_datafusion)
    }
}

/// The column [`StoredTable::keyed_schema`] adds after the table's own: each row's
/// storage key, which identifies it for an `UPDATE` or `DELETE` run as a query.
pub const ROW_KEY_COLUMN: &str = "__eddy_row_key";

impl StoredTable {
    /// The table's columns and [`ROW_KEY_COLUMN`].
    pub fn keyed_schema(&self) -> SchemaRef {
        let mut fields: Vec<_> = self.schema().fields().iter().cloned().collect();
        fields.push(Arc::new(Field::new(
            ROW_KEY_COLUMN,
            DataType::Binary,
            false,
        )));
        Arc::new(Schema::new(fields))
    }

    /// Refuses `UPDATE` and `DELETE` of a materialized view or an append-only table.
    pub fn check_changeable(&self) -> DFResult<()> {
        self.check_writable()?;
        self.check_deletable()
    }

    /// Every row (as [`StoredTable::read_all`] sees it) with its storage key appended.
    pub fn keyed_rows(&self, session: &dyn Session) -> DFResult<Vec<RecordBatch>> {
        let schema = self.keyed_schema();
        self.read_all(Some(session))?
            .into_iter()
            .map(|scanned| {
                let mut columns = scanned.batch.columns().to_vec();
                let keys: arrow::array::BinaryArray =
                    scanned.keys.iter().map(|k| Some(k.as_slice())).collect();
                columns.push(Arc::new(keys));
                Ok(RecordBatch::try_new(schema.clone(), columns)?)
            })
            .collect()
    }

    /// Replaces the rows stored under `keys` by the rows of `new` (one per key, in the
    /// table's columns, any types castable to them), or deletes them when `new` is
    /// `None`; staged in the session's transaction if one is open. Returns how many
    /// rows changed.
    pub fn change_rows(
        &self,
        session: &dyn Session,
        keys: &[Vec<u8>],
        new: Option<&RecordBatch>,
    ) -> DFResult<u64> {
        self.check_changeable()?;
        let txn = transaction_of(session);
        let changed = match new {
            None => match &txn {
                Some(txn) => txn.delete_keys(&self.table, keys),
                None => self.table.delete_keys(keys),
            },
            Some(new) => {
                let new = crate::state::state_table::conform(new, self.table.schema())
                    .and_then(|b| crate::jsonb::normalize_columns(&b, self.table.schema()))
                    .map_err(EddyError::into_datafusion)?;
                match &txn {
                    Some(txn) => txn.replace(&self.table, keys, &new),
                    None => self.table.replace(keys, &new),
                }
            }
        };
        Ok(changed.map_err(EddyError::into_datafusion)? as u64)
    }
}

/// The session's open transaction (`BEGIN` without `COMMIT` yet): DML is staged in it.
fn transaction_of(session: &dyn Session) -> Option<Arc<Transaction>> {
    session
        .config()
        .get_extension::<TransactionSlot>()
        .and_then(|slot| slot.0.clone())
}

/// What a statement's DataFusion session config carries: the transaction it runs in,
/// if any.
#[derive(Debug, Default)]
pub struct TransactionSlot(pub Option<Arc<Transaction>>);

/// A one-row result `count: UInt64`, what DataFusion expects a DML plan to return.
fn count_result(count: u64) -> DFResult<Arc<dyn ExecutionPlan>> {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "count",
        DataType::UInt64,
        false,
    )]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(UInt64Array::from(vec![count])) as ArrayRef],
    )?;
    Ok(MemorySourceConfig::try_new_exec(
        &[vec![batch]],
        schema,
        None,
    )?)
}

/// Evaluates the `WHERE` conjuncts of an `UPDATE`/`DELETE` over one batch.
/// Rows where the predicate is NULL do not match, as in SQL.
fn matching_rows(
    filters: &[Expr],
    batch: &RecordBatch,
    df_schema: &DFSchema,
    props: &ExecutionProps,
) -> DFResult<BooleanArray> {
    let mut mask = BooleanArray::from(vec![true; batch.num_rows()]);
    for f in filters {
        let expr = create_physical_expr(f, df_schema, props, &PhysicalPlanningContext::default())?;
        let value = expr.evaluate(batch)?.into_array(batch.num_rows())?;
        let value = cast(&value, &DataType::Boolean)?;
        let value = value
            .as_any()
            .downcast_ref::<BooleanArray>()
            .expect("cast to boolean yields a BooleanArray");
        mask = and(&mask, value)?;
    }
    // NULL means "no match".
    Ok(mask.iter().map(|v| Some(v == Some(true))).collect())
}

fn selected_keys(keys: &[Vec<u8>], mask: &BooleanArray) -> Vec<Vec<u8>> {
    keys.iter()
        .zip(mask.iter())
        .filter(|(_, m)| *m == Some(true))
        .map(|(k, _)| k.clone())
        .collect()
}

#[async_trait]
impl TableProvider for StoredTable {
    fn schema(&self) -> SchemaRef {
        self.table.schema().clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DFResult<Vec<TableProviderFilterPushDown>> {
        Ok(vec![
            TableProviderFilterPushDown::Unsupported;
            filters.len()
        ])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let batches: Vec<RecordBatch> = self
            .read_all(Some(state))?
            .into_iter()
            .map(|s| s.batch)
            .collect();
        let batches = self.sorted(batches)?;
        Ok(MemorySourceConfig::try_new_exec(
            &[batches],
            self.schema(),
            projection.cloned(),
        )?)
    }

    async fn insert_into(
        &self,
        state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        self.check_writable()?;
        if insert_op != InsertOp::Append {
            return Err(
                EddyError::not_supported(format!("INSERT {insert_op} is not supported"))
                    .into_datafusion(),
            );
        }
        let sink = TableSink {
            table: self.table.clone(),
            txn: transaction_of(state),
            on_conflict: self.on_conflict,
        };
        Ok(Arc::new(DataSinkExec::new(input, Arc::new(sink), None)))
    }

    async fn delete_from(
        &self,
        state: &dyn Session,
        filters: Vec<Expr>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        self.check_writable()?;
        self.check_deletable()?;
        let df_schema = DFSchema::try_from(self.schema())?;
        let mut deleted = 0u64;
        let txn = transaction_of(state);
        for scanned in self.read_all(Some(state))? {
            let mask = matching_rows(
                &filters,
                &scanned.batch,
                &df_schema,
                state.execution_props(),
            )?;
            let keys = selected_keys(&scanned.keys, &mask);
            deleted += match &txn {
                Some(txn) => txn.delete_keys(&self.table, &keys),
                None => self.table.delete_keys(&keys),
            }
            .map_err(EddyError::into_datafusion)? as u64;
        }
        count_result(deleted)
    }

    async fn update(
        &self,
        state: &dyn Session,
        assignments: Vec<(String, Expr)>,
        filters: Vec<Expr>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        self.check_writable()?;
        self.check_deletable()?;
        let schema = self.schema();
        let df_schema = DFSchema::try_from(schema.clone())?;
        let mut assigned = Vec::with_capacity(schema.fields().len());
        for field in schema.fields() {
            let expr = assignments
                .iter()
                .find(|(name, _)| name == field.name())
                .map(|(_, e)| {
                    create_physical_expr(
                        e,
                        &df_schema,
                        state.execution_props(),
                        &PhysicalPlanningContext::default(),
                    )
                })
                .transpose()?;
            assigned.push(expr);
        }
        for (name, _) in &assignments {
            if schema.field_with_name(name).is_err() {
                return Err(EddyError::new(
                    crate::error::sqlstate::UNDEFINED_COLUMN,
                    format!("column \"{name}\" does not exist"),
                )
                .into_datafusion());
            }
        }
        let mut updated = 0u64;
        let txn = transaction_of(state);
        for scanned in self.read_all(Some(state))? {
            let mask = matching_rows(
                &filters,
                &scanned.batch,
                &df_schema,
                state.execution_props(),
            )?;
            let keys = selected_keys(&scanned.keys, &mask);
            if keys.is_empty() {
                continue;
            }
            let old = filter_record_batch(&scanned.batch, &mask)?;
            let mut columns = Vec::with_capacity(assigned.len());
            for (i, expr) in assigned.iter().enumerate() {
                let field = schema.field(i);
                let column = match expr {
                    Some(expr) => {
                        // Evaluate over the matched rows only: expressions see old values.
                        let value = expr.evaluate(&old)?.into_array(old.num_rows())?;
                        let value = cast(&value, field.data_type())?;
                        if crate::jsonb::is_jsonb(field) {
                            crate::jsonb::normalize_array(&value)
                                .map_err(EddyError::into_datafusion)?
                        } else {
                            value
                        }
                    }
                    None => old.column(i).clone(),
                };
                columns.push(column);
            }
            let new = RecordBatch::try_new(schema.clone(), columns).map_err(|_| {
                let bad = schema
                    .fields()
                    .iter()
                    .find(|f| !f.is_nullable())
                    .map(|f| f.name().clone())
                    .unwrap_or_default();
                EddyError::new(
                    crate::error::sqlstate::NOT_NULL_VIOLATION,
                    format!("null value in column \"{bad}\" violates not-null constraint"),
                )
                .into_datafusion()
            })?;
            updated += match &txn {
                Some(txn) => txn.replace(&self.table, &keys, &new),
                None => self.table.replace(&keys, &new),
            }
            .map_err(EddyError::into_datafusion)? as u64;
        }
        count_result(updated)
    }

    async fn truncate(&self, state: &dyn Session) -> DFResult<Arc<dyn ExecutionPlan>> {
        self.check_writable()?;
        self.check_deletable()?;
        let rows = self.read_all(Some(state))?;
        let count: usize = rows.iter().map(|s| s.keys.len()).sum();
        match transaction_of(state) {
            Some(txn) => {
                for scanned in &rows {
                    txn.delete_keys(&self.table, &scanned.keys)
                        .map_err(EddyError::into_datafusion)?;
                }
            }
            None => self.table.truncate().map_err(EddyError::into_datafusion)?,
        }
        count_result(count as u64)
    }
}

/// Writes the rows of an `INSERT` into the table, batch by batch.
#[derive(Debug)]
struct TableSink {
    table: Arc<StateTable>,
    /// The transaction the `INSERT` runs in: rows are staged there until `COMMIT`.
    txn: Option<Arc<Transaction>>,
    on_conflict: crate::state::OnConflict,
}

impl DisplayAs for TableSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "TableSink(table_id={})", self.table.table_id())
    }
}

#[async_trait]
impl DataSink for TableSink {
    fn schema(&self) -> &SchemaRef {
        self.table.schema()
    }

    async fn write_all(
        &self,
        mut data: SendableRecordBatchStream,
        _context: &Arc<TaskContext>,
    ) -> DFResult<u64> {
        let mut count = 0u64;
        while let Some(batch) = data.next().await {
            let batch = batch?;
            let batch = crate::state::state_table::conform(&batch, self.table.schema())
                .and_then(|b| crate::jsonb::normalize_columns(&b, self.table.schema()))
                .map_err(EddyError::into_datafusion)?;
            count += match &self.txn {
                Some(txn) => txn.insert(&self.table, &batch, self.on_conflict),
                None => self.table.insert(&batch, self.on_conflict),
            }
            .map_err(EddyError::into_datafusion)? as u64;
            if self.txn.is_none() {
                // Views reading the table that fell behind hold the INSERT back, so a
                // bulk load cannot queue their input without bound.
                self.table.changes().wait_for_readers(0).await;
            }
        }
        Ok(count)
    }
}
