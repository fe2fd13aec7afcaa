//! `encode(bytes, 'escape')` and `decode(text, 'escape')`, PostgreSQL's escape format
//! for bytes, beside DataFusion's `base64` and `hex` (which these hand every other call
//! to): a zero byte or one with the high bit set is written `\nnn` in octal, a
//! backslash `\\`, every other byte as itself. `base64` output is padded, as
//! PostgreSQL's is. A quoted literal given to `encode` is
//! read as bytea input (`encode('\xc3b1', 'hex')`), as PostgreSQL types it.

use arrow::array::{Array, ArrayRef, AsArray, BinaryBuilder, StringBuilder};
use arrow::compute::cast;
use arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};
use datafusion::sql::sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Value, VisitorMut,
};
use std::ops::ControlFlow;
use std::sync::Arc;

/// `encode` and `decode`, each wrapping DataFusion's.
pub fn udfs() -> Vec<ScalarUDF> {
    [
        datafusion::functions::encoding::encode(),
        datafusion::functions::encoding::decode(),
    ]
    .into_iter()
    .map(|inner| {
        ScalarUDF::new_from_impl(EscapeFormat {
            signature: inner.signature().clone(),
            inner,
        })
    })
    .collect()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct EscapeFormat {
    inner: Arc<ScalarUDF>,
    signature: Signature,
}

impl EscapeFormat {
    fn encodes(&self) -> bool {
        self.inner.name() == "encode"
    }
}

impl ScalarUDFImpl for EscapeFormat {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn invoke_with_args(&self, mut args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let format = match &args.args[1] {
            ColumnarValue::Scalar(ScalarValue::Utf8(Some(f))) => f.to_ascii_lowercase(),
            _ => String::new(),
        };
        if format == "base64" && self.encodes() {
            // PostgreSQL's base64 is padded (DataFusion's `base64pad`).
            args.args[1] = ColumnarValue::Scalar(ScalarValue::Utf8(Some("base64pad".into())));
        }
        if format != "escape" {
            return self.inner.invoke_with_args(args);
        }
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let values = args.args[0].to_array(args.number_rows)?;
        let out: ArrayRef = if self.encodes() {
            let bytes = cast(&values, &DataType::Binary)?;
            let bytes = bytes.as_binary::<i32>();
            let mut out = StringBuilder::with_capacity(bytes.len(), bytes.value_data().len());
            for value in bytes.iter() {
                out.append_option(value.map(escape_bytes));
            }
            Arc::new(out.finish())
        } else {
            let texts = cast(&values, &DataType::Utf8)?;
            let texts = texts.as_string::<i32>();
            let mut out = BinaryBuilder::with_capacity(texts.len(), texts.value_data().len());
            for text in texts.iter() {
                match text {
                    Some(text) => out.append_value(
                        super::pg_semantics::parse_bytea_escape(text)
                            .map_err(crate::error::EddyError::into_datafusion)?,
                    ),
                    None => out.append_null(),
                }
            }
            Arc::new(out.finish())
        };
        let out = cast(&out, args.return_field.data_type())?;
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

/// Bytes in the escape format.
fn escape_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            0 | 0x80..=0xff => out.push_str(&format!("\\{b:03o}")),
            _ => out.push(b as char),
        }
    }
    out
}

/// `encode('<literal>', ...)`: the literal is bytea input, as PostgreSQL reads it.
pub struct EncodedLiterals;

impl VisitorMut for EncodedLiterals {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let Expr::Function(f) = expr else {
            return ControlFlow::Continue(());
        };
        if !f.name.to_string().eq_ignore_ascii_case("encode") {
            return ControlFlow::Continue(());
        }
        let FunctionArguments::List(list) = &mut f.args else {
            return ControlFlow::Continue(());
        };
        if let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(value))) = list.args.first_mut()
            && let Expr::Value(v) = value
            && matches!(v.value, Value::SingleQuotedString(_))
        {
            *value = super::sql_rewrite::cast_to(
                value.clone(),
                datafusion::sql::sqlparser::ast::DataType::Bytea,
            );
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_format_round_trips() {
        let bytes = [0xc3, 0xb1, b'a', b'\\', 0, b'\n'];
        let text = escape_bytes(&bytes);
        assert_eq!(text, "\\303\\261a\\\\\\000\n");
        assert_eq!(
            crate::session::pg_semantics::parse_bytea_escape(&text).unwrap(),
            bytes
        );
    }
}
