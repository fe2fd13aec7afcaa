//! The SQL types a table column can have, and how each maps to Arrow and to PostgreSQL.
//!
//! A column's declared type is kept in the catalog as a [`SqlType`] so that `\d t` shows what
//! the user wrote (`character varying(20)`, `numeric(10,2)`), while execution uses the Arrow
//! type derived from it.

use crate::error::{EddyError, Result};
use arrow::datatypes::{DataType, Field, IntervalUnit, TimeUnit, i256};
use datafusion::sql::sqlparser::ast::{
    ArrayElemTypeDef, CharacterLength, DataType as AstType, ExactNumberInfo, TimezoneInfo,
};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Field metadata key naming the PostgreSQL type where the Arrow type alone is ambiguous
/// (`jsonb` is stored as Arrow `Utf8`).
pub const PG_TYPE_METADATA: &str = "eddy.pg_type";

/// Precision and scale used for `numeric` declared without them.
pub const DEFAULT_NUMERIC_PRECISION: u8 = 38;
pub const DEFAULT_NUMERIC_SCALE: i8 = 10;

/// Whether decimals of this type are unconstrained `numeric` or computed from it:
/// the widest precision with at least the default scale (a sum keeps the scale, a product
/// or quotient widens it). PostgreSQL keeps each such value's own scale (`1.5` stays
/// `1.5`); Arrow gives a column one scale, so these show their value without the
/// trailing zeros the column's scale added.
pub fn is_unconstrained_numeric(precision: u8, scale: i8) -> bool {
    precision == DEFAULT_NUMERIC_PRECISION && scale >= DEFAULT_NUMERIC_SCALE
}

/// The value and scale a decimal is shown with: for [`is_unconstrained_numeric`] types,
/// without trailing fractional zeros; otherwise as stored.
pub fn display_decimal(value: i128, precision: u8, scale: i8) -> (i128, i8) {
    if !is_unconstrained_numeric(precision, scale) {
        return (value, scale);
    }
    let (mut value, mut scale) = (value, scale);
    while scale > 0 && value % 10 == 0 {
        value /= 10;
        scale -= 1;
    }
    (value, scale)
}

/// The type of an average of integers or decimals: RisingWave divides the exact sum by
/// the count as a 96-bit decimal (at most 28 fractional digits), and keeps the scale its
/// division leaves, which is not always the shortest (`avg` of 2 and 3 is `2.50`). A
/// column has one scale in Arrow, so these are stored at scale 28 and
/// [`display_decimal256`] finds the scale RisingWave shows, which depends on the scale
/// of the sum: the precision carries it (76 for a sum of integers, 76 - s for a sum of
/// scale s), always leaving room for the 38 - s integer digits such a sum has.
pub const fn average_type(sum_scale: i8) -> DataType {
    DataType::Decimal256(AVERAGE_PRECISION - sum_scale as u8, AVERAGE_SCALE)
}
pub const INTEGER_AVERAGE_TYPE: DataType = average_type(0);
const AVERAGE_PRECISION: u8 = 76;
pub const AVERAGE_SCALE: i8 = 28;

/// The scale of the sum an [`average_type`] divided, `None` for other types.
fn averaged_sum_scale(precision: u8, scale: i8) -> Option<i8> {
    (scale == AVERAGE_SCALE && (48..=AVERAGE_PRECISION).contains(&precision))
        .then(|| (AVERAGE_PRECISION - precision) as i8)
}

/// The value and scale a 256-bit decimal is shown with, `None` when the value needs more
/// than 128 bits. Averages ([`average_type`]) get RisingWave's scale; other wide decimals
/// (arithmetic on them) are shown as 128-bit ones are.
pub fn display_decimal256(value: i256, precision: u8, scale: i8) -> Option<(i128, i8)> {
    let sum_scale = averaged_sum_scale(precision, scale);
    let ten = i256::from_i128(10);
    let (mut value, mut scale) = (value, scale);
    // As for 128-bit decimals: a scale this wide came from unconstrained `numeric`.
    let strip = sum_scale.is_some() || scale >= DEFAULT_NUMERIC_SCALE;
    while strip && scale > 0 && value.wrapping_rem(ten) == i256::ZERO {
        value = value.wrapping_div(ten);
        scale -= 1;
    }
    let mut value = value.to_i128()?;
    if let Some(sum_scale) = sum_scale {
        if scale < sum_scale {
            // An exact quotient keeps the sum's scale (`2.00 / 2` is `1.00`).
            value = value.checked_mul(10i128.checked_pow((sum_scale - scale) as u32)?)?;
            scale = sum_scale;
        } else if keeps_one_trailing_zero(value, scale - sum_scale, scale) {
            value = value.checked_mul(10)?;
            scale += 1;
        }
    }
    Some((value, scale))
}

/// Whether RisingWave's division leaves one trailing zero on a quotient whose shortest
/// form has `scale` fractional digits. It extends a quotient with a remainder by nine
/// digits at a time, then strips trailing zeros by 10^8 (only while the low 32 bits are
/// zero), then once each by 10^4, 10^2 and 10: of the eight zeros a one-digit tail gets,
/// one is left. An exact quotient is never extended. `added` is how many digits the
/// shortest form has beyond the sum's scale.
fn keeps_one_trailing_zero(shortest: i128, added: i8, scale: i8) -> bool {
    // A quotient that filled the 96 bits or the 28 digits was rounded, not extended.
    const DECIMAL_MANTISSA_LIMIT: i128 = 1 << 96;
    if added <= 0
        || added % 9 != 1
        || scale >= AVERAGE_SCALE
        || shortest.unsigned_abs() * 10 >= DECIMAL_MANTISSA_LIMIT as u128
    {
        return false;
    }
    match shortest.checked_mul(100_000_000) {
        Some(extended) => extended & 0xffff_ffff != 0,
        None => true,
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SqlType {
    Boolean,
    SmallInt,
    Int,
    BigInt,
    Real,
    Double,
    Numeric {
        precision: Option<u8>,
        scale: Option<i8>,
    },
    Varchar(Option<u64>),
    Text,
    Date,
    Time,
    Timestamp,
    Timestamptz,
    Interval,
    Bytea,
    Jsonb,
    /// `t[]`: an Arrow list of the element type.
    Array(Box<SqlType>),
    /// `struct<name type, ...>` (RisingWave's composite type): an Arrow struct.
    Struct(Vec<(String, SqlType)>),
}

impl SqlType {
    /// Maps a type as written in SQL to an Eddy column type.
    pub fn from_ast(ty: &AstType) -> Result<Self> {
        use AstType::*;
        let t = match ty {
            Bool | Boolean => SqlType::Boolean,
            SmallInt(_) | Int2(_) => SqlType::SmallInt,
            Int(_) | Integer(_) | Int4(_) => SqlType::Int,
            BigInt(_) | Int8(_) => SqlType::BigInt,
            Real | Float4 => SqlType::Real,
            Double(_) | DoublePrecision | Float8 | Float64 => SqlType::Double,
            Float(info) => match info {
                ExactNumberInfo::Precision(p) if *p <= 24 => SqlType::Real,
                _ => SqlType::Double,
            },
            Numeric(info) | Decimal(info) | Dec(info) => {
                let (precision, scale) = match info {
                    ExactNumberInfo::None => (None, None),
                    ExactNumberInfo::Precision(p) => (Some(*p), Some(0)),
                    ExactNumberInfo::PrecisionAndScale(p, s) => (Some(*p), Some(*s)),
                };
                if let Some(p) = precision
                    && !(1..=38).contains(&p)
                {
                    return Err(EddyError::new(
                        "22023",
                        format!("NUMERIC precision {p} must be between 1 and 38"),
                    ));
                }
                if let (Some(p), Some(s)) = (precision, scale)
                    && (s < 0 || s as u64 > p)
                {
                    return Err(EddyError::new(
                        "22023",
                        format!("NUMERIC scale {s} must be between 0 and precision {p}"),
                    ));
                }
                SqlType::Numeric {
                    precision: precision.map(|p| p as u8),
                    scale: scale.map(|s| s as i8),
                }
            }
            Varchar(len) | CharacterVarying(len) | CharVarying(len) | Nvarchar(len) => {
                SqlType::Varchar(char_len(len))
            }
            Char(_) | Character(_) | Text | String(_) => SqlType::Text,
            Date => SqlType::Date,
            Time(_, tz) => match tz {
                TimezoneInfo::None | TimezoneInfo::WithoutTimeZone => SqlType::Time,
                _ => {
                    return Err(EddyError::not_supported(
                        "type time with time zone is not supported",
                    ));
                }
            },
            Timestamp(_, tz) => match tz {
                TimezoneInfo::None | TimezoneInfo::WithoutTimeZone => SqlType::Timestamp,
                TimezoneInfo::WithTimeZone | TimezoneInfo::Tz => SqlType::Timestamptz,
            },
            Interval { .. } => SqlType::Interval,
            Bytea => SqlType::Bytea,
            JSONB | JSON => SqlType::Jsonb,
            Array(
                ArrayElemTypeDef::SquareBracket(inner, _)
                | ArrayElemTypeDef::AngleBracket(inner)
                | ArrayElemTypeDef::Parenthesis(inner),
            ) => SqlType::Array(Box::new(SqlType::from_ast(inner)?)),
            Custom(name, _)
                if name.0.len() == 1
                    && name.0[0]
                        .as_ident()
                        .is_some_and(|i| i.value.starts_with("struct<")) =>
            {
                let text = &name.0[0].as_ident().expect("checked").value;
                SqlType::parse_struct(text)?
            }
            Custom(name, _) => {
                let n = name.to_string().to_ascii_lowercase();
                match n.as_str() {
                    "timestamptz" => SqlType::Timestamptz,
                    "serial" | "int4" => SqlType::Int,
                    "bigserial" => SqlType::BigInt,
                    "string" => SqlType::Text,
                    _ => {
                        return Err(EddyError::new(
                            "42704",
                            format!("type \"{n}\" does not exist"),
                        ));
                    }
                }
            }
            other => {
                return Err(EddyError::not_supported(format!(
                    "column type {other} is not supported"
                )));
            }
        };
        Ok(t)
    }

    pub fn to_arrow(&self) -> DataType {
        match self {
            SqlType::Boolean => DataType::Boolean,
            SqlType::SmallInt => DataType::Int16,
            SqlType::Int => DataType::Int32,
            SqlType::BigInt => DataType::Int64,
            SqlType::Real => DataType::Float32,
            SqlType::Double => DataType::Float64,
            // Only computed columns are wider (an average of integers, kept by a view).
            SqlType::Numeric {
                precision: Some(p),
                scale,
            } if *p > DEFAULT_NUMERIC_PRECISION => DataType::Decimal256(*p, scale.unwrap_or(0)),
            SqlType::Numeric { precision, scale } => DataType::Decimal128(
                precision.unwrap_or(DEFAULT_NUMERIC_PRECISION),
                if precision.is_some() {
                    scale.unwrap_or(0)
                } else {
                    DEFAULT_NUMERIC_SCALE
                },
            ),
            SqlType::Varchar(_) | SqlType::Text | SqlType::Jsonb => DataType::Utf8,
            SqlType::Date => DataType::Date32,
            SqlType::Time => DataType::Time64(TimeUnit::Microsecond),
            SqlType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
            SqlType::Timestamptz => {
                DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))
            }
            SqlType::Interval => DataType::Interval(IntervalUnit::MonthDayNano),
            SqlType::Bytea => DataType::Binary,
            SqlType::Array(inner) => DataType::new_list(inner.to_arrow(), true),
            SqlType::Struct(fields) => DataType::Struct(
                fields
                    .iter()
                    .map(|(name, ty)| ty.to_field(name, true))
                    .collect(),
            ),
        }
    }

    /// `struct<name type, ...>` as the token rewrite leaves it (one name, nested structs
    /// inside); each field's type is read as any column type.
    pub fn parse_struct(text: &str) -> Result<SqlType> {
        let bad = || EddyError::syntax(format!("invalid struct type: {text}"));
        let inner = text
            .trim()
            .strip_prefix("struct<")
            .and_then(|t| t.strip_suffix('>'))
            .ok_or_else(bad)?;
        // Fields end at commas outside nested `<...>` and `(...)`.
        let mut parts = Vec::new();
        let (mut depth, mut start) = (0i32, 0usize);
        for (i, b) in inner.bytes().enumerate() {
            match b {
                b'<' | b'(' => depth += 1,
                b'>' | b')' => depth -= 1,
                b',' if depth == 0 => {
                    parts.push(&inner[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&inner[start..]);
        let mut fields = Vec::new();
        for field in parts.into_iter().map(str::trim).filter(|f| !f.is_empty()) {
            let (name, ty) = field.split_once(char::is_whitespace).ok_or_else(bad)?;
            let ty = ty.trim();
            let ty = if ty.starts_with("struct<") && !ty.ends_with("[]") {
                SqlType::parse_struct(ty)?
            } else if let Some(element) = ty.strip_suffix("[]").filter(|t| t.starts_with("struct<"))
            {
                SqlType::Array(Box::new(SqlType::parse_struct(element)?))
            } else {
                let parsed = datafusion::sql::sqlparser::parser::Parser::new(
                    &datafusion::sql::sqlparser::dialect::PostgreSqlDialect {},
                )
                .try_with_sql(ty)
                .and_then(|mut p| p.parse_data_type())
                .map_err(|e| EddyError::syntax(format!("invalid type {ty} in a struct: {e}")))?;
                SqlType::from_ast(&parsed)?
            };
            fields.push((name.trim_matches('"').to_string(), ty));
        }
        if fields.is_empty() {
            return Err(bad());
        }
        Ok(SqlType::Struct(fields))
    }

    /// The Arrow field for a column of this type, with the metadata that keeps types like
    /// `jsonb` recognisable after they become Arrow strings.
    pub fn to_field(&self, name: &str, nullable: bool) -> Field {
        let field = Field::new(name, self.to_arrow(), nullable);
        match self {
            SqlType::Jsonb => field.with_metadata(HashMap::from([(
                PG_TYPE_METADATA.to_string(),
                "jsonb".to_string(),
            )])),
            _ => field,
        }
    }

    /// The type's name as PostgreSQL's `format_type` prints it (psql `\d` shows this).
    pub fn pg_name(&self) -> String {
        match self {
            SqlType::Boolean => "boolean".into(),
            SqlType::SmallInt => "smallint".into(),
            SqlType::Int => "integer".into(),
            SqlType::BigInt => "bigint".into(),
            SqlType::Real => "real".into(),
            SqlType::Double => "double precision".into(),
            SqlType::Numeric {
                precision: Some(p),
                scale,
            } if *p <= DEFAULT_NUMERIC_PRECISION => format!("numeric({p},{})", scale.unwrap_or(0)),
            SqlType::Numeric { .. } => "numeric".into(),
            SqlType::Varchar(Some(n)) => format!("character varying({n})"),
            SqlType::Varchar(None) => "character varying".into(),
            SqlType::Text => "text".into(),
            SqlType::Date => "date".into(),
            SqlType::Time => "time without time zone".into(),
            SqlType::Timestamp => "timestamp without time zone".into(),
            SqlType::Timestamptz => "timestamp with time zone".into(),
            SqlType::Interval => "interval".into(),
            SqlType::Bytea => "bytea".into(),
            SqlType::Jsonb => "jsonb".into(),
            SqlType::Array(inner) => format!("{}[]", inner.pg_name()),
            SqlType::Struct(fields) => format!(
                "struct<{}>",
                fields
                    .iter()
                    .map(|(name, ty)| format!("{name} {}", ty.pg_name()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// The type's internal name (`pg_type.typname`), which PostgreSQL also uses to name
    /// the result column of a cast: `SELECT 1::integer` has a column `int4`.
    pub fn internal_name(&self) -> &'static str {
        match self {
            SqlType::Boolean => "bool",
            SqlType::SmallInt => "int2",
            SqlType::Int => "int4",
            SqlType::BigInt => "int8",
            SqlType::Real => "float4",
            SqlType::Double => "float8",
            SqlType::Numeric { .. } => "numeric",
            SqlType::Varchar(_) => "varchar",
            SqlType::Text => "text",
            SqlType::Date => "date",
            SqlType::Time => "time",
            SqlType::Timestamp => "timestamp",
            SqlType::Timestamptz => "timestamptz",
            SqlType::Interval => "interval",
            SqlType::Bytea => "bytea",
            SqlType::Jsonb => "jsonb",
            SqlType::Struct(_) => "struct",
            SqlType::Array(inner) => match inner.as_ref() {
                SqlType::Boolean => "_bool",
                SqlType::SmallInt => "_int2",
                SqlType::Int => "_int4",
                SqlType::BigInt => "_int8",
                SqlType::Real => "_float4",
                SqlType::Double => "_float8",
                SqlType::Numeric { .. } => "_numeric",
                SqlType::Varchar(_) => "_varchar",
                SqlType::Date => "_date",
                SqlType::Time => "_time",
                SqlType::Timestamp => "_timestamp",
                SqlType::Timestamptz => "_timestamptz",
                SqlType::Interval => "_interval",
                SqlType::Bytea => "_bytea",
                SqlType::Jsonb => "_jsonb",
                SqlType::Text | SqlType::Array(_) | SqlType::Struct(_) => "_text",
            },
        }
    }

    /// The closest column type for an Arrow type, used for the columns of views, whose
    /// types come from a query rather than a declaration.
    pub fn from_arrow(field: &Field) -> SqlType {
        // A cast keeps its input's metadata: only a string is still `jsonb`.
        if field.metadata().get(PG_TYPE_METADATA).map(String::as_str) == Some("jsonb")
            && field.data_type() == &DataType::Utf8
        {
            return SqlType::Jsonb;
        }
        match field.data_type() {
            DataType::Boolean => SqlType::Boolean,
            DataType::Int8 | DataType::Int16 | DataType::UInt8 => SqlType::SmallInt,
            DataType::Int32 | DataType::UInt16 => SqlType::Int,
            DataType::Int64 | DataType::UInt32 => SqlType::BigInt,
            DataType::Float16 | DataType::Float32 => SqlType::Real,
            DataType::Float64 => SqlType::Double,
            DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => SqlType::Numeric {
                precision: Some(*p),
                scale: Some(*s),
            },
            DataType::UInt64 => SqlType::Numeric {
                precision: Some(20),
                scale: Some(0),
            },
            DataType::Date32 | DataType::Date64 => SqlType::Date,
            DataType::Time32(_) | DataType::Time64(_) => SqlType::Time,
            DataType::Timestamp(_, None) => SqlType::Timestamp,
            DataType::Timestamp(_, Some(_)) => SqlType::Timestamptz,
            DataType::Interval(_) | DataType::Duration(_) => SqlType::Interval,
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView => SqlType::Bytea,
            DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
                SqlType::Array(Box::new(SqlType::from_arrow(f)))
            }
            DataType::Struct(fields) => SqlType::Struct(
                fields
                    .iter()
                    .map(|f| (f.name().clone(), SqlType::from_arrow(f)))
                    .collect(),
            ),
            _ => SqlType::Text,
        }
    }
}

fn char_len(len: &Option<CharacterLength>) -> Option<u64> {
    match len {
        Some(CharacterLength::IntegerLength { length, .. }) => Some(*length),
        _ => None,
    }
}
