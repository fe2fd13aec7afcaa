//! Timestamps written as PostgreSQL accepts them but Arrow's parser does not: a time of
//! day without seconds (`'2020-04-15 08:05'`, RisingWave's tests are full of them). This
//! analyzer rule, run after type coercion, completes such string literals cast to a
//! timestamp (`:00` seconds) so that the cast parses them.

use arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{Cast, Expr, LogicalPlan, TryCast};
use datafusion::optimizer::AnalyzerRule;

#[derive(Debug, Default)]
pub struct TimeLiterals;

impl AnalyzerRule for TimeLiterals {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            // Output columns keep the names the plan gave them (the literal's text).
            let names = NamePreserver::new(&node);
            node.map_expressions(|e| {
                let name = names.save(&e);
                Ok(e.transform_up(complete_literal)?
                    .update_data(|e| name.restore(e)))
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "eddy_time_literals"
    }
}

fn complete_literal(expr: Expr) -> Result<Transformed<Expr>> {
    let (inner, field) = match &expr {
        Expr::Cast(Cast { expr, field }) | Expr::TryCast(TryCast { expr, field }) => {
            (expr.as_ref(), field)
        }
        _ => return Ok(Transformed::no(expr)),
    };
    if !matches!(field.data_type(), DataType::Timestamp(..)) {
        return Ok(Transformed::no(expr));
    }
    let Expr::Literal(ScalarValue::Utf8(Some(text)), meta) = inner else {
        return Ok(Transformed::no(expr));
    };
    let Some(completed) = with_seconds(text) else {
        return Ok(Transformed::no(expr));
    };
    let literal = Box::new(Expr::Literal(
        ScalarValue::Utf8(Some(completed)),
        meta.clone(),
    ));
    Ok(Transformed::yes(match expr {
        Expr::Cast(mut c) => {
            c.expr = literal;
            Expr::Cast(c)
        }
        Expr::TryCast(mut c) => {
            c.expr = literal;
            Expr::TryCast(c)
        }
        other => other,
    }))
}

/// `YYYY-MM-DD HH:MM[zone]` with `:00` added after the minutes; `None` for anything else.
fn with_seconds(text: &str) -> Option<String> {
    let text = text.trim();
    let date_end = text.find([' ', 'T'])?;
    let (date, rest) = text.split_at(date_end);
    if date.len() != 10 || date.as_bytes()[4] != b'-' {
        return None;
    }
    let time = &rest[1..];
    let time_end = time
        .find(|c: char| !(c.is_ascii_digit() || c == ':'))
        .unwrap_or(time.len());
    let (clock, zone) = time.split_at(time_end);
    let parts: Vec<&str> = clock.split(':').collect();
    if parts.len() != 2 || parts.iter().any(|p| p.is_empty() || p.len() > 2) {
        return None;
    }
    Some(format!("{date}{}{clock}:00{zone}", &rest[..1]))
}

#[cfg(test)]
mod tests {
    use super::with_seconds;

    #[test]
    fn times_without_seconds_get_them() {
        assert_eq!(
            with_seconds("2020-04-15 08:05").as_deref(),
            Some("2020-04-15 08:05:00")
        );
        assert_eq!(
            with_seconds("2020-04-15T08:05+02:00").as_deref(),
            Some("2020-04-15T08:05:00+02:00")
        );
        assert_eq!(with_seconds("2020-04-15 08:05:07"), None);
        assert_eq!(with_seconds("2020-04-15"), None);
        assert_eq!(with_seconds("hello world"), None);
    }
}
