//! `* EXCEPT (a, b)` and `t.* EXCEPT (a)` in a select list (RisingWave's, also
//! BigQuery's): every column but those. sqlparser reads it only in other dialects, and
//! prints it back in that form, so every text of a query — a statement, and the stored
//! query of a view or sink parsed again — goes through [`parse`] or [`plan`]: the
//! `EXCEPT (...)` becomes a marker select item after the star, `*, eddy_star_except(a,
//! b)`, which [`fold`] then turns back into the star's `EXCEPT` list, for DataFusion to
//! expand (an unknown name is an error).

use crate::error::{EddyError, Result};
use datafusion::execution::SessionState;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::sqlparser::ast::{
    ExceptSelectItem, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, Query,
    SelectItem, SetExpr, Statement, VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer, Whitespace};
use std::ops::ControlFlow;

/// The marker function standing for a star's `EXCEPT (...)` list.
pub const STAR_EXCEPT_MARKER: &str = "eddy_star_except";

/// `sql` with every star's `EXCEPT (...)` made a marker item, or `None` if it has none.
pub fn rewrite(sql: &str) -> Option<String> {
    if !sql.to_ascii_uppercase().contains("EXCEPT") {
        return None;
    }
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let mut out: Vec<Token> = Vec::with_capacity(tokens.len());
    let mut i = 0;
    let mut changed = false;
    while i < tokens.len() {
        if let Some((replacement, end)) = at(&tokens, i) {
            out.extend(replacement);
            i = end;
            changed = true;
            continue;
        }
        out.push(tokens[i].clone());
        i += 1;
    }
    changed.then(|| out.iter().map(Token::to_string).collect())
}

/// `EXCEPT ( name [, ...] )` right after a `*`, starting at `start` (the `EXCEPT`): the
/// marker item's tokens and the index after the list.
pub fn at(tokens: &[Token], start: usize) -> Option<(Vec<Token>, usize)> {
    let significant =
        |from: usize| (from..tokens.len()).find(|&j| !matches!(tokens[j], Token::Whitespace(_)));
    match tokens.get(start) {
        Some(Token::Word(w))
            if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("EXCEPT") => {}
        _ => return None,
    }
    let before = tokens[..start]
        .iter()
        .rev()
        .find(|t| !matches!(t, Token::Whitespace(_)));
    if before != Some(&Token::Mul) {
        return None;
    }
    let mut j = significant(start + 1)?;
    if tokens[j] != Token::LParen {
        return None;
    }
    let mut names = Vec::new();
    loop {
        j = significant(j + 1)?;
        match &tokens[j] {
            Token::Word(w) if !w.value.eq_ignore_ascii_case("SELECT") => {
                names.push(tokens[j].clone())
            }
            _ => return None,
        }
        j = significant(j + 1)?;
        match &tokens[j] {
            Token::Comma => continue,
            Token::RParen => break,
            _ => return None,
        }
    }
    let mut out = vec![
        Token::Comma,
        Token::Whitespace(Whitespace::Space),
        Token::make_word(STAR_EXCEPT_MARKER, None),
        Token::LParen,
    ];
    for (k, name) in names.into_iter().enumerate() {
        if k > 0 {
            out.push(Token::Comma);
        }
        out.push(name);
    }
    out.push(Token::RParen);
    Some((out, j + 1))
}

/// Whether a statement's text may hold the marker.
pub fn mentioned(sql: &str) -> bool {
    super::mentions(sql, STAR_EXCEPT_MARKER)
}

/// Parses SQL text (PostgreSQL's dialect) that may hold a star's `EXCEPT (...)`.
pub fn parse(sql: &str) -> Result<Vec<Statement>> {
    let rewritten = rewrite(sql);
    let mut statements =
        Parser::parse_sql(&PostgreSqlDialect {}, rewritten.as_deref().unwrap_or(sql))
            .map_err(|e| EddyError::syntax(e.to_string().replace("sql parser error: ", "")))?;
    if rewritten.is_some() {
        for statement in &mut statements {
            fold(statement)?;
        }
    }
    Ok(statements)
}

/// Plans a query's text as DataFusion's `create_logical_plan` does, reading a star's
/// `EXCEPT (...)` too.
pub async fn plan(state: &SessionState, sql: &str) -> Result<LogicalPlan> {
    let Some(rewritten) = rewrite(sql) else {
        return Ok(state.create_logical_plan(sql).await?);
    };
    let mut statement =
        state.sql_to_statement(&rewritten, &datafusion::config::Dialect::PostgreSQL)?;
    if let datafusion::sql::parser::Statement::Statement(inner) = &mut statement {
        fold(inner)?;
    }
    Ok(state.statement_to_plan(statement).await?)
}

/// Folds every marker of `statement`'s select lists into the star before it.
pub fn fold(statement: &mut Statement) -> Result<()> {
    match statement.visit(&mut Folder) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}

struct Folder;

impl VisitorMut for Folder {
    type Break = EddyError;

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<EddyError> {
        match fold_body(&mut query.body) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => ControlFlow::Break(e),
        }
    }
}

fn fold_body(body: &mut SetExpr) -> Result<()> {
    match body {
        SetExpr::Select(select) => {
            let mut items: Vec<SelectItem> = Vec::with_capacity(select.projection.len());
            for item in std::mem::take(&mut select.projection) {
                let Some(names) = marked(&item) else {
                    items.push(item);
                    continue;
                };
                let options = match items.last_mut() {
                    Some(SelectItem::Wildcard(options))
                    | Some(SelectItem::QualifiedWildcard(_, options)) => options,
                    _ => {
                        return Err(EddyError::syntax("EXCEPT (...) must follow * or t.*"));
                    }
                };
                let mut names = names.into_iter();
                let first_element = names
                    .next()
                    .ok_or_else(|| EddyError::syntax("EXCEPT after * needs at least one column"))?;
                options.opt_except = Some(ExceptSelectItem {
                    first_element,
                    additional_elements: names.collect(),
                });
            }
            select.projection = items;
            Ok(())
        }
        SetExpr::SetOperation { left, right, .. } => {
            fold_body(left)?;
            fold_body(right)
        }
        _ => Ok(()),
    }
}

/// The column names of a marker select item.
fn marked(item: &SelectItem) -> Option<Vec<Ident>> {
    let SelectItem::UnnamedExpr(Expr::Function(call)) = item else {
        return None;
    };
    if !call
        .name
        .to_string()
        .eq_ignore_ascii_case(STAR_EXCEPT_MARKER)
    {
        return None;
    }
    let FunctionArguments::List(list) = &call.args else {
        return None;
    };
    list.args
        .iter()
        .map(|arg| match arg {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Identifier(name))) => {
                Some(name.clone())
            }
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn star_lists_become_markers_and_fold_back() {
        let sql = "SELECT t.* EXCEPT (a, \"B\"), u.* except (c) FROM t JOIN u ON t.a = u.a";
        let rewritten = rewrite(sql).unwrap();
        assert!(
            rewritten.contains("t.* , eddy_star_except(a,\"B\")"),
            "{rewritten}"
        );
        let statements = parse(sql).unwrap();
        assert_eq!(
            statements[0].to_string(),
            "SELECT t.* EXCEPT (a, \"B\"), u.* EXCEPT (c) FROM t JOIN u ON t.a = u.a"
        );
        // What is printed parses again to the same statement.
        let again = parse(&statements[0].to_string()).unwrap();
        assert_eq!(again, statements);
    }

    #[test]
    fn set_operation_except_is_left_alone() {
        assert_eq!(rewrite("SELECT * FROM t EXCEPT (SELECT * FROM u)"), None);
        assert_eq!(rewrite("SELECT a FROM t EXCEPT SELECT b FROM u"), None);
        assert_eq!(rewrite("SELECT count(*) EXCEPT (SELECT 1)"), None);
    }
}
