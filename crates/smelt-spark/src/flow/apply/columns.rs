//! Silver's columns for one run on Spark, by the embedded engine's rules
//! ([`smelt_engine::flow::apply::drift`]): the DDL checked against the table Spark reads and
//! against bronze; bronze columns silver lacks reported and, with `schema_evolution:
//! add_new_columns`, added (with DDL columns the table lacks) before the run writes.

use smelt_engine::flow::apply::drift;
use smelt_engine::schema::{column_type, type_name};
use smelt_engine::{EngineError, Result};
use smelt_spec::{ApplyFlow, ColumnDef, TableDef};

use super::discover::State;
use crate::sql::ident;
use crate::sql::spark_type;

/// Silver's columns as one run writes them.
#[derive(Debug, Clone)]
pub(crate) struct Columns {
    /// Every column, in the table's order, those to add last.
    pub(crate) silver: TableDef,
    /// The columns the run adds to silver (`ALTER TABLE` when silver exists, with the table
    /// when it does not).
    pub(crate) to_add: Vec<ColumnDef>,
    /// Bronze columns silver lacks (reported).
    pub(crate) new_columns: Vec<String>,
}

impl Columns {
    /// `ALTER TABLE … ADD COLUMNS` adding the columns to add to `table`.
    pub(crate) fn add_columns(&self, table: &str) -> String {
        let cols: Vec<String> = self
            .to_add
            .iter()
            .map(|c| format!("{} {}", ident(&c.name), spark_type(c.ty)))
            .collect();
        format!("ALTER TABLE {table} ADD COLUMNS ({})", cols.join(", "))
    }
}

/// The columns of flow `name`'s run, or its first problem.
pub(crate) fn resolve(spec: &ApplyFlow, state: &State) -> Result<Columns> {
    check(spec, state).map_err(|mut p| p.remove(0))
}

/// The columns of flow `name`'s run, or every problem with them, as the embedded engine
/// finds them.
pub(crate) fn check(spec: &ApplyFlow, state: &State) -> Result<Columns, Vec<EngineError>> {
    let (resolved, problems) = drift(spec, state.silver_schema.clone(), &state.bronze_schema);
    let resolved = match resolved {
        Some(d) if problems.is_empty() => d,
        _ => return Err(problems),
    };
    let ddl = spec.silver.as_ref().ok_or_else(|| {
        vec![EngineError::Internal(
            "apply flow without a schema on Spark".into(),
        )]
    })?;
    let def = |f: &arrow::datatypes::Field| -> Result<ColumnDef> {
        if let Some(c) = ddl.columns.iter().find(|c| &c.name == f.name()) {
            return Ok(c.clone());
        }
        let ty = column_type(f.data_type()).ok_or_else(|| {
            EngineError::user(
                format!(
                    "column `{}` ({}) of `{}` or `{}` has a type silver cannot hold",
                    f.name(),
                    type_name(f.data_type()),
                    spec.from,
                    spec.into
                ),
                "declare the column in the silver DDL with a scalar type, or drop it from bronze",
            )
        })?;
        Ok(ColumnDef {
            name: f.name().clone(),
            ty,
            nullable: true,
        })
    };
    let all = || -> Result<Columns> {
        let columns = resolved
            .schema
            .fields()
            .iter()
            .map(|f| def(f))
            .collect::<Result<Vec<_>>>()?;
        let to_add = resolved
            .to_add
            .iter()
            .map(def)
            .collect::<Result<Vec<_>>>()?;
        Ok(Columns {
            silver: TableDef {
                columns,
                ..ddl.clone()
            },
            to_add,
            new_columns: resolved
                .new_columns
                .iter()
                .map(|f| f.name().clone())
                .collect(),
        })
    };
    all().map_err(|e| vec![e])
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::{DataType, Field, Fields, Schema};
    use smelt_spec::ddl::parse_table;
    use smelt_spec::{FlowKind, Pipeline};

    use super::*;

    fn spec(options: &str) -> ApplyFlow {
        let yaml = format!(
            "lake: l\nflows:\n  f:\n    apply:\n      from: b.t\n      into: s.t\n      keys: [k]\n{options}"
        );
        let pipeline = Pipeline::from_str(&yaml, "smelt.yaml".as_ref()).unwrap();
        let FlowKind::Apply(mut spec) = pipeline.flows[0].kind.clone() else {
            unreachable!("an apply flow")
        };
        let ddl = "CREATE TABLE s.t (k STRING NOT NULL, v BIGINT, _ingest_timestamp TIMESTAMP, _update_timestamp TIMESTAMP)";
        spec.silver = Some(parse_table(ddl, "silver.sql".as_ref()).unwrap());
        spec
    }

    fn state(bronze: &[(&str, DataType)], silver: Option<&[(&str, DataType)]>) -> State {
        let schema = |cols: &[(&str, DataType)]| {
            Arc::new(Schema::new(
                cols.iter()
                    .map(|(n, t)| Field::new(*n, t.clone(), true))
                    .collect::<Vec<_>>(),
            ))
        };
        let bronze = schema(bronze);
        State {
            bronze_version: 1,
            bronze_columns: bronze.fields().iter().map(|f| f.name().clone()).collect(),
            bronze_schema: bronze,
            silver: None,
            silver_schema: silver.map(schema),
            watermark: None,
            tombstones: false,
            tombstones_txn: None,
            bronze_meta: None,
        }
    }

    fn ts() -> DataType {
        DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some("UTC".into()))
    }

    #[test]
    fn new_bronze_columns_are_reported_then_added_after_the_table_s_own() {
        let bronze = [
            ("k", DataType::Utf8),
            ("v", DataType::Utf8),
            ("color", DataType::Utf8),
        ];
        // Spark's order of silver's columns, and its own spelling of the types.
        let silver: &[(&str, DataType)] = &[
            ("v", DataType::Int64),
            ("k", DataType::LargeUtf8),
            ("_ingest_timestamp", ts()),
            ("_update_timestamp", ts()),
        ];
        let reported = resolve(&spec(""), &state(&bronze, Some(silver))).unwrap();
        assert_eq!(reported.new_columns, ["color"]);
        assert!(reported.to_add.is_empty());
        let names: Vec<&str> = reported
            .silver
            .columns
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["v", "k", "_ingest_timestamp", "_update_timestamp"]);
        // The DDL's nullability, not Spark's.
        assert!(!reported.silver.columns[1].nullable);

        let evolving = spec("      schema_evolution: add_new_columns\n");
        let added = resolve(&evolving, &state(&bronze, Some(silver))).unwrap();
        assert_eq!(added.to_add.len(), 1);
        assert_eq!(added.silver.columns.last().unwrap().name, "color");
        assert_eq!(
            added.add_columns("delta.`/l/s/t`"),
            "ALTER TABLE delta.`/l/s/t` ADD COLUMNS (`color` STRING)"
        );
    }

    #[test]
    fn a_new_column_silver_cannot_hold_and_a_ddl_unlike_the_table_are_refused() {
        let nested = DataType::Struct(Fields::from(vec![Field::new("a", DataType::Utf8, true)]));
        let bronze = [
            ("k", DataType::Utf8),
            ("v", DataType::Utf8),
            ("tags", nested),
        ];
        let evolving = spec("      schema_evolution: add_new_columns\n");
        let err = resolve(&evolving, &state(&bronze, None))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("column `tags`") && err.contains("cannot hold"),
            "{err}"
        );

        let bronze = [("k", DataType::Utf8), ("v", DataType::Utf8)];
        let silver: &[(&str, DataType)] = &[
            ("k", DataType::Utf8),
            ("v", DataType::Utf8),
            ("_ingest_timestamp", ts()),
            ("_update_timestamp", ts()),
        ];
        let all = check(&spec(""), &state(&bronze, Some(silver))).unwrap_err();
        let text = all[0].to_string();
        assert!(
            text.contains("column `v` of `s.t` is STRING in the table but INT64"),
            "{text}"
        );
    }
}
