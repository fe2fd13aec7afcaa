//! Arrow → PostgreSQL: the type each Arrow column is reported as, and its values in
//! PostgreSQL's text and binary formats.
//!
//! Text output follows what PostgreSQL 15 prints with its default settings
//! (`DateStyle = ISO`, `IntervalStyle = postgres`, `extra_float_digits = 1`), so clients
//! that parse text (psql, psycopg2) see exactly what a PostgreSQL server would send.

use crate::catalog::types::{
    PG_TYPE_METADATA, display_decimal, display_decimal256, is_unconstrained_numeric,
};
use crate::error::{EddyError, Result};
pub use crate::pg_text::{
    format_date, format_decimal, format_float, format_interval, format_timestamp,
    format_timestamp_in_zone,
};
use crate::pg_text::{normalize, write_text};
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::*;
use bytes::{BufMut, BytesMut};
use pgwire::api::Type;
use pgwire::api::portal::Format;
use pgwire::api::results::{FieldFormat, FieldInfo};
use pgwire::messages::data::DataRow;
use std::sync::Arc;

/// Microseconds between 1970-01-01 (Unix) and 2000-01-01 (PostgreSQL's epoch).
const PG_EPOCH_OFFSET_MICROS: i64 = 946_684_800_000_000;
/// Days between the two epochs.
const PG_EPOCH_OFFSET_DAYS: i32 = 10_957;

/// The PostgreSQL type an Arrow field is reported as.
pub fn pg_type(field: &Field) -> Type {
    if field.metadata().get(PG_TYPE_METADATA).map(String::as_str) == Some("jsonb")
        && field.data_type() == &DataType::Utf8
    {
        return Type::JSONB;
    }
    pg_type_of(field.data_type())
}

fn pg_type_of(dt: &DataType) -> Type {
    match dt {
        DataType::Boolean => Type::BOOL,
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => Type::INT2,
        DataType::Int32 | DataType::UInt16 => Type::INT4,
        DataType::Int64 | DataType::UInt32 => Type::INT8,
        DataType::UInt64 | DataType::Decimal32(..) | DataType::Decimal64(..) => Type::NUMERIC,
        DataType::Decimal128(..) | DataType::Decimal256(..) => Type::NUMERIC,
        DataType::Float16 | DataType::Float32 => Type::FLOAT4,
        DataType::Float64 => Type::FLOAT8,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Type::TEXT,
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => Type::BYTEA,
        DataType::Date32 | DataType::Date64 => Type::DATE,
        DataType::Time32(_) | DataType::Time64(_) => Type::TIME,
        DataType::Timestamp(_, None) => Type::TIMESTAMP,
        DataType::Timestamp(_, Some(_)) => Type::TIMESTAMPTZ,
        // A statement is described before the planner makes timestamp differences
        // intervals (`session::timestamp_difference`): the same type either way.
        DataType::Interval(_) | DataType::Duration(_) => Type::INTERVAL,
        DataType::Dictionary(_, v) => pg_type_of(v),
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            match pg_type_of(f.data_type()) {
                Type::BOOL => Type::BOOL_ARRAY,
                Type::INT2 => Type::INT2_ARRAY,
                Type::INT4 => Type::INT4_ARRAY,
                Type::INT8 => Type::INT8_ARRAY,
                Type::FLOAT4 => Type::FLOAT4_ARRAY,
                Type::FLOAT8 => Type::FLOAT8_ARRAY,
                Type::NUMERIC => Type::NUMERIC_ARRAY,
                Type::DATE => Type::DATE_ARRAY,
                Type::TIMESTAMP => Type::TIMESTAMP_ARRAY,
                Type::TIMESTAMPTZ => Type::TIMESTAMPTZ_ARRAY,
                Type::BYTEA => Type::BYTEA_ARRAY,
                _ => Type::TEXT_ARRAY,
            }
        }
        _ => Type::TEXT,
    }
}

/// `pg_type.typlen` of the types Eddy reports.
fn type_size(t: &Type) -> i16 {
    match *t {
        Type::BOOL => 1,
        Type::INT2 => 2,
        Type::INT4 | Type::FLOAT4 | Type::DATE => 4,
        Type::INT8 | Type::FLOAT8 | Type::TIMESTAMP | Type::TIMESTAMPTZ | Type::TIME => 8,
        Type::INTERVAL => 16,
        _ => -1,
    }
}

/// Row description fields for a result schema in the requested formats.
pub fn field_infos(schema: &Schema, format: &Format) -> Vec<FieldInfo> {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let ty = pg_type(f);
            let size = type_size(&ty);
            let modifier = match f.data_type() {
                // Unconstrained `numeric` has no modifier in PostgreSQL.
                DataType::Decimal128(p, s) if is_unconstrained_numeric(*p, *s) => -1,
                DataType::Decimal256(p, _) if *p > 38 => -1,
                DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => {
                    ((*p as i32) << 16 | (*s as i32 & 0xffff)) + 4
                }
                _ => -1,
            };
            FieldInfo::new(f.name().clone(), None, None, ty, format.format_for(i))
                .with_type_size(size)
                .with_type_modifier(modifier)
        })
        .collect()
}

/// Encodes every row of the batches as `DataRow` messages.
pub fn encode_rows(batches: &[RecordBatch], fields: &[FieldInfo]) -> Result<Vec<DataRow>> {
    let total: usize = batches.iter().map(|b| b.num_rows()).sum();
    let mut rows = Vec::with_capacity(total);
    let mut buf = BytesMut::with_capacity(256);
    for batch in batches {
        let columns: Vec<ArrayRef> = batch
            .columns()
            .iter()
            .map(normalize)
            .collect::<Result<_>>()?;
        let binary: Vec<bool> = fields
            .iter()
            .map(|f| f.format() == FieldFormat::Binary)
            .collect();
        let jsonb: Vec<bool> = fields
            .iter()
            .map(|f| *f.datatype() == Type::JSONB)
            .collect();
        // Logical nulls: a `NullArray` (`SELECT NULL`) has no validity buffer.
        let nulls: Vec<_> = columns.iter().map(|c| c.logical_nulls()).collect();
        for row in 0..batch.num_rows() {
            for (c, column) in columns.iter().enumerate() {
                let len_at = buf.len();
                buf.put_i32(-1);
                if nulls[c].as_ref().is_some_and(|n| n.is_null(row)) {
                    continue;
                }
                if binary[c] {
                    if jsonb[c] {
                        buf.put_u8(1);
                    }
                    write_binary(column, row, &mut buf)?;
                } else {
                    write_text(column, row, &mut buf, false)?;
                }
                let len = (buf.len() - len_at - 4) as i32;
                buf[len_at..len_at + 4].copy_from_slice(&len.to_be_bytes());
            }
            rows.push(DataRow::new(buf.split(), columns.len() as i16));
        }
    }
    Ok(rows)
}

// ---------------------------------------------------------------------------------------
// Binary format

fn write_binary(array: &ArrayRef, row: usize, buf: &mut BytesMut) -> Result<()> {
    match array.data_type() {
        DataType::Boolean => buf.put_u8(array.as_boolean().value(row) as u8),
        DataType::Int8 => buf.put_i16(array.as_primitive::<Int8Type>().value(row) as i16),
        DataType::Int16 => buf.put_i16(array.as_primitive::<Int16Type>().value(row)),
        DataType::Int32 => buf.put_i32(array.as_primitive::<Int32Type>().value(row)),
        DataType::Int64 => buf.put_i64(array.as_primitive::<Int64Type>().value(row)),
        DataType::UInt8 => buf.put_i16(array.as_primitive::<UInt8Type>().value(row) as i16),
        DataType::UInt16 => buf.put_i32(array.as_primitive::<UInt16Type>().value(row) as i32),
        DataType::UInt32 => buf.put_i64(array.as_primitive::<UInt32Type>().value(row) as i64),
        DataType::UInt64 => write_numeric(
            array.as_primitive::<UInt64Type>().value(row) as i128,
            0,
            buf,
        ),
        DataType::Float32 => buf.put_f32(array.as_primitive::<Float32Type>().value(row)),
        DataType::Float64 => buf.put_f64(array.as_primitive::<Float64Type>().value(row)),
        DataType::Decimal128(precision, scale) => {
            let value = array.as_primitive::<Decimal128Type>().value(row);
            let (value, scale) = display_decimal(value, *precision, *scale);
            write_numeric(value, scale, buf)
        }
        DataType::Decimal256(precision, scale) => {
            let value = array.as_primitive::<Decimal256Type>().value(row);
            let (value, scale) =
                display_decimal256(value, *precision, *scale).ok_or_else(|| {
                    EddyError::not_supported("a numeric of more than 38 digits in binary format")
                })?;
            write_numeric(value, scale, buf)
        }
        DataType::Utf8 => buf.put_slice(array.as_string::<i32>().value(row).as_bytes()),
        DataType::Binary => buf.put_slice(array.as_binary::<i32>().value(row)),
        DataType::Date32 => {
            buf.put_i32(array.as_primitive::<Date32Type>().value(row) - PG_EPOCH_OFFSET_DAYS)
        }
        DataType::Time64(TimeUnit::Microsecond) => {
            buf.put_i64(array.as_primitive::<Time64MicrosecondType>().value(row))
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => buf.put_i64(
            array.as_primitive::<TimestampMicrosecondType>().value(row) - PG_EPOCH_OFFSET_MICROS,
        ),
        DataType::Interval(IntervalUnit::MonthDayNano) => {
            let v = array.as_primitive::<IntervalMonthDayNanoType>().value(row);
            buf.put_i64(v.nanoseconds / 1000);
            buf.put_i32(v.days);
            buf.put_i32(v.months);
        }
        DataType::List(field) => {
            let values = normalize(&array.as_list::<i32>().value(row))?;
            let element_type = pg_type_of(field.data_type());
            // Logical nulls: an array of NULLs alone (`ARRAY[NULL]`) has no null buffer.
            let nulls = values.logical_nulls();
            let is_null = |i: usize| nulls.as_ref().is_some_and(|n| n.is_null(i));
            buf.put_i32(1); // dimensions
            buf.put_i32((0..values.len()).any(is_null) as i32);
            buf.put_u32(element_type.oid());
            buf.put_i32(values.len() as i32);
            buf.put_i32(1); // lower bound
            for i in 0..values.len() {
                if is_null(i) {
                    buf.put_i32(-1);
                    continue;
                }
                let at = buf.len();
                buf.put_i32(0);
                if element_type == Type::TEXT {
                    write_text(&values, i, buf, false)?;
                } else {
                    write_binary(&values, i, buf)?;
                }
                let len = (buf.len() - at - 4) as i32;
                buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
            }
        }
        // Types without a binary writer are reported as text, whose binary form is UTF-8.
        _ => write_text(array, row, buf, false)?,
    }
    Ok(())
}

/// PostgreSQL's binary `numeric`: base-10000 digits with a weight, a sign and a display
/// scale.
pub fn write_numeric(value: i128, scale: i8, buf: &mut BytesMut) {
    let scale = scale.max(0) as usize;
    let negative = value < 0;
    let digits = value.unsigned_abs().to_string();
    let digits = if digits.len() <= scale {
        format!("{}{}", "0".repeat(scale + 1 - digits.len()), digits)
    } else {
        digits
    };
    let (int_part, frac_part) = digits.split_at(digits.len() - scale);
    // Pad the integer part on the left and the fraction on the right to whole groups of 4.
    let int_pad = (4 - int_part.len() % 4) % 4;
    let int_part = format!("{}{}", "0".repeat(int_pad), int_part);
    let frac_pad = (4 - frac_part.len() % 4) % 4;
    let frac_part = format!("{}{}", frac_part, "0".repeat(frac_pad));
    let group = |s: &str| -> Vec<i16> {
        s.as_bytes()
            .chunks(4)
            .map(|c| std::str::from_utf8(c).unwrap().parse::<i16>().unwrap())
            .collect()
    };
    let mut groups = group(&int_part);
    let int_groups = groups.len() as i16;
    groups.extend(group(&frac_part));
    let mut weight = int_groups - 1;
    // Strip leading zero groups (each lowers the weight) and trailing zero groups.
    let leading = groups.iter().take_while(|g| **g == 0).count();
    groups.drain(..leading);
    weight -= leading as i16;
    while groups.last() == Some(&0) {
        groups.pop();
    }
    if groups.is_empty() {
        weight = 0;
    }
    buf.put_i16(groups.len() as i16);
    buf.put_i16(weight);
    buf.put_u16(if negative && !groups.is_empty() {
        0x4000
    } else {
        0
    });
    buf.put_i16(scale as i16);
    for g in groups {
        buf.put_i16(g);
    }
}

/// Arrow schema of rows → shared field list for pgwire.
pub fn shared_fields(schema: &Schema, format: &Format) -> Arc<Vec<FieldInfo>> {
    Arc::new(field_infos(schema, format))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_like_postgres() {
        assert_eq!(format_float(1.5, 15, false), "1.5");
        assert_eq!(format_float(100.0, 15, false), "100");
        assert_eq!(format_float(1e20, 15, false), "1e+20");
        assert_eq!(format_float(1e15, 15, false), "1e+15");
        assert_eq!(
            format_float(123456789012345.0, 15, false),
            "123456789012345"
        );
        assert_eq!(format_float(0.0001, 15, false), "0.0001");
        assert_eq!(format_float(0.00001, 15, false), "1e-05");
        assert_eq!(format_float(-2.25, 15, false), "-2.25");
        assert_eq!(format_float(0.1 + 0.2, 15, false), "0.30000000000000004");
        assert_eq!(format_float(f64::NAN, 15, false), "NaN");
        assert_eq!(format_float(1e6, 6, true), "1e+06");
        assert_eq!(format_float(100000.0, 6, true), "100000");
        assert_eq!(format_float(0.1f32 as f64, 6, true), "0.1");
    }

    #[test]
    fn decimals_keep_their_scale() {
        assert_eq!(format_decimal(12345, 2), "123.45");
        assert_eq!(format_decimal(-5, 2), "-0.05");
        assert_eq!(format_decimal(7, 0), "7");
        assert_eq!(format_decimal(100, 2), "1.00");
    }

    #[test]
    fn timestamps_omit_zero_fractions() {
        assert_eq!(format_timestamp(0, false), "1970-01-01 00:00:00");
        assert_eq!(format_timestamp(500_000, false), "1970-01-01 00:00:00.5");
        assert_eq!(
            format_timestamp(1_000_001, true),
            "1970-01-01 00:00:01.000001+00:00"
        );
    }

    #[test]
    fn intervals_use_postgres_style() {
        assert_eq!(format_interval(0, 0, 0), "00:00:00");
        assert_eq!(
            format_interval(14, 3, 3_600_000_000_000),
            "1 year 2 mons 3 days 01:00:00"
        );
        assert_eq!(format_interval(0, 1, 0), "1 day");
        assert_eq!(format_interval(0, 0, -1_500_000_000), "-00:00:01.5");
    }

    #[test]
    fn numeric_binary_layout() {
        // 123.45 → digits [123, 4500], weight 0, dscale 2.
        let mut buf = BytesMut::new();
        write_numeric(12345, 2, &mut buf);
        assert_eq!(
            buf.as_ref(),
            &[0, 2, 0, 0, 0, 0, 0, 2, 0, 123, 0x11, 0x94][..]
        );
        // -0.05 → digits [500], weight -1, negative, dscale 2.
        let mut buf = BytesMut::new();
        write_numeric(-5, 2, &mut buf);
        assert_eq!(
            buf.as_ref(),
            &[0, 1, 0xff, 0xff, 0x40, 0, 0, 2, 0x01, 0xf4][..]
        );
    }
}
