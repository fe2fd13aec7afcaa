//! Criterion micro-benchmarks of the streaming hot paths (issue #12): key-group routing
//! of a batch, the hash aggregate's update (append-only and with retractions), the state
//! cache under a small budget (RocksDB reads and evictions), the barrier's flush of changed
//! state, window assignment, the join probe, and row encoding for pgwire.
//!
//! Every input is bid-shaped, as in Nexmark: `auction` in 1000..1999, `bidder`, `price`
//! in 1..100 000, `date_time` advancing 1 ms per row. Operators run against a real
//! RocksDB store in a temporary directory, as they do in a job.
//!
//! ```sh
//! cargo bench --bench micro                 # all of them
//! cargo bench --bench micro -- hash_agg     # one group
//! ```

use arrow::array::{
    ArrayRef, Decimal128Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use datafusion::execution::FunctionRegistry;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::prelude::SessionContext;
use datafusion::scalar::ScalarValue;
use eddy::state::{OperatorState, StateStore, StateWrites};
use eddy::stream::dispatch::{Dispatcher, split};
use eddy::stream::graph::Exchange;
use eddy::stream::operators::Operator;
use eddy::stream::operators::hash_agg::{AggCall, AggKind, HashAgg};
use eddy::stream::operators::hash_join::{HashJoin, JoinKind, JoinSpec};
use eddy::stream::{Op, StreamChunk};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::hint::black_box;
use std::sync::Arc;

/// Rows per chunk: the size sources and exchanges make.
const ROWS: usize = 8192;

fn bid_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("auction", DataType::Int64, false),
        Field::new("bidder", DataType::Int64, false),
        Field::new("price", DataType::Int64, false),
        Field::new(
            "date_time",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            false,
        ),
    ]))
}

/// A chunk of bids whose auctions are drawn from `auctions` distinct ids.
fn bids(rng: &mut StdRng, first_row: i64, auctions: i64) -> RecordBatch {
    let auction: Int64Array = (0..ROWS)
        .map(|_| 1000 + rng.random_range(0..auctions))
        .collect();
    let bidder: Int64Array = (0..ROWS).map(|_| rng.random_range(1..1_000_000)).collect();
    let price: Int64Array = (0..ROWS).map(|_| rng.random_range(1..100_000)).collect();
    let time = TimestampMicrosecondArray::from_iter_values(
        (0..ROWS as i64).map(|i| 1_700_000_000_000_000 + (first_row + i) * 1000),
    );
    RecordBatch::try_new(
        bid_schema(),
        vec![
            Arc::new(auction),
            Arc::new(bidder),
            Arc::new(price),
            Arc::new(time),
        ],
    )
    .expect("bid batch")
}

fn column(name: &str, index: usize) -> Arc<dyn PhysicalExpr> {
    Arc::new(Column::new(name, index))
}

/// A temporary RocksDB state store whose operator caches share `cache_bytes`.
fn store(cache_bytes: usize) -> (tempfile::TempDir, Arc<StateStore>) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = Arc::new(StateStore::open(dir.path(), cache_bytes).expect("state store"));
    (dir, store)
}

/// `SELECT auction, count(*), max(price), sum(price) FROM bid GROUP BY auction`,
/// connected to its state table.
fn auction_agg(store: &Arc<StateStore>, append_only: bool) -> (HashAgg, OperatorState) {
    let call = |kind, arg: Option<Arc<dyn PhysicalExpr>>| AggCall {
        kind,
        arg_type: if arg.is_some() {
            DataType::Int64
        } else {
            DataType::Null
        },
        arg,
        output_type: DataType::Int64,
        filter: None,
        general: None,
    };
    let calls = vec![
        call(AggKind::CountStar, None),
        call(AggKind::Max, Some(column("price", 2))),
        call(AggKind::Sum, Some(column("price", 2))),
    ];
    let schema = Arc::new(Schema::new(vec![
        Field::new("auction", DataType::Int64, false),
        Field::new("count", DataType::Int64, false),
        Field::new("max", DataType::Int64, true),
        Field::new("sum", DataType::Int64, true),
    ]));
    let mut agg = HashAgg::new(
        vec![column("auction", 0)],
        vec![DataType::Int64],
        calls,
        schema,
        vec![],
    )
    .expect("aggregate")
    .append_only_input(append_only);
    let state = OperatorState::new(2, store.clone(), 0, 1);
    agg.restore(std::slice::from_ref(&state)).expect("attach");
    (agg, state)
}

/// The end of an epoch: the operator's held changes out, its state written to RocksDB.
fn barrier(op: &mut dyn Operator, state: &OperatorState, store: &StateStore) {
    black_box(op.on_barrier().expect("barrier"));
    let mut batch = StateWrites::default();
    op.checkpoint(std::slice::from_ref(state), &mut batch)
        .expect("checkpoint");
    store.write(batch.into_batch()).expect("state written");
}

fn routing(c: &mut Criterion) {
    let mut group = c.benchmark_group("routing");
    group.throughput(Throughput::Elements(ROWS as u64));
    let mut rng = StdRng::seed_from_u64(1);
    let chunk = StreamChunk::inserts(bids(&mut rng, 0, 1000));
    let exchange = Exchange::Hash {
        keys: vec![column("auction", 0)],
        key_types: vec![DataType::Int64],
        describe: "auction".into(),
    };
    for parallelism in [2, 8] {
        let senders = (0..parallelism)
            .map(|_| tokio::sync::mpsc::channel(1).0)
            .collect();
        let dispatcher = Dispatcher::new(&exchange, senders).expect("dispatcher");
        group.bench_function(format!("hash_by_auction_to_{parallelism}"), |b| {
            b.iter(|| {
                let targets = dispatcher.targets(&chunk).expect("targets");
                black_box(split(chunk.clone(), &targets, parallelism).expect("split"))
            })
        });
    }
    group.finish();
}

fn hash_agg(c: &mut Criterion) {
    let mut group = c.benchmark_group("hash_agg");
    let mut rng = StdRng::seed_from_u64(2);
    let chunks: Vec<RecordBatch> = (0..16)
        .map(|i| bids(&mut rng, i * ROWS as i64, 1000))
        .collect();

    group.throughput(Throughput::Elements(ROWS as u64));
    group.bench_function("count_max_sum_append_only", |b| {
        let (_dir, store) = store(256 << 20);
        let (mut agg, state) = auction_agg(&store, true);
        let mut next = 0;
        b.iter(|| {
            let out = agg
                .process(StreamChunk::inserts(chunks[next % chunks.len()].clone()))
                .expect("chunk");
            next += 1;
            barrier(&mut agg, &state, &store);
            black_box(out)
        })
    });

    // Every row goes in and comes out again: min/max keep every value's count so a
    // retracted maximum is replaced by the next one.
    group.throughput(Throughput::Elements(2 * ROWS as u64));
    group.bench_function("count_max_sum_insert_then_retract", |b| {
        let (_dir, store) = store(256 << 20);
        let (mut agg, state) = auction_agg(&store, false);
        let mut next = 0;
        b.iter(|| {
            let batch = chunks[next % chunks.len()].clone();
            next += 1;
            agg.process(StreamChunk::inserts(batch.clone()))
                .expect("inserts");
            let deletes = StreamChunk {
                ops: vec![Op::Delete; batch.num_rows()],
                batch,
                keys: None,
            };
            agg.process(deletes).expect("deletes");
            barrier(&mut agg, &state, &store);
        })
    });
    group.finish();
}

/// Many more groups than the cache holds: most keys are read back from RocksDB (one
/// `multi_get` per chunk) and clean groups are evicted at every barrier.
fn state_cache(c: &mut Criterion) {
    let mut group = c.benchmark_group("state_cache");
    group.throughput(Throughput::Elements(ROWS as u64));
    let groups = 200_000;
    let mut rng = StdRng::seed_from_u64(3);
    let chunks: Vec<RecordBatch> = (0..32)
        .map(|i| bids(&mut rng, i * ROWS as i64, groups))
        .collect();
    for (name, cache_bytes) in [("unbounded", 1usize << 30), ("budget_4mb", 4 << 20)] {
        group.bench_function(format!("200k_groups_{name}"), |b| {
            let (_dir, store) = store(cache_bytes);
            let (mut agg, state) = auction_agg(&store, true);
            // Every group exists in RocksDB before measuring.
            for batch in &chunks {
                agg.process(StreamChunk::inserts(batch.clone()))
                    .expect("chunk");
                barrier(&mut agg, &state, &store);
            }
            let mut next = 0;
            b.iter(|| {
                agg.process(StreamChunk::inserts(chunks[next % chunks.len()].clone()))
                    .expect("chunk");
                next += 1;
                barrier(&mut agg, &state, &store);
            })
        });
    }
    group.finish();
}

/// What a barrier costs: emitting each changed group's new row and writing its state.
fn barrier_flush(c: &mut Criterion) {
    let mut group = c.benchmark_group("barrier_flush");
    let groups = 10_000;
    group.throughput(Throughput::Elements(groups as u64));
    let mut rng = StdRng::seed_from_u64(4);
    let chunks: Vec<RecordBatch> = (0..8)
        .map(|i| bids(&mut rng, i * ROWS as i64, groups))
        .collect();
    group.bench_function("10k_changed_groups", |b| {
        let (_dir, store) = store(256 << 20);
        let (mut agg, state) = auction_agg(&store, true);
        b.iter_custom(|iterations| {
            let mut spent = std::time::Duration::ZERO;
            for _ in 0..iterations {
                for batch in &chunks {
                    agg.process(StreamChunk::inserts(batch.clone()))
                        .expect("chunk");
                }
                let start = std::time::Instant::now();
                barrier(&mut agg, &state, &store);
                spent += start.elapsed();
            }
            spent
        })
    });
    group.finish();
}

/// `HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)`: the five window
/// starts of every row (the list the window rewrite unnests).
fn window_assignment(c: &mut Criterion) {
    let mut group = c.benchmark_group("window_assignment");
    group.throughput(Throughput::Elements(ROWS as u64));
    let ctx = SessionContext::new();
    eddy::session::functions::register(&ctx);
    let hop = ctx
        .udf("hop_window_starts")
        .expect("hop_window_starts is registered");
    let mut rng = StdRng::seed_from_u64(5);
    let batch = bids(&mut rng, 0, 1000);
    let time = batch.column(3).clone();
    let interval = |seconds: i64| {
        ColumnarValue::Scalar(ScalarValue::new_interval_mdn(0, 0, seconds * 1_000_000_000))
    };
    let args = vec![
        ColumnarValue::Array(time.clone()),
        interval(2),
        interval(10),
    ];
    let arg_fields: Vec<_> = [time.data_type().clone(), interval_type(), interval_type()]
        .into_iter()
        .map(|t| Arc::new(Field::new("a", t, true)))
        .collect();
    let return_field = Arc::new(Field::new(
        "windows",
        hop.return_type(&[time.data_type().clone(), interval_type(), interval_type()])
            .expect("return type"),
        true,
    ));
    group.bench_function("hop_5_windows_per_row", |b| {
        b.iter(|| {
            black_box(
                hop.invoke_with_args(ScalarFunctionArgs {
                    args: args.clone(),
                    arg_fields: arg_fields.clone(),
                    number_rows: ROWS,
                    return_field: return_field.clone(),
                    config_options: Arc::default(),
                })
                .expect("windows"),
            )
        })
    });
    group.finish();
}

fn interval_type() -> DataType {
    DataType::Interval(arrow::datatypes::IntervalUnit::MonthDayNano)
}

/// `bid JOIN auction ON bid.auction = auction.id`: a chunk of bids probes the state of
/// 1000 auctions (and is kept in the bids' state, as an inner join of two streams does).
fn join_probe(c: &mut Criterion) {
    let mut group = c.benchmark_group("join_probe");
    group.throughput(Throughput::Elements(ROWS as u64));
    let auction_schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("seller", DataType::Int64, false),
        Field::new("category", DataType::Int64, false),
    ]));
    let auctions = RecordBatch::try_new(
        auction_schema.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(1000..2000)) as ArrayRef,
            Arc::new(Int64Array::from_iter_values((0..1000).map(|i| i % 97))),
            Arc::new(Int64Array::from_iter_values((0..1000).map(|i| i % 10))),
        ],
    )
    .expect("auctions");
    let output = Arc::new(Schema::new(
        bid_schema()
            .fields()
            .iter()
            .chain(auction_schema.fields().iter())
            .cloned()
            .collect::<Vec<_>>(),
    ));
    let spec = JoinSpec {
        kind: JoinKind::Inner,
        keys: [vec![column("auction", 0)], vec![column("id", 0)]],
        key_types: vec![DataType::Int64],
        inputs: [bid_schema(), auction_schema],
        keyed_inputs: [false, false],
        filter: None,
        nulls_equal: false,
        temporal: false,
        cleanup: [None, None],
        output,
    };
    let mut rng = StdRng::seed_from_u64(6);
    let probe = bids(&mut rng, 0, 1000);
    group.bench_function("8192_bids_against_1000_auctions", |b| {
        b.iter_batched(
            || {
                let mut join = HashJoin::new(spec.clone()).expect("join");
                join.process_input(1, StreamChunk::inserts(auctions.clone()))
                    .expect("auctions");
                join
            },
            |mut join| {
                let out = join
                    .process_input(0, StreamChunk::inserts(probe.clone()))
                    .expect("probe");
                (join, out)
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

/// A result batch as pgwire `DataRow`s in text format (what `SELECT` sends).
fn pgwire_encoding(c: &mut Criterion) {
    let mut group = c.benchmark_group("pgwire_encoding");
    group.throughput(Throughput::Elements(ROWS as u64));
    let mut rng = StdRng::seed_from_u64(7);
    let bids = bids(&mut rng, 0, 1000);
    let mut fields: Vec<Field> = bids
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new("amount", DataType::Decimal128(12, 2), true));
    fields.push(Field::new("channel", DataType::Utf8, true));
    let mut columns = bids.columns().to_vec();
    columns.push(Arc::new(
        Decimal128Array::from_iter_values((0..ROWS as i128).map(|i| i * 1234 + 5))
            .with_precision_and_scale(12, 2)
            .expect("decimal"),
    ));
    columns.push(Arc::new(StringArray::from_iter_values(
        (0..ROWS).map(|i| format!("channel-{}", i % 7)),
    )));
    let schema = Schema::new(fields);
    let batch = RecordBatch::try_new(Arc::new(schema.clone()), columns).expect("batch");
    let infos =
        eddy::server::encode::field_infos(&schema, &pgwire::api::portal::Format::UnifiedText);
    group.bench_function("bid_rows_with_decimal_and_text_as_text", |b| {
        b.iter(|| {
            black_box(
                eddy::server::encode::encode_rows(std::slice::from_ref(&batch), &infos)
                    .expect("rows"),
            )
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    routing,
    hash_agg,
    state_cache,
    barrier_flush,
    window_assignment,
    join_probe,
    pgwire_encoding
);
criterion_main!(benches);
