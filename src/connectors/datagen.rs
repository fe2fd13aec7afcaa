//! The `datagen` connector: rows made up from per-column generators, deterministic for a
//! given seed.
//!
//! Options (as in RisingWave):
//! - `fields.<col>.kind` = `sequence` (default for integers with `start`/`end`) or `random`;
//! - `fields.<col>.start`, `fields.<col>.end` for sequences (default 1 and unbounded);
//!   `fields.<col>.step` (Eddy's own, default 1): how far each row's value is from the
//!   last, a whole number, or for a timestamp a number of seconds that may be a fraction
//!   (`0.001`: a millisecond per row, as Flink's bid-shaped benchmark tables advance);
//! - `fields.<col>.min`, `fields.<col>.max`, `fields.<col>.seed` for random numbers,
//!   `fields.<col>.length` for random strings;
//! - `datagen.rows.per.second` (default 10; 0 = as fast as possible),
//!   `datagen.split.num` (default 1, the source's parallelism),
//!   `datagen.total.rows` (optional: the source ends after that many rows).
//!
//! Row `n` (counted over all splits) is a pure function of `n` and the options, so split
//! `k` of `S` makes rows `k, k + S, k + 2S, ...` and resuming from a recorded offset gives
//! exactly the rows a run without interruption would have made. A sequence that reaches
//! its `end` ends the source, as does `datagen.total.rows`.

use super::parse_option;
use crate::error::{EddyError, Result, sqlstate};
use arrow::array::{
    ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float32Array, Float64Array, Int16Array,
    Int32Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq)]
pub enum FieldKind {
    Sequence {
        start: i64,
        end: Option<i64>,
        /// Between consecutive values (seconds for timestamps).
        step: f64,
    },
    Random {
        min: f64,
        max: f64,
        seed: u64,
        length: usize,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct DatagenSpec {
    pub schema: SchemaRef,
    pub fields: Vec<FieldKind>,
    pub rows_per_second: u64,
    pub splits: u32,
    pub total_rows: Option<u64>,
}

const FIELD_OPTIONS: &[&str] = &[
    "kind", "start", "end", "step", "min", "max", "seed", "length",
];

impl DatagenSpec {
    pub fn from_options(schema: &SchemaRef, options: &BTreeMap<String, String>) -> Result<Self> {
        let invalid = |m: String| EddyError::new(sqlstate::INVALID_PARAMETER_VALUE, m);
        for key in options
            .keys()
            .filter(|k| !matches!(k.as_str(), "format" | "encode") && !k.starts_with("encode."))
        {
            let known = key == "connector"
                || key == "datagen.rows.per.second"
                || key == "datagen.split.num"
                || key == "datagen.total.rows"
                || key.strip_prefix("fields.").is_some_and(|rest| {
                    rest.rsplit_once('.').is_some_and(|(col, opt)| {
                        schema.field_with_name(col).is_ok() && FIELD_OPTIONS.contains(&opt)
                    })
                });
            if !known {
                return Err(invalid(format!(
                    "unknown option '{key}' for connector datagen"
                )));
            }
        }
        let get = |key: &str| options.get(key).map(String::as_str);
        let mut fields = Vec::with_capacity(schema.fields().len());
        for field in schema.fields() {
            let opt = |o: &str| {
                get(&format!("fields.{}.{o}", field.name()))
                    .map(|v| (format!("fields.{}.{o}", field.name()), v))
            };
            let kind = opt("kind").map(|(_, v)| v.to_ascii_lowercase());
            let numeric = field.data_type().is_numeric();
            let sequence = match kind.as_deref() {
                Some("sequence") => true,
                Some("random") => false,
                Some(other) => {
                    return Err(invalid(format!(
                        "fields.{}.kind must be 'sequence' or 'random', not '{other}'",
                        field.name()
                    )));
                }
                None => opt("start").is_some() || opt("end").is_some(),
            };
            if sequence {
                if !(numeric
                    || matches!(
                        field.data_type(),
                        DataType::Utf8 | DataType::Timestamp(..) | DataType::Date32
                    ))
                {
                    return Err(invalid(format!(
                        "column {} cannot be a sequence",
                        field.name()
                    )));
                }
                let start = opt("start")
                    .map(|(k, v)| parse_option::<i64>(&k, v))
                    .transpose()?
                    .unwrap_or(1);
                let end = opt("end")
                    .map(|(k, v)| parse_option::<i64>(&k, v))
                    .transpose()?;
                if end.is_some_and(|e| e < start) {
                    return Err(invalid(format!(
                        "fields.{}.end is before its start",
                        field.name()
                    )));
                }
                let step = opt("step")
                    .map(|(k, v)| parse_option::<f64>(&k, v))
                    .transpose()?
                    .unwrap_or(1.0);
                let timestamp = matches!(field.data_type(), DataType::Timestamp(..));
                if !(step > 0.0 && step.is_finite() && (timestamp || step.fract() == 0.0)) {
                    return Err(invalid(format!(
                        "fields.{}.step must be a positive {}",
                        field.name(),
                        if timestamp {
                            "number of seconds"
                        } else {
                            "whole number"
                        }
                    )));
                }
                fields.push(FieldKind::Sequence { start, end, step });
            } else {
                let min = opt("min")
                    .map(|(k, v)| parse_option::<f64>(&k, v))
                    .transpose()?
                    .unwrap_or(0.0);
                let max = opt("max")
                    .map(|(k, v)| parse_option::<f64>(&k, v))
                    .transpose()?
                    .unwrap_or(if numeric { 1000.0 } else { 0.0 });
                if max < min {
                    return Err(invalid(format!(
                        "fields.{}.max is below its min",
                        field.name()
                    )));
                }
                let seed = opt("seed")
                    .map(|(k, v)| parse_option::<u64>(&k, v))
                    .transpose()?
                    .unwrap_or(0);
                let length = opt("length")
                    .map(|(k, v)| parse_option::<usize>(&k, v))
                    .transpose()?
                    .unwrap_or(10);
                if matches!(
                    field.data_type(),
                    DataType::Binary | DataType::Interval(_) | DataType::Time64(_)
                ) {
                    return Err(EddyError::not_supported(format!(
                        "datagen cannot generate column {} of type {}",
                        field.name(),
                        field.data_type()
                    )));
                }
                fields.push(FieldKind::Random {
                    min,
                    max,
                    seed,
                    length,
                });
            }
        }
        let rows_per_second = get("datagen.rows.per.second")
            .map(|v| parse_option::<u64>("datagen.rows.per.second", v))
            .transpose()?
            .unwrap_or(10);
        let splits = get("datagen.split.num")
            .map(|v| parse_option::<u32>("datagen.split.num", v))
            .transpose()?
            .unwrap_or(1);
        if splits == 0 {
            return Err(invalid("datagen.split.num must be at least 1".into()));
        }
        let total_rows = get("datagen.total.rows")
            .map(|v| parse_option::<u64>("datagen.total.rows", v))
            .transpose()?;
        Ok(Self {
            schema: schema.clone(),
            fields,
            rows_per_second,
            splits,
            total_rows,
        })
    }

    /// How many rows the source makes in all, if it ends: the total row option, or the
    /// shortest bounded sequence.
    pub fn row_limit(&self) -> Option<u64> {
        let sequences = self.fields.iter().filter_map(|f| match f {
            FieldKind::Sequence {
                start,
                end: Some(end),
                step,
            } => Some(((end - start) as f64 / step).floor() as u64 + 1),
            _ => None,
        });
        sequences.chain(self.total_rows).min()
    }

    /// A generator for split `split` starting after `offset` rows of that split.
    pub fn split_reader(&self, split: u32, offset: u64) -> DatagenSplit {
        DatagenSplit {
            spec: self.clone(),
            split,
            offset,
        }
    }
}

/// One split of a datagen source; `offset` is its position (rows already made).
#[derive(Debug, Clone)]
pub struct DatagenSplit {
    spec: DatagenSpec,
    split: u32,
    offset: u64,
}

/// splitmix64: a fast, well-mixed function of its input, so row `n` is independent of
/// how rows were batched.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A uniform number in [0, 1) for (seed, column, row).
fn unit(seed: u64, column: usize, row: u64) -> f64 {
    let h = mix(seed ^ mix(column as u64 + 1) ^ mix(row.wrapping_mul(0x2545_f491_4f6c_dd1d)));
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// 2024-01-01 00:00:00 UTC in microseconds: the base of generated timestamps.
const TIMESTAMP_BASE_MICROS: i64 = 1_704_067_200_000_000;

impl DatagenSplit {
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The next batch of at most `max_rows` rows, or `None` when the split has ended.
    pub fn next_batch(&mut self, max_rows: usize) -> Result<Option<RecordBatch>> {
        let splits = self.spec.splits as u64;
        // Global row numbers of this split: split + splits * i.
        let first_local = self.offset;
        let mut count = max_rows as u64;
        if let Some(limit) = self.spec.row_limit() {
            // Rows of this split below the limit: ceil((limit - split) / splits).
            let mine = limit.saturating_sub(self.split as u64).div_ceil(splits);
            count = count.min(mine.saturating_sub(first_local));
        }
        if count == 0 {
            return Ok(None);
        }
        let rows: Vec<u64> = (first_local..first_local + count)
            .map(|i| self.split as u64 + splits * i)
            .collect();
        let columns = self
            .spec
            .schema
            .fields()
            .iter()
            .zip(&self.spec.fields)
            .enumerate()
            .map(|(c, (field, kind))| generate(field.data_type(), kind, c, &rows))
            .collect::<Result<Vec<_>>>()?;
        self.offset += count;
        Ok(Some(RecordBatch::try_new(
            self.spec.schema.clone(),
            columns,
        )?))
    }
}

fn generate(dt: &DataType, kind: &FieldKind, column: usize, rows: &[u64]) -> Result<ArrayRef> {
    // Every value as an f64 first (integers exact up to 2^53), then the column's type.
    let numbers: Vec<f64> = match kind {
        FieldKind::Sequence { start, step, .. } => rows
            .iter()
            .map(|n| *start as f64 + *n as f64 * step)
            .collect(),
        FieldKind::Random { min, max, seed, .. } => rows
            .iter()
            .map(|n| {
                let u = unit(*seed, column, *n);
                if dt.is_integer() || matches!(dt, DataType::Timestamp(..) | DataType::Date32) {
                    (min + (u * (max - min + 1.0)).floor()).min(*max)
                } else {
                    min + u * (max - min)
                }
            })
            .collect(),
    };
    Ok(match dt {
        DataType::Int16 => Arc::new(Int16Array::from_iter_values(
            numbers.iter().map(|v| *v as i16),
        )),
        DataType::Int32 => Arc::new(Int32Array::from_iter_values(
            numbers.iter().map(|v| *v as i32),
        )),
        DataType::Int64 => Arc::new(Int64Array::from_iter_values(
            numbers.iter().map(|v| *v as i64),
        )),
        DataType::Float32 => Arc::new(Float32Array::from_iter_values(
            numbers.iter().map(|v| *v as f32),
        )),
        DataType::Float64 => Arc::new(Float64Array::from_iter_values(numbers.iter().copied())),
        DataType::Decimal128(p, s) => {
            let factor = 10f64.powi(*s as i32);
            Arc::new(
                Decimal128Array::from_iter_values(
                    numbers.iter().map(|v| (v * factor).round() as i128),
                )
                .with_precision_and_scale(*p, *s)?,
            )
        }
        DataType::Boolean => Arc::new(BooleanArray::from_iter(
            numbers.iter().map(|v| Some(*v as i64 % 2 == 1)),
        )),
        DataType::Utf8 => match kind {
            FieldKind::Sequence { .. } => Arc::new(StringArray::from_iter_values(
                numbers.iter().map(|v| (*v as i64).to_string()),
            )),
            FieldKind::Random { seed, length, .. } => {
                Arc::new(StringArray::from_iter_values(rows.iter().map(|n| {
                    (0..*length)
                        .map(|k| {
                            let u = unit(seed.wrapping_add(k as u64 + 1), column, *n);
                            (b'a' + (u * 26.0) as u8) as char
                        })
                        .collect::<String>()
                })))
            }
        },
        DataType::Timestamp(TimeUnit::Microsecond, tz) => {
            // Sequences count seconds from the base (fractions with a fractional step);
            // random values are whole seconds in [min, max].
            let micros = numbers
                .iter()
                .map(|v| TIMESTAMP_BASE_MICROS + (*v * 1e6).round() as i64);
            Arc::new(
                TimestampMicrosecondArray::from_iter_values(micros).with_timezone_opt(tz.clone()),
            )
        }
        DataType::Date32 => Arc::new(Date32Array::from_iter_values(
            numbers.iter().map(|v| 19_723 + *v as i32),
        )),
        other => {
            return Err(EddyError::not_supported(format!(
                "datagen cannot generate type {other}"
            )));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::AsArray;
    use arrow::datatypes::{Field, Int64Type, Schema};

    fn spec(options: &[(&str, &str)]) -> Result<DatagenSpec> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("v", DataType::Int32, true),
            Field::new("name", DataType::Utf8, true),
        ]));
        let options = options
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        DatagenSpec::from_options(&schema, &options)
    }

    fn collect(split: &mut DatagenSplit, batch: usize) -> Vec<RecordBatch> {
        let mut out = Vec::new();
        while let Some(b) = split.next_batch(batch).unwrap() {
            out.push(b);
        }
        out
    }

    #[test]
    fn sequences_end_the_source_and_splits_partition_rows() {
        let spec = spec(&[
            ("connector", "datagen"),
            ("fields.id.kind", "sequence"),
            ("fields.id.start", "1"),
            ("fields.id.end", "10"),
            ("datagen.split.num", "3"),
        ])
        .unwrap();
        assert_eq!(spec.row_limit(), Some(10));
        let mut ids = Vec::new();
        for s in 0..3 {
            for b in collect(&mut spec.split_reader(s, 0), 2) {
                ids.extend(
                    b.column(0)
                        .as_primitive::<Int64Type>()
                        .values()
                        .iter()
                        .copied(),
                );
            }
        }
        ids.sort();
        assert_eq!(ids, (1..=10).collect::<Vec<i64>>());
    }

    #[test]
    fn same_seed_same_rows_whatever_the_batching_or_resume_point() {
        let options = [
            ("connector", "datagen"),
            ("fields.v.min", "1"),
            ("fields.v.max", "6"),
            ("fields.v.seed", "42"),
            ("fields.name.length", "4"),
            ("datagen.total.rows", "50"),
        ];
        let spec = spec(&options).unwrap();
        let whole =
            arrow::compute::concat_batches(&spec.schema, &collect(&mut spec.split_reader(0, 0), 7))
                .unwrap();
        assert_eq!(whole.num_rows(), 50);
        let mut resumed = spec.split_reader(0, 20);
        let tail =
            arrow::compute::concat_batches(&spec.schema, &collect(&mut resumed, 13)).unwrap();
        assert_eq!(tail, whole.slice(20, 30));
        let values = whole
            .column(1)
            .as_primitive::<arrow::datatypes::Int32Type>();
        assert!(values.values().iter().all(|v| (1..=6).contains(v)));
        let distinct: std::collections::HashSet<_> = values.values().iter().collect();
        assert!(distinct.len() > 3, "random values vary");
        let other_seed = crate::connectors::datagen::tests::spec(&[
            ("connector", "datagen"),
            ("fields.v.min", "1"),
            ("fields.v.max", "6"),
            ("fields.v.seed", "43"),
            ("datagen.total.rows", "50"),
        ])
        .unwrap();
        let other = arrow::compute::concat_batches(
            &other_seed.schema,
            &collect(&mut other_seed.split_reader(0, 0), 50),
        )
        .unwrap();
        assert_ne!(other.column(1), whole.column(1));
    }

    #[test]
    fn bad_options_are_errors() {
        assert!(spec(&[("connector", "datagen"), ("fields.nosuch.kind", "random")]).is_err());
        assert!(spec(&[("connector", "datagen"), ("fields.v.kind", "zigzag")]).is_err());
        assert!(spec(&[("connector", "datagen"), ("fields.v.min", "abc")]).is_err());
        assert!(
            spec(&[
                ("connector", "datagen"),
                ("fields.id.start", "5"),
                ("fields.id.end", "1")
            ])
            .is_err()
        );
        assert!(spec(&[("connector", "datagen"), ("datagen.rows.per.sec", "5")]).is_err());
    }
}
