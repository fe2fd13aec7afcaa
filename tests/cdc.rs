//! PostgreSQL change data capture end to end, against a real PostgreSQL 15 with
//! `wal_level = logical`: a CDC table copies the upstream table and follows its inserts,
//! updates and deletes; with Eddy SIGKILLed five times while the upstream keeps changing,
//! the table ends equal to the upstream table, a view over it equal to the same aggregate
//! computed by PostgreSQL, and a PostgreSQL sink of that view equal to it too — no change
//! lost or applied twice.

use crate::common::TestServer;
use crate::common::postgres::PostgresServer;
use crate::streaming::{assert_same, view_rows};
use std::time::{Duration, Instant};

const UPSTREAM: &str = "CREATE TABLE orders (id INT PRIMARY KEY, customer INT NOT NULL,
    amount NUMERIC(12, 2), note TEXT, placed TIMESTAMPTZ, flag BOOLEAN, ratio DOUBLE PRECISION);
    INSERT INTO orders SELECT g, g % 10, (g * 1.25)::numeric(12, 2),
        CASE WHEN g % 4 = 0 THEN NULL ELSE 'n' || g END,
        TIMESTAMPTZ '2024-01-01 00:00:00+00' + g * INTERVAL '1 minute', g % 2 = 0, g / 3.0
    FROM generate_series(1, 2000) g";

const COLUMNS: &str = "id, customer, amount, note, placed, flag, ratio";
const PER_CUSTOMER: &str = "SELECT customer, count(*) AS n, sum(amount) AS total, \
    max(placed) AS last, count(note) AS noted, sum(ratio) AS ratios FROM orders GROUP BY customer";

/// A round of upstream changes: inserts, updates (one changing a key) and deletes.
fn changes(round: i32) -> String {
    let base = 10_000 + round * 1000;
    format!(
        "INSERT INTO orders SELECT g, g % 10, g * 0.5, 'r{round}', now(), true, g * 0.1
             FROM generate_series({base}, {base} + 299) g;
         UPDATE orders SET amount = amount + 1, note = 'u{round}' WHERE id % 7 = {m};
         UPDATE orders SET id = id + 100000 WHERE id = {moved};
         DELETE FROM orders WHERE id % 11 = {m} AND id < 5000;",
        m = round % 7,
        moved = 3 + round
    )
}

async fn wait_equal(eddy: &tokio_postgres::Client, upstream: &tokio_postgres::Client) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let want = view_rows(
            upstream,
            &format!("SELECT {COLUMNS} FROM orders ORDER BY id"),
        )
        .await;
        let have = view_rows(eddy, &format!("SELECT {COLUMNS} FROM orders ORDER BY id")).await;
        if have.len() == want.len() && have.first().map(|r| &r[0]) == want.first().map(|r| &r[0]) {
            let ids = |rows: &[Vec<String>]| rows.iter().map(|r| r[0].clone()).collect::<Vec<_>>();
            if ids(&have) == ids(&want) {
                assert_same("cdc table", &have, &want);
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the CDC table has {} rows, upstream {}",
            have.len(),
            want.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The `WITH` options of a CDC table of upstream table `table` on `pg`, with `extra`
/// options appended.
fn cdc_with(pg: &PostgresServer, table: &str, extra: &str) -> String {
    format!(
        "WITH (connector = 'postgres-cdc', hostname = '127.0.0.1', port = '{}', username = 'postgres', \
         password = '', database.name = 'postgres', table.name = '{table}'{extra})",
        pg.port
    )
}

/// Waits until the CDC table equals the upstream table, then checks the view over it
/// against the same aggregate computed by PostgreSQL.
async fn table_and_view_equal_upstream(
    client: &tokio_postgres::Client,
    upstream: &tokio_postgres::Client,
) {
    wait_equal(client, upstream).await;
    client.batch_execute("FLUSH").await.unwrap();
    let view = view_rows(client, "SELECT * FROM per_customer ORDER BY customer").await;
    let expected = view_rows(upstream, &format!("{PER_CUSTOMER} ORDER BY customer")).await;
    assert_same("view over the cdc table", &view, &expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cdc_table_follows_upstream_exactly_across_kills() {
    let pg = PostgresServer::start();
    let upstream = pg.connect().await;
    upstream.batch_execute(UPSTREAM).await.unwrap();
    upstream
        .batch_execute(
            "CREATE TABLE per_customer_out (customer INT PRIMARY KEY, n BIGINT, total NUMERIC(20, 2), \
             last TIMESTAMPTZ, noted BIGINT, ratios DOUBLE PRECISION)",
        )
        .await
        .unwrap();
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let args = ["--barrier-interval-ms", "200"];
    let mut server = TestServer::start_in_with_args(&data_dir, &args);
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE pg WITH (connector = 'postgres-cdc', hostname = '127.0.0.1', port = '{}',
                 username = 'postgres', password = '', database.name = 'postgres');
             CREATE TABLE orders (id INT PRIMARY KEY, customer INT, amount DECIMAL(12, 2), note VARCHAR,
                 placed TIMESTAMPTZ, flag BOOLEAN, ratio DOUBLE PRECISION) FROM pg TABLE 'public.orders';
             CREATE MATERIALIZED VIEW per_customer AS {PER_CUSTOMER};
             CREATE SINK per_customer_out FROM per_customer WITH ({}, primary_key = 'customer');",
            pg.port,
            pg.sink_options("per_customer_out")
        ))
        .await
        .unwrap();
    // The snapshot is there as soon as the table is.
    assert_eq!(
        view_rows(&client, "SELECT count(*) FROM orders").await,
        vec![vec!["2000"]]
    );
    drop(client);
    for round in 0..5 {
        upstream.batch_execute(&changes(round)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        server.kill();
        server = TestServer::start_in_with_args(&data_dir, &args);
    }
    upstream.batch_execute(&changes(5)).await.unwrap();
    let client = server.connect().await;
    // The view over it is the aggregate PostgreSQL computes over the upstream table.
    table_and_view_equal_upstream(&client, &upstream).await;
    let expected = view_rows(&upstream, &format!("{PER_CUSTOMER} ORDER BY customer")).await;
    // And the PostgreSQL sink of that view: CDC -> view -> PostgreSQL, exact.
    let sunk = view_rows(
        &upstream,
        "SELECT customer, n, total, last, noted, ratios FROM per_customer_out ORDER BY customer",
    )
    .await;
    assert_same("postgres sink of the view", &sunk, &expected);
    // The slot has been advanced past the first changes (checkpoints committed them).
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let advanced = view_rows(
            &upstream,
            "SELECT confirmed_flush_lsn > '0/0'::pg_lsn AND restart_lsn IS NOT NULL FROM pg_replication_slots WHERE slot_name = 'eddy_orders'",
        )
        .await;
        if advanced == vec![vec!["t"]] {
            break;
        }
        assert!(Instant::now() < deadline, "slot not advanced: {advanced:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Dropping the table drops its slot.
    client
        .batch_execute(
            "DROP SINK per_customer_out; DROP MATERIALIZED VIEW per_customer; DROP TABLE orders",
        )
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !view_rows(&upstream, "SELECT slot_name FROM pg_replication_slots")
        .await
        .is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "the slot is left after DROP TABLE"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One upstream transaction of some 80000 changes — more than Eddy holds in memory at
/// once (it applies such a transaction in parts) — inserts, updates, key changes and
/// deletes of rows it inserted itself.
const LARGE_TRANSACTION: &str = "BEGIN;
    INSERT INTO orders SELECT g, g % 10, g * 0.25, 'big', now(), g % 3 = 0, g / 7.0
        FROM generate_series(100001, 160000) g;
    UPDATE orders SET amount = amount + 2, note = 'big-u' WHERE id % 5 = 0;
    UPDATE orders SET id = id + 1000000 WHERE id BETWEEN 100001 AND 101000;
    DELETE FROM orders WHERE id % 9 = 0 AND id > 150000;
    COMMIT;";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_larger_than_memory_holds_is_applied_exactly_across_a_kill() {
    let pg = PostgresServer::start();
    let upstream = pg.connect().await;
    upstream.batch_execute(UPSTREAM).await.unwrap();
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let args = ["--barrier-interval-ms", "200"];
    let mut server = TestServer::start_in_with_args(&data_dir, &args);
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE TABLE orders (id INT PRIMARY KEY, customer INT, amount DECIMAL(12, 2), note VARCHAR,
                 placed TIMESTAMPTZ, flag BOOLEAN, ratio DOUBLE PRECISION) {};
             CREATE MATERIALIZED VIEW per_customer AS {PER_CUSTOMER};",
            cdc_with(&pg, "orders", ""),
        ))
        .await
        .unwrap();
    upstream.batch_execute(LARGE_TRANSACTION).await.unwrap();
    // Killed once a part of the transaction is in (most likely before the rest): after
    // the restart the whole transaction is read again, and applied over what was kept.
    let deadline = Instant::now() + Duration::from_secs(60);
    while view_rows(&client, "SELECT count(*) FROM orders").await == vec![vec!["2000"]] {
        assert!(
            Instant::now() < deadline,
            "nothing of the transaction arrived"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let seen = view_rows(&client, "SELECT count(*) FROM orders").await;
    eprintln!("killed with {seen:?} rows in the table");
    drop(client);
    server.kill();
    server = TestServer::start_in_with_args(&data_dir, &args);
    upstream.batch_execute(&changes(0)).await.unwrap();
    let client = server.connect().await;
    table_and_view_equal_upstream(&client, &upstream).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_that_does_not_fit_the_table_is_skipped_counted_and_kept() {
    let pg = PostgresServer::start();
    let upstream = pg.connect().await;
    upstream
        .batch_execute("CREATE TABLE readings (id INT PRIMARY KEY, level INT, note TEXT)")
        .await
        .unwrap();
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let args = ["--barrier-interval-ms", "100"];
    let mut server = TestServer::start_in_with_args(&data_dir, &args);
    let client = server.connect().await;
    // `level` is narrower here than upstream, and `note` may not be NULL.
    client
        .batch_execute(&format!(
            "CREATE TABLE readings (id INT PRIMARY KEY, level SMALLINT, note VARCHAR NOT NULL) {}",
            cdc_with(&pg, "readings", ", error.policy = 'dead_letter'"),
        ))
        .await
        .unwrap();
    upstream
        .batch_execute(
            "INSERT INTO readings VALUES (1, 10, 'a'), (2, 70000, 'too big'), (3, 30, NULL), (4, 40, 'd');
             UPDATE readings SET level = level + 1 WHERE id = 1;",
        )
        .await
        .unwrap();
    crate::streaming::wait_for_rows(
        &client,
        "SELECT id, level, note FROM readings ORDER BY id",
        &[
            vec!["1".into(), "11".into(), "a".into()],
            vec!["4".into(), "40".into(), "d".into()],
        ],
    )
    .await;
    // Counted and kept once each, also after a kill.
    server.kill();
    server = TestServer::start_in_with_args(&data_dir, &args);
    let client = server.connect().await;
    upstream
        .batch_execute("INSERT INTO readings VALUES (5, 50, 'e')")
        .await
        .unwrap();
    crate::streaming::wait_for_rows(
        &client,
        "SELECT count(*) FROM readings",
        &[vec!["3".into()]],
    )
    .await;
    assert_eq!(
        view_rows(
            &client,
            "SELECT connector, malformed_rows FROM eddy_catalog.connector_tables WHERE name = 'readings'"
        )
        .await,
        vec![vec!["postgres-cdc", "2"]]
    );
    let letters = view_rows(
        &client,
        "SELECT job, record, error FROM eddy_catalog.dead_letters ORDER BY record",
    )
    .await;
    assert_eq!(letters.len(), 2, "{letters:?}");
    assert!(letters.iter().all(|l| l[0] == "readings"));
    assert!(letters[0][1].contains("\"level\":\"70000\""), "{letters:?}");
    assert!(letters[1][1].contains("\"id\":\"3\""), "{letters:?}");
    assert!(letters[1][2].contains("\"note\" is NULL"), "{letters:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cdc_table_options_and_upstream_are_checked() {
    let pg = PostgresServer::start();
    let upstream = pg.connect().await;
    upstream
        .batch_execute("CREATE TABLE items (id INT PRIMARY KEY, name TEXT)")
        .await
        .unwrap();
    let server = TestServer::start();
    let client = server.connect().await;
    let with = |table: &str| cdc_with(&pg, table, "");
    for (sql, error) in [
        (
            format!("CREATE TABLE a (id INT, name VARCHAR) {}", with("items")),
            "needs a PRIMARY KEY",
        ),
        (
            format!(
                "CREATE TABLE a (id INT PRIMARY KEY, name VARCHAR) {}",
                with("missing")
            ),
            "table public.missing does not exist",
        ),
        (
            format!(
                "CREATE TABLE a (id INT PRIMARY KEY, price INT) {}",
                with("items")
            ),
            "column \"price\" is not in table public.items",
        ),
        (
            "CREATE TABLE a (id INT PRIMARY KEY) FROM nope TABLE 'public.items'".to_string(),
            "source \"nope\" does not exist",
        ),
    ] {
        let e = client.batch_execute(&sql).await.unwrap_err();
        let message = e.as_db_error().unwrap().message().to_string();
        assert!(message.contains(error), "{sql}: {message}");
        assert!(
            client.batch_execute("SELECT * FROM a").await.is_err(),
            "{sql}: a failed CREATE TABLE leaves no table"
        );
    }
    // A table with its own options works as well as one from a shared source.
    client
        .batch_execute(&format!(
            "CREATE TABLE a (id INT PRIMARY KEY, name VARCHAR) {}",
            with("items")
        ))
        .await
        .unwrap();
    upstream
        .batch_execute("INSERT INTO items VALUES (1, 'one'), (2, NULL); UPDATE items SET name = 'uno' WHERE id = 1")
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let rows = view_rows(&client, "SELECT id, name FROM a ORDER BY id").await;
        if rows == vec![vec!["1", "uno"], vec!["2", "NULL"]] {
            break;
        }
        assert!(Instant::now() < deadline, "{rows:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Dropped and made again at once under the same name (so the same slot name): the
    // old table's slot drop must not take the new table's slot, whose changes then flow.
    client
        .batch_execute(&format!(
            "DROP TABLE a; CREATE TABLE a (id INT PRIMARY KEY, name VARCHAR) {}",
            with("items")
        ))
        .await
        .unwrap();
    upstream
        .batch_execute("INSERT INTO items VALUES (3, 'three'); DELETE FROM items WHERE id = 2")
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let rows = view_rows(&client, "SELECT id, name FROM a ORDER BY id").await;
        if rows == vec![vec!["1", "uno"], vec!["3", "three"]] {
            break;
        }
        assert!(Instant::now() < deadline, "{rows:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let slots = view_rows(&upstream, "SELECT slot_name FROM pg_replication_slots").await;
    assert_eq!(slots, vec![vec!["eddy_a"]], "one slot, the new table's");
}
