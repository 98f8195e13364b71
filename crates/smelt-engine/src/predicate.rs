//! SQL predicates of a flow (`apply_as_deletes`, `where`, expectations, a replace_where
//! `predicate`), parsed once in smelt's predicate dialect ([`smelt_spec::Predicate`]),
//! checked against the columns they see (the scopes of [`smelt_rules::predicate`]),
//! compiled with DataFusion and evaluated on Arrow batches.

use std::sync::Arc;

use arrow::array::{Array, AsArray, BooleanArray, RecordBatch};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::DFSchema;
use datafusion::optimizer::simplify_expressions::{ExprSimplifier, SimplifyContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::prelude::{SessionConfig, SessionContext};

use crate::{EngineError, Result};

/// A compiled predicate over rows of one schema.
#[derive(Debug, Clone)]
pub struct Predicate {
    text: String,
    expr: Arc<dyn PhysicalExpr>,
}

impl Predicate {
    /// Compiles `sql` (a SQL boolean expression; column names are case-sensitive) over
    /// `schema`. `what` names the option in errors, e.g. "flow `p`: `apply_as_deletes`".
    pub fn compile(sql: &str, schema: &SchemaRef, what: &str) -> Result<Self> {
        let scope: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        Self::compile_in(sql, schema, &scope, what)
    }

    /// [`Predicate::compile`] for a predicate that may read only the columns of `scope`
    /// (all of them columns of `schema`).
    pub fn compile_in(sql: &str, schema: &SchemaRef, scope: &[&str], what: &str) -> Result<Self> {
        let parsed = smelt_spec::Predicate::parse(sql)
            .map_err(|e| EngineError::user(format!("{what}: {}", e.message), e.hint))?;
        parsed
            .check_scope(scope, what)
            .map_err(|e| EngineError::user(e.message, e.hint))?;
        let rendered = parsed
            .render(&smelt_spec::predicate::DataFusionSql)
            .map_err(|e| EngineError::user(format!("{what}: `{sql}`: {}", e.message), e.hint))?;
        let config = SessionConfig::new()
            .set_bool("datafusion.sql_parser.enable_ident_normalization", false);
        let ctx = SessionContext::new_with_config(config);
        let columns: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        let invalid = |e: datafusion::error::DataFusionError| {
            EngineError::user(
                format!(
                    "{what}: `{sql}` is not a valid predicate: {}",
                    first_line(&e.to_string())
                ),
                format!(
                    "write a SQL condition over the columns {} (quote names with capitals or spaces in double quotes)",
                    columns.join(", ")
                ),
            )
        };
        let df_schema = DFSchema::try_from(schema.as_ref().clone()).map_err(invalid)?;
        let expr = ctx.parse_sql_expr(&rendered, &df_schema).map_err(invalid)?;
        // Simplified first: `arrow_cast` (typed literals) and constants are folded here.
        let simplify = SimplifyContext::builder()
            .with_schema(Arc::new(df_schema.clone()))
            .build();
        let expr = ExprSimplifier::new(simplify)
            .simplify(expr)
            .map_err(invalid)?;
        let expr = ctx
            .create_physical_expr(expr, &df_schema)
            .map_err(invalid)?;
        let ty = expr.data_type(schema.as_ref()).map_err(invalid)?;
        if ty != DataType::Boolean {
            return Err(EngineError::user(
                format!("{what}: `{sql}` is {ty}, not a condition"),
                "write a comparison such as `IsDeleted = 'true'`",
            ));
        }
        Ok(Self {
            text: sql.to_string(),
            expr,
        })
    }

    /// The predicate as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// True where a row satisfies the predicate; NULL counts as false.
    pub fn evaluate(&self, batch: &RecordBatch) -> Result<BooleanArray> {
        let value = self
            .expr
            .evaluate(batch)
            .and_then(|v| v.into_array(batch.num_rows()))
            .map_err(|e| {
                EngineError::user(
                    format!("evaluating `{}`: {}", self.text, first_line(&e.to_string())),
                    "check the predicate against the values of the rows it reads",
                )
            })?;
        let b = value.as_boolean();
        Ok(if b.null_count() == 0 {
            b.clone()
        } else {
            BooleanArray::from_iter(b.iter().map(|v| Some(v.unwrap_or(false))))
        })
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

#[cfg(test)]
mod tests {
    use arrow::array::StringArray;
    use arrow::datatypes::{Field, Schema};

    use super::*;

    fn batch() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("IsDeleted", DataType::Utf8, true),
            Field::new("op", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec![Some("true"), Some("false"), None])),
                Arc::new(StringArray::from(vec![Some("D"), Some("U"), Some("D")])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn case_sensitive_names_and_null_is_false() {
        let b = batch();
        let p = Predicate::compile("IsDeleted = 'true'", &b.schema(), "t").unwrap();
        assert_eq!(
            p.evaluate(&b).unwrap(),
            BooleanArray::from(vec![true, false, false])
        );
        let p = Predicate::compile("op = 'D' AND IsDeleted IS NULL", &b.schema(), "t").unwrap();
        assert_eq!(
            p.evaluate(&b).unwrap(),
            BooleanArray::from(vec![false, false, true])
        );
    }

    #[test]
    fn errors_name_the_option_and_the_columns() {
        let b = batch();
        let e = Predicate::compile(
            "isdeleted = 'true'",
            &b.schema(),
            "flow `p`: `apply_as_deletes`",
        )
        .unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with(
                "flow `p`: `apply_as_deletes`: `isdeleted = 'true'` reads the column `isdeleted`"
            ),
            "{text}"
        );
        assert!(
            e.hint().unwrap().contains("did you mean `IsDeleted`?"),
            "{:?}",
            e.hint()
        );
        let e = Predicate::compile("op", &b.schema(), "w").unwrap_err();
        assert!(e.to_string().contains("not a condition"), "{e}");
    }
}
