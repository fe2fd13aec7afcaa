//! `x [NOT] SIMILAR TO pattern [ESCAPE e]`, PostgreSQL's: the pattern matches the whole
//! string, `%` is any text and `_` any character, `|`, `*`, `+`, `?`, `{m,n}`, `( )`
//! and `[ ]` are as in regular expressions, and anything else (`.`, `^`, `$`) is itself.
//! DataFusion instead searches for the pattern as a regular expression. The SQL rewrite
//! makes it `regexp_like(x, eddy_similar_to_regex(pattern))`, whose second argument is
//! PostgreSQL's translation of the pattern (it also works for patterns in columns).

use arrow::array::{Array, ArrayRef, StringArray};
use arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use std::sync::Arc;

pub const SIMILAR_TO_REGEX: &str = "eddy_similar_to_regex";

pub fn udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(SimilarToRegex {
        signature: Signature::variadic_any(Volatility::Immutable),
    })
}

/// The anchored regular expression of a `SIMILAR TO` pattern with escape `escape`
/// (`None`: `ESCAPE ''`, no escape character).
pub fn translate(pattern: &str, escape: Option<char>) -> String {
    let mut out = String::from("^(?:");
    let mut chars = pattern.chars();
    let mut in_brackets = false;
    while let Some(c) = chars.next() {
        if Some(c) == escape {
            match chars.next() {
                Some(next) => out.push_str(&regex_literal(next)),
                None => out.push_str(&regex_literal(c)),
            }
            continue;
        }
        if in_brackets {
            if c == ']' {
                in_brackets = false;
            }
            out.push(c);
            continue;
        }
        match c {
            '%' => out.push_str(".*"),
            '_' => out.push('.'),
            '[' => {
                in_brackets = true;
                out.push(c);
            }
            '|' | '*' | '+' | '?' | '{' | '}' | '(' | ')' | ',' => out.push(c),
            other => out.push_str(&regex_literal(other)),
        }
    }
    out.push_str(")$");
    out
}

/// A character matched as itself.
fn regex_literal(c: char) -> String {
    if c.is_alphanumeric() || c == ' ' {
        c.to_string()
    } else {
        format!("\\x{{{:x}}}", c as u32)
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct SimilarToRegex {
    signature: Signature,
}

impl ScalarUDFImpl for SimilarToRegex {
    fn name(&self) -> &str {
        SIMILAR_TO_REGEX
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    /// `(pattern [, escape])`.
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let escape = match args.args.get(1) {
            Some(ColumnarValue::Scalar(ScalarValue::Utf8(Some(e)))) => e.chars().next(),
            Some(_) => None,
            None => Some('\\'),
        };
        let patterns = args.args[0].to_array(args.number_rows)?;
        let patterns = arrow::compute::cast(&patterns, &DataType::Utf8)?;
        let patterns = patterns
            .as_any()
            .downcast_ref::<StringArray>()
            .expect("cast to Utf8");
        let regexes: StringArray = (0..patterns.len())
            .map(|i| (!patterns.is_null(i)).then(|| translate(patterns.value(i), escape)))
            .collect();
        let array: ArrayRef = Arc::new(regexes);
        Ok(match &args.args[0] {
            ColumnarValue::Scalar(_) => {
                ColumnarValue::Scalar(ScalarValue::try_from_array(&array, 0)?)
            }
            ColumnarValue::Array(_) => ColumnarValue::Array(array),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::translate;

    fn matches(text: &str, pattern: &str) -> bool {
        regex::Regex::new(&translate(pattern, Some('\\')))
            .unwrap()
            .is_match(text)
    }

    #[test]
    fn patterns_match_as_in_postgresql() {
        // PostgreSQL's documentation's examples.
        assert!(matches("abc", "abc"));
        assert!(!matches("abc", "a"));
        assert!(matches("abc", "%(b|d)%"));
        assert!(!matches("abc", "(b|c)%"));
        assert!(matches("-abc-", "%abc-%"));
        assert!(!matches("xabcy", "%abc-%"));
        assert!(matches("a.c", "a.c"));
        assert!(!matches("abc", "a.c"));
        assert!(matches("abc", "a_c"));
        assert!(matches("a_c", "a\\_c"));
        assert!(!matches("abc", "a\\_c"));
        assert!(matches("aaa", "a{2,3}"));
        assert!(matches("b", "[a-c]"));
        assert!(matches("$^", "$^"));
    }
}
