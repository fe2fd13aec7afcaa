//! Exact arithmetic for `sum` and `avg` over integers, decimals, durations and
//! intervals: the per-group state is an `i128` (the raw value of a decimal at its input
//! scale, so `19.50` is kept as `1950`), and results are built in the type DataFusion's
//! batch aggregate returns, with its scale and its overflow rules. Floats are summed as
//! `f64` elsewhere; nothing here goes through a float.

use crate::error::{EddyError, Result, sqlstate};
use arrow::array::{
    Array, ArrayRef, AsArray, Decimal128Array, Int64Array, IntervalMonthDayNanoArray, UInt64Array,
};
use arrow::compute::cast;
use arrow::datatypes::{
    DataType, Decimal128Type, DecimalType, Int64Type, IntervalMonthDayNano,
    IntervalMonthDayNanoType, IntervalUnit,
};
use std::sync::Arc;

/// Whether `sum`/`avg` of this (coerced) argument type keeps an exact `i128` state.
pub(super) fn is_exact(arg_type: &DataType) -> bool {
    arg_type.is_integer() || matches!(arg_type, DataType::Decimal128(..) | DataType::Duration(_))
}

/// An input column read as `i128` values.
pub(super) enum ExactColumn {
    I64(Int64Array),
    I128(Decimal128Array),
}

impl ExactColumn {
    pub(super) fn of(a: &ArrayRef) -> Result<Self> {
        Ok(match a.data_type() {
            DataType::Decimal128(..) => {
                ExactColumn::I128(a.as_primitive::<Decimal128Type>().clone())
            }
            // u64 values above i64::MAX fit an i128 but not an i64.
            DataType::UInt64 => ExactColumn::I128(
                cast(a, &DataType::Decimal128(38, 0))?
                    .as_primitive::<Decimal128Type>()
                    .clone(),
            ),
            _ => ExactColumn::I64(
                cast(a, &DataType::Int64)?
                    .as_primitive::<Int64Type>()
                    .clone(),
            ),
        })
    }

    #[inline]
    pub(super) fn get(&self, i: usize) -> Option<i128> {
        match self {
            ExactColumn::I64(a) => a.is_valid(i).then(|| a.value(i) as i128),
            ExactColumn::I128(a) => a.is_valid(i).then(|| a.value(i)),
        }
    }
}

fn out_of_range(what: &str) -> EddyError {
    EddyError::new(
        sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
        format!("{what} out of range"),
    )
}

pub(super) fn numeric_overflow() -> EddyError {
    EddyError::new(
        sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
        "numeric field overflow",
    )
}

fn decimal_array(values: Vec<Option<i128>>, precision: u8, scale: i8) -> Result<ArrayRef> {
    for v in values.iter().flatten() {
        Decimal128Type::validate_decimal_precision(*v, precision, scale)
            .map_err(|_| numeric_overflow())?;
    }
    Ok(Arc::new(
        Decimal128Array::from(values).with_precision_and_scale(precision, scale)?,
    ))
}

fn i64_values(values: Vec<Option<i128>>, what: &str) -> Result<Int64Array> {
    values
        .into_iter()
        .map(|v| {
            v.map(|x| i64::try_from(x).map_err(|_| out_of_range(what)))
                .transpose()
        })
        .collect()
}

/// `sum` results (`None`: a group without non-null inputs) in `output_type`.
pub(super) fn sum_array(values: Vec<Option<i128>>, output_type: &DataType) -> Result<ArrayRef> {
    Ok(match output_type {
        DataType::Decimal128(p, s) => decimal_array(values, *p, *s)?,
        DataType::UInt64 => Arc::new(
            values
                .into_iter()
                .map(|v| {
                    v.map(|x| u64::try_from(x).map_err(|_| out_of_range("bigint unsigned")))
                        .transpose()
                })
                .collect::<Result<UInt64Array>>()?,
        ),
        DataType::Int64 => Arc::new(i64_values(values, "bigint")?),
        // Durations and anything else kept as i64.
        other => cast(&(Arc::new(i64_values(values, "value")?) as ArrayRef), other)?,
    })
}

/// `avg` results from exact sums and counts, as DataFusion computes them: a decimal
/// average is `sum * 10^(output scale - input scale) / count`, truncated; a duration's is
/// `sum / count`.
pub(super) fn avg_array(
    sums: Vec<Option<(i128, i64)>>,
    input_type: &DataType,
    output_type: &DataType,
) -> Result<ArrayRef> {
    match (input_type, output_type) {
        (DataType::Decimal128(_, in_scale), DataType::Decimal128(p, out_scale)) => {
            let mul = 10i128
                .checked_pow((*out_scale - *in_scale).max(0) as u32)
                .ok_or_else(numeric_overflow)?;
            let values = sums
                .into_iter()
                .map(|v| {
                    v.map(|(sum, n)| {
                        sum.checked_mul(mul)
                            .map(|x| x / n as i128)
                            .ok_or_else(numeric_overflow)
                    })
                    .transpose()
                })
                .collect::<Result<Vec<_>>>()?;
            decimal_array(values, *p, *out_scale)
        }
        (_, out) => {
            let values = sums
                .into_iter()
                .map(|v| v.map(|(sum, n)| sum / n as i128))
                .collect();
            sum_array(values, out)
        }
    }
}

/// Interval sums add months, days and nanoseconds apart, as PostgreSQL and DataFusion do.
pub(super) fn interval_column(a: &ArrayRef) -> Result<IntervalMonthDayNanoArray> {
    Ok(cast(a, &DataType::Interval(IntervalUnit::MonthDayNano))?
        .as_primitive::<IntervalMonthDayNanoType>()
        .clone())
}

/// Interval sum results (`None`: no non-null input) in `output_type`.
pub(super) fn interval_array(
    values: Vec<Option<[i128; 3]>>,
    output_type: &DataType,
) -> Result<ArrayRef> {
    let array: IntervalMonthDayNanoArray = values
        .into_iter()
        .map(|v| {
            v.map(|[months, days, nanos]| {
                Ok(IntervalMonthDayNano::new(
                    i32::try_from(months).map_err(|_| out_of_range("interval"))?,
                    i32::try_from(days).map_err(|_| out_of_range("interval"))?,
                    i64::try_from(nanos).map_err(|_| out_of_range("interval"))?,
                ))
            })
            .transpose()
        })
        .collect::<Result<_>>()?;
    let array: ArrayRef = Arc::new(array);
    Ok(if array.data_type() == output_type {
        array
    } else {
        cast(&array, output_type)?
    })
}
