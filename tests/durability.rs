//! What a client was told is done stays done: across a clean restart and a SIGKILL.

use crate::common::TestServer;

async fn rows(client: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    client
        .simple_query(sql)
        .await
        .expect("query succeeds")
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(
                (0..r.len())
                    .map(|i| r.get(i).unwrap_or("NULL").to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn committed_rows_and_catalog_survive_sigkill() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut server = TestServer::start_in(&data_dir);
    {
        let client = server.connect().await;
        client
            .batch_execute(
                "CREATE TABLE accounts (id INT PRIMARY KEY, owner VARCHAR NOT NULL, balance NUMERIC(12,2));
                 CREATE TABLE events (kind TEXT, at TIMESTAMP);
                 INSERT INTO accounts VALUES (1, 'ann', 10.50), (2, 'bob', 20), (3, 'cy', 0);
                 INSERT INTO events VALUES ('open', '2024-01-01 10:00:00'), ('open', '2024-01-01 10:00:00');
                 UPDATE accounts SET balance = balance + 1 WHERE id = 2;
                 DELETE FROM accounts WHERE id = 3;
                 INSERT INTO accounts VALUES (1, 'ann', 99.99);
                 CREATE VIEW rich AS SELECT owner FROM accounts WHERE balance > 50;",
            )
            .await
            .expect("setup statements succeed");
    }
    // No shutdown, no flush: the process is gone the moment the statements returned.
    server.kill();

    let server = TestServer::start_in(&data_dir);
    let client = server.connect().await;
    assert_eq!(
        rows(
            &client,
            "SELECT id, owner, balance FROM accounts ORDER BY id"
        )
        .await,
        vec!["1,ann,99.99", "2,bob,21.00"]
    );
    assert_eq!(
        rows(&client, "SELECT count(*) FROM events").await,
        vec!["2"]
    );
    assert_eq!(rows(&client, "SELECT * FROM rich").await, vec!["ann"]);
    // New rows without a primary key get fresh hidden ids, never reusing old ones.
    client
        .simple_query("INSERT INTO events VALUES ('close', '2024-01-02 00:00:00')")
        .await
        .unwrap();
    assert_eq!(
        rows(&client, "SELECT count(*) FROM events").await,
        vec!["3"]
    );
}

#[tokio::test]
async fn sigterm_shuts_down_cleanly_and_data_remains() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut server = TestServer::start_in(&data_dir);
    {
        let client = server.connect().await;
        client
            .batch_execute("CREATE TABLE t (a INT); INSERT INTO t VALUES (1), (2);")
            .await
            .unwrap();
    }
    let status = server.terminate();
    assert!(status.success(), "eddy exited with {status} on SIGTERM");
    assert!(
        !data_dir.join("eddy.pid").exists(),
        "a clean shutdown removes the pid file"
    );
    let server = TestServer::start_in(&data_dir);
    let client = server.connect().await;
    assert_eq!(rows(&client, "SELECT sum(a) FROM t").await, vec!["3"]);
}

#[tokio::test]
async fn settings_come_from_a_config_file() {
    let temp = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = temp.path().join("eddy.toml");
    std::fs::write(
        &config,
        format!("listen = \"127.0.0.1:{port}\"\nworkers = 1\n"),
    )
    .unwrap();
    // --listen on the command line wins over the file, so pass only --config here.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_eddy"))
        .arg("--config")
        .arg(&config)
        .arg("--data-dir")
        .arg(temp.path().join("data"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let conn = format!("host=127.0.0.1 port={port} user=root dbname=dev");
    let client = loop {
        match tokio_postgres::connect(&conn, tokio_postgres::NoTls).await {
            Ok((client, connection)) => {
                tokio::spawn(connection);
                break client;
            }
            Err(_) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await
            }
            Err(e) => panic!("eddy did not listen on the port from its config file: {e}"),
        }
    };
    let row = client.query_one("SELECT 1::INT", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 1);
    // The pid file names the process and the address it listens on.
    let pid_file = std::fs::read_to_string(temp.path().join("data").join("eddy.pid")).unwrap();
    assert_eq!(
        pid_file,
        format!("{}\n127.0.0.1:{port}\n", child.id()),
        "eddy.pid"
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// Renamed relations keep their rows, views and jobs across a SIGKILL: the views over a
/// renamed table and the job of a renamed view are planned again from their rewritten
/// definitions, and resume from their checkpoint without counting a row twice.
#[tokio::test]
async fn renamed_relations_survive_sigkill() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut server = TestServer::start_in(&data_dir);
    {
        let client = server.connect().await;
        client
            .batch_execute(
                "SET RW_IMPLICIT_FLUSH TO true;
                 CREATE TABLE orders (id INT PRIMARY KEY, cust INT, amount DECIMAL(10,2));
                 INSERT INTO orders VALUES (1, 10, 5.50), (2, 11, 7.25), (3, 10, 1.00);
                 CREATE MATERIALIZED VIEW per_cust AS SELECT orders.cust, sum(amount) AS total, count(*) AS n FROM orders GROUP BY cust;
                 CREATE MATERIALIZED VIEW overall AS SELECT sum(total) AS total, sum(n) AS n FROM per_cust;
                 CREATE VIEW big AS SELECT cust FROM per_cust WHERE total > 5;
                 ALTER TABLE orders RENAME TO sales;
                 ALTER MATERIALIZED VIEW per_cust RENAME TO by_customer;
                 INSERT INTO sales VALUES (4, 12, 2.00);
                 UPDATE sales SET amount = 9.00 WHERE id = 2;",
            )
            .await
            .expect("renames and changes succeed");
    }
    server.kill();

    let server = TestServer::start_in(&data_dir);
    let client = server.connect().await;
    client
        .batch_execute("SET RW_IMPLICIT_FLUSH TO true; INSERT INTO sales VALUES (5, 12, 3.00);")
        .await
        .unwrap();
    assert_eq!(
        rows(
            &client,
            "SELECT cust, total, n FROM by_customer ORDER BY cust"
        )
        .await,
        vec!["10,6.50,2", "11,9.00,1", "12,5.00,2"]
    );
    assert_eq!(
        rows(&client, "SELECT total, n FROM overall").await,
        vec!["20.50,5"]
    );
    assert_eq!(
        rows(&client, "SELECT cust FROM big ORDER BY cust").await,
        vec!["10", "11"]
    );
    // The old names are gone.
    assert!(client.simple_query("SELECT * FROM orders").await.is_err());
    assert!(client.simple_query("SELECT * FROM per_cust").await.is_err());
    let jobs = rows(
        &client,
        "SELECT name, state FROM eddy_catalog.jobs ORDER BY name",
    )
    .await;
    assert_eq!(jobs, vec!["by_customer,running", "overall,running"]);
}

#[tokio::test]
async fn altered_columns_survive_sigkill() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let mut server = TestServer::start_in(&data_dir);
    {
        let client = server.connect().await;
        client
            .batch_execute(
                "CREATE TABLE ledger (id INT PRIMARY KEY, memo VARCHAR, amount DECIMAL(10,2));
                 CREATE TABLE tags (tag TEXT);
                 INSERT INTO ledger VALUES (1, 'a', 1.25), (2, 'b', NULL), (3, 'c', -7.50);
                 INSERT INTO tags VALUES ('x'), ('x'), (NULL);
                 ALTER TABLE ledger ADD COLUMN at TIMESTAMPTZ DEFAULT '2024-05-01 12:00:00+00';
                 ALTER TABLE ledger DROP COLUMN memo;
                 ALTER TABLE tags ADD COLUMN weight REAL;
                 INSERT INTO ledger VALUES (4, 4.00, NULL);
                 UPDATE ledger SET amount = 2.50 WHERE id = 2;
                 INSERT INTO tags VALUES ('y', 0.5);",
            )
            .await
            .expect("columns change and rows follow");
    }
    // Rows and their new columns were written together: nothing to flush first.
    server.kill();

    let server = TestServer::start_in(&data_dir);
    let client = server.connect().await;
    assert_eq!(
        rows(&client, "SELECT * FROM ledger ORDER BY id").await,
        vec![
            "1,1.25,2024-05-01 12:00:00+00:00",
            "2,2.50,2024-05-01 12:00:00+00:00",
            "3,-7.50,2024-05-01 12:00:00+00:00",
            "4,4.00,NULL",
        ]
    );
    assert_eq!(
        rows(&client, "SELECT tag, weight FROM tags ORDER BY tag, weight").await,
        vec!["x,NULL", "x,NULL", "y,0.5", "NULL,NULL"]
    );
    // A view created now reads the new columns and follows later changes.
    client
        .batch_execute(
            "SET RW_IMPLICIT_FLUSH TO true;
             CREATE MATERIALIZED VIEW dated AS SELECT at IS NULL AS undated, count(*) AS n, sum(amount) AS total FROM ledger GROUP BY at IS NULL;
             DELETE FROM ledger WHERE id = 3;",
        )
        .await
        .unwrap();
    assert_eq!(
        rows(&client, "SELECT * FROM dated ORDER BY undated").await,
        vec!["f,2,3.75", "t,1,4.00"]
    );
}
