//! Connection startup: protocol negotiation, login, the parameter statuses PostgreSQL 15
//! sends, and the per-connection [`Session`].

use crate::catalog::DATABASE_NAME;
use crate::config::AuthMode;
use crate::session::users::SCRAM_ITERATIONS;
use crate::session::{Engine, Session};
use async_trait::async_trait;
use futures::Sink;
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::sasl::scram::ScramAuth;
use pgwire::api::auth::{
    AuthSource, LoginInfo, Password, ServerParameterProvider, StartupHandler,
    finish_authentication, protocol_negotiation, save_startup_parameters_to_metadata,
};
use pgwire::api::{
    ClientInfo, ConnectionHandle, ConnectionManager, METADATA_APPLICATION_NAME, METADATA_DATABASE,
    METADATA_USER, PgWireConnectionState, PidSecretKeyGenerator, RandomPidSecretKeyGenerator,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

pub use crate::config::DEFAULT_USER;

pub struct EddyStartupHandler {
    engine: Arc<Engine>,
    connections: Arc<ConnectionManager>,
    pids: RandomPidSecretKeyGenerator,
    /// Set when passwords are required: pgwire's SCRAM-SHA-256 exchange.
    scram: Option<SASLAuthStartupHandler<ServerParameters>>,
}

impl EddyStartupHandler {
    pub fn new(engine: Arc<Engine>, connections: Arc<ConnectionManager>) -> Self {
        let scram = (engine.config.auth == AuthMode::Password).then(|| {
            let mut scram = ScramAuth::new(Arc::new(CatalogPasswords {
                catalog: engine.catalog.clone(),
            }));
            scram.set_iterations(SCRAM_ITERATIONS);
            SASLAuthStartupHandler::new(Arc::new(ServerParameters))
                .with_scram(scram)
                .with_connection_manager(connections.clone())
        });
        Self {
            engine,
            connections,
            pids: RandomPidSecretKeyGenerator::default(),
            scram,
        }
    }

    /// Creates the connection's session once the client is logged in.
    fn open_session<C: ClientInfo>(&self, client: &C) {
        if client.session_extensions().get::<Session>().is_none() {
            let user = user_of(client);
            let session = Session::new(self.engine.clone(), user);
            // A client's `TimeZone` (JDBC sends its own zone) is the session's zone, as
            // in PostgreSQL; one Eddy does not know leaves UTC.
            if let Some(zone) = startup_time_zone(client) {
                let _ = session.set_startup_parameter("TimeZone", &zone);
            }
            // `options=-c name=value` (libpq's `PGOPTIONS`): settings for the session.
            if let Some(options) = client.metadata().get("options") {
                for (name, value) in command_line_settings(options) {
                    if let Err(e) = session.set_startup_parameter(&name, &value) {
                        tracing::warn!(%name, %value, error = %e, "startup option ignored");
                    }
                }
            }
            client.session_extensions().insert(session);
        }
    }
}

/// The `name=value` settings of a startup `options` string, as PostgreSQL reads it:
/// `-c name=value`, `-cname=value` or `--name=value`, separated by spaces (a space
/// inside a value escaped with a backslash).
fn command_line_settings(options: &str) -> Vec<(String, String)> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = options.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => word.extend(chars.next()),
            c if c.is_whitespace() => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    let mut settings = Vec::new();
    let mut words = words.into_iter();
    while let Some(word) = words.next() {
        let setting = if word == "-c" {
            words.next()
        } else {
            word.strip_prefix("--")
                .or_else(|| word.strip_prefix("-c"))
                .map(str::to_string)
        };
        if let Some((name, value)) = setting.as_deref().and_then(|s| s.split_once('=')) {
            settings.push((name.replace('-', "_"), value.to_string()));
        }
    }
    settings
}

/// The `TimeZone` startup parameter (libpq sends `PGTZ` as `timezone`), in any case, or
/// one set in the startup `options`.
fn startup_time_zone<C: ClientInfo>(client: &C) -> Option<String> {
    let metadata = client.metadata();
    let from_options = metadata.get("options").and_then(|options| {
        command_line_settings(options)
            .into_iter()
            .rev()
            .find(|(name, _)| name.eq_ignore_ascii_case("timezone"))
            .map(|(_, value)| value)
    });
    from_options.or_else(|| {
        metadata
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("timezone"))
            .map(|(_, v)| v.clone())
    })
}

fn user_of<C: ClientInfo>(client: &C) -> String {
    client
        .metadata()
        .get(METADATA_USER)
        .cloned()
        .unwrap_or_else(|| DEFAULT_USER.to_string())
}

/// Refuses databases other than `dev` (a user's own name is accepted too, as libpq
/// defaults the database to the user name).
fn check_database<C: ClientInfo>(client: &C) -> PgWireResult<()> {
    let user = user_of(client);
    if let Some(db) = client.metadata().get(METADATA_DATABASE)
        && db != DATABASE_NAME
        && db != &user
    {
        return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
            "FATAL".into(),
            "3D000".into(),
            format!("database \"{db}\" does not exist (Eddy serves database \"{DATABASE_NAME}\")"),
        ))));
    }
    Ok(())
}

/// Looks passwords up in the catalog as SCRAM verifiers.
#[derive(Debug)]
struct CatalogPasswords {
    catalog: Arc<crate::catalog::Catalog>,
}

#[async_trait]
impl AuthSource for CatalogPasswords {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        let name = login.user().unwrap_or(DEFAULT_USER);
        match self.catalog.user(name) {
            Some(u) if !u.scram_salt.is_empty() => {
                Ok(Password::new(Some(u.scram_salt), u.scram_salted_password))
            }
            _ => Err(PgWireError::InvalidPassword(name.to_string())),
        }
    }
}

#[async_trait]
impl StartupHandler for EddyStartupHandler {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let Some(scram) = &self.scram {
            if let PgWireFrontendMessage::Startup(startup) = &message {
                save_startup_parameters_to_metadata(client, startup);
                check_database(client)?;
            }
            scram.on_startup(client, message).await?;
            if matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
                self.open_session(client);
            }
            return Ok(());
        }

        let PgWireFrontendMessage::Startup(startup) = message else {
            return Ok(());
        };
        protocol_negotiation(client, &startup).await?;
        save_startup_parameters_to_metadata(client, &startup);
        check_database(client)?;

        // Register for cancel requests: pgwire looks the handle up by type.
        let (pid, secret) = self.pids.generate(client);
        client.set_pid_and_secret_key(pid, secret.clone());
        let (handle, guard) = self.connections.register(pid, secret);
        client
            .session_extensions()
            .insert::<Arc<ConnectionHandle>>(handle);
        client.session_extensions().insert(guard);

        self.open_session(client);
        finish_authentication(client, &ServerParameters).await?;
        tracing::debug!(pid, "session started");
        Ok(())
    }
}

/// The parameter statuses sent after login, as PostgreSQL 15 sends them.
pub struct ServerParameters;

impl ServerParameterProvider for ServerParameters {
    fn server_parameters<C>(&self, client: &C) -> Option<HashMap<String, String>>
    where
        C: ClientInfo,
    {
        let md = client.metadata();
        let user = md
            .get(METADATA_USER)
            .cloned()
            .unwrap_or_else(|| DEFAULT_USER.into());
        let app = md
            .get(METADATA_APPLICATION_NAME)
            .cloned()
            .unwrap_or_default();
        let zone = startup_time_zone(client)
            .and_then(|z| crate::time_zones::canonical_name(&z))
            .unwrap_or_else(|| crate::time_zones::UTC.to_string());
        let params = [
            ("application_name", app.as_str()),
            ("client_encoding", "UTF8"),
            ("DateStyle", "ISO, MDY"),
            ("default_transaction_read_only", "off"),
            ("in_hot_standby", "off"),
            ("integer_datetimes", "on"),
            ("IntervalStyle", "postgres"),
            ("is_superuser", "on"),
            ("server_encoding", "UTF8"),
            ("server_version", "15.0"),
            ("session_authorization", user.as_str()),
            ("standard_conforming_strings", "on"),
            ("TimeZone", zone.as_str()),
        ];
        Some(
            params
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::command_line_settings;

    #[test]
    fn startup_options_are_read_as_postgresql_reads_them() {
        assert_eq!(
            command_line_settings(
                "-c timezone=Asia/Tokyo -cstatement_timeout=5 --search-path=public"
            ),
            vec![
                ("timezone".to_string(), "Asia/Tokyo".to_string()),
                ("statement_timeout".to_string(), "5".to_string()),
                ("search_path".to_string(), "public".to_string()),
            ]
        );
        assert_eq!(
            command_line_settings("-c application_name=a\\ b"),
            vec![("application_name".to_string(), "a b".to_string())]
        );
        assert!(command_line_settings("-x").is_empty());
    }
}
