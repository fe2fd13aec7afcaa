//! Real client drivers against a real server: psycopg2, psycopg 3, asyncpg, SQLAlchemy with
//! pandas, and pgJDBC. Each script asserts on what it reads back and exits non-zero on a
//! mismatch. `scripts/test.sh` installs the drivers (a Python venv in `.venv`, the JDBC
//! driver from Debian).

use crate::common::TestServer;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn python() -> PathBuf {
    let venv = root().join(".venv/bin/python");
    assert!(
        venv.exists(),
        "{} is missing: run the test suite with scripts/test.sh, which creates it",
        venv.display()
    );
    venv
}

fn run(server: &TestServer, program: &Path, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .env("EDDY_PORT", server.addr.port().to_string())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    assert!(
        out.status.success(),
        "{} {:?} failed:\n{}\n{}",
        program.display(),
        args,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn python_client(script: &str) {
    let server = TestServer::start();
    let path = root().join("tests/clients").join(script);
    run(&server, &python(), &[path.to_str().unwrap()]);
}

#[test]
fn psycopg2_client() {
    python_client("psycopg2_client.py");
}

#[test]
fn psycopg3_client_text_and_binary() {
    python_client("psycopg3_client.py");
}

#[test]
fn asyncpg_client() {
    python_client("asyncpg_client.py");
}

#[test]
fn sqlalchemy_inspect_and_pandas() {
    python_client("sqlalchemy_client.py");
}

#[test]
fn jdbc_client() {
    let jar = Path::new("/usr/share/java/postgresql.jar");
    assert!(
        jar.exists(),
        "{} is missing: scripts/setup.sh installs libpostgresql-jdbc-java",
        jar.display()
    );
    let build = tempfile::tempdir().unwrap();
    let source = root().join("tests/clients/JdbcClient.java");
    let status = Command::new("javac")
        .args([
            "-d",
            build.path().to_str().unwrap(),
            "-cp",
            jar.to_str().unwrap(),
        ])
        .arg(&source)
        .status()
        .expect("javac is installed (scripts/setup.sh)");
    assert!(status.success(), "javac failed");
    let classpath = format!("{}:{}", build.path().display(), jar.display());
    let server = TestServer::start();
    run(
        &server,
        Path::new("java"),
        &["-cp", &classpath, "JdbcClient"],
    );
}
