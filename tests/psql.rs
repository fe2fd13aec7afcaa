//! psql's meta-commands (`\d`, `\dt`, ...) against golden output.
//!
//! psql answers each meta-command with queries on pg_catalog; this checks that they run
//! and show Eddy's objects. Set `EDDY_BLESS=1` to rewrite the golden files after checking
//! the new output by eye.

use crate::common::TestServer;
use std::path::PathBuf;
use std::process::Command;

const META_COMMANDS: &[(&str, &str)] = &[
    ("dt", "\\dt"),
    ("dv", "\\dv"),
    ("dm", "\\dm"),
    ("d", "\\d"),
    ("l", "\\l"),
    ("dn", "\\dn"),
    ("df", "\\df"),
    ("di", "\\di"),
    ("d_table", "\\d accounts"),
    ("d_plus_table", "\\d+ accounts"),
    ("d_view", "\\d rich"),
    ("d_plus_view", "\\d+ rich"),
];

fn psql(server: &TestServer, command: &str) -> (bool, String) {
    let out = Command::new("psql")
        .args([
            "-X",
            "-h",
            &server.addr.ip().to_string(),
            "-p",
            &server.addr.port().to_string(),
        ])
        .args([
            "-U",
            "root",
            "-d",
            "dev",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            command,
        ])
        .env("PAGER", "")
        .env("COLUMNS", "200")
        .output()
        .expect("psql is installed (scripts/setup.sh installs postgresql-client)");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn psql_meta_commands_match_golden_output() {
    let server = TestServer::start();
    let (ok, out) = psql(
        &server,
        "CREATE TABLE accounts (id INT, region TEXT, owner VARCHAR(20) NOT NULL, balance NUMERIC(10,2), \
           score DOUBLE PRECISION, doc JSONB, PRIMARY KEY (id, region)); \
         CREATE VIEW rich AS SELECT owner FROM accounts WHERE balance > 100;",
    );
    assert!(ok, "fixture setup failed: {out}");

    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/psql");
    let bless = std::env::var_os("EDDY_BLESS").is_some();
    let mut failures = Vec::new();
    for (name, command) in META_COMMANDS {
        let (ok, out) = psql(&server, command);
        let path = dir.join(format!("{name}.out"));
        if bless {
            std::fs::write(&path, &out).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_default();
        if !ok || out != expected {
            failures.push(format!(
                "{command} (golden {}):\n--- expected\n{expected}\n--- actual\n{out}",
                path.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn psql_runs_a_sql_file_with_copy() {
    let server = TestServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pipeline.sql");
    std::fs::write(
        &file,
        "CREATE TABLE readings (sensor TEXT, value DOUBLE PRECISION);\n\
         COPY readings FROM STDIN;\n\
         a\t1.5\n\
         b\t2\n\
         a\t3.5\n\
         \\.\n\
         SELECT sensor, sum(value) AS total FROM readings GROUP BY sensor ORDER BY sensor;\n",
    )
    .unwrap();
    let out = Command::new("psql")
        .args([
            "-X",
            "-A",
            "-t",
            "-h",
            &server.addr.ip().to_string(),
            "-p",
            &server.addr.port().to_string(),
        ])
        .args(["-U", "root", "-d", "dev", "-v", "ON_ERROR_STOP=1", "-f"])
        .arg(&file)
        .output()
        .expect("psql is installed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "psql -f failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout, "CREATE TABLE\nCOPY 3\na|5\nb|2\n");
}
