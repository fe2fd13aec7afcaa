//! SQL functions: `CREATE [OR REPLACE] FUNCTION f(a INT, b INT) RETURNS INT LANGUAGE SQL
//! AS 'SELECT a + b'` (also `$1`, `$2` for the arguments, a `$$`-quoted body, or
//! PostgreSQL's `RETURN a + b`), and `DROP FUNCTION [IF EXISTS] f[(types)]`.
//!
//! The body is one expression over the arguments. Every call is replaced, before the
//! statement is planned, by that expression with each argument cast to its declared type
//! and the whole cast to the return type — so a function works wherever an expression
//! does, in queries, DML and materialized views alike (a view keeps the expression, not
//! the call). Bodies may call other SQL functions. Functions are found by name and number
//! of arguments. Other languages (Python, JavaScript, Rust, WebAssembly), bodies that
//! read tables, and functions returning sets are refused.

use super::{Outcome, Session};
use crate::catalog::{Catalog, SqlFunction};
use crate::error::{EddyError, Result, sqlstate};
use datafusion::sql::sqlparser::ast::{
    self, CreateFunctionBody, Expr, FunctionArg, FunctionArgExpr, FunctionArguments,
    FunctionReturnType, SelectItem, SetExpr, Statement, Value, VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use std::ops::ControlFlow;

/// How deep SQL functions may call one another.
const MAX_NESTING: usize = 32;

pub(super) async fn create(session: &Session, create: ast::CreateFunction) -> Result<Outcome> {
    let name = function_name(&create.name)?;
    if let Some(language) = &create.language
        && !language.value.eq_ignore_ascii_case("sql")
    {
        return Err(EddyError::not_supported(format!(
            "functions in language {} are not supported; only LANGUAGE SQL functions are",
            language.value
        )));
    }
    let return_type = match &create.return_type {
        Some(FunctionReturnType::DataType(t)) => t.clone(),
        Some(FunctionReturnType::SetOf(_)) => {
            return Err(EddyError::not_supported(
                "functions returning SETOF are not supported",
            ));
        }
        None => return Err(EddyError::syntax("a function needs RETURNS type")),
    };
    crate::catalog::SqlType::from_ast(&return_type)?;
    let args = create.args.clone().unwrap_or_default();
    let mut arg_names = Vec::with_capacity(args.len());
    let mut arg_types = Vec::with_capacity(args.len());
    for arg in &args {
        if arg.default_expr.is_some() || arg.mode.is_some() {
            return Err(EddyError::not_supported(
                "function arguments with defaults or modes (IN, OUT) are not supported",
            ));
        }
        crate::catalog::SqlType::from_ast(&arg.data_type)?;
        arg_names.push(arg.name.as_ref().map(|n| n.value.to_lowercase()));
        arg_types.push(arg.data_type.to_string());
    }
    let body = match &create.function_body {
        Some(
            CreateFunctionBody::AsBeforeOptions { body, .. }
            | CreateFunctionBody::AsAfterOptions(body),
        ) => body_of_text(&quoted_text(body)?)?,
        Some(CreateFunctionBody::Return(expr) | CreateFunctionBody::AsReturnExpr(expr)) => {
            expr.to_string()
        }
        _ => {
            return Err(EddyError::syntax(
                "a function needs a body: AS '...' or RETURN ...",
            ));
        }
    };
    let function = SqlFunction {
        name,
        arg_names,
        arg_types,
        return_type: return_type.to_string(),
        body,
    };
    // The body must be an expression of the arguments: planned once with NULLs.
    check_body(session, &function).await?;
    session
        .engine
        .catalog
        .put_function(function, create.or_replace)?;
    Ok(Outcome::command("CREATE FUNCTION"))
}

pub(super) fn drop(session: &Session, drop: ast::DropFunction) -> Result<Outcome> {
    for desc in &drop.func_desc {
        let name = function_name(&desc.name)?;
        let arity = desc.args.as_ref().map(Vec::len);
        if session.engine.catalog.drop_function(&name, arity)? == 0 && !drop.if_exists {
            return Err(EddyError::new(
                sqlstate::UNDEFINED_FUNCTION,
                format!("function {name} does not exist"),
            ));
        }
    }
    Ok(Outcome::command("DROP FUNCTION"))
}

fn function_name(name: &ast::ObjectName) -> Result<String> {
    match name.0.as_slice() {
        [part] => Ok(part.to_string().trim_matches('"').to_lowercase()),
        [schema, part] if schema.to_string().eq_ignore_ascii_case("public") => {
            Ok(part.to_string().trim_matches('"').to_lowercase())
        }
        _ => Err(EddyError::not_supported(format!(
            "function names in schemas other than public are not supported: {name}"
        ))),
    }
}

/// A body given as a quoted string (`'...'` or `$$...$$`).
fn quoted_text(body: &Expr) -> Result<String> {
    match body {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) => Ok(s.clone()),
            Value::DollarQuotedString(d) => Ok(d.value.clone()),
            _ => Err(EddyError::syntax("a function body is a quoted string")),
        },
        _ => Err(EddyError::syntax("a function body is a quoted string")),
    }
}

/// The expression of a body `SELECT expr` (or a bare expression).
fn body_of_text(text: &str) -> Result<String> {
    let text = text.trim().trim_end_matches(';');
    let dialect = PostgreSqlDialect {};
    let statements = Parser::parse_sql(&dialect, text);
    let not_one_expression = || {
        EddyError::not_supported(
            "a SQL function's body must be one SELECT of one expression over its arguments \
             (no FROM, WHERE or several statements)",
        )
    };
    match statements.as_deref() {
        Ok([Statement::Query(query)]) => {
            let SetExpr::Select(select) = query.body.as_ref() else {
                return Err(not_one_expression());
            };
            let plain = select.from.is_empty()
                && select.selection.is_none()
                && select.having.is_none()
                && query.order_by.is_none()
                && query.limit_clause.is_none();
            match select.projection.as_slice() {
                [SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. }]
                    if plain =>
                {
                    Ok(e.to_string())
                }
                _ => Err(not_one_expression()),
            }
        }
        _ => Parser::new(&dialect)
            .try_with_sql(text)
            .and_then(|mut p| p.parse_expr())
            .map(|e| e.to_string())
            .map_err(|_| not_one_expression()),
    }
}

/// Plans `SELECT f(NULL, ...)` so a body naming anything but its arguments is refused
/// when the function is created.
async fn check_body(session: &Session, function: &SqlFunction) -> Result<()> {
    let nulls = vec![Expr::value(Value::Null); function.arg_types.len()];
    // The body without the cast to the return type: its own type is checked below.
    let expr = match inline_call(function, &nulls, |_| None, 0)? {
        Expr::Cast { expr, .. } => *expr,
        other => other,
    };
    let invalid = |e: String| {
        EddyError::new(
            sqlstate::UNDEFINED_COLUMN,
            format!("the body of function {} is not valid: {e}", function.name),
        )
    };
    // Parsed as any statement is, so that SQL functions it calls are inlined too.
    let statement = session
        .engine
        .parse(&format!("SELECT {expr}"))?
        .pop()
        .ok_or_else(|| invalid("no statement".into()))?;
    let plan = session
        .engine
        .ctx
        .state()
        .statement_to_plan(datafusion::sql::parser::Statement::Statement(Box::new(
            statement,
        )))
        .await
        .map_err(|e| invalid(e.to_string()))?;
    let body_type = plan.schema().field(0).data_type().clone();
    let return_type =
        crate::catalog::SqlType::from_ast(&parse_type(&function.return_type)?)?.to_arrow();
    if !implicitly_returns(&body_type, &return_type) {
        return Err(EddyError::new(
            sqlstate::DATATYPE_MISMATCH,
            format!(
                "return type mismatch detected in function {}: its body gives {body_type}, \
                 it is declared to return {}",
                function.name, function.return_type
            ),
        ));
    }
    Ok(())
}

/// Whether a body of type `body` may be returned as `declared`, as PostgreSQL allows
/// (the same kind of value: numbers as numbers, text as text; NULL as anything).
fn implicitly_returns(
    body: &arrow::datatypes::DataType,
    declared: &arrow::datatypes::DataType,
) -> bool {
    use arrow::datatypes::DataType;
    let text =
        |t: &DataType| matches!(t, DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8);
    let number = |t: &DataType| t.is_numeric();
    body == declared
        || *body == DataType::Null
        || (text(body) && text(declared))
        || (number(body) && number(declared))
        || (!text(body) && !text(declared) && !number(body) && !number(declared))
}

/// The arguments of a plain call (no `DISTINCT`, named arguments, `FILTER` or `OVER`).
fn call_args(expr: &Expr) -> Option<Vec<Expr>> {
    let Expr::Function(f) = expr else {
        return None;
    };
    if f.over.is_some() || f.filter.is_some() || !f.within_group.is_empty() {
        return None;
    }
    match &f.args {
        FunctionArguments::List(list)
            if list.duplicate_treatment.is_none() && list.clauses.is_empty() =>
        {
            list.args
                .iter()
                .map(|a| match a {
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.clone()),
                    _ => None,
                })
                .collect()
        }
        _ => None,
    }
}

/// `function`'s body with `args` in place of its arguments, cast to their types, and
/// the whole cast to the return type; `nested` inlines calls in the body.
fn inline_call(
    function: &SqlFunction,
    args: &[Expr],
    nested: impl Fn(&mut Expr) -> Option<EddyError>,
    depth: usize,
) -> Result<Expr> {
    if depth > MAX_NESTING {
        return Err(EddyError::new(
            "54001",
            format!("SQL functions nest too deeply (in {})", function.name),
        ));
    }
    let dialect = PostgreSqlDialect {};
    let mut body = Parser::new(&dialect)
        .try_with_sql(&function.body)
        .and_then(|mut p| p.parse_expr())
        .map_err(|e| EddyError::internal(format!("a stored function body: {e}")))?;
    let mut typed_args = Vec::with_capacity(args.len());
    for (arg, ty) in args.iter().zip(&function.arg_types) {
        typed_args.push(Expr::Cast {
            kind: ast::CastKind::Cast,
            expr: Box::new(Expr::Nested(Box::new(arg.clone()))),
            data_type: parse_type(ty)?,
            array: false,
            format: None,
        });
    }
    let mut substitute = Substitute {
        names: &function.arg_names,
        args: &typed_args,
    };
    let _ = body.visit(&mut substitute);
    if let Some(e) = nested(&mut body) {
        return Err(e);
    }
    Ok(Expr::Cast {
        kind: ast::CastKind::Cast,
        expr: Box::new(Expr::Nested(Box::new(body))),
        data_type: parse_type(&function.return_type)?,
        array: false,
        format: None,
    })
}

/// A type as a function stores it (SQL text).
fn parse_type(text: &str) -> Result<ast::DataType> {
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(text)
        .and_then(|mut p| p.parse_data_type())
        .map_err(|e| EddyError::internal(format!("a stored function type: {e}")))
}

/// Puts each argument in place of its name or `$n` in a body.
struct Substitute<'a> {
    names: &'a [Option<String>],
    args: &'a [Expr],
}

impl VisitorMut for Substitute<'_> {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let index = match expr {
            Expr::Identifier(ident) => {
                let name = ident.value.to_lowercase();
                self.names.iter().position(|n| n.as_deref() == Some(&name))
            }
            Expr::Value(v) => match &v.value {
                Value::Placeholder(p) => p
                    .strip_prefix('$')
                    .and_then(|n| n.parse::<usize>().ok())
                    .and_then(|n| n.checked_sub(1)),
                _ => None,
            },
            _ => None,
        };
        if let Some(arg) = index.and_then(|i| self.args.get(i)) {
            *expr = arg.clone();
        }
        ControlFlow::Continue(())
    }
}

/// Replaces every call of a SQL function in a statement by its body.
pub(super) struct Inliner<'a> {
    pub(super) catalog: &'a Catalog,
    pub(super) depth: usize,
}

impl VisitorMut for Inliner<'_> {
    type Break = EddyError;

    // A select item that is a call keeps the function's name, as PostgreSQL names it.
    fn pre_visit_query(&mut self, query: &mut ast::Query) -> ControlFlow<EddyError> {
        name_calls(query.body.as_mut(), self.catalog);
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<EddyError> {
        let Expr::Function(f) = &*expr else {
            return ControlFlow::Continue(());
        };
        let Ok(name) = function_name(&f.name) else {
            return ControlFlow::Continue(());
        };
        let Some(args) = call_args(expr) else {
            return ControlFlow::Continue(());
        };
        let Some(function) = self.catalog.function(&name, args.len()) else {
            return ControlFlow::Continue(());
        };
        let depth = self.depth + 1;
        let nested = |body: &mut Expr| {
            let mut inner = Inliner {
                catalog: self.catalog,
                depth,
            };
            match body.visit(&mut inner) {
                ControlFlow::Break(e) => Some(e),
                ControlFlow::Continue(()) => None,
            }
        };
        match inline_call(&function, &args, nested, depth) {
            Ok(inlined) => {
                *expr = inlined;
                ControlFlow::Continue(())
            }
            Err(e) => ControlFlow::Break(e),
        }
    }
}

/// Aliases each unaliased select item that calls a SQL function with the function's name.
fn name_calls(body: &mut SetExpr, catalog: &Catalog) {
    match body {
        SetExpr::Select(select) => {
            for item in select.projection.iter_mut() {
                let SelectItem::UnnamedExpr(expr) = item else {
                    continue;
                };
                let Expr::Function(f) = &*expr else {
                    continue;
                };
                let Ok(name) = function_name(&f.name) else {
                    continue;
                };
                if call_args(expr).is_some_and(|args| catalog.function(&name, args.len()).is_some())
                {
                    *item = SelectItem::ExprWithAlias {
                        expr: expr.clone(),
                        alias: ast::Ident::new(name),
                    };
                }
            }
        }
        SetExpr::SetOperation { left, right, .. } => {
            name_calls(left, catalog);
            name_calls(right, catalog);
        }
        _ => {}
    }
}

/// Inlines the SQL functions a statement calls (before any other rewrite).
pub(super) fn inline(statement: &mut Statement, catalog: &Catalog) -> Result<()> {
    if !catalog.has_functions() || matches!(statement, Statement::CreateFunction(_)) {
        return Ok(());
    }
    match statement.visit(&mut Inliner { catalog, depth: 0 }) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}
