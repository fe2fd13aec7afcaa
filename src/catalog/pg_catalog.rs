//! Eddy's corrections to `datafusion-pg-catalog`'s `pg_catalog` schema.
//!
//! The crate derives `pg_class` and `pg_attribute` from Arrow schemas, so it cannot know
//! that a `Utf8` column was declared `varchar(20)`, that a table has a primary key, or that
//! a view's columns are nullable. This schema provider wraps the crate's and patches four
//! tables from Eddy's catalog before they are scanned:
//!
//! - `pg_attribute`: declared type oids and type modifiers (`varchar(n)`, `numeric(p,s)`,
//!   `jsonb`); view columns nullable;
//! - `pg_class`: one index relation `<table>_pkey` per primary key; `relhasindex`;
//! - `pg_index` and `pg_constraint`: the primary keys themselves.
//!
//! Index and constraint oids are derived from the relation id, so
//! `pg_get_indexdef`/`pg_get_constraintdef` (see [`register_functions`]) can find them.

use super::{Catalog, Relation, RelationKind, SqlType};
use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int32Array, RecordBatch, StringArray};
use arrow::compute::concat_batches;
use arrow::datatypes::{DataType, Field, Int32Type, Int64Type, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::common::{Result as DFResult, ScalarValue};
use datafusion::datasource::TableType;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::physical_plan::{ExecutionPlan, collect};
use std::collections::HashMap;
use std::sync::Arc;

/// Oids of the primary-key index and constraint of relation `id`.
pub const INDEX_OID_BASE: i32 = 1_500_000_000;
pub const CONSTRAINT_OID_BASE: i32 = 1_600_000_000;

const VARCHAR_OID: i32 = 1043;
const JSONB_OID: i32 = 3802;
const BTREE_AM_OID: i32 = 403;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Patched {
    Attribute,
    Class,
    Index,
    Constraint,
}

pub struct EddyPgCatalog {
    inner: Arc<dyn SchemaProvider>,
    catalog: Arc<Catalog>,
    oids: OidMap,
}

/// The `pg_class` oid the crate gave each Eddy relation, as last seen by a scan.
/// Functions such as `pg_get_viewdef(oid)` are called with those oids.
type OidMap = Arc<parking_lot::RwLock<HashMap<i32, u32>>>;

impl std::fmt::Debug for EddyPgCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EddyPgCatalog")
    }
}

impl EddyPgCatalog {
    /// Replaces the `pg_catalog` schema registered in `ctx` by the patched one.
    pub fn install(ctx: &SessionContext, database: &str, catalog: Arc<Catalog>) -> DFResult<()> {
        let db = ctx
            .catalog(database)
            .ok_or_else(|| datafusion::error::DataFusionError::Internal("no database".into()))?;
        let Some(inner) = db.schema("pg_catalog") else {
            tracing::warn!("no pg_catalog schema to patch");
            return Ok(());
        };
        let oids = OidMap::default();
        db.register_schema(
            "pg_catalog",
            Arc::new(Self {
                inner,
                catalog: catalog.clone(),
                oids: oids.clone(),
            }),
        )?;
        ctx.register_udf(ScalarUDF::new_from_impl(ViewDefinition {
            catalog: catalog.clone(),
            oids: oids.clone(),
            signature: Signature::variadic_any(Volatility::Stable),
        }));
        for name in [
            "pg_table_size",
            "pg_relation_size",
            "pg_total_relation_size",
        ] {
            ctx.register_udf(ScalarUDF::new_from_impl(RelationSize {
                name,
                catalog: catalog.clone(),
                oids: oids.clone(),
                signature: Signature::variadic_any(Volatility::Volatile),
            }));
        }
        for of_column in [false, true] {
            ctx.register_udf(ScalarUDF::new_from_impl(Description {
                of_column,
                catalog: catalog.clone(),
                oids: oids.clone(),
                signature: Signature::variadic_any(Volatility::Stable),
            }));
        }
        ctx.register_udf(ScalarUDF::new_from_impl(KeyDefinition::new(
            KeyObject::Index,
            catalog.clone(),
        )));
        ctx.register_udf(ScalarUDF::new_from_impl(KeyDefinition::new(
            KeyObject::Constraint,
            catalog,
        )));
        Ok(())
    }
}

#[async_trait]
impl SchemaProvider for EddyPgCatalog {
    fn table_names(&self) -> Vec<String> {
        self.inner.table_names()
    }

    async fn table(&self, name: &str) -> DFResult<Option<Arc<dyn TableProvider>>> {
        let kind = match name.to_ascii_lowercase().as_str() {
            "pg_attribute" => Patched::Attribute,
            "pg_class" => Patched::Class,
            "pg_index" => Patched::Index,
            "pg_constraint" => Patched::Constraint,
            _ => return self.inner.table(name).await,
        };
        let Some(table) = self.inner.table(name).await? else {
            return Ok(None);
        };
        Ok(Some(Arc::new(PatchedTable {
            kind,
            table,
            pg_class: self.inner.table("pg_class").await?,
            pg_namespace: self.inner.table("pg_namespace").await?,
            catalog: self.catalog.clone(),
            oids: self.oids.clone(),
        })))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.inner.table_exist(name)
    }
}

/// One of the crate's tables, with Eddy's rows and values laid over it.
struct PatchedTable {
    kind: Patched,
    table: Arc<dyn TableProvider>,
    pg_class: Option<Arc<dyn TableProvider>>,
    pg_namespace: Option<Arc<dyn TableProvider>>,
    catalog: Arc<Catalog>,
    oids: OidMap,
}

impl std::fmt::Debug for PatchedTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PatchedTable({:?})", self.kind)
    }
}

async fn read_all(table: &Arc<dyn TableProvider>, state: &dyn Session) -> DFResult<RecordBatch> {
    let plan = table.scan(state, None, &[], None).await?;
    let batches = collect(plan, state.task_ctx()).await?;
    Ok(concat_batches(&table.schema(), &batches)?)
}

/// Eddy's relations with the oids the crate gave them in `pg_class`.
struct UserRelations {
    namespace_oid: i32,
    /// Namespaces left out of `pg_class` (Eddy's system tables), so psql's `\d` lists
    /// what users created, as PostgreSQL does.
    hidden_namespaces: Vec<i32>,
    by_oid: HashMap<i32, Relation>,
}

impl PatchedTable {
    async fn user_relations(&self, state: &dyn Session) -> DFResult<UserRelations> {
        let mut namespace_oid = 2200; // PostgreSQL's oid of `public`
        let mut hidden_namespaces = Vec::new();
        if let Some(ns) = &self.pg_namespace {
            let batch = read_all(ns, state).await?;
            let oids = column_i32(&batch, "oid");
            let names = column_str(&batch, "nspname");
            for i in 0..batch.num_rows() {
                if names.value(i) == "public" {
                    namespace_oid = oids.value(i);
                } else if [
                    super::system_tables::SYSTEM_SCHEMA,
                    super::rw_catalog::SCHEMA,
                ]
                .contains(&names.value(i))
                {
                    hidden_namespaces.push(oids.value(i));
                }
            }
        }
        let mut by_oid = HashMap::new();
        if let Some(class) = &self.pg_class {
            let batch = read_all(class, state).await?;
            let oids = column_i32(&batch, "oid");
            let names = column_str(&batch, "relname");
            let spaces = column_i32(&batch, "relnamespace");
            for i in 0..batch.num_rows() {
                if spaces.value(i) != namespace_oid {
                    continue;
                }
                if let Some(rel) = self.catalog.get(names.value(i)) {
                    by_oid.insert(oids.value(i), rel);
                }
            }
        }
        self.oids
            .write()
            .extend(by_oid.iter().map(|(oid, rel)| (*oid, rel.id)));
        Ok(UserRelations {
            namespace_oid,
            hidden_namespaces,
            by_oid,
        })
    }

    async fn patched(&self, state: &dyn Session) -> DFResult<RecordBatch> {
        let base = read_all(&self.table, state).await?;
        let rels = self.user_relations(state).await?;
        let schema = self.schema();
        let with_keys: Vec<(&Relation, i32)> = rels
            .by_oid
            .iter()
            .filter(|(_, r)| r.kind == RelationKind::Table && !r.primary_key.is_empty())
            .map(|(oid, r)| (r, *oid))
            .collect();
        match self.kind {
            Patched::Attribute => patch_attributes(base, &rels),
            Patched::Class => {
                let base = set_bool_where(base, "relhasindex", "oid", |oid| {
                    with_keys.iter().any(|(_, o)| *o == oid)
                })?;
                let base = set_relkind(base, &rels)?;
                let namespaces = column_i32(&base, "relnamespace");
                let shown: BooleanArray = (0..base.num_rows())
                    .map(|i| Some(!rels.hidden_namespaces.contains(&namespaces.value(i))))
                    .collect();
                let base = arrow::compute::filter_record_batch(&base, &shown)?;
                let mut rows = Vec::new();
                for (rel, _) in &with_keys {
                    let mut row = HashMap::new();
                    row.insert("oid", i32v(INDEX_OID_BASE + rel.id as i32));
                    row.insert("relname", strv(&format!("{}_pkey", rel.name)));
                    row.insert("relnamespace", i32v(rels.namespace_oid));
                    row.insert("relam", i32v(BTREE_AM_OID));
                    row.insert("relkind", strv("i"));
                    row.insert("relpersistence", strv("p"));
                    row.insert("relreplident", strv("n"));
                    row.insert("relowner", i32v(10));
                    row.insert(
                        "relnatts",
                        ScalarValue::Int16(Some(rel.primary_key.len() as i16)),
                    );
                    row.insert("relispopulated", ScalarValue::Boolean(Some(true)));
                    rows.push(row);
                }
                let patched = append_rows(base, &self.table.schema(), rows)?;
                with_reloptions(patched, &schema)
            }
            Patched::Index => {
                let rows = with_keys
                    .iter()
                    .map(|(rel, oid)| {
                        let attnums: Vec<String> = rel
                            .primary_key
                            .iter()
                            .map(|i| (i + 1).to_string())
                            .collect();
                        let n = rel.primary_key.len();
                        let mut row = HashMap::new();
                        row.insert("indexrelid", i32v(INDEX_OID_BASE + rel.id as i32));
                        row.insert("indrelid", i32v(*oid));
                        row.insert("indnatts", ScalarValue::Int16(Some(n as i16)));
                        row.insert("indnkeyatts", ScalarValue::Int16(Some(n as i16)));
                        for t in [
                            "indisunique",
                            "indisprimary",
                            "indimmediate",
                            "indisvalid",
                            "indisready",
                            "indislive",
                        ] {
                            row.insert(t, ScalarValue::Boolean(Some(true)));
                        }
                        row.insert("indkey", strv(&attnums.join(" ")));
                        row.insert("indcollation", strv(&vec!["0"; n].join(" ")));
                        row.insert("indclass", strv(&vec!["0"; n].join(" ")));
                        row.insert("indoption", strv(&vec!["0"; n].join(" ")));
                        row
                    })
                    .collect();
                append_rows(base, &schema, rows)
            }
            Patched::Constraint => {
                let rows = with_keys
                    .iter()
                    .map(|(rel, oid)| {
                        let attnums: Vec<String> = rel
                            .primary_key
                            .iter()
                            .map(|i| (i + 1).to_string())
                            .collect();
                        let mut row = HashMap::new();
                        row.insert("oid", i32v(CONSTRAINT_OID_BASE + rel.id as i32));
                        row.insert("conname", strv(&format!("{}_pkey", rel.name)));
                        row.insert("connamespace", i32v(rels.namespace_oid));
                        row.insert("contype", strv("p"));
                        row.insert("convalidated", ScalarValue::Boolean(Some(true)));
                        row.insert("conrelid", i32v(*oid));
                        row.insert("conindid", i32v(INDEX_OID_BASE + rel.id as i32));
                        row.insert("confupdtype", strv(" "));
                        row.insert("confdeltype", strv(" "));
                        row.insert("confmatchtype", strv(" "));
                        row.insert("conislocal", ScalarValue::Boolean(Some(true)));
                        row.insert("connoinherit", ScalarValue::Boolean(Some(true)));
                        row.insert("conkey", strv(&format!("{{{}}}", attnums.join(","))));
                        row
                    })
                    .collect();
                append_rows(base, &schema, rows)
            }
        }
    }
}

#[async_trait]
impl TableProvider for PatchedTable {
    fn schema(&self) -> SchemaRef {
        let inner = self.table.schema();
        if self.kind != Patched::Class || inner.index_of("reloptions").is_ok() {
            return inner;
        }
        // psql's `\d+` reads pg_class.reloptions (storage parameters); Eddy has none.
        let mut fields: Vec<Field> = inner.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new(
            "reloptions",
            DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
            true,
        ));
        Arc::new(Schema::new(fields))
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        let batch = self.patched(state).await?;
        Ok(MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            self.schema(),
            projection.cloned(),
        )?)
    }
}

/// Adds the all-NULL `reloptions` column when the schema has it and the batch not.
fn with_reloptions(batch: RecordBatch, schema: &SchemaRef) -> DFResult<RecordBatch> {
    if batch.num_columns() == schema.fields().len() {
        return Ok(batch);
    }
    let mut columns = batch.columns().to_vec();
    let field = schema.field(schema.fields().len() - 1);
    columns.push(arrow::array::new_null_array(
        field.data_type(),
        batch.num_rows(),
    ));
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

fn i32v(v: i32) -> ScalarValue {
    ScalarValue::Int32(Some(v))
}

fn strv(v: &str) -> ScalarValue {
    ScalarValue::Utf8(Some(v.to_string()))
}

fn column_i32<'a>(batch: &'a RecordBatch, name: &str) -> &'a Int32Array {
    batch
        .column_by_name(name)
        .unwrap_or_else(|| panic!("pg_catalog table has column {name}"))
        .as_primitive::<Int32Type>()
}

fn column_str<'a>(batch: &'a RecordBatch, name: &str) -> &'a StringArray {
    batch
        .column_by_name(name)
        .unwrap_or_else(|| panic!("pg_catalog table has column {name}"))
        .as_string::<i32>()
}

/// Appends rows given as column → value; columns not given get a zero value (or NULL
/// where the column is nullable).
fn append_rows(
    base: RecordBatch,
    schema: &SchemaRef,
    rows: Vec<HashMap<&'static str, ScalarValue>>,
) -> DFResult<RecordBatch> {
    if rows.is_empty() {
        return Ok(base);
    }
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let values = rows
            .iter()
            .map(|r| match r.get(field.name().as_str()) {
                Some(v) => v.cast_to(field.data_type()),
                None if field.is_nullable() => ScalarValue::try_from(field.data_type()),
                None => zero_value(field.data_type()),
            })
            .collect::<DFResult<Vec<_>>>()?;
        columns.push(ScalarValue::iter_to_array(values)?);
    }
    let extra = RecordBatch::try_new(schema.clone(), columns)?;
    Ok(concat_batches(schema, &[base, extra])?)
}

fn zero_value(dt: &DataType) -> DFResult<ScalarValue> {
    Ok(match dt {
        DataType::Boolean => ScalarValue::Boolean(Some(false)),
        DataType::Utf8 => strv(""),
        DataType::Float64 => ScalarValue::Float64(Some(0.0)),
        other => ScalarValue::new_zero(other)?,
    })
}

/// Materialized views are relkind `m` (psql's `\dm`), sources `f` (like foreign tables:
/// readable only by streaming jobs); the crate sees both as plain tables.
fn set_relkind(batch: RecordBatch, rels: &UserRelations) -> DFResult<RecordBatch> {
    let oids = column_i32(&batch, "oid");
    let idx = batch.schema().index_of("relkind")?;
    let old = batch.column(idx).as_string::<i32>();
    let new: StringArray = (0..batch.num_rows())
        .map(|i| {
            Some(match rels.by_oid.get(&oids.value(i)).map(|r| r.kind) {
                Some(RelationKind::MaterializedView) => "m",
                Some(RelationKind::Source) => "f",
                _ => old.value(i),
            })
        })
        .collect();
    let mut columns = batch.columns().to_vec();
    columns[idx] = Arc::new(new);
    Ok(RecordBatch::try_new(batch.schema(), columns)?)
}

/// Sets a boolean column to true on the rows whose `key` column matches.
fn set_bool_where(
    batch: RecordBatch,
    column: &str,
    key: &str,
    matches: impl Fn(i32) -> bool,
) -> DFResult<RecordBatch> {
    let keys = column_i32(&batch, key);
    let Some(idx) = batch.schema().index_of(column).ok() else {
        return Ok(batch);
    };
    let old = batch.column(idx).as_boolean();
    let new: BooleanArray = (0..batch.num_rows())
        .map(|i| {
            if matches(keys.value(i)) {
                Some(true)
            } else if old.is_null(i) {
                None
            } else {
                Some(old.value(i))
            }
        })
        .collect();
    let mut columns = batch.columns().to_vec();
    columns[idx] = Arc::new(new);
    Ok(RecordBatch::try_new(batch.schema(), columns)?)
}

/// Declared types for Eddy's columns: the crate only sees Arrow types.
fn patch_attributes(batch: RecordBatch, rels: &UserRelations) -> DFResult<RecordBatch> {
    let schema = batch.schema();
    let relids = column_i32(&batch, "attrelid");
    let names = column_str(&batch, "attname");
    let typid_idx = schema.index_of("atttypid")?;
    let typmod_idx = schema.index_of("atttypmod")?;
    let notnull_idx = schema.index_of("attnotnull")?;
    let typids = batch.column(typid_idx).as_primitive::<Int32Type>();
    let typmods = batch.column(typmod_idx).as_primitive::<Int32Type>();
    let notnulls = batch.column(notnull_idx).as_boolean();
    let mut new_typid = Vec::with_capacity(batch.num_rows());
    let mut new_typmod = Vec::with_capacity(batch.num_rows());
    let mut new_notnull = Vec::with_capacity(batch.num_rows());
    for i in 0..batch.num_rows() {
        let column = rels.by_oid.get(&relids.value(i)).and_then(|rel| {
            rel.columns
                .iter()
                .find(|c| c.name == names.value(i))
                .map(|c| (rel.kind, c))
        });
        let (typid, typmod, notnull) = match column {
            Some((kind, c)) => {
                let (typid, typmod) = declared_type(&c.sql_type, typids.value(i));
                (typid, typmod, kind == RelationKind::Table && !c.nullable)
            }
            None => (typids.value(i), typmods.value(i), notnulls.value(i)),
        };
        new_typid.push(typid);
        new_typmod.push(typmod);
        new_notnull.push(notnull);
    }
    let mut columns = batch.columns().to_vec();
    columns[typid_idx] = Arc::new(Int32Array::from(new_typid));
    columns[typmod_idx] = Arc::new(Int32Array::from(new_typmod));
    columns[notnull_idx] = Arc::new(BooleanArray::from(new_notnull));
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// (type oid, type modifier) of a declared column type.
fn declared_type(t: &SqlType, arrow_oid: i32) -> (i32, i32) {
    match t {
        SqlType::Varchar(Some(n)) => (VARCHAR_OID, *n as i32 + 4),
        SqlType::Varchar(None) => (VARCHAR_OID, -1),
        SqlType::Jsonb => (JSONB_OID, -1),
        SqlType::Numeric {
            precision: Some(p),
            scale,
        } if *p <= 38 => (
            arrow_oid,
            ((*p as i32) << 16 | scale.unwrap_or(0) as i32) + 4,
        ),
        SqlType::Numeric { .. } => (arrow_oid, -1),
        _ => (arrow_oid, -1),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum KeyObject {
    Index,
    Constraint,
}

/// `pg_get_indexdef(oid [, column, pretty])` and `pg_get_constraintdef(oid [, pretty])`
/// for Eddy's primary keys: psql's `\d` prints them under "Indexes:".
#[derive(Debug)]
struct KeyDefinition {
    object: KeyObject,
    catalog: Arc<Catalog>,
    signature: Signature,
}

impl KeyDefinition {
    fn new(object: KeyObject, catalog: Arc<Catalog>) -> Self {
        Self {
            object,
            catalog,
            signature: Signature::variadic_any(Volatility::Stable),
        }
    }

    fn definition(&self, oid: i64) -> Option<String> {
        let base = match self.object {
            KeyObject::Index => INDEX_OID_BASE,
            KeyObject::Constraint => CONSTRAINT_OID_BASE,
        } as i64;
        let id = u32::try_from(oid - base).ok()?;
        let rel = self.catalog.get_by_id(id)?;
        if rel.primary_key.is_empty() {
            return None;
        }
        Some(match self.object {
            KeyObject::Index => format!(
                "CREATE UNIQUE INDEX {}_pkey ON public.{} USING btree ({})",
                rel.name,
                rel.name,
                key_columns(&rel)
            ),
            KeyObject::Constraint => format!("PRIMARY KEY ({})", key_columns(&rel)),
        })
    }
}

impl ScalarUDFImpl for KeyDefinition {
    fn name(&self) -> &str {
        match self.object {
            KeyObject::Index => "pg_get_indexdef",
            KeyObject::Constraint => "pg_get_constraintdef",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DFResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DFResult<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let oids = arrow::compute::cast(&arrays[0], &DataType::Int64)?;
        let oids = oids.as_primitive::<Int64Type>();
        let out: StringArray = (0..oids.len())
            .map(|i| {
                if oids.is_null(i) {
                    None
                } else {
                    self.definition(oids.value(i))
                }
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

/// `pg_get_viewdef(oid [, pretty])`: the stored query of an Eddy view.
#[derive(Debug)]
struct ViewDefinition {
    catalog: Arc<Catalog>,
    oids: OidMap,
    signature: Signature,
}

impl ScalarUDFImpl for ViewDefinition {
    fn name(&self) -> &str {
        "pg_get_viewdef"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DFResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DFResult<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let out: StringArray = relations_of(&arrays[0], &self.oids, &self.catalog)?
            .into_iter()
            .map(|rel| {
                let rel = rel?;
                (rel.kind == RelationKind::View).then(|| format!(" {};", rel.definition))
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

/// `obj_description(oid [, catalog])` and `col_description(oid, attnum)`: the comments
/// `COMMENT ON` stored for a relation or for its column `attnum` (from 1), by the
/// `pg_class` oid a scan gave the relation (psql's `\d+` reads `pg_class` first).
#[derive(Debug)]
struct Description {
    of_column: bool,
    catalog: Arc<Catalog>,
    oids: OidMap,
    signature: Signature,
}

impl ScalarUDFImpl for Description {
    fn name(&self) -> &str {
        if self.of_column {
            "col_description"
        } else {
            "obj_description"
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DFResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DFResult<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let attnums = match (self.of_column, arrays.get(1)) {
            (true, Some(a)) => Some(arrow::compute::cast(a, &DataType::Int32)?),
            _ => None,
        };
        let out: StringArray = relations_of(&arrays[0], &self.oids, &self.catalog)?
            .into_iter()
            .enumerate()
            .map(|(i, rel)| {
                let rel = rel?;
                match &attnums {
                    Some(attnums) => {
                        let attnums = attnums.as_primitive::<Int32Type>();
                        let attnum = usize::try_from(attnums.value(i)).ok()?.checked_sub(1)?;
                        rel.columns.get(attnum)?.description.clone()
                    }
                    None => rel.description.clone(),
                }
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

/// `pg_table_size(oid)`, `pg_relation_size(oid)`, `pg_total_relation_size(oid)`: the bytes
/// RocksDB holds for a table's or materialized view's rows (before compression; Eddy's
/// indexes are catalog entries, so all three are the same), by `pg_class` oid or by name.
#[derive(Debug)]
struct RelationSize {
    name: &'static str,
    catalog: Arc<Catalog>,
    oids: OidMap,
    signature: Signature,
}

impl ScalarUDFImpl for RelationSize {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DFResult<DataType> {
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DFResult<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let relations = relations_of(&arrays[0], &self.oids, &self.catalog)?;
        let mut out = arrow::array::Int64Builder::with_capacity(relations.len());
        for rel in relations {
            match rel {
                Some(rel)
                    if matches!(
                        rel.kind,
                        RelationKind::Table | RelationKind::MaterializedView
                    ) =>
                {
                    let bytes = self
                        .catalog
                        .stored_bytes(rel.id)
                        .map_err(crate::error::EddyError::into_datafusion)?;
                    out.append_value(bytes as i64);
                }
                Some(_) => out.append_value(0),
                None => out.append_null(),
            }
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

/// DataFusion compares and hashes functions; these are told apart by their names alone.
macro_rules! identified_by_name {
    ($($ty:ty),*) => {$(
        impl PartialEq for $ty {
            fn eq(&self, other: &Self) -> bool {
                self.name() == other.name()
            }
        }

        impl Eq for $ty {}

        impl std::hash::Hash for $ty {
            fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
                self.name().hash(state)
            }
        }
    )*};
}

identified_by_name!(KeyDefinition, ViewDefinition, Description, RelationSize);

/// The Eddy relation of each value of a function's first argument: a `pg_class` oid (as
/// the last scan of `pg_class` gave it) or a relation's name (`t`, `public.t`).
fn relations_of(
    array: &arrow::array::ArrayRef,
    oids: &OidMap,
    catalog: &Catalog,
) -> DFResult<Vec<Option<Relation>>> {
    if matches!(
        array.data_type(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    ) {
        let names = arrow::compute::cast(array, &DataType::Utf8)?;
        return Ok(names
            .as_string::<i32>()
            .iter()
            .map(|name| {
                let name = name?;
                catalog.get(name.strip_prefix("public.").unwrap_or(name))
            })
            .collect());
    }
    let values = arrow::compute::cast(array, &DataType::Int32)?;
    let known = oids.read();
    Ok(values
        .as_primitive::<Int32Type>()
        .iter()
        .map(|oid| catalog.get_by_id(*known.get(&oid?)?))
        .collect())
}

fn key_columns(rel: &Relation) -> String {
    rel.primary_key
        .iter()
        .map(|i| rel.columns[*i].name.clone())
        .collect::<Vec<_>>()
        .join(", ")
}
