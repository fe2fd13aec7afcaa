//! Exactly-once recovery from checkpoints. Views over bounded, paced sources keep running
//! while the server is SIGKILLed at random moments and restarted; once the sources have
//! ended, every view must equal what DataFusion computes in batch over the same events —
//! nothing lost, nothing counted twice. Variants lose the data dir before one restart and
//! recover from the object store alone (a local directory, and an S3-compatible server).

use crate::common::{TestServer, start_s3};
use crate::streaming::{assert_same, batch_query, source_options, view_rows};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// 60000 events hold 55200 bids, paced at 10000 per second.
const BIDS: &str = "CREATE SOURCE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, date_time TIMESTAMP,
    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) WITH (
    connector = 'nexmark',
    nexmark.table.type = 'Bid',
    nexmark.event.num = 60000,
    nexmark.split.num = 2,
    nexmark.min.event.gap.in.ns = 100000)";

const ROWS: &str = "CREATE SOURCE gen (id BIGINT, k INT, v DOUBLE PRECISION, name VARCHAR) WITH (
    connector = 'datagen',
    fields.id.kind = 'sequence', fields.id.start = 1, fields.id.end = 30000,
    fields.k.min = 1, fields.k.max = 9, fields.k.seed = 3,
    fields.v.min = -10, fields.v.max = 10, fields.v.seed = 8,
    fields.name.length = 2,
    datagen.split.num = 3,
    datagen.rows.per.second = 6000)";

const TUMBLE_REFERENCE: &str = "SELECT auction, date_bin(INTERVAL '1' SECOND, date_time, TIMESTAMP '1970-01-01 00:00:00') AS window_start, \
    count(*) AS n, max(price) AS top FROM bid GROUP BY 1, 2";

const HOP_REFERENCE: &str = "SELECT ws AS window_start, count(*) AS n FROM ( \
    SELECT date_bin(INTERVAL '1' SECOND, date_time, TIMESTAMP '1970-01-01 00:00:00') AS ws FROM bid \
    UNION ALL SELECT date_bin(INTERVAL '1' SECOND, date_time, TIMESTAMP '1970-01-01 00:00:00') - INTERVAL '1' SECOND FROM bid \
    ) w GROUP BY ws";

/// (view, its query, the batch query to compare with where it differs, the source).
const VIEWS: &[(&str, &str, Option<&str>, &str)] = &[
    (
        "per_auction",
        "SELECT auction, count(*) AS n, max(price) AS top, min(bidder) AS low_bidder FROM bid GROUP BY auction",
        None,
        "bid",
    ),
    (
        "per_channel",
        "SELECT channel, count(*) AS n, sum(price) AS total, count(DISTINCT auction) AS auctions FROM bid GROUP BY channel",
        None,
        "bid",
    ),
    (
        "tumbling",
        "SELECT auction, window_start, count(*) AS n, max(price) AS top FROM TUMBLE(bid, date_time, INTERVAL '1' SECOND) GROUP BY auction, window_start",
        Some(TUMBLE_REFERENCE),
        "bid",
    ),
    (
        "tumbling_eowc",
        "SELECT auction, window_start, count(*) AS n, max(price) AS top FROM TUMBLE(bid, date_time, INTERVAL '1' SECOND) GROUP BY auction, window_start EMIT ON WINDOW CLOSE",
        Some(TUMBLE_REFERENCE),
        "bid",
    ),
    (
        "hopping_eowc",
        "SELECT window_start, count(*) AS n FROM HOP(bid, date_time, INTERVAL '1' SECOND, INTERVAL '2' SECOND) GROUP BY window_start EMIT ON WINDOW CLOSE",
        Some(HOP_REFERENCE),
        "bid",
    ),
    (
        "bid_total",
        "SELECT count(*) AS n, sum(price) AS total FROM bid",
        None,
        "bid",
    ),
    // A view over a view: restored at the same epoch as the view it reads.
    (
        "auction_summary",
        "SELECT count(*) AS auctions, sum(n) AS bids FROM per_auction",
        Some(
            "SELECT count(*) AS auctions, sum(n) AS bids FROM (SELECT auction, count(*) AS n FROM bid GROUP BY auction)",
        ),
        "bid",
    ),
    (
        "per_key",
        "SELECT k, count(*) AS n, sum(id) AS total, min(v) AS lo, max(v) AS hi, count(DISTINCT name) AS names FROM gen GROUP BY k",
        None,
        "gen",
    ),
    // A join over two inputs: left rows NULL-padded until their match arrives, so a
    // crash between the two must neither lose nor repeat a retraction.
    (
        "gen_next",
        "SELECT a.k, count(*) AS n, count(b.id) AS matched, sum(b.id) AS ids FROM gen a LEFT JOIN gen b ON a.id + 1 = b.id GROUP BY a.k",
        Some(
            "SELECT a.k, count(*) AS n, count(b.id) AS matched, sum(b.id) AS ids FROM gen a LEFT JOIN (SELECT * FROM gen) b ON a.id + 1 = b.id GROUP BY a.k",
        ),
        "gen",
    ),
    // Top-N per partition over an append-only source (only the top rows are kept),
    // and a global top-N over an updating aggregate (every group is kept).
    (
        "gen_top3",
        "SELECT * FROM (SELECT id, k, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC, id) AS rn FROM gen) WHERE rn <= 3",
        None,
        "gen",
    ),
    (
        "busiest_auctions",
        "SELECT auction, count(*) AS n FROM bid GROUP BY auction ORDER BY n DESC, auction LIMIT 5",
        None,
        "bid",
    ),
    // An interval self-join: rows of both sides expire as the watermark passes.
    (
        "bid_pairs",
        "SELECT B.auction, count(*) AS pairs, sum(C.price) AS total FROM bid B JOIN bid C \
         ON B.auction = C.auction AND B.bidder = C.bidder AND C.date_time BETWEEN B.date_time - INTERVAL '1' SECOND AND B.date_time \
         GROUP BY B.auction",
        Some(
            "SELECT B.auction, count(*) AS pairs, sum(C.price) AS total FROM bid B JOIN (SELECT * FROM bid) C \
             ON B.auction = C.auction AND B.bidder = C.bidder AND C.date_time BETWEEN B.date_time - INTERVAL '1' SECOND AND B.date_time \
             GROUP BY B.auction",
        ),
        "bid",
    ),
    // Session windows per bidder (1 s gap): sessions merge as bids arrive, across kills.
    // The reference numbers sessions with lag() and a running sum.
    (
        "bid_sessions",
        "SELECT bidder, count(*) AS n, max(price) AS top \
         FROM TABLE(SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(date_time), INTERVAL '1' SECOND)) \
         GROUP BY bidder, window_start, window_end",
        Some(
            "SELECT bidder, count(*) AS n, max(price) AS top FROM ( \
               SELECT bidder, price, sum(brk) OVER (PARTITION BY bidder ORDER BY date_time ROWS UNBOUNDED PRECEDING) AS session \
               FROM (SELECT bidder, price, date_time, \
                       CASE WHEN date_time - lag(date_time) OVER (PARTITION BY bidder ORDER BY date_time) < INTERVAL '1' SECOND \
                            THEN 0 ELSE 1 END AS brk \
                     FROM bid) x) y \
             GROUP BY bidder, session",
        ),
        "bid",
    ),
    // A window function: each row's predecessor in its partition.
    (
        "gen_lag",
        "SELECT id, k, lag(id) OVER (PARTITION BY k ORDER BY id) AS prev, sum(v) OVER (PARTITION BY k ORDER BY id ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS s FROM gen WHERE id % 10 = 0",
        None,
        "gen",
    ),
    (
        "gen_filtered",
        "SELECT id, k, name FROM gen WHERE id % 97 = 0",
        None,
        "gen",
    ),
];

fn bid_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("auction", DataType::Int64, true),
        Field::new("bidder", DataType::Int64, true),
        Field::new("price", DataType::Int64, true),
        Field::new("channel", DataType::Utf8, true),
        Field::new(
            "date_time",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            true,
        ),
    ]))
}

fn gen_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("k", DataType::Int32, true),
        Field::new("v", DataType::Float64, true),
        Field::new("name", DataType::Utf8, true),
    ]))
}

/// The batch result of a query over every row a source's `CREATE SOURCE` makes.
async fn batch(query: &str, source: &str) -> Vec<Vec<String>> {
    let (create, schema) = match source {
        "bid" => (BIDS, bid_schema()),
        _ => (ROWS, gen_schema()),
    };
    let spec = eddy::connectors::ConnectorSpec::from_options(&schema, &source_options(create))
        .expect("valid source options");
    // `batch_query` registers the rows as `s`.
    batch_query(
        &query.replace(&format!("FROM {source}"), "FROM s"),
        &schema,
        &spec,
    )
    .await
}

/// Creates every view of [`VIEWS`].
async fn create_views(client: &tokio_postgres::Client) {
    for (name, query, ..) in VIEWS {
        client
            .batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap_or_else(|e| panic!("creating {name}: {e}"));
    }
}

/// Every view of [`VIEWS`] equals its query computed in batch over the same events.
async fn assert_views_match_batch(client: &tokio_postgres::Client, when: &str) {
    for (name, query, reference, source) in VIEWS {
        let streamed = view_rows(client, &format!("SELECT * FROM {name}")).await;
        let expected = batch(reference.unwrap_or(query), source).await;
        assert!(!expected.is_empty(), "{name}: the batch query has rows");
        assert_same(&format!("{name} {when}"), &streamed, &expected);
    }
}

/// Waits until every job over a source has finished (views over tables never do).
async fn wait_for_source_jobs(client: &tokio_postgres::Client) {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let jobs = view_rows(client, "SELECT name, state, error FROM eddy_catalog.jobs").await;
        for j in &jobs {
            assert_ne!(j[1], "failed", "job {} failed: {}", j[0], j[2]);
        }
        let done = VIEWS
            .iter()
            .all(|(name, ..)| jobs.iter().any(|j| j[0] == *name && j[1] == "finished"));
        if done {
            return;
        }
        assert!(Instant::now() < deadline, "jobs did not finish: {jobs:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How a kill loop stores its checkpoints and whether it loses its data dir.
struct Scenario {
    /// Extra server flags (`--state-store ...`).
    args: Vec<String>,
    /// Delete the whole data dir before this restart (counting from 0).
    lose_data_dir_before: Option<usize>,
}

const KILLS: usize = 5;

/// Per row of `t`, the count and sum of the rows with the three keys below it: a LATERAL
/// aggregate correlated by a range, kept by a view through the kills.
const T_LATERAL: &str = "SELECT a.k, b.n, b.s FROM t a LEFT JOIN LATERAL \
     (SELECT count(*) AS n, sum(c.v) AS s FROM t c WHERE c.k < a.k AND c.k >= a.k - 3) AS b ON TRUE";

async fn kill_loop(scenario: Scenario) {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut args: Vec<String> = vec!["--barrier-interval-ms".into(), "100".into()];
    args.extend(scenario.args.iter().cloned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut server = TestServer::start_in_with_args(&data_dir, &args);
    let mut client = server.connect().await;
    client
        .batch_execute(&format!(
            "SET streaming_parallelism = 2; {BIDS}; {ROWS};
             CREATE TABLE t (k INT PRIMARY KEY, v INT);
             INSERT INTO t VALUES (1000, 1), (1001, 2);
             CREATE MATERIALIZED VIEW t_summary AS SELECT k % 3 AS g, count(*) AS n, sum(v) AS total FROM t GROUP BY k % 3;
             CREATE MATERIALIZED VIEW t_changes AS WITH c AS changelog FROM t SELECT k, v, changelog_op FROM c;
             CREATE MATERIALIZED VIEW t_lateral AS {T_LATERAL};"
        ))
        .await
        .unwrap();
    create_views(&client).await;

    let seed: u64 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("kill loop seed: {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut inserted = vec![1000, 1001];
    for round in 0..KILLS {
        tokio::time::sleep(Duration::from_millis(rng.random_range(300..1200))).await;
        // A row committed just before the kill.
        client
            .execute("INSERT INTO t VALUES ($1, $2)", &[&(round as i32), &7i32])
            .await
            .unwrap();
        inserted.push(round as i32);
        server.kill();
        if scenario.lose_data_dir_before == Some(round) {
            std::fs::remove_dir_all(&data_dir).unwrap();
        }
        server = TestServer::start_in_with_args(&data_dir, &args);
        client = server.connect().await;
    }
    wait_for_source_jobs(&client).await;

    assert_views_match_batch(&client, &format!("after {KILLS} kills")).await;

    // Rows committed before a kill survive it, unless the data dir itself was lost.
    let table = view_rows(&client, "SELECT k FROM t ORDER BY k").await;
    if scenario.lose_data_dir_before.is_none() {
        let mut expected: Vec<Vec<String>> = inserted.iter().map(|k| vec![k.to_string()]).collect();
        expected.sort();
        assert_eq!(table, expected, "committed rows survive every kill");
    }
    // A view over the table matches the table.
    client.batch_execute("FLUSH").await.unwrap();
    assert_eq!(
        view_rows(&client, "SELECT * FROM t_summary").await,
        view_rows(
            &client,
            "SELECT k % 3 AS g, count(*) AS n, sum(v) AS total FROM t GROUP BY k % 3"
        )
        .await
    );

    // A LATERAL aggregate over the table matches the same query run in batch.
    assert_eq!(
        view_rows(&client, "SELECT * FROM t_lateral ORDER BY k").await,
        view_rows(&client, &format!("{T_LATERAL} ORDER BY k")).await
    );
    // The table's changelog holds each inserted row exactly once: none lost, none
    // replayed twice by the restarts.
    assert_eq!(
        view_rows(
            &client,
            "SELECT k, v FROM t_changes WHERE changelog_op = 1 ORDER BY k"
        )
        .await,
        view_rows(&client, "SELECT k, v FROM t ORDER BY k").await,
        "one changelog row per inserted row"
    );
    assert_eq!(
        view_rows(
            &client,
            "SELECT count(*) FROM t_changes WHERE changelog_op <> 1"
        )
        .await,
        vec![vec!["0".to_string()]]
    );

    // Checkpoints are listed, the last committed one marked.
    let checkpoints = view_rows(
        &client,
        "SELECT count(*) > 0, bool_or(last_committed), min(uploaded_files) > 0 \
         FROM eddy_catalog.checkpoints WHERE committed",
    )
    .await;
    assert_eq!(checkpoints, vec![vec!["t", "t", "t"]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_are_exact_after_repeated_sigkills() {
    kill_loop(Scenario {
        // A cache far smaller than the views' groups: evicted groups are read back from
        // RocksDB between the kills (EOWC windows closing included).
        args: vec!["--state-cache-mb".into(), "1".into()],
        lose_data_dir_before: None,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_from_a_local_state_store_alone_after_losing_the_data_dir() {
    let store = tempfile::tempdir().unwrap();
    kill_loop(Scenario {
        args: vec![
            "--state-store".into(),
            store.path().to_string_lossy().into_owned(),
        ],
        lose_data_dir_before: Some(2),
    })
    .await;
    // Three are kept; the server stopped by SIGKILL at the end of the loop may have
    // uploaded a fourth before collecting the oldest.
    let manifests = std::fs::read_dir(store.path().join("manifests"))
        .unwrap()
        .count();
    assert!(
        (1..=4).contains(&manifests),
        "old checkpoints are collected: {manifests} manifests kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_from_s3_alone_after_losing_the_data_dir() {
    let s3 = start_s3();
    kill_loop(Scenario {
        args: [
            "--state-store",
            "s3://eddy/checkpoints",
            "--s3-endpoint",
            &s3.endpoint,
            "--s3-region",
            "us-east-1",
            "--s3-access-key-id",
            "test",
            "--s3-secret-access-key",
            "test",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        lose_data_dir_before: Some(3),
    })
    .await;
}

/// `view`'s job runs `parallelism` aggregate subtasks, unless it has already finished.
async fn assert_aggregate_subtasks(
    client: &tokio_postgres::Client,
    view: &str,
    parallelism: usize,
    when: &str,
) {
    // A job whose source ends drops its tasks a moment before it shows as finished: look
    // again for a while before deciding.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let running = view_rows(
            client,
            &format!(
                "SELECT count(*) FROM eddy_catalog.tasks WHERE job = '{view}' AND operators LIKE '%HashAgg%'"
            ),
        )
        .await;
        let state = view_rows(
            client,
            &format!("SELECT state FROM eddy_catalog.jobs WHERE name = '{view}'"),
        )
        .await;
        if running == vec![vec![parallelism.to_string()]] || state[0][0] == "finished" {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{when} {view} runs {parallelism} aggregate subtasks: {running:?}, state {state:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `ALTER MATERIALIZED VIEW ... SET PARALLELISM` while the sources run, and a restart
/// with another number of workers (views at the default parallelism follow it):
/// aggregates find their keys' state in whichever subtask the key groups now map to, and
/// the results stay exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rescaling_moves_key_groups_and_results_stay_exact() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut server = TestServer::start_in_with_args(&data_dir, &["--barrier-interval-ms", "100"]);
    let mut client = server.connect().await;
    client
        .batch_execute(&format!("{BIDS}; {ROWS}"))
        .await
        .unwrap();
    // No `streaming_parallelism`: views run at the number of workers (2).
    create_views(&client).await;
    let steps: &[(&str, usize)] = &[("per_auction", 3), ("tumbling_eowc", 1), ("per_key", 4)];
    for (view, parallelism) in steps {
        tokio::time::sleep(Duration::from_millis(600)).await;
        client
            .batch_execute(&format!(
                "ALTER MATERIALIZED VIEW {view} SET PARALLELISM = {parallelism}"
            ))
            .await
            .unwrap();
        assert_aggregate_subtasks(&client, view, *parallelism, "after ALTER").await;
    }
    // A restart with three workers: views left at the default follow the workers (3),
    // altered ones keep their parallelism; all keep their state.
    tokio::time::sleep(Duration::from_millis(400)).await;
    server.kill();
    server = TestServer::start_in_with_args(
        &data_dir,
        &["--barrier-interval-ms", "100", "--workers", "3"],
    );
    client = server.connect().await;
    for (view, parallelism) in [("per_channel", 3), ("tumbling", 3), ("tumbling_eowc", 1)] {
        assert_aggregate_subtasks(&client, view, parallelism, "after the restart").await;
    }
    client
        .batch_execute("ALTER MATERIALIZED VIEW per_auction SET PARALLELISM = 2")
        .await
        .unwrap();
    wait_for_source_jobs(&client).await;
    assert_views_match_batch(&client, "after rescaling").await;
    let err = client
        .batch_execute("ALTER MATERIALIZED VIEW per_auction SET PARALLELISM = 0")
        .await
        .unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("22023"));
    let err = client
        .batch_execute("ALTER MATERIALIZED VIEW nothing_here SET PARALLELISM = 2")
        .await
        .unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("42P01"));
}

/// A task that fails makes its job restart from the last checkpoint without a server
/// restart, while other jobs go on; a job that keeps failing is left failed after a few
/// restarts, its error visible.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_job_restarts_from_its_checkpoint_and_others_go_on() {
    let temp = tempfile::tempdir().unwrap();
    let files = temp.path().join("files");
    std::fs::create_dir(&files).unwrap();
    let mut expected: std::collections::BTreeMap<i64, (i64, i64)> = Default::default();
    for (file, range) in [("a.csv", 1..=3000), ("b.csv", 3001..=5000)] {
        let mut text = String::from("k,v\n");
        for k in range {
            text.push_str(&format!("{k},{}\n", k * 3));
            let e = expected.entry(k % 10).or_default();
            e.0 += 1;
            e.1 += k * 3;
        }
        std::fs::write(files.join(file), text).unwrap();
    }
    let server = TestServer::start_with_args(&["--barrier-interval-ms", "100"]);
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "SET streaming_parallelism = 2;
             CREATE SOURCE f (k BIGINT, v BIGINT) WITH (connector = 'file', path = '{}') FORMAT PLAIN ENCODE CSV;
             CREATE TABLE t (k INT PRIMARY KEY);
             CREATE MATERIALIZED VIEW t_count AS SELECT count(*) AS n FROM t;
             CREATE TABLE d (x NUMERIC(38,0));
             CREATE MATERIALIZED VIEW broken AS SELECT sum(x) AS q FROM d;",
            files.display()
        ))
        .await
        .unwrap();
    // b.csv is unreadable (not UTF-8) until it is written again.
    let good_b = std::fs::read(files.join("b.csv")).unwrap();
    std::fs::write(files.join("b.csv"), b"k,v\n\xff\xfe\n").unwrap();
    client
        .batch_execute("CREATE MATERIALIZED VIEW totals AS SELECT k % 10 AS g, count(*) AS n, sum(v) AS s FROM f GROUP BY k % 10")
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let seen = view_rows(
            &client,
            "SELECT coalesce(error, last_failure) FROM eddy_catalog.jobs WHERE name = 'totals'",
        )
        .await;
        if seen.len() == 1 && seen[0][0].contains("UTF-8") {
            break;
        }
        assert!(Instant::now() < deadline, "the failure shows: {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    std::fs::write(files.join("b.csv"), good_b).unwrap();

    // Meanwhile another job keeps working.
    client
        .batch_execute("INSERT INTO t VALUES (1), (2), (3); FLUSH")
        .await
        .unwrap();
    assert_eq!(
        view_rows(&client, "SELECT n FROM t_count").await,
        vec![vec!["3".to_string()]]
    );

    loop {
        let state = view_rows(
            &client,
            "SELECT state, restarts, last_failure, error FROM eddy_catalog.jobs WHERE name = 'totals'",
        )
        .await;
        if state.len() == 1 && state[0][0] == "finished" {
            assert_ne!(state[0][1], "0", "the job was restarted: {state:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "totals did not finish: {state:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rows: Vec<Vec<String>> = expected
        .iter()
        .map(|(g, (n, s))| vec![g.to_string(), n.to_string(), s.to_string()])
        .collect();
    let mut rows = rows;
    rows.sort();
    assert_eq!(view_rows(&client, "SELECT * FROM totals").await, rows);

    // A job that fails on every try is left failed after its restarts.
    client
        .batch_execute(
            "INSERT INTO d VALUES (99999999999999999999999999999999999999), \
             (99999999999999999999999999999999999999); FLUSH",
        )
        .await
        .unwrap();
    loop {
        let state = view_rows(
            &client,
            "SELECT state, restarts, error FROM eddy_catalog.jobs WHERE name = 'broken'",
        )
        .await;
        if state.len() == 1 && state[0][0] == "failed" && state[0][1] == "3" {
            assert!(state[0][2].contains("numeric field overflow"), "{state:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "broken was not left failed: {state:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `SELECT` reads every materialized view at the last committed epoch: views over the
/// same source, and a view over a view, agree in every query while the source runs. When
/// checkpoints cannot be committed (the state store is unusable), views stop advancing
/// although the job reads on; once commits resume they catch up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_reads_every_view_at_the_committed_epoch() {
    let temp = tempfile::tempdir().unwrap();
    let store = temp.path().join("store");
    let store_arg = store.display().to_string();
    let server =
        TestServer::start_with_args(&["--barrier-interval-ms", "50", "--state-store", &store_arg]);
    let client = server.connect().await;
    client
        .batch_execute(
            "SET streaming_parallelism = 2;
             CREATE SOURCE gen (id BIGINT, k INT) WITH (
                 connector = 'datagen',
                 fields.id.kind = 'sequence', fields.id.start = 1, fields.id.end = 1000000,
                 fields.k.min = 1, fields.k.max = 50, fields.k.seed = 4,
                 datagen.split.num = 2, datagen.rows.per.second = 2000);
             CREATE MATERIALIZED VIEW per_k AS SELECT k, count(*) AS n FROM gen GROUP BY k;
             CREATE MATERIALIZED VIEW total AS SELECT sum(n) AS n FROM per_k;
             CREATE MATERIALIZED VIEW top AS SELECT max(n) AS n FROM per_k;
             CREATE MATERIALIZED VIEW direct AS SELECT count(*) AS n FROM gen;",
        )
        .await
        .unwrap();
    // Views over `per_k` agree with it when read at one epoch.
    let counts = "SELECT coalesce((SELECT sum(n) FROM per_k), 0) AS a, \
                  coalesce((SELECT n FROM total), 0) AS b, \
                  coalesce((SELECT max(n) FROM per_k), 0) AS c, \
                  coalesce((SELECT n FROM top), 0) AS d";
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..60 {
        let row = view_rows(&client, counts).await.remove(0);
        assert!(
            row[0] == row[1] && row[2] == row[3],
            "views read at one epoch agree: {row:?}"
        );
        seen.insert(row[0].parse::<i64>().unwrap());
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(seen.len() >= 3, "the views advanced while read: {seen:?}");

    // The state store becomes unusable: checkpoints are no longer committed.
    let away = temp.path().join("store.away");
    std::fs::rename(&store, &away).unwrap();
    std::fs::write(&store, b"not a directory").unwrap();
    let direct = "SELECT n FROM direct";
    let read = "SELECT rows_read FROM eddy_catalog.jobs WHERE name = 'direct'";
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (frozen, read_before) = (
        view_rows(&client, direct).await,
        view_rows(&client, read).await,
    );
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        view_rows(&client, direct).await,
        frozen,
        "no commit, no new results"
    );
    let read_after = view_rows(&client, read).await;
    assert!(
        read_after[0][0].parse::<i64>().unwrap() > read_before[0][0].parse::<i64>().unwrap(),
        "the job reads on: {read_before:?} then {read_after:?}"
    );
    // After its retries, a checkpoint that could not be uploaded is listed as such.
    let deadline = Instant::now() + Duration::from_secs(60);
    while view_rows(
        &client,
        "SELECT count(*) FROM eddy_catalog.checkpoints WHERE NOT committed AND error IS NOT NULL",
    )
    .await
        == vec![vec!["0"]]
    {
        assert!(Instant::now() < deadline, "no failed checkpoint is listed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        view_rows(&client, direct).await,
        frozen,
        "still no new results"
    );

    // Commits resume: the views catch up.
    std::fs::remove_file(&store).unwrap();
    std::fs::rename(&away, &store).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let row = view_rows(&client, counts).await.remove(0);
        assert!(row[0] == row[1] && row[2] == row[3], "{row:?}");
        if view_rows(&client, direct).await != frozen {
            break;
        }
        assert!(Instant::now() < deadline, "views did not catch up: {row:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
