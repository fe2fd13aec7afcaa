//! Subqueries in `UPDATE` and `DELETE`, evaluated before the change.
//!
//! DataFusion runs an `UPDATE` or `DELETE` by handing the table its filters and
//! assignments as expressions over the table's own row. Left to its optimizer, a subquery
//! becomes a join, and a filter that is no longer over the table alone is not handed on:
//! `DELETE FROM t WHERE id IN (SELECT ...)` would delete every row. So each uncorrelated
//! subquery is run first and replaced by its result: a scalar subquery by its value (NULL
//! without rows, an error with more than one), `IN (SELECT ...)` by the list of values,
//! `EXISTS (...)` by whether it has rows. A correlated subquery, which would have to be run
//! per row, is refused.

use crate::error::{EddyError, Result};
use arrow::array::Array;
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::execution::SessionState;
use datafusion::logical_expr::{DmlStatement, Expr, LogicalPlan, Subquery, WriteOp, lit};
use std::collections::HashMap;
use std::sync::Arc;

/// What each subquery gave: its rows' values of its first column (one per row).
type Evaluated = HashMap<usize, Vec<ScalarValue>>;

/// The plan with the subqueries of an `UPDATE`'s or `DELETE`'s filters and assignments
/// replaced by their results; other plans as they are.
pub(super) async fn evaluate(plan: LogicalPlan, state: &SessionState) -> Result<LogicalPlan> {
    let LogicalPlan::Dml(dml) = &plan else {
        return Ok(plan);
    };
    if !matches!(dml.op, WriteOp::Update | WriteOp::Delete) {
        return Ok(plan);
    }
    let mut subqueries: Vec<Subquery> = Vec::new();
    dml.input.apply(|node| {
        node.apply_expressions(|e| {
            e.apply(|e| {
                if let Some(subquery) = subquery_of(e)
                    && !subqueries
                        .iter()
                        .any(|s| Arc::ptr_eq(&s.subquery, &subquery.subquery))
                {
                    subqueries.push(subquery.clone());
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    })?;
    if subqueries.is_empty() {
        return Ok(plan);
    }
    let mut evaluated: Evaluated = HashMap::new();
    for subquery in &subqueries {
        if !subquery.outer_ref_columns.is_empty() {
            return Err(EddyError::not_supported(
                "a correlated subquery in UPDATE or DELETE is not supported; \
                 use one that does not read the changed table's row",
            ));
        }
        let plan = subquery.subquery.as_ref().clone();
        let batches = datafusion::dataframe::DataFrame::new(state.clone(), plan)
            .collect()
            .await?;
        let mut values = Vec::new();
        for batch in &batches {
            let column = batch.column(0);
            for row in 0..column.len() {
                values.push(ScalarValue::try_from_array(column, row)?);
            }
        }
        evaluated.insert(key(&subquery.subquery), values);
    }
    let data_type = |s: &Subquery| s.subquery.schema().field(0).data_type().clone();
    let input = dml
        .input
        .as_ref()
        .clone()
        .transform_up(|node| {
            node.map_expressions(|e| {
                e.transform_up(|e| {
                        if let Some(s) = subquery_of(&e)
                        && !matches!(e, Expr::Exists(_))
                        && s.subquery.schema().fields().len() != 1
                    {
                        return Err(EddyError::syntax("subquery must return only one column")
                            .into_datafusion());
                    }
                    let replaced = match &e {
                        Expr::ScalarSubquery(s) => {
                            let values = &evaluated[&key(&s.subquery)];
                            match values.as_slice() {
                                [] => lit(ScalarValue::try_from(&data_type(s))?),
                                [value] => lit(value.clone()),
                                _ => {
                                    return Err(EddyError::new(
                                        "21000",
                                        "more than one row returned by a subquery used as an expression",
                                    )
                                    .into_datafusion());
                                }
                            }
                        }
                        Expr::InSubquery(in_subquery) => {
                            let values = &evaluated[&key(&in_subquery.subquery.subquery)];
                            if values.is_empty() {
                                lit(in_subquery.negated)
                            } else {
                                in_subquery.expr.as_ref().clone().in_list(
                                    values.iter().cloned().map(lit).collect(),
                                    in_subquery.negated,
                                )
                            }
                        }
                        Expr::Exists(exists) => {
                            let has_rows =
                                !evaluated[&key(&exists.subquery.subquery)].is_empty();
                            lit(has_rows != exists.negated)
                        }
                        _ => return Ok(Transformed::no(e)),
                    };
                    Ok(Transformed::yes(replaced))
                })
            })
        })?
        .data;
    Ok(LogicalPlan::Dml(DmlStatement::new(
        dml.table_name.clone(),
        dml.target.clone(),
        dml.op.clone(),
        Arc::new(input),
    )))
}

/// A subquery's identity: the address of its plan, shared by every clone of the
/// expression that holds it.
fn key(plan: &Arc<LogicalPlan>) -> usize {
    Arc::as_ptr(plan) as usize
}

pub(super) fn subquery_of(e: &Expr) -> Option<&Subquery> {
    match e {
        Expr::ScalarSubquery(s) => Some(s),
        Expr::InSubquery(i) => Some(&i.subquery),
        Expr::Exists(e) => Some(&e.subquery),
        _ => None,
    }
}
