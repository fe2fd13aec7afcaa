//! Views over tables resume from their checkpoint: after a SIGKILL (and after a change of
//! parallelism) their jobs replay only the table changes logged since the checkpoint,
//! never the tables' rows again, and still equal the same queries run in batch.

use crate::common::TestServer;
use crate::streaming::{assert_same, view_rows};

/// Rows put in the tables before the checkpoint the views resume from.
const ROWS: i64 = 20_000;

/// (view, query): aggregates over every kind of column, a join of a keyed table with an
/// unkeyed one, and a view over a view.
const VIEWS: &[(&str, &str)] = &[
    (
        "per_cust",
        "SELECT cust, count(*) AS n, sum(amount) AS total, avg(score) AS mean, \
         max(at) AS latest, sum(span) AS spans, min(note) AS first_note, count(note) AS notes \
         FROM orders GROUP BY cust",
    ),
    (
        "cust_events",
        "SELECT o.cust, count(*) AS n, sum(e.weight) AS weight, max(o.amount) AS top \
         FROM orders o JOIN events e ON o.cust = e.cust AND o.id % 50 = e.slot GROUP BY o.cust",
    ),
    (
        "big_customers",
        "SELECT count(*) AS customers, sum(total) AS total FROM per_cust WHERE n > 190",
    ),
];

async fn job_rows_read(client: &tokio_postgres::Client, job: &str) -> i64 {
    client
        .query_one(
            "SELECT rows_read FROM eddy_catalog.jobs WHERE name = $1",
            &[&job],
        )
        .await
        .unwrap()
        .get(0)
}

/// Every view equals its query run in batch over the tables as they are now.
async fn assert_views_match_batch(client: &tokio_postgres::Client, when: &str) {
    client.batch_execute("FLUSH").await.unwrap();
    for (name, query) in VIEWS {
        let streamed = view_rows(client, &format!("SELECT * FROM {name}")).await;
        let batch = view_rows(client, query).await;
        assert!(!batch.is_empty(), "{name}: the batch query has rows");
        assert_same(&format!("{name} {when}"), &streamed, &batch);
    }
}

/// Updates, deletes and inserts in both tables: `round` makes each call's rows differ.
async fn change_some_rows(client: &tokio_postgres::Client, round: i64) {
    let base = ROWS + round * 1000;
    client
        .batch_execute(&format!(
            "UPDATE orders SET amount = amount + 0.05, note = NULL, span = span + INTERVAL '1 second' \
               WHERE id % 400 = {round};
             DELETE FROM orders WHERE id % 1000 = {r2};
             INSERT INTO orders SELECT x, x % 97, (x % 1000) / 100.0, x / 7.0, \
               TIMESTAMPTZ '2026-12-04 10:00:00+00' + x * INTERVAL '1 second', \
               x * INTERVAL '1 minute', 'new' || x \
               FROM generate_series({base}, {base} + 29) AS g(x);
             BEGIN;
             INSERT INTO events VALUES ({round} % 97, {round} % 50, 1.5);
             DELETE FROM events WHERE cust = {r3} AND slot = 7;
             COMMIT;",
            r2 = round + 500,
            r3 = round + 3,
        ))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_over_tables_resume_from_their_checkpoint_reading_only_the_changes() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    // Checkpoints only at FLUSH: what changes after it must come from the tables' logs.
    let args = ["--barrier-interval-ms", "600000"];
    let mut server = TestServer::start_in_with_args(&data_dir, &args);
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "SET streaming_parallelism = 2;
             CREATE TABLE orders (id BIGINT PRIMARY KEY, cust INT, amount DECIMAL(10,2),
               score DOUBLE PRECISION, at TIMESTAMPTZ, span INTERVAL, note VARCHAR);
             CREATE TABLE events (cust INT, slot INT, weight DOUBLE PRECISION);
             INSERT INTO orders SELECT x, x % 97, (x % 1000) / 100.0,
               CASE WHEN x % 13 = 0 THEN NULL ELSE x / 3.0 END,
               TIMESTAMPTZ '2026-01-01 00:00:00+00' + x * INTERVAL '1 minute',
               x * INTERVAL '1 second', CASE WHEN x % 11 = 0 THEN NULL ELSE 'n' || x END
               FROM generate_series(1, {ROWS}) AS g(x);
             INSERT INTO events SELECT x % 97, x % 50, x * 0.25 FROM generate_series(1, 3000) AS g(x);"
        ))
        .await
        .unwrap();
    for (name, query) in VIEWS {
        client
            .batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap_or_else(|e| panic!("creating {name}: {e}"));
    }
    assert_views_match_batch(&client, "after creation").await;
    assert!(job_rows_read(&client, "per_cust").await >= ROWS);

    // Changes after the last checkpoint, then a SIGKILL: they are in the tables (and
    // their logs) but in no checkpoint.
    change_some_rows(&client, 1).await;
    server.kill();
    let mut server = TestServer::start_in_with_args(&data_dir, &args);
    let client = server.connect().await;
    assert_views_match_batch(&client, "after a kill").await;
    change_some_rows(&client, 2).await;
    change_some_rows(&client, 0).await;
    client.batch_execute("FLUSH").await.unwrap();
    let read = job_rows_read(&client, "per_cust").await;
    assert!(
        read > 0 && read < ROWS / 4,
        "the restarted job replayed the logged changes, not the table ({read} rows read)"
    );
    assert_views_match_batch(&client, "after changes following the kill").await;

    // A change of parallelism restarts the view and the one over it from their state.
    change_some_rows(&client, 4).await;
    client
        .batch_execute("ALTER MATERIALIZED VIEW per_cust SET PARALLELISM = 3")
        .await
        .unwrap();
    change_some_rows(&client, 5).await;
    client.batch_execute("FLUSH").await.unwrap();
    let read = job_rows_read(&client, "per_cust").await;
    assert!(read < ROWS / 4, "rescaled job read {read} rows");
    assert_views_match_batch(&client, "after rescaling").await;

    // A clean restart, and many checkpoints later (the logs cut meanwhile), a kill again.
    for round in 6..12 {
        change_some_rows(&client, round).await;
        client.batch_execute("FLUSH").await.unwrap();
    }
    change_some_rows(&client, 12).await;
    server.kill();
    let server = TestServer::start_in_with_args(&data_dir, &args);
    let client = server.connect().await;
    assert_views_match_batch(&client, "after the last kill").await;
    let read = job_rows_read(&client, "cust_events").await;
    assert!(read < ROWS / 4, "the join replayed {read} rows");
}

/// Opens the stopped server's catalog to change what it recorded.
fn edit_catalog(data_dir: &std::path::Path, edit: impl FnOnce(&eddy::catalog::Catalog)) {
    let store = std::sync::Arc::new(
        eddy::state::StateStore::open(&data_dir.join("state"), 1 << 20).unwrap(),
    );
    edit(&eddy::catalog::Catalog::load(store).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_resumes_only_if_its_query_still_plans_to_the_stored_state_tables() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let args = ["--barrier-interval-ms", "600000"];
    let mut server = TestServer::start_in_with_args(&data_dir, &args);
    let client = server.connect().await;
    let queries = [
        (
            "a",
            "SELECT k % 10 AS g, count(*) AS n, sum(v) AS total FROM t GROUP BY k % 10",
        ),
        (
            "b",
            "SELECT max(v) AS top, min(v) AS low, count(DISTINCT k % 7) AS sevens FROM t",
        ),
    ];
    client
        .batch_execute(&format!(
            "CREATE TABLE t (k INT PRIMARY KEY, v DECIMAL(10,2));
             INSERT INTO t SELECT x, x / 8.0 FROM generate_series(1, {ROWS}) AS g(x);"
        ))
        .await
        .unwrap();
    for (name, query) in queries {
        client
            .batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap();
    }
    client.batch_execute("FLUSH").await.unwrap();
    server.terminate();

    // `a` as a catalog written before layouts were recorded; `b` as if the same SQL now
    // planned to other operators than its state was written by.
    let mut recorded = vec![];
    edit_catalog(&data_dir, |catalog| {
        for (name, _) in queries {
            recorded.push(catalog.get(name).unwrap().state_layout);
        }
        assert!(recorded.iter().all(|l| !l.is_empty()), "{recorded:?}");
        catalog.set_state_layout("a", vec![]).unwrap();
        catalog
            .set_state_layout("b", vec!["HashAgg(another operator)".into()])
            .unwrap();
    });
    let mut server = TestServer::start_in_with_args(&data_dir, &args);
    let client = server.connect().await;
    client
        .batch_execute("UPDATE t SET v = v + 100 WHERE k % 1000 = 3; DELETE FROM t WHERE k < 5")
        .await
        .unwrap();
    client.batch_execute("FLUSH").await.unwrap();
    let resumed = job_rows_read(&client, "a").await;
    assert!(resumed > 0 && resumed < ROWS / 4, "a resumed: {resumed}");
    let afresh = job_rows_read(&client, "b").await;
    assert!(
        afresh >= ROWS - 5,
        "b started afresh from the table: {afresh}"
    );
    for (name, query) in queries {
        let streamed = view_rows(&client, &format!("SELECT * FROM {name}")).await;
        assert_same(name, &streamed, &view_rows(&client, query).await);
    }
    server.terminate();
    // Both now record the layout they run with.
    edit_catalog(&data_dir, |catalog| {
        for ((name, _), layout) in queries.iter().zip(&recorded) {
            assert_eq!(&catalog.get(name).unwrap().state_layout, layout);
        }
    });
}
