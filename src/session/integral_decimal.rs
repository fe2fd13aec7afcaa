//! `ceil` and `floor` of a `numeric` with a fraction give a `numeric` with none, as in
//! PostgreSQL (`ceil(4.7)` is `5`, not DataFusion's `5.0`). The functions wrap
//! DataFusion's, typing a decimal result with scale 0 (so every planning stage sees that
//! type) and computing it on the unscaled integers; other types go to DataFusion's.
//! `round(x)` of a float rounds half to even, as PostgreSQL's (`round(4.5::float)` is
//! 4; a `numeric` rounds half away from zero, which DataFusion's `round` does).

use arrow::array::{Array, AsArray, Decimal128Array};
use arrow::datatypes::{DataType, Decimal128Type};
use datafusion::common::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};
use std::sync::Arc;

pub fn udfs() -> Vec<ScalarUDF> {
    vec![
        ScalarUDF::new_from_impl(IntegralDecimal {
            inner: datafusion::functions::math::ceil(),
            up: true,
        }),
        ScalarUDF::new_from_impl(IntegralDecimal {
            inner: datafusion::functions::math::floor(),
            up: false,
        }),
        round_udf().as_ref().clone(),
    ]
}

/// PostgreSQL's `round`: DataFusion's, with floats rounding half to even.
pub fn round_udf() -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(RoundHalfEven {
        inner: datafusion::functions::math::round(),
    }))
}

/// `round`: DataFusion's, but a float without places rounds half to even.
#[derive(Debug)]
struct RoundHalfEven {
    inner: Arc<ScalarUDF>,
}

impl PartialEq for RoundHalfEven {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for RoundHalfEven {}

impl std::hash::Hash for RoundHalfEven {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        "round".hash(state);
    }
}

impl ScalarUDFImpl for RoundHalfEven {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(args)
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        self.inner.return_type(args)
    }

    fn return_field_from_args(
        &self,
        args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> Result<arrow::datatypes::FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let float = matches!(
            args.args.first().map(ColumnarValue::data_type),
            Some(DataType::Float64 | DataType::Float32)
        );
        if args.args.len() != 1 || !float {
            return self.inner.invoke_with_args(args);
        }
        Ok(match &args.args[0] {
            ColumnarValue::Scalar(datafusion::common::ScalarValue::Float64(v)) => {
                ColumnarValue::Scalar(datafusion::common::ScalarValue::Float64(
                    v.map(f64::round_ties_even),
                ))
            }
            ColumnarValue::Scalar(datafusion::common::ScalarValue::Float32(v)) => {
                ColumnarValue::Scalar(datafusion::common::ScalarValue::Float32(
                    v.map(f32::round_ties_even),
                ))
            }
            ColumnarValue::Array(array) => match array.data_type() {
                DataType::Float64 => ColumnarValue::Array(Arc::new(
                    array
                        .as_primitive::<arrow::datatypes::Float64Type>()
                        .unary::<_, arrow::datatypes::Float64Type>(f64::round_ties_even),
                )),
                _ => ColumnarValue::Array(Arc::new(
                    array
                        .as_primitive::<arrow::datatypes::Float32Type>()
                        .unary::<_, arrow::datatypes::Float32Type>(f32::round_ties_even),
                )),
            },
            _ => return self.inner.invoke_with_args(args),
        })
    }
}

#[derive(Debug)]
struct IntegralDecimal {
    inner: Arc<ScalarUDF>,
    /// `ceil` (towards +∞) or `floor`.
    up: bool,
}

impl PartialEq for IntegralDecimal {
    fn eq(&self, other: &Self) -> bool {
        self.up == other.up
    }
}

impl Eq for IntegralDecimal {}

impl std::hash::Hash for IntegralDecimal {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.up.hash(state);
    }
}

/// The type of the integral part of a `decimal(p, s)`: one more digit for a carry.
fn integral_type(precision: u8, scale: i8) -> DataType {
    let digits = (precision as i16 - scale as i16 + 1).clamp(1, 38) as u8;
    DataType::Decimal128(digits, 0)
}

impl ScalarUDFImpl for IntegralDecimal {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(args)
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args {
            [DataType::Decimal128(p, s)] if *s > 0 => Ok(integral_type(*p, *s)),
            _ => self.inner.return_type(args),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let DataType::Decimal128(p, s) = args.args[0].data_type() else {
            return self.inner.invoke_with_args(args);
        };
        if s <= 0 {
            return self.inner.invoke_with_args(args);
        }
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let values = args.args[0].to_array(args.number_rows)?;
        let values = values.as_primitive::<Decimal128Type>();
        let unit = 10i128.pow(s as u32);
        let up = self.up;
        let integral: Decimal128Array = values
            .unary::<_, Decimal128Type>(|v| {
                let floor = v.div_euclid(unit);
                if up && v.rem_euclid(unit) != 0 {
                    floor + 1
                } else {
                    floor
                }
            })
            .with_data_type(integral_type(p, s));
        let array: arrow::array::ArrayRef = Arc::new(integral);
        Ok(if scalar && array.len() == 1 {
            ColumnarValue::Scalar(datafusion::common::ScalarValue::try_from_array(&array, 0)?)
        } else {
            ColumnarValue::Array(array)
        })
    }
}
