//! HashJoin through the operator harness: each kind of join against a nested-loop join
//! computed here over the same final inputs, with inserts, updates (join keys changing),
//! deletes, NULL keys, an extra condition, and a restart from a checkpoint.

use super::*;
use crate::stream::testing::{Harness, Materialized, chunk, rows_text};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Operator as BinaryOp;
use datafusion::physical_expr::expressions::{BinaryExpr, Column};
use std::collections::BTreeMap;

/// Left rows `(id, k, v)`, right rows `(id, k, w)`, joined on `k`.
fn schemas() -> [SchemaRef; 2] {
    let side = |v: &str| {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("k", DataType::Int64, true),
            Field::new(v, DataType::Utf8, true),
        ]))
    };
    [side("v"), side("w")]
}

fn spec(kind: JoinKind, keyed: bool, with_filter: bool) -> JoinSpec {
    let [left, right] = schemas();
    let nullable = |f: &Arc<Field>| Field::new(f.name(), f.data_type().clone(), true);
    let output = Arc::new(Schema::new(match kind.shown_alone() {
        Some((0, _)) => left.fields().iter().map(nullable).collect::<Vec<_>>(),
        Some(_) => right.fields().iter().map(nullable).collect(),
        None => left
            .fields()
            .iter()
            .chain(right.fields().iter())
            .map(nullable)
            .collect(),
    }));
    // The extra condition: left id < right id.
    let filter = with_filter.then(|| {
        Arc::new(BinaryExpr::new(
            Arc::new(Column::new("id", 0)),
            BinaryOp::Lt,
            Arc::new(Column::new("id", 3)),
        )) as Arc<dyn PhysicalExpr>
    });
    JoinSpec {
        kind,
        keys: [
            vec![Arc::new(Column::new("k", 1))],
            vec![Arc::new(Column::new("k", 1))],
        ],
        key_types: vec![DataType::Int64],
        inputs: [left, right],
        keyed_inputs: [keyed, keyed],
        filter,
        nulls_equal: false,
        temporal: false,
        cleanup: [None, None],
        output,
    }
}

fn harness(spec: JoinSpec) -> Harness {
    harness_with_cache(spec, 64 << 20)
}

fn harness_with_cache(spec: JoinSpec, cache_bytes: usize) -> Harness {
    Harness::with_cache_limit(cache_bytes, move || {
        Ok(vec![
            Box::new(HashJoin::new(spec.clone())?) as Box<dyn Operator>
        ])
    })
}

type Row = (i64, Option<i64>, String);

fn scalars(row: &Row) -> Vec<ScalarValue> {
    vec![
        ScalarValue::Int64(Some(row.0)),
        ScalarValue::Int64(row.1),
        ScalarValue::Utf8(Some(row.2.clone())),
    ]
}

/// A chunk of one side: rows with ops, keyed by id when `keyed`.
fn side_chunk(side: usize, keyed: bool, rows: &[(Op, Row)]) -> StreamChunk {
    let schema = &schemas()[side];
    let keys = keyed.then(|| {
        rows.iter()
            .map(|(_, r)| r.0.to_be_bytes().to_vec())
            .collect()
    });
    chunk(
        schema,
        rows.iter().map(|(op, r)| (*op, scalars(r))).collect(),
        keys,
    )
}

/// What the join of the two sides' current rows holds, as the harness prints rows.
fn nested_loop(
    kind: JoinKind,
    with_filter: bool,
    left: &BTreeMap<i64, Row>,
    right: &BTreeMap<i64, Row>,
) -> Vec<String> {
    let text = |r: Option<&Row>| match r {
        Some((id, k, v)) => format!(
            "{id}, {}, {v}",
            k.map_or("NULL".to_string(), |k| k.to_string())
        ),
        None => "NULL, NULL, NULL".to_string(),
    };
    let matches = |l: &Row, r: &Row| l.1.is_some() && l.1 == r.1 && (!with_filter || l.0 < r.0);
    let mut out = Vec::new();
    if let Some((shown, anti)) = kind.shown_alone() {
        let (rows, others) = if shown == 0 {
            (left, right)
        } else {
            (right, left)
        };
        for row in rows.values() {
            let any = others.values().any(|o| {
                if shown == 0 {
                    matches(row, o)
                } else {
                    matches(o, row)
                }
            });
            if any != anti {
                out.push(text(Some(row)));
            }
        }
        out.sort();
        return out;
    }
    for l in left.values() {
        let mut any = false;
        for r in right.values().filter(|r| matches(l, r)) {
            any = true;
            out.push(format!("{}, {}", text(Some(l)), text(Some(r))));
        }
        if !any && kind.keeps_unmatched(0) {
            out.push(format!("{}, {}", text(Some(l)), text(None)));
        }
    }
    if kind.keeps_unmatched(1) {
        for r in right.values() {
            if !left.values().any(|l| matches(l, r)) {
                out.push(format!("{}, {}", text(None), text(Some(r))));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn inner_join_of_append_only_inputs_emits_inserts_without_keys() {
    let mut h = harness(spec(JoinKind::Inner, false, false));
    let row = |id, k: Option<i64>, s: &str| (Op::Insert, (id, k, s.to_string()));
    let out = h.push(
        0,
        side_chunk(0, false, &[row(1, Some(7), "a"), row(2, None, "b")]),
    );
    assert!(out.is_empty());
    let out = h.push(
        1,
        side_chunk(1, false, &[row(10, Some(7), "x"), row(11, None, "y")]),
    );
    assert_eq!(rows_text(&out), vec!["+ 1, 7, a, 10, 7, x"]);
    assert!(out[0].keys.is_none());
    // The same left row again is a second, distinct row.
    let out = h.push(0, side_chunk(0, false, &[row(1, Some(7), "a")]));
    assert_eq!(rows_text(&out), vec!["+ 1, 7, a, 10, 7, x"]);
    // NULL keys are neither matched nor kept.
    h.barrier();
    assert_eq!(h.state_entries(), 3);
}

#[test]
fn left_join_retracts_the_padded_row_when_a_match_comes_and_restores_it_when_it_goes() {
    let mut h = harness(spec(JoinKind::Left, true, false));
    let l = (1, Some(5), "a".to_string());
    let r = (10, Some(5), "x".to_string());
    let out = h.push(0, side_chunk(0, true, &[(Op::Insert, l.clone())]));
    assert_eq!(rows_text(&out), vec!["+ 1, 5, a, NULL, NULL, NULL"]);
    let out = h.push(1, side_chunk(1, true, &[(Op::Insert, r.clone())]));
    assert_eq!(
        rows_text(&out),
        vec!["- 1, 5, a, NULL, NULL, NULL", "+ 1, 5, a, 10, 5, x"]
    );
    let out = h.push(1, side_chunk(1, true, &[(Op::Delete, r)]));
    assert_eq!(
        rows_text(&out),
        vec!["- 1, 5, a, 10, 5, x", "+ 1, 5, a, NULL, NULL, NULL"]
    );
    let out = h.push(0, side_chunk(0, true, &[(Op::Delete, l)]));
    assert_eq!(rows_text(&out), vec!["- 1, 5, a, NULL, NULL, NULL"]);
    h.barrier();
    assert_eq!(h.state_entries(), 0);
}

/// A scripted random workload on both keyed sides: inserts, deletes and updates that
/// change join keys (as delete + insert, or as an update pair), keys drawn from a small
/// range with NULLs; a checkpoint and restart in the middle. The materialized output
/// must equal the nested-loop join of the final rows.
fn random_workload(kind: JoinKind, with_filter: bool, seed: u64) {
    random_workload_with(kind, with_filter, seed, 64 << 20, 50);
}

/// Keys read back from RocksDB and keys evicted during a workload.
type CacheActivity = (u64, u64);

/// [`random_workload`] with a state cache of `cache_bytes` and a barrier every
/// `barrier_every` steps.
fn random_workload_with(
    kind: JoinKind,
    with_filter: bool,
    seed: u64,
    cache_bytes: usize,
    barrier_every: usize,
) -> CacheActivity {
    let mut h = harness_with_cache(spec(kind, true, with_filter), cache_bytes);
    let mut restarted = false;
    let mut view = Materialized::default();
    let mut sides: [BTreeMap<i64, Row>; 2] = [BTreeMap::new(), BTreeMap::new()];
    let mut state = seed;
    let mut next = move |n: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    for step in 0..400 {
        let side = next(2) as usize;
        let mut rows = Vec::new();
        for _ in 0..=next(4) {
            let id = next(30) as i64 + side as i64 * 100;
            let k = match next(6) {
                0 => None,
                k => Some(k as i64),
            };
            let row = (id, k, format!("s{step}"));
            match sides[side].get(&id).cloned() {
                None => {
                    rows.push((Op::Insert, row.clone()));
                    sides[side].insert(id, row);
                }
                Some(old) if next(3) == 0 => {
                    rows.push((Op::Delete, old));
                    sides[side].remove(&id);
                }
                Some(old) => {
                    rows.push((Op::UpdateDelete, old));
                    rows.push((Op::UpdateInsert, row.clone()));
                    sides[side].insert(id, row);
                }
            }
        }
        view.apply(&h.push(side, side_chunk(side, true, &rows)));
        if step % barrier_every == barrier_every - 1 {
            view.apply(&h.barrier());
            // Everything since the last barrier is lost with a crash; the harness
            // replays nothing, so restart (once, halfway) right after a barrier.
            if step >= 199 && !restarted {
                h.restart();
                restarted = true;
            }
        }
    }
    view.apply(&h.barrier());
    assert_eq!(
        view.rows(),
        nested_loop(kind, with_filter, &sides[0], &sides[1]),
        "{kind:?} join, filter {with_filter}, seed {seed}"
    );
    (h.cache_budget().loads(), h.cache_budget().evictions())
}

const ALL_KINDS: [JoinKind; 8] = [
    JoinKind::Inner,
    JoinKind::Left,
    JoinKind::Right,
    JoinKind::Full,
    JoinKind::LeftSemi,
    JoinKind::LeftAnti,
    JoinKind::RightSemi,
    JoinKind::RightAnti,
];

#[test]
fn every_join_kind_equals_a_nested_loop_join_under_updates_and_deletes() {
    for kind in ALL_KINDS {
        for seed in 1..4 {
            random_workload(kind, false, seed);
        }
    }
}

#[test]
fn join_state_evicted_at_every_barrier_is_read_back_exactly() {
    // A one-byte cache: after each barrier every key is evicted, and each chunk reads
    // its keys' rows (on both sides, degrees included) back from RocksDB.
    for kind in ALL_KINDS {
        random_workload_with(kind, false, 8, 1, 3);
        random_workload_with(kind, true, 7, 1, 5);
        random_workload_with(kind, false, 8, 1, 3);
    }
}

#[test]
fn an_extra_condition_decides_matches_and_degrees() {
    for kind in ALL_KINDS {
        random_workload(kind, true, 42);
    }
}

#[test]
fn state_is_written_at_barriers_and_dropped_with_its_rows() {
    let mut h = harness(spec(JoinKind::Full, true, false));
    let row = |id, k| (id, Some(k), "v".to_string());
    h.push(
        0,
        side_chunk(0, true, &[(Op::Insert, row(1, 1)), (Op::Insert, row(2, 1))]),
    );
    h.push(1, side_chunk(1, true, &[(Op::Insert, row(3, 1))]));
    assert_eq!(
        h.state_entries(),
        0,
        "nothing is written before the barrier"
    );
    h.barrier();
    assert_eq!(h.state_entries(), 3);
    h.push(
        0,
        side_chunk(0, true, &[(Op::Delete, row(1, 1)), (Op::Delete, row(2, 1))]),
    );
    h.push(1, side_chunk(1, true, &[(Op::Delete, row(3, 1))]));
    h.barrier();
    assert_eq!(h.state_entries(), 0);
}

#[test]
fn append_only_rows_keep_distinct_ids_across_a_restart() {
    let mut h = harness(spec(JoinKind::Left, false, false));
    let mut view = Materialized::default();
    let row = || (Op::Insert, (1, Some(1), "same".to_string()));
    view.apply(&h.push(0, side_chunk(0, false, &[row(), row()])));
    view.apply(&h.barrier());
    h.restart();
    view.apply(&h.push(0, side_chunk(0, false, &[row()])));
    // Three identical left rows, each padded, then each matched.
    assert_eq!(view.rows().len(), 3);
    view.apply(&h.push(
        1,
        side_chunk(1, false, &[(Op::Insert, (9, Some(1), "r".into()))]),
    ));
    assert_eq!(view.rows(), vec!["1, 1, same, 9, 1, r"; 3]);
}

#[test]
fn temporal_join_looks_up_the_table_and_never_retracts() {
    let mut spec = spec(JoinKind::Left, false, false);
    spec.temporal = true;
    spec.keyed_inputs = [false, true];
    assert!(!spec.output_keyed());
    let mut h = harness(spec);
    let stream = |id, k: i64, s: &str| (Op::Insert, (id, Some(k), s.to_string()));
    let table = |op, id, k: i64, s: &str| (op, (id, Some(k), s.to_string()));
    // Before the first barrier the table's rows may still be arriving: stream rows wait.
    assert!(
        h.push(0, side_chunk(0, false, &[stream(1, 5, "a")]))
            .is_empty()
    );
    assert!(
        h.push(1, side_chunk(1, true, &[table(Op::Insert, 10, 5, "x")]))
            .is_empty()
    );
    assert_eq!(rows_text(&h.barrier()), vec!["+ 1, 5, a, 10, 5, x"]);
    // A table change emits nothing; later stream rows see it.
    let update = [
        table(Op::UpdateDelete, 10, 5, "x"),
        table(Op::UpdateInsert, 10, 5, "y"),
    ];
    assert!(h.push(1, side_chunk(1, true, &update)).is_empty());
    let out = h.push(
        0,
        side_chunk(0, false, &[stream(2, 5, "b"), stream(3, 6, "c")]),
    );
    assert_eq!(
        rows_text(&out),
        vec!["+ 2, 5, b, 10, 5, y", "+ 3, 6, c, NULL, NULL, NULL"]
    );
    assert!(out[0].keys.is_none());
    // Only the table's rows are kept.
    h.barrier();
    assert_eq!(h.state_entries(), 1);
}

#[test]
fn temporal_join_with_an_updating_stream_retracts_what_it_joined() {
    let mut spec = spec(JoinKind::Left, false, false);
    spec.temporal = true;
    spec.keyed_inputs = [true, true];
    assert!(spec.output_keyed());
    let mut h = harness(spec);
    let mut view = Materialized::default();
    let row = |op, id, k: i64, s: &str| (op, (id, Some(k), s.to_string()));
    h.push(1, side_chunk(1, true, &[row(Op::Insert, 10, 5, "x")]));
    h.barrier();
    let out = h.push(0, side_chunk(0, true, &[row(Op::Insert, 1, 5, "a")]));
    assert_eq!(rows_text(&out), vec!["+ 1, 5, a, 10, 5, x"]);
    view.apply(&out);
    // The table row changes: nothing is emitted, and the stream row's delete retracts
    // the row it was joined with then, not the table's row of now.
    let update = [
        row(Op::UpdateDelete, 10, 5, "x"),
        row(Op::UpdateInsert, 10, 5, "y"),
    ];
    assert!(h.push(1, side_chunk(1, true, &update)).is_empty());
    let out = h.push(
        0,
        side_chunk(
            0,
            true,
            &[
                row(Op::UpdateDelete, 1, 5, "a"),
                row(Op::UpdateInsert, 1, 5, "b"),
            ],
        ),
    );
    assert_eq!(
        rows_text(&out),
        vec!["- 1, 5, a, 10, 5, x", "+ 1, 5, b, 10, 5, y"]
    );
    view.apply(&out);
    assert_eq!(view.rows(), vec!["1, 5, b, 10, 5, y"]);
    // Unmatched rows are NULL-padded and retracted alike, across a checkpoint.
    let out = h.push(0, side_chunk(0, true, &[row(Op::Insert, 2, 6, "c")]));
    view.apply(&out);
    h.barrier();
    h.restart();
    // After a restart stream rows wait for the first barrier (the table's rows first).
    assert!(
        h.push(0, side_chunk(0, true, &[row(Op::Delete, 2, 6, "c")]))
            .is_empty()
    );
    let out = h.barrier();
    assert_eq!(rows_text(&out), vec!["- 2, 6, c, NULL, NULL, NULL"]);
    view.apply(&out);
    assert_eq!(view.rows(), vec!["1, 5, b, 10, 5, y"]);
    // The restored state still retracts what was joined before the restart.
    let out = h.push(0, side_chunk(0, true, &[row(Op::Delete, 1, 5, "b")]));
    assert_eq!(rows_text(&out), vec!["- 1, 5, b, 10, 5, y"]);
    view.apply(&out);
    assert!(view.rows().is_empty());
    // A delete of a row never seen emits nothing.
    assert!(
        h.push(0, side_chunk(0, true, &[row(Op::Delete, 7, 5, "z")]))
            .is_empty()
    );
}

#[test]
fn rows_expire_when_the_other_sides_watermark_passes_their_bound() {
    use crate::stream::operators::hash_join::cleanup::StateCleanup;
    // Left rows match right rows whose id is at most the left id + 5.
    let mut spec = spec(JoinKind::Inner, false, false);
    let bound = Arc::new(BinaryExpr::new(
        Arc::new(Column::new("id", 0)),
        BinaryOp::Plus,
        Arc::new(datafusion::physical_expr::expressions::Literal::new(
            ScalarValue::Int64(Some(5)),
        )),
    ));
    spec.cleanup = [
        Some(StateCleanup {
            watermark_column: 0,
            bound,
            bound_type: DataType::Int64,
            describe: "right.id <= left.id + 5".into(),
        }),
        None,
    ];
    let mut h = harness(spec);
    let row = |id, k: i64| (Op::Insert, (id, Some(k), format!("r{id}")));
    h.push(0, side_chunk(0, false, &[row(1, 7), row(10, 7), row(3, 8)]));
    h.barrier();
    assert_eq!(h.state_entries(), 3);
    // Right ids below 7 will not come: left rows 1 (bound 6) goes, 3 (bound 8) stays.
    let watermark = |v| Watermark {
        column: 0,
        value: ScalarValue::Int64(Some(v)),
    };
    h.watermark(1, watermark(7));
    h.barrier();
    assert_eq!(h.state_entries(), 2);
    // A watermark of the left input, or of another right column, expires nothing.
    h.watermark(0, watermark(100));
    h.watermark(
        1,
        Watermark {
            column: 1,
            value: ScalarValue::Int64(Some(100)),
        },
    );
    h.barrier();
    assert_eq!(h.state_entries(), 2);
    // After a restart the restored rows still expire.
    h.restart();
    let out = h.push(1, side_chunk(1, false, &[row(8, 8)]));
    assert_eq!(rows_text(&out), vec!["+ 3, 8, r3, 8, 8, r8"]);
    h.watermark(1, watermark(9));
    h.barrier();
    // Left row 3 (bound 8) went; left row 10 and the right row stay.
    assert_eq!(h.state_entries(), 2);
}
