//! Starting and stopping a real `eddy` server for a test.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `eddy` process with its own data dir. Killed when dropped.
pub struct TestServer {
    child: Option<Child>,
    pub addr: SocketAddr,
    data_dir: PathBuf,
    /// Where the server's stderr goes; printed when a test fails.
    log_path: PathBuf,
    /// Keeps the temporary directory alive for as long as the server may use it.
    _temp: Option<tempfile::TempDir>,
}

/// Numbers the servers' logs (a kill loop starts several over one data dir).
static STARTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl TestServer {
    /// Starts a server on a free port with a new temporary data dir.
    pub fn start() -> Self {
        Self::start_with_args(&[])
    }

    /// Starts a server with extra command-line flags and a new temporary data dir.
    pub fn start_with_args(args: &[&str]) -> Self {
        let temp = tempfile::tempdir().expect("create temp dir");
        let data_dir = temp.path().join("data");
        let mut server = Self::start_in_with_args(&data_dir, args);
        server._temp = Some(temp);
        server
    }

    /// Starts a server over an existing data dir (to test what survives a restart).
    pub fn start_in(data_dir: &Path) -> Self {
        Self::start_in_with_args(data_dir, &[])
    }

    /// Starts a server with extra environment variables and a new temporary data dir.
    pub fn start_with_env(envs: &[(&str, &str)]) -> Self {
        let temp = tempfile::tempdir().expect("create temp dir");
        let data_dir = temp.path().join("data");
        let mut server = Self::start_in_with_args_and_env(&data_dir, &[], envs);
        server._temp = Some(temp);
        server
    }

    pub fn start_in_with_args(data_dir: &Path, args: &[&str]) -> Self {
        Self::start_in_with_args_and_env(data_dir, args, &[])
    }

    pub fn start_in_with_args_and_env(
        data_dir: &Path,
        args: &[&str],
        envs: &[(&str, &str)],
    ) -> Self {
        // Port 0: the kernel picks a free port when the server binds, and the server
        // names it in its pid file. (Picking a port here and passing it would race with
        // every other test starting a server.)
        let pid_file = data_dir.join("eddy.pid");
        let _ = std::fs::remove_file(&pid_file);
        let start = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log_path = data_dir.with_extension(format!("{start}.log"));
        let log = std::fs::File::create(&log_path).expect("create server log");
        // Two streaming workers unless the test asks for another number.
        let workers: &[&str] = if args.contains(&"--workers") {
            &[]
        } else {
            &["--workers", "2"]
        };
        let child = Command::new(env!("CARGO_BIN_EXE_eddy"))
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(data_dir)
            .args(workers)
            .args(args)
            // `EDDY_TEST_LOG=info` (or any filter) shows more of what a server did.
            .env(
                "RUST_LOG",
                std::env::var("EDDY_TEST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start eddy");
        let mut server = Self {
            child: Some(child),
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            data_dir: data_dir.to_path_buf(),
            log_path,
            _temp: None,
        };
        server.wait_until_listening();
        server
    }

    /// Waits for the server's pid file, which it writes once it listens, and takes its
    /// address from it.
    fn wait_until_listening(&mut self) {
        // Recovery of a large checkpoint (benches) happens before the server listens.
        let deadline = Instant::now() + Duration::from_secs(600);
        let pid_file = self.data_dir.join("eddy.pid");
        while Instant::now() < deadline {
            if let Ok(contents) = std::fs::read_to_string(&pid_file) {
                let mut lines = contents.lines();
                let pid: u32 = lines.next().and_then(|p| p.parse().ok()).expect("pid");
                assert_eq!(pid, self.pid(), "the pid file names this server");
                self.addr = lines
                    .next()
                    .and_then(|a| a.parse().ok())
                    .expect("the pid file names the address");
                assert!(TcpStream::connect(self.addr).is_ok(), "eddy listens");
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "eddy exited during startup with {status}; see its log next to {}",
                    self.data_dir.display()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("eddy did not start listening within 600 s");
    }

    /// A connection string for tokio-postgres.
    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server is running").id()
    }

    pub fn conn_string(&self) -> String {
        format!(
            "host={} port={} user=root dbname=dev",
            self.addr.ip(),
            self.addr.port()
        )
    }

    pub async fn connect(&self) -> tokio_postgres::Client {
        let (client, connection) =
            tokio_postgres::connect(&self.conn_string(), tokio_postgres::NoTls)
                .await
                .expect("connect to eddy");
        tokio::spawn(async move {
            let _ = connection.await;
        });
        client
    }

    /// Kills the process the hard way (SIGKILL): nothing gets to flush or clean up.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Asks the server to shut down with SIGTERM and waits for it to exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("server is running");
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("eddy did not exit within 30 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
        // The log lives in a temporary directory that a failing test deletes: show its end
        // so that a failure in CI can be diagnosed from the test output alone.
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log_path).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(80)..];
            eprintln!(
                "--- last {} lines of the server log {} ---\n{}",
                tail.len(),
                self.log_path.display(),
                tail.join("\n")
            );
        }
    }
}

/// Every row of `sql`, each value as text (NULL as an empty string); panics on error.
#[allow(dead_code)] // used by the benches, which share this module
pub async fn query_rows(client: &tokio_postgres::Client, sql: &str) -> Vec<Vec<String>> {
    client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(
                (0..r.len())
                    .map(|i| r.get(i).unwrap_or("").to_string())
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

/// The first value of a one-row query as a number (0 when there is no row).
#[allow(dead_code)] // used by the benches, which share this module
pub async fn query_number(client: &tokio_postgres::Client, sql: &str) -> f64 {
    query_rows(client, sql)
        .await
        .first()
        .and_then(|r| r[0].parse().ok())
        .unwrap_or(0.0)
}

/// An S3-compatible server (moto) on a free port, with bucket `eddy` created.
pub struct S3Server {
    child: Child,
    pub endpoint: String,
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn venv_bin(name: &str) -> PathBuf {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(".venv/bin")
        .join(name);
    assert!(
        bin.exists(),
        "{} is missing: run the test suite with scripts/test.sh, which installs it",
        bin.display()
    );
    bin
}

pub fn start_s3() -> S3Server {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(venv_bin("moto_server"))
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start moto_server");
    let endpoint = format!("http://127.0.0.1:{port}");
    let server = S3Server { child, endpoint };
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "moto_server did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    let created = Command::new(venv_bin("python"))
        .args([
            "-c",
            &format!(
                "import boto3; boto3.client('s3', endpoint_url='{}', region_name='us-east-1', \
                 aws_access_key_id='test', aws_secret_access_key='test').create_bucket(Bucket='eddy')",
                server.endpoint
            ),
        ])
        .status()
        .unwrap();
    assert!(created.success(), "create the bucket");
    server
}

pub mod kafka;
pub mod postgres;
pub mod schema_registry;
