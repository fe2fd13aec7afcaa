//! `jsonb` values as text, the way PostgreSQL reads and prints them.
//!
//! Eddy stores a `jsonb` value as its canonical text in an Arrow `Utf8` column. Canonical
//! means what PostgreSQL's `jsonb_out` prints: object keys sorted (shorter keys first,
//! then bytewise), a repeated key keeping its last value, `", "` between elements and
//! `": "` after keys, no other whitespace. Every value entering a `jsonb` column or
//! coming out of a `jsonb` function is in this form, so equal values compare equal as text.

use serde_json::{Map, Value};
use std::fmt::Write;

/// Parses JSON text; the error is PostgreSQL's wording for invalid `jsonb` input.
pub fn parse(text: &str) -> Result<Value, String> {
    serde_json::from_str(text)
        .map_err(|e| format!("invalid input syntax for type json: {e} (in {text:?})"))
}

/// The canonical text of `value`.
pub fn render(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

/// The canonical text of JSON text, or the parse error.
pub fn normalize(text: &str) -> Result<String, String> {
    parse(text).map(|v| render(&v))
}

/// `jsonb_pretty`: one element per line, indented by four spaces, as PostgreSQL prints.
pub fn pretty(value: &Value) -> String {
    let mut out = String::new();
    write_pretty(&mut out, value, 0);
    out
}

/// Object entries in `jsonb`'s key order: by length, then bytewise.
pub fn sorted_entries(object: &Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut entries: Vec<_> = object.iter().collect();
    entries.sort_by(|a, b| a.0.len().cmp(&b.0.len()).then_with(|| a.0.cmp(b.0)));
    entries
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(object) => {
            out.push('{');
            for (i, (key, item)) in sorted_entries(object).into_iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_string(out, key);
                out.push_str(": ");
                write_value(out, item);
            }
            out.push('}');
        }
        Value::String(s) => write_string(out, s),
        scalar => {
            let _ = write!(out, "{scalar}");
        }
    }
}

fn write_pretty(out: &mut String, value: &Value, depth: usize) {
    let indent = |out: &mut String, depth: usize| out.push_str(&"    ".repeat(depth));
    match value {
        Value::Array(items) if !items.is_empty() => {
            out.push_str("[\n");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(",\n");
                }
                indent(out, depth + 1);
                write_pretty(out, item, depth + 1);
            }
            out.push('\n');
            indent(out, depth);
            out.push(']');
        }
        Value::Object(object) if !object.is_empty() => {
            out.push_str("{\n");
            for (i, (key, item)) in sorted_entries(object).into_iter().enumerate() {
                if i > 0 {
                    out.push_str(",\n");
                }
                indent(out, depth + 1);
                write_string(out, key);
                out.push_str(": ");
                write_pretty(out, item, depth + 1);
            }
            out.push('\n');
            indent(out, depth);
            out.push('}');
        }
        other => write_value(out, other),
    }
}

fn write_string(out: &mut String, s: &str) {
    // serde_json escapes exactly what JSON requires, as PostgreSQL does.
    out.push_str(&Value::String(s.to_string()).to_string());
}

/// PostgreSQL's name for the kind of `value` (`jsonb_typeof`).
pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `a @> b`: `a` contains `b` as PostgreSQL defines it (objects: every key of `b` in
/// `a` with a contained value; arrays: every element of `b` contained in some element
/// of `a`, and an array contains a scalar it has as an element at the top level).
pub fn contains(a: &Value, b: &Value) -> bool {
    contains_at(a, b, true)
}

fn contains_at(a: &Value, b: &Value, top: bool) -> bool {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => b
            .iter()
            .all(|(k, bv)| a.get(k).is_some_and(|av| contains_at(av, bv, false))),
        (Value::Array(a), Value::Array(b)) => b.iter().all(|bv| match bv {
            Value::Array(_) | Value::Object(_) => a.iter().any(|av| contains_at(av, bv, false)),
            scalar => a.iter().any(|av| av == scalar),
        }),
        (Value::Array(a), scalar) if top && !scalar.is_array() && !scalar.is_object() => {
            a.iter().any(|av| av == scalar)
        }
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (a, b) => a == b,
    }
}

/// `j -> key` for an object, `j -> index` for an array (negative counts from the end).
pub fn field<'a>(value: &'a Value, key: &str) -> Option<&'a Value> {
    value.as_object().and_then(|o| o.get(key))
}

pub fn element(value: &Value, index: i64) -> Option<&Value> {
    let items = value.as_array()?;
    let index = if index < 0 {
        items.len() as i64 + index
    } else {
        index
    };
    usize::try_from(index).ok().and_then(|i| items.get(i))
}

/// `j #> path`: each step is a key for an object, an integer index for an array.
pub fn at_path<'a>(value: &'a Value, path: &[Option<String>]) -> Option<&'a Value> {
    let mut current = value;
    for step in path {
        let step = step.as_deref()?;
        current = match current {
            Value::Object(o) => o.get(step)?,
            Value::Array(_) => element(current, step.trim().parse().ok()?)?,
            _ => return None,
        };
    }
    Some(current)
}

/// `->>`'s text of a value: strings unquoted, JSON `null` as SQL NULL, the rest as
/// canonical JSON text.
pub fn as_text(value: &Value) -> Option<String> {
    match value {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(render(other)),
    }
}

/// `jsonb_strip_nulls`: object fields whose value is `null` removed, at every depth.
pub fn strip_nulls(value: &Value) -> Value {
    match value {
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip_nulls).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_text_is_postgres_jsonb_out() {
        assert_eq!(
            normalize(r#"{"foo":"bar","a":[1,2,{"bb":null,"c":true}],"a":3}"#).unwrap(),
            r#"{"a": 3, "foo": "bar"}"#
        );
        assert_eq!(normalize(" [1 ,\"x\\n\"] ").unwrap(), r#"[1, "x\n"]"#);
        assert_eq!(normalize("null").unwrap(), "null");
        assert!(
            normalize("{1}")
                .unwrap_err()
                .contains("invalid input syntax")
        );
    }

    #[test]
    fn containment_and_paths() {
        let a = parse(r#"{"a": 1, "b": [1, 2, {"c": 3}]}"#).unwrap();
        assert!(contains(&a, &parse(r#"{"b": [2]}"#).unwrap()));
        assert!(contains(&a, &parse(r#"{"b": [{"c": 3}]}"#).unwrap()));
        assert!(!contains(&a, &parse(r#"{"a": 2}"#).unwrap()));
        assert!(contains(&parse("[1, 2]").unwrap(), &parse("1").unwrap()));
        let path = [
            Some("b".to_string()),
            Some("-1".to_string()),
            Some("c".into()),
        ];
        assert_eq!(at_path(&a, &path), Some(&Value::from(3)));
        assert_eq!(
            element(&parse("[1,2,3]").unwrap(), -1),
            Some(&Value::from(3))
        );
        assert_eq!(as_text(&Value::from("x")), Some("x".into()));
        assert_eq!(
            pretty(&parse(r#"{"a":[1]}"#).unwrap()),
            "{\n    \"a\": [\n        1\n    ]\n}"
        );
    }
}
