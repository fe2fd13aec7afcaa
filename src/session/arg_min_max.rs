//! RisingWave's `arg_min(value, key)` and `arg_max(value, key)`: the value of the row
//! with the smallest (largest) key, over the rows where neither is NULL; among rows with
//! the same key, the first one seen.
//!
//! Each batch's best row is found with Arrow's sort (stable, limited to one row) and
//! compared with the best so far. In a view these run as general aggregates (each group
//! keeps its rows, see `hash_agg::GeneralAgg`), so retractions need nothing from here.

use arrow::array::{Array, ArrayRef, BooleanArray};
use arrow::compute::{SortOptions, and, filter, is_not_null, sort_to_indices};
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{Result, ScalarValue, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility,
};
use std::cmp::Ordering;
use std::sync::Arc;

pub fn udafs() -> Vec<AggregateUDF> {
    [Extreme::Min, Extreme::Max]
        .into_iter()
        .map(|extreme| {
            AggregateUDF::from(ArgExtreme {
                extreme,
                signature: Signature::any(2, Volatility::Immutable),
            })
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Extreme {
    Min,
    Max,
}

impl Extreme {
    /// Whether `candidate` beats `best` (a tie keeps the earlier row).
    fn beats(self, candidate: &ScalarValue, best: &ScalarValue) -> bool {
        let wanted = match self {
            Extreme::Min => Ordering::Less,
            Extreme::Max => Ordering::Greater,
        };
        candidate.partial_cmp(best) == Some(wanted)
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ArgExtreme {
    extreme: Extreme,
    signature: Signature,
}

impl AggregateUDFImpl for ArgExtreme {
    fn name(&self) -> &str {
        match self.extreme {
            Extreme::Min => "arg_min",
            Extreme::Max => "arg_max",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types {
            [value, _] => Ok(value.clone()),
            _ => plan_err!("{} takes a value and a key", self.name()),
        }
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![
            Arc::new(Field::new(
                format_state_name(args.name, "value"),
                args.input_fields[0].data_type().clone(),
                true,
            )),
            Arc::new(Field::new(
                format_state_name(args.name, "key"),
                args.input_fields[1].data_type().clone(),
                true,
            )),
        ])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(ArgExtremeAccumulator {
            extreme: self.extreme,
            best: None,
            value_type: args.expr_fields[0].data_type().clone(),
            key_type: args.expr_fields[1].data_type().clone(),
        }))
    }
}

#[derive(Debug)]
struct ArgExtremeAccumulator {
    extreme: Extreme,
    /// The best (value, key) so far.
    best: Option<(ScalarValue, ScalarValue)>,
    value_type: DataType,
    key_type: DataType,
}

impl ArgExtremeAccumulator {
    /// Takes the best row of `values` and `keys` (rows where both are set).
    fn offer(&mut self, values: &ArrayRef, keys: &ArrayRef) -> Result<()> {
        let both: BooleanArray = and(&is_not_null(values)?, &is_not_null(keys)?)?;
        let values = filter(values, &both)?;
        let keys = filter(keys, &both)?;
        if keys.is_empty() {
            return Ok(());
        }
        let options = SortOptions {
            descending: self.extreme == Extreme::Max,
            nulls_first: false,
        };
        // Stable: among equal keys the first row comes first.
        let first = sort_to_indices(&keys, Some(options), Some(1))?.value(0) as usize;
        let key = ScalarValue::try_from_array(&keys, first)?;
        let replace = match &self.best {
            None => true,
            Some((_, best)) => self.extreme.beats(&key, best),
        };
        if replace {
            self.best = Some((ScalarValue::try_from_array(&values, first)?, key));
        }
        Ok(())
    }
}

impl Accumulator for ArgExtremeAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.offer(&values[0], &values[1])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.offer(&states[0], &states[1])
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(match &self.best {
            Some((value, key)) => vec![value.clone(), key.clone()],
            None => vec![
                ScalarValue::try_from(&self.value_type)?,
                ScalarValue::try_from(&self.key_type)?,
            ],
        })
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        match &self.best {
            Some((value, _)) => Ok(value.clone()),
            None => ScalarValue::try_from(&self.value_type),
        }
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.best.as_ref().map_or(0, |(v, k)| v.size() + k.size())
    }
}
