//! `date_trunc(unit, ts)` with the unit from a column, as PostgreSQL allows
//! (`date_trunc(u.unit, u.ts)`): DataFusion's `date_trunc` takes only a constant unit.
//! This analyzer rule, run after type coercion, replaces a call whose unit is not a
//! constant by one that truncates each row by its own unit: the rows are grouped by unit
//! and each group goes through DataFusion's `date_trunc` with that unit as a constant,
//! so every unit means what it means there. A NULL unit (or time) gives NULL. Units only
//! PostgreSQL knows (plurals, `decade`, `century`, `millennium`: see
//! [`super::date_trunc_units`]) are handled here too, constant or not.

use super::date_trunc_units::{TruncUnit, truncate_years, unit_of};
use arrow::array::{Array, ArrayRef, AsArray, UInt32Array, new_null_array};
use arrow::compute::{cast, interleave, take};
use arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Debug, Default)]
pub struct DateTruncByRow;

impl AnalyzerRule for DateTruncByRow {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            let schema = super::numeric_division::merged_input_schema(&node);
            node.map_expressions(|e| e.transform_up(|e| by_row(e, &schema)))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "eddy_date_trunc_by_row"
    }
}

/// `date_trunc(non-constant unit, ts)` as [`TruncByRow`] (same result type).
fn by_row(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let Expr::ScalarFunction(f) = &expr else {
        return Ok(Transformed::no(expr));
    };
    if f.func.name() != "date_trunc" || f.args.len() != 2 {
        return Ok(Transformed::no(expr));
    }
    match &f.args[0] {
        Expr::Placeholder(_) => return Ok(Transformed::no(expr)),
        // A constant unit DataFusion knows (by its singular name) stays DataFusion's;
        // others (`'hours'`, `'century'`) are handled here, the call (and so the
        // column's name) unchanged.
        Expr::Literal(ScalarValue::Utf8(Some(text)), _) => match unit_of(text) {
            TruncUnit::Native(unit) if &unit == text => return Ok(Transformed::no(expr)),
            _ => {}
        },
        Expr::Literal(..) => return Ok(Transformed::no(expr)),
        _ => {}
    }
    let return_type = expr.get_type(schema)?;
    let udf = ScalarUDF::new_from_impl(TruncByRow {
        inner: f.func.clone(),
        return_type,
        signature: Signature::any(2, Volatility::Immutable),
    });
    Ok(Transformed::yes(Expr::ScalarFunction(
        ScalarFunction::new_udf(Arc::new(udf), f.args.clone()),
    )))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct TruncByRow {
    /// DataFusion's `date_trunc`.
    inner: Arc<ScalarUDF>,
    return_type: DataType,
    signature: Signature,
}

impl ScalarUDFImpl for TruncByRow {
    fn name(&self) -> &str {
        "date_trunc"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(self.return_type.clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let call = |unit: &str, values: ArrayRef| -> Result<ArrayRef> {
            // `date_trunc` itself reads every unit of an interval.
            let unit = match unit_of(unit) {
                _ if matches!(values.data_type(), DataType::Interval(_)) => unit.to_string(),
                TruncUnit::Native(unit) => unit,
                TruncUnit::Years(group) => {
                    return truncate_years(&values, group, &self.return_type);
                }
            };
            let unit = unit.as_str();
            let n = values.len();
            self.inner
                .invoke_with_args(ScalarFunctionArgs {
                    args: vec![
                        ColumnarValue::Scalar(ScalarValue::Utf8(Some(unit.to_string()))),
                        ColumnarValue::Array(values),
                    ],
                    arg_fields: args.arg_fields.clone(),
                    number_rows: n,
                    return_field: args.return_field.clone(),
                    config_options: args.config_options.clone(),
                })?
                .into_array(n)
        };
        let units = cast(&args.args[0].to_array(rows)?, &DataType::Utf8)?;
        let units = units.as_string::<i32>();
        let values = args.args[1].to_array(rows)?;
        // Row indices per unit, in order of first appearance.
        let mut groups: Vec<(&str, Vec<u32>)> = Vec::new();
        let mut group_of: HashMap<&str, usize> = HashMap::new();
        for row in 0..rows {
            // NULLs stay NULL (and never reach `date_trunc`, whose debug build overflows
            // on the values under NULL slots).
            if units.is_null(row) || values.is_null(row) {
                continue;
            }
            let unit = units.value(row);
            let g = *group_of.entry(unit).or_insert_with(|| {
                groups.push((unit, Vec::new()));
                groups.len() - 1
            });
            groups[g].1.push(row as u32);
        }
        // Piece 0 is a NULL for the rows without a unit or time; piece g + 1 the rows of
        // group g.
        let mut pieces: Vec<ArrayRef> = vec![new_null_array(&self.return_type, 1)];
        let mut at = vec![(0usize, 0usize); rows];
        for (unit, group_rows) in &groups {
            let subset = take(
                values.as_ref(),
                &UInt32Array::from(group_rows.clone()),
                None,
            )?;
            pieces.push(call(unit, subset)?);
            for (i, row) in group_rows.iter().enumerate() {
                at[*row as usize] = (pieces.len() - 1, i);
            }
        }
        let pieces: Vec<&dyn Array> = pieces.iter().map(|p| p.as_ref()).collect();
        Ok(ColumnarValue::Array(interleave(&pieces, &at)?))
    }
}
