//! Connectors: where streams come from, and where sinks write to (`sink`).
//!
//! A source is declared with `CREATE SOURCE ... WITH (connector = '...', ...)`; its
//! options are checked here when the source is created, so a typo is an error then and
//! not when a job starts. Each connector produces Arrow batches of the source's schema and
//! reports its position per split, so a checkpoint can rewind it.

pub mod avro;
pub mod csv_line;
pub mod datagen;
pub mod file;
pub mod kafka;
mod kafka_resume;
pub mod nexmark;
pub mod object_files;
pub mod object_location;
pub mod pgoutput;
pub mod postgres_cdc;
pub mod processing_time;
pub mod records;
pub mod schema_registry;
pub mod sink;
pub mod table_letters;
pub mod values;

use crate::error::{EddyError, Result, sqlstate};
use arrow::datatypes::SchemaRef;
use std::collections::BTreeMap;

/// The source option saying what happens to records that do not fit the schema.
pub const ERROR_POLICY_OPTION: &str = "error.policy";

/// What a source does with a record that does not decode or fit its columns: always
/// skipped and counted (`eddy_catalog.jobs.malformed_rows`); with `dead_letter` also
/// kept, with why, in `eddy_catalog.dead_letters`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorPolicy {
    Skip,
    DeadLetter,
}

/// A source's `error.policy` (default `skip`).
pub fn error_policy(options: &BTreeMap<String, String>) -> Result<ErrorPolicy> {
    match options
        .get(ERROR_POLICY_OPTION)
        .map(|p| p.to_ascii_lowercase())
        .as_deref()
    {
        None | Some("skip") => Ok(ErrorPolicy::Skip),
        Some("dead_letter") => Ok(ErrorPolicy::DeadLetter),
        Some(other) => Err(EddyError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("error.policy must be 'skip' or 'dead_letter', not '{other}'"),
        )),
    }
}

/// The source option saying after how long without records a source subtask stops
/// holding back the watermark downstream (milliseconds, `0`: never).
pub const IDLE_TIMEOUT_OPTION: &str = "watermark.idle.timeout.ms";
/// The idle timeout of a source with a watermark that sets none.
const DEFAULT_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A source's idle timeout (`None`: never idle).
pub fn idle_timeout(options: &BTreeMap<String, String>) -> Result<Option<std::time::Duration>> {
    match options.get(IDLE_TIMEOUT_OPTION) {
        None => Ok(Some(DEFAULT_IDLE_TIMEOUT)),
        Some(v) => {
            let ms = parse_option::<u64>(IDLE_TIMEOUT_OPTION, v)?;
            Ok((ms > 0).then(|| std::time::Duration::from_millis(ms)))
        }
    }
}

/// The connectors Eddy knows, with what they need.
#[derive(Debug, Clone, PartialEq)]
pub enum ConnectorSpec {
    Datagen(datagen::DatagenSpec),
    Nexmark(nexmark::NexmarkSpec),
    File(file::FileSpec),
    /// The `file` connector over object storage (S3, Parquet, new files picked up).
    ObjectFiles(object_files::ObjectFilesSpec),
    Kafka(kafka::KafkaSpec),
    /// Another connector, with `PROCTIME()` columns filled in.
    WithProcessingTime(processing_time::ProcessingTimeSpec),
    /// The rows of a `VALUES` list in a view's query (not a `WITH (connector = ...)`).
    Values(values::ValuesSpec),
}

/// One split of a source, read batch by batch from a position.
pub trait SplitReader: Send {
    /// The next batch of at most `max_rows` rows, `None` once the split has ended.
    fn next_batch(&mut self, max_rows: usize) -> Result<Option<arrow::array::RecordBatch>>;
    /// Rows read so far: where to resume from.
    fn offset(&self) -> u64;
    /// Records skipped because they did not fit the schema.
    fn malformed(&self) -> u64 {
        0
    }
    /// The records skipped since the last call, with why (for dead letters).
    fn take_rejected(&mut self) -> Vec<records::Rejected> {
        vec![]
    }
    /// Records waiting upstream beyond the position, when the connector knows (Kafka's
    /// high watermark minus the next offset, as of the last fetch).
    fn lag(&mut self) -> Option<u64> {
        None
    }
    /// Whether an empty batch means "nothing has arrived yet" (a topic), so the source
    /// should wait a moment before asking again, rather than "this batch was filtered
    /// empty" (a generator).
    fn waits_for_data(&self) -> bool {
        false
    }
    /// Whether every row must be read before the first barrier passes (the constants of
    /// a `VALUES` list, which a view has from its creation on, like a table's rows).
    fn before_first_barrier(&self) -> bool {
        false
    }
}

impl SplitReader for file::FileSplit {
    fn next_batch(&mut self, max_rows: usize) -> Result<Option<arrow::array::RecordBatch>> {
        file::FileSplit::next_batch(self, max_rows)
    }
    fn offset(&self) -> u64 {
        file::FileSplit::offset(self)
    }
    fn malformed(&self) -> u64 {
        file::FileSplit::malformed(self)
    }
    fn take_rejected(&mut self) -> Vec<records::Rejected> {
        std::mem::take(&mut self.rejected)
    }
}

impl SplitReader for kafka::KafkaSplit {
    fn next_batch(&mut self, max_rows: usize) -> Result<Option<arrow::array::RecordBatch>> {
        kafka::KafkaSplit::next_batch(self, max_rows)
    }
    fn offset(&self) -> u64 {
        kafka::KafkaSplit::offset(self)
    }
    fn malformed(&self) -> u64 {
        kafka::KafkaSplit::malformed(self)
    }
    fn take_rejected(&mut self) -> Vec<records::Rejected> {
        std::mem::take(&mut self.rejected)
    }
    fn lag(&mut self) -> Option<u64> {
        kafka::KafkaSplit::lag(self)
    }
    fn waits_for_data(&self) -> bool {
        true
    }
}

impl SplitReader for object_files::ObjectFilesSplit {
    fn next_batch(&mut self, max_rows: usize) -> Result<Option<arrow::array::RecordBatch>> {
        object_files::ObjectFilesSplit::next_batch(self, max_rows)
    }
    fn offset(&self) -> u64 {
        object_files::ObjectFilesSplit::offset(self)
    }
    fn malformed(&self) -> u64 {
        object_files::ObjectFilesSplit::malformed(self)
    }
    fn take_rejected(&mut self) -> Vec<records::Rejected> {
        std::mem::take(&mut self.rejected)
    }
    fn waits_for_data(&self) -> bool {
        true
    }
}

impl SplitReader for datagen::DatagenSplit {
    fn next_batch(&mut self, max_rows: usize) -> Result<Option<arrow::array::RecordBatch>> {
        datagen::DatagenSplit::next_batch(self, max_rows)
    }
    fn offset(&self) -> u64 {
        datagen::DatagenSplit::offset(self)
    }
}

impl SplitReader for nexmark::NexmarkSplit {
    fn next_batch(&mut self, max_rows: usize) -> Result<Option<arrow::array::RecordBatch>> {
        nexmark::NexmarkSplit::next_batch(self, max_rows)
    }
    fn offset(&self) -> u64 {
        nexmark::NexmarkSplit::offset(self)
    }
}

impl ConnectorSpec {
    /// Checks a source's options against its schema and builds the connector's spec.
    pub fn from_options(schema: &SchemaRef, options: &BTreeMap<String, String>) -> Result<Self> {
        if options.contains_key(ERROR_POLICY_OPTION) || options.contains_key(IDLE_TIMEOUT_OPTION) {
            // What happens to malformed records and when a source is idle is the task's
            // business, not the reader's.
            error_policy(options)?;
            idle_timeout(options)?;
            let mut options = options.clone();
            options.remove(ERROR_POLICY_OPTION);
            options.remove(IDLE_TIMEOUT_OPTION);
            return Self::from_options(schema, &options);
        }
        if let Some(names) = options.get(processing_time::PROCTIME_OPTION) {
            let columns: Vec<usize> = names
                .split(',')
                .filter_map(|n| schema.index_of(n.trim()).ok())
                .collect();
            let made: Vec<arrow::datatypes::FieldRef> = schema
                .fields()
                .iter()
                .enumerate()
                .filter(|(i, _)| !columns.contains(i))
                .map(|(_, f)| f.clone())
                .collect();
            let mut inner_options = options.clone();
            inner_options.remove(processing_time::PROCTIME_OPTION);
            let inner = ConnectorSpec::from_options(
                &std::sync::Arc::new(arrow::datatypes::Schema::new(made)),
                &inner_options,
            )?;
            return Ok(ConnectorSpec::WithProcessingTime(
                processing_time::ProcessingTimeSpec {
                    inner: Box::new(inner),
                    schema: schema.clone(),
                    columns,
                },
            ));
        }
        let connector = options.get("connector").ok_or_else(|| {
            EddyError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                "a source needs WITH (connector = '...'); available: datagen, nexmark, file, kafka",
            )
        })?;
        match connector.to_ascii_lowercase().as_str() {
            "datagen" => Ok(ConnectorSpec::Datagen(datagen::DatagenSpec::from_options(
                schema, options,
            )?)),
            "nexmark" => Ok(ConnectorSpec::Nexmark(nexmark::NexmarkSpec::from_options(
                schema, options,
            )?)),
            "file" if object_files::wanted(options) => Ok(ConnectorSpec::ObjectFiles(
                object_files::ObjectFilesSpec::from_options(schema, options)?,
            )),
            "file" => Ok(ConnectorSpec::File(file::FileSpec::from_options(
                schema, options,
            )?)),
            "kafka" => {
                let spec = kafka::KafkaSpec::from_options(schema, options)?;
                if spec.envelope != kafka::Envelope::Plain {
                    return Err(EddyError::not_supported(
                        "FORMAT UPSERT and FORMAT DEBEZIUM update rows: use a table with a primary key, \
                         CREATE TABLE t (..., PRIMARY KEY (...)) WITH (connector = 'kafka', ...) FORMAT UPSERT ENCODE JSON",
                    ));
                }
                Ok(ConnectorSpec::Kafka(spec))
            }
            "postgres-cdc" => Err(EddyError::not_supported(
                "a postgres-cdc source is read through a table: CREATE TABLE t (...) FROM source TABLE 'schema.table'",
            )),
            other => Err(EddyError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!("unknown connector '{other}'; available: datagen, nexmark, file, kafka"),
            )),
        }
    }

    /// The connector's name, as in `WITH (connector = ...)`.
    pub fn name(&self) -> &'static str {
        match self {
            ConnectorSpec::Datagen(_) => "datagen",
            ConnectorSpec::Nexmark(_) => "nexmark",
            ConnectorSpec::File(_) | ConnectorSpec::ObjectFiles(_) => "file",
            ConnectorSpec::Kafka(_) => "kafka",
            ConnectorSpec::WithProcessingTime(s) => s.inner.name(),
            ConnectorSpec::Values(_) => "values",
        }
    }

    /// How many splits the source has: datagen and nexmark as configured
    /// (`*.split.num`), files one per file.
    pub fn split_count(&self) -> usize {
        match self {
            ConnectorSpec::Datagen(s) => s.splits as usize,
            ConnectorSpec::Nexmark(s) => s.splits as usize,
            ConnectorSpec::File(s) => s.files.len(),
            ConnectorSpec::ObjectFiles(_) => 1,
            ConnectorSpec::Kafka(s) => s.partitions as usize,
            ConnectorSpec::WithProcessingTime(s) => s.inner.split_count(),
            ConnectorSpec::Values(_) => 1,
        }
    }

    /// A reader of one split, from `offset` (rows already read: 0 for the start, or the
    /// position a checkpoint recorded).
    pub fn split_reader(&self, split: usize, offset: u64) -> Box<dyn SplitReader> {
        match self {
            ConnectorSpec::Datagen(s) => Box::new(s.split_reader(split as u32, offset)),
            ConnectorSpec::Nexmark(s) => Box::new(s.split_reader(split as u32, offset)),
            ConnectorSpec::File(s) => Box::new(s.split_reader(split as u32, offset)),
            ConnectorSpec::ObjectFiles(s) => Box::new(s.split_reader(offset)),
            ConnectorSpec::Kafka(s) => Box::new(s.split_reader(split as u32, offset)),
            ConnectorSpec::WithProcessingTime(s) => Box::new(s.split_reader(split, offset)),
            ConnectorSpec::Values(s) => Box::new(s.split_reader(offset)),
        }
    }

    /// Rows per second the source is paced at (0: as fast as possible).
    pub fn rows_per_second(&self) -> u64 {
        match self {
            ConnectorSpec::Datagen(s) => s.rows_per_second,
            ConnectorSpec::Nexmark(s) => s.rows_per_second(),
            ConnectorSpec::File(_)
            | ConnectorSpec::ObjectFiles(_)
            | ConnectorSpec::Kafka(_)
            | ConnectorSpec::Values(_) => 0,
            ConnectorSpec::WithProcessingTime(s) => s.inner.rows_per_second(),
        }
    }
}

/// Reads an option as a number, with the option's name in the error.
pub(crate) fn parse_option<T: std::str::FromStr>(key: &str, value: &str) -> Result<T> {
    value.trim().parse::<T>().map_err(|_| {
        EddyError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("invalid value for option {key}: '{value}'"),
        )
    })
}
