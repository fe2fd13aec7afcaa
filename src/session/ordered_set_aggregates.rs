//! PostgreSQL's ordered-set aggregates: `percentile_cont(f)`, `percentile_disc(f)` and
//! `mode()`, each `WITHIN GROUP (ORDER BY x)`.
//!
//! DataFusion hands an ordered-set aggregate its sort key as the first argument and the
//! `WITHIN GROUP` ordering in the accumulator's arguments, and leaves the sorting to it.
//! These accumulators keep the group's values as Arrow arrays and sort them once, when
//! the result is asked for, with the ordering's direction:
//!
//! - `percentile_disc(f)`: the first value whose position in the ordering reaches the
//!   fraction `f` of the non-null values (any type that sorts).
//! - `percentile_cont(f)`: the value at fraction `f`, interpolated linearly between the
//!   two nearest values (`double precision`). Replaces DataFusion's, which refuses a
//!   `NULL` fraction (PostgreSQL and RisingWave answer `NULL`).
//! - `mode()`: the most frequent non-null value; among equally frequent ones the first
//!   in the ordering.
//!
//! A fraction outside [0, 1] is an error (22003), as in PostgreSQL. In a view these run
//! as general aggregates (each group keeps its rows, see `hash_agg::GeneralAgg`), so
//! retractions need nothing from here.

use crate::error::{EddyError, sqlstate};
use arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, ListArray, RecordBatch, RecordBatchOptions, UInt32Array,
};
use arrow::buffer::OffsetBuffer;
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, Field, FieldRef, Schema};
use arrow::row::{RowConverter, SortField};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::{AggregateOrderSensitivity, format_state_name};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, Signature, Volatility,
};
use datafusion::physical_expr::expressions::Literal;
use datafusion::physical_expr::utils::collect_columns;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The three aggregates, to register in place of DataFusion's `percentile_cont`.
pub fn udafs() -> Vec<AggregateUDF> {
    [Kind::PercentileCont, Kind::PercentileDisc, Kind::Mode]
        .into_iter()
        .map(|kind| {
            AggregateUDF::from(OrderedSetAggregate {
                kind,
                signature: Signature::user_defined(Volatility::Immutable),
            })
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    PercentileCont,
    PercentileDisc,
    Mode,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct OrderedSetAggregate {
    kind: Kind,
    signature: Signature,
}

impl OrderedSetAggregate {
    /// How many direct arguments (the fraction) follow the sort key.
    fn direct_arguments(&self) -> usize {
        match self.kind {
            Kind::PercentileCont | Kind::PercentileDisc => 1,
            Kind::Mode => 0,
        }
    }
}

impl AggregateUDFImpl for OrderedSetAggregate {
    fn name(&self) -> &str {
        match self.kind {
            Kind::PercentileCont => "percentile_cont",
            Kind::PercentileDisc => "percentile_disc",
            Kind::Mode => "mode",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let expected = 1 + self.direct_arguments();
        if arg_types.len() != expected {
            return plan_err!(
                "{} takes {} argument{} and one WITHIN GROUP (ORDER BY ...) key",
                self.name(),
                self.direct_arguments(),
                if self.direct_arguments() == 1 {
                    ""
                } else {
                    "s"
                }
            );
        }
        let key = match (self.kind, &arg_types[0]) {
            (Kind::PercentileCont, t) if t.is_numeric() || t.is_null() => DataType::Float64,
            (Kind::PercentileCont, t) => {
                return plan_err!("percentile_cont is not defined for {t} values");
            }
            (_, t) => t.clone(),
        };
        let mut types = vec![key];
        if self.direct_arguments() == 1 {
            match &arg_types[1] {
                t if t.is_numeric() || t.is_null() => types.push(DataType::Float64),
                t => return plan_err!("the fraction of {} must be a number, not {t}", self.name()),
            }
        }
        Ok(types)
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(match (self.kind, &arg_types[0]) {
            (Kind::PercentileCont, _) | (_, DataType::Null) => DataType::Float64,
            (_, t) => t.clone(),
        })
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let values = Field::new_list_field(args.input_fields[0].data_type().clone(), true);
        Ok(vec![Arc::new(Field::new(
            format_state_name(args.name, "values"),
            DataType::List(Arc::new(values)),
            true,
        ))])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let fraction = if self.direct_arguments() == 1 {
            Some(constant_fraction(self.name(), &args)?)
        } else {
            None
        };
        let descending = args
            .order_bys
            .first()
            .is_some_and(|sort| sort.options.descending);
        Ok(Box::new(OrderedSetAccumulator {
            kind: self.kind,
            data_type: args.expr_fields[0].data_type().clone(),
            return_type: args.return_field.data_type().clone(),
            fraction,
            descending,
            batches: Vec::new(),
        }))
    }

    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        // The accumulator sorts its values itself.
        AggregateOrderSensitivity::Insensitive
    }

    fn supports_within_group_clause(&self) -> bool {
        true
    }
}

/// The fraction argument: a constant, `None` when it is `NULL` (the result is then
/// `NULL`).
fn constant_fraction(name: &str, args: &AccumulatorArgs) -> Result<Option<f64>> {
    let Some(expr) = args.exprs.get(1) else {
        return plan_err!("{name} needs its fraction");
    };
    let value = if let Some(literal) = expr.downcast_ref::<Literal>() {
        literal.value().clone()
    } else if collect_columns(expr).is_empty() {
        // A constant expression the optimizer left unfolded: evaluated once.
        let one_row = RecordBatch::try_new_with_options(
            Arc::new(Schema::empty()),
            vec![],
            &RecordBatchOptions::new().with_row_count(Some(1)),
        )?;
        match expr.evaluate(&one_row)? {
            ColumnarValue::Scalar(v) => v,
            ColumnarValue::Array(a) => ScalarValue::try_from_array(&a, 0)?,
        }
    } else {
        return plan_err!("the fraction of {name} must be a constant");
    };
    let fraction = match value.cast_to(&DataType::Float64)? {
        ScalarValue::Float64(Some(f)) => f,
        _ => return Ok(None),
    };
    if !(0.0..=1.0).contains(&fraction) {
        return Err(EddyError::new(
            sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
            format!("percentile value {fraction} is not between 0 and 1"),
        )
        .into_datafusion());
    }
    Ok(Some(fraction))
}

#[derive(Debug)]
struct OrderedSetAccumulator {
    kind: Kind,
    data_type: DataType,
    return_type: DataType,
    /// `Some(None)`: a `NULL` fraction.
    fraction: Option<Option<f64>>,
    descending: bool,
    /// The group's values as they came (nulls included; dropped when sorting).
    batches: Vec<ArrayRef>,
}

impl OrderedSetAccumulator {
    fn all_values(&self) -> Result<ArrayRef> {
        if self.batches.is_empty() {
            return Ok(arrow::array::new_empty_array(&self.data_type));
        }
        let arrays: Vec<&dyn Array> = self.batches.iter().map(|a| a.as_ref()).collect();
        Ok(arrow::compute::concat(&arrays)?)
    }

    /// The non-null values in the ordering's direction.
    fn sorted_values(&self) -> Result<ArrayRef> {
        let values = self.all_values()?;
        let values = arrow::compute::filter(&values, &arrow::compute::is_not_null(&values)?)?;
        let options = SortOptions {
            descending: self.descending,
            nulls_first: false,
        };
        Ok(arrow::compute::sort(&values, Some(options))?)
    }

    fn null(&self) -> Result<ScalarValue> {
        ScalarValue::try_from(&self.return_type)
    }

    fn percentile_disc(&self, fraction: f64) -> Result<ScalarValue> {
        let sorted = self.sorted_values()?;
        if sorted.is_empty() {
            return self.null();
        }
        // The first position whose share of the values reaches the fraction.
        let reached = (fraction * sorted.len() as f64).ceil() as usize;
        let index = reached.saturating_sub(1).min(sorted.len() - 1);
        ScalarValue::try_from_array(&sorted, index)
    }

    fn percentile_cont(&self, fraction: f64) -> Result<ScalarValue> {
        let sorted = self.sorted_values()?;
        if sorted.is_empty() {
            return self.null();
        }
        let sorted = arrow::compute::cast(&sorted, &DataType::Float64)?;
        let sorted: &Float64Array = sorted.as_primitive();
        let position = fraction * (sorted.len() - 1) as f64;
        let (below, above) = (position.floor() as usize, position.ceil() as usize);
        let (low, high) = (sorted.value(below), sorted.value(above));
        let value = if below == above {
            low
        } else {
            low + (high - low) * (position - below as f64)
        };
        Ok(ScalarValue::Float64(Some(value)))
    }

    fn mode(&self) -> Result<ScalarValue> {
        let values = self.all_values()?;
        let options = SortOptions {
            descending: self.descending,
            nulls_first: false,
        };
        let converter = RowConverter::new(vec![SortField::new_with_options(
            self.data_type.clone(),
            options,
        )])?;
        let rows = converter.convert_columns(std::slice::from_ref(&values))?;
        // Each distinct value's count and first row, in the ordering (the rows' bytes
        // sort as the values do).
        let mut counts: BTreeMap<&[u8], (usize, u32)> = BTreeMap::new();
        for (i, row) in rows.iter().enumerate() {
            if values.is_null(i) {
                continue;
            }
            counts.entry(row.data()).or_insert((0, i as u32)).0 += 1;
        }
        let mut best: Option<(usize, u32)> = None;
        for &(count, first) in counts.values() {
            if best.is_none_or(|(most, _)| count > most) {
                best = Some((count, first));
            }
        }
        match best {
            Some((_, row)) => {
                let chosen = arrow::compute::take(&values, &UInt32Array::from(vec![row]), None)?;
                ScalarValue::try_from_array(&chosen, 0)
            }
            None => self.null(),
        }
    }
}

impl Accumulator for OrderedSetAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        if let Some(values) = values.first()
            && !values.is_empty()
        {
            self.batches.push(values.clone());
        }
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let Some(lists) = states.first() else {
            return Ok(());
        };
        let lists: &ListArray = lists.as_list();
        for list in lists.iter().flatten() {
            if !list.is_empty() {
                self.batches.push(list);
            }
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let values = self.all_values()?;
        let list = ListArray::new(
            Arc::new(Field::new_list_field(self.data_type.clone(), true)),
            OffsetBuffer::from_lengths([values.len()]),
            values,
            None,
        );
        Ok(vec![ScalarValue::List(Arc::new(list))])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        match (self.kind, self.fraction) {
            (Kind::Mode, _) => self.mode(),
            (_, None) => exec_err!("an ordered-set aggregate without its fraction"),
            (_, Some(None)) => self.null(),
            (Kind::PercentileDisc, Some(Some(f))) => self.percentile_disc(f),
            (Kind::PercentileCont, Some(Some(f))) => self.percentile_cont(f),
        }
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self)
            + self
                .batches
                .iter()
                .map(|a| a.get_array_memory_size())
                .sum::<usize>()
    }
}
