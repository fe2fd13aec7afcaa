//! The bounded state cache (`--state-cache-mb`): aggregates with far more groups than fit
//! in the cache evict clean groups to RocksDB and read them back when their key comes
//! again. Results must equal DataFusion's batch result over the same rows — also across a
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
const VIEWS: &[(&str, &str, &str)] = &[
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
async fn run_to_end(client: &tokio_postgres::Client, mut peak: i64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        peak = peak.max(cache_figures(client).await.0);
        let jobs = view_rows(client, "SELECT name, state, error FROM eddy_catalog.jobs").await;
        for j in &jobs {
            assert_ne!(j[1], "failed", "job {} failed: {}", j[0], j[2]);
        }
        if VIEWS
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
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let args = ["--state-cache-mb", "1", "--barrier-interval-ms", "200"];
    let mut server = TestServer::start_in_with_args(&data_dir, &args);
    let client = server.connect().await;
    client
        .batch_execute(&format!("SET streaming_parallelism = 2; {ROWS}"))
        .await
        .unwrap();
    for (name, query, _) in VIEWS {
        client
            .batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap();
    }
    let limit = view_rows(&client, "SELECT limit_bytes FROM eddy_catalog.state_cache").await;
    assert_eq!(limit, vec![vec![LIMIT_BYTES.to_string()]]);

    // Half-way, the cache is full and groups come back from RocksDB; then a SIGKILL.
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
            "no group was evicted and read back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.kill();
    server = TestServer::start_in_with_args(&data_dir, &args);
    let client = server.connect().await;
    let peak = run_to_end(&client, peak).await;

    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int32, true),
    ]));
    let spec =
        eddy::connectors::ConnectorSpec::from_options(&schema, &source_options(ROWS)).unwrap();
    for (name, _, reference) in VIEWS {
        let streamed = view_rows(&client, &format!("SELECT * FROM {name}")).await;
        let expected = batch_query(reference, &schema, &spec).await;
        assert_same(name, &streamed, &expected);
    }
    // The cache held its limit, a quarter more before sources hold off, and the groups
    // of the chunks in flight (4 exchange channels of 8 chunks of ~512 rows, ~700 bytes a
    // group: ~12 MB) — not the ~100 MB all groups take.
    let groups = view_rows(&client, "SELECT count(*) FROM per_k").await[0][0]
        .parse::<i64>()
        .unwrap();
    assert!(groups > 100_000, "{groups} groups");
    eprintln!("{groups} groups; the state cache peaked at {peak} bytes");
    assert!(
        peak < 16 << 20,
        "the cache grew to {peak} bytes with a limit of {LIMIT_BYTES}"
    );
    let (_, evictions, loads) = cache_figures(&client).await;
    assert!(
        evictions > 0 && loads > 0,
        "after the restart groups were evicted ({evictions}) and read back ({loads})"
    );
}
