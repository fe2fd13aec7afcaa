//! SQL functions Eddy adds to DataFusion's, mostly for what clients ask at connect time.

use arrow::array::{Array, AsArray};
use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility, create_udf,
};
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
                crate::config::DEFAULT_USER.to_string(),
            ))))
        }),
    ));
    for name in [
        "pg_get_serial_sequence",
        "pg_get_function_result",
        "pg_get_function_arguments",
        "pg_get_function_identity_arguments",
        "shobj_description",
    ] {
        ctx.register_udf(null_text(name));
    }
    for f in super::session_windows::functions() {
        ctx.register_udwf(f);
    }
    for kind in [WindowList::HopStarts, WindowList::CumulateEnds] {
        ctx.register_udf(ScalarUDF::new_from_impl(WindowBounds {
            kind,
            signature: Signature::variadic_any(Volatility::Immutable),
        }));
    }
    // Marks the table of a temporal join; volatile so that it is never folded away.
    ctx.register_udf(create_udf(
        crate::planner::TEMPORAL_JOIN_MARKER,
        vec![],
        DataType::Boolean,
        Volatility::Volatile,
        Arc::new(|_args: &[ColumnarValue]| {
            Ok(ColumnarValue::Scalar(ScalarValue::Boolean(Some(true))))
        }),
    ));
    // `now()` in a view: the processing time, which temporal filters compare rows with.
    ctx.register_udf(create_udf(
        crate::planner::NOW_FUNCTION,
        vec![],
        DataType::Timestamp(
            arrow::datatypes::TimeUnit::Microsecond,
            Some("+00:00".into()),
        ),
        Volatility::Volatile,
        Arc::new(|_args: &[ColumnarValue]| {
            Ok(ColumnarValue::Scalar(ScalarValue::TimestampMicrosecond(
                Some(crate::stream::operators::temporal_filter::processing_time_micros()),
                Some("+00:00".into()),
            )))
        }),
    ));
    // PostgreSQL's names for DataFusion's functions.
    for (datafusion_name, postgres_name) in [("signum", "sign"), ("uuid", "gen_random_uuid")] {
        if let Ok(udf) = datafusion::execution::FunctionRegistry::udf(ctx, datafusion_name) {
            ctx.register_udf(udf.as_ref().clone().with_aliases([postgres_name]));
        }
    }
    // `variance` is PostgreSQL's name for the sample variance.
    if let Ok(udaf) = datafusion::execution::FunctionRegistry::udaf(ctx, "var_samp") {
        ctx.register_udaf(udaf.as_ref().clone().with_aliases(["variance"]));
    }
    ctx.register_udf(create_udf(
        "pg_size_pretty",
        vec![DataType::Int64],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(size_pretty),
    ));
    ctx.register_udf(create_udf(
        "quote_literal",
        vec![DataType::Utf8],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(quote_literal),
    ));
    ctx.register_udf(ScalarUDF::new_from_impl(PgTypeof {
        signature: Signature::any(1, Volatility::Immutable),
    }));
    ctx.register_udf(super::to_char::udf());
    ctx.register_udaf(super::string_agg_by_row::udaf());
    for udaf in super::ordered_set_aggregates::udafs()
        .into_iter()
        .chain(super::arg_min_max::udafs())
    {
        ctx.register_udaf(udaf);
    }
    ctx.register_udf(super::to_timestamp::udf(ctx.state().config_options()));
    ctx.register_udf(super::to_timestamp::to_date_udf());
    ctx.register_udf(super::interval_arithmetic::udf());
    ctx.register_udf(super::date_function::udf());
    ctx.register_udf(super::make_interval::udf());
    ctx.register_udf(super::at_time_zone::udf());
    ctx.register_udf(super::date_trunc_units::udf());
    for udf in super::bytea_escape::conversion_udfs() {
        ctx.register_udf(udf);
    }
    for udf in super::bytea_escape::udfs() {
        ctx.register_udf(udf);
    }
    ctx.register_udf(super::age_function::udf());
    for udf in super::justify_functions::udfs() {
        ctx.register_udf(udf);
    }
    ctx.register_udf(super::format_function::udf());
    ctx.register_udf(super::similar_to::udf());
    for f in super::integral_decimal::udfs() {
        ctx.register_udf(f);
    }
}

/// A function that answers NULL text whatever its arguments: Eddy has no sequences,
/// user-defined functions or comments, so `pg_get_serial_sequence`, the function-signature
/// helpers and `col_description`/`obj_description` have nothing to report.
#[derive(Debug, PartialEq, Eq, Hash)]
struct NullText {
    name: &'static str,
    signature: Signature,
}

impl ScalarUDFImpl for NullText {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> datafusion::common::Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(
        &self,
        _args: ScalarFunctionArgs,
    ) -> datafusion::common::Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(None)))
    }
}

fn null_text(name: &'static str) -> ScalarUDF {
    ScalarUDF::new_from_impl(NullText {
        name,
        signature: Signature::variadic_any(Volatility::Stable),
    })
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

/// `pg_typeof(x)`: the name of the argument's type as PostgreSQL prints a `regtype`
/// (`integer`, `character varying`, `numeric`: without a type modifier).
#[derive(Debug, PartialEq, Eq, Hash)]
struct PgTypeof {
    signature: Signature,
}

impl ScalarUDFImpl for PgTypeof {
    fn name(&self) -> &str {
        "pg_typeof"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> datafusion::common::Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion::common::Result<ColumnarValue> {
        let name = match args.arg_fields.first() {
            Some(field) if field.data_type() == &DataType::Null => "unknown".to_string(),
            Some(field) => {
                let name = crate::catalog::types::SqlType::from_arrow(field).pg_name();
                match name.split_once('(') {
                    Some((base, _)) => base.to_string(),
                    None => name,
                }
            }
            None => return datafusion::common::plan_err!("pg_typeof takes one argument"),
        };
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(name))))
    }
}

/// The windows a time falls in, as a list per row (unnested by the window rewrites):
/// `hop_window_starts(ts, slide, size [, offset])` gives the start of every hopping
/// window holding `ts`; `cumulate_window_ends(ts, step, size [, offset])` the end of every
/// cumulating window holding it (windows that start where `ts`'s `size` window starts
/// and grow by `step`).
#[derive(Debug, PartialEq, Eq, Hash)]
struct WindowBounds {
    kind: WindowList,
    signature: Signature,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum WindowList {
    HopStarts,
    CumulateEnds,
}

impl WindowList {
    fn window(self) -> &'static str {
        match self {
            WindowList::HopStarts => "HOP",
            WindowList::CumulateEnds => "CUMULATE",
        }
    }

    /// Pushes the windows of `ts` (microseconds) for a step (slide) and size.
    fn push(self, ts: i64, step: i64, size: i64, offset: i64, out: &mut Vec<i64>) {
        match self {
            WindowList::HopStarts => {
                let last = (ts - offset).div_euclid(step) * step + offset;
                let mut first = last;
                while first - step + size > ts {
                    first -= step;
                }
                let mut w = first;
                while w <= last {
                    out.push(w);
                    w += step;
                }
            }
            WindowList::CumulateEnds => {
                let start = (ts - offset).div_euclid(size) * size + offset;
                let mut end = start + ((ts - start).div_euclid(step) + 1) * step;
                while end <= start + size {
                    out.push(end);
                    end += step;
                }
            }
        }
    }
}

/// An interval argument in microseconds; months have no fixed length and are refused.
fn interval_micros(v: &ColumnarValue, what: &str, window: &str) -> datafusion::common::Result<i64> {
    let ColumnarValue::Scalar(s) = v else {
        return datafusion::common::plan_err!(
            "the {what} of a {window} window must be a constant interval"
        );
    };
    match s.cast_to(&DataType::Interval(
        arrow::datatypes::IntervalUnit::MonthDayNano,
    ))? {
        ScalarValue::IntervalMonthDayNano(Some(i)) if i.months == 0 => {
            Ok(i.days as i64 * 86_400_000_000 + i.nanoseconds / 1000)
        }
        _ => datafusion::common::plan_err!(
            "the {what} of a {window} window must be a fixed interval (days, hours, minutes, seconds)"
        ),
    }
}

impl WindowBounds {
    fn check_step_and_size(&self, step: i64, size: i64) -> datafusion::common::Result<()> {
        if step <= 0 || size <= 0 {
            return datafusion::common::plan_err!(
                "{} step and size must be positive",
                self.kind.window()
            );
        }
        if self.kind == WindowList::CumulateEnds && size % step != 0 {
            return datafusion::common::plan_err!(
                "the size of a CUMULATE window must be a multiple of its step"
            );
        }
        Ok(())
    }
}

impl ScalarUDFImpl for WindowBounds {
    fn name(&self) -> &str {
        match self.kind {
            WindowList::HopStarts => "hop_window_starts",
            WindowList::CumulateEnds => "cumulate_window_ends",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> datafusion::common::Result<DataType> {
        let item = match args.first() {
            Some(DataType::Timestamp(_, tz)) => {
                DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, tz.clone())
            }
            _ => {
                return datafusion::common::plan_err!(
                    "{} needs a timestamp column",
                    self.kind.window()
                );
            }
        };
        Ok(DataType::List(Arc::new(
            arrow::datatypes::Field::new_list_field(item, true),
        )))
    }

    /// Checks constant step and size while the query is planned, so a view with an
    /// invalid window is refused when it is created rather than failing later.
    fn return_field_from_args(
        &self,
        args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> datafusion::common::Result<arrow::datatypes::FieldRef> {
        let window = self.kind.window();
        if let (Some(Some(step)), Some(Some(size))) =
            (args.scalar_arguments.get(1), args.scalar_arguments.get(2))
        {
            let step = interval_micros(&ColumnarValue::Scalar((*step).clone()), "step", window)?;
            let size = interval_micros(&ColumnarValue::Scalar((*size).clone()), "size", window)?;
            self.check_step_and_size(step, size)?;
        }
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        Ok(Arc::new(arrow::datatypes::Field::new(
            self.name(),
            self.return_type(&types)?,
            true,
        )))
    }

    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion::common::Result<ColumnarValue> {
        let window = self.kind.window();
        let step = interval_micros(&args.args[1], "step", window)?;
        let size = interval_micros(&args.args[2], "size", window)?;
        let offset = match args.args.get(3) {
            Some(o) => interval_micros(o, "offset", window)?,
            None => 0,
        };
        self.check_step_and_size(step, size)?;
        let item_type = match self.return_type(&[args.args[0].data_type()])? {
            DataType::List(f) => f.data_type().clone(),
            _ => unreachable!("return_type is a list"),
        };
        let times = args.args[0].to_array(args.number_rows)?;
        let times = arrow::compute::cast(
            &times,
            &DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None),
        )?;
        let times = times.as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
        let mut offsets = vec![0i32];
        let mut starts: Vec<i64> = Vec::new();
        let mut nulls = Vec::with_capacity(times.len());
        for i in 0..times.len() {
            if times.is_null(i) {
                nulls.push(false);
            } else {
                nulls.push(true);
                self.kind
                    .push(times.value(i), step, size, offset, &mut starts);
            }
            offsets.push(starts.len() as i32);
        }
        let values = arrow::compute::cast(
            &arrow::array::TimestampMicrosecondArray::from(starts),
            &item_type,
        )?;
        let list = arrow::array::ListArray::try_new(
            Arc::new(arrow::datatypes::Field::new_list_field(item_type, true)),
            arrow::buffer::OffsetBuffer::new(offsets.into()),
            values,
            Some(arrow::buffer::NullBuffer::from(nulls)),
        )?;
        Ok(ColumnarValue::Array(Arc::new(list)))
    }
}

/// `quote_literal(text)`: the text as a string literal (quotes doubled, and written as an
/// `E'...'` literal with doubled backslashes when it holds one, as PostgreSQL writes it).
fn quote_literal(args: &[ColumnarValue]) -> datafusion::error::Result<ColumnarValue> {
    let quote = |s: &str| {
        let quoted = s.replace('\'', "''");
        if s.contains('\\') {
            format!("E'{}'", quoted.replace('\\', "\\\\"))
        } else {
            format!("'{quoted}'")
        }
    };
    match &args[0] {
        ColumnarValue::Scalar(v) => Ok(ColumnarValue::Scalar(ScalarValue::Utf8(match v {
            ScalarValue::Utf8(s) | ScalarValue::LargeUtf8(s) | ScalarValue::Utf8View(s) => {
                s.as_deref().map(quote)
            }
            _ => None,
        }))),
        ColumnarValue::Array(array) => {
            let text = arrow::compute::cast(array, &DataType::Utf8)?;
            let text = arrow::array::AsArray::as_string::<i32>(&text);
            Ok(ColumnarValue::Array(Arc::new(
                text.iter()
                    .map(|s| s.map(quote))
                    .collect::<arrow::array::StringArray>(),
            )))
        }
    }
}

/// `pg_size_pretty(bigint)`: bytes in PostgreSQL's units, rounded as it rounds them
/// (`bytes` below 10 kB, then `kB`, `MB`, `GB`, `TB`, `PB`, each below 20 of the next).
fn size_pretty(args: &[ColumnarValue]) -> datafusion::error::Result<ColumnarValue> {
    fn pretty(size: i64) -> String {
        const LIMIT: i64 = 10 * 1024;
        const LIMIT2: i64 = LIMIT * 2 - 1;
        let half_rounded = |x: i64| (x + if x < 0 { -1 } else { 1 }) / 2;
        if size.abs() < LIMIT {
            return format!("{size} bytes");
        }
        // One extra bit kept for rounding.
        let mut size = size >> 9;
        for unit in ["kB", "MB", "GB", "TB"] {
            if size.abs() < LIMIT2 {
                return format!("{} {unit}", half_rounded(size));
            }
            size >>= 10;
        }
        format!("{} PB", half_rounded(size))
    }
    let sizes = args[0].to_array(1)?;
    let sizes = arrow::compute::cast(&sizes, &DataType::Int64)?;
    let sizes = arrow::array::AsArray::as_primitive::<arrow::datatypes::Int64Type>(&sizes);
    let out: arrow::array::StringArray = sizes.iter().map(|s| s.map(pretty)).collect();
    Ok(match &args[0] {
        ColumnarValue::Scalar(_) => ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?),
        ColumnarValue::Array(_) => ColumnarValue::Array(Arc::new(out)),
    })
}
