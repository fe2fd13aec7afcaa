//! `CREATE SINK name INTO table [(columns)] AS query` (RisingWave's sink into a table):
//! the query's changes are applied to an Eddy table, whose own views then follow them.
//!
//! Each subtask of the sink's job applies its rows as they come, in order: inserts (and
//! an update's new row) as upserts, deletes (and an update's old row) by the table's
//! primary key. A table without a primary key can only be appended to, so an updating
//! query needs `force_append_only = 'true'` there (deletes then dropped, an update's new
//! row appended); `type = 'append-only'` asks for the same on any table. After a
//! restart the job repeats the changes since its checkpoint: idempotent on a table with
//! a primary key, appended again on one without (at least once).

use super::Engine;
use crate::catalog::{Relation, RelationKind};
use crate::error::{EddyError, Result, sqlstate};
use crate::sql::sink::SinkTarget;
use crate::state::StateTable;
use crate::stream::graph::StreamGraph;
use crate::stream::job::JobOutput;
use crate::stream::sink::{SinkFactory, SinkWriter};
use crate::stream::{Op, StreamChunk};
use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Option keys Eddy keeps with the sink (the target by id, so a rename keeps it).
const TARGET_ID: &str = crate::catalog::SINK_TARGET_OPTION;
const APPEND_ONLY: &str = "into.append_only";

/// Whether a sink's stored options make it a sink into a table.
pub(super) fn is_into_table(options: &BTreeMap<String, String>) -> bool {
    options.contains_key(TARGET_ID)
}

/// `FLUSH` (and `RW_IMPLICIT_FLUSH`): a checkpoint round makes every earlier write
/// visible in the views reading it; a sink writes into its table while it processes an
/// epoch, so the table's own readers see those rows one round later. One more round per
/// sink into a table (a few at most) covers chains of them.
pub(super) async fn flush(engine: &Engine) {
    let sinks_into_tables = engine
        .catalog
        .relations()
        .iter()
        .filter(|r| r.kind == RelationKind::Sink && is_into_table(&r.options))
        .count();
    for _ in 0..=sinks_into_tables.min(3) {
        engine.checkpoints.flush().await;
    }
}

/// A checked `CREATE SINK ... INTO`.
pub(super) struct Prepared {
    pub table: Relation,
    /// The sink's query made the table's whole rows: the query's columns where they
    /// go, each other column's default (or NULL).
    pub query: String,
    /// The options to store with the sink.
    pub options: BTreeMap<String, String>,
}

/// Alias of the derived table holding the user's query in [`Prepared::query`].
const SOURCE: &str = "__eddy_sink_source";

/// Checks `CREATE SINK ... INTO` against its target and its query (`graph`, `query`
/// planned as written).
pub(super) fn prepare(
    engine: &Engine,
    target: &SinkTarget,
    options: &BTreeMap<String, String>,
    query: &str,
    graph: &StreamGraph,
) -> Result<Prepared> {
    let table = engine
        .catalog
        .get(&target.table)
        .ok_or_else(|| EddyError::undefined_table(&target.table))?;
    if table.kind != RelationKind::Table {
        return Err(EddyError::new(
            sqlstate::WRONG_OBJECT_TYPE,
            format!(
                "cannot sink into {} \"{}\": only a table can be a sink's target",
                table.kind.sql_name(),
                table.name
            ),
        ));
    }
    if options.contains_key("format") || options.contains_key("encode") {
        return Err(EddyError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            "connector table is not supported by FORMAT ... ENCODE ... syntax: \
             a sink into a table writes the table's rows",
        ));
    }
    for key in options.keys() {
        if !matches!(key.as_str(), "type" | "force_append_only" | "primary_key") {
            return Err(EddyError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!("unknown option \"{key}\" for a sink into a table"),
            ));
        }
    }
    let columns: Vec<usize> = if target.columns.is_empty() {
        (0..table.columns.len()).collect()
    } else {
        target
            .columns
            .iter()
            .map(|c| {
                table
                    .columns
                    .iter()
                    .position(|col| &col.name == c)
                    .ok_or_else(|| {
                        EddyError::new(
                            sqlstate::UNDEFINED_COLUMN,
                            format!(
                                "column \"{c}\" of relation \"{}\" does not exist",
                                table.name
                            ),
                        )
                    })
            })
            .collect::<Result<_>>()?
    };
    if let Some(repeated) = columns
        .iter()
        .enumerate()
        .find(|(i, c)| columns[..*i].contains(c))
        .map(|(_, c)| &table.columns[*c].name)
    {
        return Err(EddyError::new(
            "42701", // duplicate_column
            format!("column \"{repeated}\" specified more than once"),
        ));
    }
    if let Some(generated) = table.columns.iter().find(|c| c.generated.is_some()) {
        return Err(EddyError::not_supported(format!(
            "a sink into a table with a generated column (\"{}\") is not supported",
            generated.name
        )));
    }
    if columns.len() != graph.schema.fields().len() {
        return Err(EddyError::new(
            sqlstate::SYNTAX_ERROR,
            format!(
                "the sink's query has {} columns and fills {} columns of \"{}\"",
                graph.schema.fields().len(),
                columns.len(),
                table.name
            ),
        ));
    }
    let type_option = options.get("type").map(|t| t.to_ascii_lowercase());
    let forced = options
        .get("force_append_only")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let append_only = match type_option.as_deref() {
        Some("append-only") => true,
        Some("upsert") | None => table.primary_key.is_empty(),
        Some(other) => {
            return Err(EddyError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!("sink type '{other}' is not supported; use 'append-only' or 'upsert'"),
            ));
        }
    };
    if append_only && graph.keyed && !forced {
        return Err(EddyError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            if table.primary_key.is_empty() {
                "Only append-only sinks can sink to a table without primary keys. \
                 The sink's query updates and deletes rows: add force_append_only = 'true' \
                 to append its inserts only"
                    .to_string()
            } else {
                "the sink's query updates and deletes rows, so it cannot be append-only; \
                 add force_append_only = 'true' to append its inserts only"
                    .to_string()
            },
        ));
    }
    if !append_only && let Some(missing) = table.primary_key.iter().find(|k| !columns.contains(k)) {
        return Err(EddyError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!(
                "the sink must fill the primary key column \"{}\" of \"{}\"",
                table.columns[*missing].name, table.name
            ),
        ));
    }
    let items = table
        .columns
        .iter()
        .enumerate()
        .map(|(i, column)| match columns.iter().position(|c| *c == i) {
            Some(from) => Ok(format!("{SOURCE}.c{from}")),
            None => Ok(super::column_values::default_of(column)?.to_string()),
        })
        .collect::<Result<Vec<_>>>()?;
    let names: Vec<String> = (0..columns.len()).map(|i| format!("c{i}")).collect();
    let query = format!(
        "SELECT {} FROM ({query}) AS {SOURCE}({})",
        items.join(", "),
        names.join(", ")
    );
    let mut stored = options.clone();
    stored.insert(TARGET_ID.into(), table.id.to_string());
    stored.insert(APPEND_ONLY.into(), append_only.to_string());
    Ok(Prepared {
        table,
        query,
        options: stored,
    })
}

/// The job output of a sink into a table: its target's state table.
pub(super) fn output(engine: &Engine, sink: &Relation) -> Result<JobOutput> {
    let broken = || EddyError::internal(format!("sink \"{}\" lost its target", sink.name));
    let id: u32 = sink.options[TARGET_ID].parse().map_err(|_| broken())?;
    let table = engine.catalog.get_by_id(id).ok_or_else(|| {
        EddyError::undefined_table(&format!("(the target of sink \"{}\")", sink.name))
    })?;
    let append_only = sink.options.get(APPEND_ONLY).is_some_and(|v| v == "true");
    let state = engine.schema_provider.state_table_for(&table)?;
    Ok(JobOutput::Sink(Arc::new(TableSink {
        table: state,
        target: table.arrow_schema(),
        append_only,
    })))
}

/// The sink's target and how it writes; every subtask's writer is a copy.
#[derive(Clone)]
struct TableSink {
    table: Arc<StateTable>,
    /// The table's columns: the sink's query gives them all, in order
    /// ([`Prepared::query`]).
    target: arrow::datatypes::SchemaRef,
    append_only: bool,
}

impl SinkFactory for TableSink {
    fn name(&self) -> &'static str {
        "TableSink"
    }

    fn writer(&self, _subtask: usize) -> Result<Box<dyn SinkWriter>> {
        Ok(Box::new(self.clone()))
    }
}

impl TableSink {
    /// The chunk's rows as the table's rows: each column cast to the table's type.
    fn table_rows(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let columns = batch
            .columns()
            .iter()
            .zip(self.target.fields())
            .map(|(column, field)| Ok(arrow::compute::cast(column, field.data_type())?))
            .collect::<Result<Vec<ArrayRef>>>()?;
        Ok(RecordBatch::try_new(self.target.clone(), columns)?)
    }

    /// Applies rows `rows` of `batch`, all inserts or all deletes.
    fn apply(&self, batch: &RecordBatch, rows: &[u32], delete: bool) -> Result<()> {
        if rows.is_empty() || (delete && self.append_only) {
            return Ok(());
        }
        // A chunk of one kind (an append-only stream's) is applied whole.
        let taken = if rows.len() == batch.num_rows() {
            batch.clone()
        } else {
            arrow::compute::take_record_batch(batch, &UInt32Array::from(rows.to_vec()))?
        };
        if delete {
            self.table.delete_rows_with_keys_of(&taken)?;
        } else {
            self.table.upsert(&taken)?;
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl SinkWriter for TableSink {
    async fn write(&mut self, chunk: StreamChunk) -> Result<()> {
        let batch = self.table_rows(&chunk.batch)?;
        // Runs of inserts and of deletes, applied in the chunk's order.
        let mut run: Vec<u32> = Vec::new();
        let mut run_deletes = false;
        for (row, op) in chunk.ops.iter().enumerate() {
            let delete = matches!(op, Op::Delete | Op::UpdateDelete);
            if delete != run_deletes && !run.is_empty() {
                self.apply(&batch, &run, run_deletes)?;
                run.clear();
            }
            run_deletes = delete;
            run.push(row as u32);
        }
        self.apply(&batch, &run, run_deletes)
    }

    async fn barrier(&mut self, _epoch: u64) -> Result<()> {
        Ok(())
    }
}
