//! The Nexmark queries as materialized views over bounded `nexmark` sources (persons,
//! auctions and bids of the same event stream), each compared, once its sources are
//! exhausted, with the same query run by DataFusion in batch over the events those
//! sources make. The queries are the files of `benches/nexmark/` (the benchmark runs the
//! same files): RisingWave's versions of Nexmark; where a query's `ORDER BY` could tie, a
//! column is added to break the tie (so any correct engine gives the same rows), as each
//! file notes.

use crate::common::TestServer;
use crate::streaming::{assert_same, sorted_rows_text, source_options, view_rows};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::prelude::SessionContext;
use std::sync::Arc;
use std::time::{Duration, Instant};

const EVENTS: u64 = 20_000;

fn source(name: &str, table_type: &str, columns: &str) -> String {
    format!(
        "CREATE SOURCE {name} ({columns}) WITH (
    connector = 'nexmark',
    nexmark.table.type = '{table_type}',
    nexmark.event.num = {EVENTS},
    nexmark.split.num = 2)"
    )
}

fn sources() -> Vec<(&'static str, String, SchemaRef)> {
    let ts = || DataType::Timestamp(TimeUnit::Microsecond, None);
    let field = |name: &str, t: DataType| Field::new(name, t, true);
    vec![
        (
            "person",
            source(
                "person",
                "Person",
                "id BIGINT, name VARCHAR, email_address VARCHAR, credit_card VARCHAR, city VARCHAR, \
                 state VARCHAR, date_time TIMESTAMP, extra VARCHAR, \
                 WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND",
            ),
            Arc::new(Schema::new(vec![
                field("id", DataType::Int64),
                field("name", DataType::Utf8),
                field("email_address", DataType::Utf8),
                field("credit_card", DataType::Utf8),
                field("city", DataType::Utf8),
                field("state", DataType::Utf8),
                field("date_time", ts()),
                field("extra", DataType::Utf8),
            ])),
        ),
        (
            "auction",
            source(
                "auction",
                "Auction",
                "id BIGINT, item_name VARCHAR, description VARCHAR, initial_bid BIGINT, reserve BIGINT, \
                 date_time TIMESTAMP, expires TIMESTAMP, seller BIGINT, category BIGINT, extra VARCHAR, \
                 WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND",
            ),
            Arc::new(Schema::new(vec![
                field("id", DataType::Int64),
                field("item_name", DataType::Utf8),
                field("description", DataType::Utf8),
                field("initial_bid", DataType::Int64),
                field("reserve", DataType::Int64),
                field("date_time", ts()),
                field("expires", ts()),
                field("seller", DataType::Int64),
                field("category", DataType::Int64),
                field("extra", DataType::Utf8),
            ])),
        ),
        (
            "bid",
            source(
                "bid",
                "Bid",
                "auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, \
                 date_time TIMESTAMP, extra VARCHAR, p_time TIMESTAMPTZ AS PROCTIME(), \
                 WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND",
            ),
            Arc::new(Schema::new(vec![
                field("auction", DataType::Int64),
                field("bidder", DataType::Int64),
                field("price", DataType::Int64),
                field("channel", DataType::Utf8),
                field("url", DataType::Utf8),
                field("date_time", ts()),
                field("extra", DataType::Utf8),
                field(
                    "p_time",
                    DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
                ),
            ])),
        ),
    ]
}

/// The processing time of the test servers (q12's windows are by processing time), and
/// the same instant in microseconds for the batch side.
const PROCESSING_TIME: &str = "2024-05-01 10:00:03";
const PROCESSING_TIME_MICROS: i64 = 1_714_557_603_000_000;

fn server() -> TestServer {
    TestServer::start_with_env(&[("EDDY_FIXED_PROCESSING_TIME", PROCESSING_TIME)])
}

/// Where the Nexmark queries live, one `qN.sql` each, shared with `benches/nexmark.rs`.
const QUERY_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/nexmark");

/// The queries of [`QUERY_DIR`] as (name, SQL), in query order.
fn queries() -> Vec<(String, String)> {
    let mut queries: Vec<(u32, String, String)> = std::fs::read_dir(QUERY_DIR)
        .expect("benches/nexmark")
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let name = path.file_stem()?.to_str()?.to_string();
            let number: u32 = name.strip_prefix('q')?.parse().ok()?;
            let sql = std::fs::read_to_string(&path).ok()?;
            Some((number, name, sql))
        })
        .collect();
    queries.sort();
    queries
        .into_iter()
        .map(|(_, name, sql)| (name, sql))
        .collect()
}

/// The setup q13 needs (its side input table).
fn side_input() -> String {
    std::fs::read_to_string(format!("{QUERY_DIR}/side_input.sql")).expect("side_input.sql")
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
    let ctx = SessionContext::new();
    for (name, create, schema) in sources() {
        // The connector makes every column but the processing time, which is the
        // servers' fixed one.
        let made: Vec<_> = schema
            .fields()
            .iter()
            .filter(|f| f.name() != "p_time")
            .cloned()
            .collect();
        let made = Arc::new(Schema::new(made));
        let spec =
            eddy::connectors::ConnectorSpec::from_options(&made, &source_options(&create)).unwrap();
        let mut batches = Vec::new();
        for split in 0..spec.split_count() {
            let mut reader = spec.split_reader(split, 0);
            while let Some(b) = reader.next_batch(4096).unwrap() {
                batches.push(b);
            }
        }
        let all = arrow::compute::concat_batches(&made, &batches).unwrap();
        let all = if schema.fields().len() > made.fields().len() {
            let mut columns = all.columns().to_vec();
            columns.push(Arc::new(
                arrow::array::TimestampMicrosecondArray::from_value(
                    PROCESSING_TIME_MICROS,
                    all.num_rows(),
                )
                .with_timezone("+00:00"),
            ));
            arrow::array::RecordBatch::try_new(schema.clone(), columns).unwrap()
        } else {
            all
        };
        ctx.register_batch(name, all).unwrap();
    }
    eddy::session::functions::register(&ctx);
    ctx.sql(
        "CREATE TABLE side_input AS SELECT value AS key, CAST(value AS VARCHAR) AS value \
         FROM generate_series(0, 9999)",
    )
    .await
    .unwrap();
    // A temporal join with a table that does not change is a plain join; `mod` is `%`.
    let query = query
        .replace("FOR SYSTEM_TIME AS OF PROCTIME()", "")
        .replace("mod(B.auction, 10000)", "(B.auction % 10000)");
    // The HOP and TUMBLE forms, as Eddy rewrites them (batch queries run the same way).
    let query = batch_windows(&query);
    let result = ctx.sql(&query).await.unwrap().collect().await.unwrap();
    sorted_rows_text(&result)
}

/// Plain DataFusion has no `TUMBLE`/`HOP` table functions: the windows as `date_bin`
/// (tumbling) and a union of shifted `date_bin`s (hopping, size a multiple of the slide).
fn batch_windows(query: &str) -> String {
    let mut q = query.to_string();
    for relation in ["bid", "person", "auction"] {
        q = q.replace(
            &format!("TUMBLE({relation}, date_time, INTERVAL '10' SECOND)"),
            &format!(
                "(SELECT *, date_bin(INTERVAL '10' SECOND, date_time, TIMESTAMP '1970-01-01 00:00:00') AS window_start, \
                  date_bin(INTERVAL '10' SECOND, date_time, TIMESTAMP '1970-01-01 00:00:00') + INTERVAL '10' SECOND AS window_end \
                  FROM {relation}) AS {relation}"
            ),
        );
    }
    // q12's windows of processing time.
    q = q.replace(
        "TUMBLE(bid, p_time, INTERVAL '10' SECOND)",
        "(SELECT *, date_bin(INTERVAL '10' SECOND, p_time, TIMESTAMPTZ '1970-01-01 00:00:00+00') AS window_start, \
          date_bin(INTERVAL '10' SECOND, p_time, TIMESTAMPTZ '1970-01-01 00:00:00+00') + INTERVAL '10' SECOND AS window_end \
          FROM bid) AS bid",
    );
    let hops: Vec<String> = (0..5)
        .map(|k| {
            format!(
                "SELECT *, date_bin(INTERVAL '2' SECOND, date_time, TIMESTAMP '1970-01-01 00:00:00') - INTERVAL '{}' SECOND AS window_start FROM bid",
                2 * k
            )
        })
        .collect();
    q.replace(
        "HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)",
        &format!("({}) AS bid", hops.join(" UNION ALL ")),
    )
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
    for (_, create, _) in sources() {
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
    let (_, create, _) = sources().pop().expect("the bid source");
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
