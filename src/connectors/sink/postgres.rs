//! The PostgreSQL sink: `connector = 'postgres'` with `host`, `port` (5432), `user`,
//! `password`, `database`, `schema` (`public`), `table`, and `type = 'upsert'` with a
//! `primary_key` (the default when one is given) or `type = 'append-only'`.
//!
//! Each subtask holds an epoch's changes and applies them at the barrier in one
//! transaction: in upsert mode the changes are first reduced to the last one per key, then
//! deleted keys are deleted and the others upserted (`INSERT ... ON CONFLICT DO UPDATE`),
//! so applying an epoch again — after a crash the job replays from its last checkpoint —
//! leaves the same rows: delivery is at least once and the table converges to the
//! query's result. Values travel as PostgreSQL's text of each value, cast to the target
//! column's type, so every type arrives exact. A failed transaction is retried a few times
//! with backoff, then fails the job, which restarts from its checkpoint and tries again.

use super::{SinkContext, SinkMode, check_known, inserted_rows, invalid, primary_key};
use crate::error::{EddyError, Result, sqlstate};
use crate::stream::sink::{SinkFactory, SinkWriter};
use crate::stream::{Op, StreamChunk};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// Attempts at an epoch's transaction before the job fails.
const ATTEMPTS: u32 = 3;
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(200);
/// Bind parameters per statement (PostgreSQL allows 65535).
const PARAMETERS_PER_STATEMENT: usize = 30_000;

#[derive(Clone)]
pub struct PostgresSinkSpec {
    shared: Arc<Target>,
}

/// Where and how a PostgreSQL sink writes.
struct Target {
    sink: String,
    config: tokio_postgres::Config,
    /// For messages: `host:port/database`.
    address: String,
    schema: String,
    table: String,
    /// The sink's column names.
    columns: Vec<String>,
    primary_key: Vec<usize>,
    mode: SinkMode,
}

fn quote(identifier: &str) -> String {
    format!("\"{}\"", identifier.replace('"', "\"\""))
}

impl PostgresSinkSpec {
    pub fn from_options(
        options: &BTreeMap<String, String>,
        context: &SinkContext<'_>,
    ) -> Result<Self> {
        check_known(
            "postgres",
            options,
            &[
                "host", "port", "user", "password", "database", "schema", "table",
            ],
        )?;
        if options.contains_key("format") {
            return Err(invalid(
                "a postgres sink takes no FORMAT ... ENCODE ... (rows go into the table)",
            ));
        }
        let required = |key: &str| {
            options
                .get(key)
                .filter(|v| !v.trim().is_empty())
                .cloned()
                .ok_or_else(|| invalid(format!("sink connector postgres needs option {key}")))
        };
        let host = required("host")?;
        let user = required("user")?;
        let database = required("database")?;
        let table = required("table")?;
        let port = match options.get("port") {
            Some(p) => crate::connectors::parse_option::<u16>("port", p)?,
            None => 5432,
        };
        let primary_key = primary_key(options, context)?;
        let default = if primary_key.is_empty() {
            SinkMode::AppendOnly
        } else {
            SinkMode::Upsert
        };
        let mode = SinkMode::from_options(options, context, default, true)?;
        if mode == SinkMode::Upsert && primary_key.is_empty() {
            return Err(invalid(
                "a postgres sink of type 'upsert' needs primary_key = '<columns>'",
            ));
        }
        let mut config = tokio_postgres::Config::new();
        config
            .host(&host)
            .port(port)
            .user(&user)
            .dbname(&database)
            .application_name("eddy")
            .connect_timeout(Duration::from_secs(5));
        if let Some(password) = options.get("password") {
            config.password(password);
        }
        Ok(Self {
            shared: Arc::new(Target {
                sink: context.name.to_string(),
                config,
                address: format!("{host}:{port}/{database}"),
                schema: options
                    .get("schema")
                    .cloned()
                    .unwrap_or_else(|| "public".into()),
                table,
                columns: context
                    .schema
                    .fields()
                    .iter()
                    .map(|f| f.name().clone())
                    .collect(),
                primary_key,
                mode,
            }),
        })
    }

    /// Connects once and checks the target table (at `CREATE SINK`): it exists, has every
    /// column of the sink and, for upserts, a primary key or unique index on the key.
    pub async fn resolve_target(self) -> Result<Self> {
        let client = self.shared.connect().await?;
        self.shared.column_types(&client).await?;
        Ok(self)
    }
}

impl Target {
    fn qualified_table(&self) -> String {
        format!("{}.{}", quote(&self.schema), quote(&self.table))
    }

    fn unreachable(&self, e: tokio_postgres::Error) -> EddyError {
        EddyError::caused_by(
            sqlstate::IO_ERROR,
            format!(
                "sink \"{}\": cannot reach PostgreSQL at {}: {}",
                self.sink,
                self.address,
                error_text(&e)
            ),
            e,
        )
    }

    async fn connect(&self) -> Result<tokio_postgres::Client> {
        let (client, connection) = self
            .config
            .connect(tokio_postgres::NoTls)
            .await
            .map_err(|e| self.unreachable(e))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("postgres sink connection ended: {e}");
            }
        });
        Ok(client)
    }

    /// The target column type of each sink column, checking the table fits the sink.
    async fn column_types(&self, client: &tokio_postgres::Client) -> Result<Vec<String>> {
        let rows = client
            .query(
                "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) \
                 FROM pg_attribute a JOIN pg_class c ON a.attrelid = c.oid \
                 JOIN pg_namespace n ON c.relnamespace = n.oid \
                 WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 \
                 AND NOT a.attisdropped",
                &[&self.schema, &self.table],
            )
            .await
            .map_err(|e| self.unreachable(e))?;
        if rows.is_empty() {
            return Err(EddyError::new(
                sqlstate::UNDEFINED_TABLE,
                format!(
                    "sink \"{}\": table {}.{} does not exist in PostgreSQL at {}",
                    self.sink, self.schema, self.table, self.address
                ),
            ));
        }
        let target: HashMap<String, String> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        let types = self
            .columns
            .iter()
            .map(|c| {
                target.get(c).cloned().ok_or_else(|| {
                    EddyError::new(
                        sqlstate::UNDEFINED_COLUMN,
                        format!(
                            "sink \"{}\": column \"{c}\" is not in table {}.{}",
                            self.sink, self.schema, self.table
                        ),
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if self.mode == SinkMode::Upsert {
            let key: Vec<String> = self
                .primary_key
                .iter()
                .map(|k| self.columns[*k].clone())
                .collect();
            let unique = client
                .query(
                    "SELECT array_agg(a.attname::text) FROM pg_index i \
                     JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) \
                     WHERE i.indrelid = format('%I.%I', $1::text, $2::text)::regclass \
                     AND i.indisunique GROUP BY i.indexrelid",
                    &[&self.schema, &self.table],
                )
                .await
                .map_err(|e| self.unreachable(e))?;
            let fits = unique.iter().any(|r| {
                let mut columns: Vec<String> = r.get(0);
                let mut wanted = key.clone();
                columns.sort();
                wanted.sort();
                columns == wanted
            });
            if !fits {
                return Err(invalid(format!(
                    "sink \"{}\": table {}.{} has no primary key or unique index on ({}), \
                     which upserts need",
                    self.sink,
                    self.schema,
                    self.table,
                    key.join(", ")
                )));
            }
        }
        Ok(types)
    }
}

/// A PostgreSQL error with the server's message when there is one, else the client's
/// error with its causes.
pub(crate) fn error_text(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return db.message().to_string();
    }
    // "error connecting to server" alone does not say why: add the causes.
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(&format!(": {c}"));
        cause = c.source();
    }
    text
}

impl SinkFactory for PostgresSinkSpec {
    fn name(&self) -> &'static str {
        "PostgresSink"
    }

    fn writer(&self, _subtask: usize) -> Result<Box<dyn SinkWriter>> {
        Ok(Box::new(PostgresSinkWriter {
            target: self.shared.clone(),
            client: None,
            types: None,
            pending: Vec::new(),
        }))
    }
}

struct PostgresSinkWriter {
    target: Arc<Target>,
    client: Option<tokio_postgres::Client>,
    /// The target column types, found at the first connection.
    types: Option<Vec<String>>,
    /// The epoch's changes, each row as the text of its values.
    pending: Vec<TextChange>,
}

/// One change: insert (or upsert) the values, or delete the key.
struct TextChange {
    insert: bool,
    values: Vec<Option<String>>,
}

#[async_trait::async_trait]
impl SinkWriter for PostgresSinkWriter {
    async fn write(&mut self, chunk: StreamChunk) -> Result<()> {
        let (ops, batch) = match self.target.mode {
            SinkMode::AppendOnly => (None, inserted_rows(&chunk)?),
            SinkMode::Upsert => (Some(&chunk.ops), chunk.batch.clone()),
        };
        let columns = batch
            .columns()
            .iter()
            .map(crate::pg_text::text_column)
            .collect::<Result<Vec<_>>>()?;
        for row in 0..batch.num_rows() {
            let values = columns
                .iter()
                .map(|c| {
                    use arrow::array::Array;
                    (!c.is_null(row)).then(|| c.value(row).to_string())
                })
                .collect();
            let insert = ops.is_none_or(|ops: &Vec<Op>| ops[row].is_insert());
            self.pending.push(TextChange { insert, values });
        }
        Ok(())
    }

    async fn barrier(&mut self, _epoch: u64) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut delay = FIRST_RETRY_DELAY;
        let mut attempt = 1;
        loop {
            match self.apply().await {
                Ok(()) => {
                    self.pending.clear();
                    return Ok(());
                }
                Err(e) if attempt < ATTEMPTS => {
                    tracing::warn!(sink = %self.target.sink, attempt, "postgres sink: {e}");
                    self.client = None;
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl PostgresSinkWriter {
    /// Applies the pending changes in one transaction.
    async fn apply(&mut self) -> Result<()> {
        let target = self.target.clone();
        if self.client.is_none() {
            let client = target.connect().await?;
            if self.types.is_none() {
                self.types = Some(target.column_types(&client).await?);
            }
            self.client = Some(client);
        }
        let types = self.types.clone().expect("resolved with the connection");
        let (upserts, deletes) = match target.mode {
            SinkMode::AppendOnly => (self.pending.iter().map(|c| &c.values).collect(), vec![]),
            SinkMode::Upsert => last_change_per_key(&self.pending, &target.primary_key),
        };
        let client = self.client.as_mut().expect("connected above");
        let failed = |e: tokio_postgres::Error| {
            EddyError::new(
                sqlstate::IO_ERROR,
                format!(
                    "sink \"{}\": writing to {}.{} failed: {}",
                    target.sink,
                    target.schema,
                    target.table,
                    error_text(&e)
                ),
            )
        };
        let transaction = client.transaction().await.map_err(failed)?;
        for batch in deletes.chunks(rows_per_statement(target.primary_key.len())) {
            let (sql, params) = delete_statement(&target, &types, batch);
            transaction.execute(&sql, &params).await.map_err(failed)?;
        }
        for batch in upserts.chunks(rows_per_statement(target.columns.len())) {
            let (sql, params) = insert_statement(&target, &types, batch);
            transaction.execute(&sql, &params).await.map_err(failed)?;
        }
        transaction.commit().await.map_err(failed)
    }
}

fn rows_per_statement(columns: usize) -> usize {
    (PARAMETERS_PER_STATEMENT / columns.max(1)).max(1)
}

type Values<'a> = &'a Vec<Option<String>>;
type Params<'a> = Vec<&'a (dyn tokio_postgres::types::ToSql + Sync)>;

/// The epoch's changes reduced to the last one per key: rows to upsert, keys to delete.
fn last_change_per_key<'a>(
    changes: &'a [TextChange],
    key: &[usize],
) -> (Vec<Values<'a>>, Vec<Vec<&'a Option<String>>>) {
    let mut last: HashMap<Vec<&Option<String>>, &TextChange> = HashMap::new();
    for change in changes {
        let k: Vec<&Option<String>> = key.iter().map(|i| &change.values[*i]).collect();
        last.insert(k, change);
    }
    let mut upserts = Vec::new();
    let mut deletes = Vec::new();
    for (k, change) in last {
        if change.insert {
            upserts.push(&change.values);
        } else {
            deletes.push(k);
        }
    }
    (upserts, deletes)
}

/// `$n::text::<type>`: a value sent as text, read as the target column's type.
fn placeholder(n: usize, column_type: &str) -> String {
    format!("${n}::text::{column_type}")
}

fn insert_statement<'a>(
    target: &Target,
    types: &[String],
    rows: &'a [Values<'a>],
) -> (String, Params<'a>) {
    let columns: Vec<String> = target.columns.iter().map(|c| quote(c)).collect();
    let mut params: Params<'a> = Vec::new();
    let mut tuples = Vec::with_capacity(rows.len());
    for row in rows {
        let mut tuple = Vec::with_capacity(row.len());
        for (value, column_type) in row.iter().zip(types) {
            params.push(value);
            tuple.push(placeholder(params.len(), column_type));
        }
        tuples.push(format!("({})", tuple.join(", ")));
    }
    let mut sql = format!(
        "INSERT INTO {} ({}) VALUES {}",
        target.qualified_table(),
        columns.join(", "),
        tuples.join(", ")
    );
    if target.mode == SinkMode::Upsert {
        let key: Vec<String> = target
            .primary_key
            .iter()
            .map(|k| columns[*k].clone())
            .collect();
        let updates: Vec<String> = columns
            .iter()
            .enumerate()
            .filter(|(i, _)| !target.primary_key.contains(i))
            .map(|(_, c)| format!("{c} = EXCLUDED.{c}"))
            .collect();
        sql.push_str(&format!(" ON CONFLICT ({}) ", key.join(", ")));
        if updates.is_empty() {
            sql.push_str("DO NOTHING");
        } else {
            sql.push_str(&format!("DO UPDATE SET {}", updates.join(", ")));
        }
    }
    (sql, params)
}

fn delete_statement<'a>(
    target: &Target,
    types: &[String],
    keys: &'a [Vec<&'a Option<String>>],
) -> (String, Params<'a>) {
    let key_columns: Vec<String> = target
        .primary_key
        .iter()
        .map(|k| quote(&target.columns[*k]))
        .collect();
    let mut params: Params<'a> = Vec::new();
    let mut tuples = Vec::with_capacity(keys.len());
    for key in keys {
        let mut tuple = Vec::with_capacity(key.len());
        for (value, column) in key.iter().zip(&target.primary_key) {
            params.push(*value);
            tuple.push(placeholder(params.len(), &types[*column]));
        }
        tuples.push(format!("({})", tuple.join(", ")));
    }
    let sql = format!(
        "DELETE FROM {} WHERE ({}) IN ({})",
        target.qualified_table(),
        key_columns.join(", "),
        tuples.join(", ")
    );
    (sql, params)
}
