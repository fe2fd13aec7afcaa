//! Views with joins, subqueries (correlated and not), top-N, dedup, window functions over partitions, set
//! operations and recomputed aggregates over two tables that are both inserted into,
//! updated and deleted from at random: each equals its query run in batch, at
//! parallelism 1 and 4, and again after the server is killed and restarted.

use crate::common::TestServer;
use crate::streaming::{assert_same, view_rows};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// (name, query) over `t (id, k, g, v, n)` and `u (id, k, w, at, tag)`. Orders that
/// could tie are broken by ids, so any correct engine gives the same rows.
const VIEWS: &[(&str, &str)] = &[
    // Joins.
    (
        "j_inner",
        "SELECT t.id, u.id AS uid, t.n, u.w FROM t JOIN u ON t.k = u.k WHERE t.id % 7 = 0",
    ),
    (
        "j_left",
        "SELECT t.id, u.id AS uid, u.w FROM t LEFT JOIN u ON t.id = u.id",
    ),
    (
        "j_right",
        "SELECT t.id AS tid, u.id, u.tag FROM t RIGHT JOIN u ON t.id = u.id AND t.k = u.k",
    ),
    (
        "j_full",
        "SELECT t.id AS tid, u.id AS uid, t.g, u.tag FROM t FULL JOIN u ON t.id = u.id AND t.g = u.tag",
    ),
    (
        "j_non_equi",
        "SELECT t.id, u.id AS uid FROM t JOIN u ON t.id = u.id AND t.n > u.w * 10",
    ),
    (
        "j_agg",
        "SELECT t.k, count(*) AS c, sum(u.w) AS s, max(u.at) AS latest FROM t JOIN u ON t.k = u.k AND t.g = u.tag GROUP BY t.k",
    ),
    (
        "j_three",
        "SELECT a.id, b.id AS bid, c.id AS cid FROM t a JOIN u b ON a.id = b.id JOIN t c ON c.id = b.k + 1",
    ),
    (
        "j_self",
        "SELECT a.id, b.id AS bid FROM t a JOIN t b ON a.k = b.k AND a.g = b.g AND a.id < b.id AND a.n < b.n",
    ),
    (
        "j_where",
        "SELECT t.id, u.id AS uid FROM t, u WHERE t.id = u.k * 10",
    ),
    (
        "j_on_aggs",
        "SELECT x.k, x.c, y.cu, y.total FROM (SELECT k, count(*) AS c FROM t GROUP BY k) x \
         JOIN (SELECT k, count(*) AS cu, sum(w) AS total FROM u GROUP BY k) y ON x.k = y.k",
    ),
    // Subqueries.
    (
        "s_exists",
        "SELECT id, k FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.id = t.id)",
    ),
    (
        "s_not_exists",
        "SELECT id FROM t WHERE NOT EXISTS (SELECT 1 FROM u WHERE u.k = t.k AND u.tag = t.g)",
    ),
    (
        "s_in",
        "SELECT id FROM t WHERE k IN (SELECT k FROM u WHERE w > 50)",
    ),
    (
        "s_not_in",
        "SELECT id FROM t WHERE id NOT IN (SELECT id FROM u)",
    ),
    (
        "s_correlated",
        "SELECT id, n, (SELECT count(*) FROM u WHERE u.k = t.k AND u.tag = t.g) AS matches, \
           (SELECT max(w) FROM u WHERE u.k = t.k) AS top FROM t",
    ),
    (
        "s_uncorrelated",
        "SELECT id, n, n - (SELECT max(w) FROM u) AS below_max FROM t WHERE n > (SELECT avg(w) * 10 FROM u)",
    ),
    // Top-N and dedup.
    ("n_top", "SELECT id, n FROM t ORDER BY n DESC, id LIMIT 10"),
    (
        "n_top_offset",
        "SELECT id, w FROM u ORDER BY w NULLS FIRST, id LIMIT 5 OFFSET 3",
    ),
    (
        "n_group_top",
        "SELECT id, k, n FROM (SELECT id, k, n, ROW_NUMBER() OVER (PARTITION BY k ORDER BY n DESC, id) AS rn FROM t) x WHERE rn <= 3",
    ),
    (
        "n_rank",
        "SELECT id, g, rk FROM (SELECT id, g, RANK() OVER (PARTITION BY g ORDER BY k) AS rk FROM t) x WHERE rk <= 2",
    ),
    (
        "n_dense_rank",
        "SELECT id, tag, dr FROM (SELECT id, tag, DENSE_RANK() OVER (PARTITION BY tag ORDER BY w DESC) AS dr FROM u) x WHERE dr <= 2",
    ),
    (
        "d_last_per_group",
        "SELECT id, k, g FROM (SELECT id, k, g, ROW_NUMBER() OVER (PARTITION BY g ORDER BY id DESC) AS rn FROM t) x WHERE rn = 1",
    ),
    (
        "d_distinct_on",
        "SELECT DISTINCT ON (k) k, id, w FROM u ORDER BY k, id",
    ),
    (
        "n_top_of_join",
        "SELECT t.id, u.w FROM t JOIN u ON t.id = u.id ORDER BY u.w DESC NULLS LAST, t.id LIMIT 7",
    ),
    // Window functions over partitions.
    (
        "o_lag",
        "SELECT id, k, n, lag(n) OVER (PARTITION BY k ORDER BY id) AS prev FROM t",
    ),
    (
        "o_rows_frame",
        "SELECT id, g, sum(n) OVER (PARTITION BY g ORDER BY id ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS s3 FROM t",
    ),
    (
        "o_rank",
        "SELECT id, tag, rank() OVER (PARTITION BY tag ORDER BY w) AS r FROM u",
    ),
    (
        "o_first_value",
        "SELECT id, k, first_value(w) OVER (PARTITION BY k ORDER BY id) AS f, count(*) OVER (PARTITION BY k) AS c FROM u",
    ),
    // Set operations and recomputed aggregates.
    ("x_except_all", "SELECT k FROM t EXCEPT ALL SELECT k FROM u"),
    (
        "x_intersect_all",
        "SELECT k, g FROM t INTERSECT ALL SELECT k, tag FROM u",
    ),
    (
        "a_lists",
        "SELECT k, string_agg(g, ',' ORDER BY id) AS gs, count(*) AS c FROM t GROUP BY k",
    ),
    (
        "a_distinct_avg",
        "SELECT tag, avg(DISTINCT w) AS a, CAST(array_agg(id ORDER BY id) AS VARCHAR) AS ids FROM u GROUP BY tag",
    ),
];

const GROUPS: [&str; 5] = ["a", "b", "c", "d", "e"];

/// Random writes to both tables: inserts in batches of random size, updates and deletes
/// of random rows, upserts over existing keys.
async fn random_writes(
    client: &tokio_postgres::Client,
    rng: &mut StdRng,
    next_ids: &mut [i64; 2],
    rounds: usize,
) {
    for _ in 0..rounds {
        let table = rng.random_range(0..2);
        let next_id = &mut next_ids[table];
        match rng.random_range(0..10) {
            0..=5 => {
                let rows = rng.random_range(1..30);
                let values: Vec<String> = (0..rows)
                    .map(|_| {
                        *next_id += 1;
                        let group = GROUPS[rng.random_range(0..GROUPS.len())];
                        if table == 0 {
                            format!(
                                "({}, {}, '{group}', {:.2}, {})",
                                *next_id,
                                rng.random_range(0..8),
                                rng.random_range(0.0..100.0),
                                rng.random_range(0..1000)
                            )
                        } else {
                            let w = if rng.random_range(0..8) == 0 {
                                "NULL".to_string()
                            } else {
                                format!("{:.2}", rng.random_range(0.0..100.0))
                            };
                            format!(
                                "({}, {}, {w}, TIMESTAMPTZ '2024-01-01 00:00:00+00' + INTERVAL '{} minutes', '{group}')",
                                *next_id,
                                rng.random_range(0..8),
                                rng.random_range(0..10_000)
                            )
                        }
                    })
                    .collect();
                let name = ["t", "u"][table];
                client
                    .batch_execute(&format!("INSERT INTO {name} VALUES {}", values.join(", ")))
                    .await
                    .unwrap();
            }
            6 | 7 => {
                let k = rng.random_range(0..8);
                let g = GROUPS[rng.random_range(0..GROUPS.len())];
                let sql = if table == 0 {
                    format!(
                        "UPDATE t SET n = n + 7, g = '{g}' WHERE k = {k} AND id % 4 = {}",
                        rng.random_range(0..4)
                    )
                } else {
                    format!(
                        "UPDATE u SET w = w + 1.25, tag = '{g}', k = (k + 1) % 8 WHERE k = {k} AND id % 3 = {}",
                        rng.random_range(0..3)
                    )
                };
                client.batch_execute(&sql).await.unwrap();
            }
            8 => {
                let name = ["t", "u"][table];
                client
                    .batch_execute(&format!(
                        "DELETE FROM {name} WHERE id % 7 = {} AND k = {}",
                        rng.random_range(0..7),
                        rng.random_range(0..8)
                    ))
                    .await
                    .unwrap();
            }
            _ => {
                let id = rng.random_range(1..=(*next_id).max(1));
                let sql = if table == 0 {
                    format!(
                        "INSERT INTO t VALUES ({id}, {}, 'e', 1.5, 3)",
                        rng.random_range(0..8)
                    )
                } else {
                    format!(
                        "INSERT INTO u VALUES ({id}, {}, 12.50, TIMESTAMPTZ '2024-06-01 12:00:00+02', 'e')",
                        rng.random_range(0..8)
                    )
                };
                client.batch_execute(&sql).await.unwrap();
            }
        }
    }
}

async fn compare_all(client: &tokio_postgres::Client, when: &str) {
    for (name, query) in VIEWS {
        let streamed = view_rows(client, &format!("SELECT * FROM {name}")).await;
        let batch = view_rows(client, query).await;
        assert_same(&format!("{name} {when}"), &streamed, &batch);
    }
}

async fn two_table_views_match_batch(parallelism: usize, seed: u64) {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut server = TestServer::start_in(&data_dir);
    let client = server.connect().await;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut next_ids = [0i64; 2];
    client
        .batch_execute(&format!(
            "SET streaming_parallelism = {parallelism};
             CREATE TABLE t (id INT PRIMARY KEY, k INT, g VARCHAR, v DOUBLE, n BIGINT);
             CREATE TABLE u (id INT PRIMARY KEY, k INT, w DECIMAL(10,2), at TIMESTAMPTZ, tag VARCHAR);"
        ))
        .await
        .unwrap();
    random_writes(&client, &mut rng, &mut next_ids, 20).await;
    for (name, query) in VIEWS {
        client
            .batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap_or_else(|e| panic!("creating {name}: {e:?}"));
    }
    random_writes(&client, &mut rng, &mut next_ids, 100).await;
    client.batch_execute("FLUSH").await.unwrap();
    let counts = view_rows(
        &client,
        "SELECT (SELECT count(*) FROM t), (SELECT count(*) FROM u)",
    )
    .await;
    let (t_rows, u_rows): (usize, usize) =
        (counts[0][0].parse().unwrap(), counts[0][1].parse().unwrap());
    assert!(
        t_rows > 150 && u_rows > 150,
        "rows after the writes: t {t_rows}, u {u_rows}"
    );
    compare_all(&client, &format!("at parallelism {parallelism}")).await;
    let failed = view_rows(
        &client,
        "SELECT name, error FROM eddy_catalog.jobs WHERE state <> 'running'",
    )
    .await;
    assert!(failed.is_empty(), "jobs stopped: {failed:?}");

    server.kill();
    let server = TestServer::start_in(&data_dir);
    let client = server.connect().await;
    random_writes(&client, &mut rng, &mut next_ids, 30).await;
    client.batch_execute("FLUSH").await.unwrap();
    compare_all(
        &client,
        &format!("after a restart at parallelism {parallelism}"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_table_views_match_batch_at_parallelism_1() {
    two_table_views_match_batch(1, 23).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_table_views_match_batch_at_parallelism_4() {
    two_table_views_match_batch(4, 29).await;
}
