//! The `nexmark` connector: the Nexmark benchmark's auction events (crate `nexmark`).
//!
//! Options (as in RisingWave): `nexmark.table.type` = `Person` | `Auction` | `Bid`;
//! `nexmark.event.num` (events of all three kinds together, so 100000 events hold 92000
//! bids; default unbounded); `nexmark.split.num` (default 1);
//! `nexmark.min.event.gap.in.ns` (pacing; default 0 = as fast as possible).
//!
//! The declared columns must be named as Nexmark's fields (any subset, any order); values
//! are cast to the declared types. Event times start at a fixed base time, so every run
//! makes the same events.

use super::parse_option;
use crate::error::{EddyError, Result, sqlstate};
use arrow::array::{
    ArrayRef, Int64Builder, RecordBatch, StringBuilder, TimestampMicrosecondBuilder,
};
use arrow::compute::cast;
use arrow::datatypes::SchemaRef;
use nexmark::EventGenerator;
use nexmark::config::NexmarkConfig;
use nexmark::event::{Event, EventType};
use std::collections::BTreeMap;
use std::sync::Arc;

/// 2015-07-15 00:00:00 UTC, in milliseconds: the time of the first event.
const BASE_TIME_MS: u64 = 1_436_918_400_000;

const PERSON_FIELDS: &[&str] = &[
    "id",
    "name",
    "email_address",
    "credit_card",
    "city",
    "state",
    "date_time",
    "extra",
];
const AUCTION_FIELDS: &[&str] = &[
    "id",
    "item_name",
    "description",
    "initial_bid",
    "reserve",
    "date_time",
    "expires",
    "seller",
    "category",
    "extra",
];
const BID_FIELDS: &[&str] = &[
    "auction",
    "bidder",
    "price",
    "channel",
    "url",
    "date_time",
    "extra",
];
const TIME_FIELDS: &[&str] = &["date_time", "expires"];

#[derive(Debug, Clone, PartialEq)]
pub struct NexmarkSpec {
    pub schema: SchemaRef,
    pub event_type: NexmarkTable,
    pub event_num: Option<u64>,
    pub splits: u32,
    pub min_event_gap_ns: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NexmarkTable {
    Person,
    Auction,
    Bid,
}

impl NexmarkTable {
    fn fields(self) -> &'static [&'static str] {
        match self {
            NexmarkTable::Person => PERSON_FIELDS,
            NexmarkTable::Auction => AUCTION_FIELDS,
            NexmarkTable::Bid => BID_FIELDS,
        }
    }

    fn event_type(self) -> EventType {
        match self {
            NexmarkTable::Person => EventType::Person,
            NexmarkTable::Auction => EventType::Auction,
            NexmarkTable::Bid => EventType::Bid,
        }
    }
}

impl NexmarkSpec {
    pub fn from_options(schema: &SchemaRef, options: &BTreeMap<String, String>) -> Result<Self> {
        let invalid = |m: String| EddyError::new(sqlstate::INVALID_PARAMETER_VALUE, m);
        for key in options
            .keys()
            .filter(|k| !matches!(k.as_str(), "format" | "encode") && !k.starts_with("encode."))
        {
            if !matches!(
                key.as_str(),
                "connector"
                    | "nexmark.table.type"
                    | "nexmark.event.num"
                    | "nexmark.split.num"
                    | "nexmark.min.event.gap.in.ns"
            ) {
                return Err(invalid(format!(
                    "unknown option '{key}' for connector nexmark"
                )));
            }
        }
        let event_type = match options
            .get("nexmark.table.type")
            .map(|s| s.to_ascii_lowercase())
            .as_deref()
        {
            Some("person") => NexmarkTable::Person,
            Some("auction") => NexmarkTable::Auction,
            Some("bid") => NexmarkTable::Bid,
            Some(other) => {
                return Err(invalid(format!(
                    "nexmark.table.type must be Person, Auction or Bid, not '{other}'"
                )));
            }
            None => {
                return Err(invalid(
                    "a nexmark source needs nexmark.table.type (Person, Auction or Bid)".into(),
                ));
            }
        };
        for field in schema.fields() {
            if !event_type.fields().contains(&field.name().as_str()) {
                return Err(invalid(format!(
                    "column {} is not a field of Nexmark's {:?} events ({})",
                    field.name(),
                    event_type,
                    event_type.fields().join(", ")
                )));
            }
        }
        let event_num = options
            .get("nexmark.event.num")
            .map(|v| parse_option::<u64>("nexmark.event.num", v))
            .transpose()?;
        let splits = options
            .get("nexmark.split.num")
            .map(|v| parse_option::<u32>("nexmark.split.num", v))
            .transpose()?
            .unwrap_or(1);
        if splits == 0 {
            return Err(invalid("nexmark.split.num must be at least 1".into()));
        }
        let min_event_gap_ns = options
            .get("nexmark.min.event.gap.in.ns")
            .map(|v| parse_option::<u64>("nexmark.min.event.gap.in.ns", v))
            .transpose()?
            .unwrap_or(0);
        Ok(Self {
            schema: schema.clone(),
            event_type,
            event_num,
            splits,
            min_event_gap_ns,
        })
    }

    /// Rows per second to pace at, 0 for as fast as possible.
    pub fn rows_per_second(&self) -> u64 {
        1_000_000_000u64
            .checked_div(self.min_event_gap_ns)
            .map_or(0, |r| r.max(1))
    }

    pub fn split_reader(&self, split: u32, offset: u64) -> NexmarkSplit {
        let config = NexmarkConfig {
            base_time: BASE_TIME_MS,
            ..Default::default()
        };
        let generator = EventGenerator::new(config)
            .with_type_filter(self.event_type.event_type())
            .with_offset(split as u64 + offset * self.splits as u64)
            .with_step(self.splits as u64);
        NexmarkSplit {
            spec: self.clone(),
            generator,
            offset,
        }
    }
}

pub struct NexmarkSplit {
    spec: NexmarkSpec,
    generator: EventGenerator,
    offset: u64,
}

/// Column builders for one batch of events, in Nexmark's own types.
enum Builder {
    Int(Int64Builder),
    Text(StringBuilder),
    Time(TimestampMicrosecondBuilder),
}

impl NexmarkSplit {
    pub fn offset(&self) -> u64 {
        self.offset
    }

    pub fn next_batch(&mut self, max_rows: usize) -> Result<Option<RecordBatch>> {
        let names: Vec<&str> = self
            .spec
            .schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        let mut builders: Vec<Builder> = names
            .iter()
            .map(|n| {
                if TIME_FIELDS.contains(n) {
                    Builder::Time(TimestampMicrosecondBuilder::with_capacity(max_rows))
                } else if matches!(
                    *n,
                    "id" | "initial_bid"
                        | "reserve"
                        | "seller"
                        | "category"
                        | "auction"
                        | "bidder"
                        | "price"
                ) {
                    Builder::Int(Int64Builder::with_capacity(max_rows))
                } else {
                    Builder::Text(StringBuilder::with_capacity(max_rows, max_rows * 16))
                }
            })
            .collect();
        let mut rows = 0;
        while rows < max_rows {
            if let Some(limit) = self.spec.event_num
                && self.generator.global_offset() >= limit
            {
                break;
            }
            let Some(event) = self.generator.next() else {
                break;
            };
            for (name, builder) in names.iter().zip(builders.iter_mut()) {
                append_field(&event, name, builder);
            }
            rows += 1;
        }
        if rows == 0 {
            return Ok(None);
        }
        self.offset += rows as u64;
        let columns = builders
            .into_iter()
            .zip(self.spec.schema.fields())
            .map(|(b, field)| {
                let array: ArrayRef = match b {
                    Builder::Int(mut b) => Arc::new(b.finish()),
                    Builder::Text(mut b) => Arc::new(b.finish()),
                    Builder::Time(mut b) => Arc::new(b.finish()),
                };
                Ok(if array.data_type() == field.data_type() {
                    array
                } else {
                    cast(&array, field.data_type())?
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(RecordBatch::try_new(
            self.spec.schema.clone(),
            columns,
        )?))
    }
}

fn append_field(event: &Event, name: &str, builder: &mut Builder) {
    let int = |v: usize| Some(v as i64);
    let time = |ms: u64| Some(ms as i64 * 1000);
    match (event, builder) {
        (Event::Bid(b), Builder::Int(out)) => out.append_option(match name {
            "auction" => int(b.auction),
            "bidder" => int(b.bidder),
            "price" => int(b.price),
            _ => None,
        }),
        (Event::Bid(b), Builder::Text(out)) => out.append_value(match name {
            "channel" => b.channel.as_str(),
            "url" => b.url.as_str(),
            _ => b.extra.as_str(),
        }),
        (Event::Bid(b), Builder::Time(out)) => out.append_option(time(b.date_time)),
        (Event::Person(p), Builder::Int(out)) => out.append_option(int(p.id)),
        (Event::Person(p), Builder::Text(out)) => out.append_value(match name {
            "name" => p.name.as_str(),
            "email_address" => p.email_address.as_str(),
            "credit_card" => p.credit_card.as_str(),
            "city" => p.city.as_str(),
            "state" => p.state.as_str(),
            _ => p.extra.as_str(),
        }),
        (Event::Person(p), Builder::Time(out)) => out.append_option(time(p.date_time)),
        (Event::Auction(a), Builder::Int(out)) => out.append_option(match name {
            "id" => int(a.id),
            "initial_bid" => int(a.initial_bid),
            "reserve" => int(a.reserve),
            "seller" => int(a.seller),
            "category" => int(a.category),
            _ => None,
        }),
        (Event::Auction(a), Builder::Text(out)) => out.append_value(match name {
            "item_name" => a.item_name.as_str(),
            "description" => a.description.as_str(),
            _ => a.extra.as_str(),
        }),
        (Event::Auction(a), Builder::Time(out)) => out.append_option(time(if name == "expires" {
            a.expires
        } else {
            a.date_time
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};

    fn bids(event_num: u64, splits: u32) -> NexmarkSpec {
        let schema = Arc::new(Schema::new(vec![
            Field::new("auction", DataType::Int64, true),
            Field::new("price", DataType::Int64, true),
            Field::new(
                "date_time",
                DataType::Timestamp(TimeUnit::Microsecond, None),
                true,
            ),
        ]));
        let options = [
            ("connector", "nexmark".to_string()),
            ("nexmark.table.type", "Bid".into()),
            ("nexmark.event.num", event_num.to_string()),
            ("nexmark.split.num", splits.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        NexmarkSpec::from_options(&schema, &options).unwrap()
    }

    fn count(spec: &NexmarkSpec) -> usize {
        (0..spec.splits)
            .map(|s| {
                let mut r = spec.split_reader(s, 0);
                let mut n = 0;
                while let Some(b) = r.next_batch(1000).unwrap() {
                    n += b.num_rows();
                }
                n
            })
            .sum()
    }

    #[test]
    fn event_num_counts_all_kinds_of_events() {
        // 46 of every 50 events are bids.
        assert_eq!(count(&bids(100_000, 1)), 92_000);
        assert_eq!(count(&bids(100_000, 4)), 92_000);
    }

    #[test]
    fn resuming_from_an_offset_continues_the_same_events() {
        let spec = bids(5_000, 2);
        let mut whole = spec.split_reader(1, 0);
        let first = whole.next_batch(300).unwrap().unwrap();
        let second = whole.next_batch(300).unwrap().unwrap();
        let mut resumed = spec.split_reader(1, 300);
        assert_eq!(resumed.next_batch(300).unwrap().unwrap(), second);
        assert_ne!(first, second);
    }
}
