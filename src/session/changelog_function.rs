//! `eddy_changelog('t', with_row_id)`: the table function a changelog CTE is written as
//! (`token_rewrites::changelog`), giving the planner's [`ChangelogTable`] of `t`.

use crate::catalog::Catalog;
use crate::error::EddyError;
use crate::planner::changelog::{ChangelogTable, FUNCTION};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::{Result, ScalarValue, plan_err};
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::Expr;
use std::sync::Arc;

pub fn register(ctx: &SessionContext, catalog: Arc<Catalog>) {
    ctx.register_udtf(FUNCTION, Arc::new(ChangelogFunction { catalog }));
}

#[derive(Debug)]
struct ChangelogFunction {
    catalog: Arc<Catalog>,
}

impl TableFunctionImpl for ChangelogFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let [
            Expr::Literal(ScalarValue::Utf8(Some(name)), _),
            Expr::Literal(ScalarValue::Boolean(Some(with_row_id)), _),
        ] = args.exprs()
        else {
            return plan_err!("{FUNCTION} takes a relation's name and whether to add row ids");
        };
        let relation = self
            .catalog
            .get(name)
            .ok_or_else(|| EddyError::undefined_table(name).into_datafusion())?;
        Ok(Arc::new(ChangelogTable::new(relation, *with_row_id)))
    }
}
