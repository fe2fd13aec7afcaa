//! `eddy_catalog`: system tables about what the server is doing.
//!
//! - `eddy_catalog.jobs`: every streaming job (one per materialized view) with its state
//!   (`running`, `finished` once a bounded source is exhausted, `failed`), the rows it has
//!   read and written, and when it started and finished. Tests and benchmarks wait on it.

use crate::stream::job::JobRegistry;
use arrow::array::{Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use async_trait::async_trait;
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::common::Result as DFResult;
use datafusion::datasource::TableType;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

pub const SYSTEM_SCHEMA: &str = "eddy_catalog";

#[derive(Debug)]
pub struct SystemSchema {
    jobs: Arc<JobsTable>,
}

impl SystemSchema {
    pub fn new(registry: Arc<JobRegistry>) -> Self {
        Self {
            jobs: Arc::new(JobsTable { registry }),
        }
    }
}

#[async_trait]
impl SchemaProvider for SystemSchema {
    fn table_names(&self) -> Vec<String> {
        vec!["jobs".into()]
    }

    async fn table(&self, name: &str) -> DFResult<Option<Arc<dyn TableProvider>>> {
        Ok(match name {
            "jobs" => Some(self.jobs.clone()),
            _ => None,
        })
    }

    fn table_exist(&self, name: &str) -> bool {
        name == "jobs"
    }
}

pub struct JobsTable {
    registry: Arc<JobRegistry>,
}

impl std::fmt::Debug for JobsTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("eddy_catalog.jobs")
    }
}

fn micros(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

#[async_trait]
impl TableProvider for JobsTable {
    fn schema(&self) -> SchemaRef {
        let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()));
        Arc::new(Schema::new(vec![
            Field::new("name", DataType::Utf8, false),
            Field::new("state", DataType::Utf8, false),
            Field::new("rows_read", DataType::Int64, false),
            Field::new("rows_written", DataType::Int64, false),
            Field::new("malformed_rows", DataType::Int64, false),
            Field::new("started", ts.clone(), false),
            Field::new("finished", ts, true),
            Field::new("error", DataType::Utf8, true),
        ]))
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let jobs = self.registry.jobs();
        let schema = self.schema();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from_iter_values(
                    jobs.iter().map(|j| j.name.clone()),
                )),
                Arc::new(StringArray::from_iter_values(
                    jobs.iter().map(|j| j.state.lock().as_str()),
                )),
                Arc::new(Int64Array::from_iter_values(
                    jobs.iter()
                        .map(|j| j.rows_read.load(Ordering::Relaxed) as i64),
                )),
                Arc::new(Int64Array::from_iter_values(
                    jobs.iter()
                        .map(|j| j.rows_written.load(Ordering::Relaxed) as i64),
                )),
                Arc::new(Int64Array::from_iter_values(
                    jobs.iter()
                        .map(|j| j.malformed_rows.load(Ordering::Relaxed) as i64),
                )),
                Arc::new(
                    TimestampMicrosecondArray::from_iter_values(
                        jobs.iter().map(|j| micros(j.started)),
                    )
                    .with_timezone("+00:00"),
                ),
                Arc::new(
                    TimestampMicrosecondArray::from_iter(
                        jobs.iter().map(|j| j.finished.lock().map(micros)),
                    )
                    .with_timezone("+00:00"),
                ),
                Arc::new(StringArray::from_iter(
                    jobs.iter().map(|j| j.error.lock().clone()),
                )),
            ],
        )?;
        Ok(MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            schema,
            projection.cloned(),
        )?)
    }
}
