//! Server settings: command-line flags, `EDDY_*` environment variables and an optional
//! TOML file, in that order of precedence.

use clap::{Parser, ValueEnum};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// Accept every connection without a password (the default, for local use).
    Trust,
    /// Require a password, checked with SCRAM-SHA-256.
    Password,
}

/// Command-line interface of the `eddy` binary.
#[derive(Debug, Parser)]
#[command(
    name = "eddy",
    version,
    about = "Eddy: a streaming SQL database speaking PostgreSQL"
)]
pub struct Cli {
    /// Address the PostgreSQL wire protocol listens on.
    #[arg(long, env = "EDDY_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Directory holding all of Eddy's data.
    #[arg(long, env = "EDDY_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Worker threads for query and stream execution (default: number of cores).
    #[arg(long, env = "EDDY_WORKERS")]
    pub workers: Option<usize>,
    /// Task slots each streaming worker offers (subtask i of every fragment of a job
    /// shares slot i).
    #[arg(long, env = "EDDY_SLOTS_PER_WORKER")]
    pub slots_per_worker: Option<usize>,
    /// Milliseconds between two checkpoint barriers (default 1000; `ALTER SYSTEM SET
    /// barrier_interval_ms` changes it while running).
    #[arg(long, env = "EDDY_BARRIER_INTERVAL_MS")]
    pub barrier_interval_ms: Option<u64>,
    /// Where checkpoints go: a local directory (default `<data-dir>/checkpoints`) or
    /// `s3://bucket/prefix`.
    #[arg(long, env = "EDDY_STATE_STORE")]
    pub state_store: Option<String>,
    /// S3 endpoint (an S3-compatible server); otherwise `AWS_ENDPOINT_URL` or AWS's.
    #[arg(long, env = "EDDY_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,
    /// S3 region; otherwise `AWS_REGION` or `us-east-1`.
    #[arg(long, env = "EDDY_S3_REGION")]
    pub s3_region: Option<String>,
    /// S3 access key id; otherwise `AWS_ACCESS_KEY_ID`.
    #[arg(long, env = "EDDY_S3_ACCESS_KEY_ID")]
    pub s3_access_key_id: Option<String>,
    /// S3 secret access key; otherwise `AWS_SECRET_ACCESS_KEY`.
    #[arg(long, env = "EDDY_S3_SECRET_ACCESS_KEY", hide_env_values = true)]
    pub s3_secret_access_key: Option<String>,
    /// How many committed checkpoints to keep in the state store (default 3).
    #[arg(long, env = "EDDY_CHECKPOINTS_TO_KEEP")]
    pub checkpoints_to_keep: Option<usize>,
    /// Memory for operators' state caches, in MiB (default 256): hot aggregate groups
    /// stay in memory, the others are read back from RocksDB when their key comes again.
    #[arg(long, env = "EDDY_STATE_CACHE_MB")]
    pub state_cache_mb: Option<usize>,
    /// How clients authenticate.
    #[arg(long, env = "EDDY_AUTH", value_enum)]
    pub auth: Option<AuthMode>,
    /// Password of user `root` for `--auth password` (set at every start when given).
    #[arg(long, env = "EDDY_ROOT_PASSWORD", hide_env_values = true)]
    pub root_password: Option<String>,
    /// A TOML file with any of the settings above (keys: listen, data_dir, workers,
    /// slots_per_worker, barrier_interval_ms, state_store, s3_endpoint, s3_region,
    /// checkpoints_to_keep, state_cache_mb, auth).
    #[arg(long, env = "EDDY_CONFIG")]
    pub config: Option<PathBuf>,
}

/// Settings as read from a config file; every key is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<SocketAddr>,
    data_dir: Option<PathBuf>,
    workers: Option<usize>,
    slots_per_worker: Option<usize>,
    barrier_interval_ms: Option<u64>,
    state_store: Option<String>,
    s3_endpoint: Option<String>,
    s3_region: Option<String>,
    checkpoints_to_keep: Option<usize>,
    state_cache_mb: Option<usize>,
    auth: Option<AuthMode>,
}

/// The settings the server runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub workers: usize,
    pub slots_per_worker: usize,
    pub barrier_interval_ms: u64,
    /// Where checkpoints go: `None` for `<data-dir>/checkpoints`.
    pub state_store: Option<String>,
    pub s3: S3Options,
    pub checkpoints_to_keep: usize,
    /// Bytes operators may keep in their state caches (`--state-cache-mb`).
    pub state_cache_bytes: usize,
    pub auth: AuthMode,
    pub root_password: Option<String>,
}

/// How to reach an S3 state store; unset fields come from the usual AWS variables.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct S3Options {
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
}

/// How often barriers (and checkpoints) are injected, by default.
pub const DEFAULT_BARRIER_INTERVAL_MS: u64 = 1000;
pub const DEFAULT_CHECKPOINTS_TO_KEEP: usize = 3;
pub const DEFAULT_STATE_CACHE_MB: usize = 256;
pub const DEFAULT_LISTEN: &str = "127.0.0.1:4566";
/// The user a client that names none logs in as, and the superuser made at first start.
pub const DEFAULT_USER: &str = "root";
pub const DEFAULT_DATA_DIR: &str = "./eddy-data";
pub const DEFAULT_SLOTS_PER_WORKER: usize = 4;

impl Config {
    /// Where checkpoints go: the configured state store, else `<data-dir>/checkpoints`.
    /// Sinks that publish at commit stage there what a committed checkpoint promises.
    pub fn state_store_location(&self) -> String {
        self.state_store.clone().unwrap_or_else(|| {
            self.data_dir
                .join("checkpoints")
                .to_string_lossy()
                .into_owned()
        })
    }

    pub fn from_cli(cli: Cli) -> anyhow::Result<Self> {
        let file = match &cli.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let workers = cli.workers.or(file.workers).unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        });
        if workers == 0 {
            anyhow::bail!("--workers must be at least 1");
        }
        let slots_per_worker = cli
            .slots_per_worker
            .or(file.slots_per_worker)
            .unwrap_or(DEFAULT_SLOTS_PER_WORKER);
        if slots_per_worker == 0 {
            anyhow::bail!("--slots-per-worker must be at least 1");
        }
        Ok(Self {
            listen: cli
                .listen
                .or(file.listen)
                .unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("valid default address")),
            data_dir: cli
                .data_dir
                .or(file.data_dir)
                .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR)),
            workers,
            slots_per_worker,
            barrier_interval_ms: cli
                .barrier_interval_ms
                .or(file.barrier_interval_ms)
                .unwrap_or(DEFAULT_BARRIER_INTERVAL_MS)
                .max(1),
            state_store: cli.state_store.or(file.state_store),
            s3: S3Options {
                endpoint: cli.s3_endpoint.or(file.s3_endpoint),
                region: cli.s3_region.or(file.s3_region),
                access_key_id: cli.s3_access_key_id,
                secret_access_key: cli.s3_secret_access_key,
            },
            checkpoints_to_keep: cli
                .checkpoints_to_keep
                .or(file.checkpoints_to_keep)
                .unwrap_or(DEFAULT_CHECKPOINTS_TO_KEEP)
                .max(1),
            state_cache_bytes: cli
                .state_cache_mb
                .or(file.state_cache_mb)
                .unwrap_or(DEFAULT_STATE_CACHE_MB)
                .saturating_mul(1 << 20),
            auth: cli.auth.or(file.auth).unwrap_or(AuthMode::Trust),
            root_password: cli.root_password,
        })
    }

    /// Settings for tests and embedding: everything default but the data dir.
    pub fn with_data_dir(data_dir: &Path) -> Self {
        Self {
            listen: DEFAULT_LISTEN.parse().expect("valid default address"),
            data_dir: data_dir.to_path_buf(),
            workers: 2,
            slots_per_worker: DEFAULT_SLOTS_PER_WORKER,
            barrier_interval_ms: DEFAULT_BARRIER_INTERVAL_MS,
            state_store: None,
            s3: S3Options::default(),
            checkpoints_to_keep: DEFAULT_CHECKPOINTS_TO_KEEP,
            state_cache_bytes: DEFAULT_STATE_CACHE_MB << 20,
            auth: AuthMode::Trust,
            root_password: None,
        }
    }
}

fn read_file(path: &Path) -> anyhow::Result<FileConfig> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read config file {}: {e}", path.display()))?;
    toml::from_str(&text)
        .map_err(|e| anyhow::anyhow!("invalid config file {}: {e}", path.display()))
}
