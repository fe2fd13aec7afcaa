//! PostgreSQL change data capture: what Eddy asks of the upstream database.
//!
//! `CREATE TABLE t (..., PRIMARY KEY (...)) WITH (connector = 'postgres-cdc', hostname,
//! port, username, password, database.name, schema.name, table.name, slot.name,
//! publication.name)` — or `CREATE SOURCE pg WITH (connector = 'postgres-cdc', ...)` and
//! `CREATE TABLE t (...) FROM pg TABLE 'public.orders'`. A publication for the table and a
//! logical replication slot (`pgoutput`) are made if missing; the table's rows are copied
//! once (the snapshot), then its changes are read from the slot with
//! `pg_logical_slot_peek_binary_changes` (so reading never consumes them) and the slot is
//! advanced only to a position that a committed Eddy checkpoint holds
//! (`session::cdc` drives this).

use super::pgoutput::{self, Message};
use crate::error::{EddyError, Result, sqlstate};
use std::collections::BTreeMap;
use std::time::Duration;

/// Changes read per poll (PostgreSQL returns whole transactions, so a large one comes
/// whole). Every poll starts again at the slot's confirmed position, which moves once per
/// committed checkpoint: this bounds how many changes a checkpoint interval can take in.
const CHANGES_PER_POLL: i32 = 20_000;

#[derive(Debug, Clone, PartialEq)]
pub struct CdcSpec {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: Option<String>,
    pub database: String,
    pub schema: String,
    pub table: String,
    pub slot: String,
    pub publication: String,
    pub create_publication: bool,
}

fn invalid(message: impl Into<String>) -> EddyError {
    EddyError::new(sqlstate::INVALID_PARAMETER_VALUE, message)
}

/// Options a `postgres-cdc` source or table takes.
const KNOWN: &[&str] = &[
    "connector",
    "hostname",
    "port",
    "username",
    "password",
    "database.name",
    "schema.name",
    "table.name",
    "slot.name",
    "publication.name",
    "publication.create.enable",
    super::ERROR_POLICY_OPTION,
];

/// Checks the options a shared `CREATE SOURCE ... WITH (connector = 'postgres-cdc')` gives
/// (the table comes later, from `CREATE TABLE ... FROM source TABLE '...'`).
pub fn check_source_options(options: &BTreeMap<String, String>) -> Result<()> {
    for key in options.keys() {
        if !KNOWN.contains(&key.as_str()) {
            return Err(invalid(format!(
                "unknown option '{key}' for connector postgres-cdc"
            )));
        }
    }
    super::error_policy(options)?;
    for key in ["hostname", "username", "database.name"] {
        if options.get(key).is_none_or(|v| v.trim().is_empty()) {
            return Err(invalid(format!(
                "connector postgres-cdc needs option {key}"
            )));
        }
    }
    Ok(())
}

impl CdcSpec {
    /// From the options of a CDC table (`eddy_table` names the slot and publication when
    /// the options do not).
    pub fn from_options(options: &BTreeMap<String, String>, eddy_table: &str) -> Result<Self> {
        check_source_options(options)?;
        let get = |key: &str| options.get(key).cloned();
        let table = get("table.name")
            .filter(|t| !t.trim().is_empty())
            .ok_or_else(|| invalid("connector postgres-cdc needs option table.name"))?;
        let port = match get("port") {
            Some(p) => super::parse_option::<u16>("port", &p)?,
            None => 5432,
        };
        let create_publication =
            match get("publication.create.enable").map(|v| v.to_ascii_lowercase()) {
                None => true,
                Some(v) if v == "true" => true,
                Some(v) if v == "false" => false,
                Some(v) => {
                    return Err(invalid(format!(
                        "invalid value for option publication.create.enable: '{v}'"
                    )));
                }
            };
        Ok(Self {
            host: get("hostname").expect("checked"),
            port,
            user: get("username").expect("checked"),
            password: get("password"),
            database: get("database.name").expect("checked"),
            schema: get("schema.name").unwrap_or_else(|| "public".into()),
            table,
            slot: get("slot.name").unwrap_or_else(|| format!("eddy_{eddy_table}")),
            publication: get("publication.name")
                .unwrap_or_else(|| format!("eddy_{eddy_table}_publication")),
            create_publication,
        })
    }

    fn address(&self) -> String {
        format!("{}:{}/{}", self.host, self.port, self.database)
    }

    pub fn qualified_table(&self) -> String {
        format!("{}.{}", quote(&self.schema), quote(&self.table))
    }

    fn failed(&self, what: &str, e: tokio_postgres::Error) -> EddyError {
        EddyError::caused_by(
            sqlstate::IO_ERROR,
            format!(
                "postgres-cdc {}: {what}: {}",
                self.address(),
                super::sink::postgres::error_text(&e)
            ),
            e,
        )
    }

    /// A connection with the session settings the values' text relies on (UTC, ISO).
    pub async fn connect(&self) -> Result<tokio_postgres::Client> {
        let mut config = tokio_postgres::Config::new();
        config
            .host(&self.host)
            .port(self.port)
            .user(&self.user)
            .dbname(&self.database)
            .application_name("eddy-cdc")
            .connect_timeout(Duration::from_secs(5));
        if let Some(password) = &self.password {
            config.password(password);
        }
        let (client, connection) = config
            .connect(tokio_postgres::NoTls)
            .await
            .map_err(|e| self.failed("cannot connect", e))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("postgres-cdc connection ended: {e}");
            }
        });
        client
            .batch_execute(
                "SET TimeZone = 'UTC'; SET DateStyle = 'ISO, YMD'; \
                 SET IntervalStyle = 'postgres'; SET extra_float_digits = 3; \
                 SET bytea_output = 'hex'",
            )
            .await
            .map_err(|e| self.failed("cannot set up the session", e))?;
        Ok(client)
    }

    /// Checks the upstream side: logical replication on, the table there with every
    /// column of `columns`; then makes the publication and the slot if missing. Whether it
    /// made the slot.
    pub async fn prepare(
        &self,
        client: &tokio_postgres::Client,
        columns: &[String],
    ) -> Result<bool> {
        let level: String = client
            .query_one("SHOW wal_level", &[])
            .await
            .map_err(|e| self.failed("cannot read wal_level", e))?
            .get(0);
        if level != "logical" {
            return Err(invalid(format!(
                "postgres-cdc {}: wal_level is '{level}'; change data capture needs wal_level = logical",
                self.address()
            )));
        }
        let upstream: Vec<String> = client
            .query(
                "SELECT a.attname::text FROM pg_attribute a JOIN pg_class c ON a.attrelid = c.oid \
                 JOIN pg_namespace n ON c.relnamespace = n.oid \
                 WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped",
                &[&self.schema, &self.table],
            )
            .await
            .map_err(|e| self.failed("cannot read the table's columns", e))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        if upstream.is_empty() {
            return Err(EddyError::new(
                sqlstate::UNDEFINED_TABLE,
                format!(
                    "postgres-cdc {}: table {}.{} does not exist",
                    self.address(),
                    self.schema,
                    self.table
                ),
            ));
        }
        if let Some(missing) = columns.iter().find(|c| !upstream.contains(c)) {
            return Err(EddyError::new(
                sqlstate::UNDEFINED_COLUMN,
                format!(
                    "postgres-cdc: column \"{missing}\" is not in table {}.{}",
                    self.schema, self.table
                ),
            ));
        }
        let has_publication = !client
            .query(
                "SELECT 1 FROM pg_publication WHERE pubname = $1",
                &[&self.publication],
            )
            .await
            .map_err(|e| self.failed("cannot read publications", e))?
            .is_empty();
        if !has_publication {
            if !self.create_publication {
                return Err(EddyError::new(
                    sqlstate::UNDEFINED_OBJECT,
                    format!(
                        "postgres-cdc {}: publication '{}' does not exist",
                        self.address(),
                        self.publication
                    ),
                ));
            }
            client
                .batch_execute(&format!(
                    "CREATE PUBLICATION {} FOR TABLE {}",
                    quote(&self.publication),
                    self.qualified_table()
                ))
                .await
                .map_err(|e| self.failed("cannot create the publication", e))?;
        }
        let has_slot = !client
            .query(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1",
                &[&self.slot],
            )
            .await
            .map_err(|e| self.failed("cannot read replication slots", e))?
            .is_empty();
        if !has_slot {
            client
                .query(
                    "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
                    &[&self.slot],
                )
                .await
                .map_err(|e| self.failed("cannot create the replication slot", e))?;
        }
        Ok(!has_slot)
    }

    /// The table's current rows, `columns` as text, in batches of `batch_rows`.
    pub async fn snapshot(
        &self,
        client: &tokio_postgres::Client,
        columns: &[String],
        batch_rows: usize,
        mut take: impl FnMut(Vec<Vec<Option<String>>>) -> Result<()>,
    ) -> Result<()> {
        use futures::StreamExt;
        let select: Vec<String> = columns
            .iter()
            .map(|c| format!("{}::text", quote(c)))
            .collect();
        let sql = format!(
            "SELECT {} FROM {}",
            select.join(", "),
            self.qualified_table()
        );
        let rows = client
            .query_raw(&sql, Vec::<String>::new())
            .await
            .map_err(|e| self.failed("cannot read the table", e))?;
        futures::pin_mut!(rows);
        let mut batch = Vec::with_capacity(batch_rows);
        while let Some(row) = rows.next().await {
            let row = row.map_err(|e| self.failed("cannot read the table", e))?;
            batch.push(
                (0..columns.len())
                    .map(|i| row.get::<_, Option<String>>(i))
                    .collect(),
            );
            if batch.len() == batch_rows {
                take(std::mem::take(&mut batch))?;
            }
        }
        if !batch.is_empty() {
            take(batch)?;
        }
        Ok(())
    }

    /// The changes in the slot from its confirmed position on (not consumed), parsed, as
    /// they arrive: a transaction larger than memory is never held whole.
    pub async fn peek(
        &self,
        client: &tokio_postgres::Client,
    ) -> Result<impl futures::Stream<Item = Result<Message>> + '_> {
        use futures::StreamExt;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
            [&self.slot, &CHANGES_PER_POLL, &self.publication];
        let rows = client
            .query_raw(
                "SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, $2, \
                 'proto_version', '1', 'publication_names', $3)",
                params,
            )
            .await
            .map_err(|e| self.failed("cannot read the replication slot", e))?;
        Ok(rows.map(move |row| {
            let row = row.map_err(|e| self.failed("cannot read the replication slot", e))?;
            pgoutput::parse(row.get::<_, &[u8]>(0))
        }))
    }

    /// Tells PostgreSQL it may drop the changes before `lsn` (held by a committed
    /// checkpoint).
    pub async fn advance(&self, client: &tokio_postgres::Client, lsn: u64) -> Result<()> {
        let target = pgoutput::format_lsn(lsn);
        let confirmed: Option<String> = client
            .query_one(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
                &[&self.slot],
            )
            .await
            .map_err(|e| self.failed("cannot read the replication slot", e))?
            .get(0);
        if let Some(confirmed) = confirmed
            && pgoutput::parse_lsn(&confirmed)? >= lsn
        {
            return Ok(());
        }
        client
            .query(
                "SELECT pg_replication_slot_advance($1, $2::text::pg_lsn)",
                &[&self.slot, &target],
            )
            .await
            .map_err(|e| self.failed("cannot advance the replication slot", e))?;
        Ok(())
    }

    /// Drops the slot (the table that read it is gone); errors are only logged. The
    /// stopped task may still be reading it (a slot in use cannot be dropped), so this
    /// tries again for a while.
    pub async fn drop_slot(&self) {
        const ATTEMPTS: usize = 50;
        let result = async {
            let client = self.connect().await?;
            for _ in 0..ATTEMPTS {
                let left = client
                    .query(
                        "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
                        &[&self.slot],
                    )
                    .await
                    .map_err(|e| self.failed("cannot read replication slots", e))?;
                match left.first().map(|row| row.get::<_, bool>(0)) {
                    None => return Ok(()),
                    Some(true) => tokio::time::sleep(Duration::from_millis(200)).await,
                    Some(false) => {
                        // It can become active between the two statements: then the
                        // next round sees it in use; any other failure is final.
                        if let Err(e) = client
                            .query("SELECT pg_drop_replication_slot($1)", &[&self.slot])
                            .await
                            && e.code() != Some(&tokio_postgres::error::SqlState::OBJECT_IN_USE)
                        {
                            return Err(self.failed("cannot drop the replication slot", e));
                        }
                    }
                }
            }
            Err(invalid(format!(
                "postgres-cdc {}: replication slot '{}' stayed in use; drop it by hand",
                self.address(),
                self.slot
            )))
        }
        .await;
        if let Err(e) = result {
            tracing::warn!("{e}");
        }
    }
}

fn quote(identifier: &str) -> String {
    format!("\"{}\"", identifier.replace('"', "\"\""))
}
