//! State that stays bounded: an interval join, a window join and a hopping-window
//! aggregate (without `EMIT ON WINDOW CLOSE`) over unbounded, paced `nexmark` sources run
//! for 60 times their interval (in event time: Nexmark makes 10 000 events per second of
//! event time), while the rows their state tables hold (`eddy_catalog.state_tables`) stay
//! flat as the rows read keep growing.

use crate::common::TestServer;
use crate::streaming::view_rows;
use std::time::{Duration, Instant};

/// Nexmark events per second of event time (the generator's default rate).
const EVENTS_PER_SECOND: u64 = 10_000;

/// Wall-clock nanoseconds between two Nexmark events (the connector paces rows, so a
/// source's row gap is the event gap over its share of the events).
const EVENT_GAP_NS: u64 = 100_000;

/// A paced, unbounded Nexmark source; `share` of every 50 events are its rows.
fn source(name: &str, table_type: &str, share: u64, columns: &str) -> String {
    let gap = EVENT_GAP_NS * 50 / share;
    format!(
        "CREATE SOURCE {name} ({columns}, WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND) WITH (
    connector = 'nexmark', nexmark.table.type = '{table_type}', nexmark.split.num = 1,
    nexmark.min.event.gap.in.ns = {gap})"
    )
}

/// (rows read by the job, rows in the state tables of its operators named `operator`).
async fn progress(client: &tokio_postgres::Client, job: &str, operator: &str) -> (u64, u64) {
    let read = view_rows(
        client,
        &format!("SELECT rows_read FROM eddy_catalog.jobs WHERE name = '{job}'"),
    )
    .await;
    let state = view_rows(
        client,
        &format!(
            "SELECT coalesce(sum(rows), 0) FROM eddy_catalog.state_tables \
             WHERE job = '{job}' AND operator LIKE '{operator}%'"
        ),
    )
    .await;
    (read[0][0].parse().unwrap(), state[0][0].parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_and_window_aggregate_state_stays_flat() {
    // Frequent barriers: between two, one side of a self-join (two reads of one source)
    // can run ahead of the other, and its rows wait in state for the other's watermark.
    let server = TestServer::start_with_args(&["--barrier-interval-ms", "250"]);
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "SET streaming_parallelism = 2;
             {};
             -- An interval join: each bid with the bids at the same price on the same
             -- auction in the second before it (1 s interval).
             CREATE MATERIALIZED VIEW interval_pairs AS
               SELECT B.auction, B.price, B.bidder, C.bidder AS earlier_bidder FROM bid B JOIN bid C
               ON B.auction = C.auction AND B.price = C.price
                  AND C.date_time BETWEEN B.date_time - INTERVAL '1' SECOND AND B.date_time;
             -- A window join: bids with the bids at the same price on the same auction
             -- in the same 1 s window.
             CREATE MATERIALIZED VIEW window_pairs AS
               SELECT b.auction, b.price, b.bidder, c.bidder AS other_bidder, b.window_start
               FROM TUMBLE(bid, date_time, INTERVAL '1' SECOND) b
               JOIN TUMBLE(bid, date_time, INTERVAL '1' SECOND) c
               ON b.auction = c.auction AND b.price = c.price AND b.window_start = c.window_start;
             -- A hopping-window count per auction: the groups of windows the watermark
             -- has passed are final and dropped from state (their rows stay in the view).
             CREATE MATERIALIZED VIEW hop_counts AS
               SELECT auction, window_start, count(*) AS bids
               FROM HOP(bid, date_time, INTERVAL '1' SECOND, INTERVAL '2' SECOND)
               GROUP BY auction, window_start;",
            source(
                "bid",
                "Bid",
                46,
                "auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, \
                 date_time TIMESTAMP, extra VARCHAR"
            ),
        ))
        .await
        .unwrap();
    // The joins read the bids twice (both sides come from the same source, so they move
    // through event time at the same pace): 2 × 46 rows per 50 events; the aggregate
    // reads them once. The interval is 1 s of event time.
    let bids_per_interval = EVENTS_PER_SECOND * 46 / 50;
    // The mean state from 10 to 20 intervals and from 50 to 60: state that grew with the
    // input would be some 3.7 times larger (55 intervals read against 15); bounded state
    // stays put, within the noise of when barriers, watermarks and catch-up bursts of a
    // loaded machine fall (allowed up to 2.5 times). Both jobs run at once
    // and are sampled together.
    // (job, the operators whose state is measured, bid reads).
    let jobs = [
        ("interval_pairs", "HashJoin", 2),
        ("window_pairs", "HashJoin", 2),
        ("hop_counts", "HashAgg", 1),
    ];
    let deadline = Instant::now() + Duration::from_secs(400);
    let mut early = [(0u64, 0u64); 3];
    let mut late = [(0u64, 0u64); 3];
    let mean = |(sum, n): (u64, u64)| sum.checked_div(n).unwrap_or(0);
    let mut done = [false; 3];
    while !done.iter().all(|d| *d) {
        for (j, (job, operator, reads)) in jobs.iter().enumerate() {
            if done[j] {
                continue;
            }
            let (read, state) = progress(&client, job, operator).await;
            let intervals = read / (bids_per_interval * reads);
            match intervals {
                10..20 => early[j] = (early[j].0 + state, early[j].1 + 1),
                50.. => late[j] = (late[j].0 + state, late[j].1 + 1),
                _ => {}
            }
            if intervals >= 60 {
                done[j] = true;
                let (early, late) = (mean(early[j]), mean(late[j]));
                eprintln!("{job}: {early} rows in state at 10-20 intervals, {late} at 50-60");
                assert!(early > 0, "{job}: the {operator} keeps some state");
                assert!(
                    late * 2 <= early * 5,
                    "{job}: state grew from {early} rows to {late} while reading {read} rows"
                );
            }
            assert!(
                Instant::now() < deadline,
                "{job}: only {intervals} intervals read (state {state} rows)"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for view in ["interval_pairs", "window_pairs", "hop_counts"] {
        let rows = view_rows(&client, &format!("SELECT count(*) FROM {view}")).await;
        assert_ne!(rows[0][0], "0", "{view} has rows");
    }
    let failed = view_rows(
        &client,
        "SELECT name, error FROM eddy_catalog.jobs WHERE state <> 'running'",
    )
    .await;
    assert!(failed.is_empty(), "jobs stopped: {failed:?}");
}
