//! The PostgreSQL wire front end: accepts connections and serves them with pgwire.
//! It knows sessions and result batches, nothing of streams.

pub mod encode;
pub mod handler;
pub mod params;
pub mod startup;

use crate::config::Config;
use crate::session::Engine;
use handler::QueryHandler;
use pgwire::api::cancel::DefaultCancelHandler;
use pgwire::api::{ConnectionManager, PgWireServerHandlers};
use startup::EddyStartupHandler;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Everything pgwire needs to serve one connection.
pub struct EddyHandlers {
    query: Arc<QueryHandler>,
    startup: Arc<EddyStartupHandler>,
    cancel: Arc<DefaultCancelHandler>,
}

impl EddyHandlers {
    pub fn new(engine: Arc<Engine>) -> Self {
        let connections = Arc::new(ConnectionManager::new());
        Self {
            query: Arc::new(QueryHandler::new()),
            startup: Arc::new(EddyStartupHandler::new(engine, connections.clone())),
            cancel: Arc::new(DefaultCancelHandler::new(connections)),
        }
    }
}

impl PgWireServerHandlers for EddyHandlers {
    fn simple_query_handler(&self) -> Arc<impl pgwire::api::query::SimpleQueryHandler> {
        self.query.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl pgwire::api::query::ExtendedQueryHandler> {
        self.query.clone()
    }

    fn startup_handler(&self) -> Arc<impl pgwire::api::auth::StartupHandler> {
        self.startup.clone()
    }

    fn copy_handler(&self) -> Arc<impl pgwire::api::copy::CopyHandler> {
        self.query.clone()
    }

    fn cancel_handler(&self) -> Arc<impl pgwire::api::cancel::CancelHandler> {
        self.cancel.clone()
    }
}

/// Opens the data dir, listens, and serves until SIGINT or SIGTERM.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let storage = std::sync::Arc::new(
        crate::checkpoint::storage::CheckpointStorage::open(&config)
            .map_err(|e| anyhow::anyhow!("cannot open the checkpoint store: {e}"))?,
    );
    let restored = crate::checkpoint::recovery::prepare(&config, &storage)
        .await
        .map_err(|e| anyhow::anyhow!("cannot restore the last checkpoint: {e}"))?;
    let engine = Engine::open_restoring(config.clone(), storage, restored.as_ref())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Some(restored) = &restored
        && restored.dir.starts_with(config.data_dir.join("restore"))
    {
        let _ = std::fs::remove_dir_all(&restored.dir);
    }
    bootstrap_root(&engine, &config)?;
    crate::session::jobs::restart_all(&engine)
        .await
        .map_err(|e| anyhow::anyhow!("cannot restart materialized views: {e}"))?;
    crate::session::cdc::start_all(&engine)
        .map_err(|e| anyhow::anyhow!("cannot start change data capture: {e}"))?;
    crate::session::kafka_tables::start_all(&engine)
        .map_err(|e| anyhow::anyhow!("cannot start the tables fed by Kafka: {e}"))?;
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.listen))?;
    tracing::info!(
        address = %listener.local_addr()?,
        data_dir = %config.data_dir.display(),
        workers = config.workers,
        "Eddy is listening (PostgreSQL wire protocol); connect with: psql -h {} -p {} -U root -d dev",
        config.listen.ip(),
        listener.local_addr()?.port()
    );
    let pid_file = write_pid_file(&config, listener.local_addr()?);
    let handlers = Arc::new(EddyHandlers::new(engine));
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                match accepted {
                    Ok((socket, peer)) => {
                        let handlers = handlers.clone();
                        tokio::spawn(async move {
                            if let Err(e) = pgwire::tokio::process_socket(socket, None, handlers).await {
                                tracing::debug!(%peer, "connection closed with error: {e}");
                            }
                        });
                    }
                    Err(e) => tracing::warn!("accept failed: {e}"),
                }
            }
            signal = &mut shutdown => {
                tracing::info!("received {signal}, shutting down");
                break;
            }
        }
    }
    if let Some(path) = pid_file {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// Writes `<data-dir>/eddy.pid` (as PostgreSQL writes `postmaster.pid`): the server's
/// process id, then the address it listens on — the port it was given when started
/// with port 0, which is how tests and supervisors find it.
fn write_pid_file(config: &Config, address: std::net::SocketAddr) -> Option<std::path::PathBuf> {
    let path = config.data_dir.join(PID_FILE);
    let contents = format!("{}\n{address}\n", std::process::id());
    // Written whole under another name, then renamed: a reader never sees half of it.
    let partial = path.with_extension("pid.partial");
    match std::fs::write(&partial, contents).and_then(|_| std::fs::rename(&partial, &path)) {
        Ok(()) => Some(path),
        Err(e) => {
            tracing::warn!("cannot write {}: {e}", path.display());
            None
        }
    }
}

/// The file in the data dir naming the running server's process and address.
pub const PID_FILE: &str = "eddy.pid";

/// Makes sure `root` can log in when passwords are required: its password is set from
/// `--root-password` when given, and defaults to `root` the first time.
fn bootstrap_root(engine: &Engine, config: &Config) -> anyhow::Result<()> {
    let existing = engine.catalog.user(startup::DEFAULT_USER);
    let password = match (&config.root_password, existing) {
        (Some(p), _) => p.clone(),
        (None, Some(_)) => return Ok(()),
        (None, None) if config.auth == crate::config::AuthMode::Password => {
            tracing::warn!(
                "user root has the default password 'root'; set --root-password or ALTER USER root"
            );
            "root".to_string()
        }
        (None, None) => return Ok(()),
    };
    let user = crate::session::users::verifier(startup::DEFAULT_USER, &password, true);
    engine
        .catalog
        .put_user(user)
        .map_err(|e| anyhow::anyhow!("{e}"))
}

async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("can install SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}
