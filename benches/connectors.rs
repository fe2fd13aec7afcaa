//! Kafka connector throughput (issue #13), against a real Kafka-protocol broker (tansu,
//! in-memory storage, installed by `scripts/setup-kafka.sh`) and a real `eddy` server:
//!
//! 1. **Source → view**: `EDDY_BENCH_EVENTS` (default 1000000) bid-shaped JSON messages
//!    over 4 partitions are read by a `kafka` source into a materialized view
//!    (`GROUP BY auction` with `count(*)` and `max(price)`, and a total count), at
//!    parallelism 2 (each view a job of its own reading the topic), timed from `CREATE
//!    MATERIALIZED VIEW` until both views count every message.
//!    The baseline is a plain librdkafka consumer reading the same topic from the start
//!    in the same run (no decoding), so the ratio is what Eddy costs over the broker.
//! 2. **Sink**: as many bid-shaped rows from a `datagen` source (so that reading Kafka
//!    does not limit it) written by `CREATE SINK ... FORMAT PLAIN ENCODE JSON` into a
//!    topic, timed until the sink's job finishes (its last barrier waits for the broker
//!    to acknowledge every message), then read back and counted; the baseline is a plain
//!    librdkafka producer sending the messages of part 1 in the same run.
//!
//! The plain consumer is one client polling in one thread; each view's job reads with
//! one client per subtask (two here).
//!
//! `cargo bench --bench connectors` (needs tansu: `scripts/setup-kafka.sh`).

#[allow(dead_code)]
#[path = "../tests/common/mod.rs"]
mod common;

use common::kafka::KafkaBroker;
use common::{TestServer, query_number, query_rows};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 4;
const AUCTIONS: u64 = 1000;

fn events() -> u64 {
    std::env::var("EDDY_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

/// Message `i`: a bid as the Nexmark generator's JSON would carry it, round-robin over
/// the partitions.
fn bid(i: u64) -> (i32, String) {
    let second = i / 1000;
    let value = format!(
        r#"{{"auction": {}, "bidder": {}, "price": {}, "channel": "channel-{}", "date_time": "2026-01-01 {:02}:{:02}:{:02}.{:03}"}}"#,
        i % AUCTIONS,
        (i * 7) % 10_000,
        1 + (i * 31) % 100_000,
        i % 5,
        (second / 3600) % 24,
        (second / 60) % 60,
        second % 60,
        i % 1000
    );
    ((i % PARTITIONS as u64) as i32, value)
}

/// A consumer of every partition of `topic` from its beginning.
fn consumer_from_start(broker: &KafkaBroker, topic: &str) -> BaseConsumer {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("group.id", "eddy-bench")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        assignment
            .add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&assignment).unwrap();
    consumer
}

/// Reads `expected` messages of `topic` from the beginning without decoding them; the
/// time it took from `start`. (Counted by reading: tansu's high watermarks are not
/// relied on, as in the tests.)
fn read_messages(broker: &KafkaBroker, topic: &str, expected: u64, start: Instant) -> Duration {
    let consumer = consumer_from_start(broker, topic);
    let mut seen = 0u64;
    while seen < expected {
        if let Some(message) = consumer.poll(Duration::from_millis(100)) {
            message.unwrap();
            seen += 1;
        }
        assert!(
            start.elapsed() < Duration::from_secs(1800),
            "{topic}: {seen} of {expected} messages after 30 minutes"
        );
    }
    start.elapsed()
}

fn rate(events: u64, took: Duration) -> f64 {
    events as f64 / took.as_secs_f64()
}

fn human(rate: f64) -> String {
    if rate >= 1e6 {
        format!("{:.2}M", rate / 1e6)
    } else {
        format!("{:.0}k", rate / 1e3)
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = events();
    let broker = KafkaBroker::start();
    broker.create_topic("bids", PARTITIONS as u32);
    broker.create_topic("bids_out", PARTITIONS as u32);
    let messages: Vec<(i32, String)> = (0..n).map(bid).collect();
    let bytes: usize = messages.iter().map(|(_, m)| m.len()).sum();
    eprintln!(
        "producing {n} messages ({:.0} MB)...",
        bytes as f64 / 1048576.0
    );
    let start = Instant::now();
    broker.produce("bids", &messages);
    let produced = start.elapsed();
    drop(messages);

    eprintln!("plain consumer...");
    let consumed = read_messages(&broker, "bids", n, Instant::now());

    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "SET streaming_parallelism = 2;
             CREATE SOURCE bids (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR,
                                 date_time TIMESTAMP)
             WITH (connector = 'kafka', topic = 'bids', properties.bootstrap.server = '{}',
                   scan.startup.mode = 'earliest') FORMAT PLAIN ENCODE JSON",
            broker.address
        ))
        .await
        .unwrap();

    eprintln!("source -> view...");
    let start = Instant::now();
    client
        .batch_execute(
            "CREATE MATERIALIZED VIEW per_auction AS
               SELECT auction, count(*) AS bids, max(price) AS top FROM bids GROUP BY auction;
             CREATE MATERIALIZED VIEW total AS SELECT count(*) AS n FROM bids",
        )
        .await
        .unwrap();
    // Two jobs, each reading the topic: done when both views count every message.
    while (query_number(&client, "SELECT n FROM total").await as u64) < n
        || (query_number(&client, "SELECT sum(bids) FROM per_auction").await as u64) < n
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(start.elapsed() < Duration::from_secs(1800), "views stalled");
    }
    let into_view = start.elapsed();

    eprintln!("datagen -> sink...");
    client
        .batch_execute(&format!(
            "CREATE SOURCE generated (auction BIGINT, bidder BIGINT, price BIGINT,
                                      channel VARCHAR, date_time TIMESTAMP)
             WITH (connector = 'datagen', fields.auction.min = 0, fields.auction.max = 999,
                   fields.bidder.min = 0, fields.bidder.max = 9999, fields.price.min = 1,
                   fields.price.max = 100000, fields.channel.length = 9,
                   fields.date_time.kind = 'sequence', fields.date_time.start = 0,
                   fields.date_time.step = 0.001, datagen.rows.per.second = 0,
                   datagen.total.rows = {n}, datagen.split.num = 2)"
        ))
        .await
        .unwrap();
    let start = Instant::now();
    client
        .batch_execute(&format!(
            "CREATE SINK bids_out AS SELECT * FROM generated
             WITH (connector = 'kafka', topic = 'bids_out', properties.bootstrap.server = '{}'{})
             FORMAT PLAIN ENCODE JSON",
            broker.address,
            std::env::var("EDDY_BENCH_SINK_OPTIONS")
                .map(|o| format!(", {o}"))
                .unwrap_or_default()
        ))
        .await
        .unwrap();
    // The source ends after `n` rows, and the job finishes once its last barrier has
    // passed the sink, which waits for the broker to acknowledge every message.
    while query_rows(
        &client,
        "SELECT state FROM eddy_catalog.jobs WHERE name = 'bids_out'",
    )
    .await
        != vec![vec!["finished".to_string()]]
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(start.elapsed() < Duration::from_secs(1800), "sink stalled");
    }
    let into_sink = start.elapsed();
    // Every message is there (read back, not timed: one consumer is slower than the sink).
    read_messages(&broker, "bids_out", n, Instant::now());

    println!("Kafka connectors, {n} messages over {PARTITIONS} partitions, parallelism 2\n");
    println!("| path | messages/s | baseline (same run) | ratio |");
    println!("| --- | ---: | --- | ---: |");
    println!(
        "| source → view (`GROUP BY auction`, and `count(*)`) | {} | plain consumer {} | {:.2} |",
        human(rate(n, into_view)),
        human(rate(n, consumed)),
        rate(n, into_view) / rate(n, consumed)
    );
    println!(
        "| `datagen` → sink (`FORMAT PLAIN ENCODE JSON`) | {} | plain producer {} | {:.2} |",
        human(rate(n, into_sink)),
        human(rate(n, produced)),
        rate(n, into_sink) / rate(n, produced)
    );
}
