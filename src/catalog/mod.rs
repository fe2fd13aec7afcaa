//! The catalog: every named object with its id, columns, definition and dependencies.
//!
//! Entries are kept in memory for lookups and written to the [`StateStore`] (system table
//! [`CATALOG_TABLE_ID`]) before a DDL statement returns, so they survive a crash.

pub mod information_schema;
pub mod pg_catalog;
pub mod rw_catalog;
pub mod schema_provider;
pub mod system_tables;
pub mod types;

use crate::error::{EddyError, Result, sqlstate};
use crate::state::StateStore;
use crate::state::store::FIRST_USER_TABLE_ID;
use arrow::datatypes::{Schema, SchemaRef};
use parking_lot::RwLock;
use rocksdb::WriteBatch;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
pub use types::SqlType;

/// The system table holding catalog entries.
pub const CATALOG_TABLE_ID: u32 = 2;
const RELATION_KEY_PREFIX: &[u8] = b"\x00\x00\x00\x02\x00\x00rel/";
const USER_KEY_PREFIX: &[u8] = b"\x00\x00\x00\x02\x00\x00user/";
const FUNCTION_KEY_PREFIX: &[u8] = b"\x00\x00\x00\x02\x00\x00func/";
const NEXT_ID_KEY: &[u8] = b"\x00\x00\x00\x02\x00\x00next_id";

/// The name of the only database, and of its default schema.
pub const DATABASE_NAME: &str = "dev";
pub const DEFAULT_SCHEMA: &str = "public";

/// The option of a sink into a table naming its target table's id.
pub const SINK_TARGET_OPTION: &str = "into.table_id";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RelationKind {
    Table,
    View,
    /// A stream from a connector (`CREATE SOURCE`); read by streaming jobs, not by `SELECT`.
    Source,
    /// A continuously maintained query result (`CREATE MATERIALIZED VIEW`).
    MaterializedView,
    /// A query whose output leaves Eddy (`CREATE SINK`); not readable with `SELECT`.
    Sink,
    /// `CREATE INDEX` on a table or materialized view: a catalog entry only
    /// (`session::indexes`), dropped with its relation.
    Index,
}

impl RelationKind {
    pub fn sql_name(&self) -> &'static str {
        match self {
            RelationKind::Table => "table",
            RelationKind::View => "view",
            RelationKind::Source => "source",
            RelationKind::MaterializedView => "materialized view",
            RelationKind::Sink => "sink",
            RelationKind::Index => "index",
        }
    }
}

/// `WATERMARK FOR column AS expression` of a source or table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WatermarkSpec {
    pub column: String,
    /// The expression's SQL, e.g. `ts - INTERVAL '5' SECOND`.
    pub expression: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Column {
    pub name: String,
    pub sql_type: SqlType,
    pub nullable: bool,
    /// A materialized view's `GROUP BY` column that its query does not select: kept and
    /// readable by name, left out of `*` (RisingWave's hidden columns).
    #[serde(default)]
    pub hidden: bool,
    /// A table column's `DEFAULT` expression (SQL text): the value of an `INSERT` that
    /// leaves the column out or writes `DEFAULT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// A stored generated column's expression (SQL text) over the row's other columns:
    /// computed at every `INSERT` and `UPDATE`, never written directly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generated: Option<String>,
    /// `COMMENT ON COLUMN`'s text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Relation {
    pub id: u32,
    pub name: String,
    pub kind: RelationKind,
    pub columns: Vec<Column>,
    /// Indices into `columns` of the primary key, empty when there is none.
    pub primary_key: Vec<usize>,
    /// The SQL text that created the object (for views: the query).
    pub definition: String,
    /// Ids of the relations this one reads from.
    pub depends_on: Vec<u32>,
    /// Connector options of a source (`WITH (...)`), keys lower-cased.
    #[serde(default)]
    pub options: BTreeMap<String, String>,
    #[serde(default)]
    pub watermark: Option<WatermarkSpec>,
    /// Parallelism of a materialized view's or sink's job, fixed when it is created.
    #[serde(default)]
    pub parallelism: Option<usize>,
    /// A materialized view declared `EMIT ON WINDOW CLOSE`.
    #[serde(default)]
    pub emit_on_window_close: bool,
    /// A materialized view's or sink's internal state tables as its job was planned, in
    /// id order (`StreamGraph::state_layout`): a restart resumes from the job's state only
    /// if planning the query again gives the same tables, so restored state is never
    /// attached to another operator. Empty in catalogs written before it was recorded.
    #[serde(default)]
    pub state_layout: Vec<String>,
    /// The order a materialized view's rows are read in without `ORDER BY`: its query's
    /// own `ORDER BY`, where that names the view's columns (RisingWave stores such a
    /// view in that order). Empty: key order.
    #[serde(default)]
    pub scan_order: Vec<ScanOrder>,
    /// `COMMENT ON TABLE | VIEW | MATERIALIZED VIEW ...`'s text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The time zone of the session that created a materialized view or sink, if not
    /// UTC: its query reads and computes wall-clock times there, also when planned
    /// again at a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
}

/// One column of a [`Relation::scan_order`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanOrder {
    /// Index into the relation's columns.
    pub column: usize,
    pub descending: bool,
    pub nulls_first: bool,
}

impl Relation {
    /// A relation of `kind` named `name` with every other field empty (no columns, keys,
    /// options, dependencies); callers fill what they have with `..Relation::new(..)`.
    pub fn new(name: impl Into<String>, kind: RelationKind) -> Self {
        Self {
            id: 0,
            name: name.into(),
            kind,
            columns: vec![],
            primary_key: vec![],
            definition: String::new(),
            depends_on: vec![],
            options: Default::default(),
            watermark: None,
            parallelism: None,
            emit_on_window_close: false,
            state_layout: vec![],
            scan_order: vec![],
            description: None,
            time_zone: None,
        }
    }

    /// A table created `APPEND ONLY`: rows are only ever inserted.
    pub fn is_append_only(&self) -> bool {
        self.kind == RelationKind::Table
            && self.options.get("append_only").map(String::as_str) == Some("true")
    }

    pub fn arrow_schema(&self) -> SchemaRef {
        Arc::new(Schema::new(
            self.columns
                .iter()
                .map(|c| c.sql_type.to_field(&c.name, c.nullable))
                .collect::<Vec<_>>(),
        ))
    }
}

/// A login role. The password is kept only as a SCRAM-SHA-256 verifier.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct User {
    pub name: String,
    pub scram_salt: Vec<u8>,
    pub scram_salted_password: Vec<u8>,
    pub is_superuser: bool,
}

#[derive(Default)]
struct CatalogState {
    next_id: u32,
    relations: BTreeMap<String, Relation>,
    users: BTreeMap<String, User>,
    /// SQL functions by name and number of arguments.
    functions: BTreeMap<(String, usize), SqlFunction>,
}

/// A `CREATE FUNCTION ... LANGUAGE SQL` function: its body is one expression over its
/// arguments, put in place of each call (see `session/sql_functions.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SqlFunction {
    pub name: String,
    /// Each argument's name, if it has one (the body may also say `$1`, `$2`, ...).
    pub arg_names: Vec<Option<String>>,
    /// Each argument's type, as SQL spells it.
    pub arg_types: Vec<String>,
    pub return_type: String,
    /// The expression the function computes, as SQL text.
    pub body: String,
}

fn function_key(name: &str, arity: usize) -> Vec<u8> {
    let mut key = FUNCTION_KEY_PREFIX.to_vec();
    key.extend_from_slice(format!("{name}/{arity}").as_bytes());
    key
}

pub struct Catalog {
    store: Arc<StateStore>,
    state: RwLock<CatalogState>,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog")
            .field("relations", &self.state.read().relations.len())
            .finish()
    }
}

impl Catalog {
    /// Loads every entry from the store.
    pub fn load(store: Arc<StateStore>) -> Result<Self> {
        let mut state = CatalogState {
            next_id: FIRST_USER_TABLE_ID,
            ..Default::default()
        };
        if let Some(v) = store.get(NEXT_ID_KEY)? {
            state.next_id = u32::from_be_bytes(v[..4].try_into().map_err(|_| {
                EddyError::internal("corrupt catalog: next id has the wrong length")
            })?);
        }
        store.scan_prefix(RELATION_KEY_PREFIX, |_, v| {
            let rel: Relation = serde_json::from_slice(v)
                .map_err(|e| EddyError::internal(format!("corrupt catalog entry: {e}")))?;
            state.relations.insert(rel.name.clone(), rel);
            Ok(())
        })?;
        store.scan_prefix(FUNCTION_KEY_PREFIX, |_, v| {
            let function: SqlFunction = serde_json::from_slice(v)
                .map_err(|e| EddyError::internal(format!("corrupt catalog entry: {e}")))?;
            state
                .functions
                .insert((function.name.clone(), function.arg_types.len()), function);
            Ok(())
        })?;
        store.scan_prefix(USER_KEY_PREFIX, |_, v| {
            let user: User = serde_json::from_slice(v)
                .map_err(|e| EddyError::internal(format!("corrupt catalog entry: {e}")))?;
            state.users.insert(user.name.clone(), user);
            Ok(())
        })?;
        Ok(Self {
            store,
            state: RwLock::new(state),
        })
    }

    pub fn get(&self, name: &str) -> Option<Relation> {
        self.state.read().relations.get(name).cloned()
    }

    pub fn get_by_id(&self, id: u32) -> Option<Relation> {
        self.state
            .read()
            .relations
            .values()
            .find(|r| r.id == id)
            .cloned()
    }

    pub fn relations(&self) -> Vec<Relation> {
        self.state.read().relations.values().cloned().collect()
    }

    pub fn relation_names(&self) -> Vec<String> {
        self.state.read().relations.keys().cloned().collect()
    }

    /// Names of the relations of one kind, sorted (for `SHOW SOURCES` and friends).
    pub fn names_of_kind(&self, kind: RelationKind) -> Vec<String> {
        self.state
            .read()
            .relations
            .values()
            .filter(|r| r.kind == kind)
            .map(|r| r.name.clone())
            .collect()
    }

    /// The relations a `DROP <kind> [IF EXISTS] names` statement names, checked before
    /// any is dropped so that a failing statement drops none. A missing name is an error
    /// with SQLSTATE `missing` (unless `if_exists`); a relation of another kind is 42809.
    pub fn resolve_drop(
        &self,
        names: &[String],
        kind: RelationKind,
        if_exists: bool,
        missing: &'static str,
    ) -> Result<Vec<Relation>> {
        let mut found = Vec::new();
        for name in names {
            match self.get(name) {
                None if if_exists => continue,
                None => {
                    return Err(EddyError::new(
                        missing,
                        format!("{} \"{name}\" does not exist", kind.sql_name()),
                    ));
                }
                Some(rel) if rel.kind != kind => {
                    return Err(EddyError::new(
                        sqlstate::WRONG_OBJECT_TYPE,
                        format!("\"{name}\" is not a {}", kind.sql_name()),
                    ));
                }
                Some(rel) => found.push(rel),
            }
        }
        Ok(found)
    }

    /// Adds a relation, assigning its id. Fails if the name is taken.
    pub fn create_relation(&self, mut rel: Relation) -> Result<Relation> {
        let mut state = self.state.write();
        if let Some(existing) = state.relations.get(&rel.name) {
            return Err(EddyError::new(
                sqlstate::DUPLICATE_TABLE,
                format!(
                    "relation \"{}\" already exists ({})",
                    rel.name,
                    existing.kind.sql_name()
                ),
            ));
        }
        rel.id = state.next_id;
        let mut wb = WriteBatch::default();
        wb.put(NEXT_ID_KEY, (rel.id + 1).to_be_bytes());
        wb.put(relation_key(rel.id), encode_json(&rel)?);
        self.store.write(wb)?;
        state.next_id = rel.id + 1;
        state.relations.insert(rel.name.clone(), rel.clone());
        Ok(rel)
    }

    /// Records a job's new parallelism (`ALTER ... SET PARALLELISM`).
    pub fn set_parallelism(&self, name: &str, parallelism: usize) -> Result<Relation> {
        self.update(name, |r| r.parallelism = Some(parallelism))
    }

    /// Changes a relation and stores it.
    fn update(&self, name: &str, change: impl FnOnce(&mut Relation)) -> Result<Relation> {
        self.update_with(name, change, WriteBatch::default())
    }

    /// [`Catalog::update`], storing the relation in the same write as `with`.
    fn update_with(
        &self,
        name: &str,
        change: impl FnOnce(&mut Relation),
        mut with: WriteBatch,
    ) -> Result<Relation> {
        let mut state = self.state.write();
        let rel = state
            .relations
            .get_mut(name)
            .ok_or_else(|| EddyError::undefined_table(name))?;
        let mut updated = rel.clone();
        change(&mut updated);
        with.put(relation_key(updated.id), encode_json(&updated)?);
        self.store.write(with)?;
        *rel = updated.clone();
        Ok(updated)
    }

    /// The bytes (keys and values) RocksDB holds for a relation's rows: a table's, or a
    /// materialized view's.
    pub fn stored_bytes(&self, id: u32) -> Result<u64> {
        Ok(self.store.table_footprint(id)?.1)
    }

    /// Sets (or, with `None`, removes) the description of a relation or of one of its
    /// columns.
    pub fn set_description(
        &self,
        name: &str,
        column: Option<usize>,
        description: Option<String>,
    ) -> Result<Relation> {
        self.update(name, |r| match column {
            Some(i) => r.columns[i].description = description,
            None => r.description = description,
        })
    }

    /// A table's new columns, primary key indices and definition (`ALTER TABLE ... ADD |
    /// DROP COLUMN`), written in one write with `rows`, its rows rewritten for them.
    pub fn alter_columns(
        &self,
        name: &str,
        columns: Vec<Column>,
        primary_key: Vec<usize>,
        definition: String,
        rows: WriteBatch,
    ) -> Result<Relation> {
        self.update_with(
            name,
            |r| {
                r.columns = columns;
                r.primary_key = primary_key;
                r.definition = definition;
            },
            rows,
        )
    }

    /// Records the state layout a job now runs with (see [`Relation::state_layout`]).
    pub fn set_state_layout(&self, name: &str, layout: Vec<String>) -> Result<Relation> {
        self.update(name, |r| r.state_layout = layout)
    }

    /// Renames a relation and stores, in the same write, the relations whose definitions
    /// were rewritten to the new name (`rewritten`, by id; the renamed one may be among
    /// them).
    pub fn rename(&self, name: &str, new_name: &str, rewritten: Vec<Relation>) -> Result<Relation> {
        let mut state = self.state.write();
        let mut renamed = state
            .relations
            .get(name)
            .cloned()
            .ok_or_else(|| EddyError::undefined_table(name))?;
        if state.relations.contains_key(new_name) {
            return Err(EddyError::new(
                sqlstate::DUPLICATE_TABLE,
                format!("relation \"{new_name}\" already exists"),
            ));
        }
        if let Some(own) = rewritten.iter().find(|r| r.id == renamed.id) {
            renamed = own.clone();
        }
        renamed.name = new_name.to_string();
        let mut wb = WriteBatch::default();
        wb.put(relation_key(renamed.id), encode_json(&renamed)?);
        let others: Vec<&Relation> = rewritten.iter().filter(|r| r.id != renamed.id).collect();
        for r in &others {
            wb.put(relation_key(r.id), encode_json(r)?);
        }
        self.store.write(wb)?;
        state.relations.remove(name);
        state
            .relations
            .insert(new_name.to_string(), renamed.clone());
        for r in others {
            state.relations.insert(r.name.clone(), r.clone());
        }
        Ok(renamed)
    }

    /// Removes a relation. Fails if another relation depends on it.
    pub fn drop_relation(&self, name: &str) -> Result<Relation> {
        let mut state = self.state.write();
        let rel = state
            .relations
            .get(name)
            .cloned()
            .ok_or_else(|| EddyError::undefined_table(name))?;
        let mut dependents = state
            .relations
            .values()
            .filter(|r| r.depends_on.contains(&rel.id));
        // Name what keeps it (an index would go with it).
        if let Some(dependent) = dependents
            .clone()
            .find(|r| r.kind != RelationKind::Index)
            .or_else(|| dependents.next())
        {
            // RisingWave's words for a table that sinks write into.
            let written_by_sink = dependent.kind == RelationKind::Sink
                && dependent.options.get(SINK_TARGET_OPTION) == Some(&rel.id.to_string());
            return Err(EddyError::new(
                sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                format!(
                    "cannot drop {} {} because {} {} depends on it{}",
                    rel.kind.sql_name(),
                    rel.name,
                    dependent.kind.sql_name(),
                    dependent.name,
                    if written_by_sink {
                        " (Table used by incoming sinks; DROP ... CASCADE drops them too)"
                    } else {
                        ""
                    }
                ),
            ));
        }
        let mut wb = WriteBatch::default();
        wb.delete(relation_key(rel.id));
        self.store.write(wb)?;
        state.relations.remove(name);
        Ok(rel)
    }

    pub fn user(&self, name: &str) -> Option<User> {
        self.state.read().users.get(name).cloned()
    }

    pub fn users(&self) -> Vec<User> {
        self.state.read().users.values().cloned().collect()
    }

    /// Creates or replaces a user.
    pub fn put_user(&self, user: User) -> Result<()> {
        let mut state = self.state.write();
        let mut wb = WriteBatch::default();
        wb.put(user_key(&user.name), encode_json(&user)?);
        self.store.write(wb)?;
        state.users.insert(user.name.clone(), user);
        Ok(())
    }

    /// The SQL function `name` taking `arity` arguments.
    pub fn function(&self, name: &str, arity: usize) -> Option<SqlFunction> {
        self.state
            .read()
            .functions
            .get(&(name.to_string(), arity))
            .cloned()
    }

    /// Whether any SQL function exists (calls need no lookup otherwise).
    pub fn has_functions(&self) -> bool {
        !self.state.read().functions.is_empty()
    }

    /// Records a SQL function; one of the same name and number of arguments is replaced
    /// only when `replace` (`CREATE OR REPLACE`), else it is error 42723.
    pub fn put_function(&self, function: SqlFunction, replace: bool) -> Result<()> {
        let mut state = self.state.write();
        let key = (function.name.clone(), function.arg_types.len());
        if !replace && state.functions.contains_key(&key) {
            return Err(EddyError::new(
                "42723",
                format!(
                    "function \"{}\" with {} argument(s) already exists",
                    function.name, key.1
                ),
            ));
        }
        let mut wb = WriteBatch::default();
        wb.put(function_key(&key.0, key.1), encode_json(&function)?);
        self.store.write(wb)?;
        state.functions.insert(key, function);
        Ok(())
    }

    /// Drops the SQL functions named `name` (of `arity` arguments, or all of them);
    /// returns how many there were.
    pub fn drop_function(&self, name: &str, arity: Option<usize>) -> Result<usize> {
        let mut state = self.state.write();
        let keys: Vec<(String, usize)> = state
            .functions
            .keys()
            .filter(|(n, a)| n == name && arity.is_none_or(|arity| arity == *a))
            .cloned()
            .collect();
        let mut wb = WriteBatch::default();
        for (n, a) in &keys {
            wb.delete(function_key(n, *a));
        }
        self.store.write(wb)?;
        for key in &keys {
            state.functions.remove(key);
        }
        Ok(keys.len())
    }

    pub fn drop_user(&self, name: &str) -> Result<bool> {
        let mut state = self.state.write();
        if state.users.remove(name).is_none() {
            return Ok(false);
        }
        let mut wb = WriteBatch::default();
        wb.delete(user_key(name));
        self.store.write(wb)?;
        Ok(true)
    }
}

fn relation_key(id: u32) -> Vec<u8> {
    let mut k = RELATION_KEY_PREFIX.to_vec();
    k.extend_from_slice(&id.to_be_bytes());
    k
}

fn user_key(name: &str) -> Vec<u8> {
    let mut k = USER_KEY_PREFIX.to_vec();
    k.extend_from_slice(name.as_bytes());
    k
}

fn encode_json<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(v)
        .map_err(|e| EddyError::internal(format!("cannot encode catalog entry: {e}")))
}
