//! PostgreSQL → Arrow for bound parameters: each `$n` arrives as text or binary bytes of
//! a PostgreSQL type and becomes a DataFusion `ScalarValue` of the type the plan expects.

use crate::error::{EddyError, Result, sqlstate};
use arrow::datatypes::{DataType, IntervalMonthDayNano};
use bytes::Bytes;
use datafusion::common::ScalarValue;
use pgwire::api::Type;

const PG_EPOCH_OFFSET_MICROS: i64 = 946_684_800_000_000;
const PG_EPOCH_OFFSET_DAYS: i32 = 10_957;

/// The PostgreSQL type to announce for a parameter whose Arrow type the planner inferred.
pub fn pg_type_for_param(dt: Option<&DataType>) -> Type {
    match dt {
        None => Type::UNKNOWN,
        Some(dt) => {
            crate::server::encode::pg_type(&arrow::datatypes::Field::new("", dt.clone(), true))
        }
    }
}

/// Decodes one parameter. `pg_type` is what the client declared (or what Eddy announced
/// when the client left it open); `target` is the type the plan wants.
pub fn decode_param(
    value: Option<&Bytes>,
    binary: bool,
    pg_type: &Type,
    target: Option<&DataType>,
) -> Result<ScalarValue> {
    let Some(bytes) = value else {
        return Ok(match target {
            Some(t) => ScalarValue::try_from(t).unwrap_or(ScalarValue::Null),
            None => ScalarValue::Null,
        });
    };
    let scalar = if binary {
        decode_binary(bytes, pg_type)?
    } else {
        let text = std::str::from_utf8(bytes)
            .map_err(|_| EddyError::new("22021", "invalid byte sequence for encoding \"UTF8\""))?;
        ScalarValue::Utf8(Some(text.to_string()))
    };
    match target {
        Some(t) if scalar.data_type() != *t => cast_param(scalar, t),
        _ => Ok(scalar),
    }
}

fn cast_param(scalar: ScalarValue, target: &DataType) -> Result<ScalarValue> {
    let shown = scalar.to_string();
    scalar.cast_to(target).map_err(|_| {
        EddyError::new(
            sqlstate::INVALID_TEXT_REPRESENTATION,
            format!("invalid input syntax for type {target}: \"{shown}\""),
        )
    })
}

fn need(bytes: &[u8], n: usize, ty: &Type) -> Result<()> {
    if bytes.len() != n {
        return Err(EddyError::new(
            sqlstate::PROTOCOL_VIOLATION,
            format!(
                "incorrect binary data format in bind parameter: {} bytes for type {}",
                bytes.len(),
                ty.name()
            ),
        ));
    }
    Ok(())
}

fn decode_binary(b: &[u8], ty: &Type) -> Result<ScalarValue> {
    Ok(match *ty {
        Type::BOOL => {
            need(b, 1, ty)?;
            ScalarValue::Boolean(Some(b[0] != 0))
        }
        Type::INT2 => {
            need(b, 2, ty)?;
            ScalarValue::Int16(Some(i16::from_be_bytes([b[0], b[1]])))
        }
        Type::INT4 => {
            need(b, 4, ty)?;
            ScalarValue::Int32(Some(i32::from_be_bytes(b.try_into().unwrap())))
        }
        Type::INT8 => {
            need(b, 8, ty)?;
            ScalarValue::Int64(Some(i64::from_be_bytes(b.try_into().unwrap())))
        }
        Type::FLOAT4 => {
            need(b, 4, ty)?;
            ScalarValue::Float32(Some(f32::from_be_bytes(b.try_into().unwrap())))
        }
        Type::FLOAT8 => {
            need(b, 8, ty)?;
            ScalarValue::Float64(Some(f64::from_be_bytes(b.try_into().unwrap())))
        }
        Type::DATE => {
            need(b, 4, ty)?;
            ScalarValue::Date32(Some(
                i32::from_be_bytes(b.try_into().unwrap()) + PG_EPOCH_OFFSET_DAYS,
            ))
        }
        Type::TIMESTAMP | Type::TIMESTAMPTZ => {
            need(b, 8, ty)?;
            let micros = i64::from_be_bytes(b.try_into().unwrap()) + PG_EPOCH_OFFSET_MICROS;
            let tz = (*ty == Type::TIMESTAMPTZ).then(|| "+00:00".into());
            ScalarValue::TimestampMicrosecond(Some(micros), tz)
        }
        Type::TIME => {
            need(b, 8, ty)?;
            ScalarValue::Time64Microsecond(Some(i64::from_be_bytes(b.try_into().unwrap())))
        }
        Type::INTERVAL => {
            need(b, 16, ty)?;
            let micros = i64::from_be_bytes(b[0..8].try_into().unwrap());
            let days = i32::from_be_bytes(b[8..12].try_into().unwrap());
            let months = i32::from_be_bytes(b[12..16].try_into().unwrap());
            ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano::new(
                months,
                days,
                micros * 1000,
            )))
        }
        Type::NUMERIC => decode_numeric(b)?,
        Type::BYTEA => ScalarValue::Binary(Some(b.to_vec())),
        Type::JSONB => {
            let text = b.get(1..).unwrap_or_default();
            ScalarValue::Utf8(Some(String::from_utf8_lossy(text).into_owned()))
        }
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN | Type::JSON => {
            ScalarValue::Utf8(Some(String::from_utf8(b.to_vec()).map_err(|_| {
                EddyError::new("22021", "invalid byte sequence for encoding \"UTF8\"")
            })?))
        }
        _ => {
            return Err(EddyError::not_supported(format!(
                "binary parameters of type {} are not supported; send them as text",
                ty.name()
            )));
        }
    })
}

/// PostgreSQL binary numeric → Decimal128 with the value's display scale.
fn decode_numeric(b: &[u8]) -> Result<ScalarValue> {
    let bad = || {
        EddyError::new(
            sqlstate::PROTOCOL_VIOLATION,
            "invalid binary numeric parameter",
        )
    };
    if b.len() < 8 {
        return Err(bad());
    }
    let ndigits = i16::from_be_bytes([b[0], b[1]]) as usize;
    let weight = i16::from_be_bytes([b[2], b[3]]) as i32;
    let sign = u16::from_be_bytes([b[4], b[5]]);
    let dscale = i16::from_be_bytes([b[6], b[7]]) as i32;
    if b.len() != 8 + 2 * ndigits || sign == 0xC000 {
        return Err(if sign == 0xC000 {
            EddyError::not_supported("numeric NaN is not supported")
        } else {
            bad()
        });
    }
    // value = sum(digit_i * 10000^(weight - i)); scale it to dscale decimal places.
    let mut value: i128 = 0;
    let mut exp10: i32 = 0; // value so far is `value * 10^exp10`
    for i in 0..ndigits {
        let d = i16::from_be_bytes([b[8 + 2 * i], b[9 + 2 * i]]) as i128;
        value = value.checked_mul(10_000).ok_or_else(bad)? + d;
        exp10 = 4 * (weight - i as i32);
    }
    // Rescale from 10^exp10 units to 10^-dscale units.
    let shift = exp10 + dscale;
    if shift >= 0 {
        for _ in 0..shift {
            value = value.checked_mul(10).ok_or_else(bad)?;
        }
    } else {
        for _ in 0..(-shift) {
            value /= 10;
        }
    }
    if sign == 0x4000 {
        value = -value;
    }
    let scale = dscale.clamp(0, 38) as i8;
    Ok(ScalarValue::Decimal128(Some(value), 38, scale))
}
