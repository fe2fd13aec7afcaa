//! Nexmark throughput: q0, q1, q2 and a tumbling-window count per auction, each run as a
//! blackhole sink over a bounded Nexmark bid source inside an in-process engine, at
//! parallelism 1 and 2, against the Nexmark generator alone (generate and discard) in the
//! same run.
//!
//! `cargo bench --bench nexmark` (events per query: `EDDY_BENCH_EVENTS`, default 4000000).
//! Prints one line per measurement; `docs/benchmarks.md` records the figures.

use eddy::config::Config;
use eddy::session::{Engine, Session};
use nexmark::EventGenerator;
use nexmark::config::NexmarkConfig;
use nexmark::event::EventType;
use std::time::{Duration, Instant};

const QUERIES: &[(&str, &str)] = &[
    ("q0", "SELECT auction, bidder, price, date_time FROM bid"),
    (
        "q1",
        "SELECT auction, bidder, 0.908 * price AS price, date_time FROM bid",
    ),
    (
        "q2",
        "SELECT auction, price FROM bid WHERE auction % 123 = 0",
    ),
    (
        "tumble_count",
        "SELECT auction, window_start, count(*) AS bids \
         FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) GROUP BY auction, window_start",
    ),
];

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

/// Runs one query as a blackhole sink until its bounded source ends; events per second.
async fn query_throughput(
    session: &Session,
    engine: &Engine,
    name: &str,
    query: &str,
    events: u64,
    parallelism: usize,
) -> f64 {
    run(
        session,
        &format!(
            "SET streaming_parallelism = {parallelism};
             CREATE SOURCE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR,
                 url VARCHAR, date_time TIMESTAMP, extra VARCHAR) WITH (
                 connector = 'nexmark', nexmark.table.type = 'Bid',
                 nexmark.event.num = {events}, nexmark.split.num = {parallelism});
             CREATE SINK {name} AS {query} WITH (connector = 'blackhole');"
        ),
    )
    .await;
    let job = engine
        .jobs
        .jobs()
        .into_iter()
        .find(|j| j.name == name)
        .expect("the sink's job exists");
    // A bounded source ends at the barrier after its last row: once every bid is read,
    // run that barrier at once instead of waiting for the checkpoint timer.
    let bids = events * 46 / 50;
    while job.is_running() {
        if job.rows_read.load(std::sync::atomic::Ordering::Relaxed) >= bids {
            engine.checkpoints.run_round().await;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    if let Some(error) = job.error.lock().clone() {
        panic!("{name} failed: {error}");
    }
    let finished = job.finished.lock().expect("a finished job has an end time");
    let seconds = finished
        .duration_since(job.started)
        .expect("ends after it starts")
        .as_secs_f64();
    run(session, &format!("DROP SINK {name}; DROP SOURCE bid;")).await;
    events as f64 / seconds
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
    let data = tempfile::tempdir().expect("temp dir");
    let mut config = Config::with_data_dir(data.path());
    config.workers = 2;
    let engine = Engine::open(config).expect("engine opens");
    let session = Session::new(engine.clone(), "root".into());

    println!("events per query: {events}");
    let baseline = generator_alone(events);
    println!(
        "{:<14} {:>11} {:>14.0} events/s",
        "generator", "-", baseline
    );
    for (name, query) in QUERIES {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        for parallelism in [1, 2] {
            let rate = query_throughput(&session, &engine, name, query, events, parallelism).await;
            println!(
                "{name:<14} {:>11} {rate:>14.0} events/s  ({:.2} x generator)",
                format!("parallel {parallelism}"),
                rate / baseline
            );
        }
    }
}
