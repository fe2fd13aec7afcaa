//! The stream graph of a job: fragments connected by exchanges.
//!
//! A fragment is a source (or a merge of inputs) followed by a chain of operators that run
//! together in one task per subtask, called directly with no channel between them. The
//! planner cuts a new fragment wherever rows must move between subtasks: before a
//! `GROUP BY` (hash exchange by key group), where parallelism changes (rebalance), and
//! where several inputs meet (`UNION ALL`).

use super::operators::Operator;
use crate::connectors::ConnectorSpec;
use crate::error::Result;
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::physical_expr::PhysicalExpr;
use std::fmt::Write;
use std::sync::Arc;

/// Builds one instance of an operator for one subtask (each subtask owns its state).
pub type OperatorFactory = Arc<dyn Fn() -> Result<Box<dyn Operator>> + Send + Sync>;

/// An operator of a fragment's chain, as the planner describes it.
#[derive(Clone)]
pub struct OperatorSpec {
    /// What `EXPLAIN` prints, e.g. `HashAgg(group: [auction], aggs: [count(*)])`.
    pub describe: String,
    pub build: OperatorFactory,
}

/// How rows travel from the subtasks of one fragment to those of the next.
#[derive(Clone)]
pub enum Exchange {
    /// Subtask i sends to subtask i (same parallelism).
    Forward,
    /// By key group of the given expressions: every row of a key reaches one subtask.
    Hash {
        keys: Vec<Arc<dyn PhysicalExpr>>,
        key_types: Vec<DataType>,
        describe: String,
    },
    /// By key group of each row's stream key (keyed streams changing parallelism: every
    /// update of a key must follow the same path so it stays in order).
    HashStreamKey,
    /// Whole chunks dealt round robin (append-only streams changing parallelism).
    Rebalance,
    /// Everything to the single subtask of the next fragment.
    Single,
}

impl Exchange {
    pub fn describe(&self) -> String {
        match self {
            Exchange::Forward => "forward".into(),
            Exchange::Hash { describe, .. } => format!("hash({describe})"),
            Exchange::HashStreamKey => "hash(stream key)".into(),
            Exchange::Rebalance => "rebalance".into(),
            Exchange::Single => "single".into(),
        }
    }
}

/// What the runtime knows of a source, table or view a fragment reads: the catalog's
/// `Relation` stays with the planner and the session.
#[derive(Clone, Debug)]
pub struct InputRelation {
    pub id: u32,
    pub name: String,
    /// What it is, as SQL names it (`table`, `materialized view`, `source`).
    pub kind: &'static str,
    /// A table, whose change stream carries its log position.
    pub is_table: bool,
    /// Its `WITH` options (a source's error policy and idle timeout).
    pub options: std::collections::BTreeMap<String, String>,
}

/// Where a fragment's rows come from.
#[derive(Clone)]
pub enum FragmentInput {
    /// A connector; subtask i reads splits i, i + parallelism, ...
    Connector {
        source: InputRelation,
        spec: ConnectorSpec,
        /// Columns read, by index.
        projection: Option<Vec<usize>>,
        watermark: Option<super::watermark::SourceWatermark>,
    },
    /// The change stream of a table or materialized view: its current rows first, then
    /// every change. Always one subtask.
    Changes {
        relation: InputRelation,
        projection: Option<Vec<usize>>,
        watermark: Option<super::watermark::SourceWatermark>,
    },
    /// Other fragments, by index, each with the exchange on its edge.
    Upstream(Vec<(usize, Exchange)>),
}

/// What the last fragment does with its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Terminal {
    Materialize,
    Blackhole,
    /// A sink connector's writer, with the name tasks show (`FileSink`, ...).
    Sink(&'static str),
}

impl Terminal {
    pub fn name(&self) -> &'static str {
        match self {
            Terminal::Materialize => "Materialize",
            Terminal::Blackhole => "BlackholeSink",
            Terminal::Sink(name) => name,
        }
    }
}

#[derive(Clone)]
pub struct Fragment {
    pub input: FragmentInput,
    pub chain: Vec<OperatorSpec>,
    pub parallelism: usize,
    /// Whether the rows leaving this fragment carry stream keys (updates and deletes).
    pub keyed: bool,
}

/// A job's fragments; inputs come before the fragments that read them, and the last one
/// is the job's output.
#[derive(Clone)]
pub struct StreamGraph {
    pub fragments: Vec<Fragment>,
    /// The output's columns.
    pub schema: SchemaRef,
    /// The output is keyed (by group keys): rows are replaced, not appended.
    pub keyed: bool,
}

impl StreamGraph {
    /// The job's internal state tables in the order their ids are given (see
    /// `JobRegistry::spawn`): each connector source's positions, then each stateful
    /// operator's tables, fragment by fragment — each described by what keeps it. The
    /// fragments' parallelism does not change it.
    pub fn state_layout(&self) -> Result<Vec<String>> {
        let mut layout = Vec::new();
        for fragment in &self.fragments {
            if let FragmentInput::Connector { source, .. } = &fragment.input {
                layout.push(format!("positions of {}", source.name));
            }
            for spec in &fragment.chain {
                let tables = (spec.build)()?.state_tables();
                for k in 0..tables {
                    layout.push(if tables > 1 {
                        format!("{} (table {k})", spec.describe)
                    } else {
                        spec.describe.clone()
                    });
                }
            }
        }
        Ok(layout)
    }

    /// The text `EXPLAIN CREATE MATERIALIZED VIEW` prints: one block per fragment, the
    /// output first.
    pub fn explain(&self, terminal: Terminal) -> Vec<String> {
        let mut lines = Vec::new();
        let last = self.fragments.len() - 1;
        for (id, f) in self.fragments.iter().enumerate().rev() {
            let mut header = format!("Fragment {id} (parallelism {})", f.parallelism);
            if let Some(downstream) = self.downstream_of(id) {
                let _ = write!(header, " -> Fragment {downstream}");
            }
            lines.push(header);
            let mut chain: Vec<String> = Vec::new();
            if id == last {
                chain.push(terminal.name().into());
            }
            chain.extend(f.chain.iter().rev().map(|o| o.describe.clone()));
            // The inputs of the first operator, all at the same depth (a join has two).
            let mut inputs = Vec::new();
            match &f.input {
                FragmentInput::Connector { source, spec, .. } => inputs.push(format!(
                    "Source({}, connector: {}, splits: {})",
                    source.name,
                    spec.name(),
                    spec.split_count()
                )),
                FragmentInput::Changes { relation, .. } => {
                    inputs.push(format!("Changes({} {})", relation.kind, relation.name))
                }
                FragmentInput::Upstream(edges) => {
                    for (from, exchange) in edges {
                        inputs.push(format!(
                            "Exchange({}) <- Fragment {from}",
                            exchange.describe()
                        ));
                    }
                }
            }
            for (depth, op) in chain.iter().enumerate() {
                let indent = "  ".repeat(depth + 1);
                lines.push(format!("{indent}{op}"));
            }
            let indent = "  ".repeat(chain.len() + 1);
            lines.extend(inputs.iter().map(|input| format!("{indent}{input}")));
        }
        lines
    }

    fn downstream_of(&self, id: usize) -> Option<usize> {
        self.fragments.iter().position(|f| match &f.input {
            FragmentInput::Upstream(edges) => edges.iter().any(|(from, _)| *from == id),
            _ => false,
        })
    }
}
