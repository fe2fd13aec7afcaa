//! Rewrites of Flink and RisingWave syntax that sqlparser cannot parse, done on the
//! token stream before parsing: strings, comments and quoted names stay as they were,
//! and the result is ordinary SQL that the later AST rewrites and DataFusion plan.
//!
//! - [`windows`]: Flink's `TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), ...))` window calls.
//! - [`temporal`]: `t FOR SYSTEM_TIME AS OF PROCTIME()`, a temporal (lookup) join's table.
//! - [`corresponding`]: `UNION CORRESPONDING [BY (...)]` (and `INTERSECT`, `EXCEPT`).
//! - [`struct_star`]: `(v).*`, every field of a struct.
//! - [`create_table_as_names`]: `CREATE TABLE t (a, b) AS query`, names without types.
//! - [`generated_columns`]: `v2 int AS (v1 + 1)`, RisingWave's generated column.
//! - `* EXCEPT (a, b)`, every column but those: [`crate::sql::star_except`].
//! - [`trim_spaces`]: `trim(BOTH FROM s)` and the like, without the characters to trim.
//! - [`changelog`]: `WITH sub AS changelog FROM t`, the changes of `t` as rows.
//! - [`trailing_comma`]: `CREATE TABLE t (a int, b int,)`, a comma after the last column.

mod changelog;
mod corresponding;
mod create_table_as_names;
mod generated_columns;
mod struct_star;
mod temporal;
mod trailing_comma;
mod trim_spaces;
mod windows;

pub use corresponding::CORRESPONDING_MARKER;
pub use struct_star::STRUCT_STAR_MARKER;

use crate::error::Result;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

/// A rewrite tried at each word and opening parenthesis: its replacement tokens and the index after what it
/// replaced, or `None` when the tokens there are not its syntax.
type Rewrite = fn(&[Token], usize) -> Result<Option<(Vec<Token>, usize)>>;

/// The statement with every such construct rewritten, or `None` when it has none (or
/// does not tokenize: the parser then reports the error).
pub fn rewrite(sql: &str) -> Result<Option<String>> {
    let upper = sql.to_ascii_uppercase();
    let mut rewrites: Vec<Rewrite> = Vec::new();
    if upper.contains("DESCRIPTOR") {
        rewrites.push(windows::window_call);
    }
    if upper.contains("SYSTEM_TIME") {
        rewrites.push(temporal::for_system_time);
    }
    if upper.contains("CORRESPONDING") {
        rewrites.push(corresponding::corresponding);
    }
    if upper.contains(").*") {
        rewrites.push(struct_star::struct_star);
    }
    if upper.contains("EXCEPT") {
        rewrites.push(star_except);
    }
    if upper.contains("TRIM") {
        rewrites.push(trim_spaces::trim_without_characters);
    }
    if upper.contains("CHANGELOG") {
        rewrites.push(changelog::changelog_cte);
    }
    if upper.contains("CREATE") && upper.contains(",") {
        rewrites.push(trailing_comma::column_list_trailing_comma);
    }
    if upper.contains("CREATE") && upper.contains("TABLE") && upper.contains("AS") {
        rewrites.push(create_table_as_names::names_only_column_list);
        rewrites.push(generated_columns::generated_shorthand);
    }
    apply(sql, &rewrites)
}

/// `* EXCEPT (...)` after a star (see [`crate::sql::star_except`]).
fn star_except(tokens: &[Token], start: usize) -> Result<Option<(Vec<Token>, usize)>> {
    Ok(crate::sql::star_except::at(tokens, start))
}

/// `sql` with `rewrites` applied, or `None` when none applied.
fn apply(sql: &str, rewrites: &[Rewrite]) -> Result<Option<String>> {
    if rewrites.is_empty() {
        return Ok(None);
    }
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize() else {
        return Ok(None);
    };
    let mut out: Vec<Token> = Vec::with_capacity(tokens.len());
    let mut i = 0;
    let mut changed = false;
    'tokens: while i < tokens.len() {
        if matches!(tokens[i], Token::Word(_) | Token::LParen) {
            for rewrite in rewrites {
                if let Some((replacement, end)) = rewrite(&tokens, i)? {
                    out.extend(replacement);
                    i = end;
                    changed = true;
                    continue 'tokens;
                }
            }
        }
        out.push(tokens[i].clone());
        i += 1;
    }
    Ok(changed.then(|| out.iter().map(Token::to_string).collect()))
}

pub use crate::sql::mentions;

/// Reads tokens past whitespace.
struct Cursor<'a> {
    tokens: &'a [Token],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn new(tokens: &'a [Token], at: usize) -> Self {
        Self { tokens, at }
    }

    /// The next significant token, consumed.
    fn next(&mut self) -> Option<&'a Token> {
        while let Some(t) = self.tokens.get(self.at) {
            self.at += 1;
            if !matches!(t, Token::Whitespace(_)) {
                return Some(t);
            }
        }
        None
    }

    fn peek(&self) -> Option<&'a Token> {
        self.tokens[self.at..]
            .iter()
            .find(|t| !matches!(t, Token::Whitespace(_)))
    }

    /// Consumes the next token if it is the unquoted word `expected`.
    fn word(&mut self, expected: &str) -> bool {
        let found = is_word(self.peek(), expected);
        if found {
            self.next();
        }
        found
    }

    fn token(&mut self, expected: &Token) -> bool {
        self.next() == Some(expected)
    }

    /// Tokens up to (not including) a `,` or `)` outside parentheses, or a word `stop`.
    fn until_separator(&mut self, stop: Option<&str>) -> Vec<Token> {
        let mut depth = 0usize;
        let mut taken = Vec::new();
        while let Some(t) = self.tokens.get(self.at) {
            match t {
                Token::Comma | Token::RParen if depth == 0 => break,
                Token::Word(_) if depth == 0 && stop.is_some_and(|s| is_word(Some(t), s)) => {
                    break;
                }
                Token::LParen => depth += 1,
                Token::RParen => depth -= 1,
                _ => {}
            }
            taken.push(t.clone());
            self.at += 1;
        }
        taken
    }
}

/// Whether a token is the unquoted word `expected` (any case).
fn is_word(token: Option<&Token>, expected: &str) -> bool {
    matches!(token, Some(Token::Word(w)) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(expected))
}

/// A part without its leading and trailing whitespace.
fn trim(mut part: Vec<Token>) -> Vec<Token> {
    while matches!(part.last(), Some(Token::Whitespace(_))) {
        part.pop();
    }
    let first = part
        .iter()
        .position(|t| !matches!(t, Token::Whitespace(_)))
        .unwrap_or(part.len());
    part.split_off(first)
}
