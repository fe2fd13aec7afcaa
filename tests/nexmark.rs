//! The Nexmark queries as materialized views over bounded `nexmark` sources (persons,
//! auctions and bids of the same event stream), each compared, once its sources are
//! exhausted, with the same query run by DataFusion in batch over the events those
//! sources make. The queries are RisingWave's versions of Nexmark; where a query's
//! `ORDER BY` could tie, a column is added to break the tie (so any correct engine gives
//! the same rows), as noted.

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
                 date_time TIMESTAMP, extra VARCHAR, \
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
            ])),
        ),
    ]
}

/// (name, the view's query, the batch query where it differs).
const QUERIES: &[(&str, &str, Option<&str>)] = &[
    (
        "q0",
        "SELECT auction, bidder, price, date_time FROM bid",
        None,
    ),
    (
        "q1",
        "SELECT auction, bidder, 0.908 * price AS price, date_time FROM bid",
        None,
    ),
    (
        "q2",
        "SELECT auction, price FROM bid WHERE auction = 1007 OR auction = 1020 OR auction = 2001 OR auction = 2019 OR auction = 2087",
        None,
    ),
    (
        "q3",
        "SELECT P.name, P.city, P.state, A.id FROM auction AS A INNER JOIN person AS P ON A.seller = P.id \
         WHERE A.category = 10 AND (P.state = 'or' OR P.state = 'id' OR P.state = 'ca')",
        None,
    ),
    (
        "q4",
        "SELECT Q.category, AVG(Q.final) AS avg FROM ( \
           SELECT MAX(B.price) AS final, A.category FROM auction A, bid B \
           WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires \
           GROUP BY A.id, A.category) Q \
         GROUP BY Q.category",
        None,
    ),
    (
        "q5",
        "SELECT AuctionBids.auction, AuctionBids.num FROM ( \
           SELECT bid.auction, count(*) AS num, window_start AS starttime \
           FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) \
           GROUP BY window_start, bid.auction) AS AuctionBids \
         JOIN ( \
           SELECT max(CountBids.num) AS maxn, CountBids.starttime_c FROM ( \
             SELECT count(*) AS num, window_start AS starttime_c \
             FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) \
             GROUP BY bid.auction, window_start) AS CountBids \
           GROUP BY CountBids.starttime_c) AS MaxBids \
         ON AuctionBids.starttime = MaxBids.starttime_c AND AuctionBids.num >= MaxBids.maxn",
        None,
    ),
    // q6: the average closing price over each seller's last ten auctions (a window
    // function with a ROWS frame over an updating aggregate); ties on the time broken by
    // the auction's id, and the time taken as the auction's last bid.
    (
        "q6",
        "SELECT Q.seller, AVG(Q.final) OVER \
           (PARTITION BY Q.seller ORDER BY Q.date_time, Q.id ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) AS avg \
         FROM (SELECT MAX(B.price) AS final, A.seller, A.id, MAX(B.date_time) AS date_time \
               FROM auction AS A, bid AS B \
               WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires \
               GROUP BY A.id, A.seller) AS Q",
        None,
    ),
    (
        "q7",
        "SELECT B.auction, B.price, B.bidder, B.date_time FROM bid B \
         JOIN (SELECT MAX(price) AS maxprice, window_end AS date_time \
               FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) GROUP BY window_end) B1 \
         ON B.price = B1.maxprice \
         WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time",
        None,
    ),
    (
        "q8",
        "SELECT P.id, P.name, P.starttime FROM ( \
           SELECT id, name, window_start AS starttime, window_end AS endtime \
           FROM TUMBLE(person, date_time, INTERVAL '10' SECOND) \
           GROUP BY id, name, window_start, window_end) P \
         JOIN ( \
           SELECT seller, window_start AS starttime, window_end AS endtime \
           FROM TUMBLE(auction, date_time, INTERVAL '10' SECOND) \
           GROUP BY seller, window_start, window_end) A \
         ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime",
        None,
    ),
    // Ties on (price, date_time) broken by bidder.
    (
        "q9",
        "SELECT id, item_name, description, initial_bid, reserve, date_time, expires, seller, category, \
                auction, bidder, price, bid_date_time FROM ( \
           SELECT A.*, B.auction, B.bidder, B.price, B.date_time AS bid_date_time, \
             ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.date_time ASC, B.bidder) AS rownum \
           FROM auction A, bid B \
           WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires) \
         WHERE rownum <= 1",
        None,
    ),
    (
        "q14",
        "SELECT auction, bidder, 0.908 * price AS price, \
           CASE WHEN extract(hour FROM date_time) >= 8 AND extract(hour FROM date_time) <= 18 THEN 'dayTime' \
                WHEN extract(hour FROM date_time) <= 6 OR extract(hour FROM date_time) >= 20 THEN 'nightTime' \
                ELSE 'otherTime' END AS bidTimeType, \
           date_time, extra \
         FROM bid WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000",
        None,
    ),
    // q15 and q17 group by day with PostgreSQL's to_char(date_time, 'YYYY-MM-DD'); here
    // date_trunc('day', ...) (DataFusion's to_char takes chrono formats).
    (
        "q15",
        "SELECT date_trunc('day', date_time) AS day, count(*) AS total_bids, \
           count(*) FILTER (WHERE price < 10000) AS rank1_bids, \
           count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids, \
           count(*) FILTER (WHERE price >= 1000000) AS rank3_bids, \
           count(DISTINCT bidder) AS total_bidders, \
           count(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders, \
           count(DISTINCT bidder) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bidders, \
           count(DISTINCT bidder) FILTER (WHERE price >= 1000000) AS rank3_bidders, \
           count(DISTINCT auction) AS total_auctions, \
           count(DISTINCT auction) FILTER (WHERE price < 10000) AS rank1_auctions, \
           count(DISTINCT auction) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_auctions, \
           count(DISTINCT auction) FILTER (WHERE price >= 1000000) AS rank3_auctions \
         FROM bid GROUP BY date_trunc('day', date_time)",
        None,
    ),
    (
        "q16",
        "SELECT channel, date_trunc('day', date_time) AS day, max(date_trunc('minute', date_time)) AS minute, \
           count(*) AS total_bids, \
           count(*) FILTER (WHERE price < 10000) AS rank1_bids, \
           count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids, \
           count(*) FILTER (WHERE price >= 1000000) AS rank3_bids, \
           count(DISTINCT bidder) AS total_bidders, \
           count(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders, \
           count(DISTINCT auction) AS total_auctions, \
           count(DISTINCT auction) FILTER (WHERE price >= 1000000) AS rank3_auctions \
         FROM bid GROUP BY channel, date_trunc('day', date_time)",
        None,
    ),
    (
        "q17",
        "SELECT auction, date_trunc('day', date_time) AS day, count(*) AS total_bids, \
           count(*) FILTER (WHERE price < 10000) AS rank1_bids, \
           count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids, \
           count(*) FILTER (WHERE price >= 1000000) AS rank3_bids, \
           min(price) AS min_price, max(price) AS max_price, avg(price) AS avg_price, sum(price) AS sum_price \
         FROM bid GROUP BY auction, date_trunc('day', date_time)",
        None,
    ),
    // Ties on date_time broken by price and extra.
    (
        "q18",
        "SELECT auction, bidder, price, channel, url, date_time, extra FROM ( \
           SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY date_time DESC, price DESC, extra) AS rank_number \
           FROM bid) \
         WHERE rank_number <= 1",
        None,
    ),
    (
        "q19",
        "SELECT * FROM ( \
           SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC, date_time, bidder, extra) AS rank_number \
           FROM bid) \
         WHERE rank_number <= 10",
        None,
    ),
    (
        "q20",
        "SELECT auction, bidder, price, channel, url, B.date_time AS date_timeB, item_name, description, \
                initial_bid, reserve, A.date_time AS date_timeA, expires, seller, category \
         FROM bid B INNER JOIN auction A ON B.auction = A.id WHERE A.category = 10",
        None,
    ),
    (
        "q21",
        "SELECT auction, bidder, price, channel, \
           CASE WHEN lower(channel) = 'apple' THEN '0' WHEN lower(channel) = 'google' THEN '1' \
                WHEN lower(channel) = 'facebook' THEN '2' WHEN lower(channel) = 'baidu' THEN '3' \
                ELSE (regexp_match(url, '(&|^)channel_id=([^&]*)'))[2] END AS channel_id \
         FROM bid WHERE (regexp_match(url, '(&|^)channel_id=([^&]*)'))[2] IS NOT NULL \
           OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')",
        None,
    ),
    (
        "q22",
        "SELECT auction, bidder, price, channel, split_part(url, '/', 4) AS dir1, \
                split_part(url, '/', 5) AS dir2, split_part(url, '/', 6) AS dir3 FROM bid",
        None,
    ),
];

/// Runs `query` in DataFusion over every event the sources make.
async fn batch(query: &str) -> Vec<Vec<String>> {
    let ctx = SessionContext::new();
    for (name, create, schema) in sources() {
        let spec = eddy::connectors::ConnectorSpec::from_options(&schema, &source_options(&create))
            .unwrap();
        let mut batches = Vec::new();
        for split in 0..spec.split_count() {
            let mut reader = spec.split_reader(split, 0);
            while let Some(b) = reader.next_batch(4096).unwrap() {
                batches.push(b);
            }
        }
        let all = arrow::compute::concat_batches(&schema, &batches).unwrap();
        ctx.register_batch(name, all).unwrap();
    }
    // The HOP and TUMBLE forms, as Eddy rewrites them (batch queries run the same way).
    let query = batch_windows(query);
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
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!("SET streaming_parallelism = {parallelism}"))
        .await
        .unwrap();
    for (_, create, _) in sources() {
        client.batch_execute(&create).await.unwrap();
    }
    for (name, query, _) in QUERIES {
        client
            .batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap_or_else(|e| panic!("creating {name}: {e:?}"));
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let jobs = view_rows(&client, "SELECT name, state, error FROM eddy_catalog.jobs").await;
        for j in &jobs {
            assert_ne!(j[1], "failed", "job {} failed: {}", j[0], j[2]);
        }
        if jobs.len() == QUERIES.len() && jobs.iter().all(|j| j[1] == "finished") {
            break;
        }
        assert!(Instant::now() < deadline, "jobs did not finish: {jobs:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (name, query, reference) in QUERIES {
        let streamed = view_rows(&client, &format!("SELECT * FROM {name}")).await;
        let expected = batch(reference.unwrap_or(query)).await;
        assert!(!expected.is_empty(), "{name}: the batch query has rows");
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
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute("SET streaming_parallelism = 2")
        .await
        .unwrap();
    let (_, create, _) = sources().pop().expect("the bid source");
    client.batch_execute(&create).await.unwrap();
    let q11 = "SELECT bidder, count(*) AS bid_count, window_start AS starttime, window_end AS endtime \
               FROM TABLE(SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) \
               GROUP BY bidder, window_start, window_end";
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
