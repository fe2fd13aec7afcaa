//! `information_schema.columns` with PostgreSQL's type names.
//!
//! DataFusion fills the table's `data_type` with Arrow's names (`Int64`, `Utf8`,
//! `Timestamp(µs)`); PostgreSQL, RisingWave and every tool that reads the table (dbt,
//! BI tools, drivers) expect SQL's (`bigint`, `character varying`, `timestamp without
//! time zone`). This analyzer rule puts a projection over every scan of the table that
//! names each column's type as PostgreSQL does: from the declared type kept in Eddy's
//! catalog for tables and views (so `jsonb`, `text` and `character varying` stay apart),
//! from the Arrow type for the system tables.

use super::Catalog;
use super::types::SqlType;
use arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use arrow::datatypes::{DataType, Field};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{Column, Result};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, LogicalPlan, Projection, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, TableScan, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use std::sync::Arc;

#[derive(Debug)]
pub struct PostgresColumnTypes {
    type_names: Arc<ScalarUDF>,
    max_lengths: Arc<ScalarUDF>,
}

impl PostgresColumnTypes {
    pub fn new(catalog: Arc<Catalog>) -> Self {
        Self {
            type_names: DeclaredColumn::udf(catalog.clone(), Attribute::TypeName),
            max_lengths: DeclaredColumn::udf(catalog, Attribute::MaxLength),
        }
    }
}

impl AnalyzerRule for PostgresColumnTypes {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| match node {
            LogicalPlan::TableScan(scan) if is_columns_table(&scan) => {
                self.name_types(scan).map(Transformed::yes)
            }
            other => Ok(Transformed::no(other)),
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "eddy_information_schema_types"
    }
}

fn is_columns_table(scan: &TableScan) -> bool {
    scan.table_name.schema() == Some("information_schema") && scan.table_name.table() == "columns"
}

impl PostgresColumnTypes {
    /// The scan under a projection that replaces `data_type` by PostgreSQL's name and
    /// fills `character_maximum_length` with a `varchar(n)`'s `n`.
    fn name_types(&self, scan: TableScan) -> Result<LogicalPlan> {
        let schema = scan.projected_schema.clone();
        let column = |name: &str| {
            schema
                .iter()
                .find(|(_, f)| f.name() == name)
                .map(|(q, f)| Expr::Column(Column::new(q.cloned(), f.name())))
        };
        let (Some(table_schema), Some(table), Some(name), Some(arrow_type)) = (
            column("table_schema"),
            column("table_name"),
            column("column_name"),
            column("data_type"),
        ) else {
            return Ok(LogicalPlan::TableScan(scan));
        };
        let named = Expr::ScalarFunction(ScalarFunction::new_udf(
            self.type_names.clone(),
            vec![
                table_schema.clone(),
                table.clone(),
                name.clone(),
                arrow_type,
            ],
        ));
        let max_length = Expr::ScalarFunction(ScalarFunction::new_udf(
            self.max_lengths.clone(),
            vec![table_schema, table, name],
        ));
        let exprs = schema
            .iter()
            .map(|(qualifier, field)| {
                let expr = match field.name().as_str() {
                    "data_type" => named.clone(),
                    "character_maximum_length" => max_length
                        .clone()
                        .cast_to(field.data_type(), &schema)
                        .unwrap_or_else(|_| max_length.clone()),
                    _ => Expr::Column(Column::new(qualifier.cloned(), field.name())),
                };
                expr.alias_qualified(qualifier.cloned(), field.name())
            })
            .collect();
        Ok(LogicalPlan::Projection(Projection::try_new(
            exprs,
            Arc::new(LogicalPlan::TableScan(scan)),
        )?))
    }
}

/// What [`DeclaredColumn`] gives for a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Attribute {
    /// `(table_schema, table_name, column_name, arrow type) -> PostgreSQL's type name`.
    TypeName,
    /// `(table_schema, table_name, column_name) -> n` of a `varchar(n)`, else NULL.
    MaxLength,
}

/// A column's attribute from the type the catalog declares for it.
#[derive(Debug)]
struct DeclaredColumn {
    catalog: Arc<Catalog>,
    attribute: Attribute,
    signature: Signature,
}

impl DeclaredColumn {
    fn udf(catalog: Arc<Catalog>, attribute: Attribute) -> Arc<ScalarUDF> {
        let arguments = match attribute {
            Attribute::TypeName => 4,
            Attribute::MaxLength => 3,
        };
        Arc::new(ScalarUDF::new_from_impl(Self {
            catalog,
            attribute,
            signature: Signature::exact(vec![DataType::Utf8; arguments], Volatility::Stable),
        }))
    }
}

impl PartialEq for DeclaredColumn {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.catalog, &other.catalog) && self.attribute == other.attribute
    }
}

impl Eq for DeclaredColumn {}

impl std::hash::Hash for DeclaredColumn {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.attribute.hash(state)
    }
}

impl ScalarUDFImpl for DeclaredColumn {
    fn name(&self) -> &str {
        match self.attribute {
            Attribute::TypeName => "eddy_information_schema_type",
            Attribute::MaxLength => "eddy_information_schema_max_length",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(match self.attribute {
            Attribute::TypeName => DataType::Utf8,
            Attribute::MaxLength => DataType::UInt64,
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let arrays: Vec<ArrayRef> = ColumnarValue::values_to_arrays(&args.args)?;
        let text = |i: usize| arrays[i].as_string::<i32>();
        let (schemas, tables, columns) = (text(0), text(1), text(2));
        let declared = |row: usize| {
            declared_type(
                &self.catalog,
                schemas.value(row),
                tables.value(row),
                columns.value(row),
            )
        };
        let array: ArrayRef = match self.attribute {
            Attribute::TypeName => {
                let arrow_types = text(3);
                let mut out = StringBuilder::with_capacity(rows, rows * 16);
                for row in 0..rows {
                    if arrow_types.is_null(row) {
                        out.append_null();
                        continue;
                    }
                    out.append_value(match declared(row) {
                        Some(sql_type) => information_schema_name(&sql_type).to_string(),
                        None => arrow_type_name(arrow_types.value(row)),
                    });
                }
                Arc::new(out.finish())
            }
            Attribute::MaxLength => Arc::new(
                (0..rows)
                    .map(|row| match declared(row) {
                        Some(SqlType::Varchar(Some(n))) => Some(n),
                        _ => None,
                    })
                    .collect::<arrow::array::UInt64Array>(),
            ),
        };
        Ok(ColumnarValue::Array(array))
    }
}

/// The type a table or view of the catalog declares for a column (`None` for system
/// tables).
fn declared_type(catalog: &Catalog, schema: &str, table: &str, column: &str) -> Option<SqlType> {
    if schema != "public" {
        return None;
    }
    catalog
        .get(table)?
        .columns
        .into_iter()
        .find(|c| c.name == column)
        .map(|c| c.sql_type)
}

/// A type's name in `information_schema` (no length, precision or element type: those
/// have columns of their own there).
fn information_schema_name(sql_type: &SqlType) -> &'static str {
    match sql_type {
        SqlType::Boolean => "boolean",
        SqlType::SmallInt => "smallint",
        SqlType::Int => "integer",
        SqlType::BigInt => "bigint",
        SqlType::Real => "real",
        SqlType::Double => "double precision",
        SqlType::Numeric { .. } => "numeric",
        SqlType::Varchar(_) => "character varying",
        SqlType::Text => "text",
        SqlType::Date => "date",
        SqlType::Time => "time without time zone",
        SqlType::Timestamp => "timestamp without time zone",
        SqlType::Timestamptz => "timestamp with time zone",
        SqlType::Interval => "interval",
        SqlType::Bytea => "bytea",
        SqlType::Jsonb => "jsonb",
        SqlType::Array(_) => "ARRAY",
        SqlType::Struct(_) => "USER-DEFINED",
    }
}

/// The name for a column known only by its Arrow type (a system table's); text that is
/// not an Arrow type (a name already given) is kept.
fn arrow_type_name(arrow_type: &str) -> String {
    match arrow_type.parse::<DataType>() {
        Ok(data_type) => {
            let sql_type = SqlType::from_arrow(&Field::new("", data_type, true));
            match sql_type {
                // Arrow strings are PostgreSQL's `text` in the system tables.
                SqlType::Text | SqlType::Varchar(_) => "text".to_string(),
                other => information_schema_name(&other).to_string(),
            }
        }
        Err(_) => arrow_type.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrow_types_get_postgres_names() {
        assert_eq!(arrow_type_name("Int64"), "bigint");
        assert_eq!(arrow_type_name("Utf8"), "text");
        assert_eq!(arrow_type_name("Float64"), "double precision");
        assert_eq!(arrow_type_name("Decimal128(10, 2)"), "numeric");
        assert_eq!(arrow_type_name("bigint"), "bigint");
        let timestamp = DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None);
        assert_eq!(
            arrow_type_name(&timestamp.to_string()),
            "timestamp without time zone"
        );
        let zoned = DataType::Timestamp(
            arrow::datatypes::TimeUnit::Microsecond,
            Some("+00:00".into()),
        );
        assert_eq!(
            arrow_type_name(&zoned.to_string()),
            "timestamp with time zone"
        );
    }
}
