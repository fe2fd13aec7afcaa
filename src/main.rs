use clap::Parser;
use eddy::config::{Cli, Config};
use tracing_subscriber::EnvFilter;

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        // Logs go to stderr (stdout is for what a command prints).
        .with_writer(std::io::stderr)
        .init();
    let config = Config::from_cli(Cli::parse())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.workers)
        .thread_name("eddy-worker")
        .enable_all()
        .build()?;
    runtime.block_on(eddy::server::run(config))
}
