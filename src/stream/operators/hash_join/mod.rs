//! HashJoin: an equi-join of two streams (inner, left, right or full outer), correct
//! when either side inserts, updates or deletes.
//!
//! Both inputs arrive hash-distributed on the join key, so every row of a key reaches
//! the same subtask. Each side keeps its rows by join key ([`side::SideState`]); a row
//! arriving on one side is joined with the other side's rows of its key (and the extra
//! condition, if any), stored on its own side, and the joined rows are emitted with its
//! op. A delete retracts the rows its insert produced. An outer join emits a side's row
//! NULL-padded while it matches nothing, retracts that row when its first match arrives
//! and emits it again when its last match goes — each stored row counts its matches
//! (its degree) for that.
//!
//! Updates are handled as a delete followed by an insert (the two halves may even arrive
//! at different subtasks when the join key changed). Output rows are keyed by the join
//! key and the two rows' ids, so a later delete replaces exactly the row it retracts; an
//! inner join of two append-only inputs emits append-only rows without keys.
//!
//! Watermarks do not pass: a stored row joined with a new one can carry any older time.
//! Keys with a NULL never match (SQL's `=`).

pub mod cleanup;
mod side;

use super::Operator;
use crate::error::{EddyError, Result};
use crate::state::OperatorState;
use crate::state::StateWrites;
use crate::stream::{Op, StreamChunk, Watermark};
use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, UInt32Array, new_null_array};
use arrow::compute::take;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{RowConverter, Rows, SortField};
use cleanup::{CleanupIndex, StateCleanup};
use datafusion::physical_expr::PhysicalExpr;
use side::{Bytes, Entry, SideState};
use std::sync::Arc;

/// Which rows without a match a join keeps (NULL-padded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinKind {
    Inner,
    Left,
    Right,
    Full,
    /// The left rows that have a match (`EXISTS`, `IN`), each once.
    LeftSemi,
    /// The left rows that have no match (`NOT EXISTS`).
    LeftAnti,
    RightSemi,
    RightAnti,
}

impl JoinKind {
    /// Whether rows of `side` (0 left, 1 right) without a match are emitted.
    pub fn keeps_unmatched(self, side: usize) -> bool {
        matches!(
            (self, side),
            (JoinKind::Left | JoinKind::Full | JoinKind::LeftAnti, 0)
                | (JoinKind::Right | JoinKind::Full | JoinKind::RightAnti, 1)
        )
    }

    /// For a semi or anti join: the side whose rows alone are emitted, and whether it is
    /// an anti join (rows emitted while they have no match).
    pub fn shown_alone(self) -> Option<(usize, bool)> {
        match self {
            JoinKind::LeftSemi => Some((0, false)),
            JoinKind::LeftAnti => Some((0, true)),
            JoinKind::RightSemi => Some((1, false)),
            JoinKind::RightAnti => Some((1, true)),
            _ => None,
        }
    }

    /// Whether the rows of `side` count their matches: they are shown or hidden by it.
    fn tracks_degree(self, side: usize) -> bool {
        self.keeps_unmatched(side) || self.shown_alone().is_some_and(|(s, _)| s == side)
    }

    pub fn sql_name(self) -> &'static str {
        match self {
            JoinKind::Inner => "inner",
            JoinKind::Left => "left outer",
            JoinKind::Right => "right outer",
            JoinKind::Full => "full outer",
            JoinKind::LeftSemi => "left semi",
            JoinKind::LeftAnti => "left anti",
            JoinKind::RightSemi => "right semi",
            JoinKind::RightAnti => "right anti",
        }
    }
}

/// What the planner decides about a join; each subtask builds its operator from it.
#[derive(Clone)]
pub struct JoinSpec {
    pub kind: JoinKind,
    /// Per side, the join key expressions over that side's columns (same types on both).
    pub keys: [Vec<Arc<dyn PhysicalExpr>>; 2],
    pub key_types: Vec<DataType>,
    /// Per side, its input's columns.
    pub inputs: [SchemaRef; 2],
    /// Per side, whether its rows carry stream keys (may be updated or deleted).
    pub keyed_inputs: [bool; 2],
    /// An extra condition over the joined row (left columns, then right ones).
    pub filter: Option<Arc<dyn PhysicalExpr>>,
    /// NULL keys match each other (`IS NOT DISTINCT FROM`), not SQL's `=`.
    pub nulls_equal: bool,
    /// A temporal (lookup) join: each left row is joined with the right side's rows of
    /// the moment; right-side changes update the lookup state and emit nothing (earlier
    /// output is never retracted). An append-only left input keeps no state; an updating
    /// one keeps, per row, the table rows it was joined with, so that its delete
    /// retracts exactly what its insert emitted.
    pub temporal: bool,
    /// Per side, how its rows expire as the other side's watermark passes (both inputs
    /// append-only).
    pub cleanup: [Option<StateCleanup>; 2],
    /// The output's columns: both sides' (one side's for a semi or anti join).
    pub output: SchemaRef,
}

impl JoinSpec {
    /// Whether the output rows carry keys: anything but an inner join of two append-only
    /// inputs can retract.
    pub fn output_keyed(&self) -> bool {
        if self.temporal {
            // Table changes retract nothing: only an updating stream side's deletes do.
            return self.keyed_inputs[0];
        }
        self.kind != JoinKind::Inner || self.keyed_inputs.iter().any(|k| *k)
    }
}

pub struct HashJoin {
    spec: JoinSpec,
    output_keyed: bool,
    /// Encodes join keys (none for a join without equal columns: one key for all rows).
    key_codec: Option<RowConverter>,
    /// Per side, encodes whole rows for the state.
    row_codecs: [RowConverter; 2],
    /// Both sides' columns, all nullable: for evaluating the extra condition.
    candidate_schema: SchemaRef,
    sides: [SideState; 2],
    /// A temporal join's stream rows that arrived before its first barrier, when the
    /// table's rows may not all be there yet.
    held_for_lookup: Vec<StreamChunk>,
    looked_up_since_start: bool,
    /// Per side with a state cleanup, its rows by bound.
    expiry: [Option<CleanupIndex>; 2],
}

impl HashJoin {
    pub fn new(spec: JoinSpec) -> Result<Self> {
        let key_codec = if spec.key_types.is_empty() {
            None
        } else {
            Some(RowConverter::new(
                spec.key_types.iter().cloned().map(SortField::new).collect(),
            )?)
        };
        let row_codec = |schema: &SchemaRef| {
            RowConverter::new(
                schema
                    .fields()
                    .iter()
                    .map(|f| SortField::new(f.data_type().clone()))
                    .collect(),
            )
        };
        let row_codecs = [row_codec(&spec.inputs[0])?, row_codec(&spec.inputs[1])?];
        let candidate_schema = Arc::new(Schema::new(
            spec.inputs[0]
                .fields()
                .iter()
                .chain(spec.inputs[1].fields().iter())
                .map(|f| Field::new(f.name(), f.data_type().clone(), true))
                .collect::<Vec<_>>(),
        ));
        let expiry = [
            spec.cleanup[0].clone().map(CleanupIndex::new).transpose()?,
            spec.cleanup[1].clone().map(CleanupIndex::new).transpose()?,
        ];
        Ok(Self {
            output_keyed: spec.output_keyed(),
            spec,
            key_codec,
            row_codecs,
            candidate_schema,
            sides: [SideState::default(), SideState::default()],
            held_for_lookup: Vec::new(),
            looked_up_since_start: false,
            expiry,
        })
    }

    /// Each row's encoded join key, and whether it has a NULL (never matches).
    fn join_keys(&self, side: usize, batch: &RecordBatch) -> Result<(Vec<Bytes>, Vec<bool>)> {
        let n = batch.num_rows();
        let Some(codec) = &self.key_codec else {
            return Ok((vec![Box::default(); n], vec![false; n]));
        };
        let columns = self.spec.keys[side]
            .iter()
            .map(|e| crate::stream::expression_errors::evaluate(e, batch))
            .collect::<Result<Vec<ArrayRef>>>()?;
        let mut has_null = vec![false; n];
        for column in columns.iter().filter(|_| !self.spec.nulls_equal) {
            if column.null_count() > 0 {
                for (row, flag) in has_null.iter_mut().enumerate() {
                    *flag |= column.is_null(row);
                }
            }
        }
        let rows = codec.convert_columns(&columns)?;
        Ok((rows.iter().map(|r| r.as_ref().into()).collect(), has_null))
    }

    /// With an extra condition: for each input row, whether it holds with each stored
    /// row of the other side under its key (in the side's order), all rows at once.
    fn candidate_matches(
        &self,
        side: usize,
        rows: &Rows,
        join_keys: &[Box<[u8]>],
        has_null: &[bool],
    ) -> Result<Option<Vec<bool>>> {
        let Some(filter) = &self.spec.filter else {
            return Ok(None);
        };
        let other = 1 - side;
        let mut mine = Vec::new();
        let mut theirs: Vec<&[u8]> = Vec::new();
        for (row, key) in join_keys.iter().enumerate() {
            if has_null[row] {
                continue;
            }
            if let Some(stored) = self.sides[other].rows_of(key) {
                for entry in stored.rows.values() {
                    mine.push(row as u32);
                    theirs.push(&entry.row);
                }
            }
        }
        if mine.is_empty() {
            return Ok(Some(vec![]));
        }
        let my_columns =
            self.row_codecs[side].convert_rows(mine.iter().map(|r| rows.row(*r as usize)))?;
        let parser = self.row_codecs[other].parser();
        let their_columns =
            self.row_codecs[other].convert_rows(theirs.iter().map(|r| parser.parse(r)))?;
        let columns = if side == 0 {
            [my_columns, their_columns].concat()
        } else {
            [their_columns, my_columns].concat()
        };
        let batch = RecordBatch::try_new(self.candidate_schema.clone(), columns)?;
        let result = crate::stream::expression_errors::evaluate(filter, &batch)?;
        let result = result
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| EddyError::internal("a join condition is not boolean"))?;
        Ok(Some(
            (0..result.len())
                .map(|i| result.is_valid(i) && result.value(i))
                .collect(),
        ))
    }

    /// A temporal join's table side: its changes update the rows looked up and emit
    /// nothing.
    fn update_lookup_rows(&mut self, chunk: StreamChunk) -> Result<Vec<StreamChunk>> {
        let (join_keys, has_null) = self.join_keys(1, &chunk.batch)?;
        self.sides[1].load(&join_keys)?;
        let rows = self.row_codecs[1].convert_columns(chunk.batch.columns())?;
        let table = &mut self.sides[1];
        for (row, join_key) in join_keys.iter().enumerate() {
            if has_null[row] {
                continue; // never looked up
            }
            let row_bytes = rows.row(row);
            let inserting = chunk.ops[row].is_insert();
            let id: Box<[u8]> = match &chunk.keys {
                Some(keys) => keys[row].as_slice().into(),
                None if inserting => table.next_id(join_key),
                None => match table.find_row(join_key, row_bytes.as_ref()) {
                    Some(id) => id,
                    None => continue,
                },
            };
            if inserting {
                let row = row_bytes.as_ref().into();
                table.insert(join_key, id, Entry { row, degree: 0 });
            } else {
                table.remove(join_key, &id);
            }
        }
        self.sides[1].report();
        Ok(vec![])
    }

    fn process_side(&mut self, side: usize, chunk: StreamChunk) -> Result<Vec<StreamChunk>> {
        if self.spec.temporal && side == 1 {
            return self.update_lookup_rows(chunk);
        }
        let other = 1 - side;
        let batch = &chunk.batch;
        let (join_keys, has_null) = self.join_keys(side, batch)?;
        // The rows of the chunk's keys, on both sides, read back where evicted.
        self.sides[side].load(&join_keys)?;
        self.sides[other].load(&join_keys)?;
        let rows = self.row_codecs[side].convert_columns(batch.columns())?;
        let matches = self.candidate_matches(side, &rows, &join_keys, &has_null)?;
        let mut verdicts = matches.as_deref().map(|m| m.iter());
        let keeps_mine = self.spec.kind.keeps_unmatched(side);
        let keeps_theirs = self.spec.kind.keeps_unmatched(other);
        let tracks_mine = self.spec.kind.tracks_degree(side);
        let mut out = Output::new(side, self.output_keyed, self.spec.kind.shown_alone());
        let bounds = match &self.expiry[side] {
            Some(index) => Some(index.bounds(batch)?),
            None => None,
        };
        let mut expiring = Vec::new();
        let [left, right] = &mut self.sides;
        let (mine, theirs) = if side == 0 {
            (left, right)
        } else {
            (right, left)
        };
        for (row, join_key) in join_keys.iter().enumerate() {
            let op = chunk.ops[row];
            let inserting = op.is_insert();
            if has_null[row] && !keeps_mine {
                continue; // never matches and is never shown
            }
            let row_bytes = rows.row(row);
            // The other side's rows this one joins with (in their stored order).
            let mut matched: Vec<Box<[u8]>> = Vec::new();
            if !has_null[row]
                && let Some(stored) = theirs.rows_of(join_key)
            {
                for their_id in stored.rows.keys() {
                    let holds = match &mut verdicts {
                        Some(v) => *v.next().expect("one verdict per candidate"),
                        None => true,
                    };
                    if holds {
                        matched.push(their_id.clone());
                    }
                }
            }
            let id: Box<[u8]> = match &chunk.keys {
                Some(keys) => keys[row].as_slice().into(),
                // A temporal join's stream rows are not kept: they need no id.
                None if self.spec.temporal && side == 0 => Box::default(),
                None if inserting => mine.next_id(join_key),
                None => match mine.find_row(join_key, row_bytes.as_ref()) {
                    Some(id) => id,
                    None => continue, // deleting a row never stored
                },
            };
            if self.spec.temporal && chunk.keys.is_some() {
                // An updating stream row of a temporal join: its insert records the table
                // rows it was joined with, its delete retracts those same rows.
                let joined: Vec<JoinedRow> = if inserting {
                    let rows = theirs.rows_of(join_key);
                    matched
                        .iter()
                        .map(|their_id| {
                            let stored = rows
                                .and_then(|r| r.rows.get(their_id))
                                .expect("matched rows are stored");
                            (their_id.clone(), stored.row.clone())
                        })
                        .collect()
                } else {
                    match mine.remove(join_key, &id) {
                        Some(entry) => decode_joined(&entry.row)?,
                        None => continue, // never held: nothing of it was emitted
                    }
                };
                let op = if inserting { Op::Insert } else { Op::Delete };
                for (their_id, their_row) in &joined {
                    let their_row = out.stored_row(their_row);
                    out.push(
                        op,
                        join_key,
                        Some((&id, row as u32)),
                        Some((their_id, their_row)),
                    );
                }
                if joined.is_empty() && keeps_mine {
                    out.push(op, join_key, Some((&id, row as u32)), None);
                }
                if inserting {
                    let row = encode_joined(&joined);
                    mine.insert(join_key, id, Entry { row, degree: 0 });
                }
                continue;
            }
            if !inserting && mine.remove(join_key, &id).is_none() {
                // A delete of a row this side never held: nothing of it was emitted.
                continue;
            }
            let op = if inserting { Op::Insert } else { Op::Delete };
            if let Some((shown, anti)) = self.spec.kind.shown_alone() {
                if side == shown {
                    // Shown while it has a match (semi) or while it has none (anti).
                    if matched.is_empty() == anti {
                        out.push(op, join_key, Some((&id, row as u32)), None);
                    }
                } else {
                    // A row of the hidden side changes whether its matches are shown.
                    for their_id in &matched {
                        let stored = theirs
                            .rows_of_mut(join_key)
                            .and_then(|r| r.rows.get_mut(their_id))
                            .expect("matched rows are stored");
                        let before = stored.degree;
                        stored.degree = if inserting {
                            before + 1
                        } else {
                            before.saturating_sub(1)
                        };
                        let (was, is) = ((before > 0) != anti, (stored.degree > 0) != anti);
                        if was != is {
                            let their_row = out.stored_row(&stored.row);
                            let op = if is { Op::Insert } else { Op::Delete };
                            out.push(op, join_key, None, Some((their_id, their_row)));
                        }
                        theirs.touch(join_key, their_id);
                    }
                }
                if inserting {
                    if let Some(Some(bound)) = bounds.as_ref().map(|b| &b[row]) {
                        expiring.push((bound.clone(), join_key.clone(), id.clone()));
                    }
                    let degree = if side == shown {
                        matched.len() as u64
                    } else {
                        0
                    };
                    let row = row_bytes.as_ref().into();
                    mine.insert(join_key, id, Entry { row, degree });
                }
                continue;
            }
            for their_id in &matched {
                let stored = theirs
                    .rows_of_mut(join_key)
                    .and_then(|r| r.rows.get_mut(their_id))
                    .expect("matched rows are stored");
                let their_row = out.stored_row(&stored.row);
                if keeps_theirs {
                    if inserting && stored.degree == 0 {
                        // Their row was shown unmatched: it is matched now.
                        out.push(Op::Delete, join_key, None, Some((their_id, their_row)));
                    }
                    if inserting {
                        stored.degree += 1;
                    } else {
                        stored.degree = stored.degree.saturating_sub(1);
                    }
                    let unmatched_again = !inserting && stored.degree == 0;
                    theirs.touch(join_key, their_id);
                    out.push(
                        if inserting { Op::Insert } else { Op::Delete },
                        join_key,
                        Some((&id, row as u32)),
                        Some((their_id, their_row)),
                    );
                    if unmatched_again {
                        out.push(Op::Insert, join_key, None, Some((their_id, their_row)));
                    }
                } else {
                    out.push(
                        if inserting { Op::Insert } else { Op::Delete },
                        join_key,
                        Some((&id, row as u32)),
                        Some((their_id, their_row)),
                    );
                }
            }
            if matched.is_empty() && keeps_mine {
                out.push(
                    if inserting { Op::Insert } else { Op::Delete },
                    join_key,
                    Some((&id, row as u32)),
                    None,
                );
            }
            if inserting && !(self.spec.temporal && side == 0) {
                if let Some(Some(bound)) = bounds.as_ref().map(|b| &b[row]) {
                    expiring.push((bound.clone(), join_key.clone(), id.clone()));
                }
                let degree = if tracks_mine { matched.len() as u64 } else { 0 };
                mine.insert(
                    join_key,
                    id,
                    Entry {
                        row: row_bytes.as_ref().into(),
                        degree,
                    },
                );
            }
        }
        if let Some(index) = &mut self.expiry[side] {
            for (bound, join_key, id) in expiring {
                index.add(bound, join_key, id);
            }
        }
        self.sides[side].report();
        out.finish(self, batch)
    }
}

/// The joined rows of one input chunk, gathered before their columns are built: the
/// input side's rows by index into the chunk, the other side's from stored rows.
struct Output {
    side: usize,
    keyed: bool,
    /// A semi or anti join: only this side's columns are output.
    shown_alone: Option<usize>,
    ops: Vec<Op>,
    keys: Vec<Vec<u8>>,
    /// Per output row, the input row (`None`: NULL-padded).
    mine: Vec<Option<u32>>,
    /// Per output row, an index into `stored` (`None`: NULL-padded).
    theirs: Vec<Option<u32>>,
    stored: Vec<Box<[u8]>>,
}

impl Output {
    fn new(side: usize, keyed: bool, shown_alone: Option<(usize, bool)>) -> Self {
        Self {
            side,
            keyed,
            shown_alone: shown_alone.map(|(s, _)| s),
            ops: vec![],
            keys: vec![],
            mine: vec![],
            theirs: vec![],
            stored: vec![],
        }
    }

    /// Adds a stored row of the other side; its index for [`Output::push`].
    fn stored_row(&mut self, row: &[u8]) -> u32 {
        self.stored.push(row.into());
        (self.stored.len() - 1) as u32
    }

    fn push(
        &mut self,
        op: Op,
        join_key: &[u8],
        mine: Option<(&[u8], u32)>,
        theirs: Option<(&[u8], u32)>,
    ) {
        self.ops.push(op);
        self.mine.push(mine.map(|(_, r)| r));
        self.theirs.push(theirs.map(|(_, r)| r));
        if self.keyed {
            let ids = [mine.map(|(id, _)| id), theirs.map(|(id, _)| id)];
            let (left, right) = if self.side == 0 {
                (ids[0], ids[1])
            } else {
                (ids[1], ids[0])
            };
            self.keys.push(output_key(join_key, left, right));
        }
    }

    fn finish(self, join: &HashJoin, batch: &RecordBatch) -> Result<Vec<StreamChunk>> {
        if self.ops.is_empty() {
            return Ok(vec![]);
        }
        let n = self.ops.len();
        let mine_indices = UInt32Array::from(self.mine);
        let my_columns = batch
            .columns()
            .iter()
            .map(|c| Ok(take(c, &mine_indices, None)?))
            .collect::<Result<Vec<ArrayRef>>>()?;
        let other = 1 - self.side;
        let their_schema = &join.spec.inputs[other];
        let their_columns = if self.stored.is_empty() {
            their_schema
                .fields()
                .iter()
                .map(|f| new_null_array(f.data_type(), n))
                .collect()
        } else {
            let parser = join.row_codecs[other].parser();
            let stored =
                join.row_codecs[other].convert_rows(self.stored.iter().map(|r| parser.parse(r)))?;
            let indices = UInt32Array::from(self.theirs);
            stored
                .iter()
                .map(|c| Ok(take(c, &indices, None)?))
                .collect::<Result<Vec<ArrayRef>>>()?
        };
        let columns = match self.shown_alone {
            Some(shown) if shown == self.side => my_columns,
            Some(_) => their_columns,
            None if self.side == 0 => [my_columns, their_columns].concat(),
            None => [their_columns, my_columns].concat(),
        };
        let batch = RecordBatch::try_new(join.spec.output.clone(), columns)?;
        Ok(vec![StreamChunk {
            ops: self.ops,
            batch,
            keys: self.keyed.then_some(self.keys),
        }])
    }
}

/// A table row a temporal join's stream row was joined with: its id and its encoded row.
type JoinedRow = (Box<[u8]>, Box<[u8]>);

/// The table rows an updating stream row of a temporal join was joined with, as its
/// state entry: `(id, row)` pairs, each part length-prefixed.
fn encode_joined(joined: &[JoinedRow]) -> Box<[u8]> {
    let mut bytes = Vec::new();
    for (id, row) in joined {
        for part in [id, row] {
            bytes.extend_from_slice(&(part.len() as u32).to_le_bytes());
            bytes.extend_from_slice(part);
        }
    }
    bytes.into()
}

fn decode_joined(mut bytes: &[u8]) -> Result<Vec<JoinedRow>> {
    let corrupt = || EddyError::internal("a temporal join's state entry is corrupt");
    let part = |bytes: &mut &[u8]| -> Result<Box<[u8]>> {
        let len = bytes
            .get(..4)
            .map(|l| u32::from_le_bytes(l.try_into().expect("4 bytes")) as usize)
            .ok_or_else(corrupt)?;
        let value = bytes.get(4..4 + len).ok_or_else(corrupt)?.into();
        *bytes = &bytes[4 + len..];
        Ok(value)
    };
    let mut joined = Vec::new();
    while !bytes.is_empty() {
        let id = part(&mut bytes)?;
        let row = part(&mut bytes)?;
        joined.push((id, row));
    }
    Ok(joined)
}

/// A joined row's stream key: its join key and the ids of its two rows (a missing side
/// of a NULL-padded row encodes as a single 0).
fn output_key(join_key: &[u8], left: Option<&[u8]>, right: Option<&[u8]>) -> Vec<u8> {
    let mut key = Vec::with_capacity(
        4 + join_key.len() + 10 + left.map_or(0, <[u8]>::len) + right.map_or(0, <[u8]>::len),
    );
    key.extend_from_slice(&(join_key.len() as u32).to_be_bytes());
    key.extend_from_slice(join_key);
    for id in [left, right] {
        match id {
            Some(id) => {
                key.push(1);
                key.extend_from_slice(&(id.len() as u32).to_be_bytes());
                key.extend_from_slice(id);
            }
            None => key.push(0),
        }
    }
    key
}

impl HashJoin {
    /// A temporal join's first barrier: the table's rows as of the job's start have all
    /// arrived (a change stream sends them before it passes on a barrier), so the stream
    /// rows held until now are looked up, and later ones at once.
    fn release_held_lookups(&mut self) -> Result<Vec<StreamChunk>> {
        self.looked_up_since_start = true;
        let mut out = Vec::new();
        for chunk in std::mem::take(&mut self.held_for_lookup) {
            out.extend(self.process_side(0, chunk)?);
        }
        Ok(out)
    }
}

impl Operator for HashJoin {
    fn name(&self) -> &'static str {
        "HashJoin"
    }

    fn input_count(&self) -> usize {
        2
    }

    fn process(&mut self, chunk: StreamChunk) -> Result<Vec<StreamChunk>> {
        self.process_side(0, chunk)
    }

    fn process_input(&mut self, input: usize, chunk: StreamChunk) -> Result<Vec<StreamChunk>> {
        match input {
            0 if self.spec.temporal && !self.looked_up_since_start => {
                self.held_for_lookup.push(chunk);
                Ok(vec![])
            }
            0 | 1 => self.process_side(input, chunk),
            _ => Err(EddyError::internal(format!("a join has no input {input}"))),
        }
    }

    /// A watermark of one input expires the other side's rows it bounds. Watermarks
    /// stop here: a stored row joined with a new one keeps its older time.
    fn on_input_watermark(
        &mut self,
        input: usize,
        watermark: Watermark,
    ) -> Result<super::WatermarkOutput> {
        let side = 1 - input.min(1);
        if let Some(index) = &mut self.expiry[side]
            && index.watermark_column() == watermark.column
        {
            for (join_key, id) in index.expired(&watermark.value)? {
                self.sides[side].remove(&join_key, &id);
            }
        }
        Ok((vec![], vec![]))
    }

    fn on_watermark(&mut self, watermark: Watermark) -> Result<super::WatermarkOutput> {
        self.on_input_watermark(0, watermark)
    }

    fn on_barrier(&mut self) -> Result<Vec<StreamChunk>> {
        self.release_held_lookups()
    }

    fn finish(&mut self) -> Result<Vec<StreamChunk>> {
        self.release_held_lookups()
    }

    /// One state table per side.
    fn state_tables(&self) -> usize {
        2
    }

    fn checkpoint(&mut self, tables: &[OperatorState], batch: &mut StateWrites) -> Result<()> {
        for (side, table) in self.sides.iter_mut().zip(tables) {
            side.checkpoint(table, batch);
        }
        Ok(())
    }

    fn restore(&mut self, tables: &[OperatorState]) -> Result<()> {
        for (index, (side, table)) in self.sides.iter_mut().zip(tables).enumerate() {
            // Rows that expire stay in memory, where the expiry index finds them.
            side.restore(table, self.expiry[index].is_none())?;
        }
        // The restored rows expire as they would have.
        for side in 0..2 {
            let Some(index) = &mut self.expiry[side] else {
                continue;
            };
            let entries = self.sides[side].entries();
            if entries.is_empty() {
                continue;
            }
            let parser = self.row_codecs[side].parser();
            let columns = self.row_codecs[side]
                .convert_rows(entries.iter().map(|(_, _, row)| parser.parse(row)))?;
            let batch = RecordBatch::try_new(self.spec.inputs[side].clone(), columns)?;
            for (bound, (join_key, id, _)) in index.bounds(&batch)?.into_iter().zip(entries) {
                if let Some(bound) = bound {
                    index.add(bound, join_key, id);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
