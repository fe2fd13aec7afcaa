//! What the Nexmark tests (`tests/nexmark.rs`) and the Nexmark benchmark
//! (`benches/nexmark.rs`) share: the three sources' columns, the query files of this
//! directory, and each query run by DataFusion in batch over the events the sources make
//! (the tests compare views with it; the benchmark times it as the engine's own limit).
//! Included by both with `#[path]`, so each uses only part of it.
#![allow(dead_code)]

use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::prelude::SessionContext;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Where the Nexmark queries live, one `qN.sql` each.
pub const QUERY_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/nexmark");

/// One of the three `nexmark` sources.
pub struct NexmarkSource {
    pub name: &'static str,
    /// `nexmark.table.type`.
    pub table_type: &'static str,
    /// The column list of its `CREATE SOURCE`.
    pub columns: &'static str,
    /// Its share of the events (Nexmark's 1 : 3 : 46 mix, out of 50).
    pub share: u64,
}

pub const SOURCES: [NexmarkSource; 3] = [
    NexmarkSource {
        name: "person",
        table_type: "Person",
        columns: "id BIGINT, name VARCHAR, email_address VARCHAR, credit_card VARCHAR, city VARCHAR, \
                  state VARCHAR, date_time TIMESTAMP, extra VARCHAR, \
                  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND",
        share: 1,
    },
    NexmarkSource {
        name: "auction",
        table_type: "Auction",
        columns: "id BIGINT, item_name VARCHAR, description VARCHAR, initial_bid BIGINT, reserve BIGINT, \
                  date_time TIMESTAMP, expires TIMESTAMP, seller BIGINT, category BIGINT, extra VARCHAR, \
                  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND",
        share: 3,
    },
    NexmarkSource {
        name: "bid",
        table_type: "Bid",
        columns: "auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, \
                  date_time TIMESTAMP, extra VARCHAR, p_time TIMESTAMPTZ AS PROCTIME(), \
                  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND",
        share: 46,
    },
];

impl NexmarkSource {
    /// Its `CREATE SOURCE`, bounded to `events` events of the whole stream.
    pub fn create(&self, events: u64, splits: usize) -> String {
        format!(
            "CREATE SOURCE {} ({}) WITH (
    connector = 'nexmark',
    nexmark.table.type = '{}',
    nexmark.event.num = {events},
    nexmark.split.num = {splits})",
            self.name, self.columns, self.table_type
        )
    }

    /// How many of `events` events are this source's rows.
    pub fn rows(&self, events: u64) -> u64 {
        events * self.share / 50
    }

    /// Its columns as DataFusion sees them in batch (the processing time `p_time` is a
    /// column of the relation, filled in by [`batch_context`]).
    fn schema(&self) -> SchemaRef {
        let ts = || DataType::Timestamp(TimeUnit::Microsecond, None);
        let int = DataType::Int64;
        let text = DataType::Utf8;
        let columns: Vec<(&str, DataType)> = match self.name {
            "person" => vec![
                ("id", int),
                ("name", text.clone()),
                ("email_address", text.clone()),
                ("credit_card", text.clone()),
                ("city", text.clone()),
                ("state", text.clone()),
                ("date_time", ts()),
                ("extra", text),
            ],
            "auction" => vec![
                ("id", int.clone()),
                ("item_name", text.clone()),
                ("description", text.clone()),
                ("initial_bid", int.clone()),
                ("reserve", int.clone()),
                ("date_time", ts()),
                ("expires", ts()),
                ("seller", int.clone()),
                ("category", int),
                ("extra", text),
            ],
            _ => vec![
                ("auction", int.clone()),
                ("bidder", int.clone()),
                ("price", int),
                ("channel", text.clone()),
                ("url", text.clone()),
                ("date_time", ts()),
                ("extra", text),
                (
                    "p_time",
                    DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
                ),
            ],
        };
        Arc::new(Schema::new(
            columns
                .into_iter()
                .map(|(name, t)| Field::new(name, t, true))
                .collect::<Vec<_>>(),
        ))
    }
}

/// The queries of [`QUERY_DIR`] as (name, SQL), in query order.
pub fn queries() -> Vec<(String, String)> {
    let mut queries: Vec<(u32, String, String)> = std::fs::read_dir(QUERY_DIR)
        .expect("benches/nexmark")
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            if path.extension()? != "sql" {
                return None;
            }
            let name = path.file_stem()?.to_str()?.to_string();
            let number: u32 = name.strip_prefix('q')?.parse().ok()?;
            let sql = std::fs::read_to_string(&path).ok()?;
            Some((number, name, sql))
        })
        .collect();
    queries.sort();
    queries
        .into_iter()
        .map(|(_, name, sql)| (name, sql))
        .collect()
}

/// The setup q13 needs (its side input table).
pub fn side_input() -> String {
    std::fs::read_to_string(format!("{QUERY_DIR}/side_input.sql")).expect("side_input.sql")
}

/// A DataFusion context holding, as in-memory tables, every event the three sources make
/// for `events` events, the side input table, and Eddy's functions. Bids' processing time
/// is `processing_time_micros` (the servers under test fix theirs).
pub async fn batch_context(
    events: u64,
    splits: usize,
    processing_time_micros: i64,
) -> SessionContext {
    // Literals with a fraction are exact numerics, as in Eddy (and PostgreSQL).
    let ctx = SessionContext::new_with_config(
        datafusion::prelude::SessionConfig::new()
            .set_bool("datafusion.sql_parser.parse_float_as_decimal", true),
    );
    for source in &SOURCES {
        let schema = source.schema();
        // The connector makes every column but the processing time.
        let made: Vec<_> = schema
            .fields()
            .iter()
            .filter(|f| f.name() != "p_time")
            .cloned()
            .collect();
        let made = Arc::new(Schema::new(made));
        let options: BTreeMap<String, String> = [
            ("connector", "nexmark".to_string()),
            ("nexmark.table.type", source.table_type.to_string()),
            ("nexmark.event.num", events.to_string()),
            ("nexmark.split.num", splits.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let spec = eddy::connectors::ConnectorSpec::from_options(&made, &options)
            .expect("nexmark options");
        let mut batches = Vec::new();
        for split in 0..spec.split_count() {
            let mut reader = spec.split_reader(split, 0);
            while let Some(b) = reader.next_batch(4096).expect("nexmark events") {
                batches.push(b);
            }
        }
        let all = arrow::compute::concat_batches(&made, &batches).expect("one batch");
        let all = if schema.fields().len() > made.fields().len() {
            let mut columns = all.columns().to_vec();
            columns.push(Arc::new(
                arrow::array::TimestampMicrosecondArray::from_value(
                    processing_time_micros,
                    all.num_rows(),
                )
                .with_timezone("+00:00"),
            ));
            arrow::array::RecordBatch::try_new(schema.clone(), columns).expect("with p_time")
        } else {
            all
        };
        ctx.register_batch(source.name, all).expect("registered");
    }
    eddy::session::functions::register(&ctx);
    eddy::session::rounding_casts::install(&ctx);
    ctx.sql(
        "CREATE TABLE side_input AS SELECT value AS key, CAST(value AS VARCHAR) AS value \
         FROM generate_series(0, 9999)",
    )
    .await
    .expect("side_input");
    ctx
}

/// A query's text for plain DataFusion over [`batch_context`]'s tables: a temporal join
/// with a table that does not change is a plain join, `mod` is `%`, and the windows are
/// spelled out.
pub fn batch_query(query: &str) -> String {
    let query = query
        .replace("FOR SYSTEM_TIME AS OF PROCTIME()", "")
        .replace("mod(B.auction, 10000)", "(B.auction % 10000)");
    batch_windows(&query)
}

/// Plain DataFusion has no `TUMBLE`/`HOP` table functions: the windows as `date_bin`
/// (tumbling) and a union of shifted `date_bin`s (hopping, size a multiple of the slide).
fn batch_windows(query: &str) -> String {
    let mut q = query.to_string();
    for relation in ["bid", "person", "auction"] {
        q = q.replace(
            &format!("TUMBLE({relation}, date_time, INTERVAL '10' SECOND)"),
            &format!(
                "(SELECT *, date_bin(INTERVAL '10' SECOND, date_time, TIMESTAMP '1970-01-01 00:00:00') AS window_start, \
                  date_bin(INTERVAL '10' SECOND, date_time, TIMESTAMP '1970-01-01 00:00:00') + INTERVAL '10' SECOND AS window_end \
                  FROM {relation}) AS {relation}"
            ),
        );
    }
    // q12's windows of processing time.
    q = q.replace(
        "TUMBLE(bid, p_time, INTERVAL '10' SECOND)",
        "(SELECT *, date_bin(INTERVAL '10' SECOND, p_time, TIMESTAMPTZ '1970-01-01 00:00:00+00') AS window_start, \
          date_bin(INTERVAL '10' SECOND, p_time, TIMESTAMPTZ '1970-01-01 00:00:00+00') + INTERVAL '10' SECOND AS window_end \
          FROM bid) AS bid",
    );
    let hops: Vec<String> = (0..5)
        .map(|k| {
            format!(
                "SELECT *, date_bin(INTERVAL '2' SECOND, date_time, TIMESTAMP '1970-01-01 00:00:00') - INTERVAL '{}' SECOND AS window_start FROM bid",
                2 * k
            )
        })
        .collect();
    q.replace(
        "HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)",
        &format!("({}) AS bid", hops.join(" UNION ALL ")),
    )
}
