//! `min`/`max` whose answer does not depend on row order when floats hold NaN.
//!
//! PostgreSQL orders NaN above every other number, so `max` over `{NaN, -2}` is NaN.
//! DataFusion's grouped `min`/`max` of floats compares with `partial_cmp` and lets the
//! later row win when NaN is involved: the answer changes with the order rows arrive
//! in. These wrappers keep DataFusion's `min`/`max` for everything but turn off its
//! grouped accumulator for float arguments, so that the row accumulator, which orders
//! NaN above every number, is used.

use arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{Result, ScalarValue};
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, GroupsAccumulator, ReversedUDAF, SetMonotonicity,
    Signature, StatisticsArgs,
};
use std::sync::Arc;

/// Registers the NaN-ordering `min` and `max` in place of DataFusion's.
pub fn register(ctx: &SessionContext) {
    for inner in [
        datafusion::functions_aggregate::min_max::min_udaf(),
        datafusion::functions_aggregate::min_max::max_udaf(),
    ] {
        ctx.register_udaf(AggregateUDF::new_from_impl(NanOrderedExtreme { inner }));
    }
}

#[derive(Debug)]
struct NanOrderedExtreme {
    inner: Arc<AggregateUDF>,
}

impl PartialEq for NanOrderedExtreme {
    fn eq(&self, other: &Self) -> bool {
        self.inner.name() == other.inner.name()
    }
}

impl Eq for NanOrderedExtreme {}

impl std::hash::Hash for NanOrderedExtreme {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.inner.name().hash(state);
    }
}

fn is_float(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Float16 | DataType::Float32 | DataType::Float64
    )
}

impl AggregateUDFImpl for NanOrderedExtreme {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn accumulator(&self, acc_args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        self.inner.accumulator(acc_args)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        !is_float(args.return_field.data_type()) && self.inner.groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        self.inner.create_groups_accumulator(args)
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        self.inner.create_sliding_accumulator(args)
    }

    fn is_descending(&self) -> Option<bool> {
        self.inner.is_descending()
    }

    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.inner.inner().order_sensitivity()
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        ReversedUDAF::Identical
    }

    fn value_from_stats(&self, statistics_args: &StatisticsArgs) -> Option<ScalarValue> {
        self.inner.value_from_stats(statistics_args)
    }

    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.inner.inner().set_monotonicity(data_type)
    }

    fn is_nullable(&self) -> bool {
        self.inner.is_nullable()
    }
}
