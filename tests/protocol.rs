//! Wire-protocol behaviour that sqllogictest files cannot express: bad bytes, cancel,
//! portals with a row limit, typed parameters.

use crate::common::TestServer;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use tokio_postgres::types::Type;

#[tokio::test]
async fn garbage_bytes_close_only_that_connection() {
    let server = TestServer::start();
    let healthy = server.connect().await;

    // A startup packet that claims an absurd length, then noise.
    let mut bad = TcpStream::connect(server.addr).unwrap();
    bad.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    bad.write_all(&[0x7f, 0xff, 0xff, 0xff, 0xde, 0xad, 0xbe, 0xef])
        .unwrap();
    bad.write_all(&[0u8; 64]).unwrap();
    let mut buf = [0u8; 256];
    // The server answers with an error or just closes; either way it must not hang.
    let _ = bad.read(&mut buf);

    // A valid startup followed by a message of an unknown type with a bogus length.
    let mut rude = TcpStream::connect(server.addr).unwrap();
    rude.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut startup = Vec::new();
    let body = b"\x00\x03\x00\x00user\x00root\x00database\x00dev\x00\x00";
    startup.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    startup.extend_from_slice(body);
    rude.write_all(&startup).unwrap();
    let _ = rude.read(&mut buf);
    rude.write_all(b"\x01\xff\xff\xff\xf0garbage").unwrap();
    let _ = rude.read(&mut buf);

    // The other session is untouched and new ones are accepted.
    let row = healthy.query_one("SELECT 40 + 2", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 42);
    let fresh = server.connect().await;
    let row = fresh.query_one("SELECT 'still here'", &[]).await.unwrap();
    assert_eq!(row.get::<_, &str>(0), "still here");
}

#[tokio::test]
async fn cancel_request_stops_a_long_query() {
    let server = TestServer::start();
    let client = server.connect().await;
    let token = client.cancel_token();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        token.cancel_query(tokio_postgres::NoTls).await.unwrap();
    });
    let started = std::time::Instant::now();
    let result = client
        .simple_query(
            "SELECT count(*) FROM generate_series(1, 20000) a CROSS JOIN generate_series(1, 20000) b WHERE (a.a + b.b) % 7 = 3",
        )
        .await;
    canceller.await.unwrap();
    let err = result.expect_err("a cancelled query fails");
    assert_eq!(err.code().map(|c| c.code()), Some("57014"), "error: {err}");
    assert!(started.elapsed() < Duration::from_secs(60));
    // The session is usable afterwards.
    let row = client.query_one("SELECT 1::INT", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 1);
}

#[tokio::test]
async fn portal_with_max_rows_suspends_and_resumes() {
    let server = TestServer::start();
    let mut client = server.connect().await;
    client
        .batch_execute("CREATE TABLE nums (n INT PRIMARY KEY); INSERT INTO nums SELECT CAST(generate_series AS INT) FROM generate_series(1, 10);")
        .await
        .unwrap();
    let tx = client.transaction().await.unwrap();
    let stmt = tx.prepare("SELECT n FROM nums ORDER BY n").await.unwrap();
    let portal = tx.bind(&stmt, &[]).await.unwrap();
    let mut seen = Vec::new();
    let mut fetches = 0;
    loop {
        let rows = tx.query_portal(&portal, 3).await.unwrap();
        fetches += 1;
        if rows.is_empty() {
            break;
        }
        assert!(rows.len() <= 3);
        seen.extend(rows.iter().map(|r| r.get::<_, i32>(0)));
    }
    tx.commit().await.unwrap();
    assert_eq!(seen, (1..=10).collect::<Vec<_>>());
    assert!(
        fetches >= 4,
        "10 rows in pages of 3 take 4 fetches, took {fetches}"
    );
}

#[tokio::test]
async fn typed_parameters_in_both_formats() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE people (id BIGINT PRIMARY KEY, name TEXT, score DOUBLE PRECISION, born DATE)")
        .await
        .unwrap();
    // tokio-postgres sends parameters in binary, typed by what the server announced.
    let insert = client
        .prepare("INSERT INTO people VALUES ($1, $2, $3, $4)")
        .await
        .unwrap();
    assert_eq!(
        insert.params(),
        &[Type::INT8, Type::TEXT, Type::FLOAT8, Type::DATE]
    );
    for (id, name, score) in [(1i64, "ann", 1.5f64), (2, "bob", 2.25), (3, "cy", -1.0)] {
        let born = chrono::NaiveDate::from_ymd_opt(1990, 1, id as u32).unwrap();
        let n = client
            .execute(&insert, &[&id, &name, &score, &born])
            .await
            .unwrap();
        assert_eq!(n, 1);
    }
    // The same prepared statement executed many times (as JDBC does before going binary).
    let lookup = client
        .prepare("SELECT name, score FROM people WHERE id = $1")
        .await
        .unwrap();
    for _ in 0..6 {
        let row = client.query_one(&lookup, &[&2i64]).await.unwrap();
        assert_eq!(row.get::<_, &str>(0), "bob");
        assert_eq!(row.get::<_, f64>(1), 2.25);
    }
    let row = client
        .query_one(
            "SELECT count(*) FROM people WHERE score > $1 AND name <> $2",
            &[&0.0f64, &"ann"],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 1);
    // Text-format parameters through the simple protocol's counterpart: a literal.
    let rows = client
        .simple_query("SELECT born FROM people WHERE id = 3")
        .await
        .unwrap();
    let text = rows.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
        _ => None,
    });
    assert_eq!(text.as_deref(), Some("1990-01-03"));
}

async fn copy_in(
    client: &tokio_postgres::Client,
    sql: &str,
    data: &str,
) -> Result<u64, tokio_postgres::Error> {
    use futures::SinkExt;
    let sink = client.copy_in::<_, bytes::Bytes>(sql).await?;
    futures::pin_mut!(sink);
    // Send in small pieces so rows are split across CopyData messages.
    for piece in data.as_bytes().chunks(7) {
        sink.send(bytes::Bytes::copy_from_slice(piece)).await?;
    }
    sink.finish().await
}

#[tokio::test]
async fn copy_from_stdin_text_and_csv() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute("CREATE TABLE items (id INT PRIMARY KEY, name TEXT, price NUMERIC(8,2), seen TIMESTAMP, ok BOOLEAN)")
        .await
        .unwrap();

    let text = "1\tapple\t1.50\t2024-01-01 00:00:00\tt\n2\tpear\\twith tab\t\\N\t\\N\tf\n3\tfig\t0.99\t2024-03-04 05:06:07\ttrue\n";
    assert_eq!(
        copy_in(&client, "COPY items FROM STDIN", text)
            .await
            .unwrap(),
        3
    );

    let csv = "id,name,price\n4,\"banana, ripe\",2.00\n5,\"say \"\"hi\"\"\",\n";
    assert_eq!(
        copy_in(
            &client,
            "COPY items (id, name, price) FROM STDIN WITH (FORMAT csv, HEADER true)",
            csv
        )
        .await
        .unwrap(),
        2
    );

    let rows = client
        .query(
            "SELECT id, name, price::TEXT, ok FROM items ORDER BY id",
            &[],
        )
        .await
        .unwrap();
    let got: Vec<(i32, String, Option<String>, Option<bool>)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, "apple".into(), Some("1.50".into()), Some(true)),
            (2, "pear\twith tab".into(), None, Some(false)),
            (3, "fig".into(), Some("0.99".into()), Some(true)),
            (4, "banana, ripe".into(), Some("2.00".into()), None),
            (5, "say \"hi\"".into(), None, None),
        ]
    );

    // A bad row fails the COPY with a clear error; the session goes on.
    let err = copy_in(
        &client,
        "COPY items FROM STDIN",
        "6\tbad\tnot-a-number\t\\N\tt\n",
    )
    .await
    .expect_err("a malformed value fails the copy");
    assert!(err.code().is_some(), "expected a SQL error, got {err}");
    let err = copy_in(&client, "COPY items FROM STDIN", "7\ttoo few\n")
        .await
        .expect_err("a short row fails the copy");
    assert_eq!(err.code().map(|c| c.code()), Some("22P04"), "{err}");
    let row = client
        .query_one("SELECT count(*) FROM items", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 5);

    let err = copy_in(&client, "COPY nosuch FROM STDIN", "")
        .await
        .expect_err("unknown table");
    assert_eq!(err.code().map(|c| c.code()), Some("42P01"));
}

/// `RETURNING` with bound parameters: the statement is described with its parameter
/// types and result columns, and each execution returns the rows it wrote.
#[tokio::test]
async fn returning_with_typed_parameters() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE notes (id BIGINT PRIMARY KEY, body TEXT, len INT AS (length(body)), created TIMESTAMPTZ DEFAULT now())",
        )
        .await
        .unwrap();
    let insert = client
        .prepare(
            "INSERT INTO notes (id, body) VALUES ($1, $2) RETURNING id, len, created IS NOT NULL",
        )
        .await
        .unwrap();
    assert_eq!(insert.params(), &[Type::INT8, Type::TEXT]);
    assert_eq!(insert.columns().len(), 3);
    for (id, body) in [(1i64, "hello"), (2, "hi")] {
        let row = client.query_one(&insert, &[&id, &body]).await.unwrap();
        assert_eq!(row.get::<_, i64>(0), id);
        assert_eq!(row.get::<_, i32>(1), body.len() as i32);
        assert!(row.get::<_, bool>(2));
    }
    let update = client
        .prepare("UPDATE notes SET body = body || $1 WHERE id = $2 RETURNING body, len")
        .await
        .unwrap();
    let row = client.query_one(&update, &[&"!", &2i64]).await.unwrap();
    assert_eq!(row.get::<_, &str>(0), "hi!");
    assert_eq!(row.get::<_, i32>(1), 3);
    let rows = client
        .query("DELETE FROM notes WHERE id > $1 RETURNING id", &[&0i64])
        .await
        .unwrap();
    let mut ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
    ids.sort();
    assert_eq!(ids, vec![1, 2]);
    let left = client
        .query_one("SELECT count(*) FROM notes", &[])
        .await
        .unwrap();
    assert_eq!(left.get::<_, i64>(0), 0);
}

/// Opens a connection with extra startup parameters in its connection string.
async fn connect_with(server: &TestServer, extra: &str) -> tokio_postgres::Client {
    let conn = format!("{} {extra}", server.conn_string());
    let (client, connection) = tokio_postgres::connect(&conn, tokio_postgres::NoTls)
        .await
        .expect("connect to eddy");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

#[tokio::test]
async fn startup_options_set_the_session_and_its_time_zone() {
    let server = TestServer::start();
    // `options=-c name=value`, as libpq's PGOPTIONS sends them.
    let tokyo = connect_with(
        &server,
        "options='-c timezone=asia/tokyo -c application_name=startup\\\\ test'",
    )
    .await;
    let zone: String = tokyo.query_one("SHOW timezone", &[]).await.unwrap().get(0);
    assert_eq!(zone, "Asia/Tokyo");
    let app: String = tokyo
        .query_one("SHOW application_name", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(app, "startup test");
    let text = tokyo
        .simple_query("SELECT '2024-01-01 00:00:00+00'::timestamptz")
        .await
        .unwrap();
    let shown = text.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
        _ => None,
    });
    assert_eq!(shown.as_deref(), Some("2024-01-01 09:00:00+09:00"));
    // Binary values are instants whatever the zone.
    let instant: chrono::DateTime<chrono::Utc> = tokyo
        .query_one("SELECT '2024-01-01 09:00:00'::timestamptz", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(instant.to_rfc3339(), "2024-01-01T00:00:00+00:00");
    // Another session is not affected; a zone Eddy does not know leaves UTC.
    let other = connect_with(&server, "options='-c timezone=Mars/Olympus'").await;
    let zone: String = other.query_one("SHOW timezone", &[]).await.unwrap().get(0);
    assert_eq!(zone, "UTC");
}
