//! The parallel dataflow under load: backpressure from a slow sink reaches the source
//! (also through a view the sink reads),
//! and views over a table that is inserted into, updated and deleted from — in batches
//! of random sizes — equal the same queries computed in batch, at parallelism 1 and 4.

use crate::common::TestServer;
use crate::streaming::{assert_same, view_rows};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::Duration;

async fn job_counters(client: &tokio_postgres::Client, job: &str) -> (i64, i64) {
    let row = client
        .query_one(
            "SELECT rows_read, rows_written FROM eddy_catalog.jobs WHERE name = $1",
            &[&job],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

fn resident_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc status")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_sink_slows_the_source_and_memory_stays_bounded() {
    let server = TestServer::start();
    let client = server.connect().await;
    // Two source subtasks (splits) feed one sink subtask through a rebalance exchange;
    // the sink takes 2000 rows a second, the generator could make millions.
    client
        .batch_execute(
            "SET streaming_parallelism = 1;
             CREATE SOURCE fast (id BIGINT, v INT) WITH (
                 connector = 'datagen', fields.id.kind = 'sequence',
                 fields.v.min = 1, fields.v.max = 100, datagen.split.num = 2,
                 datagen.rows.per.second = 0);
             CREATE SINK slow AS SELECT id, v FROM fast
                 WITH (connector = 'blackhole', blackhole.rows.per.second = 2000);",
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (read_1, _) = job_counters(&client, "slow").await;
    let rss_1 = resident_kb(server.pid());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (read_2, written_2) = job_counters(&client, "slow").await;
    let rss_2 = resident_kb(server.pid());

    // The source reads at the sink's pace (about 6000 rows in 3 s), not the generator's.
    let read = read_2 - read_1;
    assert!(read > 0, "the source keeps reading");
    assert!(
        read < 30_000,
        "source read {read} rows in 3 s behind a 2000 rows/s sink"
    );
    // Rows in flight are bounded by the channels: 2 channels x (8 messages + one batch
    // being sent) x 1024 rows, plus one batch per source subtask being read.
    let in_flight = read_2 - written_2;
    assert!(
        in_flight <= 2 * 9 * 1024 + 2 * 1024,
        "{in_flight} rows read but not yet written"
    );
    assert!(
        rss_2 < rss_1 + 50 * 1024,
        "memory grew from {rss_1} kB to {rss_2} kB"
    );
    // The source tasks spend their time waiting on the full channel.
    let rows = client
        .query(
            "SELECT subtask, backpressured, busy FROM eddy_catalog.tasks
             WHERE job = 'slow' AND fragment = 0 ORDER BY subtask",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 2, "one source task per split");
    for r in rows {
        let backpressured: f64 = r.get(1);
        assert!(
            backpressured > 0.5,
            "source subtask {} backpressured only {backpressured}",
            r.get::<_, i32>(0)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_reader_of_a_view_slows_the_view() {
    let server = TestServer::start();
    let client = server.connect().await;
    // A view over a generator of 100 000 rows a second, read by a sink that takes 2000: the
    // view's subtasks wait for the sink at their barrier, so the view's source stops
    // reading instead of the view's changes queueing up in front of the sink.
    client
        .batch_execute(
            "SET streaming_parallelism = 2;
             CREATE SOURCE fast (id BIGINT, v INT) WITH (
                 connector = 'datagen', fields.id.kind = 'sequence',
                 fields.v.min = 1, fields.v.max = 100, datagen.split.num = 2,
                 datagen.rows.per.second = 100000);
             CREATE MATERIALIZED VIEW mid AS SELECT id, v FROM fast WHERE v > 0;
             CREATE SINK slow AS SELECT id, v FROM mid
                 WITH (connector = 'blackhole', blackhole.rows.per.second = 2000);",
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (read_1, _) = job_counters(&client, "mid").await;
    let rss_1 = resident_kb(server.pid());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (read_2, _) = job_counters(&client, "mid").await;
    let (_, sunk) = job_counters(&client, "slow").await;
    let rss_2 = resident_kb(server.pid());
    assert!(read_1 > 0, "the view read its source");
    assert!(sunk > 0, "the sink reads the view");
    // The first epoch's rows are still draining into the sink: the view's source is
    // held back (at most its channels' worth of rows: 2 x 9 x 1024, plus a batch each),
    // where without backpressure it would read 300 000.
    let read = read_2 - read_1;
    assert!(
        read < 30_000,
        "the view read {read} rows in 3 s behind a 2000 rows/s reader"
    );
    assert!(
        rss_2 < rss_1 + 50 * 1024,
        "memory grew from {rss_1} kB to {rss_2} kB"
    );
    // The view's last subtasks spend their time waiting for the sink.
    let rows = view_rows(
        &client,
        "SELECT subtask, backpressured FROM eddy_catalog.tasks
         WHERE job = 'mid' AND operators LIKE '%Materialize' ORDER BY subtask",
    )
    .await;
    assert_eq!(rows.len(), 2, "the view runs two subtasks: {rows:?}");
    assert!(
        rows.iter().any(|r| r[1].parse::<f64>().unwrap() > 0.3),
        "the view's subtasks were not held back: {rows:?}"
    );
    // Its reader reads the view with two subtasks, one per share of its keys.
    let readers = view_rows(
        &client,
        "SELECT count(*) FROM eddy_catalog.tasks WHERE job = 'slow' AND operators LIKE 'Changes%'",
    )
    .await;
    assert_eq!(readers[0][0], "2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inserts_wait_for_a_slow_reader_of_their_table() {
    let server = TestServer::start();
    let client = server.connect().await;
    // A sink reading the table at 2000 rows a second; INSERTs of 1000 rows each.
    client
        .batch_execute(
            "SET streaming_parallelism = 1;
             CREATE TABLE t (id BIGINT PRIMARY KEY, v INT);
             CREATE SINK slow AS SELECT id, v FROM t
                 WITH (connector = 'blackhole', blackhole.rows.per.second = 2000);",
        )
        .await
        .unwrap();
    let statements = 30;
    for i in 0..statements {
        client
            .batch_execute(&format!(
                "INSERT INTO t SELECT {i} * 1000 + x, x FROM generate_series(1, 1000) AS s(x)"
            ))
            .await
            .unwrap();
    }
    // When the last INSERT returns, the sink has read all but a few statements' rows
    // (without the wait it would have read one or two of the 30 000).
    let (read, _) = job_counters(&client, "slow").await;
    let behind = statements * 1000 - read;
    assert!(
        behind <= 12 * 1000,
        "the sink is {behind} rows behind the INSERTs that returned"
    );
}

/// Views over `t` (and over each other); each is compared with the same query run as a
/// batch `SELECT` over the table's final rows.
const TABLE_VIEWS: &[(&str, &str)] = &[
    ("v_all", "SELECT id, k, g, v, n FROM t"),
    (
        "v_filter",
        "SELECT id, v * 2 AS v2, upper(g) AS g FROM t WHERE k % 3 = 1",
    ),
    ("v_count", "SELECT k, count(*) AS c FROM t GROUP BY k"),
    (
        "v_sum",
        "SELECT g, sum(n) AS s, count(v) AS cv, avg(v) AS a FROM t GROUP BY g",
    ),
    (
        "v_minmax",
        "SELECT k, min(v) AS lo, max(v) AS hi, min(g) AS first_g FROM t GROUP BY k",
    ),
    (
        "v_distinct_count",
        "SELECT k, count(DISTINCT g) AS dg FROM t GROUP BY k",
    ),
    (
        "v_global",
        "SELECT count(*) AS c, sum(n) AS s, max(v) AS hi, min(id) AS lo FROM t",
    ),
    (
        "v_having",
        "SELECT g, count(*) AS c FROM t GROUP BY g HAVING count(*) > 20",
    ),
    (
        "v_two_keys",
        "SELECT k, g, sum(v) AS s FROM t GROUP BY k, g",
    ),
    (
        "v_expr_key",
        "SELECT n % 5 AS bucket, count(*) AS c, sum(k) AS sk FROM t GROUP BY n % 5",
    ),
    ("v_distinct", "SELECT DISTINCT g FROM t"),
    (
        "v_case",
        "SELECT CASE WHEN v > 50 THEN 'high' ELSE 'low' END AS level, count(*) AS c FROM t GROUP BY 1",
    ),
    (
        "v_union",
        "SELECT id, k FROM t WHERE k < 3 UNION ALL SELECT id, k FROM t WHERE k > 5",
    ),
    (
        "v_union_aggs",
        "SELECT k AS key, count(*) AS c FROM t GROUP BY k UNION ALL SELECT n % 3 AS key, count(*) AS c FROM t GROUP BY n % 3",
    ),
    (
        "v_subquery",
        "SELECT g, total FROM (SELECT g, sum(n) AS total FROM t GROUP BY g) AS x WHERE total > 100",
    ),
    // Views on views.
    (
        "v_on_count",
        "SELECT c, count(*) AS keys FROM v_count GROUP BY c",
    ),
    ("v_on_global", "SELECT c * 2 AS twice FROM v_global"),
    (
        "v_on_minmax",
        "SELECT max(hi) AS top, min(lo) AS bottom FROM v_minmax",
    ),
    (
        "v_on_union",
        "SELECT key, sum(c) AS c FROM v_union_aggs GROUP BY key",
    ),
    (
        "v_on_filter",
        "SELECT g, count(*) AS c FROM v_filter GROUP BY g",
    ),
];

/// Random writes: inserts in batches of random size, updates and deletes of random rows.
async fn random_writes(client: &tokio_postgres::Client, rng: &mut StdRng, rounds: usize) {
    let groups = ["a", "b", "c", "d", "e", "f"];
    let mut next_id = 0;
    for _ in 0..rounds {
        match rng.random_range(0..10) {
            0..=5 => {
                let rows = rng.random_range(1..60);
                let values: Vec<String> = (0..rows)
                    .map(|_| {
                        next_id += 1;
                        let v = if rng.random_range(0..10) == 0 {
                            "NULL".to_string()
                        } else {
                            format!("{:.2}", rng.random_range(0.0..100.0))
                        };
                        format!(
                            "({next_id}, {}, '{}', {v}, {})",
                            rng.random_range(0..8),
                            groups[rng.random_range(0..groups.len())],
                            rng.random_range(0..1000)
                        )
                    })
                    .collect();
                client
                    .batch_execute(&format!("INSERT INTO t VALUES {}", values.join(", ")))
                    .await
                    .unwrap();
            }
            6 | 7 => {
                let k = rng.random_range(0..8);
                let g = groups[rng.random_range(0..groups.len())];
                client
                    .batch_execute(&format!(
                        "UPDATE t SET v = v + 1, g = '{g}', n = n + 7 WHERE k = {k} AND id % 4 = {}",
                        rng.random_range(0..4)
                    ))
                    .await
                    .unwrap();
            }
            8 => {
                client
                    .batch_execute(&format!(
                        "DELETE FROM t WHERE id % 7 = {} AND k = {}",
                        rng.random_range(0..7),
                        rng.random_range(0..8)
                    ))
                    .await
                    .unwrap();
            }
            _ => {
                // Upsert over existing keys.
                let id = rng.random_range(1..=next_id.max(1));
                client
                    .batch_execute(&format!(
                        "INSERT INTO t VALUES ({id}, {}, 'f', 1.5, 3)",
                        rng.random_range(0..8)
                    ))
                    .await
                    .unwrap();
            }
        }
    }
}

async fn table_views_match_batch(parallelism: usize, seed: u64) {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut server = TestServer::start_in(&data_dir);
    let client = server.connect().await;
    let mut rng = StdRng::seed_from_u64(seed);
    client
        .batch_execute(&format!(
            "SET streaming_parallelism = {parallelism};
             CREATE TABLE t (id INT PRIMARY KEY, k INT, g VARCHAR, v DOUBLE, n BIGINT);"
        ))
        .await
        .unwrap();
    // Some rows exist before the views: they start from them.
    random_writes(&client, &mut rng, 20).await;
    for (name, query) in TABLE_VIEWS {
        client
            .batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap_or_else(|e| panic!("creating {name}: {e}"));
    }
    random_writes(&client, &mut rng, 120).await;
    client.batch_execute("FLUSH").await.unwrap();
    let rows = view_rows(&client, "SELECT count(*) FROM t").await;
    let rows: usize = rows[0][0].parse().unwrap();
    assert!(rows > 500, "the table holds {rows} rows after the writes");
    for (name, query) in TABLE_VIEWS {
        let streamed = view_rows(&client, &format!("SELECT * FROM {name}")).await;
        let batch = view_rows(&client, query).await;
        assert!(!batch.is_empty(), "{name}: the batch query has rows");
        assert_same(
            &format!("{name} at parallelism {parallelism}"),
            &streamed,
            &batch,
        );
    }
    let failed = view_rows(
        &client,
        "SELECT name, error FROM eddy_catalog.jobs WHERE state <> 'running'",
    )
    .await;
    assert!(failed.is_empty(), "jobs stopped: {failed:?}");

    // After a crash every view is recomputed from the table's rows (views on views in
    // creation order) and follows new writes again.
    server.kill();
    let server = TestServer::start_in(&data_dir);
    let client = server.connect().await;
    random_writes(&client, &mut rng, 30).await;
    client.batch_execute("FLUSH").await.unwrap();
    for (name, query) in TABLE_VIEWS {
        let streamed = view_rows(&client, &format!("SELECT * FROM {name}")).await;
        let batch = view_rows(&client, query).await;
        assert_same(
            &format!("{name} after a restart at parallelism {parallelism}"),
            &streamed,
            &batch,
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_views_match_batch_at_parallelism_1() {
    table_views_match_batch(1, 7).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_views_match_batch_at_parallelism_4() {
    table_views_match_batch(4, 11).await;
}
