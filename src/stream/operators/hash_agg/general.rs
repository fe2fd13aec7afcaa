//! Aggregates Eddy does not maintain incrementally (`string_agg`, `array_agg`,
//! `avg(DISTINCT)`, `first_value`, `median`, `stddev`, ...): each group keeps the
//! multiset of its input rows — the `ORDER BY` keys first, then the non-constant
//! arguments, in arrow-row's memcomparable form with a count — and its result is
//! recomputed by DataFusion's own accumulator over those rows whenever the group's row
//! is emitted. Retraction is then just decrementing a count, and the rows come out of
//! the ordered map already sorted by the aggregate's `ORDER BY`, so the accumulator runs
//! without one. Costs O(rows of the group) per emission of a changed group.

use crate::error::{EddyError, Result};
use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::row::{RowConverter, SortField};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::AggregateUDF;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::PhysicalSortExpr;
use datafusion::physical_expr::aggregate::{AggregateExprBuilder, AggregateFunctionExpr};
use datafusion::physical_expr::expressions::{Column, Literal};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One argument of the aggregate: a constant (`string_agg`'s delimiter) or a value
/// kept in the group's rows.
#[derive(Clone)]
enum Argument {
    Constant(ScalarValue),
    /// Position among the kept columns.
    Kept(usize),
}

#[derive(Clone)]
pub struct GeneralAgg {
    /// What each group keeps per row: the `ORDER BY` keys, then the non-constant
    /// arguments.
    inputs: Vec<Arc<dyn PhysicalExpr>>,
    fields: Vec<SortField>,
    arguments: Vec<Argument>,
    /// The aggregate itself, without `ORDER BY`, `DISTINCT` or `FILTER`, over a batch of
    /// its arguments.
    aggregate: Arc<AggregateFunctionExpr>,
    /// `DISTINCT`: each kept row counts once, whatever its count.
    distinct: bool,
}

/// An `ORDER BY` key of the aggregate.
pub struct OrderKey {
    pub expr: Arc<dyn PhysicalExpr>,
    pub data_type: DataType,
    pub options: SortOptions,
}

impl GeneralAgg {
    pub fn new(
        function: Arc<AggregateUDF>,
        args: Vec<(Arc<dyn PhysicalExpr>, Field)>,
        order: Vec<OrderKey>,
        distinct: bool,
        ignore_nulls: bool,
    ) -> Result<Self> {
        // An ordered-set aggregate (`percentile_disc(f) WITHIN GROUP (ORDER BY x)`) sorts
        // its values itself, in the direction it is told: its key is its first argument.
        let within_group = function
            .supports_within_group_clause()
            .then(|| order.first().map(|key| key.options))
            .flatten();
        let mut inputs = Vec::new();
        let mut fields = Vec::new();
        for key in order {
            inputs.push(key.expr);
            fields.push(SortField::new_with_options(key.data_type, key.options));
        }
        let mut arguments = Vec::new();
        let mut arg_fields = Vec::new();
        let mut arg_exprs: Vec<Arc<dyn PhysicalExpr>> = Vec::new();
        for (i, (expr, field)) in args.into_iter().enumerate() {
            // The argument's own field, metadata included (a `jsonb` string is JSON).
            let data_type = field.data_type().clone();
            arg_fields.push(field.with_name(format!("arg{i}")).with_nullable(true));
            if let Some(literal) = expr.downcast_ref::<Literal>() {
                arguments.push(Argument::Constant(literal.value().clone()));
                arg_exprs.push(expr.clone());
            } else {
                arguments.push(Argument::Kept(inputs.len()));
                inputs.push(expr);
                fields.push(SortField::new(data_type));
                arg_exprs.push(Arc::new(Column::new(&format!("arg{i}"), i)));
            }
        }
        let mut builder = AggregateExprBuilder::new(function, arg_exprs);
        if let Some(options) = within_group {
            let key: Arc<dyn PhysicalExpr> = Arc::new(Column::new("arg0", 0));
            builder = builder.order_by(vec![PhysicalSortExpr::new(key, options)]);
        }
        let aggregate = builder
            .schema(Arc::new(Schema::new(arg_fields)))
            .alias("aggregate")
            .with_ignore_nulls(ignore_nulls)
            .build()?;
        Ok(Self {
            inputs,
            fields,
            arguments,
            aggregate: Arc::new(aggregate),
            distinct,
        })
    }

    /// Fails as the aggregate would on its constant arguments (a fraction out of range),
    /// so that `CREATE MATERIALIZED VIEW` says so rather than the job failing later.
    pub fn check_arguments(&self) -> Result<()> {
        self.aggregate.create_accumulator()?;
        Ok(())
    }

    /// The codec of a group's kept rows.
    pub fn codec(&self) -> Result<RowConverter> {
        Ok(RowConverter::new(self.fields.clone())?)
    }

    /// The kept columns of every input row.
    pub fn kept_columns(&self, batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
        self.inputs
            .iter()
            .map(|e| crate::stream::expression_errors::evaluate(e, batch))
            .collect()
    }

    /// The aggregate's result over one group's kept rows (`NULL` or the aggregate's
    /// empty value when it has none).
    pub fn evaluate(
        &self,
        codec: &RowConverter,
        rows: &BTreeMap<Vec<u8>, i64>,
    ) -> Result<ScalarValue> {
        let mut accumulator = self.aggregate.create_accumulator()?;
        if rows.is_empty() {
            return Ok(accumulator.evaluate()?);
        }
        let parser = codec.parser();
        let columns = codec.convert_rows(rows.keys().map(|r| parser.parse(r)))?;
        // Each kept row repeated by its count (once under DISTINCT), in key order.
        let mut repeat = Vec::new();
        for (i, count) in rows.values().enumerate() {
            let times = if self.distinct { 1 } else { *count };
            if times < 0 {
                return Err(EddyError::internal(
                    "aggregate row retracted more often than added",
                ));
            }
            repeat.extend(std::iter::repeat_n(i as u32, times as usize));
        }
        let repeat = UInt32Array::from(repeat);
        let values = self
            .arguments
            .iter()
            .map(|a| match a {
                Argument::Constant(v) => Ok(v.to_array_of_size(repeat.len())?),
                Argument::Kept(c) => Ok(arrow::compute::take(&columns[*c], &repeat, None)?),
            })
            .collect::<Result<Vec<_>>>()?;
        accumulator.update_batch(&values)?;
        Ok(accumulator.evaluate()?)
    }
}
