//! `WITH sub AS changelog FROM t` (RisingWave's changelog CTE): the changes of a table,
//! materialized view or source as rows, each with its kind in `changelog_op` (see
//! [`crate::stream::operators::changelog`]).
//!
//! The session writes the CTE as `SELECT * FROM eddy_changelog('t', with_row_id)`, a
//! table function giving a [`ChangelogTable`]; the stream planner lowers a scan of it to
//! the relation's changes followed by the Changelog operator. A batch query has no
//! changes to show and is refused.

use super::{
    Node, Partial, PlanContext, filter_node, physical, relation_input, stateless, unsupported,
};
use crate::catalog::Relation;
use crate::error::EddyError;
use crate::stream::graph::OperatorSpec;
use crate::stream::operators::Operator;
use crate::stream::operators::changelog::Changelog;
use crate::stream::operators::project::Project;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::Result;
use datafusion::datasource::TableType;
use datafusion::logical_expr::{Expr, TableScan};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::ExecutionPlan;
use std::sync::Arc;

pub const OP_COLUMN: &str = "changelog_op";
pub const ROW_ID_COLUMN: &str = "_changelog_row_id";
/// The table function the session writes a changelog CTE as.
pub const FUNCTION: &str = "eddy_changelog";

/// The changes of `relation`, as a stream planner input.
#[derive(Debug, Clone)]
pub struct ChangelogTable {
    pub relation: Relation,
    pub with_row_id: bool,
    schema: SchemaRef,
}

impl ChangelogTable {
    pub fn new(relation: Relation, with_row_id: bool) -> Self {
        let mut fields: Vec<Arc<Field>> =
            relation.arrow_schema().fields().iter().cloned().collect();
        fields.push(Arc::new(Field::new(OP_COLUMN, DataType::Int16, false)));
        if with_row_id {
            fields.push(Arc::new(Field::new(ROW_ID_COLUMN, DataType::Int64, false)));
        }
        Self {
            relation,
            with_row_id,
            schema: Arc::new(Schema::new(fields)),
        }
    }
}

#[async_trait]
impl TableProvider for ChangelogTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        _projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Err(EddyError::not_supported(
            "a changelog (WITH ... AS changelog FROM ...) can only be read by a materialized view or a sink",
        )
        .into_datafusion())
    }
}

/// The changelog a scan reads, if it reads one.
pub(super) fn of_scan(scan: &TableScan) -> Option<ChangelogTable> {
    let provider = datafusion::datasource::source_as_provider(&scan.source).ok()?;
    provider.downcast_ref::<ChangelogTable>().cloned()
}

/// The relation's changes, each made a row by the Changelog operator, then the columns
/// the scan keeps and its filters.
pub(super) fn lower(
    scan: &TableScan,
    table: &ChangelogTable,
    ctx: &PlanContext,
) -> crate::error::Result<Partial> {
    if scan.fetch.is_some() {
        return Err(unsupported("LIMIT"));
    }
    let relation = ctx
        .catalog
        .get(&table.relation.name)
        .ok_or_else(|| EddyError::undefined_table(&table.relation.name))?;
    let changes = relation_input(relation, None, None)?;
    let schema = table.schema();
    let with_row_id = table.with_row_id;
    let operator_schema = schema.clone();
    let mut node = Node::Op {
        spec: OperatorSpec {
            describe: "Changelog".to_string(),
            build: Arc::new(move || {
                Ok(
                    Box::new(Changelog::new(operator_schema.clone(), with_row_id))
                        as Box<dyn Operator>,
                )
            }),
        },
        input: Box::new(changes),
        watermarks: vec![],
        appends_only: true,
    };
    if let Some(columns) = &scan.projection {
        let exprs: Vec<Arc<dyn PhysicalExpr>> = columns
            .iter()
            .map(|&i| Arc::new(Column::new(schema.field(i).name(), i)) as Arc<dyn PhysicalExpr>)
            .collect();
        let projected = Arc::new(schema.project(columns)?);
        let describe = format!(
            "Project({})",
            projected
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        let project = Project::new(exprs, projected);
        node = stateless(
            describe,
            Arc::new(move || Ok(Box::new(project.clone()) as Box<dyn Operator>)),
            node,
            vec![],
        );
    }
    for f in &scan.filters {
        node = filter_node(physical(f, &scan.projected_schema)?, node);
    }
    Ok(Partial::Node(node))
}
