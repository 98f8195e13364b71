//! Casts in queries by the dialects' rules (`smelt_core::dialect`, the rules apply flows
//! use, docs/pipeline.md "Cast dialects"): `SAFE_CAST` by BigQuery's and `TRY_CAST` by
//! Spark's, a failure being NULL; a plain `CAST` by BigQuery's (Spark's when only the
//! Databricks dialect parsed the script, and for `x::t`), a failure failing the query with
//! the value. Each is read as a call of one of the functions below, for casts to BOOL, a
//! number, DATE or a timestamp; other targets are DataFusion's.

use std::ops::ControlFlow;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef, TimeUnit};
use deltalake::datafusion::common::{Result as DfResult, ScalarValue, exec_err, internal_err};
use deltalake::datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use deltalake::datafusion::prelude::SessionContext;
use deltalake::datafusion::sql::sqlparser::ast::{
    CastKind, DataType as SqlType, ExactNumberInfo, Expr, Function, FunctionArg, FunctionArgExpr,
    FunctionArgumentList, FunctionArguments, Ident, ObjectName, Query, SelectItem, SetExpr,
    Statement, TimezoneInfo, Value, VisitMut, VisitorMut, visit_expressions_mut,
};
use smelt_core::dialect::CastDialect;

/// The functions' names.
const SAFE_CAST: &str = "__smelt_safe_cast";
const TRY_CAST: &str = "__smelt_try_cast";
const CAST_BIGQUERY: &str = "__smelt_cast_bigquery";
const CAST_SPARK: &str = "__smelt_cast_spark";

/// Registers the functions in `ctx` (every lake session has them: `Lake::session`).
pub(crate) fn register(ctx: &SessionContext) {
    for (name, dialect, strict) in [
        (SAFE_CAST, CastDialect::BigQuery, false),
        (TRY_CAST, CastDialect::Spark, false),
        (CAST_BIGQUERY, CastDialect::BigQuery, true),
        (CAST_SPARK, CastDialect::Spark, true),
    ] {
        ctx.register_udf(ScalarUDF::from(DialectCast {
            name,
            dialect,
            strict,
            signature: Signature::any(2, Volatility::Immutable),
        }));
    }
}

/// Reads the casts of `statement` to a type the dialects cast as the functions above
/// (`spark`: a plain `CAST` follows Spark's rules).
pub(super) fn rewrite(statement: &mut Statement, spark: bool) {
    // A cast leaves its column's name as it was (as DataFusion names a cast), not the
    // function's call.
    let _ = statement.visit(&mut NameCasts { spark });
    let _ = visit_expressions_mut(statement, |e| {
        if let Expr::Cast {
            kind,
            expr,
            data_type,
            format: None,
            ..
        } = e
        {
            let (name, spark_types) = match kind {
                CastKind::SafeCast => (SAFE_CAST, false),
                CastKind::TryCast => (TRY_CAST, true),
                CastKind::DoubleColon => (CAST_SPARK, true),
                CastKind::Cast if spark => (CAST_SPARK, true),
                CastKind::Cast => (CAST_BIGQUERY, false),
            };
            let Some(target) = target_tag(data_type, spark_types) else {
                return ControlFlow::<()>::Continue(());
            };
            let arg = |e: Expr| FunctionArg::Unnamed(FunctionArgExpr::Expr(e));
            *e = Expr::Function(Function {
                name: ObjectName::from(vec![Ident::new(name)]),
                uses_odbc_syntax: false,
                parameters: FunctionArguments::None,
                args: FunctionArguments::List(FunctionArgumentList {
                    duplicate_treatment: None,
                    args: vec![
                        arg(expr.as_ref().clone()),
                        arg(Expr::Value(Value::SingleQuotedString(target).into())),
                    ],
                    clauses: Vec::new(),
                }),
                filter: None,
                null_treatment: None,
                over: None,
                within_group: Vec::new(),
            });
        }
        ControlFlow::<()>::Continue(())
    });
}

/// Names each unaliased cast the rewrite turns into a call in a SELECT list after what it
/// casts (`CAST(x AS INT64)` is the column `x`).
struct NameCasts {
    spark: bool,
}

impl VisitorMut for NameCasts {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        if let SetExpr::Select(select) = query.body.as_mut() {
            // Names the list has already; a cast whose column name is taken keeps its text.
            let mut taken: std::collections::HashSet<String> = select
                .projection
                .iter()
                .filter_map(|item| match item {
                    SelectItem::ExprWithAlias { alias, .. } => Some(alias.value.clone()),
                    SelectItem::UnnamedExpr(Expr::Identifier(i)) => Some(i.value.clone()),
                    SelectItem::UnnamedExpr(Expr::CompoundIdentifier(p)) => {
                        p.last().map(|p| p.value.clone())
                    }
                    _ => None,
                })
                .collect();
            for item in &mut select.projection {
                let SelectItem::UnnamedExpr(Expr::Cast {
                    kind,
                    expr,
                    data_type,
                    format: None,
                    ..
                }) = item
                else {
                    continue;
                };
                let spark_types = match kind {
                    CastKind::SafeCast => false,
                    CastKind::Cast => self.spark,
                    _ => true,
                };
                if target_tag(data_type, spark_types).is_none() {
                    continue;
                }
                let name = match expr.as_ref() {
                    Expr::Identifier(i) => i.value.clone(),
                    Expr::CompoundIdentifier(parts) => {
                        parts.last().map(|p| p.value.clone()).unwrap_or_default()
                    }
                    other => other.to_string(),
                };
                let SelectItem::UnnamedExpr(cast) = item else {
                    continue;
                };
                let expr = cast.clone();
                let name = if taken.insert(name.clone()) {
                    name
                } else {
                    expr.to_string()
                };
                // Quoted: the statement may be printed and parsed again (variables).
                *item = SelectItem::ExprWithAlias {
                    expr,
                    alias: Ident::with_quote('`', name.replace('`', "")),
                };
            }
        }
        ControlFlow::Continue(())
    }
}

/// The target type of a cast the dialects handle, as the functions' second argument
/// (`spark`: a bare DECIMAL is Spark's DECIMAL(10, 0), else BigQuery's NUMERIC(38, 9)).
fn target_tag(t: &SqlType, spark: bool) -> Option<String> {
    Some(match t {
        SqlType::Bool | SqlType::Boolean => "bool".into(),
        SqlType::Int64 | SqlType::BigInt(_) | SqlType::Int8(_) => "int64".into(),
        SqlType::Int(_) | SqlType::Integer(_) | SqlType::Int4(_) => "int32".into(),
        SqlType::SmallInt(_) | SqlType::Int2(_) => "int16".into(),
        SqlType::TinyInt(_) => "int8".into(),
        SqlType::Float64 | SqlType::Double(_) | SqlType::DoublePrecision | SqlType::Float8 => {
            "float64".into()
        }
        SqlType::Float(_) | SqlType::Real | SqlType::Float4 => "float32".into(),
        SqlType::Numeric(n) | SqlType::Decimal(n) => match n {
            ExactNumberInfo::None if spark && matches!(t, SqlType::Decimal(_)) => {
                "decimal:10:0".into()
            }
            ExactNumberInfo::None => "decimal:38:9".into(),
            ExactNumberInfo::Precision(p) => format!("decimal:{p}:0"),
            ExactNumberInfo::PrecisionAndScale(p, s) => format!("decimal:{p}:{s}"),
        },
        SqlType::BigNumeric(_) | SqlType::BigDecimal(_) => "decimal:76:38".into(),
        SqlType::Date => "date".into(),
        SqlType::Timestamp(
            _,
            TimezoneInfo::None | TimezoneInfo::WithTimeZone | TimezoneInfo::Tz,
        ) => "timestamp".into(),
        SqlType::Timestamp(_, TimezoneInfo::WithoutTimeZone)
        | SqlType::Datetime(_)
        | SqlType::TimestampNtz(_) => "datetime".into(),
        _ => return None,
    })
}

/// The Arrow type of a target tag.
fn target_type(tag: &str) -> Option<DataType> {
    Some(match tag {
        "bool" => DataType::Boolean,
        "int64" => DataType::Int64,
        "int32" => DataType::Int32,
        "int16" => DataType::Int16,
        "int8" => DataType::Int8,
        "float64" => DataType::Float64,
        "float32" => DataType::Float32,
        "date" => DataType::Date32,
        // An instant (BigQuery's TIMESTAMP, Spark's in a UTC session).
        "timestamp" => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        "datetime" => DataType::Timestamp(TimeUnit::Microsecond, None),
        t => {
            let mut parts = t.strip_prefix("decimal:")?.split(':');
            let p: u8 = parts.next()?.parse().ok()?;
            let s: i8 = parts.next()?.parse().ok()?;
            if p <= 38 {
                DataType::Decimal128(p, s)
            } else {
                DataType::Decimal256(p, s)
            }
        }
    })
}

/// `__smelt_safe_cast` / `__smelt_try_cast`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct DialectCast {
    name: &'static str,
    dialect: CastDialect,
    /// A value that does not cast fails the query (`CAST`), else it is NULL.
    strict: bool,
    signature: Signature,
}

impl ScalarUDFImpl for DialectCast {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        internal_err!("{} types its result from its arguments", self.name)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        let tag = match args.scalar_arguments.get(1) {
            Some(Some(ScalarValue::Utf8(Some(tag)))) => tag.clone(),
            _ => return exec_err!("{} takes a literal type", self.name),
        };
        let Some(target) = target_type(&tag) else {
            return exec_err!("{}: unknown type `{tag}`", self.name);
        };
        Ok(Arc::new(Field::new(self.name, target, true)))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let target = args.return_field.data_type().clone();
        let input = args.args[0].to_array(args.number_rows)?;
        let cast = smelt_core::cast::cast_column_in(&input, &target, None, self.dialect)
            .map_err(|e| deltalake::datafusion::error::DataFusionError::External(Box::new(e)))?;
        if self.strict
            && let Some(&row) = cast.failed_rows.first()
        {
            let text = arrow::compute::cast(&input, &DataType::Utf8)?;
            let value = ScalarValue::try_from_array(&text, row)?;
            let rules = match self.dialect {
                CastDialect::Spark => "Spark's",
                _ => "BigQuery's",
            };
            return exec_err!(
                "CAST of '{value}' to {target} fails by {rules} rules (SAFE_CAST or TRY_CAST give NULL instead)"
            );
        }
        Ok(ColumnarValue::Array(cast.array))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tag_names_a_type() {
        for t in [
            SqlType::Bool,
            SqlType::Int64,
            SqlType::Float64,
            SqlType::Numeric(ExactNumberInfo::None),
            SqlType::BigNumeric(ExactNumberInfo::None),
            SqlType::Date,
            SqlType::Timestamp(None, TimezoneInfo::None),
            SqlType::Datetime(None),
        ] {
            let tag = target_tag(&t, false).unwrap();
            assert!(target_type(&tag).is_some(), "{t}: {tag}");
        }
        assert!(target_tag(&SqlType::String(None), false).is_none());
        assert_eq!(
            target_tag(&SqlType::Decimal(ExactNumberInfo::None), true).as_deref(),
            Some("decimal:10:0")
        );
    }
}
