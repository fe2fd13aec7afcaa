//! Catalog queries of well-known clients that DataFusion cannot run as sent, replaced by
//! equivalent queries it can.
//!
//! pgJDBC's `DatabaseMetaData.getPrimaryKeys` expands `pg_index.indkey` with the
//! set-returning `information_schema._pg_expandarray` and reads fields of its composite
//! result; the replacement finds each key column's position with `array_position`.
//!
//! SQLAlchemy's column reflection (`Inspector.get_columns`) puts correlated scalar
//! subqueries inside `CASE` (column defaults, identity options, collations), which
//! DataFusion cannot decorrelate. Eddy has no column defaults, identity columns or
//! collations, so those columns are NULL and the rest of the query is kept as sent.

/// The replacement for `sql`, if it is one of the known client queries.
pub fn replacement(sql: &str) -> Option<String> {
    if sql.contains("_pg_expandarray(i.indkey)") && sql.contains("KEY_SEQ") {
        return Some(jdbc_primary_keys(sql));
    }
    if sql.contains("AS identity_options") && sql.contains("pg_catalog.pg_attrdef") {
        return sqlalchemy_columns(sql);
    }
    None
}

fn sqlalchemy_columns(sql: &str) -> Option<String> {
    // Everything from the outer WHERE on (filters and ORDER BY) is kept verbatim.
    let filters = &sql[sql.rfind("WHERE pg_catalog.pg_class.relkind")?..];
    Some(format!(
        "SELECT pg_catalog.pg_attribute.attname AS name, \
         pg_catalog.format_type(pg_catalog.pg_attribute.atttypid, pg_catalog.pg_attribute.atttypmod) AS format_type, \
         CAST(NULL AS VARCHAR) AS \"default\", pg_catalog.pg_attribute.attnotnull AS not_null, \
         pg_catalog.pg_class.relname AS table_name, CAST(NULL AS VARCHAR) AS comment, \
         '' AS generated, CAST(NULL AS VARCHAR) AS identity_options, CAST(NULL AS VARCHAR) AS collation \
         FROM pg_catalog.pg_class LEFT OUTER JOIN pg_catalog.pg_attribute \
         ON pg_catalog.pg_class.oid = pg_catalog.pg_attribute.attrelid AND pg_catalog.pg_attribute.attnum > 0 \
         AND NOT pg_catalog.pg_attribute.attisdropped \
         JOIN pg_catalog.pg_namespace ON pg_catalog.pg_namespace.oid = pg_catalog.pg_class.relnamespace \
         {filters}"
    ))
}

/// The value compared with `column` in `column = E'value'` (or `'value'`), if present.
fn equality_literal(sql: &str, column: &str) -> Option<String> {
    let at = sql.find(&format!("{column} = "))? + column.len() + 3;
    let rest = sql[at..].strip_prefix('E').unwrap_or(&sql[at..]);
    let rest = rest.strip_prefix('\'')?;
    let end = rest.find('\'')?;
    Some(rest[..end].replace('\\', ""))
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn jdbc_primary_keys(sql: &str) -> String {
    let mut filters = vec!["i.indisprimary".to_string()];
    if let Some(schema) = equality_literal(sql, "n.nspname") {
        filters.push(format!("n.nspname = {}", quote(&schema)));
    }
    if let Some(table) = equality_literal(sql, "ct.relname") {
        filters.push(format!("ct.relname = {}", quote(&table)));
    }
    format!(
        "SELECT * FROM (SELECT CAST(NULL AS VARCHAR) AS \"TABLE_CAT\", n.nspname AS \"TABLE_SCHEM\", \
         ct.relname AS \"TABLE_NAME\", a.attname AS \"COLUMN_NAME\", \
         CAST(array_position(string_to_array(i.indkey, ' '), CAST(a.attnum AS VARCHAR)) AS SMALLINT) AS \"KEY_SEQ\", \
         ci.relname AS \"PK_NAME\" \
         FROM pg_catalog.pg_class ct \
         JOIN pg_catalog.pg_attribute a ON ct.oid = a.attrelid \
         JOIN pg_catalog.pg_namespace n ON ct.relnamespace = n.oid \
         JOIN pg_catalog.pg_index i ON a.attrelid = i.indrelid \
         JOIN pg_catalog.pg_class ci ON ci.oid = i.indexrelid \
         WHERE {}) result WHERE \"KEY_SEQ\" IS NOT NULL \
         ORDER BY \"TABLE_NAME\", \"PK_NAME\", \"KEY_SEQ\"",
        filters.join(" AND ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_jdbc_filters() {
        let sql = "SELECT ... (information_schema._pg_expandarray(i.indkey)).n AS KEY_SEQ ... \
                   WHERE true  AND n.nspname = E'public' AND ct.relname = E'jt' AND i.indisprimary ) result";
        let out = replacement(sql).expect("recognised");
        assert!(out.contains("n.nspname = 'public'"), "{out}");
        assert!(out.contains("ct.relname = 'jt'"), "{out}");
        assert!(replacement("SELECT 1").is_none());
    }
}
