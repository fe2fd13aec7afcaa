//! HashAgg: `GROUP BY` with `count`, `count(DISTINCT)`, `sum`, `min`, `max`, `avg`,
//! keeping one state per group. For every group a chunk touched it emits the change of
//! the group's result row, keyed by the group key: an `Insert` for a new group, an
//! `UpdateDelete`/`UpdateInsert` pair for a changed one, a `Delete` when its last row was
//! retracted. Operators that follow the aggregate in the query (the projection of the
//! select list, `HAVING`) run on those result rows here, so the key stays attached; a
//! group whose row `HAVING` now rejects is emitted as a delete.
//!
//! Input rows may be inserts or deletes (from tables and other views): counts and sums
//! are decremented, and `min`/`max`/`count(DISTINCT)` keep a count per distinct value so
//! that retracting the current extreme finds the next one. Values are kept in arrow-row's
//! memcomparable form, converted a whole column at a time.
//!
//! Groups are cached in memory over the operator's internal state table ([`cache`]); a
//! group's stored form is in [`codec`].

mod cache;
mod codec;
mod exact;
mod general;
mod value_rows;

pub use general::{GeneralAgg, OrderKey};

use cache::GroupCache;
use codec::CLOSED_BELOW_KEY;
use value_rows::value_changed;

use super::filter::mask;
use super::project::Project;
use super::{Operator, WatermarkOutput};
use crate::error::{EddyError, Result};
use crate::state::OperatorState;
use crate::state::StateWrites;
use crate::stream::{Op, StreamChunk, Watermark};
use arrow::array::{Array, ArrayRef, AsArray, Float64Array, Int64Array, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float64Type, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion::common::HashMap;
use datafusion::common::ScalarValue;
use datafusion::physical_expr::PhysicalExpr;
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggKind {
    CountStar,
    Count,
    CountDistinct,
    Sum,
    /// `sum(DISTINCT x)`: the sum of the distinct values.
    SumDistinct,
    Min,
    Max,
    Avg,
    /// Any other aggregate, recomputed from each group's kept rows ([`general`]).
    General,
}

#[derive(Clone)]
pub struct AggCall {
    pub kind: AggKind,
    pub arg: Option<Arc<dyn PhysicalExpr>>,
    /// The argument's type (`Null` for `count(*)`).
    pub arg_type: DataType,
    /// The type DataFusion gives the result (`sum(int)` is `bigint`, `avg` is `double`).
    pub output_type: DataType,
    /// `FILTER (WHERE ...)`: only rows for which it is true reach the aggregate.
    pub filter: Option<Arc<dyn PhysicalExpr>>,
    /// For [`AggKind::General`]: what is kept and how the result is computed.
    pub general: Option<Arc<GeneralAgg>>,
}

/// What runs on the aggregate's result rows before they leave the operator.
#[derive(Clone)]
pub enum PostOp {
    Project(Project),
    Filter(Arc<dyn PhysicalExpr>),
}

/// Per-group state of one aggregate call, stored column-wise by group index.
enum AggState {
    Count(Vec<i64>),
    /// Exact sums (integers, durations, decimals as raw values at the input's scale) in
    /// i128, with the count of non-null inputs; see [`exact`].
    IntSum(Vec<i128>, Vec<i64>),
    FloatSum(Vec<f64>, Vec<i64>),
    /// Sums of intervals: months, days and nanoseconds apart, with the count of inputs.
    IntervalSum(Vec<[i128; 3]>, Vec<i64>),
    /// Per group, how many times each value (memcomparable) is present; the smallest or
    /// largest key is the result. `count(DISTINCT)` counts the keys.
    Values {
        counts: Vec<BTreeMap<Vec<u8>, i64>>,
        codec: RowConverter,
        /// The type values are kept in.
        value_type: DataType,
        take: Extreme,
    },
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Extreme {
    Min,
    Max,
    /// `count(DISTINCT)`: the number of distinct values.
    Distinct,
    /// `sum(DISTINCT)`: the sum of the distinct values (kept in the result's type).
    Sum,
    /// A general aggregate recomputed from the kept rows.
    Recompute,
}

/// Adds `sign` to a group's count of `value` (forgetting a value whose count reaches
/// zero); returns how the group's estimated size changed, in bytes.
fn add_count(group: &mut BTreeMap<Vec<u8>, i64>, value: &[u8], sign: i64) -> isize {
    let bytes = cache::value_bytes(value) as isize;
    match group.get_mut(value) {
        Some(c) => {
            *c += sign;
            if *c == 0 {
                group.remove(value);
                return -bytes;
            }
            0
        }
        None => {
            group.insert(value.to_vec(), sign);
            bytes
        }
    }
}

/// The signs of the rows, with 0 for those the call's `FILTER` rejects: they change
/// no state.
fn filtered_signs<'a>(
    call: &AggCall,
    batch: &RecordBatch,
    signs: &'a [i64],
) -> Result<std::borrow::Cow<'a, [i64]>> {
    Ok(match &call.filter {
        Some(predicate) => {
            let keep = mask(predicate, batch)?;
            signs
                .iter()
                .zip(keep.values().iter())
                .map(|(sign, kept)| if kept { *sign } else { 0 })
                .collect::<Vec<_>>()
                .into()
        }
        None => signs.into(),
    })
}

/// The state of a `sum` or `avg`: exact for integers, decimals and durations (as
/// DataFusion's batch aggregate is), per component for intervals, `f64` for floats and
/// for the average of integers (DataFusion averages those as floats too).
fn sum_state(call: &AggCall) -> Result<AggState> {
    let arg = &call.arg_type;
    Ok(match (call.kind, arg) {
        (_, DataType::Decimal256(..)) => {
            return Err(EddyError::not_supported(
                "sum/avg of numeric with more than 38 digits is not supported in a materialized view",
            ));
        }
        (AggKind::Sum | AggKind::Avg, DataType::Interval(_)) => {
            AggState::IntervalSum(vec![], vec![])
        }
        (AggKind::Sum, _) if exact::is_exact(arg) && !call.output_type.is_floating() => {
            AggState::IntSum(vec![], vec![])
        }
        (AggKind::Avg, DataType::Decimal128(..) | DataType::Duration(_)) => {
            AggState::IntSum(vec![], vec![])
        }
        _ => AggState::FloatSum(vec![], vec![]),
    })
}

pub struct HashAgg {
    /// No `GROUP BY`: one group, keyed by a constant, whose key columns are not output.
    global: bool,
    group_exprs: Vec<Arc<dyn PhysicalExpr>>,
    key_codec: RowConverter,
    calls: Vec<AggCall>,
    states: Vec<AggState>,
    /// Group index by encoded group key (looked up by borrowed bytes: no allocation per
    /// row for groups that exist).
    groups: HashMap<Box<[u8]>, usize>,
    /// Each group's encoded key.
    group_rows: Vec<Box<[u8]>>,
    /// Input rows per group (inserts minus deletes): a group with none has no row.
    row_counts: Vec<i64>,
    /// Whether the group's row is in the output (not filtered out by HAVING).
    visible: Vec<bool>,
    agg_schema: SchemaRef,
    post: Vec<PostOp>,
    /// Slots of forgotten groups, reused by new ones.
    free: Vec<usize>,
    group_types: Vec<DataType>,
    /// Group keys that are plain input columns, as (input column, key position): a
    /// watermark on the column is one on the key.
    watermark_keys: Vec<(usize, usize)>,
    window_close: Option<WindowClose>,
    /// Groups changed since the last barrier (a group may appear twice).
    dirty: Vec<usize>,
    /// Per group, the counted values (call, value) whose count changed since the last
    /// barrier: the value rows the barrier writes ([`value_rows`]).
    value_changes: Vec<Vec<value_rows::ValueChange>>,
    is_dirty: Vec<bool>,
    /// Keys of groups forgotten since the last barrier (closed windows).
    forgotten: Vec<Box<[u8]>>,
    /// State was loaded from a checkpoint: the global row is already in the output.
    restored: bool,
    /// The state table behind the groups in memory (set when the task starts).
    cache: Option<GroupCache>,
    /// Estimated bytes of each slot's group (0 for a free slot).
    sizes: Vec<usize>,
    /// Whether a group was used since the eviction clock last passed it.
    referenced: Vec<bool>,
    /// Estimated bytes of all groups in memory.
    resident_bytes: usize,
    /// The input only inserts: `min`/`max` keep just the extreme, not every value.
    append_only: bool,
    /// Groups changed in this epoch, in first-touched order, and per slot whether it is
    /// one of them. Their changes are emitted at the barrier: one change per group per
    /// epoch. (A pending group is dirty, so it is never evicted before then.)
    pending: Vec<usize>,
    is_pending: Vec<bool>,
    /// The row of `previous` each pending group showed at the epoch's start (groups
    /// that showed no row are not here).
    pending_previous: HashMap<usize, usize>,
    /// Rows the pending groups showed at the start of the epoch.
    previous: Vec<RecordBatch>,
    previous_rows: usize,
}

/// Groups by the value of a watermarked group key (a window). With `EMIT ON WINDOW CLOSE`
/// (`emit`), groups are held back until the watermark passes their window column, then
/// emitted once, final, and forgotten. Without it (an append-only input read straight
/// from sources, whose late rows the sources drop), groups are emitted as usual and
/// forgotten, state included, at the first barrier after the watermark passed them: no
/// row can change them any more, and their rows stay in the output.
struct WindowClose {
    emit: bool,
    /// Position of the window column among the group keys.
    key: usize,
    /// Encodes that column's values (memcomparable).
    codec: RowConverter,
    /// Keys of open groups by window value (the groups may be evicted from memory).
    open: BTreeMap<Vec<u8>, Vec<Box<[u8]>>>,
    /// Windows below this value are closed: rows for them are late and dropped.
    closed_below: Option<Vec<u8>>,
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
        let key_codec =
            RowConverter::new(group_types.iter().cloned().map(SortField::new).collect())?;
        let watermark_keys = if global {
            vec![]
        } else {
            group_exprs
                .iter()
                .enumerate()
                .filter_map(|(k, e)| {
                    e.downcast_ref::<datafusion::physical_expr::expressions::Column>()
                        .map(|c| (c.index(), k))
                })
                .collect()
        };
        let states = calls
            .iter()
            .map(|c| {
                let values = |take| -> Result<AggState> {
                    let arg_type = match &c.arg {
                        Some(_) if take == Extreme::Distinct => c.arg_type.clone(),
                        _ => c.output_type.clone(),
                    };
                    Ok(AggState::Values {
                        counts: vec![],
                        codec: RowConverter::new(vec![SortField::new(arg_type.clone())])?,
                        value_type: arg_type,
                        take,
                    })
                };
                Ok(match c.kind {
                    AggKind::CountStar | AggKind::Count => AggState::Count(vec![]),
                    AggKind::CountDistinct => values(Extreme::Distinct)?,
                    AggKind::SumDistinct => values(Extreme::Sum)?,
                    AggKind::Sum | AggKind::Avg => sum_state(c)?,
                    AggKind::Min => values(Extreme::Min)?,
                    AggKind::Max => values(Extreme::Max)?,
                    AggKind::General => {
                        let general = c.general.as_ref().ok_or_else(|| {
                            EddyError::internal("general aggregate without its definition")
                        })?;
                        AggState::Values {
                            counts: vec![],
                            codec: general.codec()?,
                            value_type: c.output_type.clone(),
                            take: Extreme::Recompute,
                        }
                    }
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            global,
            group_exprs,
            key_codec,
            calls,
            states,
            groups: HashMap::new(),
            group_rows: vec![],
            row_counts: vec![],
            visible: vec![],
            agg_schema,
            post,
            free: vec![],
            group_types,
            watermark_keys,
            window_close: None,
            dirty: vec![],
            value_changes: vec![],
            is_dirty: vec![],
            forgotten: vec![],
            restored: false,
            cache: None,
            sizes: vec![],
            referenced: vec![],
            resident_bytes: 0,
            append_only: false,
            pending: vec![],
            is_pending: vec![],
            pending_previous: HashMap::new(),
            previous: vec![],
            previous_rows: 0,
        })
    }

    /// The input is append-only (a connector source, no deletes ever): `min` and `max`
    /// keep only the current extreme per group.
    pub fn append_only_input(mut self, append_only: bool) -> Self {
        self.append_only = append_only;
        self
    }

    /// Emits each group only once its window (group key `key`) is closed by the watermark.
    pub fn emit_on_window_close(self, key: usize) -> Result<Self> {
        self.by_window(key, true)
    }

    /// Forgets the groups of windows (group key `key`) the watermark has passed, after
    /// their last change was emitted. Only for an input in which no row is ever behind
    /// the watermark (sources drop such rows).
    pub fn forget_closed_windows(self, key: usize) -> Result<Self> {
        self.by_window(key, false)
    }

    fn by_window(mut self, key: usize, emit: bool) -> Result<Self> {
        self.window_close = Some(WindowClose {
            emit,
            key,
            codec: RowConverter::new(vec![SortField::new(self.group_types[key].clone())])?,
            open: BTreeMap::new(),
            closed_below: None,
        });
        Ok(self)
    }

    /// A slot for a new group: a forgotten group's, reset, or a new one.
    fn new_group(&mut self, row: Box<[u8]>) -> usize {
        let bytes = self.slot_bytes(&row);
        if let Some(g) = self.free.pop() {
            self.group_rows[g] = row;
            self.referenced[g] = false;
            self.grow_group(g, bytes);
            self.row_counts[g] = 0;
            self.visible[g] = false;
            self.is_dirty[g] = false;
            self.is_pending[g] = false;
            self.value_changes[g].clear();
            for s in &mut self.states {
                match s {
                    AggState::Count(v) => v[g] = 0,
                    AggState::IntSum(v, n) => {
                        v[g] = 0;
                        n[g] = 0;
                    }
                    AggState::FloatSum(v, n) => {
                        v[g] = 0.0;
                        n[g] = 0;
                    }
                    AggState::IntervalSum(v, n) => {
                        v[g] = [0; 3];
                        n[g] = 0;
                    }
                    AggState::Values { counts, .. } => counts[g].clear(),
                }
            }
            return g;
        }
        self.group_rows.push(row);
        self.sizes.push(0);
        self.referenced.push(false);
        self.grow_group(self.group_rows.len() - 1, bytes);
        self.row_counts.push(0);
        self.visible.push(false);
        self.is_dirty.push(false);
        self.is_pending.push(false);
        self.value_changes.push(Vec::new());
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
                AggState::IntervalSum(v, n) => {
                    v.push([0; 3]);
                    n.push(0);
                }
                AggState::Values { counts, .. } => counts.push(BTreeMap::new()),
            }
        }
        self.group_rows.len() - 1
    }

    /// The group key columns of a batch.
    fn key_columns(&self, batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
        self.group_exprs
            .iter()
            .map(|e| crate::stream::expression_errors::evaluate(e, batch))
            .collect()
    }

    /// Group index of every row, creating groups as needed (and, with `EMIT ON WINDOW
    /// CLOSE`, registering new groups under their window).
    fn group_ids(&mut self, batch: &RecordBatch) -> Result<Vec<usize>> {
        let keys = self.key_columns(batch)?;
        let rows = self.key_codec.convert_columns(&keys)?;
        let windows = match &self.window_close {
            Some(w) => Some(w.codec.convert_columns(&[keys[w.key].clone()])?),
            None => None,
        };
        let mut ids = Vec::with_capacity(batch.num_rows());
        // Keys not in memory, each once, with the first row that has it.
        let mut missing: Vec<&[u8]> = Vec::new();
        let mut first_rows: Vec<usize> = Vec::new();
        let mut missing_index: HashMap<&[u8], usize> = HashMap::new();
        let mut missing_rows: Vec<(usize, usize)> = Vec::new();
        for (i, row) in rows.iter().enumerate() {
            match self.groups.get(row.as_ref()) {
                Some(&g) => {
                    self.referenced[g] = true;
                    ids.push(g);
                }
                None => {
                    let index = *missing_index.entry(row.data()).or_insert_with(|| {
                        missing.push(row.data());
                        first_rows.push(i);
                        missing.len() - 1
                    });
                    missing_rows.push((i, index));
                    ids.push(usize::MAX);
                }
            }
        }
        if missing.is_empty() {
            return Ok(ids);
        }
        let slots = self.load_groups(&missing)?;
        for (i, index) in missing_rows {
            ids[i] = slots[index].0;
        }
        // A group new to the store opens under its window.
        if let (Some(w), Some(windows)) = (&mut self.window_close, &windows) {
            for ((_, found), (key, row)) in slots.iter().zip(missing.iter().zip(first_rows)) {
                if !found {
                    w.open
                        .entry(windows.row(row).as_ref().to_vec())
                        .or_default()
                        .push((*key).into());
                }
            }
        }
        Ok(ids)
    }

    /// Grouped by window: the rows of a chunk whose window is still open (rows for a
    /// closed window are late).
    fn drop_late_rows(&self, chunk: StreamChunk) -> Result<StreamChunk> {
        let Some(w) = &self.window_close else {
            return Ok(chunk);
        };
        let Some(closed_below) = &w.closed_below else {
            return Ok(chunk);
        };
        let window =
            crate::stream::expression_errors::evaluate(&self.group_exprs[w.key], &chunk.batch)?;
        let rows = w.codec.convert_columns(&[window])?;
        let keep: arrow::array::BooleanArray = rows
            .iter()
            .map(|r| Some(r.as_ref() >= closed_below.as_slice()))
            .collect();
        if keep.true_count() == keep.len() {
            return Ok(chunk);
        }
        super::filter::filter_chunk(chunk, &keep)
    }

    /// Emits the final rows of closed groups (as inserts) and forgets the groups, also
    /// those with no rows left.
    fn close_groups(&mut self, keys: Vec<Box<[u8]>>) -> Result<Vec<StreamChunk>> {
        let mut all = Vec::with_capacity(keys.len());
        let mut evicted = Vec::new();
        for key in &keys {
            match self.groups.get(key) {
                Some(&g) => all.push(g),
                None => evicted.push(key.as_ref()),
            }
        }
        all.extend(self.load_groups(&evicted)?.into_iter().map(|(g, _)| g));
        let groups: Vec<usize> = all.iter().copied().filter(|g| self.exists(*g)).collect();
        let (batch, keep) = self.output_rows(&groups)?;
        let mut rows = Vec::new();
        let mut keys = Vec::new();
        for (i, g) in groups.iter().enumerate() {
            if keep[i] {
                rows.push(i as u32);
                keys.push(self.group_rows[*g].to_vec());
            }
        }
        for g in all {
            self.forgotten.push(self.group_rows[g].clone());
            self.release_slot(g);
        }
        let batch =
            arrow::compute::take_record_batch(&batch, &arrow::array::UInt32Array::from(rows))?;
        Ok(vec![StreamChunk {
            ops: vec![Op::Insert; keys.len()],
            batch,
            keys: Some(keys),
        }])
    }

    /// Adds (sign +1) or retracts (sign -1) every row into its group's state.
    fn update(&mut self, batch: &RecordBatch, ids: &[usize], signs: &[i64]) -> Result<()> {
        for (g, sign) in ids.iter().zip(signs) {
            self.row_counts[*g] += sign;
            self.mark_dirty(*g);
        }
        for (index, (call, state)) in self.calls.iter().zip(self.states.iter_mut()).enumerate() {
            if let (Some(general), AggState::Values { counts, codec, .. }) =
                (&call.general, &mut *state)
            {
                let signs = filtered_signs(call, batch, signs)?;
                let rows = codec.convert_columns(&general.kept_columns(batch)?)?;
                for (i, (g, sign)) in ids.iter().zip(signs.iter()).enumerate() {
                    if *sign == 0 {
                        continue;
                    }
                    let row = rows.row(i);
                    value_changed(&mut self.value_changes, *g, index, row.as_ref());
                    let delta = add_count(&mut counts[*g], row.as_ref(), *sign);
                    self.sizes[*g] = self.sizes[*g].wrapping_add_signed(delta);
                    self.resident_bytes = self.resident_bytes.wrapping_add_signed(delta);
                }
                continue;
            }
            let arg = match &call.arg {
                Some(e) => Some(crate::stream::expression_errors::evaluate(e, batch)?),
                None => None,
            };
            let signs = filtered_signs(call, batch, signs)?;
            let signs: &[i64] = &signs;
            match (state, arg) {
                (AggState::Count(counts), None) => {
                    for (g, sign) in ids.iter().zip(signs) {
                        counts[*g] += sign;
                    }
                }
                (AggState::Count(counts), Some(a)) => {
                    for (i, (g, sign)) in ids.iter().zip(signs).enumerate() {
                        if a.is_valid(i) {
                            counts[*g] += sign;
                        }
                    }
                }
                (AggState::IntSum(sums, n), Some(a)) => {
                    let a = exact::ExactColumn::of(&a)?;
                    for (i, (g, sign)) in ids.iter().zip(signs).enumerate() {
                        if let Some(v) = a.get(i) {
                            // A sum beyond 128 bits is beyond any numeric's 38 digits.
                            sums[*g] = sums[*g]
                                .checked_add(v * *sign as i128)
                                .ok_or_else(exact::numeric_overflow)?;
                            n[*g] += sign;
                        }
                    }
                }
                (AggState::IntervalSum(sums, n), Some(a)) => {
                    let a = exact::interval_column(&a)?;
                    for (i, (g, sign)) in ids.iter().zip(signs).enumerate() {
                        if a.is_valid(i) {
                            let v = a.value(i);
                            let sign = *sign as i128;
                            let sum = &mut sums[*g];
                            sum[0] += v.months as i128 * sign;
                            sum[1] += v.days as i128 * sign;
                            sum[2] += v.nanoseconds as i128 * sign;
                            n[*g] += sign as i64;
                        }
                    }
                }
                (AggState::FloatSum(sums, n), Some(a)) => {
                    let a = cast(&a, &DataType::Float64)?;
                    let a = a.as_primitive::<Float64Type>();
                    for (i, (g, sign)) in ids.iter().zip(signs).enumerate() {
                        // (NaN or infinity times a zero sign would still change the sum.)
                        if a.is_valid(i) && *sign != 0 {
                            sums[*g] += a.value(i) * *sign as f64;
                            n[*g] += sign;
                        }
                    }
                }
                (
                    AggState::Values {
                        counts,
                        codec,
                        value_type,
                        take,
                    },
                    Some(a),
                ) => {
                    let a = if *take == Extreme::Distinct {
                        a
                    } else {
                        // min/max keep values in the result's type.
                        cast(&a, value_type)?
                    };
                    let rows = codec.convert_columns(std::slice::from_ref(&a))?;
                    for (i, (g, sign)) in ids.iter().zip(signs).enumerate() {
                        if a.is_null(i) || *sign == 0 {
                            continue;
                        }
                        let value = rows.row(i);
                        let group = &mut counts[*g];
                        let bytes = cache::value_bytes(value.as_ref());
                        if self.append_only && matches!(*take, Extreme::Min | Extreme::Max) {
                            // Nothing is ever retracted: the extreme alone is the state.
                            let current = if *take == Extreme::Max {
                                group.keys().next_back()
                            } else {
                                group.keys().next()
                            };
                            let better = match current {
                                None => true,
                                Some(c) if *take == Extreme::Max => value.as_ref() > c.as_slice(),
                                Some(c) => value.as_ref() < c.as_slice(),
                            };
                            if better {
                                let freed: usize =
                                    group.keys().map(|k| cache::value_bytes(k)).sum();
                                for old in group.keys() {
                                    value_changed(&mut self.value_changes, *g, index, old);
                                }
                                value_changed(&mut self.value_changes, *g, index, value.as_ref());
                                group.clear();
                                group.insert(value.as_ref().to_vec(), 1);
                                self.sizes[*g] = self.sizes[*g] + bytes - freed;
                                self.resident_bytes = self.resident_bytes + bytes - freed;
                            }
                            continue;
                        }
                        value_changed(&mut self.value_changes, *g, index, value.as_ref());
                        let delta = add_count(group, value.as_ref(), *sign);
                        self.sizes[*g] = self.sizes[*g].wrapping_add_signed(delta);
                        self.resident_bytes = self.resident_bytes.wrapping_add_signed(delta);
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
            let parser = self.key_codec.parser();
            self.key_codec
                .convert_rows(groups.iter().map(|g| parser.parse(&self.group_rows[*g])))?
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
                AggState::IntSum(s, n) if call.kind == AggKind::Avg => exact::avg_array(
                    groups
                        .iter()
                        .map(|g| (n[*g] > 0).then_some((s[*g], n[*g])))
                        .collect(),
                    &call.arg_type,
                    field.data_type(),
                )?,
                AggState::IntSum(s, n) => exact::sum_array(
                    groups
                        .iter()
                        .map(|g| (n[*g] > 0).then_some(s[*g]))
                        .collect(),
                    field.data_type(),
                )?,
                AggState::IntervalSum(s, n) if call.kind == AggKind::Avg => {
                    Arc::new(arrow::array::IntervalMonthDayNanoArray::from_iter(
                        groups.iter().map(|g| {
                            (n[*g] > 0).then(|| crate::interval_math::average(s[*g], n[*g]))
                        }),
                    ))
                }
                AggState::IntervalSum(s, n) => exact::interval_array(
                    groups
                        .iter()
                        .map(|g| (n[*g] > 0).then_some(s[*g]))
                        .collect(),
                    field.data_type(),
                )?,
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
                AggState::Values {
                    counts,
                    take: Extreme::Distinct,
                    ..
                } => Arc::new(Int64Array::from_iter_values(
                    groups.iter().map(|g| counts[*g].len() as i64),
                )),
                AggState::Values {
                    counts,
                    codec,
                    take: Extreme::Recompute,
                    ..
                } => {
                    let general = call.general.as_ref().ok_or_else(|| {
                        EddyError::internal("general aggregate without its definition")
                    })?;
                    let results = groups
                        .iter()
                        .map(|g| general.evaluate(codec, &counts[*g]))
                        .collect::<Result<Vec<_>>>()?;
                    if results.is_empty() {
                        arrow::array::new_empty_array(field.data_type())
                    } else {
                        ScalarValue::iter_to_array(results)?
                    }
                }
                AggState::Values {
                    counts,
                    codec,
                    take: Extreme::Sum,
                    ..
                } => {
                    // Each group's distinct values decoded and added up (NULL for none).
                    let parser = codec.parser();
                    let mut sums = Vec::with_capacity(groups.len());
                    for g in groups {
                        let values = &counts[*g];
                        if values.is_empty() {
                            sums.push(ScalarValue::try_from(field.data_type())?);
                            continue;
                        }
                        let decoded = codec.convert_rows(values.keys().map(|v| parser.parse(v)))?;
                        let decoded = cast(&decoded[0], field.data_type())?;
                        let mut total = ScalarValue::try_from_array(&decoded, 0)?;
                        for i in 1..decoded.len() {
                            total = total.add(ScalarValue::try_from_array(&decoded, i)?)?;
                        }
                        sums.push(total);
                    }
                    if sums.is_empty() {
                        arrow::array::new_empty_array(field.data_type())
                    } else {
                        ScalarValue::iter_to_array(sums)?
                    }
                }
                AggState::Values {
                    counts,
                    codec,
                    value_type,
                    take,
                } => {
                    // Groups without values get NULL: decode a null of the type for them.
                    let null_row =
                        codec.convert_columns(&[arrow::array::new_null_array(value_type, 1)])?;
                    let parser = codec.parser();
                    let chosen: Vec<Vec<u8>> = groups
                        .iter()
                        .map(|g| {
                            let values = &counts[*g];
                            let v = if *take == Extreme::Max {
                                values.keys().next_back()
                            } else {
                                values.keys().next()
                            };
                            v.cloned()
                                .unwrap_or_else(|| null_row.row(0).as_ref().to_vec())
                        })
                        .collect();
                    let mut columns = codec.convert_rows(chosen.iter().map(|v| parser.parse(v)))?;
                    columns.remove(0)
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

impl HashAgg {
    /// Result rows of the given groups after the post operators, with whether each row
    /// passes `HAVING`.
    fn output_rows(&self, groups: &[usize]) -> Result<(RecordBatch, Vec<bool>)> {
        let mut batch = self.results(groups)?;
        let mut keep = vec![true; groups.len()];
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
        Ok((batch, keep))
    }

    /// Whether a group has a row: a global aggregate always has its one row.
    fn exists(&self, group: usize) -> bool {
        self.global || self.row_counts[group] > 0
    }
}

impl Operator for HashAgg {
    fn name(&self) -> &'static str {
        "HashAgg"
    }

    fn state_tables(&self) -> usize {
        1
    }

    /// Writes every changed group's state (deleting groups with no rows and forgotten
    /// windows) and, with `EMIT ON WINDOW CLOSE`, where windows are closed.
    fn checkpoint(&mut self, tables: &[OperatorState], batch: &mut StateWrites) -> Result<()> {
        let state = &tables[0];
        let keeps_values = self.keeps_values();
        for key in self.forgotten.drain(..) {
            state.put_keyed(batch, &key, None);
            if keeps_values {
                Self::delete_value_rows(&key, state, batch);
            }
        }
        let mut value = Vec::new();
        for g in std::mem::take(&mut self.dirty) {
            if !self.is_dirty[g] {
                continue;
            }
            self.is_dirty[g] = false;
            let key = &self.group_rows[g];
            if self.groups.get(key) != Some(&g) {
                continue; // forgotten after it changed
            }
            if self.exists(g) {
                self.encode_group(g, &mut value);
                state.put_keyed(batch, key, Some(&value));
                self.write_value_changes(g, state, batch);
            } else {
                state.put_keyed(batch, key, None);
                if keeps_values {
                    Self::delete_value_rows(key, state, batch);
                    self.value_changes[g].clear();
                }
            }
        }
        if let Some(closed_below) = self
            .window_close
            .as_ref()
            .and_then(|w| w.closed_below.as_ref())
        {
            state.put_unkeyed(batch, CLOSED_BELOW_KEY, closed_below);
        }
        // Every group is clean now (the task writes `batch` before its next input): the
        // best moment to evict.
        self.settle_cache();
        Ok(())
    }

    /// Connects the groups to the state table; they are read from it as their keys come.
    /// With `EMIT ON WINDOW CLOSE`, the open windows and their groups' keys are read now.
    fn restore(&mut self, tables: &[OperatorState]) -> Result<()> {
        let state = &tables[0];
        self.attach(state)?;
        let has_groups = self.cache.as_ref().is_some_and(|c| c.may_hold_more);
        let mut keys: Vec<Box<[u8]>> = Vec::new();
        if has_groups && self.window_close.is_some() {
            state.scan_owned(|k, _| {
                if !value_rows::is_value_row(k) {
                    keys.push(k.into());
                }
                Ok(())
            })?;
        }
        let mut closed_below: Option<Vec<u8>> = None;
        state.scan_unkeyed(|k, v| {
            if k == CLOSED_BELOW_KEY && closed_below.as_deref().is_none_or(|c| c < v) {
                closed_below = Some(v.to_vec());
            }
            Ok(())
        })?;
        self.restored = has_groups;
        if let Some(w) = &mut self.window_close {
            w.closed_below = closed_below;
            if !keys.is_empty() {
                let parser = self.key_codec.parser();
                let columns = self
                    .key_codec
                    .convert_rows(keys.iter().map(|k| parser.parse(k)))?;
                let windows = w.codec.convert_columns(&[columns[w.key].clone()])?;
                for (i, key) in keys.into_iter().enumerate() {
                    w.open
                        .entry(windows.row(i).as_ref().to_vec())
                        .or_default()
                        .push(key);
                }
            }
        }
        Ok(())
    }

    /// A watermark on a group key column: with `EMIT ON WINDOW CLOSE` on that key, the
    /// windows below it close; the key's output column gets the watermark.
    fn on_watermark(&mut self, watermark: Watermark) -> Result<WatermarkOutput> {
        let Some(&(_, key)) = self
            .watermark_keys
            .iter()
            .find(|(column, _)| *column == watermark.column)
        else {
            return Ok((vec![], vec![]));
        };
        let mut chunks = Vec::new();
        if let Some(w) = &mut self.window_close
            && w.key == key
        {
            let value = watermark.value.to_array_of_size(1)?;
            let value = cast(&value, &self.group_types[key])?;
            let bound = w.codec.convert_columns(&[value])?.row(0).as_ref().to_vec();
            if w.closed_below.as_ref().is_none_or(|c| *c < bound) {
                w.closed_below = Some(bound.clone());
            }
            // Without EMIT ON WINDOW CLOSE the passed windows are forgotten at the next
            // barrier, once their changes are out; with it they close now.
            if w.emit {
                let still_open = w.open.split_off(&bound);
                let closed = std::mem::replace(&mut w.open, still_open);
                chunks = self.close_groups(closed.into_values().flatten().collect())?;
                self.settle_cache();
            }
        }
        let mut watermarks = vec![Watermark {
            column: key,
            value: watermark.value,
        }];
        for op in &self.post {
            if let PostOp::Project(p) = op {
                let mut mapped = Vec::new();
                for w in &watermarks {
                    mapped.extend(p.map_watermark(w)?);
                }
                watermarks = mapped;
            }
        }
        Ok((chunks, watermarks))
    }

    /// End of input: with `EMIT ON WINDOW CLOSE`, every open window closes.
    fn finish(&mut self) -> Result<Vec<StreamChunk>> {
        match &mut self.window_close {
            Some(w) if w.emit => {
                let open = std::mem::take(&mut w.open);
                self.close_groups(open.into_values().flatten().collect())
            }
            _ => Ok(vec![]),
        }
    }

    /// A global aggregate has a row before any input (`count(*)` of nothing is 0).
    fn initial_output(&mut self) -> Result<Vec<StreamChunk>> {
        if !self.global || self.restored {
            return Ok(vec![]);
        }
        // The global group's key is a constant: evaluate it over one empty row.
        let one_row = RecordBatch::try_new_with_options(
            Arc::new(arrow::datatypes::Schema::empty()),
            vec![],
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(1)),
        )?;
        let ids = self.group_ids(&one_row)?;
        self.mark_dirty(ids[0]);
        let (no_rows, _) = self.output_rows(&[])?;
        self.emit_changes(&ids, &no_rows, &HashMap::new())
    }

    fn process(&mut self, chunk: StreamChunk) -> Result<Vec<StreamChunk>> {
        if self.window_close.as_ref().is_some_and(|w| w.emit) {
            let chunk = self.drop_late_rows(chunk)?;
            let ids = self.group_ids(&chunk.batch)?;
            let signs: Vec<i64> = chunk
                .ops
                .iter()
                .map(|o| if o.is_insert() { 1 } else { -1 })
                .collect();
            self.update(&chunk.batch, &ids, &signs)?;
            self.settle_cache();
            return Ok(vec![]);
        }
        // Rows for windows the watermark has passed (possible only from a source that
        // was idle while others moved the watermark) would find their groups forgotten:
        // they are late and dropped, as with EMIT ON WINDOW CLOSE.
        let chunk = self.drop_late_rows(chunk)?;
        let ids = self.group_ids(&chunk.batch)?;
        // Groups first changed in this epoch: remember the row they show now, to retract
        // it at the barrier.
        let mut first_touched: Vec<usize> = Vec::new();
        for &g in &ids {
            if !self.is_pending[g] {
                self.is_pending[g] = true;
                self.pending.push(g);
                if self.visible[g] {
                    first_touched.push(g);
                }
            }
        }
        if !first_touched.is_empty() {
            let (rows, _) = self.output_rows(&first_touched)?;
            for (i, g) in first_touched.iter().enumerate() {
                self.pending_previous.insert(*g, self.previous_rows + i);
            }
            self.previous_rows += first_touched.len();
            self.previous.push(rows);
        }
        let signs: Vec<i64> = chunk
            .ops
            .iter()
            .map(|o| if o.is_insert() { 1 } else { -1 })
            .collect();
        self.update(&chunk.batch, &ids, &signs)?;
        self.settle_cache();
        Ok(vec![])
    }

    /// A barrier: the change of every group changed in this epoch, from the row it
    /// showed at the epoch's start to the row it shows now.
    fn on_barrier(&mut self) -> Result<Vec<StreamChunk>> {
        let changes = self.emit_pending()?;
        self.forget_passed_windows();
        Ok(changes)
    }
}

impl HashAgg {
    /// The change of every group changed in this epoch.
    fn emit_pending(&mut self) -> Result<Vec<StreamChunk>> {
        if self.pending.is_empty() {
            return Ok(vec![]);
        }
        let groups = std::mem::take(&mut self.pending);
        for &g in &groups {
            self.is_pending[g] = false;
        }
        let previous = std::mem::take(&mut self.previous);
        self.previous_rows = 0;
        let old_rows = std::mem::take(&mut self.pending_previous);
        let old_batch = match previous.first() {
            Some(first) => arrow::compute::concat_batches(&first.schema(), &previous)?,
            None => self.output_rows(&[])?.0,
        };
        self.emit_changes(&groups, &old_batch, &old_rows)
    }

    /// Without `EMIT ON WINDOW CLOSE`: forgets the groups of windows the watermark has
    /// passed (in memory or evicted); the checkpoint deletes their state.
    fn forget_passed_windows(&mut self) {
        let Some(w) = &mut self.window_close else {
            return;
        };
        let Some(bound) = w.closed_below.as_ref().filter(|_| !w.emit) else {
            return;
        };
        let still_open = w.open.split_off(bound);
        let passed = std::mem::replace(&mut w.open, still_open);
        for key in passed.into_values().flatten() {
            if let Some(&g) = self.groups.get(&key) {
                self.release_slot(g);
            }
            self.forgotten.push(key);
        }
    }

    fn mark_dirty(&mut self, g: usize) {
        if !self.is_dirty[g] {
            self.is_dirty[g] = true;
            self.dirty.push(g);
        }
    }

    /// The change chunk of the given groups after an update: `old_batch` holds the rows
    /// the groups showed before (`old_rows`: group -> row of `old_batch`).
    fn emit_changes(
        &mut self,
        groups: &[usize],
        old_batch: &RecordBatch,
        old_rows: &HashMap<usize, usize>,
    ) -> Result<Vec<StreamChunk>> {
        const OLD: usize = 0;
        const NEW: usize = 1;
        let (new_batch, keep) = self.output_rows(groups)?;
        let updated: Vec<(usize, usize)> = groups
            .iter()
            .enumerate()
            .filter(|(i, g)| keep[*i] && self.exists(**g))
            .filter_map(|(i, g)| old_rows.get(g).map(|o| (*o, i)))
            .collect();
        let unchanged = unchanged_rows(old_batch, &new_batch, &updated);
        let mut ops = Vec::new();
        let mut keys = Vec::new();
        let mut rows: Vec<(usize, usize)> = Vec::new();
        for (i, g) in groups.iter().enumerate() {
            let now = keep[i] && self.exists(*g);
            let key = self.group_rows[*g].to_vec();
            match (old_rows.get(g), now) {
                // Changed back within the epoch: nothing to tell.
                (Some(_), true) if unchanged.contains(&i) => {}
                (Some(o), true) => {
                    ops.extend([Op::UpdateDelete, Op::UpdateInsert]);
                    keys.extend([key.clone(), key]);
                    rows.extend([(OLD, *o), (NEW, i)]);
                }
                (Some(o), false) => {
                    ops.push(Op::Delete);
                    keys.push(key);
                    rows.push((OLD, *o));
                }
                (None, true) => {
                    ops.push(Op::Insert);
                    keys.push(key);
                    rows.push((NEW, i));
                }
                (None, false) => {}
            }
            self.visible[*g] = now;
        }
        let columns = (0..new_batch.num_columns())
            .map(|c| {
                Ok(arrow::compute::interleave(
                    &[old_batch.column(c).as_ref(), new_batch.column(c).as_ref()],
                    &rows,
                )?)
            })
            .collect::<Result<Vec<_>>>()?;
        let batch = RecordBatch::try_new_with_options(
            new_batch.schema(),
            columns,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(rows.len())),
        )?;
        Ok(vec![StreamChunk {
            ops,
            batch,
            keys: Some(keys),
        }])
    }
}

/// Of the update pairs `(old row, new row)`, the new rows equal to their old ones
/// (columns compared as `IS NOT DISTINCT FROM`). Columns that cannot be compared count
/// as changed.
fn unchanged_rows(
    old_batch: &RecordBatch,
    new_batch: &RecordBatch,
    pairs: &[(usize, usize)],
) -> datafusion::common::HashSet<usize> {
    use arrow::array::{Array, UInt32Array};
    if pairs.is_empty() {
        return Default::default();
    }
    let old_indices = UInt32Array::from_iter_values(pairs.iter().map(|(o, _)| *o as u32));
    let new_indices = UInt32Array::from_iter_values(pairs.iter().map(|(_, n)| *n as u32));
    let mut same = vec![true; pairs.len()];
    for c in 0..new_batch.num_columns() {
        let compared = (|| -> std::result::Result<_, arrow::error::ArrowError> {
            let old = arrow::compute::take(old_batch.column(c), &old_indices, None)?;
            let new = arrow::compute::take(new_batch.column(c), &new_indices, None)?;
            arrow::compute::kernels::cmp::distinct(&old, &new)
        })();
        match compared {
            Ok(distinct) => {
                for (k, flag) in same.iter_mut().enumerate() {
                    *flag &= distinct.is_valid(k) && !distinct.value(k);
                }
            }
            Err(_) => return Default::default(),
        }
    }
    pairs
        .iter()
        .zip(same)
        .filter(|(_, same)| *same)
        .map(|((_, n), _)| *n)
        .collect()
}
