//! Expand: each row once per grouping set of a `GROUPING SETS`, `ROLLUP` or `CUBE`
//! aggregate, so that one keyed aggregate behind it computes every set.
//!
//! An output row is the input row, then the grouping columns with those not in the set
//! made NULL, then the set's grouping id (DataFusion's `__grouping_id`: one bit per
//! grouping column, set when the column is not in the set, and above them the ordinal of
//! a repeated set). The aggregate groups by the grouping columns and the id, so the same
//! values grouped by different sets stay apart, and its output has the columns and types
//! of DataFusion's aggregate in batch.
//!
//! Each set's rows go out as a chunk of their own, keeping their ops (an update's two
//! halves stay next to each other); over an updating stream each copy's stream key is
//! the input row's key followed by the set's index.

use super::Operator;
use crate::error::Result;
use crate::stream::StreamChunk;
use arrow::array::{ArrayRef, UInt8Array, UInt16Array, UInt32Array, UInt64Array, new_null_array};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;

/// One grouping set: which grouping columns it leaves out, and its grouping id.
#[derive(Debug, Clone)]
pub struct GroupingSet {
    pub left_out: Vec<bool>,
    pub id: u64,
}

pub struct Expand {
    /// The grouping columns, computed over the input.
    group_exprs: Vec<Arc<dyn PhysicalExpr>>,
    sets: Vec<GroupingSet>,
    id_type: DataType,
    schema: SchemaRef,
}

impl Expand {
    pub fn new(
        group_exprs: Vec<Arc<dyn PhysicalExpr>>,
        sets: Vec<GroupingSet>,
        id_type: DataType,
        schema: SchemaRef,
    ) -> Self {
        Self {
            group_exprs,
            sets,
            id_type,
            schema,
        }
    }

    fn id_array(&self, id: u64, rows: usize) -> ArrayRef {
        match self.id_type {
            DataType::UInt8 => Arc::new(UInt8Array::from(vec![id as u8; rows])),
            DataType::UInt16 => Arc::new(UInt16Array::from(vec![id as u16; rows])),
            DataType::UInt32 => Arc::new(UInt32Array::from(vec![id as u32; rows])),
            _ => Arc::new(UInt64Array::from(vec![id; rows])),
        }
    }
}

/// The grouping id DataFusion gives a set: a bit per grouping column (the first column
/// the highest), set when the column is left out, and the set's ordinal among equal sets
/// above them.
pub fn grouping_id(left_out: &[bool], ordinal: usize) -> u64 {
    let semantic = left_out
        .iter()
        .fold(0u64, |id, &out| (id << 1) | u64::from(out));
    semantic | ((ordinal as u64) << left_out.len())
}

impl Operator for Expand {
    fn name(&self) -> &'static str {
        "Expand"
    }

    fn process(&mut self, chunk: StreamChunk) -> Result<Vec<StreamChunk>> {
        let rows = chunk.num_rows();
        let values = self
            .group_exprs
            .iter()
            .map(|e| e.evaluate(&chunk.batch)?.into_array(rows))
            .collect::<datafusion::error::Result<Vec<ArrayRef>>>()?;
        let mut out = Vec::with_capacity(self.sets.len());
        for (index, set) in self.sets.iter().enumerate() {
            let mut columns: Vec<ArrayRef> = chunk.batch.columns().to_vec();
            for (value, &left_out) in values.iter().zip(&set.left_out) {
                columns.push(if left_out {
                    new_null_array(value.data_type(), rows)
                } else {
                    value.clone()
                });
            }
            columns.push(self.id_array(set.id, rows));
            let batch = arrow::array::RecordBatch::try_new(self.schema.clone(), columns)?;
            let keys = chunk.keys.as_ref().map(|keys| {
                keys.iter()
                    .map(|key| {
                        let mut key = key.clone();
                        key.extend_from_slice(&(index as u32).to_be_bytes());
                        key
                    })
                    .collect()
            });
            out.push(StreamChunk {
                ops: chunk.ops.clone(),
                batch,
                keys,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::Op;
    use arrow::array::{Array, AsArray, Int32Array, RecordBatch, StringArray};
    use arrow::datatypes::{Field, Schema, UInt8Type};
    use datafusion::physical_expr::expressions::Column;

    #[test]
    fn grouping_ids_follow_datafusion() {
        // (a, b) of a, b: nothing left out; (a) leaves b out; () leaves both out.
        assert_eq!(grouping_id(&[false, false], 0), 0);
        assert_eq!(grouping_id(&[false, true], 0), 1);
        assert_eq!(grouping_id(&[true, false], 0), 2);
        assert_eq!(grouping_id(&[true, true], 0), 3);
        // A repeated set gets its ordinal above the column bits.
        assert_eq!(grouping_id(&[false, true], 1), 5);
    }

    #[test]
    fn each_row_once_per_set_with_the_left_out_columns_null() {
        let input = Arc::new(Schema::new(vec![
            Field::new("brand", DataType::Utf8, true),
            Field::new("sales", DataType::Int32, true),
        ]));
        let mut fields = input.fields().to_vec();
        fields.push(Arc::new(Field::new("k0", DataType::Utf8, true)));
        fields.push(Arc::new(Field::new(
            "__grouping_id",
            DataType::UInt8,
            false,
        )));
        let schema = Arc::new(Schema::new(fields));
        let mut expand = Expand::new(
            vec![Arc::new(Column::new("brand", 0))],
            vec![
                GroupingSet {
                    left_out: vec![false],
                    id: 0,
                },
                GroupingSet {
                    left_out: vec![true],
                    id: 1,
                },
            ],
            DataType::UInt8,
            schema,
        );
        let batch = RecordBatch::try_new(
            input,
            vec![
                Arc::new(StringArray::from(vec!["Foo", "Bar"])),
                Arc::new(Int32Array::from(vec![10, 5])),
            ],
        )
        .unwrap();
        let chunk = StreamChunk {
            ops: vec![Op::Insert, Op::Delete],
            batch,
            keys: Some(vec![vec![1], vec![2]]),
        };
        let out = expand.process(chunk).unwrap();
        assert_eq!(out.len(), 2);
        let brands = |c: &StreamChunk| {
            let col = c.batch.column(2).as_string::<i32>();
            (0..col.len())
                .map(|i| (!col.is_null(i)).then(|| col.value(i).to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            brands(&out[0]),
            vec![Some("Foo".into()), Some("Bar".into())]
        );
        assert_eq!(brands(&out[1]), vec![None, None]);
        assert_eq!(
            out[1].batch.column(3).as_primitive::<UInt8Type>().value(0),
            1
        );
        assert_eq!(out[1].ops, vec![Op::Insert, Op::Delete]);
        assert_eq!(
            out[1].keys,
            Some(vec![vec![1, 0, 0, 0, 1], vec![2, 0, 0, 0, 1]]),
            "each copy has a key of its own"
        );
    }
}
