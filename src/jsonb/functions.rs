//! `jsonb` scalar functions, including those behind the operators ([`super::operators`]).
//!
//! Each is a row-at-a-time body over its arguments: JSON has to be parsed per value
//! anyway, and these run on the (few) columns a query extracts from documents.

use super::text;
use crate::error::{EddyError, Result, sqlstate};
use arrow::array::{
    Array, ArrayRef, AsArray, BooleanBuilder, Int32Builder, ListBuilder, StringBuilder,
};
use arrow::datatypes::{DataType, Field, FieldRef};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use serde_json::Value;
use std::sync::{Arc, OnceLock};

/// Every function, built once (the operators' planner looks them up by name).
pub fn all() -> &'static [Arc<ScalarUDF>] {
    static ALL: OnceLock<Vec<Arc<ScalarUDF>>> = OnceLock::new();
    ALL.get_or_init(|| {
        use Returns::*;
        let f = |name, arity, returns, strict, body| {
            Arc::new(ScalarUDF::new_from_impl(JsonbFunction {
                name,
                arity,
                returns,
                strict,
                body,
                signature: Signature::variadic_any(Volatility::Immutable),
            }))
        };
        vec![
            // The cast `x::jsonb` (see `session::sql_rewrite`).
            f("jsonb_in", (1, 1), Jsonb, true, |r| {
                Ok(r.json(0)?.map(Out::Json))
            }),
            // Casts from jsonb (see `casts.rs`): its text as plain text, and a scalar
            // checked against the target type (the second argument names it).
            f("jsonb_text", (1, 1), Text, true, |r| {
                Ok(r.text(0).map(Out::Text))
            }),
            f("jsonb_scalar", (2, 2), Text, true, scalar_for_cast),
            f("to_jsonb", (1, 1), Jsonb, true, |r| {
                Ok(Some(Out::Json(r.value(0)?)))
            }),
            f("jsonb_access", (2, 2), Jsonb, true, |r| {
                Ok(access(r)?.map(Out::Json))
            }),
            f("jsonb_access_text", (2, 2), Text, true, |r| {
                Ok(access(r)?.and_then(|v| text::as_text(&v)).map(Out::Text))
            }),
            f("jsonb_extract_path_op", (2, 2), Jsonb, true, |r| {
                Ok(path_of(r, r.path(1))?.map(Out::Json))
            }),
            f("jsonb_extract_path_text_op", (2, 2), Text, true, |r| {
                Ok(path_of(r, r.path(1))?
                    .and_then(|v| text::as_text(&v))
                    .map(Out::Text))
            }),
            f("jsonb_extract_path", (1, usize::MAX), Jsonb, true, |r| {
                Ok(path_of(r, Some(r.texts_from(1)))?.map(Out::Json))
            }),
            f(
                "jsonb_extract_path_text",
                (1, usize::MAX),
                Text,
                true,
                |r| {
                    let found = path_of(r, Some(r.texts_from(1)))?;
                    Ok(found.and_then(|v| text::as_text(&v)).map(Out::Text))
                },
            ),
            f("jsonb_contains", (2, 2), Boolean, true, |r| {
                Ok(both(r)?.map(|(a, b)| Out::Bool(text::contains(&a, &b))))
            }),
            f("jsonb_contained", (2, 2), Boolean, true, |r| {
                Ok(both(r)?.map(|(a, b)| Out::Bool(text::contains(&b, &a))))
            }),
            f("jsonb_exists", (2, 2), Boolean, true, |r| {
                let (Some(j), Some(key)) = (r.json(0)?, r.text(1)) else {
                    return Ok(None);
                };
                Ok(Some(Out::Bool(has_key(&j, &key))))
            }),
            f("jsonb_exists_any", (2, 2), Boolean, true, |r| {
                let (Some(j), Some(keys)) = (r.json(0)?, r.path(1)) else {
                    return Ok(None);
                };
                Ok(Some(Out::Bool(
                    keys.iter().flatten().any(|k| has_key(&j, k)),
                )))
            }),
            f("jsonb_exists_all", (2, 2), Boolean, true, |r| {
                let (Some(j), Some(keys)) = (r.json(0)?, r.path(1)) else {
                    return Ok(None);
                };
                Ok(Some(Out::Bool(
                    keys.iter().flatten().all(|k| has_key(&j, k)),
                )))
            }),
            f("jsonb_typeof", (1, 1), Text, true, |r| {
                Ok(r.json(0)?.map(|v| Out::Text(text::type_name(&v).into())))
            }),
            f("jsonb_array_length", (1, 1), Int32, true, |r| {
                match r.json(0)? {
                    Some(Value::Array(items)) => Ok(Some(Out::Int(items.len() as i32))),
                    Some(Value::Object(_)) => Err(not_array("get array length of a non-array")),
                    Some(_) => Err(not_array("get array length of a scalar")),
                    None => Ok(None),
                }
            }),
            f("jsonb_strip_nulls", (1, 1), Jsonb, true, |r| {
                Ok(r.json(0)?.map(|v| Out::Json(text::strip_nulls(&v))))
            }),
            f("jsonb_pretty", (1, 1), Text, true, |r| {
                Ok(r.json(0)?.map(|v| Out::Text(text::pretty(&v))))
            }),
            f("jsonb_build_array", (0, usize::MAX), Jsonb, false, |r| {
                let items = (0..r.len()).map(|i| r.value(i)).collect::<Result<_>>()?;
                Ok(Some(Out::Json(Value::Array(items))))
            }),
            f(
                "jsonb_build_object",
                (0, usize::MAX),
                Jsonb,
                false,
                build_object,
            ),
            // PostgreSQL's `json` variant (clients such as SQLAlchemy parse its text).
            f(
                "json_build_object",
                (0, usize::MAX),
                Text,
                false,
                build_object,
            ),
            // The lists that the set-returning `jsonb_array_elements`,
            // `jsonb_array_elements_text` and `jsonb_object_keys` unnest (the SQL rewrite
            // turns a call in a select list into `unnest(<list function>(...))`).
            f("jsonb_array_elements_list", (1, 1), JsonbList, true, |r| {
                Ok(Some(Out::List(
                    array_items(r)?
                        .iter()
                        .map(|v| Some(text::render(v)))
                        .collect(),
                )))
            }),
            f(
                "jsonb_array_elements_text_list",
                (1, 1),
                TextList,
                true,
                |r| {
                    Ok(Some(Out::List(
                        array_items(r)?.iter().map(text::as_text).collect(),
                    )))
                },
            ),
            f(
                "jsonb_object_keys_list",
                (1, 1),
                TextList,
                true,
                |r| match r.json(0)? {
                    Some(Value::Object(o)) => Ok(Some(Out::List(
                        text::sorted_entries(&o)
                            .into_iter()
                            .map(|(k, _)| Some(k.clone()))
                            .collect(),
                    ))),
                    Some(_) => Err(not_array("call jsonb_object_keys on a non-object")),
                    None => Ok(None),
                },
            ),
            f("jsonb_concat", (2, 2), Jsonb, true, |r| {
                Ok(both(r)?.map(|(a, b)| Out::Json(concat(a, b))))
            }),
            f("jsonb_delete", (2, 2), Jsonb, true, |r| {
                let Some(j) = r.json(0)? else { return Ok(None) };
                Ok(Some(Out::Json(if r.is_integer(1) {
                    delete_index(j, r.int(1).unwrap_or(i64::MAX))
                } else {
                    delete_key(j, &r.text(1).unwrap_or_default())
                })))
            }),
        ]
    })
}

/// Looks a function up by name.
pub fn udf(name: &str) -> Arc<ScalarUDF> {
    all()
        .iter()
        .find(|f| f.name() == name)
        .cloned()
        .unwrap_or_else(|| panic!("no jsonb function {name}"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Returns {
    Jsonb,
    Text,
    Boolean,
    Int32,
    JsonbList,
    TextList,
}

enum Out {
    Json(Value),
    Text(String),
    Bool(bool),
    Int(i32),
    List(Vec<Option<String>>),
}

type Body = fn(&Row) -> Result<Option<Out>>;

struct JsonbFunction {
    name: &'static str,
    /// Fewest and most arguments.
    arity: (usize, usize),
    returns: Returns,
    /// NULL when any argument is NULL, without running the body.
    strict: bool,
    body: Body,
    signature: Signature,
}

impl std::fmt::Debug for JsonbFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl PartialEq for JsonbFunction {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for JsonbFunction {}

impl std::hash::Hash for JsonbFunction {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state)
    }
}

impl ScalarUDFImpl for JsonbFunction {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> datafusion::common::Result<DataType> {
        Ok(match self.returns {
            Returns::Jsonb | Returns::Text => DataType::Utf8,
            Returns::Boolean => DataType::Boolean,
            Returns::Int32 => DataType::Int32,
            Returns::JsonbList => DataType::List(Arc::new(super::jsonb_field("item"))),
            Returns::TextList => DataType::new_list(DataType::Utf8, true),
        })
    }

    fn return_field_from_args(
        &self,
        args: ReturnFieldArgs,
    ) -> datafusion::common::Result<FieldRef> {
        let n = args.arg_fields.len();
        if n < self.arity.0 || n > self.arity.1 {
            return Err(EddyError::new(
                sqlstate::UNDEFINED_FUNCTION,
                format!("function {}() does not take {n} arguments", self.name),
            )
            .into_datafusion());
        }
        Ok(Arc::new(match self.returns {
            Returns::Jsonb => super::jsonb_field(self.name),
            _ => Field::new(self.name, self.return_type(&[])?, true),
        }))
    }

    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion::common::Result<ColumnarValue> {
        let rows = args.number_rows;
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let texts: Vec<Option<ArrayRef>> = arrays
            .iter()
            .map(|a| match a.data_type() {
                DataType::Utf8 => Some(a.clone()),
                DataType::LargeUtf8 | DataType::Utf8View => {
                    arrow::compute::cast(a, &DataType::Utf8).ok()
                }
                _ => None,
            })
            .collect();
        // Integer arguments (indexes) as Int64, cast once per batch.
        let ints: Vec<Option<ArrayRef>> = arrays
            .iter()
            .map(|a| {
                a.data_type()
                    .is_integer()
                    .then(|| arrow::compute::cast(a, &DataType::Int64).ok())
                    .flatten()
            })
            .collect();
        let mut out = Builder::new(self.returns, rows);
        for row in 0..rows {
            let r = Row {
                arrays: &arrays,
                texts: &texts,
                ints: &ints,
                fields: &args.arg_fields,
                row,
            };
            if self.strict && (0..arrays.len()).any(|i| r.is_null(i)) {
                out.append(None);
                continue;
            }
            out.append((self.body)(&r).map_err(EddyError::into_datafusion)?);
        }
        Ok(ColumnarValue::Array(out.finish()))
    }
}

/// One row's arguments.
struct Row<'a> {
    arrays: &'a [ArrayRef],
    /// The string arguments as `Utf8`.
    texts: &'a [Option<ArrayRef>],
    /// The integer arguments as `Int64`.
    ints: &'a [Option<ArrayRef>],
    fields: &'a [FieldRef],
    row: usize,
}

impl Row<'_> {
    fn len(&self) -> usize {
        self.arrays.len()
    }

    fn is_null(&self, i: usize) -> bool {
        // A NULL literal comes as a `NullArray`, which reports no nulls by `is_null`.
        self.arrays[i].data_type() == &DataType::Null || self.arrays[i].is_null(self.row)
    }

    /// Argument `i` read as a JSON document: text is parsed, other values converted.
    fn json(&self, i: usize) -> Result<Option<Value>> {
        if self.is_null(i) {
            return Ok(None);
        }
        match &self.texts[i] {
            Some(t) => text::parse(t.as_string::<i32>().value(self.row))
                .map(Some)
                .map_err(super::invalid_json),
            None => self.value(i).map(Some),
        }
    }

    /// Argument `i` as `to_jsonb` turns a value into JSON (text becomes a JSON string).
    fn value(&self, i: usize) -> Result<Value> {
        super::value_of(self.arrays[i].as_ref(), &self.fields[i], self.row)
    }

    fn text(&self, i: usize) -> Option<String> {
        if self.is_null(i) {
            return None;
        }
        Some(match &self.texts[i] {
            Some(t) => t.as_string::<i32>().value(self.row).to_string(),
            None => ArrayFormatter::try_new(self.arrays[i].as_ref(), &FormatOptions::default())
                .ok()?
                .value(self.row)
                .to_string(),
        })
    }

    fn texts_from(&self, first: usize) -> Vec<Option<String>> {
        (first..self.len()).map(|i| self.text(i)).collect()
    }

    fn is_integer(&self, i: usize) -> bool {
        self.arrays[i].data_type().is_integer()
    }

    fn int(&self, i: usize) -> Option<i64> {
        let ints = self.ints[i]
            .as_ref()?
            .as_primitive::<arrow::datatypes::Int64Type>();
        (!ints.is_null(self.row)).then(|| ints.value(self.row))
    }

    /// A `text[]` argument: an array, or its literal text (`'{a,b}'`).
    fn path(&self, i: usize) -> Option<Vec<Option<String>>> {
        if self.is_null(i) {
            return None;
        }
        match self.arrays[i].data_type() {
            DataType::List(_) => {
                let items = self.arrays[i].as_list::<i32>().value(self.row);
                let items = arrow::compute::cast(&items, &DataType::Utf8).ok()?;
                Some(
                    items
                        .as_string::<i32>()
                        .iter()
                        .map(|s| s.map(str::to_string))
                        .collect(),
                )
            }
            _ => self.text(i).map(|t| parse_text_array(&t)),
        }
    }
}

/// PostgreSQL's `text[]` literal (`{a,"b c",NULL}`) as its elements.
fn parse_text_array(literal: &str) -> Vec<Option<String>> {
    let inner = literal.trim().trim_start_matches('{').trim_end_matches('}');
    if inner.trim().is_empty() {
        return Vec::new();
    }
    inner
        .split(',')
        .map(|item| {
            let item = item.trim();
            if item.eq_ignore_ascii_case("null") {
                None
            } else {
                Some(item.trim_matches('"').to_string())
            }
        })
        .collect()
}

struct Builder {
    returns: Returns,
    strings: StringBuilder,
    booleans: BooleanBuilder,
    ints: Int32Builder,
    lists: ListBuilder<StringBuilder>,
}

impl Builder {
    fn new(returns: Returns, rows: usize) -> Self {
        Self {
            returns,
            strings: StringBuilder::with_capacity(rows, rows * 16),
            booleans: BooleanBuilder::with_capacity(rows),
            ints: Int32Builder::with_capacity(rows),
            lists: ListBuilder::new(StringBuilder::new()).with_field(match returns {
                Returns::JsonbList => Arc::new(super::jsonb_field("item")),
                _ => Arc::new(Field::new("item", DataType::Utf8, true)),
            }),
        }
    }

    fn append(&mut self, value: Option<Out>) {
        match value {
            None => match self.returns {
                Returns::Jsonb | Returns::Text => self.strings.append_null(),
                Returns::Boolean => self.booleans.append_null(),
                Returns::Int32 => self.ints.append_null(),
                Returns::JsonbList | Returns::TextList => self.lists.append_null(),
            },
            Some(Out::Json(v)) => self.strings.append_value(text::render(&v)),
            Some(Out::Text(t)) => self.strings.append_value(t),
            Some(Out::Bool(b)) => self.booleans.append_value(b),
            Some(Out::Int(n)) => self.ints.append_value(n),
            Some(Out::List(items)) => self.lists.append_value(items),
        }
    }

    fn finish(mut self) -> ArrayRef {
        match self.returns {
            Returns::Jsonb | Returns::Text => Arc::new(self.strings.finish()),
            Returns::Boolean => Arc::new(self.booleans.finish()),
            Returns::Int32 => Arc::new(self.ints.finish()),
            Returns::JsonbList | Returns::TextList => Arc::new(self.lists.finish()),
        }
    }
}

/// `j -> k`: a field by name, or an array element by an integer index.
fn access(r: &Row) -> Result<Option<Value>> {
    let Some(j) = r.json(0)? else { return Ok(None) };
    Ok(if r.is_integer(1) {
        r.int(1).and_then(|i| text::element(&j, i).cloned())
    } else {
        r.text(1).and_then(|k| text::field(&j, &k).cloned())
    })
}

/// The elements of an array argument (an error for anything else, as in PostgreSQL).
fn array_items(r: &Row) -> Result<Vec<Value>> {
    match r.json(0)? {
        Some(Value::Array(items)) => Ok(items),
        Some(Value::Object(_)) => Err(not_array("extract elements from an object")),
        Some(_) => Err(not_array("extract elements from a scalar")),
        None => Ok(Vec::new()),
    }
}

fn path_of(r: &Row, path: Option<Vec<Option<String>>>) -> Result<Option<Value>> {
    let (Some(j), Some(path)) = (r.json(0)?, path) else {
        return Ok(None);
    };
    Ok(text::at_path(&j, &path).cloned())
}

fn both(r: &Row) -> Result<Option<(Value, Value)>> {
    Ok(match (r.json(0)?, r.json(1)?) {
        (Some(a), Some(b)) => Some((a, b)),
        _ => None,
    })
}

/// `j ? key`: an object's key, an array's string element, or the string itself.
fn has_key(j: &Value, key: &str) -> bool {
    match j {
        Value::Object(o) => o.contains_key(key),
        Value::Array(items) => items.iter().any(|v| v.as_str() == Some(key)),
        Value::String(s) => s == key,
        _ => false,
    }
}

fn build_object(r: &Row) -> Result<Option<Out>> {
    if !r.len().is_multiple_of(2) {
        return Err(EddyError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            "argument list must have even number of elements",
        ));
    }
    let mut object = serde_json::Map::new();
    for pair in (0..r.len()).step_by(2) {
        let Some(key) = r.text(pair) else {
            return Err(EddyError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!("argument {}: key must not be null", pair + 1),
            ));
        };
        object.insert(key, r.value(pair + 1)?);
    }
    Ok(Some(Out::Json(Value::Object(object))))
}

/// `a || b`: objects merge (the right side wins), anything else concatenates as arrays.
fn concat(a: Value, b: Value) -> Value {
    match (a, b) {
        (Value::Object(mut a), Value::Object(b)) => {
            a.extend(b);
            Value::Object(a)
        }
        (a, b) => {
            let items = |v: Value| match v {
                Value::Array(items) => items,
                other => vec![other],
            };
            let mut all = items(a);
            all.extend(items(b));
            Value::Array(all)
        }
    }
}

fn delete_key(j: Value, key: &str) -> Value {
    match j {
        Value::Object(mut o) => {
            o.remove(key);
            Value::Object(o)
        }
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .filter(|v| v.as_str() != Some(key))
                .collect(),
        ),
        other => other,
    }
}

fn delete_index(j: Value, index: i64) -> Value {
    match j {
        Value::Array(mut items) => {
            let at = if index < 0 {
                items.len() as i64 + index
            } else {
                index
            };
            if let Ok(at) = usize::try_from(at)
                && at < items.len()
            {
                items.remove(at);
            }
            Value::Array(items)
        }
        other => other,
    }
}

/// The text a JSON scalar casts from to the type named by argument 1: a boolean for
/// `boolean`, a number otherwise (rounded half to even for integer types).
fn scalar_for_cast(r: &Row) -> Result<Option<Out>> {
    let (Some(value), Some(target)) = (r.json(0)?, r.text(1)) else {
        return Ok(None);
    };
    let integer = matches!(target.as_str(), "smallint" | "integer" | "bigint");
    let text = match (&value, target.as_str()) {
        (Value::Bool(b), "boolean") => b.to_string(),
        (Value::Number(n), _) if target != "boolean" => match (integer, n.as_f64()) {
            (true, Some(f)) if n.as_i64().is_none() => format!("{}", f.round_ties_even()),
            _ => n.to_string(),
        },
        _ => {
            return Err(EddyError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!(
                    "cannot cast jsonb {} to type {target}",
                    text::type_name(&value)
                ),
            ));
        }
    };
    Ok(Some(Out::Text(text)))
}

fn not_array(what: &str) -> EddyError {
    EddyError::new(sqlstate::INVALID_PARAMETER_VALUE, format!("cannot {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_array_literals() {
        assert_eq!(
            parse_text_array("{a, \"b\",NULL}"),
            vec![Some("a".into()), Some("b".into()), None]
        );
        assert!(parse_text_array("{}").is_empty());
    }

    #[test]
    fn concatenation_and_deletion() {
        let v = |s: &str| text::parse(s).unwrap();
        assert_eq!(
            concat(v(r#"{"a":1}"#), v(r#"{"a":2,"b":3}"#)),
            v(r#"{"a":2,"b":3}"#)
        );
        assert_eq!(concat(v("[1]"), v("2")), v("[1,2]"));
        assert_eq!(delete_key(v(r#"{"a":1,"b":2}"#), "a"), v(r#"{"b":2}"#));
        assert_eq!(delete_index(v("[1,2,3]"), -1), v("[1,2]"));
    }
}
