//! A real PostgreSQL server (Debian's, installed by `scripts/setup.sh`) in a temporary
//! directory on a free port, for the PostgreSQL sink's tests. Run as user `postgres` when
//! the tests run as root (PostgreSQL refuses root). Stopped when dropped.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct PostgresServer {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
    bin: PathBuf,
    user: Option<(u32, u32)>,
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.stop();
    }
}

impl PostgresServer {
    /// Stops the server (its data stays, for [`PostgresServer::start_again`]).
    pub fn stop(&mut self) {
        // SIGINT: PostgreSQL's fast shutdown.
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the stopped server again, on the same port with the same data.
    pub fn start_again(&mut self) {
        self.child = spawn_server(&self.bin, self.dir.path(), self.port, self.user);
        self.wait_ready();
    }
}

/// The directory of the newest installed PostgreSQL's programs.
fn bin_dir() -> PathBuf {
    let mut found: Vec<PathBuf> = glob::glob("/usr/lib/postgresql/*/bin/initdb")
        .unwrap()
        .filter_map(|p| p.ok())
        .collect();
    found.sort_by_key(|p| {
        p.parent()
            .and_then(|b| b.parent())
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    let initdb = found.pop().expect(
        "PostgreSQL's server is missing: run the tests with scripts/test.sh, which installs it",
    );
    initdb.parent().unwrap().to_path_buf()
}

fn output(command: &mut Command) -> String {
    let out = command.output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The uid and gid to run PostgreSQL as: `postgres` when we are root, else ourselves.
fn server_user() -> Option<(u32, u32)> {
    if output(Command::new("id").arg("-u")) != "0" {
        return None;
    }
    let uid = output(Command::new("id").args(["-u", "postgres"]));
    let gid = output(Command::new("id").args(["-g", "postgres"]));
    Some((uid.parse().unwrap(), gid.parse().unwrap()))
}

fn as_server_user(command: &mut Command, user: Option<(u32, u32)>) -> &mut Command {
    if let Some((uid, gid)) = user {
        command.gid(gid).uid(uid);
    }
    command
}

impl PostgresServer {
    /// Starts a fresh server with `wal_level = logical`; user `postgres`, trust auth,
    /// time zone UTC.
    pub fn start() -> Self {
        let bin = bin_dir();
        let user = server_user();
        let dir = tempfile::tempdir().unwrap();
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
        }
        let data = dir.path().join("data");
        let initdb = as_server_user(
            Command::new(bin.join("initdb"))
                .args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"])
                .arg(&data)
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
            user,
        )
        .status()
        .unwrap();
        assert!(initdb.success(), "initdb failed");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = spawn_server(&bin, dir.path(), port, user);
        let server = Self {
            child,
            port,
            dir,
            bin,
            user,
        };
        server.wait_ready();
        server
    }

    fn wait_ready(&self) {
        let bin = &self.bin;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = Command::new(bin.join("pg_isready"))
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
                .stdout(Stdio::null())
                .status()
                .unwrap()
                .success();
            if ready {
                return;
            }
            assert!(Instant::now() < deadline, "PostgreSQL did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub async fn connect(&self) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(
            &format!(
                "host=127.0.0.1 port={} user=postgres dbname=postgres",
                self.port
            ),
            tokio_postgres::NoTls,
        )
        .await
        .unwrap();
        tokio::spawn(connection);
        client
    }

    /// The `WITH (...)` options of a sink writing to `table` here.
    pub fn sink_options(&self, table: &str) -> String {
        format!(
            "connector = 'postgres', host = '127.0.0.1', port = '{}', user = 'postgres', \
             database = 'postgres', table = '{table}'",
            self.port
        )
    }
}

fn spawn_server(bin: &Path, dir: &Path, port: u16, user: Option<(u32, u32)>) -> Child {
    as_server_user(
        Command::new(bin.join("postgres"))
            .arg("-D")
            .arg(dir.join("data"))
            .args(["-p", &port.to_string(), "-k"])
            .arg(dir)
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "wal_level=logical",
                "-c",
                "timezone=UTC",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        user,
    )
    .spawn()
    .unwrap()
}
