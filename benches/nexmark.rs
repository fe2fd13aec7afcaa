//! Nexmark throughput: every query of `benches/nexmark/q*.sql` (the files the tests check
//! against DataFusion), each run as a blackhole sink over bounded Nexmark person, auction
//! and bid sources inside an in-process engine, at parallelism 1 and 2. Baselines in the
//! same run: the Nexmark generator alone (generate and discard), the bid source alone (a
//! blackhole sink straight from it) at the same parallelism, and DataFusion computing the
//! same query once in batch over the same events in memory. Each run also records the
//! process's peak resident memory, the state's size and the checkpoints' durations.
//!
//! `cargo bench --bench nexmark` (events per query: `EDDY_BENCH_EVENTS`, default 4000000;
//! arguments filter queries by name: `cargo bench --bench nexmark -- q5 q7`). Prints one
//! line per measurement; with `EDDY_BENCH_REPORT=docs/benchmarks.md` it also rewrites that
//! file's generated section and draws the chart beside it (`scripts/bench.sh` does both).

use datafusion::prelude::SessionContext;
use eddy::config::Config;
use eddy::session::{Engine, Session};
use nexmark::EventGenerator;
use nexmark::config::NexmarkConfig;
use nexmark::event::EventType;
use std::time::{Duration, Instant, SystemTime};

#[path = "nexmark/report.rs"]
mod report;
#[path = "nexmark/shared.rs"]
mod shared;

use report::{Measurement, QueryResult};
use shared::{SOURCES, batch_context, batch_query, queries, side_input};

/// Events per second of the bare generator producing bids (every event kind counted, as
/// `nexmark.event.num` does), discarding them.
fn generator_alone(events: u64) -> f64 {
    let started = Instant::now();
    let mut generator =
        EventGenerator::new(NexmarkConfig::default()).with_type_filter(EventType::Bid);
    let mut bids = 0u64;
    while generator.global_offset() < events {
        match generator.next() {
            Some(e) => {
                std::hint::black_box(e);
                bids += 1;
            }
            None => break,
        }
    }
    std::hint::black_box(bids);
    events as f64 / started.elapsed().as_secs_f64()
}

async fn run(session: &Session, sql: &str) {
    for result in session.execute_sql(sql).await {
        if let Err(e) = result {
            panic!("{sql}: {}", e.message);
        }
    }
}

/// A source a measured query reads: its `CREATE SOURCE` and how many rows it makes.
struct Input {
    name: &'static str,
    create: String,
    rows: u64,
}

/// The three Nexmark sources, bounded to `events` events, one split per subtask.
fn nexmark_inputs(events: u64, parallelism: usize) -> Vec<Input> {
    SOURCES
        .iter()
        .map(|source| Input {
            name: source.name,
            create: source.create(events, parallelism),
            rows: source.rows(events),
        })
        .collect()
}

/// A `datagen` source named `bid` in the shape of the Flink comparison of issue #12:
/// `auction` uniform in 1000..1999, `bidder` in 1..1 000 000, `price` in 1..100 000,
/// `date_time` advancing 1 ms per row with a watermark 4 s behind, and `channel`, `url`,
/// `extra` random strings of 10, 20 and 10 characters.
fn datagen_bids(rows: u64, parallelism: usize) -> Vec<Input> {
    vec![Input {
        name: "bid",
        create: format!(
            "CREATE SOURCE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, \
             url VARCHAR, date_time TIMESTAMP, extra VARCHAR, \
             WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) WITH ( \
             connector = 'datagen', fields.auction.min = 1000, fields.auction.max = 1999, \
             fields.bidder.min = 1, fields.bidder.max = 1000000, fields.price.min = 1, \
             fields.price.max = 100000, fields.channel.length = 10, fields.url.length = 20, \
             fields.extra.length = 10, fields.date_time.kind = 'sequence', \
             fields.date_time.start = 0, fields.date_time.step = 0.001, \
             datagen.rows.per.second = 0, datagen.total.rows = {rows}, \
             datagen.split.num = {parallelism})"
        ),
        rows,
    }]
}

/// The jobs over [`datagen_bids`]: the source alone, then what Flink ran on the same
/// machine (issue #12): count and max per auction, a 10 s tumbling count per auction, q5.
fn datagen_jobs() -> Vec<(String, String)> {
    let q5 = queries()
        .into_iter()
        .find(|(name, _)| name == "q5")
        .map(|(_, sql)| sql)
        .expect("q5.sql");
    [
        ("datagen_source_alone", "SELECT * FROM bid".to_string()),
        (
            "datagen_count_max",
            "SELECT auction, count(*), max(price) FROM bid GROUP BY auction".to_string(),
        ),
        (
            "datagen_tumble_count",
            "SELECT auction, window_start, count(*) FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) \
             GROUP BY auction, window_start"
                .to_string(),
        ),
        ("datagen_q5", q5),
    ]
    .into_iter()
    .map(|(name, sql)| (name.to_string(), sql))
    .collect()
}

/// Runs one query as a blackhole sink until its bounded sources end, with what it cost
/// (`events` counts toward its rate). A query that also reads a table (q13's side
/// input) never ends: it is timed until it has read every row of its sources.
async fn query_throughput(
    session: &Session,
    engine: &Engine,
    name: &str,
    query: &str,
    inputs: &[Input],
    events: u64,
    parallelism: usize,
) -> Measurement {
    let mut setup = format!("SET streaming_parallelism = {parallelism};");
    for input in inputs {
        setup.push_str(&input.create);
        setup.push(';');
    }
    setup.push_str(&format!(
        "CREATE SINK {name} AS {query} WITH (connector = 'blackhole');"
    ));
    report::reset_peak_rss();
    run(session, &setup).await;
    // The rows of the sources the sink reads, and whether it also reads a table.
    let sink = engine.catalog.get(name).expect("the sink exists");
    let read: Vec<String> = engine
        .catalog
        .relations()
        .into_iter()
        .filter(|r| sink.depends_on.contains(&r.id))
        .map(|r| r.name)
        .collect();
    let source_rows: u64 = inputs
        .iter()
        .filter(|input| read.iter().any(|r| r == input.name))
        .map(|input| input.rows)
        .sum();
    let reads_table = read.iter().any(|r| r == "side_input");
    let job = engine
        .jobs
        .jobs()
        .into_iter()
        .find(|j| j.name == name)
        .expect("the sink's job exists");
    let mut ended = None;
    // The coordinator keeps only its recent checkpoints: collected while the job runs.
    let mut checkpoints = std::collections::BTreeMap::new();
    let mut polls = 0u64;
    // A bounded source ends at the barrier after its last row: once every row is read,
    // run that barrier at once instead of waiting for the checkpoint timer.
    while job.is_running() {
        if job.rows_read.load(std::sync::atomic::Ordering::Relaxed) >= source_rows {
            if reads_table {
                ended = Some(SystemTime::now());
                break;
            }
            engine.checkpoints.run_round().await;
        }
        polls += 1;
        if polls.is_multiple_of(100) {
            collect_checkpoints(engine, job.started, &mut checkpoints);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    if let Some(error) = job.error.lock().clone() {
        panic!("{name} failed: {error}");
    }
    collect_checkpoints(engine, job.started, &mut checkpoints);
    let peak_rss_bytes = report::peak_rss_bytes();
    let finished =
        ended.unwrap_or_else(|| job.finished.lock().expect("a finished job has an end time"));
    let seconds = finished
        .duration_since(job.started)
        .expect("ends after it starts")
        .as_secs_f64();
    let mut teardown = format!("DROP SINK {name};");
    for input in inputs {
        teardown.push_str(&format!("DROP SOURCE {};", input.name));
    }
    run(session, &teardown).await;
    let committed: Vec<_> = checkpoints
        .into_values()
        .filter(|c: &eddy::checkpoint::coordinator::CheckpointRecord| {
            c.error.is_none() && c.started <= finished
        })
        .collect();
    Measurement {
        parallelism,
        events_per_second: events as f64 / seconds,
        peak_rss_bytes,
        state_bytes: committed.iter().map(|c| c.state_bytes).max(),
        checkpoint_millis: committed
            .iter()
            .map(|c| c.duration.as_millis() as u64)
            .collect(),
    }
}

/// Adds the coordinator's recent checkpoints begun since `since` to `into`, by epoch.
fn collect_checkpoints(
    engine: &Engine,
    since: SystemTime,
    into: &mut std::collections::BTreeMap<u64, eddy::checkpoint::coordinator::CheckpointRecord>,
) {
    for record in engine.checkpoints.history() {
        if record.started >= since {
            into.insert(record.epoch, record);
        }
    }
}

/// Events per second of DataFusion computing the query once, in batch, over the same
/// events held in memory (`None` for a query DataFusion cannot run: q11's session
/// windows).
async fn batch_throughput(ctx: &SessionContext, query: &str, events: u64) -> Option<f64> {
    let started = Instant::now();
    let frame = ctx.sql(&batch_query(query)).await.ok()?;
    let rows = frame.collect().await.ok()?;
    std::hint::black_box(rows);
    Some(events as f64 / started.elapsed().as_secs_f64())
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; any other argument filters queries by name.
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let events: u64 = std::env::var("EDDY_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4_000_000);
    let report_path = std::env::var("EDDY_BENCH_REPORT").ok();
    let data = tempfile::tempdir().expect("temp dir");
    let mut config = Config::with_data_dir(data.path());
    config.workers = 2;
    let engine = Engine::open(config).expect("engine opens");
    let session = Session::new(engine.clone(), "root".into());
    run(&session, &side_input()).await;

    println!("events per query: {events}");
    let generator = generator_alone(events);
    println!("{:<14} {:>11} {generator:>14.0} events/s", "generator", "-");
    let mut source_alone = Vec::new();
    for parallelism in [1, 2] {
        let m = query_throughput(
            &session,
            &engine,
            "source_alone",
            "SELECT * FROM bid",
            &nexmark_inputs(events, parallelism),
            events,
            parallelism,
        )
        .await;
        println!(
            "{:<14} {:>11} {:>14.0} events/s  ({:.2} x generator)",
            "bid source",
            format!("parallel {parallelism}"),
            m.events_per_second,
            m.events_per_second / generator
        );
        source_alone.push(m);
    }
    // The batch side holds every event in memory once, for all queries.
    let batch = batch_context(events, 1, report::PROCESSING_TIME_MICROS).await;
    let mut results = Vec::new();
    for (name, query) in queries() {
        if !filter.is_empty() && !filter.iter().any(|f| &name == f) {
            continue;
        }
        let batch_rate = batch_throughput(&batch, &query, events).await;
        let mut result = QueryResult {
            name: name.clone(),
            batch_events_per_second: batch_rate,
            runs: Vec::new(),
        };
        for parallelism in [1, 2] {
            let inputs = nexmark_inputs(events, parallelism);
            let m = query_throughput(
                &session,
                &engine,
                &name,
                &query,
                &inputs,
                events,
                parallelism,
            )
            .await;
            println!(
                "{}",
                report::line(&name, &m, &source_alone[parallelism - 1], batch_rate)
            );
            result.runs.push(m);
        }
        results.push(result);
    }
    // The bid-shaped datagen jobs, each row an event (run unless queries were named).
    let mut datagen = Vec::new();
    for (name, query) in datagen_jobs().into_iter().filter(|_| filter.is_empty()) {
        let mut result = QueryResult {
            name: name.clone(),
            batch_events_per_second: None,
            runs: Vec::new(),
        };
        for parallelism in [1, 2] {
            let inputs = datagen_bids(events, parallelism);
            let m = query_throughput(
                &session,
                &engine,
                &name,
                &query,
                &inputs,
                events,
                parallelism,
            )
            .await;
            let alone = datagen
                .first()
                .map(|source: &QueryResult| &source.runs[parallelism - 1])
                .unwrap_or(&m);
            println!("{}", report::line(&name, &m, alone, None));
            result.runs.push(m);
        }
        datagen.push(result);
    }
    if let Some(path) = report_path {
        let run = report::Run {
            events,
            generator_events_per_second: generator,
            source_alone,
            queries: results,
            datagen,
        };
        report::write(&run, std::path::Path::new(&path)).expect("the report is written");
        println!("report written into {path}");
    }
}
