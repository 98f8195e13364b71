//! BigQuery script variables: `DECLARE name [type] [DEFAULT expr]` and `SET name = expr`.
//! Each value is computed once, when its statement runs (with DataFusion, cast to the
//! declared type), and later statements of the script read it where they name the variable
//! (a name in any case). A statement naming a variable that is also a column of a table it
//! reads is refused: which one it means would be a guess.

use std::collections::HashMap;
use std::ops::ControlFlow;

use deltalake::datafusion::common::ScalarValue;
use deltalake::datafusion::logical_expr::{Expr as DfExpr, lit};
use deltalake::datafusion::prelude::SessionContext;
use deltalake::datafusion::sql::sqlparser::ast::{
    CastKind, DataType, DeclareAssignment, Expr, Set, Statement, visit_expressions,
    visit_expressions_mut, visit_relations,
};
use deltalake::datafusion::sql::unparser::expr_to_sql;

use super::SqlOutput;
use crate::error::{Error, Result};

/// The variables a script declared, by lower-case name.
#[derive(Default)]
pub(super) struct Variables {
    values: HashMap<String, (Option<DataType>, Expr)>,
}

impl Variables {
    /// Runs `statement` when it declares or sets variables (`Some`), else leaves it.
    pub(super) async fn run(
        &mut self,
        ctx: &SessionContext,
        statement: &Statement,
    ) -> Result<Option<SqlOutput>> {
        match statement {
            Statement::Declare { stmts } => {
                let mut names = Vec::new();
                for d in stmts {
                    let value = match &d.assignment {
                        None => None,
                        Some(DeclareAssignment::Default(e) | DeclareAssignment::Expr(e)) => {
                            Some(e.as_ref().clone())
                        }
                        Some(other) => {
                            return Err(Error::user(
                                format!("DECLARE … {other} is not supported by smelt sql"),
                                "write DECLARE name TYPE [DEFAULT expression]",
                            ));
                        }
                    };
                    for name in &d.names {
                        let v = self.value(ctx, d.data_type.as_ref(), value.clone()).await?;
                        self.values
                            .insert(name.value.to_lowercase(), (d.data_type.clone(), v));
                        names.push(name.value.clone());
                    }
                }
                Ok(Some(SqlOutput::Message(format!(
                    "declared {}",
                    names.join(", ")
                ))))
            }
            Statement::Set(Set::SingleAssignment {
                variable, values, ..
            }) => {
                let name = variable.to_string();
                let Some((data_type, _)) = self.values.get(&name.to_lowercase()).cloned() else {
                    return Err(Error::user(
                        format!("SET `{name}`: no such variable"),
                        format!("declare it first: DECLARE {name} TYPE [DEFAULT …]"),
                    ));
                };
                let [value] = values.as_slice() else {
                    return Err(Error::user(
                        format!("SET `{name}` takes one value"),
                        "write SET name = expression",
                    ));
                };
                let v = self
                    .value(ctx, data_type.as_ref(), Some(value.clone()))
                    .await?;
                self.values.insert(name.to_lowercase(), (data_type, v));
                Ok(Some(SqlOutput::Message(format!("set {name}"))))
            }
            _ => Ok(None),
        }
    }

    /// A refusal when `statement` names a variable that is also a column of a table it
    /// reads: which one it means would be a guess.
    pub(super) async fn shadowed(&self, lake: &crate::Lake, statement: &Statement) -> Result<()> {
        if self.values.is_empty() {
            return Ok(());
        }
        let mut used = std::collections::HashSet::new();
        let _ = visit_expressions(statement, |e| {
            if let Expr::Identifier(i) = e
                && self.values.contains_key(&i.value.to_lowercase())
            {
                used.insert(i.value.to_lowercase());
            }
            ControlFlow::<()>::Continue(())
        });
        if used.is_empty() {
            return Ok(());
        }
        let mut tables = Vec::new();
        let _ = visit_relations(statement, |name| {
            tables.push(name.clone());
            ControlFlow::<()>::Continue(())
        });
        for name in tables {
            let Some(table) = smelt_spec::TableName::from_object_name(&name) else {
                continue;
            };
            let Some(delta) = lake.open(&table).await? else {
                continue;
            };
            let Ok(state) = delta.snapshot() else {
                continue;
            };
            if let Some(column) = state
                .snapshot()
                .schema()
                .fields()
                .find(|f| used.contains(&f.name().to_lowercase()))
            {
                return Err(Error::user(
                    format!(
                        "`{}` is both a variable of this script and a column of `{table}`",
                        column.name()
                    ),
                    "rename the variable, so the statement says which one it means",
                ));
            }
        }
        Ok(())
    }

    /// Puts the variables' values where `statement` names them.
    pub(super) fn substitute(&self, statement: &mut Statement) {
        if self.values.is_empty() {
            return;
        }
        let _ = visit_expressions_mut(statement, |e| {
            if let Expr::Identifier(i) = e
                && let Some((_, v)) = self.values.get(&i.value.to_lowercase())
            {
                *e = v.clone();
            }
            ControlFlow::<()>::Continue(())
        });
    }

    /// The value of `value` (NULL when absent) cast to `data_type`, as a SQL literal.
    async fn value(
        &self,
        ctx: &SessionContext,
        data_type: Option<&DataType>,
        value: Option<Expr>,
    ) -> Result<Expr> {
        let mut e = value.unwrap_or(Expr::Value(
            deltalake::datafusion::sql::sqlparser::ast::Value::Null.into(),
        ));
        if let Some(t) = data_type {
            e = Expr::Cast {
                kind: CastKind::Cast,
                expr: Box::new(e),
                data_type: t.clone(),
                array: false,
                format: None,
            };
        }
        let mut statement = smelt_spec::ddl::parse_script(&format!("SELECT {e}"))
            .ok()
            .and_then(|mut s| (s.len() == 1).then(|| s.remove(0)))
            .ok_or_else(|| Error::internal(format!("re-parsing `{e}`")))?;
        self.substitute(&mut statement);
        super::dialect::rewrite(&mut statement);
        super::safe_cast::rewrite(&mut statement, false);
        let failed = |err: String| {
            Error::user(
                format!("cannot compute `{e}`: {err}"),
                "a variable's value is a constant expression in DataFusion's functions; BigQuery's FORMAT, FORMAT_TIMESTAMP and DATETIME(date, time) are not among them (docs/sql.md)",
            )
        };
        let batches = ctx
            .sql(&statement.to_string())
            .await
            .map_err(|err| failed(err.to_string()))?
            .collect()
            .await
            .map_err(|err| failed(err.to_string()))?;
        let column = batches
            .iter()
            .find(|b| b.num_rows() > 0)
            .map(|b| b.column(0).clone())
            .ok_or_else(|| failed("no value".into()))?;
        let scalar =
            ScalarValue::try_from_array(&column, 0).map_err(|err| failed(err.to_string()))?;
        literal(scalar).map_err(failed)
    }
}

/// A value as SQL.
fn literal(value: ScalarValue) -> std::result::Result<Expr, String> {
    let expr: DfExpr = lit(value);
    expr_to_sql(&expr).map_err(|e| e.to_string())
}
