//! A test-only schema registry: an HTTP server speaking the part of Confluent's Schema
//! Registry REST API that Eddy uses (no registry implementation installs from the
//! package registries here). Schemas are kept in memory; the same schema text always
//! gets the same id, as in the real registry.
//!
//! - `POST /subjects/{subject}/versions` with `{"schema": "..."}` → `{"id": n}`
//! - `GET /subjects/{subject}/versions/latest` → `{"subject", "version", "id", "schema"}`
//! - `GET /schemas/ids/{id}` → `{"schema": "..."}`
//!
//! Unknown subjects and ids answer 404 with the registry's error codes (40401, 40403).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Registry {
    /// Schema texts by id (ids count from 1).
    schemas: Vec<String>,
    /// Per subject, the ids of its versions in order.
    subjects: HashMap<String, Vec<u32>>,
}

pub struct SchemaRegistryServer {
    pub url: String,
}

impl SchemaRegistryServer {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let registry = Arc::new(Mutex::new(Registry::default()));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let registry = registry.clone();
                std::thread::spawn(move || serve(stream, &registry));
            }
        });
        Self { url }
    }

    /// Registers a schema under `subject` directly (as a producer would); its id.
    pub fn register(&self, subject: &str, schema: &str) -> u32 {
        let body = serde_json::json!({ "schema": schema }).to_string();
        let (status, answer) = request(
            &self.url,
            "POST",
            &format!("/subjects/{subject}/versions"),
            &body,
        );
        assert_eq!(status, 200, "{answer}");
        answer["id"].as_u64().unwrap() as u32
    }
}

impl SchemaRegistryServer {
    /// The schema registered with this id.
    pub fn schema(&self, id: u32) -> String {
        let (status, answer) = request(&self.url, "GET", &format!("/schemas/ids/{id}"), "");
        assert_eq!(status, 200, "{answer}");
        answer["schema"].as_str().unwrap().to_string()
    }
}

/// One request and its JSON answer, over a plain TCP connection.
fn request(url: &str, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    let address = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let status = text.split(' ').nth(1).unwrap().parse().unwrap();
    let json = text.split("\r\n\r\n").nth(1).unwrap();
    (status, serde_json::from_str(json).unwrap())
}

fn serve(stream: std::net::TcpStream, registry: &Mutex<Registry>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).is_err() || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, answer) = answer(method, path, &body, &mut registry.lock().unwrap());
    let text = answer.to_string();
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        _ => "Unprocessable Entity",
    };
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/vnd.schemaregistry.v1+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
}

fn answer(
    method: &str,
    path: &str,
    body: &[u8],
    registry: &mut Registry,
) -> (u16, serde_json::Value) {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let not_found = |code: u32, message: &str| {
        (
            404,
            serde_json::json!({ "error_code": code, "message": message }),
        )
    };
    match (method, segments.as_slice()) {
        ("POST", ["subjects", subject, "versions"]) => {
            let request: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
            let Some(schema) = request["schema"].as_str() else {
                return (
                    422,
                    serde_json::json!({ "error_code": 42201, "message": "Invalid schema" }),
                );
            };
            let id = match registry.schemas.iter().position(|s| s == schema) {
                Some(i) => i as u32 + 1,
                None => {
                    registry.schemas.push(schema.to_string());
                    registry.schemas.len() as u32
                }
            };
            let versions = registry.subjects.entry(subject.to_string()).or_default();
            if !versions.contains(&id) {
                versions.push(id);
            }
            (200, serde_json::json!({ "id": id }))
        }
        ("GET", ["subjects", subject, "versions", "latest"]) => {
            match registry.subjects.get(*subject) {
                Some(versions) => {
                    let id = *versions.last().unwrap();
                    (
                        200,
                        serde_json::json!({
                            "subject": subject, "version": versions.len(), "id": id,
                            "schema": registry.schemas[id as usize - 1],
                        }),
                    )
                }
                None => not_found(40401, &format!("Subject '{subject}' not found.")),
            }
        }
        ("GET", ["schemas", "ids", id]) => {
            match id
                .parse::<usize>()
                .ok()
                .and_then(|i| registry.schemas.get(i.wrapping_sub(1)))
            {
                Some(schema) => (200, serde_json::json!({ "schema": schema })),
                None => not_found(40403, "Schema not found"),
            }
        }
        _ => not_found(404, "Not found"),
    }
}
