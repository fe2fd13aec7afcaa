//! Casts between struct types match fields by position, as PostgreSQL and RisingWave
//! do: `INSERT INTO t VALUES (1, (2, 3))` writes the row constructor `(2, 3)` (fields
//! `c0`, `c1` to DataFusion) into a `struct<a int, b int>` column. DataFusion only casts
//! structs whose field names match, so this analyzer rule turns any other struct cast
//! into [`CAST_BY_POSITION`], which casts with Arrow's kernel (by position when names
//! differ).
//!
//! A cast to text gives PostgreSQL's output of the value ([`VALUE_TO_TEXT`]), the same
//! text a client sees for it, wherever Arrow's cast writes something else: a struct is a
//! record `(1,"a b")` (Arrow has no such cast), a timestamp `2024-01-01 00:00:00+00:00`
//! (not `2024-01-01T00:00:00Z`), an interval `1 day 02:00:00`, bytes `\x41`, an array
//! `{1,2}`, a float `1e+20` or `Infinity`, an unconstrained `numeric` with its own
//! digits (`3.01`, not the column's ten fractional digits). Booleans, numbers, dates and times keep
//! Arrow's cast, which already writes PostgreSQL's text (`true`, as PostgreSQL's cast
//! does, not the `t` of its output).

use arrow::array::AsArray;
use arrow::datatypes::{DataType, FieldRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    Cast, ColumnarValue, Expr, ExprSchemable, LogicalPlan, ReturnFieldArgs, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use std::sync::{Arc, LazyLock};

pub const CAST_BY_POSITION: &str = "eddy_cast_by_position";

static UDF: LazyLock<Arc<ScalarUDF>> = LazyLock::new(|| {
    Arc::new(ScalarUDF::new_from_impl(CastByPosition {
        signature: Signature::any(2, Volatility::Immutable),
    }))
});

pub fn udf() -> Arc<ScalarUDF> {
    UDF.clone()
}

pub const VALUE_TO_TEXT: &str = "eddy_value_to_text";

static TO_TEXT_UDF: LazyLock<Arc<ScalarUDF>> = LazyLock::new(|| {
    Arc::new(ScalarUDF::new_from_impl(ValueToText {
        signature: Signature::any(1, Volatility::Immutable),
    }))
});

#[derive(Debug, Default)]
pub struct StructCasts;

impl AnalyzerRule for StructCasts {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        crate::plan_helpers::rewrite_expressions(plan, by_position).map(|t| t.data)
    }

    fn name(&self) -> &str {
        "eddy_struct_casts"
    }
}

fn by_position(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    if let Expr::ScalarFunction(call) = &expr
        && matches!(call.name(), "concat" | "concat_ws")
    {
        return Ok(booleans_as_output_text(call.clone(), schema));
    }
    if let Expr::ScalarFunction(call) = &expr
        && call.name() == "array_to_string"
        && let Some(array) = call.args.first()
        && let Ok(DataType::List(element)) = array.get_type(schema)
        && needs_postgres_text(element.data_type())
    {
        // `array_to_string` (`array_join`) writes each element as PostgreSQL's output
        // does (`2023-02-20 17:35:25`, not Arrow's `2023-02-20T17:35:25`).
        let mut call = call.clone();
        call.args[0] = Expr::ScalarFunction(ScalarFunction::new_udf(
            ELEMENTS_TO_TEXT_UDF.clone(),
            vec![array.clone()],
        ));
        return Ok(Transformed::yes(Expr::ScalarFunction(call)));
    }
    let Expr::Cast(Cast { expr: inner, field }) = &expr else {
        return Ok(Transformed::no(expr));
    };
    let Ok(source) = inner.get_type(schema) else {
        return Ok(Transformed::no(expr));
    };
    if needs_postgres_text(&source)
        && matches!(
            field.data_type(),
            DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8
        )
    {
        let text = Expr::ScalarFunction(ScalarFunction::new_udf(
            TO_TEXT_UDF.clone(),
            vec![inner.as_ref().clone()],
        ));
        return Ok(Transformed::yes(if field.data_type() == &DataType::Utf8 {
            text
        } else {
            Expr::Cast(Cast::new(Box::new(text), field.data_type().clone()))
        }));
    }
    if !names_differ(&source, field.data_type()) {
        return Ok(Transformed::no(expr));
    }
    let target = Expr::Literal(ScalarValue::try_from(field.data_type())?, None);
    Ok(Transformed::yes(Expr::ScalarFunction(
        ScalarFunction::new_udf(udf(), vec![inner.as_ref().clone(), target]),
    )))
}

/// `concat` and `concat_ws` write each argument with its type's output function, as
/// PostgreSQL's do: a boolean is `t` or `f` there (not the `true` of a cast to text).
fn booleans_as_output_text(mut call: ScalarFunction, schema: &DFSchema) -> Transformed<Expr> {
    let mut changed = false;
    for arg in call.args.iter_mut() {
        let Expr::Cast(Cast { expr: inner, .. }) = arg else {
            continue;
        };
        if inner.get_type(schema).ok() == Some(DataType::Boolean) {
            *arg = Expr::ScalarFunction(ScalarFunction::new_udf(
                TO_TEXT_UDF.clone(),
                vec![inner.as_ref().clone()],
            ));
            changed = true;
        }
    }
    let expr = Expr::ScalarFunction(call);
    if changed {
        Transformed::yes(expr)
    } else {
        Transformed::no(expr)
    }
}

/// Whether Arrow's cast of `source` to text differs from PostgreSQL's text of the value.
fn needs_postgres_text(source: &DataType) -> bool {
    matches!(
        source,
        DataType::Struct(_)
            | DataType::Timestamp(..)
            | DataType::Interval(_)
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
            | DataType::FixedSizeBinary(_)
            | DataType::List(_)
            | DataType::LargeList(_)
            | DataType::FixedSizeList(..)
            | DataType::Float16
            | DataType::Float32
            | DataType::Float64
    ) || matches!(source, DataType::Decimal128(p, s)
            if crate::catalog::types::is_unconstrained_numeric(*p, *s))
}

/// Whether two struct types (or lists of them) differ in a field's name somewhere.
fn names_differ(source: &DataType, target: &DataType) -> bool {
    match (source, target) {
        (DataType::Struct(a), DataType::Struct(b)) => {
            a.len() == b.len()
                && a.iter().zip(b.iter()).any(|(x, y)| {
                    x.name() != y.name() || names_differ(x.data_type(), y.data_type())
                })
        }
        (DataType::List(a), DataType::List(b)) => names_differ(a.data_type(), b.data_type()),
        _ => false,
    }
}

/// `eddy_cast_by_position(value, NULL::target)`: `value` cast to the second argument's type.
#[derive(Debug, PartialEq, Eq, Hash)]
struct CastByPosition {
    signature: Signature,
}

impl ScalarUDFImpl for CastByPosition {
    fn name(&self) -> &str {
        CAST_BY_POSITION
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(args[1].clone())
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let source = &args.arg_fields[0];
        Ok(Arc::new(
            source
                .as_ref()
                .clone()
                .with_data_type(args.arg_fields[1].data_type().clone()),
        ))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let target = args.return_field.data_type().clone();
        let value = args.args[0].to_array(args.number_rows)?;
        Ok(ColumnarValue::Array(arrow::compute::cast(&value, &target)?))
    }
}

/// `eddy_value_to_text(value)`: each value as PostgreSQL prints it (NULL stays NULL).
static ELEMENTS_TO_TEXT_UDF: LazyLock<Arc<ScalarUDF>> = LazyLock::new(|| {
    Arc::new(ScalarUDF::new_from_impl(ElementsToText {
        signature: Signature::any(1, Volatility::Immutable),
    }))
});

/// A list's elements as PostgreSQL's text of each (a `text[]` of the same shape).
#[derive(Debug, PartialEq, Eq, Hash)]
struct ElementsToText {
    signature: Signature,
}

impl ScalarUDFImpl for ElementsToText {
    fn name(&self) -> &str {
        "eddy_elements_to_text"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::new_list(DataType::Utf8, true))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let lists = args.args[0].to_array(args.number_rows)?;
        let lists = lists.as_list::<i32>();
        let nulls = arrow::array::Array::nulls(lists).cloned();
        let text = crate::pg_text::text_column(lists.values())
            .map_err(crate::error::EddyError::into_datafusion)?;
        let out = arrow::array::ListArray::try_new(
            Arc::new(arrow::datatypes::Field::new_list_field(
                DataType::Utf8,
                true,
            )),
            lists.offsets().clone(),
            Arc::new(text),
            nulls,
        )?;
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ValueToText {
    signature: Signature,
}

impl ScalarUDFImpl for ValueToText {
    fn name(&self) -> &str {
        VALUE_TO_TEXT
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let value = args.args[0].to_array(args.number_rows)?;
        let text = crate::pg_text::text_column(&value)
            .map_err(crate::error::EddyError::into_datafusion)?;
        Ok(ColumnarValue::Array(Arc::new(text)))
    }
}
