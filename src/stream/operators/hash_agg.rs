//! HashAgg: `GROUP BY` with `count`, `sum`, `min`, `max`, `avg`, keeping one state per
//! group and emitting, for every group a chunk touched, its new result row keyed by the
//! group key. Operators that follow the aggregate in the query (the projection of the
//! select list, `HAVING`) run on those result rows here, so the key stays attached; a
//! group whose row `HAVING` now rejects is emitted as a delete.
//!
//! This first version takes append-only input (sources); retractions from updated tables
//! arrive with the table change streams.

use super::Operator;
use super::filter::mask;
use super::project::Project;
use crate::error::{EddyError, Result};
use crate::stream::{Op, StreamChunk};
use arrow::array::{Array, ArrayRef, AsArray, Float64Array, Int64Array, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float64Type, Int64Type, SchemaRef};
use arrow::row::{OwnedRow, RowConverter, SortField};
use datafusion::common::ScalarValue;
use datafusion::physical_expr::PhysicalExpr;
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggKind {
    CountStar,
    Count,
    CountDistinct,
    Sum,
    Min,
    Max,
    Avg,
}

pub struct AggCall {
    pub kind: AggKind,
    pub arg: Option<Arc<dyn PhysicalExpr>>,
    /// The type DataFusion gives the result (`sum(int)` is `bigint`, `avg` is `double`).
    pub output_type: DataType,
}

/// What runs on the aggregate's result rows before they leave the operator.
pub enum PostOp {
    Project(Project),
    Filter(Arc<dyn PhysicalExpr>),
}

/// Per-group state of one aggregate call, stored column-wise by group index.
enum AggState {
    Count(Vec<i64>),
    /// Sums of integers (exact in i128) with the count of non-null inputs.
    IntSum(Vec<i128>, Vec<i64>),
    FloatSum(Vec<f64>, Vec<i64>),
    Extreme(Vec<Option<ScalarValue>>, bool),
    /// The distinct non-null values seen per group (memcomparable), for `count(DISTINCT)`.
    Distinct(Vec<std::collections::HashSet<Vec<u8>>>),
}

pub struct HashAgg {
    /// No `GROUP BY`: one group, keyed by a constant, whose key columns are not output.
    global: bool,
    group_exprs: Vec<Arc<dyn PhysicalExpr>>,
    key_codec: RowConverter,
    calls: Vec<AggCall>,
    states: Vec<AggState>,
    groups: HashMap<OwnedRow, usize>,
    group_rows: Vec<OwnedRow>,
    /// Whether the group's row is in the output (not filtered out by HAVING).
    visible: Vec<bool>,
    agg_schema: SchemaRef,
    post: Vec<PostOp>,
}

impl HashAgg {
    pub fn new(
        group_exprs: Vec<Arc<dyn PhysicalExpr>>,
        group_types: Vec<DataType>,
        calls: Vec<AggCall>,
        agg_schema: SchemaRef,
        post: Vec<PostOp>,
    ) -> Result<Self> {
        let global = group_exprs.is_empty();
        let (group_exprs, group_types) = if global {
            let constant: Arc<dyn PhysicalExpr> =
                Arc::new(datafusion::physical_expr::expressions::Literal::new(
                    ScalarValue::Boolean(Some(true)),
                ));
            (vec![constant], vec![DataType::Boolean])
        } else {
            (group_exprs, group_types)
        };
        let key_codec = RowConverter::new(group_types.into_iter().map(SortField::new).collect())?;
        let states = calls
            .iter()
            .map(|c| match c.kind {
                AggKind::CountStar | AggKind::Count => AggState::Count(vec![]),
                AggKind::CountDistinct => AggState::Distinct(vec![]),
                AggKind::Sum | AggKind::Avg => {
                    if c.output_type.is_floating() || c.kind == AggKind::Avg {
                        AggState::FloatSum(vec![], vec![])
                    } else {
                        AggState::IntSum(vec![], vec![])
                    }
                }
                AggKind::Min => AggState::Extreme(vec![], false),
                AggKind::Max => AggState::Extreme(vec![], true),
            })
            .collect();
        Ok(Self {
            global,
            group_exprs,
            key_codec,
            calls,
            states,
            groups: HashMap::new(),
            group_rows: vec![],
            visible: vec![],
            agg_schema,
            post,
        })
    }

    /// Group index of every row, creating groups as needed.
    fn group_ids(&mut self, batch: &RecordBatch) -> Result<Vec<usize>> {
        let keys = self
            .group_exprs
            .iter()
            .map(|e| Ok(e.evaluate(batch)?.into_array(batch.num_rows())?))
            .collect::<Result<Vec<ArrayRef>>>()?;
        let rows = self.key_codec.convert_columns(&keys)?;
        let mut ids = Vec::with_capacity(batch.num_rows());
        for row in rows.iter() {
            let next = self.group_rows.len();
            let id = *self.groups.entry(row.owned()).or_insert(next);
            if id == next {
                self.group_rows.push(row.owned());
                self.visible.push(false);
                for s in &mut self.states {
                    match s {
                        AggState::Count(v) => v.push(0),
                        AggState::IntSum(v, n) => {
                            v.push(0);
                            n.push(0);
                        }
                        AggState::FloatSum(v, n) => {
                            v.push(0.0);
                            n.push(0);
                        }
                        AggState::Extreme(v, _) => v.push(None),
                        AggState::Distinct(v) => v.push(Default::default()),
                    }
                }
            }
            ids.push(id);
        }
        Ok(ids)
    }

    fn update(&mut self, batch: &RecordBatch, ids: &[usize]) -> Result<()> {
        for (call, state) in self.calls.iter().zip(self.states.iter_mut()) {
            let arg = match &call.arg {
                Some(e) => Some(e.evaluate(batch)?.into_array(batch.num_rows())?),
                None => None,
            };
            match (state, arg) {
                (AggState::Count(counts), None) => ids.iter().for_each(|g| counts[*g] += 1),
                (AggState::Count(counts), Some(a)) => {
                    for (i, g) in ids.iter().enumerate() {
                        if a.is_valid(i) {
                            counts[*g] += 1;
                        }
                    }
                }
                (AggState::IntSum(sums, n), Some(a)) => {
                    let a = cast(&a, &DataType::Int64)?;
                    let a = a.as_primitive::<Int64Type>();
                    for (i, g) in ids.iter().enumerate() {
                        if a.is_valid(i) {
                            sums[*g] += a.value(i) as i128;
                            n[*g] += 1;
                        }
                    }
                }
                (AggState::FloatSum(sums, n), Some(a)) => {
                    let a = cast(&a, &DataType::Float64)?;
                    let a = a.as_primitive::<Float64Type>();
                    for (i, g) in ids.iter().enumerate() {
                        if a.is_valid(i) {
                            sums[*g] += a.value(i);
                            n[*g] += 1;
                        }
                    }
                }
                (AggState::Distinct(sets), Some(a)) => {
                    let codec = RowConverter::new(vec![SortField::new(a.data_type().clone())])?;
                    let rows = codec.convert_columns(std::slice::from_ref(&a))?;
                    for (i, g) in ids.iter().enumerate() {
                        if a.is_valid(i) {
                            sets[*g].insert(rows.row(i).as_ref().to_vec());
                        }
                    }
                }
                (AggState::Extreme(values, is_max), Some(a)) => {
                    for (i, g) in ids.iter().enumerate() {
                        if a.is_null(i) {
                            continue;
                        }
                        let v = ScalarValue::try_from_array(&a, i)?;
                        let replace = match &values[*g] {
                            None => true,
                            Some(cur) => {
                                let ord = v.partial_cmp(cur);
                                if *is_max {
                                    ord == Some(std::cmp::Ordering::Greater)
                                } else {
                                    ord == Some(std::cmp::Ordering::Less)
                                }
                            }
                        };
                        if replace {
                            values[*g] = Some(v);
                        }
                    }
                }
                _ => return Err(EddyError::internal("aggregate call without its argument")),
            }
        }
        Ok(())
    }

    /// Result rows (group columns, then aggregates) of the given groups.
    fn results(&self, groups: &[usize]) -> Result<RecordBatch> {
        let mut columns = if self.global {
            vec![]
        } else {
            self.key_codec
                .convert_rows(groups.iter().map(|g| self.group_rows[*g].row()))?
        };
        let key_columns = columns.len();
        for ((call, state), field) in self
            .calls
            .iter()
            .zip(&self.states)
            .zip(self.agg_schema.fields().iter().skip(key_columns))
        {
            let array: ArrayRef = match state {
                AggState::Count(c) => {
                    Arc::new(Int64Array::from_iter_values(groups.iter().map(|g| c[*g])))
                }
                AggState::Distinct(sets) => Arc::new(Int64Array::from_iter_values(
                    groups.iter().map(|g| sets[*g].len() as i64),
                )),
                AggState::IntSum(s, n) => {
                    let values: Vec<Option<i128>> = groups
                        .iter()
                        .map(|g| (n[*g] > 0).then_some(s[*g]))
                        .collect();
                    let as_i64: Vec<Option<i64>> = values
                        .iter()
                        .map(|v| {
                            v.map(|x| {
                                i64::try_from(x).map_err(|_| {
                                    EddyError::new(
                                        crate::error::sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
                                        "bigint out of range",
                                    )
                                })
                            })
                            .transpose()
                        })
                        .collect::<Result<_>>()?;
                    Arc::new(Int64Array::from(as_i64))
                }
                AggState::FloatSum(s, n) => {
                    Arc::new(Float64Array::from_iter(groups.iter().map(|g| {
                        if n[*g] == 0 {
                            None
                        } else if call.kind == AggKind::Avg {
                            Some(s[*g] / n[*g] as f64)
                        } else {
                            Some(s[*g])
                        }
                    })))
                }
                AggState::Extreme(values, _) => {
                    let scalars: Vec<ScalarValue> = groups
                        .iter()
                        .map(|g| {
                            values[*g].clone().unwrap_or(
                                ScalarValue::try_from(field.data_type())
                                    .unwrap_or(ScalarValue::Null),
                            )
                        })
                        .collect();
                    ScalarValue::iter_to_array(scalars)?
                }
            };
            let array = if array.data_type() != field.data_type() {
                cast(&array, field.data_type())?
            } else {
                array
            };
            columns.push(array);
        }
        Ok(RecordBatch::try_new(self.agg_schema.clone(), columns)?)
    }
}

impl Operator for HashAgg {
    fn name(&self) -> &'static str {
        "HashAgg"
    }

    fn process(&mut self, chunk: StreamChunk) -> Result<Vec<StreamChunk>> {
        if !chunk.is_append_only() {
            return Err(EddyError::not_supported(
                "GROUP BY over a stream with updates or deletes is not supported yet",
            ));
        }
        let ids = self.group_ids(&chunk.batch)?;
        self.update(&chunk.batch, &ids)?;
        let mut touched: Vec<usize> = Vec::new();
        let mut seen = vec![false; self.group_rows.len()];
        for g in ids {
            if !seen[g] {
                seen[g] = true;
                touched.push(g);
            }
        }
        let mut batch = self.results(&touched)?;
        let mut keep = vec![true; touched.len()];
        for op in &self.post {
            match op {
                PostOp::Project(p) => batch = p.apply(&batch)?,
                PostOp::Filter(predicate) => {
                    let m = mask(predicate, &batch)?;
                    for (k, v) in keep.iter_mut().zip(m.values().iter()) {
                        *k = *k && v;
                    }
                }
            }
        }
        let mut ops = Vec::with_capacity(touched.len());
        let mut rows = Vec::with_capacity(touched.len());
        let mut keys = Vec::with_capacity(touched.len());
        for (i, g) in touched.iter().enumerate() {
            let op = match (keep[i], self.visible[*g]) {
                (true, false) => Op::Insert,
                (true, true) => Op::UpdateInsert,
                (false, true) => Op::Delete,
                (false, false) => continue,
            };
            self.visible[*g] = keep[i];
            ops.push(op);
            rows.push(i as u32);
            keys.push(self.group_rows[*g].as_ref().to_vec());
        }
        let indices = arrow::array::UInt32Array::from(rows);
        let columns = batch
            .columns()
            .iter()
            .map(|c| Ok(arrow::compute::take(c, &indices, None)?))
            .collect::<Result<Vec<_>>>()?;
        let batch = RecordBatch::try_new(batch.schema(), columns)?;
        Ok(vec![StreamChunk {
            ops,
            batch,
            keys: Some(keys),
        }])
    }
}
