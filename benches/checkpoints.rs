//! What checkpoints cost (issue #4), measured against a real `eddy` server process:
//!
//! 1. Throughput of a Nexmark q5-style window aggregate (bids per auction in 10-second
//!    windows sliding by 2 seconds, into a materialized view) with checkpoints every 1 s
//!    against every 10 s, in the same run; with each, the checkpoints' duration, uploaded
//!    bytes and state size from `eddy_catalog.checkpoints`.
//! 2. Recovery: a view holding about `EDDY_BENCH_STATE_MB` (default 1024) MB of rows is
//!    checkpointed, the server SIGKILLed and restarted — once with its data dir (the
//!    checkpoint's local copy), once with the data dir deleted (from the state store
//!    alone) — timed until the server listens again with every view restored, and
//!    checked by counting the view's rows.
//! 3. The bounded state cache: a view with `EDDY_BENCH_GROUPS` (default 20000000)
//!    distinct groups with `--state-cache-mb 64`, against the same with a cache large
//!    enough for every group; throughput, the cache's peak and the server's peak resident
//!    memory.
//!
//! `cargo bench --bench checkpoints` (events for part 1: `EDDY_BENCH_EVENTS`, default
//! 10000000; `-- window`, `-- recovery` or `-- groups` runs one part).

#[allow(dead_code)]
#[path = "../tests/common/mod.rs"]
mod common;

use common::{TestServer, query_number as number, query_rows as rows};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Waits until the job `name` has read `expected` rows, runs a barrier (so a bounded
/// source ends now rather than at the next timed barrier) and waits until it finished.
/// Meanwhile records every committed checkpoint: epoch → (duration ms, uploaded bytes,
/// state bytes).
async fn run_to_end(
    client: &tokio_postgres::Client,
    name: &str,
    expected: u64,
    checkpoints: &mut BTreeMap<i64, (f64, f64, f64)>,
) {
    let mut flushed = false;
    loop {
        for c in rows(
            client,
            "SELECT epoch, duration_ms, uploaded_bytes, state_bytes FROM eddy_catalog.checkpoints WHERE committed",
        )
        .await
        {
            let n = |i: usize| c[i].parse::<f64>().unwrap();
            checkpoints.insert(c[0].parse().unwrap(), (n(1), n(2), n(3)));
        }
        let job = rows(
            client,
            &format!("SELECT state, rows_read, error FROM eddy_catalog.jobs WHERE name = '{name}'"),
        )
        .await;
        match job[0][0].as_str() {
            "finished" => return,
            "failed" => panic!("{name} failed: {}", job[0][2]),
            _ => {}
        }
        if !flushed && job[0][1].parse::<u64>().unwrap() >= expected {
            client.batch_execute("FLUSH").await.unwrap();
            flushed = true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0), |(s, n), v| (s + v, n + 1));
    if n == 0 { 0.0 } else { sum / n as f64 }
}

/// Part 1: the window aggregate with checkpoints every `interval_ms`. Returns events/s.
async fn window_throughput(events: u64, interval_ms: u64) -> f64 {
    let interval = interval_ms.to_string();
    let server = TestServer::start_with_args(&["--barrier-interval-ms", &interval]);
    let client = server.connect().await;
    let started = Instant::now();
    client
        .batch_execute(&format!(
            "SET streaming_parallelism = 2;
             CREATE SOURCE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR,
                 date_time TIMESTAMP) WITH (
                 connector = 'nexmark', nexmark.table.type = 'Bid',
                 nexmark.event.num = {events}, nexmark.split.num = 2);
             CREATE MATERIALIZED VIEW hot_auctions AS
                 SELECT auction, window_start, count(*) AS bids
                 FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
                 GROUP BY auction, window_start;"
        ))
        .await
        .unwrap();
    let mut checkpoints = BTreeMap::new();
    run_to_end(&client, "hot_auctions", events * 46 / 50, &mut checkpoints).await;
    let rate = events as f64 / started.elapsed().as_secs_f64();
    println!(
        "window aggregate, checkpoints every {interval_ms:>5} ms: {rate:>10.0} events/s; \
         {} checkpoints, mean duration {:.0} ms (max {:.0}), mean uploaded {:.1} MB, \
         state {:.1} MB at the end",
        checkpoints.len(),
        mean(checkpoints.values().map(|c| c.0)),
        checkpoints.values().map(|c| c.0).fold(0.0, f64::max),
        mean(checkpoints.values().map(|c| c.1)) / 1e6,
        checkpoints.values().last().map(|c| c.2).unwrap_or(0.0) / 1e6,
    );
    rate
}

/// Part 2: builds ~`state_mb` MB of view rows, then times two recoveries.
async fn recovery(state_mb: u64) {
    // Rows of ~260 bytes (a 240-character string), written as the view's rows.
    let row_count = state_mb * 1_000_000 / 260;
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let store = temp.path().join("store");
    let store_arg = store.display().to_string();
    let args = ["--state-store", &store_arg];
    let mut server = TestServer::start_in_with_args(&data_dir, &args);
    let client = server.connect().await;
    let started = Instant::now();
    client
        .batch_execute(&format!(
            "SET streaming_parallelism = 2;
             CREATE SOURCE gen (id BIGINT, payload VARCHAR) WITH (
                 connector = 'datagen',
                 fields.id.kind = 'sequence', fields.id.start = 1, fields.id.end = {row_count},
                 fields.payload.length = 240, datagen.split.num = 2,
                 datagen.rows.per.second = 0);
             CREATE MATERIALIZED VIEW big AS SELECT id, payload FROM gen;"
        ))
        .await
        .unwrap();
    let mut checkpoints = BTreeMap::new();
    run_to_end(&client, "big", row_count, &mut checkpoints).await;
    // Wait for a committed checkpoint taken after the job finished.
    while number(
        &client,
        "SELECT count(*) FROM eddy_catalog.checkpoints c, eddy_catalog.jobs j \
         WHERE j.name = 'big' AND c.committed AND c.started > j.finished",
    )
    .await
        == 0.0
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let state_bytes = number(
        &client,
        "SELECT state_bytes FROM eddy_catalog.checkpoints WHERE committed ORDER BY epoch DESC LIMIT 1",
    )
    .await;
    println!(
        "recovery: {row_count} rows written in {:.1} s; checkpointed state {:.0} MB",
        started.elapsed().as_secs_f64(),
        state_bytes / 1e6
    );
    drop(client);

    for lose_data_dir in [false, true] {
        server.kill();
        if lose_data_dir {
            std::fs::remove_dir_all(&data_dir).unwrap();
        }
        let restart = Instant::now();
        server = TestServer::start_in_with_args(&data_dir, &args);
        let listening = restart.elapsed();
        let client = server.connect().await;
        let count = number(&client, "SELECT count(*) FROM big").await as u64;
        assert_eq!(count, row_count, "every row is back");
        println!(
            "recovery from {}: listening with the view restored after {:.1} s ({:.0} MB/s)",
            if lose_data_dir {
                "the state store alone (data dir deleted)"
            } else {
                "the local checkpoint copy"
            },
            listening.as_secs_f64(),
            state_bytes / 1e6 / listening.as_secs_f64()
        );
    }
    disk_usage(temp.path());
}

/// The server's resident memory in bytes (Linux).
fn resident_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Part 3: `groups` distinct groups through a cache of `cache_mb`. Returns rows/s.
async fn many_groups(groups: u64, cache_mb: u64) -> f64 {
    let cache = cache_mb.to_string();
    let server = TestServer::start_with_args(&["--state-cache-mb", &cache]);
    let client = server.connect().await;
    let started = Instant::now();
    client
        .batch_execute(&format!(
            "SET streaming_parallelism = 2;
             CREATE SOURCE gen (id BIGINT, v INT) WITH (
                 connector = 'datagen',
                 fields.id.kind = 'sequence', fields.id.start = 1, fields.id.end = {groups},
                 fields.v.min = 0, fields.v.max = 1000,
                 datagen.split.num = 2, datagen.rows.per.second = 0);
             CREATE MATERIALIZED VIEW per_id AS
                 SELECT id, count(*) AS n, sum(v) AS total FROM gen GROUP BY id;"
        ))
        .await
        .unwrap();
    let (mut peak_rss, mut peak_cache) = (0u64, 0f64);
    let mut flushed = false;
    loop {
        peak_rss = peak_rss.max(resident_bytes(server.pid()));
        peak_cache = peak_cache
            .max(number(&client, "SELECT used_bytes FROM eddy_catalog.state_cache").await);
        let job = rows(
            &client,
            "SELECT state, rows_read FROM eddy_catalog.jobs WHERE name = 'per_id'",
        )
        .await;
        if job[0][0] == "finished" {
            break;
        }
        if !flushed && job[0][1].parse::<u64>().unwrap() >= groups {
            client.batch_execute("FLUSH").await.unwrap();
            flushed = true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let rate = groups as f64 / started.elapsed().as_secs_f64();
    let cache = rows(
        &client,
        "SELECT evictions, loads, early_barriers FROM eddy_catalog.state_cache",
    )
    .await;
    let count = number(&client, "SELECT count(*) FROM per_id").await as u64;
    assert_eq!(count, groups, "one row per group");
    println!(
        "{groups} groups, --state-cache-mb {cache_mb:>5}: {rate:>9.0} rows/s; cache peak {:.0} MB, \
         server peak resident {:.0} MB; evictions {}, loads {}, early barriers {}",
        peak_cache / 1e6,
        peak_rss as f64 / 1e6,
        cache[0][0],
        cache[0][1],
        cache[0][2]
    );
    rate
}

fn disk_usage(path: &Path) {
    let output = std::process::Command::new("du")
        .args(["-sh", &path.display().to_string()])
        .output();
    if let Ok(output) = output {
        print!("disk used: {}", String::from_utf8_lossy(&output.stdout));
    }
}

#[tokio::main]
async fn main() {
    let parts: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let wanted = |part: &str| parts.is_empty() || parts.iter().any(|p| p == part);
    if wanted("window") {
        let events = env_number("EDDY_BENCH_EVENTS", 10_000_000);
        println!("window aggregate: {events} Nexmark events, parallelism 2");
        let every_10s = window_throughput(events, 10_000).await;
        let every_1s = window_throughput(events, 1_000).await;
        println!(
            "checkpoints every 1 s run at {:.2} x the throughput of checkpoints every 10 s",
            every_1s / every_10s
        );
    }
    if wanted("recovery") {
        recovery(env_number("EDDY_BENCH_STATE_MB", 1024)).await;
    }
    if wanted("groups") {
        let groups = env_number("EDDY_BENCH_GROUPS", 20_000_000);
        let unbounded = many_groups(groups, 16_384).await;
        let bounded = many_groups(groups, 64).await;
        println!(
            "with a 64 MB cache: {:.2} x the throughput of a cache holding every group",
            bounded / unbounded
        );
    }
}
