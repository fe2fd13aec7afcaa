//! Sinks end to end: a file sink on a local directory and on an S3-compatible server
//! (moto), and a PostgreSQL sink into a real PostgreSQL server, each read back from the
//! target and compared with what DataFusion computes in batch over the same source rows —
//! with the server SIGKILLed mid-stream, so that files come out exactly once and the
//! PostgreSQL table converges to exactly the query's result.

use crate::common::postgres::PostgresServer;
use crate::common::{TestServer, start_s3};
use crate::streaming::{assert_same, batch_query, source_options, view_rows};
use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// 12000 rows paced at 4000 per second over two splits: a few seconds of stream to kill.
const GEN: &str = "CREATE SOURCE gen (id BIGINT, k INT, v DOUBLE PRECISION, name VARCHAR) WITH (
    connector = 'datagen',
    fields.id.kind = 'sequence', fields.id.start = 1, fields.id.end = 12000,
    fields.k.min = 1, fields.k.max = 9, fields.k.seed = 5,
    fields.v.min = -100, fields.v.max = 100, fields.v.seed = 6,
    fields.name.length = 3,
    datagen.rows.per.second = 4000,
    datagen.split.num = 2)";

/// Every kind of value a sink must carry: integers, floats, a decimal with scale, NULLs,
/// a timestamp with time zone and (appended by the sinks that carry it) an interval.
const COLUMNS: &str = "id, k, v, CASE WHEN k = 3 THEN NULL ELSE name END AS name, \
    CAST(v AS DECIMAL(12, 2)) AS price, \
    TIMESTAMPTZ '2024-01-01 00:00:00+00' + CAST(id || ' seconds' AS INTERVAL) AS ts";

fn gen_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("k", DataType::Int32, true),
        Field::new("v", DataType::Float64, true),
        Field::new("name", DataType::Utf8, true),
    ]))
}

/// `query` (over `s`) in DataFusion, over every row `gen` makes. A bare DataFusion reads
/// `TIMESTAMPTZ '...+00'` as a UTC timestamp without a zone: column `utc_column` gets the
/// zone back.
async fn batch(query: &str, utc_column: usize) -> Vec<Vec<String>> {
    let schema = gen_schema();
    let spec =
        eddy::connectors::ConnectorSpec::from_options(&schema, &source_options(GEN)).unwrap();
    let mut rows = batch_query(query, &schema, &spec).await;
    for row in &mut rows {
        if row[utc_column] != "NULL" {
            row[utc_column].push('Z');
        }
    }
    rows
}

/// Restarts the server `kills` times at moments spread over the stream, then waits until
/// `job` has finished.
async fn kill_while_running(
    server: &mut TestServer,
    data_dir: &Path,
    args: &[&str],
    kills: usize,
    job: &str,
) -> tokio_postgres::Client {
    for _ in 0..kills {
        tokio::time::sleep(Duration::from_millis(900)).await;
        server.kill();
        *server = TestServer::start_in_with_args(data_dir, args);
    }
    let client = server.connect().await;
    wait_finished(&client, job).await;
    client
}

async fn wait_finished(client: &tokio_postgres::Client, job: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let rows = view_rows(
            client,
            &format!("SELECT state, error FROM eddy_catalog.jobs WHERE name = '{job}'"),
        )
        .await;
        assert!(
            rows.first().is_none_or(|r| r[0] != "failed"),
            "{job} failed: {rows:?}"
        );
        if rows.first().is_some_and(|r| r[0] == "finished") {
            // Its last epoch is published once committed.
            client.batch_execute("FLUSH").await.unwrap();
            return;
        }
        assert!(Instant::now() < deadline, "{job} did not finish: {rows:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The rows of JSON-lines files, each value as text (NULL as `NULL`), sorted.
fn json_rows(files: &[(String, Vec<u8>)], columns: &[&str]) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for (_, bytes) in files {
        for line in std::str::from_utf8(bytes).unwrap().lines() {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            rows.push(
                columns
                    .iter()
                    .map(|c| match &value[*c] {
                        serde_json::Value::Null => "NULL".to_string(),
                        serde_json::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                    .collect(),
            );
        }
    }
    rows.sort();
    rows
}

/// The files directly in a local directory (not the staging area), by name.
fn local_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

/// Every row once, every value as DataFusion computes it, the interval as PostgreSQL
/// prints it.
async fn assert_exact_rows(what: &str, rows: Vec<Vec<String>>) {
    let expected = batch(&format!("SELECT {COLUMNS} FROM s"), 5).await;
    let without_interval: Vec<Vec<String>> =
        rows.iter().map(|r| r[..r.len() - 1].to_vec()).collect();
    let mut ids: Vec<&String> = rows.iter().map(|r| &r[0]).collect();
    ids.dedup();
    assert_eq!(ids.len(), rows.len(), "{what}: a row was written twice");
    let mut sorted = without_interval;
    sorted.sort();
    assert_same(what, &sorted, &expected);
    for row in &rows {
        let minutes = row[1].parse::<u32>().unwrap() * 90;
        let interval = format!("{:02}:{:02}:00", minutes / 60, minutes % 60);
        assert_eq!(row[row.len() - 1], interval, "{what}: interval of {row:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_sink_writes_every_row_exactly_once_across_kills() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let out = temp.path().join("out");
    let args = ["--barrier-interval-ms", "200"];
    let mut server = TestServer::start_in_with_args(&data_dir, &args);
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "SET streaming_parallelism = 2; {GEN};
             CREATE SINK out AS SELECT {COLUMNS}, CAST((k * 90) || ' minutes' AS INTERVAL) AS iv FROM gen
             WITH (connector = 'file', path = '{}', max_row_count = '1000') FORMAT PLAIN ENCODE JSON",
            out.display()
        ))
        .await
        .unwrap();
    let client = kill_while_running(&mut server, &data_dir, &args, 3, "out").await;
    let files = local_files(&out);
    assert!(
        files
            .iter()
            .all(|(name, _)| name.starts_with("out-") && name.ends_with(".json")),
        "only published files: {:?}",
        files.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    let columns = ["id", "k", "v", "name", "price", "ts", "iv"];
    assert_exact_rows("file sink", json_rows(&files, &columns)).await;
    // Nothing is left staged once every epoch is committed.
    let staged = walk(&out.join("_staging"));
    assert!(staged.is_empty(), "left staged: {staged:?}");
    drop(client);
}

/// A change of parallelism restarts the sink's job from its last barrier, whose epoch may
/// not be committed yet: the files it staged for that epoch must still be published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_sink_keeps_its_staged_epochs_across_parallelism_changes() {
    let temp = tempfile::tempdir().unwrap();
    let out = temp.path().join("out");
    let args = ["--barrier-interval-ms", "200"];
    let server = TestServer::start_in_with_args(&temp.path().join("data"), &args);
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "SET streaming_parallelism = 2; {GEN};
             CREATE SINK out AS SELECT {COLUMNS}, CAST((k * 90) || ' minutes' AS INTERVAL) AS iv FROM gen
             WITH (connector = 'file', path = '{}') FORMAT PLAIN ENCODE JSON",
            out.display()
        ))
        .await
        .unwrap();
    for parallelism in [1, 2, 1, 2] {
        tokio::time::sleep(Duration::from_millis(600)).await;
        client
            .batch_execute(&format!("ALTER SINK out SET PARALLELISM = {parallelism}"))
            .await
            .unwrap();
    }
    wait_finished(&client, "out").await;
    client.batch_execute("FLUSH").await.unwrap();
    let files = local_files(&out);
    let columns = ["id", "k", "v", "name", "price", "ts", "iv"];
    assert_exact_rows("file sink", json_rows(&files, &columns)).await;
}

fn walk(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return vec![];
    };
    entries
        .flat_map(|e| {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p)
            } else {
                vec![p.display().to_string()]
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_sink_writes_parquet_and_csv_that_read_back_as_the_rows() {
    let temp = tempfile::tempdir().unwrap();
    let server = TestServer::start_in_with_args(&temp.path().join("data"), &[]);
    let client = server.connect().await;
    let parquet = temp.path().join("parquet");
    let csv = temp.path().join("csv");
    client
        .batch_execute(&format!(
            "CREATE TABLE t (id INT PRIMARY KEY, price DECIMAL(10, 2), v DOUBLE PRECISION, note VARCHAR, ts TIMESTAMPTZ);
             INSERT INTO t VALUES (1, 12.50, 0.1, 'a,\"b\"', '2024-05-06 07:08:09.5+00'), (2, NULL, NULL, NULL, NULL);
             CREATE SINK p FROM t WITH (connector = 'file', path = '{}', force_append_only = 'true') FORMAT PLAIN ENCODE PARQUET;
             CREATE SINK c FROM t WITH (connector = 'fs', fs.path = '{}', force_append_only = 'true') FORMAT PLAIN ENCODE CSV (delimiter = '|');
             INSERT INTO t VALUES (3, -0.05, CAST('1e300' AS DOUBLE PRECISION), 'x', '1999-12-31 23:59:59+00');
             DELETE FROM t WHERE id = 2;
             FLUSH;",
            parquet.display(),
            csv.display()
        ))
        .await
        .unwrap();
    // Parquet keeps the types: DataFusion reads the files back as the rows inserted.
    let ctx = datafusion::prelude::SessionContext::new();
    ctx.register_parquet(
        "p",
        parquet.to_str().unwrap(),
        datafusion::prelude::ParquetReadOptions::default(),
    )
    .await
    .unwrap();
    let read = ctx
        .sql("SELECT id, price, v, note, ts FROM p ORDER BY id")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(
        read[0].schema().field(1).data_type(),
        &DataType::Decimal128(10, 2)
    );
    let rows = crate::streaming::sorted_rows_text(&read);
    let inserted = view_rows(
        &client,
        "SELECT id, price, v, note, ts FROM (VALUES (1, 12.50, CAST(0.1 AS DOUBLE PRECISION), 'a,\"b\"', TIMESTAMPTZ '2024-05-06 07:08:09.5+00'), \
         (2, NULL, NULL, NULL, NULL), (3, -0.05, CAST('1e300' AS DOUBLE PRECISION), 'x', TIMESTAMPTZ '1999-12-31 23:59:59+00')) AS r(id, price, v, note, ts) ORDER BY id",
    )
    .await;
    assert_same("parquet sink", &rows, &inserted);
    // CSV: a header per file, PostgreSQL's text of each value, empty for NULL.
    let mut lines: Vec<String> = local_files(&csv)
        .iter()
        .flat_map(|(_, b)| {
            String::from_utf8(b.clone())
                .unwrap()
                .lines()
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .filter(|l| !l.starts_with("id|"))
        .collect();
    lines.sort();
    assert_eq!(
        lines,
        vec![
            "1|12.50|0.1|\"a,\"\"b\"\"\"|2024-05-06 07:08:09.5+00:00",
            "2||||",
            "3|-0.05|1e+300|x|1999-12-31 23:59:59+00:00",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_file_sink_publishes_each_epoch_once_across_a_kill() {
    let s3 = start_s3();
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let args = ["--barrier-interval-ms", "200"];
    let mut server = TestServer::start_in_with_args(&data_dir, &args);
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "{GEN};
             CREATE SINK out AS SELECT {COLUMNS}, CAST((k * 90) || ' minutes' AS INTERVAL) AS iv FROM gen
             WITH (connector = 's3', s3.bucket_name = 'eddy', s3.path = 'sink/out/',
                   s3.region_name = 'us-east-1', s3.endpoint_url = '{}',
                   s3.credentials.access = 'test', s3.credentials.secret = 'test')
             FORMAT PLAIN ENCODE JSON",
            s3.endpoint
        ))
        .await
        .unwrap();
    let client = kill_while_running(&mut server, &data_dir, &args, 1, "out").await;
    let store = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name("eddy")
        .with_endpoint(&s3.endpoint)
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .build()
        .unwrap();
    use futures::TryStreamExt;
    use object_store::{ObjectStore, ObjectStoreExt};
    let listed: Vec<object_store::ObjectMeta> = store
        .list(Some(&object_store::path::Path::from("sink/out")))
        .try_collect()
        .await
        .unwrap();
    let mut files = Vec::new();
    for object in &listed {
        let name = object.location.to_string();
        assert!(
            !name.contains("_staging"),
            "a staged file is left after the last commit: {name}"
        );
        let bytes = store
            .get(&object.location)
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        files.push((name, bytes.to_vec()));
    }
    let columns = ["id", "k", "v", "name", "price", "ts", "iv"];
    assert_exact_rows("s3 file sink", json_rows(&files, &columns)).await;
    drop(client);
}

const TOTALS_TARGET: &str =
    "CREATE TABLE totals (k INT PRIMARY KEY, n BIGINT, total NUMERIC(20, 2),
    max_v DOUBLE PRECISION, last_ts TIMESTAMPTZ, first_name VARCHAR, span INTERVAL)";
const TOTALS: &str =
    "SELECT k, count(*) AS n, sum(CAST(v AS DECIMAL(12, 2))) AS total, max(v) AS max_v,
    max(TIMESTAMPTZ '2024-01-01 00:00:00+00' + CAST(id || ' seconds' AS INTERVAL)) AS last_ts,
    min(CASE WHEN id % 5 = 0 THEN NULL ELSE name END) AS first_name";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sink_converges_to_the_aggregate_across_kills() {
    let pg = PostgresServer::start();
    let target = pg.connect().await;
    target.batch_execute(TOTALS_TARGET).await.unwrap();
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let args = ["--barrier-interval-ms", "200"];
    let mut server = TestServer::start_in_with_args(&data_dir, &args);
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "SET streaming_parallelism = 2; {GEN};
             CREATE SINK totals AS {TOTALS}, max(CAST(k || ' hours' AS INTERVAL)) AS span FROM gen GROUP BY k
             WITH ({}, primary_key = 'k')",
            pg.sink_options("totals")
        ))
        .await
        .unwrap();
    let client = kill_while_running(&mut server, &data_dir, &args, 3, "totals").await;
    let written = view_rows(
        &target,
        "SELECT k, n, total, max_v, last_ts, first_name FROM totals ORDER BY k",
    )
    .await;
    let expected = batch(&format!("{TOTALS} FROM s GROUP BY k"), 4).await;
    assert_same("postgres sink", &written, &expected);
    let spans = view_rows(&target, "SELECT k, span FROM totals ORDER BY k").await;
    for row in spans {
        assert_eq!(
            row[1],
            format!("{:02}:00:00", row[0].parse::<u32>().unwrap())
        );
    }
    drop(client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sink_applies_updates_and_deletes() {
    let pg = PostgresServer::start();
    let target = pg.connect().await;
    target
        .batch_execute(
            "CREATE TABLE mirror (id INT PRIMARY KEY, price NUMERIC(10, 2), note VARCHAR, ts TIMESTAMPTZ, extra INT DEFAULT 7);
             CREATE TABLE counts (g INT, n BIGINT, PRIMARY KEY (g));
             CREATE TABLE log (id INT, note VARCHAR)",
        )
        .await
        .unwrap();
    let temp = tempfile::tempdir().unwrap();
    let server = TestServer::start_in_with_args(&temp.path().join("data"), &[]);
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE TABLE t (id INT PRIMARY KEY, price DECIMAL(10, 2), note VARCHAR, ts TIMESTAMPTZ);
             INSERT INTO t VALUES (1, 1.50, 'one', '2024-01-01 00:00:00+00'), (2, 2.25, 'two', NULL), (3, NULL, NULL, NULL);
             CREATE SINK mirror FROM t WITH ({}, primary_key = 'id');
             CREATE SINK counts AS SELECT id % 2 AS g, count(*) AS n FROM t GROUP BY id % 2 WITH ({}, type = 'upsert', primary_key = 'g');
             CREATE SINK log AS SELECT id, note FROM t WITH ({}, type = 'append-only', force_append_only = 'true');
             UPDATE t SET price = 9.99, note = 'it''s' WHERE id = 1;
             DELETE FROM t WHERE id = 2;
             INSERT INTO t VALUES (4, 4.00, 'four', '2030-06-01 12:00:00.123456+00');
             DELETE FROM t WHERE id = 3;
             FLUSH;",
            pg.sink_options("mirror"),
            pg.sink_options("counts"),
            pg.sink_options("log"),
        ))
        .await
        .unwrap();
    assert_eq!(
        view_rows(
            &target,
            "SELECT id, price, note, ts, extra FROM mirror ORDER BY id"
        )
        .await,
        vec![
            vec!["1", "9.99", "it's", "2024-01-01 00:00:00+00", "7"],
            vec!["4", "4.00", "four", "2030-06-01 12:00:00.123456+00", "7"],
        ]
    );
    // PostgreSQL shows a UTC offset as `+00`, Eddy (as RisingWave) as `+00:00`.
    let mirror: Vec<Vec<String>> = view_rows(
        &target,
        "SELECT id, price, note, ts FROM mirror ORDER BY id",
    )
    .await
    .into_iter()
    .map(|row| {
        row.into_iter()
            .map(|v| match v.strip_suffix("+00") {
                Some(utc) => format!("{utc}+00:00"),
                None => v,
            })
            .collect()
    })
    .collect();
    assert_eq!(
        mirror,
        view_rows(&client, "SELECT id, price, note, ts FROM t ORDER BY id").await,
        "the mirror equals the table"
    );
    // Group 0 went from 1 row to 2 (id 2 deleted, 4 inserted); group 1 from 2 to 1.
    assert_eq!(
        view_rows(&target, "SELECT g, n FROM counts ORDER BY g").await,
        vec![vec!["0", "1"], vec!["1", "1"]]
    );
    // Append-only keeps every inserted row (the new halves of updates included).
    let log = view_rows(&target, "SELECT id, note FROM log ORDER BY id, note").await;
    assert_eq!(
        log,
        vec![
            vec!["1", "it's"],
            vec!["1", "one"],
            vec!["2", "two"],
            vec!["3", "NULL"],
            vec!["4", "four"],
        ]
    );
    // The target is checked when the sink is created.
    let keyed = "SELECT id, note FROM t";
    let grouped = "SELECT id % 2 AS g, count(*) AS n FROM t GROUP BY id % 2";
    for (query, options, error) in [
        (
            keyed,
            format!("{}, primary_key = 'id'", pg.sink_options("missing")),
            "does not exist",
        ),
        (
            keyed,
            format!("{}, primary_key = 'id'", pg.sink_options("log")),
            "no primary key or unique index on (id)",
        ),
        (
            grouped,
            format!("{}, primary_key = 'g'", pg.sink_options("mirror")),
            "column \"g\" is not in table public.mirror",
        ),
        (keyed, pg.sink_options("log"), "force_append_only"),
    ] {
        let e = client
            .batch_execute(&format!("CREATE SINK bad AS {query} WITH ({options})"))
            .await
            .unwrap_err();
        let message = e.as_db_error().unwrap().message().to_string();
        assert!(message.contains(error), "{message}");
    }
    assert!(
        view_rows(&client, "SELECT name FROM eddy_catalog.jobs")
            .await
            .iter()
            .all(|r| r[0] != "bad")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sink_catches_up_after_the_database_was_down() {
    let mut pg = PostgresServer::start();
    let target = pg.connect().await;
    target
        .batch_execute("CREATE TABLE mirror (id INT PRIMARY KEY, note VARCHAR)")
        .await
        .unwrap();
    drop(target);
    let temp = tempfile::tempdir().unwrap();
    let server = TestServer::start_in_with_args(&temp.path().join("data"), &[]);
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE TABLE t (id INT PRIMARY KEY, note VARCHAR);
             INSERT INTO t VALUES (1, 'before');
             CREATE SINK mirror FROM t WITH ({}, primary_key = 'id');
             CREATE MATERIALIZED VIEW n AS SELECT count(*) AS n FROM t;
             FLUSH;",
            pg.sink_options("mirror")
        ))
        .await
        .unwrap();
    pg.stop();
    client
        .batch_execute(
            "INSERT INTO t VALUES (2, 'while down'), (3, 'gone'); DELETE FROM t WHERE id = 3; \
             UPDATE t SET note = 'changed' WHERE id = 1; FLUSH;",
        )
        .await
        .unwrap();
    // The sink shows why it cannot write; the other job goes on.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let shown = view_rows(
            &client,
            "SELECT coalesce(error, last_failure, '') FROM eddy_catalog.jobs WHERE name = 'mirror'",
        )
        .await;
        if shown
            .first()
            .is_some_and(|r| r[0].contains("cannot reach PostgreSQL"))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the sink's error is not shown: {shown:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(view_rows(&client, "SELECT n FROM n").await, vec![vec!["2"]]);
    pg.start_again();
    let target = pg.connect().await;
    let expected = view_rows(&client, "SELECT id, note FROM t ORDER BY id").await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mirrored = view_rows(&target, "SELECT id, note FROM mirror ORDER BY id").await;
        if mirrored == expected {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the sink did not catch up: {mirrored:?} vs {expected:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // eddy_catalog.sinks shows the restarts and why.
    let shown = view_rows(
        &client,
        "SELECT connector, restarts > 0, last_error LIKE '%cannot reach PostgreSQL%' FROM eddy_catalog.sinks WHERE name = 'mirror'",
    )
    .await;
    assert_eq!(shown, vec![vec!["postgres", "t", "t"]]);
}

/// A Parquet file of rows `from..to` (decimal prices, UTC timestamps, some NULL names).
fn parquet_rows(from: i64, to: i64) -> (RecordBatch, Vec<u8>) {
    use arrow::array::{Decimal128Array, Int64Array, StringArray, TimestampMicrosecondArray};
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("price", DataType::Decimal128(10, 2), true),
        Field::new(
            "ts",
            DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new("name", DataType::Utf8, true),
    ]));
    let ids: Vec<i64> = (from..to).collect();
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from(ids.clone())),
            Arc::new(
                Decimal128Array::from_iter_values(
                    ids.iter().map(|i| (*i as i128 * 37) % 10_000 - 2_000),
                )
                .with_precision_and_scale(10, 2)
                .unwrap(),
            ),
            Arc::new(
                TimestampMicrosecondArray::from_iter_values(
                    ids.iter().map(|i| 1_704_067_200_000_000 + i * 1_000_000),
                )
                .with_timezone("UTC"),
            ),
            Arc::new(StringArray::from_iter(
                ids.iter()
                    .map(|i| (i % 3 != 0).then(|| format!("n{}", i % 7))),
            )),
        ],
    )
    .unwrap();
    let mut bytes = Vec::new();
    let mut writer =
        datafusion::parquet::arrow::ArrowWriter::try_new(&mut bytes, schema, None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    (batch, bytes)
}

const FILE_TOTALS: &str =
    "SELECT count(*) AS n, sum(price) AS total, max(ts) AS last, count(name) AS named FROM";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_file_source_reads_parquet_and_picks_up_new_files_across_a_kill() {
    use object_store::ObjectStoreExt;
    let s3 = start_s3();
    let store = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name("eddy")
        .with_endpoint(&s3.endpoint)
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .build()
        .unwrap();
    let mut all = Vec::new();
    let mut upload = async |name: &str, from: i64, to: i64| {
        let (batch, bytes) = parquet_rows(from, to);
        all.push(batch);
        store
            .put(
                &object_store::path::Path::from(format!("in/{name}")),
                bytes.into(),
            )
            .await
            .unwrap();
    };
    upload("part-001.parquet", 0, 3000).await;
    upload("part-002.parquet", 3000, 5000).await;
    store
        .put(
            &object_store::path::Path::from("in/notes.csv"),
            "not,parquet\n".into(),
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
            "CREATE SOURCE files (id BIGINT, price DECIMAL(10, 2), ts TIMESTAMPTZ, name VARCHAR)
             WITH (connector = 'file', path = 's3://eddy/in/*.parquet', refresh.interval.sec = '0.3',
                   s3.endpoint_url = '{}', s3.region_name = 'us-east-1',
                   s3.credentials.access = 'test', s3.credentials.secret = 'test')
             FORMAT PLAIN ENCODE PARQUET;
             CREATE MATERIALIZED VIEW totals AS {FILE_TOTALS} files;",
            s3.endpoint
        ))
        .await
        .unwrap();
    let count_is = async |client: &tokio_postgres::Client, n: usize| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            client.batch_execute("FLUSH").await.unwrap();
            let rows = view_rows(client, "SELECT n FROM totals").await;
            if rows == vec![vec![n.to_string()]] {
                return;
            }
            assert!(Instant::now() < deadline, "{rows:?}, expected {n}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    count_is(&client, 5000).await;
    // A new file is picked up while the job runs; one more while the server is down.
    upload("part-003.parquet", 5000, 6000).await;
    count_is(&client, 6000).await;
    server.kill();
    upload("part-004.parquet", 6000, 6500).await;
    server = TestServer::start_in_with_args(&data_dir, &args);
    let client = server.connect().await;
    count_is(&client, 6500).await;
    // Exactly the batch result over every file's rows.
    let ctx = datafusion::prelude::SessionContext::new();
    ctx.register_batch(
        "s",
        arrow::compute::concat_batches(&all[0].schema(), &all).unwrap(),
    )
    .unwrap();
    let mut expected = crate::streaming::sorted_rows_text(
        &ctx.sql(&format!("{FILE_TOTALS} s"))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap(),
    );
    expected[0][2] = expected[0][2].replace("Z", "+00");
    assert_same(
        "s3 parquet source",
        &view_rows(&client, "SELECT * FROM totals").await,
        &expected,
    );
}

/// A sink into an Eddy table with a primary key, fed by an aggregate over a paced
/// stream and killed mid-stream: after the kills the table (and a view over it) holds
/// exactly the aggregate, as its upserts and deletes are idempotent on replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sink_into_table_converges_to_the_aggregate_across_kills() {
    let temp = tempfile::tempdir().unwrap();
    let data_dir = temp.path().join("data");
    let args = ["--barrier-interval-ms", "200"];
    let mut server = TestServer::start_in_with_args(&data_dir, &args);
    let client = server.connect().await;
    let aggregate = "SELECT k, count(*) AS n, sum(CAST(v AS DECIMAL(12, 2))) AS total, \
                     max(name) AS top FROM gen GROUP BY k";
    client
        .batch_execute(&format!(
            "SET streaming_parallelism = 2; {GEN};
             CREATE TABLE per_k (k INT PRIMARY KEY, n BIGINT, total DECIMAL(14, 2), top VARCHAR, note VARCHAR DEFAULT 'sink');
             CREATE MATERIALIZED VIEW per_k_sum AS SELECT sum(n) AS rows, count(*) AS groups FROM per_k;
             CREATE SINK into_per_k INTO per_k (k, n, total, top) AS {aggregate};"
        ))
        .await
        .unwrap();
    let client = {
        drop(client);
        kill_while_running(&mut server, &data_dir, &args, 2, "into_per_k").await
    };
    client.batch_execute("FLUSH").await.unwrap();
    let table = view_rows(
        &client,
        "SELECT k, n, total, top, note FROM per_k ORDER BY k",
    )
    .await;
    let spec =
        eddy::connectors::ConnectorSpec::from_options(&gen_schema(), &source_options(GEN)).unwrap();
    let over_s = format!("{} ORDER BY k", aggregate.replace("FROM gen", "FROM s"));
    let expected: Vec<Vec<String>> = batch_query(&over_s, &gen_schema(), &spec)
        .await
        .into_iter()
        .map(|mut row| {
            row.push("sink".to_string());
            row
        })
        .collect();
    assert_same("per_k", &table, &expected);
    assert_eq!(
        view_rows(&client, "SELECT rows, groups FROM per_k_sum").await,
        vec![vec!["12000".to_string(), "9".to_string()]]
    );
}
