//! `date(x)`: PostgreSQL's function-call spelling of `x::date`, for text (`date('2020-01-23')`),
//! timestamps and dates. Other argument types are refused as PostgreSQL refuses the cast
//! (`cannot cast type integer to date`), and text that is not a date is an error.

use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::DataType;
use datafusion::common::{Result, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

pub fn udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(DateFunction {
        signature: Signature::any(1, Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct DateFunction {
    signature: Signature,
}

impl ScalarUDFImpl for DateFunction {
    fn name(&self) -> &str {
        "date"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match &args[0] {
            DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Date32
            | DataType::Date64
            | DataType::Timestamp(..)
            | DataType::Null => Ok(DataType::Date32),
            other => {
                let field = arrow::datatypes::Field::new("x", other.clone(), true);
                let name = crate::catalog::types::SqlType::from_arrow(&field).pg_name();
                plan_err!("cannot cast type {name} to date")
            }
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let value = args.args[0].to_array(args.number_rows)?;
        // An invalid date is an error, as in PostgreSQL, not a NULL.
        let options = CastOptions {
            safe: false,
            ..Default::default()
        };
        let dates = cast_with_options(&value, &DataType::Date32, &options)?;
        Ok(match &args.args[0] {
            ColumnarValue::Scalar(_) => {
                ColumnarValue::Scalar(datafusion::common::ScalarValue::try_from_array(&dates, 0)?)
            }
            ColumnarValue::Array(_) => ColumnarValue::Array(dates),
        })
    }
}
