//! The BigQuery and Spark spellings DataFusion does not take, rewritten before planning:
//!
//! * type names in `CAST` / `SAFE_CAST` / `TRY_CAST` / `::`: `INT64` → `BIGINT`, `FLOAT64`
//!   → `DOUBLE`, `NUMERIC` → `DECIMAL(38, 9)`, `BIGNUMERIC` → `DECIMAL(76, 38)`, `DATETIME`
//!   and `TIMESTAMP_NTZ` → `TIMESTAMP` (no time zone, microseconds), Spark's `LONG`,
//!   `SHORT`, `BYTE`;
//! * BigQuery's `TIMESTAMP_ADD(t, INTERVAL n unit)` / `DATETIME_ADD` / `DATE_ADD` → `t +
//!   INTERVAL …`, the `_SUB` forms → `t - INTERVAL …`, `TIMESTAMP(x)` → `CAST(x AS
//!   TIMESTAMP)`;
//! * BigQuery's `"…"` strings as `'…'` (delta-rs reads `"…"` as a column name);
//! * column names in any case: BigQuery and Spark match them case-insensitively, so `id`
//!   names the column `Id` when no name is spelled `id` exactly (`match_case`).
//!
//! How values cast (which strings are a BOOL, a number, a time) is DataFusion's; the
//! dialects' own rules are not carried out here (docs/sql.md).

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;

use deltalake::datafusion::common::TableReference;
use deltalake::datafusion::prelude::SessionContext;
use deltalake::datafusion::sql::sqlparser::ast::{
    BinaryOperator, CastKind, DataType, ExactNumberInfo, Expr, FunctionArg, FunctionArgExpr,
    FunctionArguments, Ident, ObjectName, Query, SelectItem, SetExpr, Statement, TimezoneInfo,
    Value, Visit, VisitMut, Visitor, visit_expressions_mut, visit_relations,
};

/// Rewrites the type names and functions of `statement` to DataFusion's.
pub(super) fn rewrite(statement: &mut Statement) {
    let _ = visit_expressions_mut(statement, |e| {
        match e {
            // BigQuery's "…" and """…""" strings: printed back for delta-rs (which parses
            // the generic dialect, where "…" names a column), they must stay strings.
            Expr::Value(v) => {
                if let Value::DoubleQuotedString(text)
                | Value::TripleDoubleQuotedString(text)
                | Value::TripleSingleQuotedString(text) = &v.value
                {
                    v.value = Value::SingleQuotedString(text.clone());
                }
            }
            Expr::Cast { data_type, .. } => {
                if let Some(t) = datafusion_type(data_type) {
                    *data_type = t;
                }
            }
            Expr::Function(f) => {
                let name = f.name.to_string().to_ascii_uppercase();
                let args = plain_args(&f.args);
                match (name.as_str(), args.as_deref()) {
                    (
                        "TIMESTAMP_ADD" | "DATETIME_ADD" | "DATE_ADD" | "TIMESTAMP_SUB"
                        | "DATETIME_SUB" | "DATE_SUB",
                        Some([left, right @ Expr::Interval(_)]),
                    ) => {
                        let op = if name.ends_with("_ADD") {
                            BinaryOperator::Plus
                        } else {
                            BinaryOperator::Minus
                        };
                        *e = Expr::Nested(Box::new(Expr::BinaryOp {
                            left: Box::new(left.clone()),
                            op,
                            right: Box::new(right.clone()),
                        }));
                    }
                    ("TIMESTAMP", Some([value])) => {
                        *e = Expr::Cast {
                            kind: CastKind::Cast,
                            expr: Box::new(value.clone()),
                            data_type: DataType::Timestamp(None, TimezoneInfo::None),
                            array: false,
                            format: None,
                        };
                    }
                    _ => {}
                }
            }
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
}

/// DataFusion's name for a BigQuery or Spark type it does not know.
fn datafusion_type(t: &DataType) -> Option<DataType> {
    Some(match t {
        DataType::Int64 => DataType::BigInt(None),
        DataType::Float64 => DataType::Double(ExactNumberInfo::None),
        DataType::Numeric(ExactNumberInfo::None) => {
            DataType::Decimal(ExactNumberInfo::PrecisionAndScale(38, 9))
        }
        DataType::BigNumeric(ExactNumberInfo::None)
        | DataType::BigDecimal(ExactNumberInfo::None) => {
            DataType::Decimal(ExactNumberInfo::PrecisionAndScale(76, 38))
        }
        // Spelled WITHOUT TIME ZONE so `safe_cast` tells them from BigQuery's TIMESTAMP.
        DataType::Datetime(_) | DataType::TimestampNtz(_) => {
            DataType::Timestamp(Some(6), TimezoneInfo::WithoutTimeZone)
        }
        // Spark's names.
        DataType::Custom(name, args) if args.is_empty() => {
            match name.to_string().to_ascii_lowercase().as_str() {
                "long" => DataType::BigInt(None),
                "short" => DataType::SmallInt(None),
                "byte" => DataType::TinyInt(None),
                _ => return None,
            }
        }
        _ => return None,
    })
}

/// The positional arguments of a call, when it has only those.
fn plain_args(args: &FunctionArguments) -> Option<Vec<Expr>> {
    let FunctionArguments::List(list) = args else {
        return None;
    };
    list.args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

/// Spells every column reference of `statement` as its table spells the column, when it
/// differs only in case and no name (column or output alias) is spelled exactly so.
pub(super) async fn match_case(ctx: &SessionContext, statement: &mut Statement) {
    let mut relations: Vec<ObjectName> = Vec::new();
    let _ = visit_relations(statement, |name: &ObjectName| {
        relations.push(name.clone());
        ControlFlow::<()>::Continue(())
    });
    let mut columns = Vec::new();
    for name in relations {
        let parts: Vec<String> = name
            .0
            .iter()
            .filter_map(|p| p.as_ident().map(|i| i.value.clone()))
            .collect();
        let reference = match parts.as_slice() {
            [t] => TableReference::bare(t.as_str()),
            [s, t] => TableReference::partial(s.as_str(), t.as_str()),
            _ => continue,
        };
        let Ok(provider) = ctx.table_provider(reference).await else {
            continue;
        };
        columns.extend(provider.schema().fields().iter().map(|f| f.name().clone()));
    }
    respell_columns(statement, &columns);
}

/// Spells the column references of `node` as `columns` spell them, where they differ only
/// in case and no name (column or output alias) is spelled exactly so.
pub(super) fn respell_columns<V: Visit + VisitMut>(node: &mut V, columns: &[String]) {
    let mut exact: HashSet<String> = columns.iter().cloned().collect();
    let mut by_lower: HashMap<String, HashSet<String>> = HashMap::new();
    for c in columns {
        by_lower
            .entry(c.to_lowercase())
            .or_default()
            .insert(c.clone());
    }
    let mut aliases = Aliases::default();
    let _ = Visit::visit(&*node, &mut aliases);
    exact.extend(aliases.0);
    let respell = |ident: &mut Ident| {
        if exact.contains(&ident.value) {
            return;
        }
        if let Some(names) = by_lower.get(&ident.value.to_lowercase())
            && names.len() == 1
        {
            ident.value = names.iter().next().expect("one").clone();
        }
    };
    let _ = visit_expressions_mut(node, |e| {
        match e {
            Expr::Identifier(i) => respell(i),
            Expr::CompoundIdentifier(parts) => {
                if let Some(last) = parts.last_mut() {
                    respell(last);
                }
            }
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
}

/// The output names queries give (`expr AS name`).
#[derive(Default)]
struct Aliases(HashSet<String>);

impl Visitor for Aliases {
    type Break = ();

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        if let SetExpr::Select(select) = query.body.as_ref() {
            for item in &select.projection {
                if let SelectItem::ExprWithAlias { alias, .. } = item {
                    self.0.insert(alias.value.clone());
                }
            }
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> String {
        let mut s = smelt_spec::ddl::parse_script(sql).unwrap().remove(0);
        rewrite(&mut s);
        s.to_string()
    }

    #[test]
    fn bigquery_types_and_functions_become_datafusion_ones() {
        assert_eq!(
            rewritten("SELECT SAFE_CAST(x AS INT64), CAST(y AS FLOAT64), CAST(z AS NUMERIC)"),
            "SELECT SAFE_CAST(x AS BIGINT), CAST(y AS DOUBLE), CAST(z AS DECIMAL(38,9))"
        );
        assert_eq!(
            rewritten(
                "SELECT TIMESTAMP_ADD(t, INTERVAL 1 DAY), TIMESTAMP_SUB(t, INTERVAL 7 DAY), TIMESTAMP('2026-07-01')"
            ),
            "SELECT (t + INTERVAL 1 DAY), (t - INTERVAL 7 DAY), CAST('2026-07-01' AS TIMESTAMP)"
        );
    }
}
