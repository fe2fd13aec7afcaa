//! `GROUP BY GROUPING SETS (...)`, `ROLLUP (...)` and `CUBE (...)` in a view: an
//! [`Expand`] before the keyed aggregate copies each row once per grouping set (columns
//! left out of the set made NULL, plus the set's grouping id), and the aggregate groups by
//! the grouping columns and the id, which gives DataFusion's output for the aggregate:
//! the grouping columns, `__grouping_id` (which `GROUPING(...)` reads), the aggregates.
//!
//! The empty set `()` (ROLLUP's and CUBE's grand total) has a row even over no input,
//! as in PostgreSQL and in batch (`count(*)` 0): it is a global aggregate of its own,
//! its row padded with the NULL grouping columns and its id, in a union with the others.

use super::{AggParts, Node, Partial, PlanContext, agg_call, stateless, unsupported, visit};
use crate::error::Result;
use crate::stream::operators::Operator;
use crate::stream::operators::expand::{Expand, GroupingSet as ExpandedSet, grouping_id};
use crate::stream::operators::project::Project;
use arrow::datatypes::{Field, Schema};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::expr::GroupingSet;
use datafusion::logical_expr::{Aggregate, Expr, ExprSchemable};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::expressions::Literal;
use std::collections::HashMap;
use std::sync::Arc;

/// For each set, which of `columns` it leaves out, in DataFusion's order of the sets.
fn left_out_per_set(set: &GroupingSet, columns: &[&Expr]) -> Vec<Vec<bool>> {
    let n = columns.len();
    match set {
        // (a, b, c), (a, b), (a), ()
        GroupingSet::Rollup(_) => (0..=n)
            .rev()
            .map(|k| (0..n).map(|i| i >= k).collect())
            .collect(),
        // Every subset.
        GroupingSet::Cube(_) => (0..1usize << n)
            .map(|bits| (0..n).map(|i| bits & (1 << i) == 0).collect())
            .collect(),
        GroupingSet::GroupingSets(sets) => sets
            .iter()
            .map(|set| columns.iter().map(|c| !set.contains(c)).collect())
            .collect(),
    }
}

/// The aggregate of a grouping-set `GROUP BY`: over an [`Expand`] of its input, in a
/// union with the global aggregates of its empty sets.
pub(super) fn aggregate(
    aggregate: &Aggregate,
    set: &GroupingSet,
    ctx: &PlanContext,
) -> Result<Partial> {
    let columns = set.distinct_expr();
    if columns.len() > 63 {
        return Err(unsupported("a grouping set of more than 63 columns"));
    }
    let mut ordinals: HashMap<Vec<bool>, usize> = HashMap::new();
    let (empty, sets): (Vec<ExpandedSet>, Vec<ExpandedSet>) = left_out_per_set(set, &columns)
        .into_iter()
        .map(|left_out| {
            let ordinal = ordinals.entry(left_out.clone()).or_insert(0);
            let id = grouping_id(&left_out, *ordinal);
            *ordinal += 1;
            ExpandedSet { left_out, id }
        })
        .partition(|set| set.left_out.iter().all(|out| *out));
    let mut branches = Vec::new();
    if !sets.is_empty() {
        let parts = expanded(aggregate, &columns, sets, ctx)?;
        if empty.is_empty() {
            return Ok(Partial::Agg(parts));
        }
        branches.push(Partial::Agg(parts).finish()?);
    }
    for set in &empty {
        branches.push(grand_total(aggregate, columns.len(), set.id, ctx)?);
    }
    match branches.len() {
        1 => Ok(Partial::Node(branches.remove(0))),
        _ => Ok(Partial::Node(Node::Union {
            inputs: branches,
            watermarks: vec![],
        })),
    }
}

/// The aggregate calls of `aggregate`, planned over its input, each with its output type
/// (the aggregates follow `keys` output columns).
fn calls(
    aggregate: &Aggregate,
    keys: usize,
) -> Result<Vec<crate::stream::operators::hash_agg::AggCall>> {
    aggregate
        .aggr_expr
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let output_type = aggregate.schema.field(keys + i).data_type().clone();
            agg_call(e, aggregate.input.schema(), output_type)
        })
        .collect()
}

fn call_names(aggregate: &Aggregate) -> Vec<String> {
    aggregate
        .aggr_expr
        .iter()
        .map(|e| e.schema_name().to_string())
        .collect()
}

/// An empty grouping set: a global aggregate, its row given NULL grouping columns and
/// the set's id.
fn grand_total(aggregate: &Aggregate, columns: usize, id: u64, ctx: &PlanContext) -> Result<Node> {
    let output = aggregate.schema.as_arrow();
    let aggs_schema = Arc::new(Schema::new(output.fields()[columns + 1..].to_vec()));
    let total = Partial::Agg(AggParts {
        group_exprs: vec![],
        group_types: vec![],
        group_names: vec![],
        calls: calls(aggregate, columns + 1)?,
        call_names: call_names(aggregate),
        schema: aggs_schema,
        post: vec![],
        input: visit(&aggregate.input, ctx)?.finish()?,
        watermarks: vec![],
        window_close: None,
        watermarked_key: None,
    })
    .finish()?;
    let id_type = output.field(columns).data_type();
    let mut exprs: Vec<Arc<dyn PhysicalExpr>> = output.fields()[..columns]
        .iter()
        .map(|f| {
            Ok(
                Arc::new(Literal::new(ScalarValue::try_from(f.data_type())?))
                    as Arc<dyn PhysicalExpr>,
            )
        })
        .collect::<Result<_>>()?;
    exprs.push(Arc::new(Literal::new(
        ScalarValue::UInt64(Some(id)).cast_to(id_type)?,
    )));
    for (i, field) in output.fields()[columns + 1..].iter().enumerate() {
        exprs.push(Arc::new(Column::new(field.name(), i)));
    }
    let project = Project::new(exprs, Arc::new(output.clone()));
    Ok(stateless(
        format!("Project(grand total as grouping set {id})"),
        Arc::new(move || Ok(Box::new(project.clone()) as Box<dyn Operator>)),
        total,
        vec![],
    ))
}

/// The keyed aggregate of the non-empty sets, over an [`Expand`] of the input.
fn expanded(
    aggregate: &Aggregate,
    columns: &[&Expr],
    sets: Vec<ExpandedSet>,
    ctx: &PlanContext,
) -> Result<AggParts> {
    let input_schema = aggregate.input.schema();
    let input = visit(&aggregate.input, ctx)?.finish()?;
    let input_width = input_schema.fields().len();
    // The grouping id's type is the one DataFusion gave the aggregate's output.
    let id_type = aggregate.schema.field(columns.len()).data_type().clone();

    let mut group_types = Vec::new();
    let mut fields: Vec<Arc<Field>> = input_schema.as_arrow().fields().to_vec();
    for (i, column) in columns.iter().enumerate() {
        let data_type = column.get_type(input_schema)?;
        fields.push(Arc::new(Field::new(
            format!("__grouping_column_{i}"),
            data_type.clone(),
            true,
        )));
        group_types.push(data_type);
    }
    fields.push(Arc::new(Field::new(
        datafusion::logical_expr::Aggregate::INTERNAL_GROUPING_ID,
        id_type.clone(),
        false,
    )));
    group_types.push(id_type.clone());
    let expanded_schema = Arc::new(Schema::new(fields));

    let values = columns
        .iter()
        .map(|c| super::physical(c, input_schema))
        .collect::<Result<Vec<_>>>()?;
    let describe = format!(
        "Expand({} sets of {})",
        sets.len(),
        columns
            .iter()
            .map(|c| c.schema_name().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let watermarks = input.watermarks();
    let expand = {
        let (values, sets, id_type, schema) = (values, sets, id_type, expanded_schema.clone());
        stateless(
            describe,
            Arc::new(move || {
                Ok(Box::new(Expand::new(
                    values.clone(),
                    sets.clone(),
                    id_type.clone(),
                    schema.clone(),
                )) as Box<dyn Operator>)
            }),
            input,
            watermarks,
        )
    };

    // The aggregate groups by the expanded grouping columns and the id.
    let group_exprs: Vec<Arc<dyn PhysicalExpr>> = (input_width..expanded_schema.fields().len())
        .map(|i| Arc::new(Column::new(expanded_schema.field(i).name(), i)) as Arc<dyn PhysicalExpr>)
        .collect();
    let calls = calls(aggregate, columns.len() + 1)?;
    let mut group_names: Vec<String> = columns
        .iter()
        .map(|c| c.schema_name().to_string())
        .collect();
    group_names.push(datafusion::logical_expr::Aggregate::INTERNAL_GROUPING_ID.to_string());
    Ok(AggParts {
        group_exprs,
        group_types,
        group_names,
        calls,
        call_names: call_names(aggregate),
        schema: Arc::new(aggregate.schema.as_arrow().clone()),
        post: vec![],
        input: expand,
        watermarks: vec![],
        window_close: None,
        watermarked_key: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::col;

    #[test]
    fn sets_of_rollup_cube_and_grouping_sets() {
        let (a, b) = (col("a"), col("b"));
        let columns = [&a, &b];
        let rollup = GroupingSet::Rollup(vec![a.clone(), b.clone()]);
        assert_eq!(
            left_out_per_set(&rollup, &columns),
            vec![vec![false, false], vec![false, true], vec![true, true]]
        );
        let cube = GroupingSet::Cube(vec![a.clone(), b.clone()]);
        let mut cube_sets = left_out_per_set(&cube, &columns);
        cube_sets.sort();
        assert_eq!(
            cube_sets,
            vec![
                vec![false, false],
                vec![false, true],
                vec![true, false],
                vec![true, true]
            ]
        );
        let sets = GroupingSet::GroupingSets(vec![vec![a.clone()], vec![b.clone()], vec![]]);
        assert_eq!(
            left_out_per_set(&sets, &columns),
            vec![vec![false, true], vec![true, false], vec![true, true]]
        );
    }
}
