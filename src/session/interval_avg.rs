//! `avg(interval)`, which PostgreSQL has and DataFusion's `avg` refuses: this wrapper keeps
//! DataFusion's `avg` for every other type and averages intervals as PostgreSQL does — the
//! parts summed exactly, then divided by the count with the fraction of the months
//! spilling into days and of the days into time ([`crate::interval_math::average`]).
//! Views average intervals the same way (`stream::operators::hash_agg`).

use crate::interval_math::average;
use arrow::array::{Array, ArrayRef, AsArray, Decimal128Array, Int64Array};
use arrow::datatypes::{DataType, Field, FieldRef, IntervalMonthDayNanoType, IntervalUnit};
use datafusion::common::{Result, ScalarValue};
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Coercion, GroupsAccumulator, ReversedUDAF,
    Signature, TypeSignature, TypeSignatureClass,
};
use std::sync::Arc;

const INTERVAL: DataType = DataType::Interval(IntervalUnit::MonthDayNano);

/// Registers the interval-aware `avg` in place of DataFusion's.
pub fn register(ctx: &SessionContext) {
    let inner = datafusion::functions_aggregate::average::avg_udaf();
    let mut accepted = match &inner.signature().type_signature {
        TypeSignature::OneOf(types) => types.clone(),
        other => vec![other.clone()],
    };
    accepted.push(TypeSignature::Coercible(vec![Coercion::new_exact(
        TypeSignatureClass::Interval,
    )]));
    let signature = Signature::one_of(accepted, inner.signature().volatility);
    ctx.register_udaf(AggregateUDF::new_from_impl(IntervalAwareAvg {
        inner,
        signature,
    }));
}

#[derive(Debug)]
struct IntervalAwareAvg {
    inner: Arc<AggregateUDF>,
    /// DataFusion's `avg`'s argument types, and intervals.
    signature: Signature,
}

impl PartialEq for IntervalAwareAvg {
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl Eq for IntervalAwareAvg {}

impl std::hash::Hash for IntervalAwareAvg {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.inner.name().hash(state);
    }
}

fn is_interval(args: &[DataType]) -> bool {
    matches!(args, [DataType::Interval(_)])
}

impl AggregateUDFImpl for IntervalAwareAvg {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        if is_interval(arg_types) {
            return Ok(INTERVAL);
        }
        self.inner.return_type(arg_types)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        if args.return_field.data_type() == &INTERVAL {
            return Ok(Box::<IntervalAvgAccumulator>::default());
        }
        self.inner.accumulator(args)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        if args.return_field.data_type() != &INTERVAL {
            return self.inner.state_fields(args);
        }
        let part = |name: &str| {
            Arc::new(Field::new(
                format!("{}[{name}]", args.name),
                DataType::Decimal128(38, 0),
                true,
            ))
        };
        Ok(vec![
            part("months"),
            part("days"),
            part("nanos"),
            Arc::new(Field::new(
                format!("{}[count]", args.name),
                DataType::Int64,
                true,
            )),
        ])
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        args.return_field.data_type() != &INTERVAL && self.inner.groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        self.inner.create_groups_accumulator(args)
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        if args.return_field.data_type() == &INTERVAL {
            return Ok(Box::<IntervalAvgAccumulator>::default());
        }
        self.inner.create_sliding_accumulator(args)
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        ReversedUDAF::Identical
    }

    fn is_nullable(&self) -> bool {
        self.inner.is_nullable()
    }
}

/// The exact sum of each part of the intervals seen, and how many there were.
#[derive(Debug, Default)]
struct IntervalAvgAccumulator {
    parts: [i128; 3],
    count: i64,
}

impl IntervalAvgAccumulator {
    fn add(&mut self, values: &ArrayRef, sign: i64) {
        let values = values.as_primitive::<IntervalMonthDayNanoType>();
        for v in values.iter().flatten() {
            let s = i128::from(sign);
            self.parts[0] += i128::from(v.months) * s;
            self.parts[1] += i128::from(v.days) * s;
            self.parts[2] += i128::from(v.nanoseconds) * s;
            self.count += sign;
        }
    }
}

impl Accumulator for IntervalAvgAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(&values[0], 1);
        Ok(())
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(&values[0], -1);
        Ok(())
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::IntervalMonthDayNano(
            (self.count > 0).then(|| average(self.parts, self.count)),
        ))
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let part = |v: i128| ScalarValue::Decimal128(Some(v), 38, 0);
        Ok(vec![
            part(self.parts[0]),
            part(self.parts[1]),
            part(self.parts[2]),
            ScalarValue::Int64(Some(self.count)),
        ])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let parts: Vec<&Decimal128Array> = states[..3]
            .iter()
            .map(|s| s.as_primitive::<arrow::datatypes::Decimal128Type>())
            .collect();
        let counts: &Int64Array = states[3].as_primitive();
        for row in 0..counts.len() {
            if counts.is_null(row) {
                continue;
            }
            for (sum, part) in self.parts.iter_mut().zip(&parts) {
                *sum += part.value(row);
            }
            self.count += counts.value(row);
        }
        Ok(())
    }
}
