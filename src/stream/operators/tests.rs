//! Unit tests of the single-input operators through the harness: ops, keys, update
//! pairs, watermarks, and the aggregate's one change per group per epoch.

use super::Operator;
use super::filter::Filter;
use super::hash_agg::{AggCall, AggKind, HashAgg};
use super::tag_keys::TagKeys;
use super::unnest::Unnest;
use crate::stream::testing::{Harness, Materialized, chunk, rows_text};
use crate::stream::{Op, StreamChunk, Watermark};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Operator as BinaryOp;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};
use std::sync::Arc;

fn kv_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, true),
    ]))
}

fn kv(op: Op, k: i64, v: Option<i64>) -> (Op, Vec<ScalarValue>) {
    (op, vec![ScalarValue::Int64(Some(k)), ScalarValue::Int64(v)])
}

fn key(k: i64) -> Vec<u8> {
    k.to_be_bytes().to_vec()
}

#[test]
fn filter_never_splits_an_update_pair() {
    // v > 10 (NULL counts as false).
    let predicate: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
        Arc::new(Column::new("v", 1)),
        BinaryOp::Gt,
        Arc::new(Literal::new(ScalarValue::Int64(Some(10)))),
    ));
    let mut h = Harness::new(move || Ok(vec![Box::new(Filter::new(predicate.clone())) as _]));
    let input = chunk(
        &kv_schema(),
        vec![
            kv(Op::UpdateDelete, 1, Some(20)),
            kv(Op::UpdateInsert, 1, Some(5)),
            kv(Op::UpdateDelete, 2, Some(1)),
            kv(Op::UpdateInsert, 2, Some(30)),
            kv(Op::UpdateDelete, 3, Some(40)),
            kv(Op::UpdateInsert, 3, Some(50)),
            kv(Op::Insert, 4, None),
        ],
        Some(vec![key(1), key(1), key(2), key(2), key(3), key(3), key(4)]),
    );
    let out = h.push(0, input);
    assert_eq!(
        rows_text(&out),
        vec!["- 1, 20", "+ 2, 30", "U- 3, 40", "U+ 3, 50"]
    );
    assert_eq!(out[0].keys, Some(vec![key(1), key(2), key(3), key(3)]));
    // A watermark passes unchanged.
    let w = Watermark {
        column: 1,
        value: ScalarValue::Int64(Some(3)),
    };
    assert_eq!(h.watermark(0, w.clone()).1, vec![w]);
}

#[test]
fn tag_keys_prefixes_every_key_with_its_input() {
    let mut h = Harness::new(|| Ok(vec![Box::new(TagKeys::new(2)) as _]));
    let out = h.push(
        0,
        chunk(
            &kv_schema(),
            vec![kv(Op::Insert, 1, Some(1))],
            Some(vec![key(7)]),
        ),
    );
    let mut expected = vec![0xFF, 0, 2];
    expected.extend(key(7));
    assert_eq!(out[0].keys, Some(vec![expected]));
    // Append-only rows stay without keys.
    let out = h.push(
        0,
        chunk(&kv_schema(), vec![kv(Op::Insert, 1, Some(1))], None),
    );
    assert!(out[0].keys.is_none());
}

#[test]
fn unnest_keys_each_element_and_turns_updates_into_deletes_and_inserts() {
    let list_type = DataType::List(Arc::new(Field::new("item", DataType::Int64, true)));
    let input = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("l", list_type.clone(), true),
    ]));
    let output = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("l", DataType::Int64, true),
    ]));
    let schema = output.clone();
    let mut h = Harness::new(move || {
        Ok(vec![
            Box::new(Unnest::new(1, vec![0, 1], schema.clone())) as _
        ])
    });
    let list = |values: &[i64]| {
        ScalarValue::List(ScalarValue::new_list_nullable(
            &values
                .iter()
                .map(|v| ScalarValue::Int64(Some(*v)))
                .collect::<Vec<_>>(),
            &DataType::Int64,
        ))
    };
    let rows = vec![
        (
            Op::UpdateDelete,
            vec![ScalarValue::Int64(Some(1)), list(&[10, 11])],
        ),
        (
            Op::UpdateInsert,
            vec![ScalarValue::Int64(Some(1)), list(&[12])],
        ),
    ];
    let out = h.push(0, chunk(&input, rows, Some(vec![key(1), key(1)])));
    assert_eq!(rows_text(&out), vec!["- 1, 10", "- 1, 11", "+ 1, 12"]);
    let position = |p: u32| [key(1), p.to_be_bytes().to_vec()].concat();
    assert_eq!(
        out[0].keys,
        Some(vec![position(0), position(1), position(0)])
    );
    // The key column keeps its watermark; other columns have none to keep.
    let w = |column| Watermark {
        column,
        value: ScalarValue::Int64(Some(5)),
    };
    assert_eq!(h.watermark(0, w(0)).1, vec![w(0)]);
}

/// `SELECT k, <calls> FROM t GROUP BY k` over the `(k, v)` input, its output columns
/// named `columns` (each a nullable or non-null bigint).
fn group_by_k(columns: &[(&str, bool)], calls: Vec<AggCall>) -> Harness {
    let mut fields = vec![Field::new("k", DataType::Int64, true)];
    fields.extend(
        columns
            .iter()
            .map(|(name, nullable)| Field::new(*name, DataType::Int64, *nullable)),
    );
    let output = Arc::new(Schema::new(fields));
    Harness::new(move || {
        let agg = HashAgg::new(
            vec![Arc::new(Column::new("k", 0))],
            vec![DataType::Int64],
            calls.clone(),
            output.clone(),
            vec![],
        )?;
        Ok(vec![Box::new(agg) as Box<dyn Operator>])
    })
}

/// An aggregate call of `kind` over `v`, or over no argument (`count(*)`).
fn call_on_v(kind: AggKind, over_v: bool) -> AggCall {
    AggCall {
        kind,
        arg: over_v.then(|| Arc::new(Column::new("v", 1)) as Arc<dyn PhysicalExpr>),
        arg_type: if over_v {
            DataType::Int64
        } else {
            DataType::Null
        },
        output_type: DataType::Int64,
        filter: None,
        general: None,
    }
}

/// `SELECT k, count(*), sum(v) FROM t GROUP BY k` over a keyed input.
fn count_sum() -> Harness {
    group_by_k(
        &[("count", false), ("sum", true)],
        vec![
            call_on_v(AggKind::CountStar, false),
            call_on_v(AggKind::Sum, true),
        ],
    )
}

#[test]
fn an_aggregate_emits_one_change_per_group_per_epoch() {
    let mut h = count_sum();
    let schema = kv_schema();
    for v in 1..=5 {
        let out = h.push(
            0,
            chunk(
                &schema,
                vec![kv(Op::Insert, 1, Some(v)), kv(Op::Insert, 2, Some(v))],
                None,
            ),
        );
        assert!(out.is_empty(), "nothing leaves before the barrier");
    }
    let mut out = rows_text(&h.barrier());
    out.sort();
    assert_eq!(out, vec!["+ 1, 5, 15", "+ 2, 5, 15"]);
    // The next epoch: an update pair per changed group, none for a group that changed
    // back, a delete for a group left empty.
    h.push(0, chunk(&schema, vec![kv(Op::Insert, 1, Some(100))], None));
    h.push(
        0,
        chunk(
            &schema,
            vec![kv(Op::Insert, 2, Some(7)), kv(Op::Delete, 2, Some(7))],
            None,
        ),
    );
    let out = h.barrier();
    assert_eq!(rows_text(&out), vec!["U- 1, 5, 15", "U+ 1, 6, 115"]);
}

#[test]
fn an_aggregate_resumes_from_its_checkpoint() {
    let mut h = count_sum();
    let mut view = Materialized::default();
    let schema = kv_schema();
    h.push(
        0,
        chunk(
            &schema,
            vec![kv(Op::Insert, 1, Some(1)), kv(Op::Insert, 1, Some(2))],
            None,
        ),
    );
    view.apply(&h.barrier());
    // Lost with the crash: never checkpointed.
    h.push(0, chunk(&schema, vec![kv(Op::Insert, 1, Some(1000))], None));
    h.restart();
    h.push(
        0,
        chunk(
            &schema,
            vec![kv(Op::Insert, 1, Some(3)), kv(Op::Delete, 1, Some(1))],
            None,
        ),
    );
    let out = h.barrier();
    assert_eq!(rows_text(&out), vec!["U- 1, 2, 3", "U+ 1, 2, 5"]);
}

/// OverWindow: `lag(v) OVER (PARTITION BY k ORDER BY v)` over keyed rows `(k, v)`.
mod over_window {
    use super::*;
    use crate::stream::operators::over_window::{OverWindow, OverWindowSpec};
    use arrow::row::SortField;
    use datafusion::functions_window::expr_fn::lag;
    use datafusion::logical_expr::ExprFunctionExt;
    use datafusion::logical_expr::execution_props::ExecutionProps;
    use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
    use datafusion::prelude::col;

    fn spec() -> OverWindowSpec {
        let input = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("v", DataType::Int64, true),
        ]));
        let df_schema = datafusion::common::DFSchema::try_from(input.as_ref().clone()).unwrap();
        let expr = lag(col("v"), Some(1), Some(ScalarValue::Int64(None)))
            .partition_by(vec![col("k")])
            .order_by(vec![col("v").sort(true, false)])
            .build()
            .unwrap();
        let function = datafusion::physical_planner::create_window_expr(
            &expr,
            &df_schema,
            &ExecutionProps::new(),
            &PhysicalPlanningContext::default(),
        )
        .unwrap();
        let output = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("v", DataType::Int64, true),
            Field::new("prev", DataType::Int64, true),
        ]));
        OverWindowSpec {
            partition: vec![Arc::new(Column::new("k", 0))],
            partition_types: vec![DataType::Int64],
            order: vec![Arc::new(Column::new("v", 1))],
            order_fields: vec![SortField::new(DataType::Int64)],
            functions: vec![function],
            input,
            output,
            watermarks: vec![],
            eowc: None,
        }
    }

    /// The same window emitting on window close, its rows final one row later (as a
    /// `ROWS ... 1 FOLLOWING` frame would be): `v` is the watermarked time.
    fn eowc_spec() -> OverWindowSpec {
        OverWindowSpec {
            eowc: Some(crate::stream::operators::over_window::EowcOrder {
                time_column: 1,
                following: 1,
            }),
            ..spec()
        }
    }

    fn inserts(rows_kv: &[(i64, i64)]) -> StreamChunk {
        let schema = spec().input;
        chunk(
            &schema,
            rows_kv
                .iter()
                .map(|(k, v)| {
                    (
                        Op::Insert,
                        vec![ScalarValue::Int64(Some(*k)), ScalarValue::Int64(Some(*v))],
                    )
                })
                .collect(),
            None,
        )
    }

    fn watermark_at(v: i64) -> Watermark {
        Watermark {
            column: 1,
            value: ScalarValue::Int64(Some(v)),
        }
    }

    #[test]
    fn on_window_close_rows_come_out_once_final_in_time_order_across_restarts() {
        let mut h = Harness::new(|| {
            Ok(vec![
                Box::new(OverWindow::new(eowc_spec())?) as Box<dyn Operator>
            ])
        });
        // Out of time order, and nothing is out before the watermark passes.
        h.push(0, inserts(&[(1, 30), (1, 10), (1, 20), (2, 5)]));
        assert!(h.barrier().is_empty());
        // Below 25: 10 and 20 of partition 1 and 5 of partition 2 are in; only 10 has
        // the one row after it that it waits for.
        let (out, forwarded) = h.watermark(0, watermark_at(25));
        assert!(out.is_empty() && forwarded.is_empty());
        assert_eq!(rows_text(&h.barrier()), vec!["+ 1, 10, NULL"]);
        // Held rows survive a restart; a row below the watermark is late and dropped.
        h.restart();
        h.push(0, inserts(&[(1, 15), (1, 40)]));
        h.watermark(0, watermark_at(35));
        assert_eq!(rows_text(&h.barrier()), vec!["+ 1, 20, 10"]);
        // At the end every row is final.
        let mut end = h.finish();
        end.sort_by_key(|c| c.num_rows());
        let mut shown = rows_text(&end);
        shown.sort();
        assert_eq!(shown, vec!["+ 1, 30, 20", "+ 1, 40, 30", "+ 2, 5, NULL"]);
    }

    fn rows(ops_rows: &[(Op, i64, i64)]) -> StreamChunk {
        let schema = spec().input;
        chunk(
            &schema,
            ops_rows
                .iter()
                .map(|(op, k, v)| {
                    (
                        *op,
                        vec![ScalarValue::Int64(Some(*k)), ScalarValue::Int64(Some(*v))],
                    )
                })
                .collect(),
            Some(
                ops_rows
                    .iter()
                    .map(|(_, _, v)| v.to_be_bytes().to_vec())
                    .collect(),
            ),
        )
    }

    #[test]
    fn a_row_inserted_between_two_updates_the_next_ones_lag_only() {
        let mut h =
            Harness::new(|| Ok(vec![Box::new(OverWindow::new(spec())?) as Box<dyn Operator>]));
        let mut view = Materialized::default();
        h.push(
            0,
            rows(&[(Op::Insert, 1, 10), (Op::Insert, 1, 30), (Op::Insert, 2, 5)]),
        );
        view.apply(&h.barrier());
        assert_eq!(view.rows(), vec!["1, 10, NULL", "1, 30, 10", "2, 5, NULL"]);
        h.restart();
        h.push(0, rows(&[(Op::Insert, 1, 20)]));
        let out = h.barrier();
        // Only 30's lag changed; 20 is new.
        assert_eq!(
            rows_text(&out),
            vec!["U- 1, 30, 10", "U+ 1, 30, 20", "+ 1, 20, 10"]
        );
        view.apply(&out);
        h.push(0, rows(&[(Op::Delete, 1, 10)]));
        view.apply(&h.barrier());
        assert_eq!(view.rows(), vec!["1, 20, NULL", "1, 30, 20", "2, 5, NULL"]);
    }
}

/// `SELECT k, max(v), count(DISTINCT v) FROM t GROUP BY k` over a keyed input.
fn max_distinct() -> Harness {
    group_by_k(
        &[("max", true), ("count", false)],
        vec![
            call_on_v(AggKind::Max, true),
            call_on_v(AggKind::CountDistinct, true),
        ],
    )
}

#[test]
fn max_writes_only_the_values_that_changed_and_reads_them_back() {
    let mut h = max_distinct();
    let schema = kv_schema();
    let values = 1..=1000;
    h.push(
        0,
        chunk(
            &schema,
            values.map(|v| kv(Op::Insert, 1, Some(v))).collect(),
            None,
        ),
    );
    assert_eq!(rows_text(&h.barrier()), vec!["+ 1, 1000, 1000"]);
    // The group's row and a row per value of each of the two calls.
    assert_eq!(h.state_entries(), 1 + 2 * 1000);
    // Retracting the largest value writes the group and that value's two rows, not the
    // group's other 999 values.
    h.push(0, chunk(&schema, vec![kv(Op::Delete, 1, Some(1000))], None));
    assert_eq!(
        rows_text(&h.barrier()),
        vec!["U- 1, 1000, 1000", "U+ 1, 999, 999"]
    );
    assert_eq!(h.last_writes, 3);
    assert_eq!(h.state_entries(), 1 + 2 * 999);
    // After a restart the values are read back from their rows.
    h.restart();
    h.push(0, chunk(&schema, vec![kv(Op::Delete, 1, Some(999))], None));
    assert_eq!(
        rows_text(&h.barrier()),
        vec!["U- 1, 999, 999", "U+ 1, 998, 998"]
    );
    // A group whose rows are all retracted leaves no state behind.
    h.push(
        0,
        chunk(
            &schema,
            (1..=998).map(|v| kv(Op::Delete, 1, Some(v))).collect(),
            None,
        ),
    );
    assert_eq!(rows_text(&h.barrier()), vec!["- 1, 998, 998"]);
    assert_eq!(h.state_entries(), 0);
}

#[test]
fn an_aggregate_reads_values_stored_inline_by_an_older_version() {
    use arrow::array::{ArrayRef, Int64Array};
    use arrow::row::{RowConverter, SortField};
    let codec = RowConverter::new(vec![SortField::new(DataType::Int64)]).unwrap();
    let encode = |values: Vec<i64>| -> Vec<Vec<u8>> {
        let column: ArrayRef = Arc::new(Int64Array::from(values));
        let rows = codec.convert_columns(&[column]).unwrap();
        rows.iter().map(|r| r.as_ref().to_vec()).collect()
    };
    // Group 1 with rows 1, 2, 3: row count, shown, then per call (max, count distinct)
    // the number of values and each value's length, bytes and count.
    let mut state = Vec::new();
    state.extend_from_slice(&3i64.to_le_bytes());
    state.push(1);
    for _call in 0..2 {
        state.extend_from_slice(&3u32.to_le_bytes());
        for value in encode(vec![1, 2, 3]) {
            state.extend_from_slice(&(value.len() as u32).to_le_bytes());
            state.extend_from_slice(&value);
            state.extend_from_slice(&1i64.to_le_bytes());
        }
    }
    let mut h = max_distinct();
    h.put_state(0, 0, &encode(vec![1])[0], &state);
    h.restart();
    h.push(
        0,
        chunk(&kv_schema(), vec![kv(Op::Delete, 1, Some(3))], None),
    );
    assert_eq!(rows_text(&h.barrier()), vec!["U- 1, 3, 3", "U+ 1, 2, 2"]);
    // Rewritten as value rows: the group and its two values in each call.
    assert_eq!(h.state_entries(), 1 + 2 * 2);
    h.restart();
    h.push(
        0,
        chunk(&kv_schema(), vec![kv(Op::Delete, 1, Some(2))], None),
    );
    assert_eq!(rows_text(&h.barrier()), vec!["U- 1, 2, 2", "U+ 1, 1, 1"]);
}

/// `EMIT ON WINDOW CLOSE` without an aggregate: rows held until the watermark of `v`
/// passes them, in time order, across a restart; routed by the whole row or by `k`.
#[test]
fn eowc_sort_holds_rows_until_the_watermark_in_either_routing() {
    use super::eowc_sort::EowcSort;
    for routed in [false, true] {
        let mut h = Harness::new(move || {
            let sort = EowcSort::new(1, kv_schema())?;
            let sort = if routed {
                sort.routed_by(vec![Arc::new(Column::new("k", 0))], vec![DataType::Int64])?
            } else {
                sort
            };
            Ok(vec![Box::new(sort) as Box<dyn Operator>])
        });
        let schema = kv_schema();
        let inserts = |rows: &[(i64, i64)]| {
            chunk(
                &schema,
                rows.iter()
                    .map(|(k, v)| kv(Op::Insert, *k, Some(*v)))
                    .collect(),
                None,
            )
        };
        let watermark = |v: i64| Watermark {
            column: 1,
            value: ScalarValue::Int64(Some(v)),
        };
        assert!(h.push(0, inserts(&[(1, 30), (2, 10), (1, 20)])).is_empty());
        h.barrier();
        assert_eq!(h.state_entries(), 3, "routed: {routed}");
        h.restart();
        let (out, forwarded) = h.watermark(0, watermark(25));
        assert_eq!(
            rows_text(&out),
            vec!["+ 2, 10", "+ 1, 20"],
            "routed: {routed}"
        );
        assert_eq!(forwarded.len(), 1);
        // Late rows are dropped; the rest wait for the end.
        h.push(0, inserts(&[(3, 5), (3, 40)]));
        h.barrier();
        assert_eq!(h.state_entries(), 2, "routed: {routed}");
        let mut end = rows_text(&h.finish());
        end.sort();
        assert_eq!(end, vec!["+ 1, 30", "+ 3, 40"], "routed: {routed}");
    }
}
