//! PostgreSQL's `ceil`, `floor` and `round`, wrapping DataFusion's:
//! - `ceil` and `floor` of a `numeric` with a fraction give a `numeric` with none
//!   (`ceil(4.7)` is `5`, not DataFusion's `5.0`): the result is typed with scale 0 (so
//!   every planning stage sees that type) and computed on the unscaled integers;
//! - `round(x)` of a float rounds half to even (`round(4.5::float)` is 4; a `numeric`
//!   rounds half away from zero, which DataFusion's `round` does).
//!
//! Everything else goes to DataFusion's function.

use arrow::array::{Array, ArrayRef, AsArray, Decimal128Array};
use arrow::datatypes::{DataType, Decimal128Type, Float32Type, Float64Type};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};
use std::sync::Arc;

pub fn udfs() -> Vec<ScalarUDF> {
    vec![
        wrap(datafusion::functions::math::ceil(), Kind::Ceil),
        wrap(datafusion::functions::math::floor(), Kind::Floor),
        round_udf().as_ref().clone(),
    ]
}

/// PostgreSQL's `round`: DataFusion's, with floats rounding half to even.
pub fn round_udf() -> Arc<ScalarUDF> {
    Arc::new(wrap(datafusion::functions::math::round(), Kind::Round))
}

fn wrap(inner: Arc<ScalarUDF>, kind: Kind) -> ScalarUDF {
    ScalarUDF::new_from_impl(PostgresRounding { inner, kind })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Ceil,
    Floor,
    Round,
}

#[derive(Debug)]
struct PostgresRounding {
    inner: Arc<ScalarUDF>,
    kind: Kind,
}

impl PartialEq for PostgresRounding {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind
    }
}

impl Eq for PostgresRounding {}

impl std::hash::Hash for PostgresRounding {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.kind.hash(state);
    }
}

/// The type of the integral part of a `decimal(p, s)`: one more digit for a carry.
fn integral_type(precision: u8, scale: i8) -> DataType {
    let digits = (precision as i16 - scale as i16 + 1).clamp(1, 38) as u8;
    DataType::Decimal128(digits, 0)
}

impl PostgresRounding {
    /// `ceil`/`floor` of a decimal with a fraction (its precision and scale).
    fn integral_decimal(&self, args: &[DataType]) -> Option<(u8, i8)> {
        match (self.kind, args) {
            (Kind::Ceil | Kind::Floor, [DataType::Decimal128(p, s)]) if *s > 0 => Some((*p, *s)),
            _ => None,
        }
    }
}

impl ScalarUDFImpl for PostgresRounding {
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
        match self.integral_decimal(args) {
            Some((p, s)) => Ok(integral_type(p, s)),
            None => self.inner.return_type(args),
        }
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<arrow::datatypes::FieldRef> {
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        match self.integral_decimal(&types) {
            Some((p, s)) => Ok(Arc::new(arrow::datatypes::Field::new(
                self.name(),
                integral_type(p, s),
                args.arg_fields[0].is_nullable(),
            ))),
            None => self.inner.return_field_from_args(args),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let types: Vec<DataType> = args.args.iter().map(ColumnarValue::data_type).collect();
        let float = matches!(types.as_slice(), [DataType::Float64 | DataType::Float32]);
        let decimal = self.integral_decimal(&types);
        if decimal.is_none() && !(self.kind == Kind::Round && float) {
            return self.inner.invoke_with_args(args);
        }
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let values = args.args[0].to_array(args.number_rows)?;
        let result: ArrayRef = match decimal {
            Some((p, s)) => {
                let unit = 10i128.pow(s as u32);
                let up = self.kind == Kind::Ceil;
                let integral: Decimal128Array = values
                    .as_primitive::<Decimal128Type>()
                    .unary::<_, Decimal128Type>(|v| {
                        let floor = v.div_euclid(unit);
                        if up && v.rem_euclid(unit) != 0 {
                            floor + 1
                        } else {
                            floor
                        }
                    })
                    .with_data_type(integral_type(p, s));
                Arc::new(integral)
            }
            None if types[0] == DataType::Float64 => Arc::new(
                values
                    .as_primitive::<Float64Type>()
                    .unary::<_, Float64Type>(f64::round_ties_even),
            ),
            None => Arc::new(
                values
                    .as_primitive::<Float32Type>()
                    .unary::<_, Float32Type>(f32::round_ties_even),
            ),
        };
        Ok(if scalar && result.len() == 1 {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&result, 0)?)
        } else {
            ColumnarValue::Array(result)
        })
    }
}
