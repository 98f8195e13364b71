//! Pipeline predicates written as Spark SQL: parsed once in smelt's predicate dialect
//! ([`smelt_spec::Predicate`]), then every column backquoted, every string a Spark literal
//! (Spark reads `\` as an escape and has no `''`), and only the functions that compute the
//! same on both engines ([`smelt_rules::predicate::SHARED_FUNCTIONS`]), under Spark's names.
//! So `"val" LIKE 'v1%'` reads the column `val` here as it does embedded.

use smelt_engine::{EngineError, Result};
use smelt_rules::predicate::{SPARK_DIVISION, spark_function};
use smelt_spec::predicate::{Predicate, PredicateError, Render};
use smelt_spec::sqlparser::ast::{BinaryOperator, CeilFloorKind, DateTimeField, Expr};
use smelt_spec::{AppendFlow, ApplyFlow};

use crate::sql::{ident, string_literal};

/// The Spark engine's rendering of a predicate.
#[derive(Debug, Clone, Copy, Default)]
pub struct SparkSql;

impl Render for SparkSql {
    fn column(&self, name: &str) -> String {
        ident(name)
    }

    fn string(&self, value: &str) -> String {
        string_literal(value)
    }

    fn function(&self, name: &str) -> std::result::Result<String, PredicateError> {
        spark_function(name)
            .map(str::to_string)
            .map_err(|(message, hint)| PredicateError { message, hint })
    }

    fn operator(&self, op: &BinaryOperator) -> std::result::Result<(), PredicateError> {
        match op {
            BinaryOperator::Divide => Err(PredicateError {
                message: SPARK_DIVISION.0.to_string(),
                hint: SPARK_DIVISION.1.to_string(),
            }),
            _ => Ok(()),
        }
    }

    fn expression(&self, e: &Expr) -> std::result::Result<(), PredicateError> {
        let plain = |field: &CeilFloorKind| {
            matches!(
                field,
                CeilFloorKind::DateTimeField(DateTimeField::NoDateTime)
            )
        };
        match e {
            Expr::Identifier(_)
            | Expr::CompoundIdentifier(_)
            | Expr::Value(_)
            | Expr::TypedString(_)
            | Expr::BinaryOp { .. }
            | Expr::UnaryOp { .. }
            | Expr::Nested(_)
            | Expr::IsNull(_)
            | Expr::IsNotNull(_)
            | Expr::IsTrue(_)
            | Expr::IsNotTrue(_)
            | Expr::IsFalse(_)
            | Expr::IsNotFalse(_)
            | Expr::IsDistinctFrom(..)
            | Expr::IsNotDistinctFrom(..)
            | Expr::InList { .. }
            | Expr::Between { .. }
            | Expr::Like { .. }
            | Expr::ILike { .. }
            | Expr::Function(_)
            | Expr::Cast { .. }
            | Expr::Case { .. } => Ok(()),
            Expr::Ceil { field, .. } | Expr::Floor { field, .. } if plain(field) => Ok(()),
            Expr::Trim {
                trim_where: None,
                trim_what: None,
                trim_characters: None,
                ..
            } => Ok(()),
            other => Err(PredicateError {
                message: format!(
                    "`{other}` does not run on Spark as it runs embedded: it is not one of the forms both engines read alike"
                ),
                hint: "write it with comparisons, `IN`, `BETWEEN`, `LIKE`, `IS [NOT] NULL`, `CASE`, `CAST` and the functions docs/pipeline.md lists for predicates, or run the flow with `--engine embedded`".into(),
            }),
        }
    }
}

/// `text`, the predicate of option `what` (e.g. "`where`"), as Spark SQL; `scope`, when
/// given, the columns it may read.
pub fn spark_sql(text: &str, what: &str, scope: Option<&[&str]>) -> Result<String> {
    let user = |e: PredicateError| EngineError::user(format!("{what}: {}", e.message), e.hint);
    let predicate = Predicate::parse(text).map_err(user)?;
    if let Some(scope) = scope {
        predicate
            .check_scope(scope, what)
            .map_err(|e| EngineError::user(e.message, e.hint))?;
    }
    predicate
        .render(&SparkSql)
        .map_err(|e| EngineError::user(format!("{what}: `{text}`: {}", e.message), e.hint))
}

/// `spec` with its predicates (`apply_as_deletes`, `where`, the expectations) as Spark SQL:
/// what the statements of its run paste.
pub(crate) fn apply_flow(spec: &ApplyFlow) -> Result<ApplyFlow> {
    let mut out = spec.clone();
    out.apply_as_deletes = spec
        .apply_as_deletes
        .as_deref()
        .map(|p| spark_sql(p, "`apply_as_deletes`", None))
        .transpose()?;
    out.filter = spec
        .filter
        .as_deref()
        .map(|p| spark_sql(p, "`where`", None))
        .transpose()?;
    out.expectations = spec
        .expectations
        .iter()
        .map(|(name, p)| {
            Ok((
                name.clone(),
                spark_sql(p, &format!("expectation `{name}`"), None)?,
            ))
        })
        .collect::<Result<_>>()?;
    Ok(out)
}

/// Checks every predicate of `spec` (as written) against the columns it sees
/// ([`smelt_rules::predicate::scope`]), silver's columns being `silver` and bronze's `bronze`:
/// what a run checks once it knows them, as `validate` does (which cannot when a flow of the
/// pipeline makes bronze first).
pub(crate) fn check_apply_scopes(spec: &ApplyFlow, silver: &[&str], bronze: &[&str]) -> Result<()> {
    for (what, text, sees) in smelt_rules::predicate::apply_predicates(spec) {
        let scope = smelt_rules::predicate::scope(spec, sees, silver, bronze);
        let scope: Vec<&str> = scope.iter().map(String::as_str).collect();
        spark_sql(text, &what, Some(&scope))?;
    }
    Ok(())
}

/// `spec` with its `where` as Spark SQL, checked against the source's columns `source`.
pub(crate) fn append_flow(spec: &AppendFlow, source: &[&str]) -> Result<AppendFlow> {
    let mut out = spec.clone();
    out.filter = spec
        .filter
        .as_deref()
        .map(|p| spark_sql(p, "`where`", Some(source)))
        .transpose()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spark(text: &str) -> String {
        spark_sql(text, "`where`", None).unwrap()
    }

    #[test]
    fn forms_that_compute_otherwise_on_spark_are_refused_by_name() {
        for text in [
            "EXTRACT(DOW FROM d) = 0",
            "SUBSTRING(name FROM 2) = 'x'",
            "POSITION('a' IN name) = 1",
            "d AT TIME ZONE 'UTC' > DATE '2026-01-01'",
            "TRIM(LEADING 'x' FROM name) = 'a'",
        ] {
            let e = spark_sql(text, "`where`", None).unwrap_err().to_string();
            assert!(e.contains("does not run on Spark"), "{text}: {e}");
        }
        assert_eq!(spark("TRIM(name) = 'a'"), "TRIM(`name`) = 'a'");
        assert_eq!(spark("CEIL(x) > 1"), "CEIL(`x`) > 1");
    }

    #[test]
    fn names_are_backquoted_and_strings_spark_literals() {
        assert_eq!(spark(r#""val" LIKE 'v1%'"#), "`val` LIKE 'v1%'");
        assert_eq!(spark("`Id` = 'O''Brien'"), r"`Id` = 'O\'Brien'");
        assert_eq!(
            spark(r"path = 'a\b' AND x = '${y}'"),
            r"`path` = 'a\\b' AND `x` = '\u0024{y}'"
        );
        assert_eq!(
            spark("starts_with(name, 'v') AND d >= DATE '2026-01-01'"),
            "startswith(`name`, 'v') AND `d` >= DATE '2026-01-01'"
        );
        assert_eq!(
            spark("x IN ('a', 'b') AND y IS NOT NULL AND CAST(z AS INT) BETWEEN 1 AND 2"),
            "`x` IN ('a', 'b') AND `y` IS NOT NULL AND CAST(`z` AS INT) BETWEEN 1 AND 2"
        );
    }

    #[test]
    fn what_means_otherwise_on_spark_is_refused_by_name() {
        let e = spark_sql("log(x) > 1", "`where`", None).unwrap_err();
        assert!(e.to_string().contains("`log`"), "{e}");
        let e = spark_sql("a / b > 1", "`where`", None).unwrap_err();
        assert!(e.to_string().contains("`/`"), "{e}");
        let e = spark_sql("op = \"D\"", "`where`", Some(&["op"])).unwrap_err();
        assert!(e.to_string().contains("`D`"), "{e}");
    }
}
