//! `VALUES (...), (...)` and a `SELECT` without `FROM` in a view: their rows, computed
//! once when the query is planned, become a bounded source ([`ValuesSpec`]) that emits
//! them at the job's start — as RisingWave does, a view over constants holds them and
//! its job finishes.

use super::{Node, physical};
use crate::catalog::{Relation, RelationKind};
use crate::connectors::ConnectorSpec;
use crate::connectors::values::ValuesSpec;
use crate::error::Result;
use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::compute::{cast, concat};
use datafusion::common::DFSchema;
use datafusion::logical_expr::Expr;
use std::sync::Arc;

/// The rows of a `VALUES` list with the schema DataFusion gave it.
pub(super) fn values_node(schema: &DFSchema, rows: &[Vec<Expr>]) -> Result<Node> {
    let arrow_schema = Arc::new(schema.as_arrow().clone());
    let empty = DFSchema::empty();
    // Each value evaluated over one row of no columns.
    let one_row = RecordBatch::try_new_with_options(
        Arc::new(arrow::datatypes::Schema::empty()),
        vec![],
        &RecordBatchOptions::new().with_row_count(Some(1)),
    )?;
    let mut columns = Vec::with_capacity(arrow_schema.fields().len());
    for (c, field) in arrow_schema.fields().iter().enumerate() {
        let mut values: Vec<ArrayRef> = Vec::with_capacity(rows.len());
        for row in rows {
            let value = physical(&row[c], &empty)?
                .evaluate(&one_row)?
                .into_array(1)?;
            values.push(cast(&value, field.data_type())?);
        }
        let parts: Vec<&dyn arrow::array::Array> = values.iter().map(|a| a.as_ref()).collect();
        columns.push(match parts.is_empty() {
            true => arrow::array::new_empty_array(field.data_type()),
            false => concat(&parts)?,
        });
    }
    let batch = RecordBatch::try_new_with_options(
        arrow_schema,
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows.len())),
    )?;
    Ok(constant_rows(batch))
}

/// `SELECT` without `FROM`: one row of no columns (the projection above computes its
/// values), or none.
pub(super) fn empty_relation_node(produce_one_row: bool) -> Result<Node> {
    let batch = RecordBatch::try_new_with_options(
        Arc::new(arrow::datatypes::Schema::empty()),
        vec![],
        &RecordBatchOptions::new().with_row_count(Some(usize::from(produce_one_row))),
    )?;
    Ok(constant_rows(batch))
}

fn constant_rows(rows: RecordBatch) -> Node {
    Node::Connector {
        source: Relation::new("VALUES", RelationKind::Source),
        spec: ConnectorSpec::Values(ValuesSpec { rows }),
        projection: None,
        watermark: None,
    }
}
