//! The set-returning `jsonb` functions in `FROM`: `jsonb_array_elements`,
//! `jsonb_array_elements_text`, `jsonb_object_keys`, `jsonb_each`, `jsonb_each_text`,
//! over a constant document (DataFusion's table functions take constant arguments; in
//! a select list the first three also take columns, see `session::sql_rewrite`).

use super::text;
use crate::error::{EddyError, sqlstate};
use arrow::array::{Array, ArrayRef, RecordBatch, RecordBatchOptions, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::{DFSchema, Result, plan_err};
use datafusion::datasource::MemTable;
use serde_json::Value;
use std::sync::Arc;

pub fn all() -> Vec<(&'static str, Arc<dyn TableFunctionImpl>)> {
    [
        Kind::ArrayElements,
        Kind::ArrayElementsText,
        Kind::ObjectKeys,
        Kind::Each,
        Kind::EachText,
    ]
    .into_iter()
    .map(|kind| {
        (
            kind.name(),
            Arc::new(JsonbRows { kind }) as Arc<dyn TableFunctionImpl>,
        )
    })
    .collect()
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    ArrayElements,
    ArrayElementsText,
    ObjectKeys,
    Each,
    EachText,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::ArrayElements => "jsonb_array_elements",
            Kind::ArrayElementsText => "jsonb_array_elements_text",
            Kind::ObjectKeys => "jsonb_object_keys",
            Kind::Each => "jsonb_each",
            Kind::EachText => "jsonb_each_text",
        }
    }
}

#[derive(Debug)]
struct JsonbRows {
    kind: Kind,
}

impl TableFunctionImpl for JsonbRows {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let [arg] = args.exprs() else {
            return plan_err!("{} takes one argument", self.kind.name());
        };
        let document = constant_document(arg, &args)?;
        let (fields, columns) = self.rows(document).map_err(EddyError::into_datafusion)?;
        let schema = Arc::new(Schema::new(fields));
        let batch = RecordBatch::try_new(schema.clone(), columns)?;
        Ok(Arc::new(MemTable::try_new(schema, vec![vec![batch]])?))
    }
}

impl JsonbRows {
    fn rows(&self, document: Option<Value>) -> crate::error::Result<(Vec<Field>, Vec<ArrayRef>)> {
        let wrong =
            |what: &str| EddyError::new(sqlstate::INVALID_PARAMETER_VALUE, what.to_string());
        let kind_of = |v: &Option<Value>| {
            v.as_ref().map_or("null", |v| match v {
                Value::Object(_) => "an object",
                Value::Array(_) => "an array",
                _ => "a scalar",
            })
        };
        let text_column = |name: &str, values: Vec<Option<String>>| {
            (
                Field::new(name, DataType::Utf8, true),
                Arc::new(StringArray::from(values)) as ArrayRef,
            )
        };
        let jsonb_column = |name: &str, values: Vec<Option<String>>| {
            (
                super::jsonb_field(name),
                Arc::new(StringArray::from(values)) as ArrayRef,
            )
        };
        let columns = match (self.kind, &document) {
            (Kind::ArrayElements, Some(Value::Array(items))) => {
                vec![jsonb_column(
                    "value",
                    items.iter().map(|v| Some(text::render(v))).collect(),
                )]
            }
            (Kind::ArrayElementsText, Some(Value::Array(items))) => {
                vec![text_column(
                    "value",
                    items.iter().map(text::as_text).collect(),
                )]
            }
            (Kind::ArrayElements | Kind::ArrayElementsText, other) => {
                return Err(wrong(&format!(
                    "cannot extract elements from {}",
                    kind_of(other)
                )));
            }
            (Kind::ObjectKeys, Some(Value::Object(o))) => vec![text_column(
                "jsonb_object_keys",
                text::sorted_entries(o)
                    .into_iter()
                    .map(|(k, _)| Some(k.clone()))
                    .collect(),
            )],
            (Kind::Each | Kind::EachText, Some(Value::Object(o))) => {
                let entries = text::sorted_entries(o);
                let keys = entries.iter().map(|(k, _)| Some((*k).clone())).collect();
                let values = entries.iter().map(|(_, v)| match self.kind {
                    Kind::Each => Some(text::render(v)),
                    _ => text::as_text(v),
                });
                vec![
                    text_column("key", keys),
                    match self.kind {
                        Kind::Each => jsonb_column("value", values.collect()),
                        _ => text_column("value", values.collect()),
                    },
                ]
            }
            (kind, other) => {
                let call = match kind {
                    Kind::ObjectKeys => "call jsonb_object_keys on",
                    _ => "deconstruct",
                };
                return Err(wrong(&format!("cannot {call} {}", kind_of(other))));
            }
        };
        Ok(columns.into_iter().unzip())
    }
}

/// The argument's value (a constant expression), parsed as JSON; `None` for NULL.
fn constant_document(
    arg: &datafusion::logical_expr::Expr,
    args: &TableFunctionArgs,
) -> Result<Option<Value>> {
    let expr = args
        .session()
        .create_physical_expr(arg.clone(), &DFSchema::empty())?;
    let one_row = RecordBatch::try_new_with_options(
        Arc::new(Schema::empty()),
        vec![],
        &RecordBatchOptions::new().with_row_count(Some(1)),
    )?;
    let value = expr.evaluate(&one_row)?.into_array(1)?;
    let value = arrow::compute::cast(&value, &DataType::Utf8)?;
    let value = value
        .as_any()
        .downcast_ref::<StringArray>()
        .expect("cast to Utf8");
    if value.is_null(0) {
        return Ok(None);
    }
    text::parse(value.value(0))
        .map(Some)
        .map_err(|e| super::invalid_json(e).into_datafusion())
}
