//! `PROCTIME()` columns of a source (`p_time TIMESTAMPTZ AS PROCTIME()`, RisingWave's
//! syntax): the connector makes the other columns, and each batch gets the processing
//! time it was read at in these.

use super::{ConnectorSpec, SplitReader};
use crate::error::Result;
use crate::stream::operators::temporal_filter::processing_time_micros;
use arrow::array::{ArrayRef, RecordBatch, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, SchemaRef};
use std::sync::Arc;

/// The catalog option listing a source's processing-time columns (comma-separated).
pub const PROCTIME_OPTION: &str = "proctime.columns";

#[derive(Debug, Clone, PartialEq)]
pub struct ProcessingTimeSpec {
    pub inner: Box<ConnectorSpec>,
    /// The source's whole schema.
    pub schema: SchemaRef,
    /// Positions of the processing-time columns in it.
    pub columns: Vec<usize>,
}

pub struct ProcessingTimeSplit {
    inner: Box<dyn SplitReader>,
    schema: SchemaRef,
    columns: Vec<usize>,
}

impl SplitReader for ProcessingTimeSplit {
    fn next_batch(&mut self, max_rows: usize) -> Result<Option<RecordBatch>> {
        let Some(batch) = self.inner.next_batch(max_rows)? else {
            return Ok(None);
        };
        let now = processing_time_micros();
        let mut made = batch.columns().iter();
        let columns = (0..self.schema.fields().len())
            .map(|i| {
                if self.columns.contains(&i) {
                    let tz = match self.schema.field(i).data_type() {
                        DataType::Timestamp(_, tz) => tz.clone(),
                        _ => None,
                    };
                    let times = TimestampMicrosecondArray::from_value(now, batch.num_rows())
                        .with_timezone_opt(tz);
                    let times: ArrayRef = Arc::new(times);
                    Ok(arrow::compute::cast(
                        &times,
                        self.schema.field(i).data_type(),
                    )?)
                } else {
                    Ok(made
                        .next()
                        .expect("the connector makes the other columns")
                        .clone())
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(RecordBatch::try_new(self.schema.clone(), columns)?))
    }

    fn offset(&self) -> u64 {
        self.inner.offset()
    }

    fn malformed(&self) -> u64 {
        self.inner.malformed()
    }
}

impl ProcessingTimeSpec {
    pub fn split_reader(&self, split: usize, offset: u64) -> ProcessingTimeSplit {
        ProcessingTimeSplit {
            inner: self.inner.split_reader(split, offset),
            schema: self.schema.clone(),
            columns: self.columns.clone(),
        }
    }
}
