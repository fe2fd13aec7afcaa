//! Nexmark throughput: every query of `benches/nexmark/q*.sql` (the files the tests check
//! against DataFusion), each run as a blackhole sink over bounded Nexmark person, auction
//! and bid sources inside an in-process engine, at parallelism 1 and 2. Baselines in the
//! same run: the Nexmark generator alone (generate and discard), and the bid source
//! alone (a blackhole sink straight from it) at the same parallelism.
//!
//! `cargo bench --bench nexmark` (events per query: `EDDY_BENCH_EVENTS`, default 4000000;
//! arguments filter queries by name: `cargo bench --bench nexmark -- q5 q7`).
//! Prints one line per measurement; `docs/benchmarks.md` records the figures.

use eddy::config::Config;
use eddy::session::{Engine, Session};
use nexmark::EventGenerator;
use nexmark::config::NexmarkConfig;
use nexmark::event::EventType;
use std::time::{Duration, Instant, SystemTime};

const QUERY_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/nexmark");

/// The queries as (name, SQL), in query order.
fn queries() -> Vec<(String, String)> {
    let mut queries: Vec<(u32, String, String)> = std::fs::read_dir(QUERY_DIR)
        .expect("benches/nexmark")
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let name = path.file_stem()?.to_str()?.to_string();
            let number: u32 = name.strip_prefix('q')?.parse().ok()?;
            Some((number, name, std::fs::read_to_string(&path).ok()?))
        })
        .collect();
    queries.sort();
    queries.into_iter().map(|(_, n, q)| (n, q)).collect()
}

/// Each source's columns and its share of the events (Nexmark's 1 : 3 : 46 mix).
const SOURCES: &[(&str, &str, &str, u64)] = &[
    (
        "person",
        "Person",
        "id BIGINT, name VARCHAR, email_address VARCHAR, credit_card VARCHAR, city VARCHAR, \
         state VARCHAR, date_time TIMESTAMP, extra VARCHAR, \
         WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND",
        1,
    ),
    (
        "auction",
        "Auction",
        "id BIGINT, item_name VARCHAR, description VARCHAR, initial_bid BIGINT, reserve BIGINT, \
         date_time TIMESTAMP, expires TIMESTAMP, seller BIGINT, category BIGINT, extra VARCHAR, \
         WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND",
        3,
    ),
    (
        "bid",
        "Bid",
        "auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, \
         date_time TIMESTAMP, extra VARCHAR, p_time TIMESTAMPTZ AS PROCTIME(), \
         WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND",
        46,
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

/// Runs one query as a blackhole sink until its bounded sources end; events per second.
/// A query that also reads a table (q13's side input) never ends: it is timed until it
/// has read every row of its sources.
async fn query_throughput(
    session: &Session,
    engine: &Engine,
    name: &str,
    query: &str,
    events: u64,
    parallelism: usize,
) -> f64 {
    let mut setup = format!("SET streaming_parallelism = {parallelism};");
    for (source, table_type, columns, _) in SOURCES {
        setup.push_str(&format!(
            "CREATE SOURCE {source} ({columns}) WITH (
                 connector = 'nexmark', nexmark.table.type = '{table_type}',
                 nexmark.event.num = {events}, nexmark.split.num = {parallelism});"
        ));
    }
    setup.push_str(&format!(
        "CREATE SINK {name} AS {query} WITH (connector = 'blackhole');"
    ));
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
    let source_rows: u64 = SOURCES
        .iter()
        .filter(|(source, ..)| read.iter().any(|r| r == source))
        .map(|(_, _, _, share)| events * share / 50)
        .sum();
    let reads_table = read.iter().any(|r| r == "side_input");
    let job = engine
        .jobs
        .jobs()
        .into_iter()
        .find(|j| j.name == name)
        .expect("the sink's job exists");
    let mut ended = None;
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
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    if let Some(error) = job.error.lock().clone() {
        panic!("{name} failed: {error}");
    }
    let finished =
        ended.unwrap_or_else(|| job.finished.lock().expect("a finished job has an end time"));
    let seconds = finished
        .duration_since(job.started)
        .expect("ends after it starts")
        .as_secs_f64();
    run(
        session,
        &format!("DROP SINK {name}; DROP SOURCE person; DROP SOURCE auction; DROP SOURCE bid;"),
    )
    .await;
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
    let side_input =
        std::fs::read_to_string(format!("{QUERY_DIR}/side_input.sql")).expect("side_input.sql");
    run(&session, &side_input).await;

    println!("events per query: {events}");
    let generator = generator_alone(events);
    println!("{:<14} {:>11} {generator:>14.0} events/s", "generator", "-");
    let mut source_alone = [0.0; 3];
    for parallelism in [1, 2] {
        let rate = query_throughput(
            &session,
            &engine,
            "source_alone",
            "SELECT * FROM bid",
            events,
            parallelism,
        )
        .await;
        source_alone[parallelism] = rate;
        println!(
            "{:<14} {:>11} {rate:>14.0} events/s  ({:.2} x generator)",
            "bid source",
            format!("parallel {parallelism}"),
            rate / generator
        );
    }
    for (name, query) in queries() {
        if !filter.is_empty() && !filter.iter().any(|f| &name == f) {
            continue;
        }
        for parallelism in [1, 2] {
            let rate =
                query_throughput(&session, &engine, &name, &query, events, parallelism).await;
            println!(
                "{name:<14} {:>11} {rate:>14.0} events/s  ({:.2} x bid source, {:.2} x generator)",
                format!("parallel {parallelism}"),
                rate / source_alone[parallelism],
                rate / generator
            );
        }
    }
}
