//! The Nexmark queries as materialized views over bounded `nexmark` sources (persons,
//! auctions and bids of the same event stream), each compared, once its sources are
//! exhausted, with the same query run by DataFusion in batch over the events those
//! sources make. The queries are the files of `benches/nexmark/` (the benchmark runs the
//! same files): RisingWave's versions of Nexmark; where a query's `ORDER BY` could tie, a
//! column is added to break the tie (so any correct engine gives the same rows), as each
//! file notes.

use crate::common::TestServer;
use crate::nexmark_shared::{SOURCES, batch_context, batch_query, queries, side_input};
use crate::streaming::{assert_same, sorted_rows_text, view_rows};
use std::time::{Duration, Instant};

const EVENTS: u64 = 20_000;

/// The sources' `CREATE SOURCE`s, in the order person, auction, bid.
fn sources() -> Vec<String> {
    SOURCES.iter().map(|s| s.create(EVENTS, 2)).collect()
}

/// The processing time of the test servers (q12's windows are by processing time), and
/// the same instant in microseconds for the batch side.
const PROCESSING_TIME: &str = "2024-05-01 10:00:03";
const PROCESSING_TIME_MICROS: i64 = 1_714_557_603_000_000;

fn server() -> TestServer {
    TestServer::start_with_env(&[("EDDY_FIXED_PROCESSING_TIME", PROCESSING_TIME)])
}

/// Queries checked against DataFusion in batch: all but q11 (session windows, which
/// DataFusion lacks; see the q11 test below).
fn differential_queries() -> Vec<(String, String)> {
    queries()
        .into_iter()
        .filter(|(name, _)| name != "q11")
        .collect()
}

/// Runs `query` in DataFusion over every event the sources make.
async fn batch(query: &str) -> Vec<Vec<String>> {
    let ctx = batch_context(EVENTS, 2, PROCESSING_TIME_MICROS).await;
    let result = ctx
        .sql(&batch_query(query))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    sorted_rows_text(&result)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nexmark_queries_match_batch_results_at_parallelism_1() {
    nexmark_queries_match_batch_results(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nexmark_queries_match_batch_results_at_parallelism_4() {
    nexmark_queries_match_batch_results(4).await;
}

async fn nexmark_queries_match_batch_results(parallelism: usize) {
    let server = server();
    let client = server.connect().await;
    client
        .batch_execute(&format!("SET streaming_parallelism = {parallelism}"))
        .await
        .unwrap();
    for create in sources() {
        client.batch_execute(&create).await.unwrap();
    }
    client.batch_execute(&side_input()).await.unwrap();
    let queries = differential_queries();
    for (name, query) in &queries {
        client
            .batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap_or_else(|e| panic!("creating {name}: {e:?}"));
    }
    // Jobs over sources alone finish when the sources are exhausted; one that also
    // reads a table (q13's side input) runs on, so its view is read until it holds as
    // many rows as the batch result (or the deadline passes), then compared.
    let reads_table = |name: &str| name == "q13";
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let jobs = view_rows(&client, "SELECT name, state, error FROM eddy_catalog.jobs").await;
        for j in &jobs {
            assert_ne!(j[1], "failed", "job {} failed: {}", j[0], j[2]);
        }
        let done = jobs.len() == queries.len()
            && jobs
                .iter()
                .all(|j| j[1] == "finished" || reads_table(&j[0]));
        if done {
            break;
        }
        assert!(Instant::now() < deadline, "jobs did not finish: {jobs:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (name, query) in &queries {
        let expected = batch(query).await;
        assert!(!expected.is_empty(), "{name}: the batch query has rows");
        let mut streamed = view_rows(&client, &format!("SELECT * FROM {name}")).await;
        while reads_table(name) && streamed.len() < expected.len() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
            streamed = view_rows(&client, &format!("SELECT * FROM {name}")).await;
        }
        assert_same(
            &format!("{name} at parallelism {parallelism}"),
            &streamed,
            &expected,
        );
    }
}

/// Nexmark q11 in Flink's form (each bidder's sessions of bids less than 10 s apart), as
/// a view emitted when each session closes and as one kept up to date: once the
/// source is exhausted both hold the same sessions. (DataFusion has no session windows
/// to compare with; the session functions themselves are checked in
/// `sql-tests/session_windows.slt`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nexmark_q11_sessions_on_close_equal_sessions_kept_up_to_date() {
    let server = server();
    let client = server.connect().await;
    client
        .batch_execute("SET streaming_parallelism = 2")
        .await
        .unwrap();
    let create = sources().pop().expect("the bid source");
    client.batch_execute(&create).await.unwrap();
    let (_, q11) = queries()
        .into_iter()
        .find(|(name, _)| name == "q11")
        .expect("q11.sql");
    client
        .batch_execute(&format!(
            "CREATE MATERIALIZED VIEW q11 AS {q11} EMIT ON WINDOW CLOSE;
             CREATE MATERIALIZED VIEW q11_updating AS {q11};"
        ))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let jobs = view_rows(&client, "SELECT name, state, error FROM eddy_catalog.jobs").await;
        for j in &jobs {
            assert_ne!(j[1], "failed", "job {} failed: {}", j[0], j[2]);
        }
        if jobs.len() == 2 && jobs.iter().all(|j| j[1] == "finished") {
            break;
        }
        assert!(Instant::now() < deadline, "jobs did not finish: {jobs:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let closed = view_rows(&client, "SELECT * FROM q11").await;
    let updating = view_rows(&client, "SELECT * FROM q11_updating").await;
    assert!(closed.len() > 100, "sessions: {}", closed.len());
    assert_eq!(closed, updating);
    // Every bid is in exactly one session.
    let bids = view_rows(&client, "SELECT sum(bid_count) FROM q11").await;
    let read = view_rows(
        &client,
        "SELECT rows_read FROM eddy_catalog.jobs WHERE name = 'q11'",
    )
    .await;
    assert_eq!(bids, read);
}
