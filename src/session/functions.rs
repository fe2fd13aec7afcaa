//! SQL functions Eddy adds to DataFusion's, mostly for what clients ask at connect time.

use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::{ColumnarValue, Volatility, create_udf};
use std::sync::Arc;

/// What `SELECT version()` answers. Clients such as SQLAlchemy parse the leading
/// `PostgreSQL <major>.<minor>`, so it must stay first.
pub const VERSION_STRING: &str = concat!(
    "PostgreSQL 15.0 (Eddy ",
    env!("CARGO_PKG_VERSION"),
    ") on x86_64-pc-linux-gnu, a streaming SQL database"
);

pub fn register(ctx: &SessionContext) {
    ctx.register_udf(constant_text("version", VERSION_STRING));
    // Everything in Eddy's catalog is on the search path, so every object is visible.
    for name in [
        "pg_function_is_visible",
        "pg_type_is_visible",
        "pg_opclass_is_visible",
        "pg_operator_is_visible",
        "pg_collation_is_visible",
        "pg_conversion_is_visible",
        "pg_ts_config_is_visible",
    ] {
        ctx.register_udf(always_true(name));
    }
    // Every object belongs to the bootstrap superuser, which in Eddy is `root`.
    ctx.register_udf(create_udf(
        "pg_get_userbyid",
        vec![DataType::Int32],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(|_args: &[ColumnarValue]| {
            Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
                crate::server::startup::DEFAULT_USER.to_string(),
            ))))
        }),
    ));
    ctx.register_udf(null_text(
        "pg_get_serial_sequence",
        vec![DataType::Utf8, DataType::Utf8],
    ));
    for name in [
        "pg_get_function_result",
        "pg_get_function_arguments",
        "pg_get_function_identity_arguments",
    ] {
        ctx.register_udf(null_text(name, vec![DataType::Int64]));
    }
}

/// A function that answers NULL text: Eddy has no sequences or user-defined functions, so
/// `pg_get_serial_sequence` and the function-signature helpers have nothing to report.
fn null_text(name: &str, args: Vec<DataType>) -> datafusion::logical_expr::ScalarUDF {
    create_udf(
        name,
        args,
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(|_args: &[ColumnarValue]| Ok(ColumnarValue::Scalar(ScalarValue::Utf8(None)))),
    )
}

fn always_true(name: &str) -> datafusion::logical_expr::ScalarUDF {
    create_udf(
        name,
        vec![DataType::Int64],
        DataType::Boolean,
        Volatility::Stable,
        Arc::new(|_args: &[ColumnarValue]| {
            Ok(ColumnarValue::Scalar(ScalarValue::Boolean(Some(true))))
        }),
    )
}

fn constant_text(name: &str, value: &'static str) -> datafusion::logical_expr::ScalarUDF {
    create_udf(
        name,
        vec![],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(move |_args: &[ColumnarValue]| {
            Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
                value.to_string(),
            ))))
        }),
    )
}
