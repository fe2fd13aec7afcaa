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
