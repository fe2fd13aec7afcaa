//! TopN through the operator harness, against the ranking computed here over the same
//! final input: every rank kind, with and without the rank as a column, keyed inputs
//! with inserts, updates (partition and sort value changing) and deletes, append-only
//! inputs, ties, NULLs, ranges that start past the first rank, and restarts.

use super::*;
use crate::stream::testing::{Harness, Materialized, chunk};
use arrow::compute::SortOptions;
use arrow::datatypes::{Field, Schema};
use datafusion::common::ScalarValue;
use datafusion::physical_expr::expressions::Column;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;

/// Rows `(id, p, s)`: partitioned by `p`, ordered by `s` descending, NULLs last.
fn input() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("p", DataType::Int64, true),
        Field::new("s", DataType::Int64, true),
    ]))
}

const ORDER: SortOptions = SortOptions {
    descending: true,
    nulls_first: false,
};

fn spec(rank: RankKind, ranks: (u64, u64), rank_column: bool, keyed: bool) -> TopNSpec {
    let input = input();
    let mut fields: Vec<Field> = input.fields().iter().map(|f| (**f).clone()).collect();
    if rank_column {
        fields.push(Field::new("rank", DataType::UInt64, false));
    }
    TopNSpec {
        partition: vec![Arc::new(Column::new("p", 1))],
        partition_types: vec![DataType::Int64],
        order: vec![Arc::new(Column::new("s", 2))],
        order_fields: vec![SortField::new_with_options(DataType::Int64, ORDER)],
        rank,
        ranks,
        input,
        output: Arc::new(Schema::new(fields)),
        rank_column,
        keyed_input: keyed,
    }
}

type Row = (i64, Option<i64>, Option<i64>);

fn text(v: Option<i64>) -> String {
    v.map_or("NULL".into(), |v| v.to_string())
}

/// What the view holds: each partition's rows in order (ties by id), ranked, those in
/// range, as the harness prints rows.
fn expected(spec: &TopNSpec, rows: &BTreeMap<i64, Row>) -> Vec<String> {
    let mut partitions: BTreeMap<Option<i64>, Vec<&Row>> = BTreeMap::new();
    for row in rows.values() {
        partitions.entry(row.1).or_default().push(row);
    }
    let mut out = Vec::new();
    for rows in partitions.values_mut() {
        // Descending, NULLs last, then by id.
        rows.sort_by_key(|r| (r.2.is_none(), std::cmp::Reverse(r.2), r.0));
        let mut rank = 0;
        for (i, r) in rows.iter().enumerate() {
            let tie = i > 0 && rows[i - 1].2 == r.2;
            rank = match spec.rank {
                RankKind::RowNumber => i as u64 + 1,
                RankKind::Rank | RankKind::DenseRank if tie => rank,
                RankKind::Rank => i as u64 + 1,
                RankKind::DenseRank => rank + 1,
            };
            if rank >= spec.ranks.0 && rank <= spec.ranks.1 {
                let mut line = format!("{}, {}, {}", r.0, text(r.1), text(r.2));
                if spec.rank_column {
                    line.push_str(&format!(", {rank}"));
                }
                out.push(line);
            }
        }
    }
    out.sort();
    out
}

fn harness(spec: &TopNSpec) -> Harness {
    harness_with_cache(spec, 64 << 20)
}

/// A harness whose state caches share `cache_bytes`: a tiny limit evicts every
/// partition at every barrier.
fn harness_with_cache(spec: &TopNSpec, cache_bytes: usize) -> Harness {
    let spec = spec.clone();
    Harness::with_cache_limit(cache_bytes, move || {
        Ok(vec![Box::new(TopN::new(spec.clone())?) as Box<dyn Operator>])
    })
}

fn row_chunk(keyed: bool, rows: &[(Op, Row)]) -> StreamChunk {
    let keys = keyed.then(|| {
        rows.iter()
            .map(|(_, r)| r.0.to_be_bytes().to_vec())
            .collect()
    });
    let scalars = |r: &Row| {
        vec![
            ScalarValue::Int64(Some(r.0)),
            ScalarValue::Int64(r.1),
            ScalarValue::Int64(r.2),
        ]
    };
    chunk(
        &input(),
        rows.iter().map(|(op, r)| (*op, scalars(r))).collect(),
        keys,
    )
}

/// Random changes (only inserts when not keyed), barriers and restarts; after each
/// barrier the view equals the ranking of the rows so far.
fn check_against_ranking(spec: TopNSpec, seed: u64) {
    check_with(spec, seed, Workload::SMALL);
}

/// The shape of a random run: the cache shared by the state caches, how many changes
/// an epoch's chunk holds at most, and how many partitions and sort values there are.
#[derive(Clone, Copy)]
struct Workload {
    cache_bytes: usize,
    max_changes: usize,
    partitions: i64,
    values: i64,
}

impl Workload {
    const SMALL: Workload = Workload {
        cache_bytes: 64 << 20,
        max_changes: 12,
        partitions: 3,
        values: 6,
    };
    /// Partitions far longer than the rows memory keeps of them, evicted at every
    /// barrier: shown rows that are deleted are replaced by rows read back from state.
    const LONG_EVICTED: Workload = Workload {
        cache_bytes: 1,
        max_changes: 60,
        partitions: 2,
        values: 1000,
    };
}

fn check_with(spec: TopNSpec, seed: u64, load: Workload) {
    let keyed = spec.keyed_input;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut h = harness_with_cache(&spec, load.cache_bytes);
    let mut view = Materialized::default();
    let mut rows: BTreeMap<i64, Row> = BTreeMap::new();
    let mut next_id = 0;
    let value = |rng: &mut rand::rngs::StdRng, n: i64| {
        if rng.random_range(0..8) == 0 {
            None
        } else {
            Some(rng.random_range(0..n))
        }
    };
    for step in 0..60 {
        let mut changes = Vec::new();
        for _ in 0..rng.random_range(1..load.max_changes) {
            let choice = if keyed && !rows.is_empty() {
                rng.random_range(0..4)
            } else {
                0
            };
            if choice <= 1 {
                let row = (
                    next_id,
                    value(&mut rng, load.partitions),
                    value(&mut rng, load.values),
                );
                next_id += 1;
                rows.insert(row.0, row);
                changes.push((Op::Insert, row));
                continue;
            }
            let ids: Vec<i64> = rows.keys().copied().collect();
            let old = rows[&ids[rng.random_range(0..ids.len())]];
            if choice == 2 {
                rows.remove(&old.0);
                changes.push((Op::Delete, old));
            } else {
                let new = (
                    old.0,
                    value(&mut rng, load.partitions),
                    value(&mut rng, load.values),
                );
                rows.insert(new.0, new);
                changes.push((Op::UpdateDelete, old));
                changes.push((Op::UpdateInsert, new));
            }
        }
        view.apply(&h.push(0, row_chunk(keyed, &changes)));
        if step % 3 == 2 {
            view.apply(&h.barrier());
            assert_eq!(
                view.rows(),
                expected(&spec, &rows),
                "seed {seed} step {step}"
            );
        }
        // The harness replays nothing, so restart right after a barrier.
        if step % 21 == 20 {
            h.restart();
        }
    }
}

#[test]
fn every_rank_kind_matches_the_ranking_of_its_input() {
    for rank in [RankKind::RowNumber, RankKind::Rank, RankKind::DenseRank] {
        for keyed in [true, false] {
            for (ranks, rank_column) in [((1, 1), false), ((1, 3), true), ((2, 4), true)] {
                for seed in 0..4 {
                    check_against_ranking(spec(rank, ranks, rank_column, keyed), seed);
                }
            }
        }
    }
}

#[test]
fn a_deleted_winner_is_replaced_by_the_next_row() {
    let spec = spec(RankKind::RowNumber, (1, 1), false, true);
    let mut h = harness(&spec);
    let rows = [
        (1, Some(0), Some(10)),
        (2, Some(0), Some(20)),
        (3, Some(0), Some(5)),
    ];
    h.push(0, row_chunk(true, &rows.map(|r| (Op::Insert, r))));
    assert_eq!(
        crate::stream::testing::rows_text(&h.barrier()),
        vec!["+ 2, 0, 20"]
    );
    h.restart();
    h.push(0, row_chunk(true, &[(Op::Delete, rows[1])]));
    assert_eq!(
        crate::stream::testing::rows_text(&h.barrier()),
        vec!["- 2, 0, 20", "+ 1, 0, 10"]
    );
}

#[test]
fn append_only_partitions_keep_only_rows_that_can_be_shown() {
    let spec = spec(RankKind::RowNumber, (1, 2), false, false);
    let mut h = harness(&spec);
    let rows: Vec<(Op, Row)> = (0..50)
        .map(|i| (Op::Insert, (i, Some(i % 2), Some(i))))
        .collect();
    h.push(0, row_chunk(false, &rows));
    h.barrier();
    // Two rows per partition and each partition's sequence number.
    assert_eq!(h.state_entries(), 2 * 3);
}

#[test]
fn a_change_within_the_epoch_that_is_undone_emits_nothing() {
    let spec = spec(RankKind::RowNumber, (1, 2), true, true);
    let mut h = harness(&spec);
    let a = (1, Some(0), Some(10));
    h.push(0, row_chunk(true, &[(Op::Insert, a)]));
    h.barrier();
    let b = (2, Some(0), Some(50));
    h.push(0, row_chunk(true, &[(Op::Insert, b)]));
    h.push(0, row_chunk(true, &[(Op::Delete, b)]));
    assert!(h.barrier().is_empty());
}

#[test]
fn long_partitions_evicted_at_every_barrier_match_the_ranking() {
    for rank in [RankKind::RowNumber, RankKind::Rank, RankKind::DenseRank] {
        for (ranks, rank_column) in [((1, 1), false), ((2, 5), true)] {
            for seed in 0..3 {
                check_with(
                    spec(rank, ranks, rank_column, true),
                    seed,
                    Workload::LONG_EVICTED,
                );
            }
        }
    }
}

#[test]
fn deleted_winners_are_read_back_when_memory_holds_only_the_first_rows() {
    let spec = spec(RankKind::RowNumber, (1, 2), false, true);
    let mut h = harness(&spec);
    let rows: Vec<Row> = (0..300).map(|i| (i, Some(0), Some(i))).collect();
    let mut view = Materialized::default();
    view.apply(&h.push(
        0,
        row_chunk(
            true,
            &rows.iter().map(|r| (Op::Insert, *r)).collect::<Vec<_>>(),
        ),
    ));
    view.apply(&h.barrier());
    assert_eq!(view.rows(), vec!["298, 0, 298", "299, 0, 299"]);
    // Memory keeps 2 + 16 rows; deleting 50 winners an epoch reads the next ones back.
    let mut left: BTreeMap<i64, Row> = rows.iter().map(|r| (r.0, *r)).collect();
    for round in 0..5 {
        let gone: Vec<Row> = left.values().rev().take(50).copied().collect();
        for r in &gone {
            left.remove(&r.0);
        }
        let deletes: Vec<(Op, Row)> = gone.iter().map(|r| (Op::Delete, *r)).collect();
        view.apply(&h.push(0, row_chunk(true, &deletes)));
        view.apply(&h.barrier());
        assert_eq!(view.rows(), expected(&spec, &left), "round {round}");
        if round == 2 {
            h.restart();
        }
    }
    assert_eq!(view.rows(), vec!["48, 0, 48", "49, 0, 49"]);
    // After the restart the partition was read from state, not held from the start.
    assert!(h.cache_budget().loads() > 0);
}
