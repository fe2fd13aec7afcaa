//! A client of a schema registry speaking Confluent's REST API: the latest schema of a
//! subject, a schema by id, registering a schema.
//!
//! Calls block the calling thread (they are made when a source or sink is created, and
//! when a reader meets a schema id for the first time), so each runs on a thread of its
//! own with its own small runtime: safe to call from inside a task of any runtime.

use crate::error::{EddyError, Result, sqlstate};
use std::time::Duration;

/// How long a registry request may take.
const TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaRegistry {
    /// `http://host:port`, without a trailing slash.
    base: String,
}

impl SchemaRegistry {
    pub fn new(url: &str) -> Result<Self> {
        let base = url.trim().trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(EddyError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!("schema.registry must be an http:// or https:// URL, not '{url}'"),
            ));
        }
        Ok(Self { base })
    }

    pub fn url(&self) -> &str {
        &self.base
    }

    /// The id and text of the newest schema registered under `subject`.
    pub fn latest(&self, subject: &str) -> Result<(u32, String)> {
        let answer = self.request(
            reqwest::Method::GET,
            &format!("/subjects/{subject}/versions/latest"),
            None,
        )?;
        Ok((id_of(&answer)?, schema_of(&answer)?))
    }

    /// The text of the schema with this id.
    pub fn by_id(&self, id: u32) -> Result<String> {
        let answer = self.request(reqwest::Method::GET, &format!("/schemas/ids/{id}"), None)?;
        schema_of(&answer)
    }

    /// Registers `schema` under `subject` (the registry returns the existing id when it
    /// is already there).
    pub fn register(&self, subject: &str, schema: &str) -> Result<u32> {
        let body = serde_json::json!({ "schema": schema }).to_string();
        let answer = self.request(
            reqwest::Method::POST,
            &format!("/subjects/{subject}/versions"),
            Some(body),
        )?;
        id_of(&answer)
    }

    fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<String>,
    ) -> Result<serde_json::Value> {
        let url = format!("{}{path}", self.base);
        let shown = url.clone();
        let call = move || -> std::result::Result<(u16, Vec<u8>), String> {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async move {
                let client = reqwest::Client::builder()
                    .timeout(TIMEOUT)
                    .build()
                    .map_err(|e| e.to_string())?;
                let mut request = client.request(method, &url).header(
                    "Accept",
                    "application/vnd.schemaregistry.v1+json, application/json",
                );
                if let Some(body) = body {
                    request = request
                        .header("Content-Type", "application/vnd.schemaregistry.v1+json")
                        .body(body);
                }
                let response = request.send().await.map_err(|e| e.to_string())?;
                let status = response.status().as_u16();
                let bytes = response.bytes().await.map_err(|e| e.to_string())?;
                Ok((status, bytes.to_vec()))
            })
        };
        let (status, bytes) = std::thread::spawn(call)
            .join()
            .map_err(|_| EddyError::internal("the schema registry request panicked"))?
            .map_err(|e| {
                EddyError::new(sqlstate::IO_ERROR, format!("schema registry {shown}: {e}"))
            })?;
        let answer: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
            EddyError::new(
                sqlstate::IO_ERROR,
                format!("schema registry {shown}: not a JSON answer ({e})"),
            )
        })?;
        if !(200..300).contains(&status) {
            let message = answer
                .get("message")
                .and_then(|m| m.as_str())
                .unwrap_or("no message");
            return Err(EddyError::new(
                sqlstate::IO_ERROR,
                format!("schema registry {shown}: HTTP {status}: {message}"),
            ));
        }
        Ok(answer)
    }
}

fn id_of(answer: &serde_json::Value) -> Result<u32> {
    answer
        .get("id")
        .and_then(|v| v.as_u64())
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| EddyError::new(sqlstate::IO_ERROR, "the schema registry's answer has no id"))
}

fn schema_of(answer: &serde_json::Value) -> Result<String> {
    answer
        .get("schema")
        .and_then(|v| v.as_str())
        .map(str::to_string)
        .ok_or_else(|| {
            EddyError::new(
                sqlstate::IO_ERROR,
                "the schema registry's answer has no schema",
            )
        })
}
