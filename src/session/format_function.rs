//! `format(formatstr, args...)`, PostgreSQL's: `%s` an argument's text (NULL as nothing),
//! `%I` quoted as an identifier where needed, `%L` quoted as a literal (NULL as `NULL`),
//! `%%` a percent sign, and `%n$s` the `n`-th argument. Arguments are written with their
//! type's output (`t` for true, `1 day 02:00:00` for an interval), as PostgreSQL does.

use arrow::array::{Array, ArrayRef, StringArray, StringBuilder};
use arrow::datatypes::DataType;
use datafusion::common::{Result, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use std::sync::Arc;

pub fn udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(FormatFunction {
        signature: Signature::variadic_any(Volatility::Stable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct FormatFunction {
    signature: Signature,
}

impl ScalarUDFImpl for FormatFunction {
    fn name(&self) -> &str {
        "format"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args.first() {
            Some(DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null) => {
                Ok(DataType::Utf8)
            }
            Some(_) => plan_err!("format's first argument is its format string (text)"),
            None => plan_err!("format needs a format string"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let texts: Vec<StringArray> = args
            .args
            .iter()
            .map(|a| {
                let array: ArrayRef = a.to_array(rows)?;
                crate::pg_text::text_column(&array)
                    .map_err(crate::error::EddyError::into_datafusion)
            })
            .collect::<Result<_>>()?;
        let mut out = StringBuilder::new();
        for row in 0..rows {
            if texts[0].is_null(row) {
                out.append_null();
                continue;
            }
            let values: Vec<Option<&str>> = texts[1..]
                .iter()
                .map(|t| (!t.is_null(row)).then(|| t.value(row)))
                .collect();
            out.append_value(format_one(texts[0].value(row), &values)?);
        }
        let array: ArrayRef = Arc::new(out.finish());
        Ok(
            if args
                .args
                .iter()
                .all(|a| matches!(a, ColumnarValue::Scalar(_)))
            {
                ColumnarValue::Scalar(datafusion::common::ScalarValue::try_from_array(&array, 0)?)
            } else {
                ColumnarValue::Array(array)
            },
        )
    }
}

/// One format string applied to one row's arguments.
fn format_one(format: &str, args: &[Option<&str>]) -> Result<String> {
    let mut out = String::new();
    let mut chars = format.chars().peekable();
    let mut next = 0usize;
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        // `%n$` picks the argument.
        let mut digits = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            digits.push(*d);
            chars.next();
        }
        let position = if digits.is_empty() {
            None
        } else if chars.next_if_eq(&'$').is_some() {
            Some(digits.parse::<usize>().unwrap_or(0))
        } else {
            return exec_err!("unrecognized format() type specifier \"{digits}\"");
        };
        let Some(kind) = chars.next() else {
            return exec_err!("unterminated format() type specifier");
        };
        if kind == '%' && position.is_none() {
            out.push('%');
            continue;
        }
        let index = match position {
            Some(0) => {
                return exec_err!("format specifies argument 0, but arguments are numbered from 1");
            }
            Some(n) => n - 1,
            None => next,
        };
        next = index + 1;
        let Some(value) = args.get(index) else {
            return exec_err!("too few arguments for format()");
        };
        match kind {
            's' => out.push_str(value.unwrap_or("")),
            'I' => match value {
                Some(v) => out.push_str(&quote_identifier(v)),
                None => return exec_err!("null values cannot be formatted as an SQL identifier"),
            },
            'L' => match value {
                Some(v) => out.push_str(&format!("'{}'", v.replace('\'', "''"))),
                None => out.push_str("NULL"),
            },
            other => return exec_err!("unrecognized format() type specifier \"{other}\""),
        }
    }
    Ok(out)
}

/// Whether an identifier reads the same unquoted: lower case letters, digits and
/// underscores, not starting with a digit.
pub(super) fn is_plain_identifier(name: &str) -> bool {
    name.chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// An identifier as PostgreSQL's `quote_ident` writes it: bare when it is plain
/// ([`is_plain_identifier`]), else in double quotes.
fn quote_identifier(name: &str) -> String {
    if is_plain_identifier(name) {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

#[cfg(test)]
mod tests {
    use super::format_one;

    #[test]
    fn formats_as_postgresql() {
        let f = |fmt: &str, args: &[Option<&str>]| format_one(fmt, args).unwrap();
        assert_eq!(f("Hello %s", &[Some("World")]), "Hello World");
        assert_eq!(
            f(
                "Testing %s, %s, %s, %%",
                &[Some("one"), Some("two"), Some("three")]
            ),
            "Testing one, two, three, %"
        );
        assert_eq!(f("%2$s %1$s %s", &[Some("a"), Some("b")]), "b a b");
        assert_eq!(
            f(
                "INSERT INTO %I VALUES (%L, %L)",
                &[Some("My Table"), Some("it's"), None]
            ),
            "INSERT INTO \"My Table\" VALUES ('it''s', NULL)"
        );
        assert_eq!(f("[%s]", &[None]), "[]");
        assert!(format_one("%s %s", &[Some("a")]).is_err());
        assert!(format_one("%x", &[Some("a")]).is_err());
    }
}
