//! A harness for unit tests of operators and chains, after RisingWave's executor tests:
//! scripted chunks (with ops and keys), watermarks and barriers go in, per input; what
//! comes out is checked as text, and state goes to a real RocksDB store in a temporary
//! directory, so a test can checkpoint, rebuild the chain and restore it.

use super::operators::{self, Operator, WatermarkOutput};
use super::{Op, StreamChunk, Watermark};
use crate::error::Result;
use crate::state::StateWrites;
use crate::state::{OperatorState, StateStore};
use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::SchemaRef;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::common::ScalarValue;
use std::collections::BTreeMap;
use std::sync::Arc;

type ChainFactory = Box<dyn Fn() -> Result<Vec<Box<dyn Operator>>>>;

pub struct Harness {
    factory: ChainFactory,
    chain: Vec<Box<dyn Operator>>,
    tables: Vec<Vec<OperatorState>>,
    store: Arc<StateStore>,
    /// State entries (puts and deletes) the last barrier wrote.
    pub last_writes: usize,
    _dir: tempfile::TempDir,
}

impl Harness {
    /// A chain built by `factory` (again at each [`Harness::restart`]), as subtask 0 of 1.
    pub fn new(factory: impl Fn() -> Result<Vec<Box<dyn Operator>>> + 'static) -> Self {
        Self::with_cache_limit(64 << 20, factory)
    }

    /// A harness whose state caches share `cache_bytes` (`--state-cache-mb`): a tiny
    /// limit makes operators evict whatever is clean at every barrier.
    pub fn with_cache_limit(
        cache_bytes: usize,
        factory: impl Fn() -> Result<Vec<Box<dyn Operator>>> + 'static,
    ) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let store = Arc::new(StateStore::open(dir.path(), cache_bytes).expect("state store"));
        let chain = factory().expect("chain");
        let mut next_table = 1u32;
        let tables = chain
            .iter()
            .map(|op| {
                (0..op.state_tables())
                    .map(|_| {
                        next_table += 1;
                        OperatorState::new(next_table, store.clone(), 0, 1)
                    })
                    .collect()
            })
            .collect();
        let mut harness = Self {
            factory: Box::new(factory),
            chain,
            tables,
            store,
            last_writes: 0,
            _dir: dir,
        };
        // A task connects every stateful operator to its tables before any input.
        harness.restore();
        harness
    }

    fn restore(&mut self) {
        for (op, tables) in self.chain.iter_mut().zip(&self.tables) {
            if !tables.is_empty() {
                op.restore(tables).expect("restore");
            }
        }
    }

    /// Runs a chunk of input `input` through the chain.
    pub fn push(&mut self, input: usize, chunk: StreamChunk) -> Vec<StreamChunk> {
        operators::run_chain(&mut self.chain, input, chunk).expect("chunk processed")
    }

    pub fn watermark(&mut self, input: usize, watermark: Watermark) -> WatermarkOutput {
        operators::run_watermark(&mut self.chain, input, watermark).expect("watermark")
    }

    /// A barrier passes: what the chain releases at the end of the epoch; its state is
    /// written to the store.
    pub fn barrier(&mut self) -> Vec<StreamChunk> {
        let out = operators::barrier_chain(&mut self.chain).expect("barrier");
        let mut batch = StateWrites::default();
        for (op, tables) in self.chain.iter_mut().zip(&self.tables) {
            if !tables.is_empty() {
                op.checkpoint(tables, &mut batch).expect("checkpoint");
            }
        }
        self.last_writes = batch.len();
        self.store.write(batch.into_batch()).expect("state written");
        out
    }

    /// The input ends: what the chain releases then.
    pub fn finish(&mut self) -> Vec<StreamChunk> {
        operators::finish_chain(&mut self.chain).expect("finish")
    }

    /// The job restarts from the last barrier: a new chain, restored from the store.
    pub fn restart(&mut self) {
        self.chain = (self.factory)().expect("chain");
        self.restore();
    }

    /// The state caches' shared budget (its load and eviction counters).
    pub fn cache_budget(&self) -> &Arc<crate::state::CacheBudget> {
        self.store.cache_budget()
    }

    /// Writes a state entry directly, as an older version of an operator would have.
    pub fn put_state(&self, operator: usize, table: usize, key: &[u8], value: &[u8]) {
        let mut batch = StateWrites::default();
        self.tables[operator][table].put_keyed(&mut batch, key, Some(value));
        self.store.write(batch.into_batch()).expect("state written");
    }

    /// Keyed state entries the chain's operators have written.
    pub fn state_entries(&self) -> usize {
        let mut n = 0;
        for table in self.tables.iter().flatten() {
            table
                .scan_owned(|_, _| {
                    n += 1;
                    Ok(())
                })
                .expect("scan");
        }
        n
    }
}

/// A chunk of rows given as scalars, one op each; `keys` gives each row's stream key.
pub fn chunk(
    schema: &SchemaRef,
    rows: Vec<(Op, Vec<ScalarValue>)>,
    keys: Option<Vec<Vec<u8>>>,
) -> StreamChunk {
    let columns: Vec<ArrayRef> = (0..schema.fields().len())
        .map(|c| {
            let values = rows.iter().map(|(_, r)| r[c].clone());
            if rows.is_empty() {
                arrow::array::new_empty_array(schema.field(c).data_type())
            } else {
                ScalarValue::iter_to_array(values).expect("column")
            }
        })
        .collect();
    let batch = RecordBatch::try_new(schema.clone(), columns).expect("batch");
    StreamChunk {
        ops: rows.iter().map(|(op, _)| *op).collect(),
        batch,
        keys,
    }
}

/// Each row as `op col, col, ...` (`+`, `-`, `U-`, `U+`), NULL as `NULL`.
pub fn rows_text(chunks: &[StreamChunk]) -> Vec<String> {
    let options = FormatOptions::default().with_null("NULL");
    let mut out = Vec::new();
    for chunk in chunks {
        let formatters: Vec<ArrayFormatter> = chunk
            .batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).expect("formatter"))
            .collect();
        for (row, op) in chunk.ops.iter().enumerate() {
            let op = match op {
                Op::Insert => "+",
                Op::Delete => "-",
                Op::UpdateDelete => "U-",
                Op::UpdateInsert => "U+",
            };
            let values: Vec<String> = formatters
                .iter()
                .map(|f| f.value(row).to_string())
                .collect();
            out.push(format!("{op} {}", values.join(", ")));
        }
    }
    out
}

/// What a materialized view holds after applying `chunks`: keyed rows replace and
/// delete by key (a delete of a missing key panics: the stream is inconsistent),
/// append-only rows accumulate. Sorted rows as text.
#[derive(Default)]
pub struct Materialized {
    keyed: BTreeMap<Vec<u8>, String>,
    appended: Vec<String>,
}

impl Materialized {
    pub fn apply(&mut self, chunks: &[StreamChunk]) {
        for chunk in chunks {
            let texts = rows_text(std::slice::from_ref(chunk));
            for (row, text) in texts.into_iter().enumerate() {
                let values = text
                    .split_once(' ')
                    .map(|(_, v)| v.to_string())
                    .unwrap_or_default();
                let op = chunk.ops[row];
                match &chunk.keys {
                    Some(keys) => {
                        if op.is_insert() {
                            self.keyed.insert(keys[row].clone(), values);
                        } else {
                            let old = self.keyed.remove(&keys[row]);
                            assert_eq!(
                                old.as_deref(),
                                Some(values.as_str()),
                                "delete of a row not held"
                            );
                        }
                    }
                    None => {
                        assert!(op.is_insert(), "a delete on an append-only stream");
                        self.appended.push(values);
                    }
                }
            }
        }
    }

    pub fn rows(&self) -> Vec<String> {
        let mut rows: Vec<String> = self
            .keyed
            .values()
            .cloned()
            .chain(self.appended.iter().cloned())
            .collect();
        rows.sort();
        rows
    }
}
