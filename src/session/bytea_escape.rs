//! `encode(bytes, 'escape')` and `decode(text, 'escape')`, PostgreSQL's escape format
//! for bytes, beside DataFusion's `base64` and `hex` (which these hand every other call
//! to): a zero byte or one with the high bit set is written `\nnn` in octal, a
//! backslash `\\`, every other byte as itself. `base64` output is padded, as
//! PostgreSQL's is; `base64` input is read as PostgreSQL reads it (whitespace skipped,
//! unused low bits of the last symbol ignored: `MTIz/A+=`). A quoted literal given to
//! `encode` or `convert_from` is read as bytea input (`encode('\xc3b1', 'hex')`), as
//! PostgreSQL types it.
//!
//! `convert_from(bytes, 'UTF8')` and `convert_to(text, 'UTF8')` turn bytes into text and
//! back; UTF8 (also spelled `utf-8`, in any case) is the only encoding Eddy has.

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
        let decodes_base64 = format == "base64" && !self.encodes();
        if format != "escape" && !decodes_base64 {
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
                let decoded = match text {
                    Some(text) if decodes_base64 => decode_base64(text),
                    Some(text) => super::pg_semantics::parse_bytea_escape(text),
                    None => {
                        out.append_null();
                        continue;
                    }
                };
                out.append_value(decoded.map_err(crate::error::EddyError::into_datafusion)?);
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

/// Base64 as PostgreSQL's `decode` reads it: whitespace is skipped, `=` pads the last
/// group, and bits of the last symbol beyond the last whole byte are ignored.
fn decode_base64(text: &str) -> crate::error::Result<Vec<u8>> {
    let invalid = |message: String| {
        crate::error::EddyError::new(crate::error::sqlstate::INVALID_PARAMETER_VALUE, message)
    };
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut bits, mut bit_count, mut symbols, mut padding) = (0u32, 0u32, 0usize, 0usize);
    for c in text.chars() {
        let value = match c {
            'A'..='Z' => c as u32 - 'A' as u32,
            'a'..='z' => c as u32 - 'a' as u32 + 26,
            '0'..='9' => c as u32 - '0' as u32 + 52,
            '+' => 62,
            '/' => 63,
            '=' => {
                padding += 1;
                continue;
            }
            ' ' | '\t' | '\n' | '\r' => continue,
            other => {
                return Err(invalid(format!(
                    "invalid symbol \"{other}\" found while decoding base64 sequence"
                )));
            }
        };
        if padding > 0 {
            return Err(invalid("invalid base64 end sequence".into()));
        }
        symbols += 1;
        bits = (bits << 6) | value;
        bit_count += 6;
        if bit_count >= 8 {
            bit_count -= 8;
            out.push((bits >> bit_count) as u8);
            bits &= (1 << bit_count) - 1;
        }
    }
    if (symbols + padding) % 4 != 0 || padding > 2 {
        return Err(invalid("invalid base64 end sequence".into()));
    }
    Ok(out)
}

/// `encode('<literal>', ...)`, `convert_from('<literal>', ...)`: the literal is bytea
/// input, as PostgreSQL reads it.
pub struct EncodedLiterals;

impl VisitorMut for EncodedLiterals {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let Expr::Function(f) = expr else {
            return ControlFlow::Continue(());
        };
        let name = f.name.to_string();
        if !name.eq_ignore_ascii_case("encode") && !name.eq_ignore_ascii_case("convert_from") {
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

/// `convert_from(bytes, encoding)` and `convert_to(text, encoding)`.
pub fn conversion_udfs() -> Vec<ScalarUDF> {
    [true, false]
        .into_iter()
        .map(|to_text| {
            let input = if to_text {
                DataType::Binary
            } else {
                DataType::Utf8
            };
            ScalarUDF::new_from_impl(Conversion {
                to_text,
                input,
                signature: Signature::user_defined(datafusion::logical_expr::Volatility::Immutable),
            })
        })
        .collect()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Conversion {
    /// `convert_from` (bytes to text), else `convert_to`.
    to_text: bool,
    /// What the first argument is converted from.
    input: DataType,
    signature: Signature,
}

/// Checks an encoding name: UTF8 is the only one.
fn check_encoding(name: &str) -> crate::error::Result<()> {
    let normalized = name.trim().to_ascii_uppercase().replace('-', "");
    if normalized == "UTF8" || normalized == "UNICODE" {
        return Ok(());
    }
    Err(crate::error::EddyError::not_supported(format!(
        "encoding \"{name}\" is not supported; Eddy converts only UTF8"
    )))
}

impl ScalarUDFImpl for Conversion {
    fn name(&self) -> &str {
        if self.to_text {
            "convert_from"
        } else {
            "convert_to"
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        if arg_types.len() != 2 {
            return datafusion::common::plan_err!(
                "{} takes a value and an encoding name",
                self.name()
            );
        }
        Ok(vec![self.input.clone(), DataType::Utf8])
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(if self.to_text {
            DataType::Utf8
        } else {
            DataType::Binary
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let scalar = crate::plan_helpers::all_scalar(&args.args);
        let encodings = args.args[1].to_array(rows)?;
        let encodings = cast(&encodings, &DataType::Utf8)?;
        let encodings = encodings.as_string::<i32>();
        for encoding in encodings.iter().flatten() {
            check_encoding(encoding).map_err(crate::error::EddyError::into_datafusion)?;
        }
        let values = args.args[0].to_array(rows)?;
        let out: ArrayRef = if self.to_text {
            let bytes = cast(&values, &DataType::Binary)?;
            let bytes = bytes.as_binary::<i32>();
            let mut out = StringBuilder::with_capacity(rows, bytes.value_data().len());
            for (row, value) in bytes.iter().enumerate() {
                match value {
                    Some(value) if encodings.is_valid(row) => {
                        let text = std::str::from_utf8(value).map_err(|_| {
                            crate::error::EddyError::new(
                                "22021",
                                "invalid byte sequence for encoding \"UTF8\"",
                            )
                            .into_datafusion()
                        })?;
                        out.append_value(text);
                    }
                    _ => out.append_null(),
                }
            }
            Arc::new(out.finish())
        } else {
            let texts = cast(&values, &DataType::Utf8)?;
            let texts = texts.as_string::<i32>();
            let mut out = BinaryBuilder::with_capacity(rows, texts.value_data().len());
            for (row, value) in texts.iter().enumerate() {
                match value {
                    Some(value) if encodings.is_valid(row) => out.append_value(value.as_bytes()),
                    _ => out.append_null(),
                }
            }
            Arc::new(out.finish())
        };
        crate::plan_helpers::columnar_result(out, scalar)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_read_as_postgresql_reads_it() {
        assert_eq!(decode_base64("MTIzAAE=").unwrap(), b"123\0\x01");
        // Unused low bits of the last symbol are ignored.
        assert_eq!(
            decode_base64("MTIz/A+=").unwrap(),
            vec![0x31, 0x32, 0x33, 0xfc, 0x0f]
        );
        assert_eq!(decode_base64("MTIz\nAAE=").unwrap(), b"123\0\x01");
        assert!(decode_base64("MTIzA").is_err());
        assert!(decode_base64("MT=z").is_err());
        assert!(decode_base64("MT*z").is_err());
    }

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
