//! The bounded state cache (`--state-cache-mb`): aggregates with far more groups than fit
//! in the cache evict clean groups to RocksDB and read them back when their key comes
//! again; joins do the same with the rows of their join keys, top-N with its partitions. Results must equal DataFusion's batch result over the same rows — also across a
//! SIGKILL in the middle — while the cache's memory stays near its limit.

use crate::common::TestServer;
use crate::streaming::{assert_same, batch_query, source_options, view_rows};
use arrow::datatypes::{DataType, Field, Schema};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// 240000 rows over 200000 keys: about 140000 groups, each several hundred bytes in
/// memory (three value maps) — some 100 MB of state against a 1 MB cache.
const ROWS: &str = "CREATE SOURCE gen (id BIGINT, k BIGINT, v INT) WITH (
    connector = 'datagen',
    fields.id.kind = 'sequence', fields.id.start = 1, fields.id.end = 240000,
    fields.k.min = 1, fields.k.max = 200000, fields.k.seed = 5,
    fields.v.min = 0, fields.v.max = 50, fields.v.seed = 9,
    datagen.split.num = 2,
    datagen.rows.per.second = 60000)";

/// (view, query, the batch query to compare with).
type View = (&'static str, &'static str, &'static str);

const VIEWS: &[View] = &[
    (
        "per_k",
        "SELECT k, count(*) AS n, sum(v) AS total, min(v) AS lo, max(v) AS hi, count(DISTINCT v) AS vs FROM gen GROUP BY k",
        "SELECT k, count(*) AS n, sum(v) AS total, min(v) AS lo, max(v) AS hi, count(DISTINCT v) AS vs FROM s GROUP BY k",
    ),
    // Over a view: every update of `per_k` retracts a row here, from groups that may
    // have been evicted.
    (
        "count_histogram",
        "SELECT n, count(*) AS keys, sum(total) AS total FROM per_k GROUP BY n",
        "SELECT n, count(*) AS keys, sum(total) AS total FROM (SELECT k, count(*) AS n, sum(v) AS total FROM s GROUP BY k) GROUP BY n",
    ),
];

const LIMIT_BYTES: i64 = 1 << 20;

async fn cache_figures(client: &tokio_postgres::Client) -> (i64, i64, i64) {
    let row = view_rows(
        client,
        "SELECT used_bytes, evictions, loads FROM eddy_catalog.state_cache",
    )
    .await;
    let n = |i: usize| row[0][i].parse::<i64>().unwrap();
    (n(0), n(1), n(2))
}

/// Polls until every view's job has finished; returns the largest cache use seen.
async fn run_to_end(client: &tokio_postgres::Client, views: &[View], mut peak: i64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        peak = peak.max(cache_figures(client).await.0);
        let jobs = view_rows(client, "SELECT name, state, error FROM eddy_catalog.jobs").await;
        for j in &jobs {
            assert_ne!(j[1], "failed", "job {} failed: {}", j[0], j[2]);
        }
        if views
            .iter()
            .all(|(name, ..)| jobs.iter().any(|j| j[0] == *name && j[1] == "finished"))
        {
            return peak;
        }
        assert!(Instant::now() < deadline, "jobs did not finish: {jobs:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_beyond_the_cache_are_evicted_and_read_back_exactly() {
    let (groups, peak) = evicted_and_read_back(ROWS, VIEWS, "per_k").await;
    assert!(groups > 100_000, "{groups} groups");
    eprintln!("{groups} groups; the state cache peaked at {peak} bytes");
    // The cache held its limit, a quarter more before sources hold off, and the groups
    // of the chunks in flight (4 exchange channels of 8 chunks of ~512 rows, ~700 bytes a
    // group: ~12 MB) — not the ~100 MB all groups take.
    assert!(
        peak < 16 << 20,
        "the cache grew to {peak} bytes with a limit of {LIMIT_BYTES}"
    );
}

/// 120000 rows over 100000 keys, joined with themselves: each side holds every row
/// (some 30 MB in memory) against a 1 MB cache.
const JOIN_ROWS: &str = "CREATE SOURCE gen (id BIGINT, k BIGINT, v INT) WITH (
    connector = 'datagen',
    fields.id.kind = 'sequence', fields.id.start = 1, fields.id.end = 120000,
    fields.k.min = 1, fields.k.max = 100000, fields.k.seed = 3,
    fields.v.min = 0, fields.v.max = 50, fields.v.seed = 4,
    datagen.split.num = 2,
    datagen.rows.per.second = 40000)";

const JOIN_VIEWS: &[View] = &[(
    "pairs",
    "SELECT a.k, count(*) AS pairs, sum(a.v * b.v) AS products FROM gen a JOIN gen b ON a.k = b.k GROUP BY a.k",
    "SELECT a.k, count(*) AS pairs, sum(a.v * b.v) AS products FROM s a JOIN s b ON a.k = b.k GROUP BY a.k",
)];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_rows_beyond_the_cache_are_evicted_and_read_back_exactly() {
    let (keys, peak) = evicted_and_read_back(JOIN_ROWS, JOIN_VIEWS, "pairs").await;
    assert!(keys > 60_000, "{keys} join keys");
    eprintln!("{keys} join keys; the state cache peaked at {peak} bytes");
    // The limit, a quarter more, and the join rows and groups of the chunks in flight —
    // not the ~45 MB the join's two sides and the aggregate's groups take.
    assert!(
        peak < 24 << 20,
        "the cache grew to {peak} bytes with a limit of {LIMIT_BYTES}"
    );
}

/// A top-N over an updating input (each key's count changes as its rows come): some
/// 40000 partitions of about five keys each, evicted whole and read back, winners
/// replaced as counts change. Partitions are keyed by text and ranked by an integer, a
/// decimal and a text, so the evicted state is read back in the order of each type's
/// encoding.
const TOP_N_VIEWS: &[View] = &[(
    "leaders",
    "SELECT b, name, n, w FROM (SELECT b, name, n, w, row_number() OVER (PARTITION BY b ORDER BY n DESC, w DESC, name) AS rn FROM (SELECT 'p' || (k % 40000)::varchar AS b, 'k' || k::varchar AS name, count(*) AS n, sum(v) * 1.5 AS w FROM gen GROUP BY k) g) r WHERE rn <= 2",
    "SELECT b, name, n, w FROM (SELECT b, name, n, w, row_number() OVER (PARTITION BY b ORDER BY n DESC, w DESC, name) AS rn FROM (SELECT 'p' || (k % 40000)::varchar AS b, 'k' || k::varchar AS name, count(*) AS n, sum(v) * 1.5 AS w FROM s GROUP BY k) g) r WHERE rn <= 2",
)];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_n_partitions_beyond_the_cache_are_evicted_and_read_back_exactly() {
    let (rows, peak) = evicted_and_read_back(ROWS, TOP_N_VIEWS, "leaders").await;
    assert!(rows > 70_000, "{rows} rows shown");
    eprintln!("{rows} top-N rows; the state cache peaked at {peak} bytes");
    assert!(
        peak < 24 << 20,
        "the cache grew to {peak} bytes with a limit of {LIMIT_BYTES}"
    );
}

/// Runs `views` over the rows of `source` with a 1 MB state cache, SIGKILLs the server
/// once state has been evicted and read back, and checks every view against DataFusion's
/// batch result after the restart. Returns the rows of `counted` and the cache's peak.
async fn evicted_and_read_back(source: &str, views: &[View], counted: &str) -> (i64, i64) {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let args = ["--state-cache-mb", "1", "--barrier-interval-ms", "200"];
    let mut server = TestServer::start_in_with_args(&data_dir, &args);
    let client = server.connect().await;
    client
        .batch_execute(&format!("SET streaming_parallelism = 2; {source}"))
        .await
        .unwrap();
    for (name, query, _) in views {
        client
            .batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap();
    }
    let limit = view_rows(&client, "SELECT limit_bytes FROM eddy_catalog.state_cache").await;
    assert_eq!(limit, vec![vec![LIMIT_BYTES.to_string()]]);

    // Half-way, the cache is full and state comes back from RocksDB; then a SIGKILL.
    let mut peak = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (used, evictions, loads) = cache_figures(&client).await;
        peak = peak.max(used);
        if evictions > 0 && loads > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "nothing was evicted and read back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.kill();
    server = TestServer::start_in_with_args(&data_dir, &args);
    let client = server.connect().await;
    let peak = run_to_end(&client, views, peak).await;

    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int32, true),
    ]));
    let spec =
        eddy::connectors::ConnectorSpec::from_options(&schema, &source_options(source)).unwrap();
    for (name, _, reference) in views {
        let streamed = view_rows(&client, &format!("SELECT * FROM {name}")).await;
        let expected = batch_query(reference, &schema, &spec).await;
        assert_same(name, &streamed, &expected);
    }
    let (_, evictions, loads) = cache_figures(&client).await;
    assert!(
        evictions > 0 && loads > 0,
        "after the restart state was evicted ({evictions}) and read back ({loads})"
    );
    let rows = view_rows(&client, &format!("SELECT count(*) FROM {counted}")).await[0][0]
        .parse::<i64>()
        .unwrap();
    (rows, peak)
}
