//! [`KeyedScan`]: a stored table read with each row's storage key, so that an `UPDATE`
//! or `DELETE` that joins other relations can run as a query and then change exactly
//! the rows it found.

use super::stored_table::StoredTable;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::Result as DFResult;
use datafusion::datasource::TableType;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use std::sync::Arc;

/// The rows of a [`StoredTable`] with [`super::stored_table::ROW_KEY_COLUMN`] appended.
#[derive(Debug)]
pub struct KeyedScan {
    /// A [`StoredTable`] (checked by [`KeyedScan::of`]).
    table: Arc<dyn TableProvider>,
}

impl KeyedScan {
    /// The keyed scan of `provider`, if it is a stored table.
    pub fn of(provider: Arc<dyn TableProvider>) -> Option<Self> {
        provider.downcast_ref::<StoredTable>()?;
        Some(Self { table: provider })
    }

    pub fn table(&self) -> &StoredTable {
        self.table
            .downcast_ref::<StoredTable>()
            .expect("checked by KeyedScan::of")
    }
}

#[async_trait]
impl TableProvider for KeyedScan {
    fn schema(&self) -> SchemaRef {
        self.table().keyed_schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let batches = self.table().keyed_rows(state)?;
        Ok(MemorySourceConfig::try_new_exec(
            &[batches],
            self.schema(),
            projection.cloned(),
        )?)
    }
}
