//! Materialized views over sources: results compared with what DataFusion computes in
//! batch over the same rows, and recomputed identically after a restart.

use crate::common::TestServer;
use datafusion::prelude::SessionContext;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const SOURCE: &str = "CREATE SOURCE s (id BIGINT, k INT, v DOUBLE PRECISION, name VARCHAR) WITH (
    connector = 'datagen',
    fields.id.kind = 'sequence', fields.id.start = 1, fields.id.end = 20000,
    fields.k.min = 1, fields.k.max = 7, fields.k.seed = 11,
    fields.v.min = -10, fields.v.max = 10, fields.v.seed = 5,
    fields.name.length = 3,
    datagen.split.num = 3,
    datagen.rows.per.second = 0)";

/// (view name, query): each is created as a materialized view and also run in batch.
const VIEWS: &[(&str, &str)] = &[
    (
        "projected",
        "SELECT id, k * 10 AS k10, upper(name) AS big FROM s WHERE v > 0 AND k <> 3",
    ),
    (
        "per_key",
        "SELECT k, count(*) AS n, sum(id) AS total, min(v) AS lo, max(v) AS hi, avg(v) AS mean, min(name) AS first_name FROM s GROUP BY k",
    ),
    (
        "busy_keys",
        "SELECT k, count(*) AS n FROM s WHERE id % 3 = 0 GROUP BY k HAVING count(*) > 950",
    ),
    (
        "grand_total",
        "SELECT count(*) AS n, sum(id) AS total, max(v) AS hi FROM s",
    ),
    (
        "by_expr",
        "SELECT id % 5 AS bucket, k > 3 AS high, count(*) AS n FROM s GROUP BY id % 5, k > 3",
    ),
    (
        "distinct_counts",
        "SELECT k, count(DISTINCT name) AS names, count(DISTINCT id % 100) AS buckets FROM s GROUP BY k",
    ),
    (
        "case_buckets",
        "SELECT CASE WHEN v < -5 THEN 'low' WHEN v < 5 THEN 'mid' ELSE 'high' END AS band, count(*) AS n, sum(k) AS ks FROM s GROUP BY 1",
    ),
    (
        "casts",
        "SELECT id, CAST(v AS INT) AS vi, CAST(k AS VARCHAR) || name AS label FROM s WHERE id < 500",
    ),
    (
        "subquery_in_from",
        "SELECT half, count(*) AS n, max(id) AS top FROM (SELECT id, id % 2 = 0 AS half FROM s WHERE k > 2) AS t GROUP BY half",
    ),
    (
        "distinct_rows",
        "SELECT DISTINCT k, length(name) AS len FROM s",
    ),
    (
        "global_having",
        "SELECT count(*) AS n FROM s HAVING count(*) > 100",
    ),
    (
        "filtered_global",
        "SELECT min(id) AS lo, max(id) AS hi, avg(k) AS mean FROM s WHERE name LIKE 'a%'",
    ),
    (
        "string_agg_keys",
        "SELECT substr(name, 1, 1) AS initial, count(*) AS n FROM s GROUP BY substr(name, 1, 1)",
    ),
    (
        "nulls_and_coalesce",
        "SELECT k, count(NULLIF(k, 3)) AS not_three, sum(CASE WHEN v > 0 THEN 1 ELSE 0 END) AS positive FROM s GROUP BY k",
    ),
    (
        "arith",
        "SELECT id * 2 + k AS x, abs(v) AS av, round(v) AS rv FROM s WHERE id % 97 = 0",
    ),
];

pub(crate) async fn wait_for_jobs(client: &tokio_postgres::Client, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let rows = client
            .query("SELECT name, state, error FROM eddy_catalog.jobs", &[])
            .await
            .unwrap();
        for r in &rows {
            let state: &str = r.get(1);
            assert_ne!(
                state,
                "failed",
                "job {} failed: {:?}",
                r.get::<_, &str>(0),
                r.get::<_, Option<&str>>(2)
            );
        }
        if rows.len() == count && rows.iter().all(|r| r.get::<_, &str>(1) == "finished") {
            return;
        }
        assert!(Instant::now() < deadline, "jobs did not finish in time");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Rows of a query as text, sorted, through the simple protocol.
pub(crate) async fn view_rows(client: &tokio_postgres::Client, sql: &str) -> Vec<Vec<String>> {
    let mut rows: Vec<Vec<String>> = client
        .simple_query(sql)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(
                (0..r.len())
                    .map(|i| r.get(i).unwrap_or("NULL").to_string())
                    .collect(),
            ),
            _ => None,
        })
        .collect();
    rows.sort();
    rows
}

/// The options of a `CREATE SOURCE ... WITH (...)` statement (simple values only).
pub(crate) fn source_options(create: &str) -> BTreeMap<String, String> {
    create
        .split("WITH (")
        .nth(1)
        .unwrap()
        .trim_end_matches(')')
        .split(',')
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            (
                k.trim().to_string(),
                v.trim().trim_matches('\'').to_string(),
            )
        })
        .collect()
}

/// The same query in batch, over the rows the datagen source makes.
async fn batch_rows(query: &str) -> Vec<Vec<String>> {
    use arrow::datatypes::{DataType, Field, Schema};
    let schema = std::sync::Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("k", DataType::Int32, true),
        Field::new("v", DataType::Float64, true),
        Field::new("name", DataType::Utf8, true),
    ]));
    let spec =
        eddy::connectors::ConnectorSpec::from_options(&schema, &source_options(SOURCE)).unwrap();
    batch_query(query, &schema, &spec).await
}

/// Runs `query` in DataFusion over every row the source makes, registered as `s`.
pub(crate) async fn batch_query(
    query: &str,
    schema: &arrow::datatypes::SchemaRef,
    spec: &eddy::connectors::ConnectorSpec,
) -> Vec<Vec<String>> {
    let mut batches = Vec::new();
    for split in 0..spec.split_count() {
        let mut reader = spec.split_reader(split, 0);
        while let Some(b) = reader.next_batch(4096).unwrap() {
            batches.push(b);
        }
    }
    // Literals with a fraction are exact numerics, and casts to integers round, as in
    // PostgreSQL (and Eddy).
    let ctx = SessionContext::new_with_config(
        datafusion::prelude::SessionConfig::new()
            .set_bool("datafusion.sql_parser.parse_float_as_decimal", true),
    );
    eddy::session::rounding_casts::install(&ctx);
    ctx.register_batch(
        "s",
        arrow::compute::concat_batches(schema, &batches).unwrap(),
    )
    .unwrap();
    let result = ctx.sql(query).await.unwrap().collect().await.unwrap();
    sorted_rows_text(&result)
}

/// Batch results as text rows (NULL as `NULL`, as the views print it), sorted.
pub(crate) fn sorted_rows_text(batches: &[arrow::array::RecordBatch]) -> Vec<Vec<String>> {
    let options = arrow::util::display::FormatOptions::default().with_null("NULL");
    let mut rows = Vec::new();
    for batch in batches {
        let formatters: Vec<_> = batch
            .columns()
            .iter()
            .map(|c| arrow::util::display::ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
            .collect();
        for r in 0..batch.num_rows() {
            rows.push(formatters.iter().map(|f| f.value(r).to_string()).collect());
        }
    }
    rows.sort();
    rows
}

/// Equal as values: numbers within a relative 1e-9 (floats print differently in
/// PostgreSQL's and Arrow's formats), booleans in either spelling, text exactly.
pub(crate) fn same_value(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    match (a, b) {
        ("t", "true") | ("f", "false") | ("true", "t") | ("false", "f") => return true,
        _ => {}
    }
    // Arrow prints timestamps as 2015-07-15T00:00:00.050, PostgreSQL as
    // 2015-07-15 00:00:00.05.
    // A UTC timestamp with time zone: Arrow ends it in Z, Eddy (as RisingWave) in
    // +00:00, PostgreSQL in +00.
    let timestamp = |s: &str| {
        let s = s.replace('T', " ");
        let utc = s
            .strip_suffix('Z')
            .or_else(|| s.strip_suffix("+00:00"))
            .or_else(|| s.strip_suffix("+00"));
        let (s, zone) = match utc {
            Some(utc) if utc.contains(':') => (utc.to_string(), "+00"),
            _ => (s.clone(), ""),
        };
        let s = if s.contains(':') && s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        };
        format!("{s}{zone}")
    };
    if timestamp(a) == timestamp(b) {
        return true;
    }
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0),
        _ => false,
    }
}

pub(crate) fn assert_same(view: &str, streamed: &[Vec<String>], batch: &[Vec<String>]) {
    assert_eq!(streamed.len(), batch.len(), "{view}: row counts differ");
    for (s, b) in streamed.iter().zip(batch) {
        assert!(
            s.len() == b.len() && s.iter().zip(b).all(|(x, y)| same_value(x, y)),
            "{view}: streamed row {s:?} differs from batch row {b:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_match_batch_results_and_survive_restart() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut server = TestServer::start_in(&data_dir);
    let client = server.connect().await;
    client.batch_execute(SOURCE).await.unwrap();
    for (name, query) in VIEWS {
        client
            .batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap_or_else(|e| panic!("creating {name}: {e}"));
    }
    wait_for_jobs(&client, VIEWS.len()).await;
    let mut expected = Vec::new();
    for (name, query) in VIEWS {
        let streamed = view_rows(&client, &format!("SELECT * FROM {name}")).await;
        let batch = batch_rows(query).await;
        assert!(!batch.is_empty(), "{name}: the batch query has rows");
        assert_same(name, &streamed, &batch);
        expected.push(streamed);
    }
    let jobs = view_rows(&client, "SELECT name, rows_read FROM eddy_catalog.jobs").await;
    assert!(
        jobs.iter().all(|j| j[1] == "20000"),
        "every job read the whole source: {jobs:?}"
    );

    // A restart recomputes every view: the same rows, nothing counted twice.
    server.kill();
    let server = TestServer::start_in(&data_dir);
    let client = server.connect().await;
    wait_for_jobs(&client, VIEWS.len()).await;
    for ((name, _), before) in VIEWS.iter().zip(&expected) {
        let after = view_rows(&client, &format!("SELECT * FROM {name}")).await;
        // Float sums may differ in their last digits: parallel subtasks add rows in
        // another order in each run.
        assert_same(&format!("{name} after restart"), &after, before);
    }

    // Dropping a view stops its job and frees its name.
    client
        .batch_execute("DROP MATERIALIZED VIEW grand_total")
        .await
        .unwrap();
    let jobs = view_rows(&client, "SELECT name FROM eddy_catalog.jobs").await;
    assert!(!jobs.iter().any(|j| j[0] == "grand_total"), "{jobs:?}");
    let err = client
        .simple_query("SELECT * FROM grand_total")
        .await
        .unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("42P01"));
}

const BIDS: &str = "CREATE SOURCE s (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, date_time TIMESTAMP,
    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) WITH (
    connector = 'nexmark',
    nexmark.table.type = 'Bid',
    nexmark.event.num = 30000,
    nexmark.split.num = 2)";

/// (view, query, the same query in plain DataFusion SQL where Eddy's differs).
const NEXMARK_VIEWS: &[(&str, &str, Option<&str>)] = &[
    // Nexmark q1: currency conversion.
    (
        "q1",
        "SELECT auction, bidder, CAST(0.908 * price AS BIGINT) AS price, date_time FROM s",
        None,
    ),
    // Nexmark q2: selection.
    (
        "q2",
        "SELECT auction, price FROM s WHERE auction % 123 = 0",
        None,
    ),
    (
        "bids_per_auction",
        "SELECT auction, count(*) AS n, max(price) AS top, min(date_time) AS first FROM s GROUP BY auction",
        None,
    ),
    (
        "per_channel",
        "SELECT channel, count(*) AS n, avg(price) AS mean FROM s GROUP BY channel HAVING count(*) > 10",
        None,
    ),
    // A tumbling-window count per auction.
    (
        "windowed",
        "SELECT auction, window_start, window_end, count(*) AS n FROM TUMBLE(s, date_time, INTERVAL '1' SECOND) GROUP BY auction, window_start, window_end",
        Some(TUMBLE_REFERENCE),
    ),
    // Hopping windows: every bid counts in the three 3-second windows that hold it.
    (
        "hopping",
        "SELECT window_start, count(*) AS n, max(price) AS top FROM HOP(s, date_time, INTERVAL '1' SECOND, INTERVAL '3' SECOND) GROUP BY window_start",
        Some(HOP_REFERENCE),
    ),
    // The same windows emitted once each, when the watermark closes them; the end of
    // the bounded source closes the last ones.
    (
        "windowed_eowc",
        "SELECT auction, window_start, window_end, count(*) AS n FROM TUMBLE(s, date_time, INTERVAL '1' SECOND) GROUP BY auction, window_start, window_end EMIT ON WINDOW CLOSE",
        Some(TUMBLE_REFERENCE),
    ),
    (
        "hopping_eowc",
        "SELECT window_start, count(*) AS n, max(price) AS top FROM HOP(s, date_time, INTERVAL '1' SECOND, INTERVAL '3' SECOND) GROUP BY window_start EMIT ON WINDOW CLOSE",
        Some(HOP_REFERENCE),
    ),
    // The same windows in Flink's syntax, emitted on close.
    (
        "windowed_flink",
        "SELECT auction, window_start, window_end, count(*) AS n \
         FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(date_time), INTERVAL '1' SECOND)) \
         GROUP BY auction, window_start, window_end EMIT ON WINDOW CLOSE",
        Some(TUMBLE_REFERENCE),
    ),
    // Cumulating windows (1 s steps up to 3 s), emitted when they close.
    (
        "cumulate_eowc",
        "SELECT auction, window_start, window_end, count(*) AS n \
         FROM CUMULATE(s, date_time, INTERVAL '1' SECOND, INTERVAL '3' SECOND) \
         GROUP BY auction, window_start, window_end EMIT ON WINDOW CLOSE",
        Some(CUMULATE_REFERENCE),
    ),
    // Nexmark q19: the ten highest bids of each auction (ties broken by every other
    // column, so that tied rows are identical and any choice among them gives the
    // same rows).
    (
        "q19",
        "SELECT * FROM (SELECT auction, bidder, price, date_time, ROW_NUMBER() OVER \
         (PARTITION BY auction ORDER BY price DESC, date_time, bidder) AS rank_number FROM s) \
         WHERE rank_number <= 10",
        None,
    ),
    // Nexmark q18-style dedup: each bidder's last bid per auction.
    (
        "last_bids",
        "SELECT auction, bidder, price, channel, date_time FROM (SELECT *, ROW_NUMBER() OVER \
         (PARTITION BY bidder, auction ORDER BY date_time DESC, price DESC, channel) AS rn FROM s) \
         WHERE rn = 1",
        None,
    ),
    // A global top five, and a top-N over an aggregate.
    (
        "top_bids",
        "SELECT auction, bidder, price, date_time FROM s \
         ORDER BY price DESC, auction, bidder, date_time LIMIT 5",
        None,
    ),
    (
        "hot_auctions",
        "SELECT auction, count(*) AS n FROM s GROUP BY auction ORDER BY n DESC, auction LIMIT 10 OFFSET 2",
        None,
    ),
];

const TUMBLE_REFERENCE: &str = "SELECT auction, date_bin(INTERVAL '1' SECOND, date_time, TIMESTAMP '1970-01-01 00:00:00') AS window_start, \
             date_bin(INTERVAL '1' SECOND, date_time, TIMESTAMP '1970-01-01 00:00:00') + INTERVAL '1' SECOND AS window_end, \
             count(*) AS n FROM s GROUP BY 1, 2, 3";

const CUMULATE_REFERENCE: &str = "SELECT auction, ws AS window_start, we AS window_end, count(*) AS n FROM ( \
             SELECT auction, date_bin(INTERVAL '3' SECOND, date_time, TIMESTAMP '1970-01-01 00:00:00') AS ws, \
               date_bin(INTERVAL '3' SECOND, date_time, TIMESTAMP '1970-01-01 00:00:00') + INTERVAL '1' SECOND AS we, date_time FROM s \
             UNION ALL SELECT auction, date_bin(INTERVAL '3' SECOND, date_time, TIMESTAMP '1970-01-01 00:00:00'), \
               date_bin(INTERVAL '3' SECOND, date_time, TIMESTAMP '1970-01-01 00:00:00') + INTERVAL '2' SECOND, date_time FROM s \
             UNION ALL SELECT auction, date_bin(INTERVAL '3' SECOND, date_time, TIMESTAMP '1970-01-01 00:00:00'), \
               date_bin(INTERVAL '3' SECOND, date_time, TIMESTAMP '1970-01-01 00:00:00') + INTERVAL '3' SECOND, date_time FROM s \
             ) w WHERE we > date_time GROUP BY auction, ws, we";

const HOP_REFERENCE: &str = "SELECT ws AS window_start, count(*) AS n, max(price) AS top FROM ( \
             SELECT date_bin(INTERVAL '1' SECOND, date_time, TIMESTAMP '1970-01-01 00:00:00') AS ws, price FROM s \
             UNION ALL SELECT date_bin(INTERVAL '1' SECOND, date_time, TIMESTAMP '1970-01-01 00:00:00') - INTERVAL '1' SECOND, price FROM s \
             UNION ALL SELECT date_bin(INTERVAL '1' SECOND, date_time, TIMESTAMP '1970-01-01 00:00:00') - INTERVAL '2' SECOND, price FROM s \
             ) w GROUP BY ws";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nexmark_views_match_batch_results_at_parallelism_1() {
    nexmark_views_match_batch_results(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nexmark_views_match_batch_results_at_parallelism_4() {
    nexmark_views_match_batch_results(4).await;
}

async fn nexmark_views_match_batch_results(parallelism: usize) {
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!("SET streaming_parallelism = {parallelism}"))
        .await
        .unwrap();
    client.batch_execute(BIDS).await.unwrap();
    for (name, query, _) in NEXMARK_VIEWS {
        client
            .batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap_or_else(|e| panic!("creating {name}: {e}"));
    }
    // Nexmark q0 (pass-through) into a blackhole sink: counted, not stored.
    client
        .batch_execute("CREATE SINK q0 AS SELECT auction, bidder, price, date_time FROM s WITH (connector = 'blackhole')")
        .await
        .unwrap();
    wait_for_jobs(&client, NEXMARK_VIEWS.len() + 1).await;
    let q0 = view_rows(
        &client,
        "SELECT rows_read, rows_written FROM eddy_catalog.jobs WHERE name = 'q0'",
    )
    .await;
    assert_eq!(q0, vec![vec!["27600".to_string(), "27600".to_string()]]);
    let schema = std::sync::Arc::new(Schema::new(vec![
        Field::new("auction", DataType::Int64, true),
        Field::new("bidder", DataType::Int64, true),
        Field::new("price", DataType::Int64, true),
        Field::new("channel", DataType::Utf8, true),
        Field::new(
            "date_time",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            true,
        ),
    ]));
    let spec =
        eddy::connectors::ConnectorSpec::from_options(&schema, &source_options(BIDS)).unwrap();
    for (name, query, reference) in NEXMARK_VIEWS {
        let streamed = view_rows(&client, &format!("SELECT * FROM {name}")).await;
        let batch = batch_query(reference.unwrap_or(query), &schema, &spec).await;
        assert!(!batch.is_empty(), "{name}: the batch query has rows");
        assert_same(
            &format!("{name} at parallelism {parallelism}"),
            &streamed,
            &batch,
        );
    }
    // 30000 events hold 27600 bids.
    let read = view_rows(
        &client,
        "SELECT rows_read FROM eddy_catalog.jobs WHERE name = 'q1'",
    )
    .await;
    assert_eq!(read, vec![vec!["27600".to_string()]]);
    // Each Nexmark split's events are in time order: nothing is late.
    let late = view_rows(&client, "SELECT DISTINCT late_rows FROM eddy_catalog.jobs").await;
    assert_eq!(late, vec![vec!["0".to_string()]]);
}

/// A JSON source's nested values land in `jsonb` (canonical text, strings as JSON
/// strings), struct and array columns; a value of the wrong shape makes its record
/// malformed, counted, not a failed job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_sources_read_nested_values_into_jsonb_struct_and_array_columns() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("nested.jsonl");
    std::fs::write(
        &json,
        concat!(
            "{\"id\": 1, \"payload\": {\"n\": [1,2], \"k\": \"a\"}, \"point\": {\"x\": 1, \"y\": 2}, \"tags\": [\"p\", \"q\"]}\n",
            "{\"id\": 2, \"payload\": \"just text\", \"point\": {\"x\": 3, \"y\": 4}, \"tags\": []}\n",
            "{\"id\": 3, \"payload\": {\"k\": \"c\"}, \"point\": \"not an object\", \"tags\": [\"r\"]}\n",
            "{\"id\": 4, \"payload\": null, \"point\": null, \"tags\": null}\n",
        ),
    )
    .unwrap();
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE nested (id INT, payload JSONB, point STRUCT<x INT, y INT>, tags VARCHAR[]) \
             WITH (connector = 'file', path = '{}') FORMAT PLAIN ENCODE JSON;
             CREATE MATERIALIZED VIEW flat AS
             SELECT id, payload, payload->>'k' AS k, (point).y AS y, point, tags FROM nested;",
            json.display()
        ))
        .await
        .unwrap();
    wait_for_jobs(&client, 1).await;
    let row = |cells: [&str; 6]| cells.iter().map(|c| c.to_string()).collect::<Vec<_>>();
    assert_eq!(
        view_rows(&client, "SELECT * FROM flat").await,
        vec![
            row([
                "1",
                r#"{"k": "a", "n": [1, 2]}"#,
                "a",
                "2",
                "(1,2)",
                "{p,q}"
            ]),
            row(["2", r#""just text""#, "NULL", "4", "(3,4)", "{}"]),
            row(["4", "NULL", "NULL", "NULL", "NULL", "NULL"]),
        ]
    );
    assert_eq!(
        view_rows(
            &client,
            "SELECT rows_read, malformed_rows FROM eddy_catalog.jobs WHERE name = 'flat'"
        )
        .await,
        vec![vec!["3".to_string(), "1".into()]]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_sources_skip_and_count_malformed_lines() {
    let dir = tempfile::tempdir().unwrap();
    let csv_dir = dir.path().join("csv");
    std::fs::create_dir(&csv_dir).unwrap();
    std::fs::write(
        csv_dir.join("a.csv"),
        "sensor,value\na,1.5\nb,2\nbad,not-a-number\n",
    )
    .unwrap();
    std::fs::write(
        csv_dir.join("b.csv"),
        "sensor,value\na,3.5\ntoo,many,fields\n\"c, quoted\",4\n",
    )
    .unwrap();
    let json = dir.path().join("events.jsonl");
    std::fs::write(&json, "{\"sensor\": \"a\", \"value\": 10}\n{broken json\n{\"sensor\": \"b\", \"value\": 1.25}\n[1, 2]\n").unwrap();

    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE readings (sensor VARCHAR, value DOUBLE PRECISION) \
             WITH (connector = 'file', path = '{}') FORMAT PLAIN ENCODE CSV;
             CREATE SOURCE events (sensor VARCHAR, value DOUBLE PRECISION) \
             WITH (connector = 'file', path = '{}') FORMAT PLAIN ENCODE JSON;
             CREATE MATERIALIZED VIEW totals AS SELECT sensor, sum(value) AS total, count(*) AS n FROM readings GROUP BY sensor;
             CREATE MATERIALIZED VIEW json_totals AS SELECT sensor, sum(value) AS total FROM events GROUP BY sensor;",
            csv_dir.display(),
            json.display()
        ))
        .await
        .unwrap();
    wait_for_jobs(&client, 2).await;
    assert_eq!(
        view_rows(&client, "SELECT * FROM totals").await,
        vec![
            vec!["a".to_string(), "5".into(), "2".into()],
            vec!["b".into(), "2".into(), "1".into()],
            vec!["c, quoted".into(), "4".into(), "1".into()],
        ]
    );
    assert_eq!(
        view_rows(&client, "SELECT * FROM json_totals").await,
        vec![
            vec!["a".to_string(), "10".into()],
            vec!["b".into(), "1.25".into()]
        ]
    );
    assert_eq!(
        view_rows(
            &client,
            "SELECT name, rows_read, malformed_rows FROM eddy_catalog.jobs"
        )
        .await,
        vec![
            vec!["json_totals".to_string(), "2".into(), "2".into()],
            vec!["totals".into(), "4".into(), "2".into()],
        ]
    );
    let err = client
        .batch_execute("CREATE SOURCE nofile (a INT) WITH (connector = 'file', path = '/nonexistent/x.csv') FORMAT PLAIN ENCODE CSV")
        .await
        .unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("22023"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_records_are_kept_as_dead_letters_once() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("readings.csv");
    // 3000 lines; every 97th has a value that is not a number, every 101st a field too
    // many.
    let mut text = String::from("sensor,value\n");
    let mut bad = Vec::new();
    let mut sum = 0.0;
    for i in 0..3000 {
        let line = if i % 97 == 5 {
            format!("s{},x{i}", i % 7)
        } else if i % 101 == 7 {
            format!("s{},{i},extra", i % 7)
        } else {
            sum += i as f64 / 4.0;
            format!("s{},{}", i % 7, i as f64 / 4.0)
        };
        if i % 97 == 5 || i % 101 == 7 {
            bad.push(line.clone());
        }
        text.push_str(&line);
        text.push('\n');
    }
    std::fs::write(&csv, text).unwrap();
    let json = dir.path().join("events.jsonl");
    std::fs::write(&json, "{\"sensor\": \"a\", \"value\": 10}\n{broken json\n").unwrap();

    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut server = TestServer::start_in(&data_dir);
    let client = server.connect().await;
    let error = client
        .batch_execute(&format!(
            "CREATE SOURCE nope (sensor VARCHAR) WITH (connector = 'file', path = '{}', \
             error.policy = 'keep') FORMAT PLAIN ENCODE CSV",
            csv.display()
        ))
        .await
        .unwrap_err();
    assert_eq!(error.code().map(|c| c.code()), Some("22023"));
    assert!(
        error
            .as_db_error()
            .unwrap()
            .message()
            .contains("error.policy must be 'skip' or 'dead_letter'")
    );
    client
        .batch_execute(&format!(
            "CREATE SOURCE readings (sensor VARCHAR, value DOUBLE PRECISION) \
             WITH (connector = 'file', path = '{}', error.policy = 'dead_letter') FORMAT PLAIN ENCODE CSV;
             CREATE SOURCE events (sensor VARCHAR, value DOUBLE PRECISION) \
             WITH (connector = 'file', path = '{}') FORMAT PLAIN ENCODE JSON;
             CREATE MATERIALIZED VIEW total AS SELECT sum(value) AS total, count(*) AS n FROM readings;
             CREATE MATERIALIZED VIEW json_total AS SELECT sum(value) AS total FROM events;",
            csv.display(),
            json.display()
        ))
        .await
        .unwrap();
    wait_for_jobs(&client, 2).await;
    client.batch_execute("FLUSH").await.unwrap();
    let good = 3000 - bad.len();
    assert_eq!(
        view_rows(&client, "SELECT total, n FROM total").await,
        vec![vec![sum.to_string(), good.to_string()]]
    );
    let letters =
        "SELECT job, source, record, error FROM eddy_catalog.dead_letters ORDER BY split, position";
    let check = |rows: Vec<Vec<String>>| {
        assert_eq!(
            rows.len(),
            bad.len(),
            "one letter per malformed line: {rows:?}"
        );
        let mut records: Vec<String> = rows.iter().map(|r| r[2].clone()).collect();
        let mut expected = bad.clone();
        records.sort();
        expected.sort();
        assert_eq!(records, expected);
        assert!(rows.iter().all(|r| r[0] == "total" && r[1] == "readings"));
        let why = |record: &str| rows.iter().find(|r| r[2] == record).unwrap()[3].clone();
        assert_eq!(
            why("s5,x5"),
            "column \"value\": 'x5' is not a valid double precision"
        );
        assert_eq!(why("s0,7,extra"), "not a CSV line of 2 fields");
    };
    check(view_rows(&client, letters).await);
    let malformed = view_rows(
        &client,
        "SELECT name, malformed_rows FROM eddy_catalog.jobs ORDER BY name",
    )
    .await;
    assert_eq!(
        malformed,
        vec![
            vec!["json_total".to_string(), "1".into()],
            vec!["total".into(), bad.len().to_string()],
        ]
    );
    // After a SIGKILL the letters are those of the checkpoint: none lost, none twice.
    server.kill();
    let server = TestServer::start_in(&data_dir);
    let client = server.connect().await;
    client.batch_execute("FLUSH").await.unwrap();
    check(view_rows(&client, letters).await);
    // Dropping the view drops its letters.
    client
        .batch_execute("DROP MATERIALIZED VIEW total")
        .await
        .unwrap();
    assert!(view_rows(&client, letters).await.is_empty());
}

/// Polls `sql` until it returns `expected`.
pub(crate) async fn wait_for_rows(
    client: &tokio_postgres::Client,
    sql: &str,
    expected: &[Vec<String>],
) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let rows = view_rows(client, sql).await;
        if rows == expected {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{sql}: {rows:?}, expected {expected:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
