//! Pipeline predicates — `where`, `expect`, `apply_as_deletes`, `apply_as_truncates` and a
//! replace_where `predicate` — in one SQL dialect, parsed once and rendered for each engine,
//! so a predicate means the same embedded and on Spark.
//!
//! The dialect is DataFusion's (sqlparser's generic dialect): a name in double quotes or
//! backquotes is a column, `'…'` is a string (a quote inside doubled: `'O''Brien'`; a
//! backslash is itself), unquoted names keep their case. [`Predicate::parse`] reads it once;
//! [`Predicate::columns`] names the columns it reads, which each engine checks against the
//! columns the predicate sees; [`Predicate::render`] writes it for an engine through a
//! [`Render`] (the embedded engine's DataFusion text, the Spark engine's Spark SQL), which
//! decides how names, strings and functions are written there, or refuses what would mean
//! something else.

use std::ops::ControlFlow;

use sqlparser::ast::{
    BinaryOperator, Expr, Function, ObjectNamePart, Value, ValueWithSpan, visit_expressions,
    visit_expressions_mut,
};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::Token;

/// A pipeline predicate, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Predicate {
    text: String,
    expr: Expr,
}

/// Why a predicate cannot be read, or cannot be written for an engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PredicateError {
    /// What is wrong.
    pub message: String,
    /// The next step.
    pub hint: String,
}

impl PredicateError {
    fn new(message: impl Into<String>, hint: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            hint: hint.into(),
        }
    }
}

/// How an engine writes a predicate's parts. The default methods write DataFusion's SQL.
pub trait Render {
    /// A column reference.
    fn column(&self, name: &str) -> String {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
    /// A string literal.
    fn string(&self, value: &str) -> String {
        format!("'{}'", value.replace('\'', "''"))
    }
    /// A function's name on this engine, or why it is refused there.
    fn function(&self, name: &str) -> Result<String, PredicateError> {
        Ok(name.to_string())
    }
    /// Whether `op` means the same here, else why not.
    fn operator(&self, op: &BinaryOperator) -> Result<(), PredicateError> {
        let _ = op;
        Ok(())
    }
    /// Whether expression `e` (one node, as parsed) means the same here, else why not.
    fn expression(&self, e: &Expr) -> Result<(), PredicateError> {
        let _ = e;
        Ok(())
    }
}

/// The embedded engine's rendering: DataFusion SQL in the predicate's own dialect.
#[derive(Debug, Clone, Copy, Default)]
pub struct DataFusionSql;

impl Render for DataFusionSql {}

impl Predicate {
    /// Parses `text`, one SQL expression in smelt's predicate dialect.
    pub fn parse(text: &str) -> Result<Self, PredicateError> {
        let invalid = |e: &dyn std::fmt::Display| {
            PredicateError::new(
                format!("`{text}` is not a SQL condition: {e}"),
                "write a condition such as `IsDeleted = 'true'`: names in double quotes, strings in single quotes",
            )
        };
        if text.trim().is_empty() {
            return Err(PredicateError::new(
                "the condition is empty",
                "write a condition such as `IsDeleted = 'true'`",
            ));
        }
        let dialect = GenericDialect {};
        let mut parser = Parser::new(&dialect)
            .try_with_sql(text)
            .map_err(|e| invalid(&e))?;
        let expr = parser.parse_expr().map_err(|e| invalid(&e))?;
        let next = parser.peek_token();
        if next.token != Token::EOF {
            return Err(invalid(&format!(
                "unexpected `{}` after the condition",
                next.token
            )));
        }
        let mut refused = None;
        let _ = visit_expressions(&expr, |e| match unsupported(e) {
            Some(what) => {
                refused = Some(what);
                ControlFlow::Break(())
            }
            None => ControlFlow::Continue(()),
        });
        if let Some(what) = refused {
            return Err(PredicateError::new(
                format!("`{text}`: {what} is not supported in a pipeline predicate"),
                "a predicate reads the row it is given: its columns, strings in single quotes, numbers, TRUE, FALSE, NULL, operators and functions (docs/pipeline.md, \"Predicates\")",
            ));
        }
        Ok(Self {
            text: text.to_string(),
            expr,
        })
    }

    /// The predicate as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The parsed expression.
    pub fn expr(&self) -> &Expr {
        &self.expr
    }

    /// The columns the predicate reads, in the order they first appear, each with whether
    /// it was written in double quotes (a string meant, maybe).
    pub fn columns(&self) -> Vec<(String, bool)> {
        let mut out: Vec<(String, bool)> = Vec::new();
        let _ = visit_expressions(&self.expr, |e| {
            let named = match e {
                Expr::Identifier(id) => Some((id.value.clone(), id.quote_style == Some('"'))),
                Expr::CompoundIdentifier(parts) => Some((
                    parts
                        .iter()
                        .map(|p| p.value.as_str())
                        .collect::<Vec<_>>()
                        .join("."),
                    false,
                )),
                _ => None,
            };
            if let Some(named) = named
                && !out.iter().any(|(n, _)| *n == named.0)
            {
                out.push(named);
            }
            ControlFlow::<()>::Continue(())
        });
        out
    }

    /// Checks that every column the predicate reads is one of `scope` (names are
    /// case-sensitive); `what` names the option in the message, e.g. "`where`".
    pub fn check_scope(&self, scope: &[&str], what: &str) -> Result<(), PredicateError> {
        for (name, double_quoted) in self.columns() {
            if scope.contains(&name.as_str()) {
                continue;
            }
            let near = crate::error::did_you_mean(&name, scope.iter().copied());
            let message = format!(
                "{what}: `{}` reads the column `{name}`, which {what} does not see",
                self.text
            );
            let hint = match (near, double_quoted) {
                (near, true) => format!(
                    "a name in double quotes is a column; write a string in single quotes: '{name}'{}",
                    near.map(|n| format!(" (or did you mean the column `{n}`?)"))
                        .unwrap_or_default()
                ),
                (Some(near), false) => format!(
                    "did you mean `{near}`? {what} sees the columns {}",
                    scope.join(", ")
                ),
                (None, false) => format!("{what} sees the columns {}", scope.join(", ")),
            };
            return Err(PredicateError::new(message, hint));
        }
        Ok(())
    }

    /// The predicate written for an engine by `render`.
    pub fn render(&self, render: &dyn Render) -> Result<String, PredicateError> {
        let mut failed = None;
        let _ = visit_expressions(&self.expr, |e| match render.expression(e) {
            Ok(()) => ControlFlow::Continue(()),
            Err(err) => {
                failed = Some(err);
                ControlFlow::Break(())
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
        let mut expr = self.expr.clone();
        let _ = visit_expressions_mut(&mut expr, |e| match rewrite(e, render) {
            Ok(()) => ControlFlow::Continue(()),
            Err(err) => {
                failed = Some(err);
                ControlFlow::Break(())
            }
        });
        match failed {
            Some(e) => Err(e),
            None => Ok(expr.to_string()),
        }
    }
}

/// What the dialect does not take, by name: what would read another table, or a literal
/// whose text an engine would read otherwise.
fn unsupported(e: &Expr) -> Option<&'static str> {
    let plain = |v: &Value| {
        matches!(
            v,
            Value::Number(..) | Value::SingleQuotedString(_) | Value::Boolean(_) | Value::Null
        )
    };
    match e {
        Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. } => Some("a subquery"),
        Expr::Like {
            escape_char: Some(_),
            ..
        }
        | Expr::ILike {
            escape_char: Some(_),
            ..
        } => Some("`ESCAPE` (a `LIKE` escapes with `\\`)"),
        Expr::SimilarTo { .. } => Some("`SIMILAR TO`"),
        Expr::Value(v) if !plain(&v.value) => {
            Some("a literal other than a number, a string in single quotes, TRUE, FALSE or NULL")
        }
        Expr::TypedString(t) if !matches!(t.value.value, Value::SingleQuotedString(_)) => {
            Some("a typed literal whose text is not a string in single quotes")
        }
        _ => None,
    }
}

/// Text an engine gets as is: sqlparser writes a placeholder verbatim.
fn verbatim(text: String) -> Expr {
    Expr::Value(ValueWithSpan::from(Value::Placeholder(text)))
}

fn rewrite(e: &mut Expr, render: &dyn Render) -> Result<(), PredicateError> {
    match e {
        Expr::Identifier(id) => *e = verbatim(render.column(&id.value)),
        Expr::CompoundIdentifier(parts) => {
            let name: Vec<&str> = parts.iter().map(|p| p.value.as_str()).collect();
            return Err(PredicateError::new(
                format!("`{}` names a column with a qualifier", name.join(".")),
                format!(
                    "write the column's name alone (`{}`); a name with a dot in it goes in double quotes",
                    name.last().copied().unwrap_or_default()
                ),
            ));
        }
        Expr::Value(v) => {
            if let Value::SingleQuotedString(s) = &v.value {
                *e = verbatim(render.string(s));
            }
        }
        Expr::TypedString(t) => {
            if let Value::SingleQuotedString(s) = &t.value.value {
                *e = verbatim(format!("{} {}", t.data_type, render.string(s)));
            }
        }
        Expr::BinaryOp { op, .. } => render.operator(op)?,
        Expr::Function(Function { name, .. }) => {
            let written = name.to_string();
            let renamed = render.function(&written.to_lowercase())?;
            if renamed != written.to_lowercase() {
                name.0 = vec![ObjectNamePart::Identifier(renamed.as_str().into())];
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subqueries_and_other_literals_are_refused_by_name() {
        for (text, what) in [
            ("EXISTS (SELECT 1 FROM other.t)", "a subquery"),
            ("id IN (SELECT id FROM other.t)", "a subquery"),
            ("x = (SELECT max(x) FROM t)", "a subquery"),
            ("name = N'O''Brien'", "a literal other than"),
            ("b = X'00'", "a literal other than"),
            ("name = $$x$$", "a literal other than"),
            ("name = ?", "a literal other than"),
            (r"name LIKE 'a!%' ESCAPE '!'", "`ESCAPE`"),
            ("name SIMILAR TO 'a%'", "`SIMILAR TO`"),
        ] {
            let e = Predicate::parse(text).unwrap_err();
            assert!(e.message.contains(what), "{text}: {}", e.message);
        }
        for text in [
            "x = 1.5 AND y = 'a' AND z IS NULL AND w = TRUE",
            "d >= DATE '2026-01-01'",
        ] {
            assert!(Predicate::parse(text).is_ok(), "{text}");
        }
    }

    #[test]
    fn names_in_double_quotes_or_backquotes_are_columns() {
        let p = Predicate::parse(r#""val" LIKE 'v1%' AND `Id` > 1 AND op = 'D'"#).unwrap();
        assert_eq!(
            p.columns(),
            [
                ("val".to_string(), true),
                ("Id".to_string(), false),
                ("op".to_string(), false)
            ]
        );
        assert_eq!(
            p.render(&DataFusionSql).unwrap(),
            r#""val" LIKE 'v1%' AND "Id" > 1 AND "op" = 'D'"#
        );
    }

    #[test]
    fn a_quote_in_a_string_is_doubled_and_a_backslash_is_itself() {
        let p = Predicate::parse(r"name = 'O''Brien' OR path = 'a\b'").unwrap();
        assert_eq!(
            p.render(&DataFusionSql).unwrap(),
            r#""name" = 'O''Brien' OR "path" = 'a\b'"#
        );
    }

    #[test]
    fn the_scope_is_checked_with_the_near_name() {
        let p = Predicate::parse("isdeleted = 'true'").unwrap();
        let e = p.check_scope(&["IsDeleted", "op"], "`where`").unwrap_err();
        assert_eq!(
            e.message,
            "`where`: `isdeleted = 'true'` reads the column `isdeleted`, which `where` does not see"
        );
        assert!(
            e.hint.starts_with("did you mean `IsDeleted`?"),
            "{}",
            e.hint
        );
        let p = Predicate::parse(r#"op = "D""#).unwrap();
        let e = p.check_scope(&["IsDeleted", "op"], "`where`").unwrap_err();
        assert!(e.hint.contains("single quotes: 'D'"), "{}", e.hint);
        assert!(
            Predicate::parse("op = 'D'")
                .unwrap()
                .check_scope(&["op"], "w")
                .is_ok()
        );
    }

    #[test]
    fn what_is_not_one_condition_is_refused() {
        for text in ["", "  ", "a = ", "a = 1 b", "a = 1; DROP TABLE t"] {
            assert!(Predicate::parse(text).is_err(), "{text}");
        }
        let e = Predicate::parse("t.a = 1")
            .unwrap()
            .render(&DataFusionSql)
            .unwrap_err();
        assert!(e.message.contains("qualifier"), "{}", e.message);
    }
}
