//! Rewrites of parsed SQL that DataFusion cannot plan as PostgreSQL writes it, applied
//! before planning (after `datafusion-pg-catalog`'s own compatibility rewrites).
//!
//! - `ARRAY(SELECT f(x) FROM unnest(arr) x)` → `array_transform(arr, x -> f(x))`, and any
//!   other `ARRAY(subquery)` → `coalesce((SELECT array_agg(expr) FROM ...), make_array())`
//!   (no rows give `{}`). psql's `\d+` uses the first form.
//! - A scalar subquery over `pg_catalog` that is correlated but not aggregated, e.g.
//!   `(SELECT typname FROM pg_type WHERE oid = atttypid)`: DataFusion only decorrelates
//!   aggregated scalar subqueries, so the select item is wrapped in `first_value(...)`.
//!   Catalog lookups like these return at most one row, so the answer is the same.
//!   (SQLAlchemy's reflection queries are full of them.)
//! - `LIKE pattern ESCAPE 'c'` with an escape character other than backslash (DataFusion
//!   knows only backslash): a literal pattern is re-escaped with backslashes.
//! - Duplicate output column names (`SELECT 1, 1` or `SELECT a, a`), which PostgreSQL
//!   allows and DataFusion does not: later duplicates get an internal alias that
//!   [`super::column_names`] turns back into the PostgreSQL name.
//! - `TUMBLE`, `HOP`, `CUMULATE` and `SESSION` in `FROM`: the relation they read is
//!   handed over as `(SELECT * FROM t)` (the window named `t` when it has no alias), for
//!   `planner::window_tvf`, which plans the windows as plan nodes.
//! - Interval literals in PostgreSQL's output form (`INTERVAL '1 day 02:00:00'`,
//!   `'1 day 02:00:00'::interval`): read by Eddy's parser, handed on in a form Arrow reads.
//! - `array_sort(a)`: NULLs last, as PostgreSQL and RisingWave sort.
//! - `x SIMILAR TO p`: PostgreSQL's whole-string match ([`super::similar_to`]).
//! - `interval * number`, `number * interval`, `interval / number` with an interval
//!   literal or cast: `eddy_interval_mul(...)` ([`super::interval_arithmetic`]).
//! - `generate_series(...)` / `range(...)` as a whole select item (PostgreSQL's
//!   set-returning call, one row per value): `unnest(generate_series(...))`, named as
//!   PostgreSQL names it. DataFusion's scalar form would return one array.
//! - `string_agg(value, delimiter)` whose delimiter is not a literal:
//!   `eddy_string_agg(...)` ([`super::string_agg_by_row`]).
//! - `unnest(indkey)` / `generate_subscripts(indkey, 1)`: `pg_index.indkey` is an
//!   `int2vector` in PostgreSQL but text (`"1 2"`) in the catalog tables, so it is split
//!   into a `smallint[]` first.

use datafusion::sql::sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArgumentList, FunctionArguments, GroupByExpr,
    Ident, ObjectName, Query, SelectItem, SetExpr, Statement, TableFactor, Value, VisitMut,
    VisitorMut,
};
use datafusion::sql::sqlparser::dialect::{DuckDbDialect, PostgreSqlDialect};
use datafusion::sql::sqlparser::parser::Parser;
use std::ops::ControlFlow;

/// The query of a materialized view or sink with `now()` (and `CURRENT_TIMESTAMP`)
/// as the processing-time function the stream planner turns into a temporal filter:
/// DataFusion would otherwise fold `now()` into the time the view was created.
pub fn streaming_now(sql: &str) -> Option<String> {
    let mut statements = crate::sql::star_except::parse(sql).ok()?;
    let mut visitor = ProcessingTime { replaced: false };
    for s in &mut statements {
        let _ = s.visit(&mut visitor);
    }
    visitor.replaced.then(|| {
        statements
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join("; ")
    })
}

/// Marks `EXCEPT ALL` / `INTERSECT ALL` for `set_operations` just before planning (so
/// that stored definitions and `SHOW CREATE` keep the query as written).
pub fn mark_counted_set_operations(statement: &mut Statement) {
    let _ = statement.visit(&mut CountedSetOperations);
}

/// [`mark_counted_set_operations`] on a query's text (`None` when nothing changes).
pub fn mark_counted_set_operations_in(sql: &str) -> Option<String> {
    let mut statements = crate::sql::star_except::parse(sql).ok()?;
    let before: Vec<String> = statements.iter().map(|s| s.to_string()).collect();
    statements.iter_mut().for_each(mark_counted_set_operations);
    let after: Vec<String> = statements.iter().map(|s| s.to_string()).collect();
    (before != after).then(|| after.join("; "))
}

struct ProcessingTime {
    replaced: bool,
}

impl VisitorMut for ProcessingTime {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Expr::Function(f) = expr {
            let name = f.name.to_string().to_ascii_lowercase();
            let no_args = match &f.args {
                FunctionArguments::None => true,
                FunctionArguments::List(l) => l.args.is_empty(),
                FunctionArguments::Subquery(_) => false,
            };
            if no_args && matches!(name.as_str(), "now" | "current_timestamp") {
                f.name = ObjectName::from(vec![Ident::new(crate::planner::NOW_FUNCTION)]);
                f.args = FunctionArguments::List(
                    datafusion::sql::sqlparser::ast::FunctionArgumentList {
                        duplicate_treatment: None,
                        args: vec![],
                        clauses: vec![],
                    },
                );
                self.replaced = true;
            }
        }
        ControlFlow::Continue(())
    }
}

/// `datafusion-pg-catalog`'s parser, made for the catalog queries of clients, replaces
/// every correlated scalar subquery in a select list by `NULL`. Outside catalog queries
/// they are put back from a plain parse of the same text (DataFusion decorrelates them
/// into joins).
pub fn restore_select_list_subqueries(sql: &str, statements: &mut [Statement]) {
    let lower = sql.to_ascii_lowercase();
    if lower.contains("pg_") || lower.contains("information_schema") {
        return;
    }
    let Ok(plain) = Parser::parse_sql(&PostgreSqlDialect {}, sql) else {
        return;
    };
    if plain.len() != statements.len() {
        return;
    }
    for (parsed, plain) in statements.iter_mut().zip(plain) {
        let mut originals = SelectLists::default();
        let mut plain = plain;
        let _ = plain.visit(&mut originals);
        let mut restore = RestoreSubqueries {
            originals: originals.lists.into_iter(),
        };
        let _ = parsed.visit(&mut restore);
    }
}

/// The select lists of every query, in visiting order.
#[derive(Default)]
struct SelectLists {
    lists: Vec<Vec<SelectItem>>,
}

impl VisitorMut for SelectLists {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        if let SetExpr::Select(select) = query.body.as_ref() {
            self.lists.push(select.projection.clone());
        }
        ControlFlow::Continue(())
    }
}

struct RestoreSubqueries {
    originals: std::vec::IntoIter<Vec<SelectItem>>,
}

impl VisitorMut for RestoreSubqueries {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        let SetExpr::Select(select) = query.body.as_mut() else {
            return ControlFlow::Continue(());
        };
        let Some(original) = self.originals.next() else {
            return ControlFlow::Break(());
        };
        if original.len() != select.projection.len() {
            return ControlFlow::Break(());
        }
        let is_null = |e: &Expr| matches!(e, Expr::Value(v) if v.value == Value::Null);
        for (item, original) in select.projection.iter_mut().zip(original) {
            match (item, original) {
                (SelectItem::UnnamedExpr(e), SelectItem::UnnamedExpr(o @ Expr::Subquery(_)))
                    if is_null(e) =>
                {
                    *e = o;
                }
                (
                    SelectItem::ExprWithAlias { expr, .. },
                    SelectItem::ExprWithAlias {
                        expr: o @ Expr::Subquery(_),
                        ..
                    },
                ) if is_null(expr) => {
                    *expr = o;
                }
                _ => {}
            }
        }
        ControlFlow::Continue(())
    }
}

pub fn rewrite(statement: &mut Statement) -> crate::error::Result<()> {
    let _ = statement.visit(&mut super::at_time_zone::AtTimeZoneSyntax);
    let _ = statement.visit(&mut super::bytea_escape::EncodedLiterals);
    let _ = statement.visit(&mut ArraySubquery);
    let _ = statement.visit(&mut CatalogScalarSubquery);
    let _ = statement.visit(&mut Int2VectorFunctions);
    if let ControlFlow::Break(error) = statement.visit(&mut LikeEscape) {
        return Err(error);
    }
    let _ = statement.visit(&mut WindowFunctions);
    let _ = statement.visit(&mut SeriesColumnAlias);
    let _ = statement.visit(&mut SelectListSeries);
    let _ = statement.visit(&mut StringAggByRow);
    let _ = statement.visit(&mut ModColumnName);
    let _ = statement.visit(&mut ModFunction);
    let _ = statement.visit(&mut ArraySortNullsLast);
    let _ = statement.visit(&mut SimilarTo);
    let _ = statement.visit(&mut JsonbCasts);
    // Before IntervalLiterals, which reads the interval literals this one makes.
    let _ = statement.visit(&mut QuotedNumberArguments);
    let _ = statement.visit(&mut IntervalLiterals);
    let _ = statement.visit(&mut WideNumberLiterals);
    let _ = statement.visit(&mut super::make_interval::NamedArguments);
    let _ = statement.visit(&mut JsonbValuesColumns);
    let _ = statement.visit(&mut StructFieldAccess);
    let _ = statement.visit(&mut super::interval_arithmetic::IntervalArithmetic);
    let _ = statement.visit(&mut super::exists_in_select::ExistsInSelect);
    let _ = statement.visit(&mut super::lateral_aggregates::LateralAggregates);
    match statement {
        Statement::Query(query) => alias_duplicate_columns(&mut query.body),
        Statement::Insert(insert) => {
            if let Some(source) = &mut insert.source {
                alias_duplicate_columns(&mut source.body);
            }
        }
        _ => {}
    }
    Ok(())
}

/// The name DataFusion gives an unaliased select item: a column's own name, also through
/// casts (`v::varchar` is named `v`, as in PostgreSQL).
fn datafusion_name(expr: &Expr) -> String {
    match expr {
        Expr::Identifier(id) => id.value.clone(),
        Expr::CompoundIdentifier(parts) => {
            parts.last().map(|p| p.value.clone()).unwrap_or_default()
        }
        Expr::Cast { expr, .. } => datafusion_name(expr),
        // DataFusion names every scalar subquery alike.
        Expr::Subquery(_) => "(<subquery>)".to_string(),
        // DataFusion leaves casts out of names wherever they are (`round(v::float8)` is
        // named `round(v)`).
        other => {
            let mut without_casts = other.clone();
            let _ =
                datafusion::sql::sqlparser::ast::visit_expressions_mut(&mut without_casts, |e| {
                    while let Expr::Cast { expr, .. } = e {
                        *e = std::mem::replace(expr.as_mut(), Expr::value(Value::Null));
                    }
                    ControlFlow::<()>::Continue(())
                });
            without_casts.to_string()
        }
    }
}

/// Prefix of the aliases given to duplicate output columns; the PostgreSQL name follows
/// the last `__`.
pub const DUPLICATE_ALIAS_PREFIX: &str = "__eddy_dup";

fn alias_duplicate_columns(body: &mut SetExpr) {
    let select = match body {
        SetExpr::Select(select) => select,
        SetExpr::SetOperation { left, .. } => return alias_duplicate_columns(left),
        SetExpr::Query(q) => return alias_duplicate_columns(&mut q.body),
        _ => return,
    };
    let mut seen: Vec<String> = Vec::new();
    for (i, item) in select.projection.iter_mut().enumerate() {
        let (expr, name) = match item {
            SelectItem::UnnamedExpr(e) => (e.clone(), datafusion_name(e)),
            SelectItem::ExprWithAlias { expr, alias } => (expr.clone(), alias.value.clone()),
            _ => return, // a `*` makes positions unknowable; leave the query alone
        };
        if seen.contains(&name) {
            let pg_name = super::column_names::pg_name_of(&expr).unwrap_or_else(|| name.clone());
            let pg_name = match item {
                SelectItem::ExprWithAlias { alias, .. } => alias.value.clone(),
                _ => pg_name,
            };
            *item = SelectItem::ExprWithAlias {
                expr,
                alias: Ident::with_quote('"', format!("{DUPLICATE_ALIAS_PREFIX}{i}__{pg_name}")),
            };
        } else {
            seen.push(name);
        }
    }
}

/// `x [NOT] SIMILAR TO p [ESCAPE e]`: `[NOT] regexp_like(x, eddy_similar_to_regex(p, e))`
/// ([`super::similar_to`]).
struct SimilarTo;

impl VisitorMut for SimilarTo {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let Expr::SimilarTo {
            negated,
            expr: text,
            pattern,
            escape_char,
        } = expr
        else {
            return ControlFlow::Continue(());
        };
        let mut regex_args = vec![pattern.as_ref().clone()];
        if let Some(escape) = escape_char {
            regex_args.push(Expr::Value(escape.clone()));
        }
        let regex = function_call(super::similar_to::SIMILAR_TO_REGEX, regex_args);
        let like = function_call("regexp_like", vec![text.as_ref().clone(), regex]);
        *expr = if *negated {
            Expr::UnaryOp {
                op: datafusion::sql::sqlparser::ast::UnaryOperator::Not,
                expr: Box::new(Expr::Nested(Box::new(like))),
            }
        } else {
            like
        };
        ControlFlow::Continue(())
    }
}

/// `array_sort(a)` sorts ascending with NULLs last, as `ORDER BY` does (PostgreSQL's and
/// RisingWave's `array_sort`); DataFusion's puts NULLs first unless told.
struct ArraySortNullsLast;

impl VisitorMut for ArraySortNullsLast {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Expr::Function(f) = expr
            && f.name.to_string().eq_ignore_ascii_case("array_sort")
            && let FunctionArguments::List(list) = &mut f.args
            && list.args.len() == 1
        {
            for text in ["ASC", "NULLS LAST"] {
                list.args
                    .push(FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::value(
                        Value::SingleQuotedString(text.into()),
                    ))));
            }
        }
        ControlFlow::Continue(())
    }
}

/// An unaliased `mod(a, b)` in a select list keeps PostgreSQL's column name `mod`
/// through the rewrite below.
struct ModColumnName;

impl VisitorMut for ModColumnName {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        if let SetExpr::Select(select) = query.body.as_mut() {
            for item in select.projection.iter_mut() {
                if let SelectItem::UnnamedExpr(Expr::Function(f)) = item
                    && f.name.to_string().eq_ignore_ascii_case("mod")
                {
                    *item = SelectItem::ExprWithAlias {
                        expr: Expr::Function(f.clone()),
                        alias: Ident::new("mod"),
                    };
                }
            }
        }
        ControlFlow::Continue(())
    }
}

/// PostgreSQL's `mod(a, b)` is DataFusion's `a % b` (same sign rule: the dividend's).
struct ModFunction;

impl VisitorMut for ModFunction {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let Expr::Function(f) = expr else {
            return ControlFlow::Continue(());
        };
        if !f.name.to_string().eq_ignore_ascii_case("mod") {
            return ControlFlow::Continue(());
        }
        let FunctionArguments::List(list) = &f.args else {
            return ControlFlow::Continue(());
        };
        let args: Vec<Expr> = list
            .args
            .iter()
            .filter_map(|a| match a {
                datafusion::sql::sqlparser::ast::FunctionArg::Unnamed(
                    datafusion::sql::sqlparser::ast::FunctionArgExpr::Expr(e),
                ) => Some(e.clone()),
                _ => None,
            })
            .collect();
        if let [a, b] = args.as_slice()
            && list.args.len() == 2
        {
            *expr = Expr::Nested(Box::new(Expr::BinaryOp {
                left: Box::new(Expr::Nested(Box::new(a.clone()))),
                op: datafusion::sql::sqlparser::ast::BinaryOperator::Modulo,
                right: Box::new(Expr::Nested(Box::new(b.clone()))),
            }));
        }
        ControlFlow::Continue(())
    }
}

/// `x::jsonb` (and `::json`): DataFusion has no JSON type, so the cast becomes
/// `jsonb_in(x)`, which parses the text and returns it in `jsonb`'s canonical form
/// (see [`crate::jsonb`]).
struct JsonbCasts;

impl VisitorMut for JsonbCasts {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        use datafusion::sql::sqlparser::ast::DataType;
        if let Expr::Cast {
            expr: inner,
            data_type: DataType::JSONB | DataType::JSON,
            ..
        } = expr
            && let Ok(call) = Parser::new(&PostgreSqlDialect {})
                .try_with_sql(&format!("jsonb_in({inner})"))
                .and_then(|mut p| p.parse_expr())
        {
            *expr = call;
        }
        ControlFlow::Continue(())
    }
}

/// Interval literals in PostgreSQL's own output form (`INTERVAL '1 day 02:00:00'`,
/// `'1 day 02:00:00'::interval`, `CAST('...' AS INTERVAL)`): DataFusion parses them while
/// planning with Arrow's parser, which does not read the `HH:MM:SS` part. Eddy's parser
/// ([`super::pg_semantics::parse_interval`]) reads them, and the literal is handed on as
/// `INTERVAL '<months> months <days> days <ns> nanoseconds'`, which Arrow reads.
struct IntervalLiterals;

impl VisitorMut for IntervalLiterals {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        use datafusion::sql::sqlparser::ast::{DataType, Interval};
        let text = match expr {
            Expr::Cast {
                expr: inner,
                data_type: DataType::Interval { .. },
                format: None,
                ..
            } => match inner.as_ref() {
                Expr::Value(v) => match &v.value {
                    Value::SingleQuotedString(text) => text.clone(),
                    _ => return ControlFlow::Continue(()),
                },
                _ => return ControlFlow::Continue(()),
            },
            Expr::Interval(Interval {
                value,
                leading_field: None,
                leading_precision: None,
                last_field: None,
                fractional_seconds_precision: None,
            }) => match value.as_ref() {
                Expr::Value(v) => match &v.value {
                    Value::SingleQuotedString(text) => text.clone(),
                    _ => return ControlFlow::Continue(()),
                },
                _ => return ControlFlow::Continue(()),
            },
            _ => return ControlFlow::Continue(()),
        };
        // What Arrow reads is left to it (fractions of units, `P1D`); only what it
        // cannot read is rewritten.
        use arrow::compute::kernels::cast_utils::{
            IntervalParseConfig, IntervalUnit, parse_interval_month_day_nano_config,
        };
        let config = IntervalParseConfig::new(IntervalUnit::Second);
        if parse_interval_month_day_nano_config(&text, config).is_ok() {
            return ControlFlow::Continue(());
        }
        let Some(v) = super::pg_semantics::parse_interval(&text) else {
            return ControlFlow::Continue(());
        };
        let canonical = format!(
            "{} months {} days {} nanoseconds",
            v.months, v.days, v.nanoseconds
        );
        *expr = Expr::Interval(Interval {
            value: Box::new(Expr::value(Value::SingleQuotedString(canonical))),
            leading_field: None,
            leading_precision: None,
            last_field: None,
            fractional_seconds_precision: None,
        });
        ControlFlow::Continue(())
    }
}

/// Number literals with an exponent too wide for Eddy's `numeric` (`1e300`,
/// `1.5e-200`: more than 38 digits once written out) are `double precision` values.
/// PostgreSQL reads them as `numeric`, which has room for them; DataFusion would refuse
/// them ("Decimal scale -300 exceeds ..."), so `INSERT INTO t VALUES (1e300)` into a
/// `double precision` column could not be written at all.
struct WideNumberLiterals;

impl VisitorMut for WideNumberLiterals {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let Expr::Value(v) = expr else {
            return ControlFlow::Continue(());
        };
        let Value::Number(text, _) = &v.value else {
            return ControlFlow::Continue(());
        };
        if written_out_digits(text).is_none_or(|digits| digits <= 38) {
            return ControlFlow::Continue(());
        }
        *expr = as_double(Expr::value(Value::SingleQuotedString(text.clone())));
        ControlFlow::Continue(())
    }
}

/// A quoted literal given to a function of numbers (`sqrt('1004.3')`, `round('4.5')`) is
/// a `double precision`, as PostgreSQL resolves its untyped literal there (the preferred
/// type of the numbers); DataFusion would refuse text. Only literals that read as a
/// number (`'inf'`, `'nan'` and `'-0'` included) are changed; others stay text and get
/// DataFusion's error.
struct QuotedNumberArguments;

/// The functions whose every argument is a number.
const NUMBER_FUNCTIONS: &[&str] = &[
    "abs", "sqrt", "cbrt", "round", "ceil", "ceiling", "floor", "trunc", "exp", "ln", "log",
    "log10", "log2", "power", "pow", "sign", "sin", "cos", "tan", "cot", "asin", "acos", "atan",
    "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "degrees", "radians", "sind",
    "cosd", "tand", "cotd", "asind", "acosd", "atand",
];

impl VisitorMut for QuotedNumberArguments {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        use datafusion::sql::sqlparser::ast::{FunctionArg, FunctionArgExpr};
        if let Expr::BinaryOp { left, op, right } = expr {
            quoted_number_in_arithmetic(left, op, right);
            return ControlFlow::Continue(());
        }
        let Expr::Function(function) = expr else {
            return ControlFlow::Continue(());
        };
        let name = function.name.to_string().to_ascii_lowercase();
        if !NUMBER_FUNCTIONS.contains(&name.as_str()) {
            return ControlFlow::Continue(());
        }
        let datafusion::sql::sqlparser::ast::FunctionArguments::List(list) = &mut function.args
        else {
            return ControlFlow::Continue(());
        };
        for arg in list.args.iter_mut() {
            let FunctionArg::Unnamed(FunctionArgExpr::Expr(value)) = arg else {
                continue;
            };
            let Expr::Value(v) = value else {
                continue;
            };
            let Value::SingleQuotedString(text) = &v.value else {
                continue;
            };
            if text.trim().parse::<f64>().is_err() {
                continue;
            }
            *value = as_double(value.clone());
        }
        ControlFlow::Continue(())
    }
}

/// A quoted number beside an arithmetic operator (`sqrt(v) - '31.69'`), the other side
/// not quoted: PostgreSQL gives the untyped literal the other side's type. Without types
/// here, it becomes the number as if written without quotes (an integer when whole, so
/// `n / '2'` divides integers; an exact `numeric` with its own digits otherwise; a
/// `double precision` for `'inf'`, `'nan'` or an exponent), which the other side's type
/// then absorbs as PostgreSQL's would; text that reads as an interval (`now() - '1 day'`)
/// is an interval.
fn quoted_number_in_arithmetic(
    left: &mut Expr,
    op: &datafusion::sql::sqlparser::ast::BinaryOperator,
    right: &mut Expr,
) {
    use datafusion::sql::sqlparser::ast::BinaryOperator;
    if !matches!(
        op,
        BinaryOperator::Plus
            | BinaryOperator::Minus
            | BinaryOperator::Multiply
            | BinaryOperator::Divide
            | BinaryOperator::Modulo
    ) {
        return;
    }
    let quoted = |e: &Expr| match e {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(text) => Some(text.trim().to_string()),
            _ => None,
        },
        _ => None,
    };
    let (target, text) = match (quoted(left), quoted(right)) {
        (Some(text), None) => (left, text),
        (None, Some(text)) => (right, text),
        _ => return,
    };
    let Ok(number) = text.parse::<f64>() else {
        // Not a number: an interval (`now() - '1 day'`) if it reads as one.
        if super::pg_semantics::parse_interval(&text).is_some() {
            *target = Expr::Interval(datafusion::sql::sqlparser::ast::Interval {
                value: Box::new(target.clone()),
                leading_field: None,
                leading_precision: None,
                last_field: None,
                fractional_seconds_precision: None,
            });
        }
        return;
    };
    let plain = text.trim_start_matches(['-', '+']);
    if number.is_finite() && plain.chars().all(|c| c.is_ascii_digit() || c == '.') {
        // The number as if written without quotes (its own digits kept).
        let literal = Expr::value(Value::Number(plain.to_string(), false));
        *target = if text.starts_with('-') {
            Expr::UnaryOp {
                op: datafusion::sql::sqlparser::ast::UnaryOperator::Minus,
                expr: Box::new(literal),
            }
        } else {
            literal
        };
        return;
    }
    *target = as_double(target.clone());
}

/// `CAST(expr AS DOUBLE PRECISION)`.
fn as_double(expr: Expr) -> Expr {
    cast_to(
        expr,
        datafusion::sql::sqlparser::ast::DataType::DoublePrecision,
    )
}

/// `CAST(expr AS data_type)`, for rewrites that build SQL.
pub(super) fn cast_to(expr: Expr, data_type: datafusion::sql::sqlparser::ast::DataType) -> Expr {
    Expr::Cast {
        kind: datafusion::sql::sqlparser::ast::CastKind::Cast,
        expr: Box::new(expr),
        data_type,
        array: false,
        format: None,
    }
}

/// `name(args...)`, a plain call, for rewrites that build SQL.
pub(super) fn function_call(name: &str, args: Vec<Expr>) -> Expr {
    Expr::Function(datafusion::sql::sqlparser::ast::Function {
        name: ObjectName::from(vec![Ident::new(name)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|a| FunctionArg::Unnamed(FunctionArgExpr::Expr(a)))
                .collect(),
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

/// How many digits a number literal with an exponent has written out as a plain
/// decimal (`1.5e3`: 4, `2e-3`: 3 for `0.002`); `None` without an exponent (those are
/// left to DataFusion) or when it does not parse.
fn written_out_digits(text: &str) -> Option<i64> {
    let (mantissa, exponent) = text.split_once(['e', 'E'])?;
    let exponent: i64 = exponent.parse().ok()?;
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits: String = format!("{whole}{fraction}");
    let significant = digits.trim_start_matches('0');
    if significant.is_empty() {
        return Some(1); // zero
    }
    // The value is significant × 10^(exponent - fraction digits - trailing part).
    let scale = fraction.len() as i64 - exponent;
    let integer_digits = significant.len() as i64 - scale;
    Some(integer_digits.max(0) + scale.max(0))
}

/// A `VALUES` column with a `jsonb` cast in one row is `jsonb` in every row, as in
/// PostgreSQL (`VALUES ('1'::jsonb), ('true')`): the other rows' values are parsed too.
struct JsonbValuesColumns;

impl VisitorMut for JsonbValuesColumns {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        let SetExpr::Values(values) = query.body.as_mut() else {
            return ControlFlow::Continue(());
        };
        let is_jsonb = |e: &Expr| matches!(e, Expr::Function(f) if f.name.to_string().eq_ignore_ascii_case("jsonb_in"));
        let width = values.rows.first().map_or(0, |r| r.len());
        for column in 0..width {
            if !values
                .rows
                .iter()
                .any(|r| r.get(column).is_some_and(is_jsonb))
            {
                continue;
            }
            for row in values.rows.iter_mut() {
                if let Some(value) = row.get_mut(column)
                    && !is_jsonb(value)
                    && let Ok(call) = Parser::new(&PostgreSqlDialect {})
                        .try_with_sql(&format!("jsonb_in({value})"))
                        .and_then(|mut p| p.parse_expr())
                {
                    *value = call;
                }
            }
        }
        ControlFlow::Continue(())
    }
}

/// `(v).field` on a struct: DataFusion's planner reads a dotted name only as a column,
/// so the access becomes `get_field(v, 'field')` (nested for `(v).a.b`), and a select
/// item that is such an access is named after its last field, as in PostgreSQL. `ROW(...)`
/// names its fields `f1`, `f2`, ... as PostgreSQL does.
struct StructFieldAccess;

impl VisitorMut for StructFieldAccess {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        if let SetExpr::Select(select) = query.body.as_mut() {
            for item in select.projection.iter_mut() {
                if let SelectItem::UnnamedExpr(Expr::CompoundFieldAccess { root, access_chain }) =
                    item
                    && matches!(root.as_ref(), Expr::Nested(_))
                    && let Some(datafusion::sql::sqlparser::ast::AccessExpr::Dot(Expr::Identifier(
                        last,
                    ))) = access_chain.last()
                {
                    let alias = last.clone();
                    let SelectItem::UnnamedExpr(expr) = item else {
                        unreachable!("matched above")
                    };
                    *item = SelectItem::ExprWithAlias {
                        expr: expr.clone(),
                        alias,
                    };
                }
            }
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        use datafusion::sql::sqlparser::ast::AccessExpr;
        // `ROW(a, b)`: a struct whose fields are named f1, f2, ... as in PostgreSQL.
        if let Expr::Function(f) = expr
            && f.name.to_string().eq_ignore_ascii_case("row")
            && let FunctionArguments::List(list) = &f.args
            && !list.args.is_empty()
        {
            let fields: Vec<String> = list
                .args
                .iter()
                .enumerate()
                .map(|(i, a)| format!("'f{}', {a}", i + 1))
                .collect();
            if let Ok(call) = Parser::new(&PostgreSqlDialect {})
                .try_with_sql(&format!("named_struct({})", fields.join(", ")))
                .and_then(|mut p| p.parse_expr())
            {
                *expr = call;
            }
            return ControlFlow::Continue(());
        }
        let Expr::CompoundFieldAccess { root, access_chain } = expr else {
            return ControlFlow::Continue(());
        };
        let Expr::Nested(inner) = root.as_ref() else {
            return ControlFlow::Continue(());
        };
        if !access_chain
            .iter()
            .all(|a| matches!(a, AccessExpr::Dot(Expr::Identifier(_))))
        {
            return ControlFlow::Continue(());
        }
        let mut text = inner.to_string();
        for access in access_chain.iter() {
            if let AccessExpr::Dot(Expr::Identifier(field)) = access {
                text = format!("get_field({text}, '{}')", field.value.replace('\'', "''"));
            }
        }
        if let Ok(call) = Parser::new(&PostgreSqlDialect {})
            .try_with_sql(&text)
            .and_then(|mut p| p.parse_expr())
        {
            *expr = call;
        }
        ControlFlow::Continue(())
    }
}

/// Marks the right input of `EXCEPT ALL` / `INTERSECT ALL` (see `set_operations`),
/// whose DataFusion plan is then rebuilt to count copies as PostgreSQL does.
struct CountedSetOperations;

impl VisitorMut for CountedSetOperations {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        mark_counted(&mut query.body);
        ControlFlow::Continue(())
    }
}

fn mark_counted(body: &mut SetExpr) {
    use datafusion::sql::sqlparser::ast::{SetOperator, SetQuantifier};
    let SetExpr::SetOperation {
        op,
        set_quantifier,
        left,
        right,
    } = body
    else {
        return;
    };
    mark_counted(left);
    mark_counted(right);
    let mark = match (op, set_quantifier) {
        (SetOperator::Except | SetOperator::Minus, SetQuantifier::All) => {
            super::set_operations::EXCEPT_ALL_MARK
        }
        (SetOperator::Intersect, SetQuantifier::All) => super::set_operations::INTERSECT_ALL_MARK,
        _ => return,
    };
    let sql = format!("SELECT * FROM ({right}) AS {mark}");
    if let Ok(Statement::Query(q)) = Parser::new(&PostgreSqlDialect {})
        .try_with_sql(&sql)
        .and_then(|mut p| p.parse_statement())
    {
        **right = *q.body;
    }
}

struct LikeEscape;

impl VisitorMut for LikeEscape {
    /// A pattern ending with its escape character (`'__' LIKE '___' ESCAPE '_'`): an
    /// error, as in PostgreSQL.
    type Break = crate::error::EddyError;

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<Self::Break> {
        let (Expr::Like {
            pattern,
            escape_char,
            ..
        }
        | Expr::ILike {
            pattern,
            escape_char,
            ..
        }) = expr
        else {
            return ControlFlow::Continue(());
        };
        let Some(escape) = escape_char
            .as_ref()
            .and_then(|e| e.value.clone().into_string())
        else {
            return ControlFlow::Continue(());
        };
        let Expr::Value(v) = pattern.as_ref() else {
            return ControlFlow::Continue(());
        };
        let Some(text) = v.value.clone().into_string() else {
            return ControlFlow::Continue(());
        };
        // `ESCAPE ''`: no escape character, so a backslash is itself.
        if escape.is_empty() {
            **pattern = Expr::value(Value::SingleQuotedString(text.replace('\\', "\\\\")));
            *escape_char = None;
            return ControlFlow::Continue(());
        }
        let mut chars = escape.chars();
        let (Some(esc), None) = (chars.next(), chars.next()) else {
            return ControlFlow::Continue(());
        };
        if esc == '\\' {
            return ControlFlow::Continue(());
        }
        let mut out = String::with_capacity(text.len());
        let mut it = text.chars();
        while let Some(c) = it.next() {
            if c == esc {
                let Some(next) = it.next() else {
                    return ControlFlow::Break(crate::error::EddyError::new(
                        "22025",
                        "LIKE pattern must not end with escape character",
                    ));
                };
                out.push('\\');
                out.push(next);
            } else if c == '\\' {
                out.push_str("\\\\");
            } else {
                out.push(c);
            }
        }
        **pattern = Expr::value(Value::SingleQuotedString(out));
        *escape_char = None;
        ControlFlow::Continue(())
    }
}

struct Int2VectorFunctions;

impl VisitorMut for Int2VectorFunctions {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let Expr::Function(f) = expr else {
            return ControlFlow::Continue(());
        };
        let name = f.name.to_string().to_ascii_lowercase();
        let name = name.trim_start_matches("pg_catalog.");
        let FunctionArguments::List(list) = &f.args else {
            return ControlFlow::Continue(());
        };
        let args: Vec<String> = list.args.iter().map(|a| a.to_string()).collect();
        let is_int2vector = |a: &String| a.ends_with("indkey") || a.ends_with("indoption");
        let text = match (name, args.as_slice()) {
            ("unnest", [a]) if is_int2vector(a) => {
                format!("unnest(CAST(string_to_array({a}, ' ') AS SMALLINT[]))")
            }
            ("generate_subscripts", [a, dim]) if is_int2vector(a) && dim == "1" => {
                format!(
                    "unnest(range(1, CAST(array_length(string_to_array({a}, ' ')) AS BIGINT) + 1))"
                )
            }
            _ => return ControlFlow::Continue(()),
        };
        if let Some(replacement) = Parser::new(&PostgreSqlDialect {})
            .try_with_sql(&text)
            .ok()
            .and_then(|mut p| p.parse_expr().ok())
        {
            *expr = replacement;
        }
        ControlFlow::Continue(())
    }
}

struct CatalogScalarSubquery;

const AGGREGATES: &[&str] = &[
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "array_agg",
    "string_agg",
    "bool_and",
    "bool_or",
    "json_agg",
    "first_value",
    "last_value",
];

impl VisitorMut for CatalogScalarSubquery {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let Expr::Subquery(query) = expr else {
            return ControlFlow::Continue(());
        };
        let SetExpr::Select(select) = query.body.as_mut() else {
            return ControlFlow::Continue(());
        };
        let reads_catalog = select.from.iter().any(|t| match &t.relation {
            TableFactor::Table { name, .. } => {
                name.0.len() == 2
                    && name.0[0]
                        .as_ident()
                        .is_some_and(|i| i.value.eq_ignore_ascii_case("pg_catalog"))
            }
            _ => false,
        });
        let grouped = !matches!(&select.group_by, GroupByExpr::Expressions(e, _) if e.is_empty());
        if !reads_catalog || grouped || select.distinct.is_some() || select.projection.len() != 1 {
            return ControlFlow::Continue(());
        }
        let item = &mut select.projection[0];
        let (SelectItem::UnnamedExpr(inner) | SelectItem::ExprWithAlias { expr: inner, .. }) = item
        else {
            return ControlFlow::Continue(());
        };
        if let Expr::Function(f) = inner
            && AGGREGATES.contains(&f.name.to_string().to_ascii_lowercase().as_str())
        {
            return ControlFlow::Continue(());
        }
        if let Some(wrapped) = Parser::new(&PostgreSqlDialect {})
            .try_with_sql(&format!("first_value({inner})"))
            .ok()
            .and_then(|mut p| p.parse_expr().ok())
        {
            *inner = wrapped;
        }
        ControlFlow::Continue(())
    }
}

struct ArraySubquery;

impl VisitorMut for ArraySubquery {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Expr::Function(f) = expr
            && f.name.to_string().eq_ignore_ascii_case("array")
            && let FunctionArguments::Subquery(query) = &f.args
            && let Some(replacement) = rewrite_array_subquery(query)
        {
            *expr = replacement;
        }
        ControlFlow::Continue(())
    }
}

fn rewrite_array_subquery(query: &Query) -> Option<Expr> {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let [item] = select.projection.as_slice() else {
        return None;
    };
    let element = match item {
        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
        _ => return None,
    };
    // `FROM unnest(arr) x` with nothing else: a per-element transform of `arr`.
    if let [from] = select.from.as_slice()
        && from.joins.is_empty()
        && select.selection.is_none()
        && let Some((arg, var)) = unnest_source(&from.relation)
    {
        let text = if matches!(element, Expr::Identifier(i) if i.value == var) {
            arg
        } else {
            format!("array_transform({arg}, {var} -> {element})")
        };
        return Parser::new(&DuckDbDialect {})
            .try_with_sql(&text)
            .ok()?
            .parse_expr()
            .ok();
    }
    // Otherwise aggregate the subquery's rows into one array.
    let mut aggregated = query.clone();
    if let SetExpr::Select(select) = aggregated.body.as_mut() {
        let agg = Parser::new(&PostgreSqlDialect {})
            .try_with_sql(&format!("array_agg({element})"))
            .ok()?
            .parse_expr()
            .ok()?;
        select.projection = vec![SelectItem::UnnamedExpr(agg)];
    }
    // No rows make an empty array, not NULL, as in PostgreSQL.
    let mut empty_when_no_rows = Parser::new(&PostgreSqlDialect {})
        .try_with_sql("coalesce(NULL, make_array())")
        .ok()?
        .parse_expr()
        .ok()?;
    if let Expr::Function(f) = &mut empty_when_no_rows
        && let FunctionArguments::List(list) = &mut f.args
        && let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(first))) = list.args.first_mut()
    {
        *first = Expr::Subquery(Box::new(aggregated));
    }
    Some(empty_when_no_rows)
}

/// For `unnest(arr) AS x` (in any of the forms sqlparser gives it), the array expression
/// and the alias.
fn unnest_source(relation: &TableFactor) -> Option<(String, String)> {
    let is_unnest = |name: &ObjectName| {
        name.0
            .last()
            .and_then(|p| p.as_ident())
            .is_some_and(|i| i.value.eq_ignore_ascii_case("unnest"))
    };
    match relation {
        TableFactor::Table {
            name,
            args: Some(args),
            alias: Some(alias),
            ..
        } if is_unnest(name) => match args.args.as_slice() {
            [arg] => Some((arg.to_string(), alias.name.value.clone())),
            _ => None,
        },
        TableFactor::Function {
            name,
            args,
            alias: Some(alias),
            ..
        } if is_unnest(name) => match args.as_slice() {
            [arg] => Some((arg.to_string(), alias.name.value.clone())),
            _ => None,
        },
        TableFactor::UNNEST {
            array_exprs,
            alias: Some(alias),
            ..
        } => match array_exprs.as_slice() {
            [arg] => Some((arg.to_string(), alias.name.value.clone())),
            _ => None,
        },
        _ => None,
    }
}

/// `FROM generate_series(1, 3) AS v`: as in PostgreSQL, the alias of a function
/// returning one column names that column too (DataFusion would keep `value`).
struct SeriesColumnAlias;

impl VisitorMut for SeriesColumnAlias {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        // Without an alias PostgreSQL names both the relation and its column after the
        // function (`SELECT generate_series FROM generate_series(1, 3)`).
        if let TableFactor::Table {
            name,
            args: Some(_),
            alias: alias @ None,
            ..
        } = factor
            && name.to_string().eq_ignore_ascii_case("generate_series")
        {
            *alias = Some(datafusion::sql::sqlparser::ast::TableAlias {
                explicit: true,
                name: Ident::new("generate_series"),
                columns: vec![],
                at: None,
            });
        }
        let (name, alias) = match factor {
            TableFactor::Table {
                name,
                args: Some(_),
                alias: Some(alias),
                ..
            } => (name, alias),
            TableFactor::Function {
                name,
                alias: Some(alias),
                ..
            } => (name, alias),
            _ => return ControlFlow::Continue(()),
        };
        let function = name.to_string().to_ascii_lowercase();
        if alias.columns.is_empty() && matches!(function.as_str(), "generate_series" | "range") {
            alias.columns = vec![datafusion::sql::sqlparser::ast::TableAliasColumnDef {
                name: alias.name.clone(),
                data_type: None,
            }];
        }
        ControlFlow::Continue(())
    }
}

struct StringAggByRow;

impl VisitorMut for StringAggByRow {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let Expr::Function(f) = expr else {
            return ControlFlow::Continue(());
        };
        if !f.name.to_string().eq_ignore_ascii_case("string_agg") {
            return ControlFlow::Continue(());
        }
        let FunctionArguments::List(list) = &f.args else {
            return ControlFlow::Continue(());
        };
        let delimiter_is_literal = match list.args.as_slice() {
            [_, FunctionArg::Unnamed(FunctionArgExpr::Expr(d))] => {
                matches!(d, Expr::Value(_))
            }
            _ => true,
        };
        if !delimiter_is_literal && list.duplicate_treatment.is_none() {
            f.name = ObjectName::from(vec![Ident::new(super::string_agg_by_row::NAME)]);
        }
        ControlFlow::Continue(())
    }
}

struct SelectListSeries;

impl VisitorMut for SelectListSeries {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        series_items_of(&mut query.body);
        ControlFlow::Continue(())
    }
}

fn series_items_of(body: &mut SetExpr) {
    let select = match body {
        SetExpr::Select(select) => select,
        SetExpr::SetOperation { left, right, .. } => {
            series_items_of(left);
            return series_items_of(right);
        }
        _ => return,
    };
    for item in select.projection.iter_mut() {
        let (expr, alias) = match item {
            SelectItem::UnnamedExpr(e) => (e, None),
            SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.clone())),
            _ => continue,
        };
        let Expr::Function(f) = expr else { continue };
        let name = f.name.to_string().to_ascii_lowercase();
        if name == "unnest" {
            // `unnest(regexp_matches(...))`: every group of every match, one per row.
            if let FunctionArguments::List(list) = &mut f.args
                && let [FunctionArg::Unnamed(FunctionArgExpr::Expr(inner))] =
                    list.args.as_mut_slice()
                && let Expr::Function(g) = inner
                && g.name.to_string().eq_ignore_ascii_case("regexp_matches")
            {
                g.name = ObjectName::from(vec![Ident::new(super::regexp::MATCHES_LIST)]);
                let flattened = format!("flatten({inner})");
                if let Ok(e) = Parser::new(&PostgreSqlDialect {})
                    .try_with_sql(&flattened)
                    .and_then(|mut p| p.parse_expr())
                {
                    *inner = e;
                }
            }
            continue;
        }
        match name.as_str() {
            // Set-returning functions that are their list function, unnested.
            "jsonb_array_elements" | "jsonb_array_elements_text" | "jsonb_object_keys" => {
                f.name = ObjectName::from(vec![Ident::new(format!("{name}_list"))]);
            }
            "regexp_matches" => {
                f.name = ObjectName::from(vec![Ident::new(super::regexp::MATCHES_LIST)]);
            }
            "regexp_split_to_table" => {
                f.name = ObjectName::from(vec![Ident::new("regexp_split_to_array")]);
            }
            "generate_series" | "range" => {}
            _ => continue,
        }
        let mut unnest = f.clone();
        unnest.name = ObjectName::from(vec![Ident::new("unnest")]);
        unnest.args = FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: vec![FunctionArg::Unnamed(FunctionArgExpr::Expr(expr.clone()))],
            clauses: vec![],
        });
        *item = SelectItem::ExprWithAlias {
            expr: Expr::Function(unnest),
            alias: alias.unwrap_or_else(|| Ident::new(name)),
        };
    }
}

struct WindowFunctions;

/// `TUMBLE(t, ...)`, `HOP`, `CUMULATE` and `SESSION` (and Flink's forms) are planned as
/// plan nodes by `planner::window_tvf`. DataFusion looks up only the tables a statement names as
/// relations before planning it, so the relation a window reads is handed over as the
/// subquery `(SELECT * FROM t)`, and the window is named after `t` when it has no alias.
/// Returns whether `factor` is such a window.
fn read_window_input_as_subquery(factor: &mut TableFactor) -> bool {
    let TableFactor::Table {
        name,
        args: Some(args),
        alias,
        ..
    } = factor
    else {
        return false;
    };
    if !crate::planner::window_tvf::is_window_function(&name.to_string()) {
        return false;
    }
    let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(first))) = args.args.first_mut() else {
        return true;
    };
    let relation = match first {
        Expr::Identifier(ident) => ObjectName::from(vec![ident.clone()]),
        Expr::CompoundIdentifier(idents) => ObjectName::from(idents.clone()),
        // Already a subquery (a stored query), or not a relation (an error when planned).
        _ => return true,
    };
    let Ok(mut query) = parse_query("SELECT * FROM window_input") else {
        return true;
    };
    if let SetExpr::Select(select) = query.body.as_mut()
        && let Some(TableFactor::Table { name, .. }) =
            select.from.first_mut().map(|from| &mut from.relation)
    {
        if alias.is_none() {
            let last = relation.0.last().and_then(|p| p.as_ident()).cloned();
            *alias = last.map(|name| datafusion::sql::sqlparser::ast::TableAlias {
                explicit: true,
                name,
                columns: vec![],
                at: None,
            });
        }
        *name = relation;
        *first = Expr::Subquery(Box::new(query));
    }
    true
}

impl VisitorMut for WindowFunctions {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        read_window_input_as_subquery(factor);
        ControlFlow::Continue(())
    }
}

/// Parses an expression Eddy writes itself (templates, stored expressions).
pub(super) fn parse_expr(sql: &str) -> crate::error::Result<Expr> {
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_expr())
        .map_err(|e| {
            crate::error::EddyError::syntax(e.to_string().replace("sql parser error: ", ""))
        })
}

/// Parses a query Eddy writes itself (a template whose parts are then replaced).
pub(super) fn parse_query(sql: &str) -> crate::error::Result<Query> {
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_query())
        .map(|q| *q)
        .map_err(|e| {
            crate::error::EddyError::syntax(e.to_string().replace("sql parser error: ", ""))
        })
}

#[cfg(test)]
mod wide_number_tests {
    use super::written_out_digits;

    #[test]
    fn digits_of_number_literals_written_out() {
        assert_eq!(written_out_digits("1.5"), None);
        assert_eq!(written_out_digits("1.5e3"), Some(4)); // 1500
        assert_eq!(written_out_digits("2E-3"), Some(3)); // 0.002
        assert_eq!(written_out_digits("0.0025e0"), Some(4)); // 0.0025
        assert_eq!(written_out_digits("0e500"), Some(1));
        assert_eq!(written_out_digits("1e300"), Some(301));
        assert_eq!(written_out_digits("1.5e-200"), Some(201));
        assert_eq!(written_out_digits("1e+37"), Some(38));
    }
}
