//! Runs every `sql-tests/*.slt` file against a fresh server, once over the simple query
//! protocol (text results) with one streaming worker (parallelism 1) and once over the
//! extended protocol (prepared statements, binary results) with four (parallelism 4), so
//! both paths and both parallelisms must give the same results.

use crate::common::TestServer;
use async_trait::async_trait;
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType};
use std::path::PathBuf;
use tokio_postgres::types::{FromSql, Type};
use tokio_postgres::{Client, SimpleQueryMessage};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Protocol {
    Simple,
    Extended,
}

/// An error as the client saw it: SQLSTATE and message.
#[derive(Debug)]
struct SqlError {
    code: Option<String>,
    message: String,
}

impl std::fmt::Display for SqlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.code {
            Some(code) => write!(f, "{code}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for SqlError {}

impl From<tokio_postgres::Error> for SqlError {
    fn from(e: tokio_postgres::Error) -> Self {
        match e.as_db_error() {
            Some(db) => SqlError {
                code: Some(db.code().code().to_string()),
                message: db.message().to_string(),
            },
            None => SqlError {
                code: None,
                message: e.to_string(),
            },
        }
    }
}

struct Eddy {
    client: Client,
    protocol: Protocol,
}

#[async_trait]
impl AsyncDB for Eddy {
    type Error = SqlError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SqlError> {
        match self.protocol {
            Protocol::Simple => self.run_simple(sql).await,
            Protocol::Extended => self.run_extended(sql).await,
        }
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "eddy"
    }

    async fn sleep(dur: std::time::Duration) {
        tokio::time::sleep(dur).await
    }

    fn error_sql_state(err: &SqlError) -> Option<String> {
        err.code.clone()
    }
}

impl Eddy {
    async fn run_simple(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SqlError> {
        let messages = self.client.simple_query(sql).await?;
        let mut rows = Vec::new();
        let mut columns = None;
        let mut affected = 0;
        for m in messages {
            match m {
                SimpleQueryMessage::RowDescription(desc) => columns = Some(desc.len()),
                SimpleQueryMessage::Row(row) => {
                    rows.push(
                        (0..row.len())
                            .map(|i| {
                                row.get(i)
                                    .map(display_text)
                                    .unwrap_or_else(|| "NULL".into())
                            })
                            .collect::<Vec<_>>(),
                    );
                }
                SimpleQueryMessage::CommandComplete(n) => affected = n,
                _ => {}
            }
        }
        Ok(match columns {
            Some(n) => DBOutput::Rows {
                types: vec![DefaultColumnType::Any; n],
                rows,
            },
            None => DBOutput::StatementComplete(affected),
        })
    }

    async fn run_extended(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SqlError> {
        let stmt = self.client.prepare(sql).await?;
        if stmt.columns().is_empty() {
            let n = self.client.execute(&stmt, &[]).await?;
            return Ok(DBOutput::StatementComplete(n));
        }
        let result = self.client.query(&stmt, &[]).await?;
        // A client shows a binary `timestamptz` (an instant) in the session's zone.
        let zone = if stmt
            .columns()
            .iter()
            .any(|c| *c.type_() == Type::TIMESTAMPTZ || *c.type_() == Type::TIMESTAMPTZ_ARRAY)
        {
            let zone = self.client.query_one("SHOW timezone", &[]).await?;
            Some(zone.get::<_, String>(0))
        } else {
            None
        };
        let rows = result
            .iter()
            .map(|row| {
                (0..row.len())
                    .map(|i| binary_value_text(row, i, zone.as_deref()))
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(DBOutput::Rows {
            types: vec![DefaultColumnType::Any; stmt.columns().len()],
            rows,
        })
    }
}

/// An empty string would vanish in the slt format; show it as `(empty)`.
fn display_text(s: &str) -> String {
    if s.is_empty() {
        "(empty)".into()
    } else {
        s.to_string()
    }
}

/// Raw bytes of a value whatever its type, for types decoded by hand below.
struct Raw(Vec<u8>);

impl<'a> FromSql<'a> for Raw {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(raw.to_vec()))
    }
    fn accepts(_: &Type) -> bool {
        true
    }
}

/// Formats a binary result value the way PostgreSQL prints the same value as text.
fn binary_value_text(
    row: &tokio_postgres::Row,
    i: usize,
    zone: Option<&str>,
) -> Result<String, SqlError> {
    let ty = row.columns()[i].type_().clone();
    let err = |e: tokio_postgres::Error| SqlError::from(e);
    let Some(Raw(raw)) = row.try_get::<_, Option<Raw>>(i).map_err(err)? else {
        return Ok("NULL".into());
    };
    Ok(display_text(&binary_text(&ty, &raw, zone)))
}

/// Microseconds between 1970-01-01 and PostgreSQL's epoch, 2000-01-01.
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// PostgreSQL's text form of one binary value of type `ty`; a `timestamptz` in the
/// session's `zone`.
fn binary_text(ty: &Type, raw: &[u8], zone: Option<&str>) -> String {
    if let tokio_postgres::types::Kind::Array(element) = ty.kind() {
        return array_text(element, raw, zone);
    }
    match *ty {
        Type::BOOL => if raw[0] != 0 { "t" } else { "f" }.to_string(),
        Type::INT2 => i16::from_be_bytes(raw[..2].try_into().unwrap()).to_string(),
        Type::INT4 => i32::from_be_bytes(raw[..4].try_into().unwrap()).to_string(),
        Type::INT8 => i64::from_be_bytes(raw[..8].try_into().unwrap()).to_string(),
        Type::FLOAT4 => eddy::server::encode::format_float(
            f32::from_be_bytes(raw[..4].try_into().unwrap()) as f64,
            6,
            true,
        ),
        Type::FLOAT8 => eddy::server::encode::format_float(
            f64::from_be_bytes(raw[..8].try_into().unwrap()),
            15,
            false,
        ),
        Type::NUMERIC => numeric_text(raw),
        Type::DATE => {
            // Days since 2000-01-01, PostgreSQL's epoch, 10 957 days after 1970's.
            let days = i32::from_be_bytes(raw[..4].try_into().unwrap());
            eddy::server::encode::format_date(days + 10_957)
        }
        Type::TIMESTAMPTZ if zone.is_some() => {
            let micros = i64::from_be_bytes(raw[..8].try_into().unwrap());
            eddy::server::encode::format_timestamp_in_zone(
                micros + PG_EPOCH_MICROS,
                zone.unwrap_or_default(),
            )
        }
        Type::TIMESTAMP | Type::TIMESTAMPTZ => {
            let micros = i64::from_be_bytes(raw[..8].try_into().unwrap());
            eddy::server::encode::format_timestamp(
                micros + PG_EPOCH_MICROS,
                *ty == Type::TIMESTAMPTZ,
            )
        }
        Type::TIME => {
            let micros = i64::from_be_bytes(raw[..8].try_into().unwrap());
            let time = chrono::NaiveTime::MIN + chrono::Duration::microseconds(micros);
            time.format("%H:%M:%S%.f").to_string()
        }
        Type::INTERVAL => {
            let micros = i64::from_be_bytes(raw[0..8].try_into().unwrap());
            let days = i32::from_be_bytes(raw[8..12].try_into().unwrap());
            let months = i32::from_be_bytes(raw[12..16].try_into().unwrap());
            eddy::server::encode::format_interval(months, days, micros * 1000)
        }
        Type::BYTEA => {
            let mut s = String::from("\\x");
            for b in raw {
                s.push_str(&format!("{b:02x}"));
            }
            s
        }
        Type::JSONB => String::from_utf8_lossy(&raw[1..]).into_owned(),
        _ => String::from_utf8_lossy(raw).into_owned(),
    }
}

/// A one-dimensional binary array as PostgreSQL prints it: `{1,NULL,"a b"}`.
fn array_text(element: &Type, raw: &[u8], zone: Option<&str>) -> String {
    let int = |at: usize| i32::from_be_bytes(raw[at..at + 4].try_into().unwrap());
    let dims = int(0);
    if dims == 0 {
        return "{}".into();
    }
    let len = int(12) as usize;
    let mut at = 12 + 8 * dims as usize;
    let mut items = Vec::with_capacity(len);
    for _ in 0..len {
        let n = int(at);
        at += 4;
        if n < 0 {
            items.push("NULL".to_string());
            continue;
        }
        let text = binary_text(element, &raw[at..at + n as usize], zone);
        at += n as usize;
        let plain = !text.is_empty()
            && !text.eq_ignore_ascii_case("null")
            && !text.contains(|c: char| c.is_whitespace() || ",{}\\\"".contains(c));
        items.push(if plain {
            text
        } else {
            format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
        });
    }
    format!("{{{}}}", items.join(","))
}

/// Decodes PostgreSQL's binary numeric independently of the server's encoder.
fn numeric_text(raw: &[u8]) -> String {
    let word = |at: usize| i16::from_be_bytes([raw[at], raw[at + 1]]);
    let ndigits = word(0) as usize;
    let weight = word(2) as i32;
    let negative = u16::from_be_bytes([raw[4], raw[5]]) == 0x4000;
    let dscale = word(6) as usize;
    let digits: Vec<i16> = (0..ndigits).map(|k| word(8 + 2 * k)).collect();
    let mut int_part = String::new();
    for w in 0..=weight.max(0) {
        let d = if w <= weight {
            digits.get(w as usize).copied().unwrap_or(0)
        } else {
            0
        };
        if int_part.is_empty() {
            if w <= weight && d != 0 {
                int_part = d.to_string();
            }
        } else {
            int_part.push_str(&format!("{d:04}"));
        }
    }
    if weight < 0 || int_part.is_empty() {
        int_part = "0".into();
    }
    let mut frac = String::new();
    let mut pos = weight + 1; // index of the first group after the decimal point
    while frac.len() < dscale {
        let d = if pos >= 0 {
            digits.get(pos as usize).copied().unwrap_or(0)
        } else {
            0
        };
        frac.push_str(&format!("{d:04}"));
        pos += 1;
    }
    frac.truncate(dscale);
    let sign = if negative { "-" } else { "" };
    if dscale > 0 {
        format!("{sign}{int_part}.{frac}")
    } else {
        format!("{sign}{int_part}")
    }
}

fn slt_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sql-tests");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("sql-tests directory exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        // `EDDY_SLT=name` runs only the files whose name contains it (while developing).
        .filter(|p| {
            std::env::var("EDDY_SLT").map_or(true, |only| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().contains(only.as_str()))
            })
        })
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no .slt files found in {}",
        dir.display()
    );
    files
}

/// Runs every file over `protocol` against servers with `workers` streaming workers: the
/// default `streaming_parallelism` is the number of workers.
async fn run_all(protocol: Protocol, workers: usize) {
    let mut failures = Vec::new();
    for file in slt_files() {
        let server = TestServer::start_with_args(&["--workers", &workers.to_string()]);
        let conn = server.conn_string();
        let mut runner = sqllogictest::Runner::new(move || {
            let conn = conn.clone();
            async move {
                let (client, connection) =
                    tokio_postgres::connect(&conn, tokio_postgres::NoTls).await?;
                tokio::spawn(async move {
                    let _ = connection.await;
                });
                Ok::<_, SqlError>(Eddy { client, protocol })
            }
        });
        if let Err(e) = runner.run_file_async(&file).await {
            failures.push(format!(
                "{} ({protocol:?} protocol, {workers} workers):\n{e}",
                file.display()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} slt file(s) failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_tests_simple_protocol_parallelism_1() {
    run_all(Protocol::Simple, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_tests_extended_protocol_parallelism_4() {
    run_all(Protocol::Extended, 4).await;
}
