//! Bronze's columns after an ingest run, as the embedded engine's conformer grows them:
//! each file's columns (from its header, `columns:`, or `_c0`, `_c1`, … for the width of its
//! first line) and partition folders, in load order; new ones added (or rescued, or refused)
//! by `schema_evolution`; the flow's own columns after the first file's.

use std::collections::HashMap;

use arrow::datatypes::SchemaRef;
use smelt_engine::flow::ingest::FIX_FILE;
use smelt_engine::ports::LandingFile;
use smelt_engine::{EngineError, Result};
use smelt_ingest::csv::column_names;
use smelt_spec::{IngestEvolution, IngestFlow};

use super::sql::{Group, Plan};
use super::{evolution_name, is_text};

/// The first line of each file that has one (by its index): line number and fields.
pub(crate) type Heads = HashMap<usize, (i64, Vec<String>)>;

/// A run's columns.
#[derive(Debug, Clone)]
pub(crate) struct Planned {
    pub(crate) plan: Plan,
    /// Columns the run adds to an existing bronze.
    pub(crate) added: Vec<String>,
    /// Each file's group.
    pub(crate) groups: Vec<usize>,
}

/// The column names of `file` (its first line `head`), `None` when it names none (an
/// empty file without `columns:`).
fn names_of(
    spec: &IngestFlow,
    file: &LandingFile,
    head: Option<&(i64, Vec<String>)>,
) -> Result<Option<Vec<String>>> {
    let layout = &spec.csv;
    if !layout.header {
        return Ok(layout
            .columns
            .clone()
            .or_else(|| head.map(|(_, f)| (0..f.len()).map(|i| format!("_c{i}")).collect())));
    }
    let Some((line, fields)) = head else {
        return Ok(layout.columns.clone());
    };
    let header = column_names(fields.iter().cloned());
    match &layout.columns {
        Some(given) if given.len() != header.len() => Err(EngineError::user(
            format!(
                "{}: line {line}: the header has {} columns but `columns` names {}",
                file.url,
                header.len(),
                given.len()
            ),
            FIX_FILE,
        )),
        Some(given) => Ok(Some(given.clone())),
        None => Ok(Some(header)),
    }
}

/// The columns of each of `files`, CSV files whose first lines are `heads`.
pub(crate) fn csv_names(
    spec: &IngestFlow,
    files: &[LandingFile],
    heads: &Heads,
) -> Result<Vec<Option<Vec<String>>>> {
    files
        .iter()
        .enumerate()
        .map(|(i, file)| names_of(spec, file, heads.get(&i)))
        .collect()
}

/// The index of `group` in `groups`, added when new.
fn group_index(groups: &mut Vec<Group>, group: Group) -> usize {
    match groups.iter().position(|x| x == &group) {
        Some(g) => g,
        None => {
            groups.push(group);
            groups.len() - 1
        }
    }
}

/// Bronze's columns the files fill must be text: typed bronze columns are refused.
fn check_text(
    spec: &IngestFlow,
    schema: &SchemaRef,
    groups: &[Group],
    is_own: &dyn Fn(&str) -> bool,
) -> Result<()> {
    let fed = groups
        .iter()
        .flat_map(|g| g.names.iter().chain(&g.partitions));
    if let Some(typed) = fed.filter(|n| !is_own(n)).find(|n| !is_text(schema, n)) {
        return Err(EngineError::user(
            format!(
                "bronze `{}` column `{typed}` is not STRING: typed bronze columns are not supported by the Spark engine's ingest yet",
                spec.into
            ),
            "run this flow with `--engine embedded`, or keep bronze's file columns STRING",
        ));
    }
    Ok(())
}

/// Bronze's columns after a run of `spec` loading `files` (their columns `names`, `None`
/// for a file that names none) into bronze of `schema` (`None`: not created yet).
pub(crate) fn plan_columns(
    spec: &IngestFlow,
    schema: Option<&SchemaRef>,
    files: &[LandingFile],
    names: &[Option<Vec<String>>],
) -> Result<Planned> {
    let own = spec.own_columns();
    let is_own = |n: &str| own.contains(&n);
    let mut columns: Option<Vec<String>> =
        schema.map(|s| s.fields().iter().map(|f| f.name().clone()).collect());
    let mut added = Vec::new();
    if let Some(columns) = &mut columns {
        for o in &own {
            if !columns.iter().any(|c| c == o) {
                columns.push(o.to_string());
                added.push(o.to_string());
            }
        }
    }
    let mut rescued: Vec<String> = Vec::new();
    let mut rescue = |n: &str| {
        if !rescued.iter().any(|r| r == n) {
            rescued.push(n.to_string());
        }
    };
    let mut groups: Vec<Group> = Vec::new();
    let mut of_file = Vec::with_capacity(files.len());
    let mut keys: Vec<String> = Vec::new();
    for (file, names) in files.iter().zip(names) {
        let Some(names) = names.clone() else {
            of_file.push(0);
            continue;
        };
        let partitions: Vec<String> = file
            .partitions
            .iter()
            .map(|(k, _)| k.clone())
            .filter(|k| !names.contains(k))
            .collect();
        let input: Vec<&String> = names.iter().chain(&partitions).collect();
        match &mut columns {
            None => {
                let mut first: Vec<String> = Vec::new();
                for n in &input {
                    if is_own(n) {
                        rescue(n);
                    } else {
                        first.push(n.to_string());
                    }
                }
                first.extend(own.iter().map(|o| o.to_string()));
                columns = Some(first);
            }
            Some(columns) => {
                for n in &input {
                    if columns.contains(n) && !is_own(n) {
                        continue;
                    }
                    match spec.schema_evolution {
                        IngestEvolution::AddNewColumns if !is_own(n) => {
                            columns.push(n.to_string());
                            added.push(n.to_string());
                        }
                        IngestEvolution::Fail if !is_own(n) => {
                            return Err(EngineError::user(
                                format!(
                                    "{}: column `{n}` is not in bronze `{}` (schema_evolution: {})",
                                    file.url,
                                    spec.into,
                                    evolution_name(spec.schema_evolution)
                                ),
                                FIX_FILE,
                            ));
                        }
                        _ => rescue(n),
                    }
                }
            }
        }
        for k in &partitions {
            if !keys.contains(k) {
                keys.push(k.clone());
            }
        }
        of_file.push(group_index(&mut groups, Group { names, partitions }));
    }
    if groups.is_empty() {
        groups.push(Group {
            names: Vec::new(),
            partitions: Vec::new(),
        });
    }
    if let Some(schema) = schema {
        check_text(spec, schema, &groups, &is_own)?;
    }
    Ok(Planned {
        plan: Plan {
            columns: columns.unwrap_or_default(),
            groups,
            partition_keys: keys,
            rescued,
        },
        added,
        groups: of_file,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn flow(yaml: &str) -> IngestFlow {
        let text = format!(
            "lake: l\nflows:\n  f:\n    ingest:\n      from: ./in/*.csv\n      into: b.t\n      format: csv\n{yaml}"
        );
        let p = smelt_spec::Pipeline::from_str(&text, "smelt.yaml".as_ref()).unwrap();
        let smelt_spec::FlowKind::Ingest(f) = &p.flows[0].kind else {
            unreachable!()
        };
        f.clone()
    }

    fn file(relative: &str) -> LandingFile {
        LandingFile {
            location: relative.into(),
            relative: relative.into(),
            url: format!("file:///in/{relative}"),
            size: 1,
            modified_us: 0,
            partitions: relative
                .split('/')
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    fn head(fields: &[&str]) -> (i64, Vec<String>) {
        (1, fields.iter().map(|f| f.to_string()).collect())
    }

    #[test]
    fn a_new_bronze_takes_the_first_files_columns_then_its_own_then_new_ones() {
        let spec = flow("");
        let files = [file("a.csv"), file("d=1/b.csv"), file("empty.csv")];
        let heads = Heads::from([(0, head(&["k", "v", ""])), (1, head(&["k", "w"]))]);
        let planned = plan_columns(
            &spec,
            None,
            &files,
            &csv_names(&spec, &files, &heads).unwrap(),
        )
        .unwrap();
        assert_eq!(
            planned.plan.columns,
            [
                "k",
                "v",
                "_datasource",
                "_ingest_timestamp",
                "_rescued_data",
                "w",
                "d"
            ]
        );
        assert_eq!(planned.groups, [0, 1, 0]);
        assert_eq!(planned.plan.partition_keys, ["d"]);
        // As embedded, which creates bronze with the first file: the later ones add.
        assert_eq!(planned.added, ["w", "d"]);
    }

    #[test]
    fn existing_bronze_gains_rescues_or_refuses_new_columns() {
        let schema: SchemaRef = Arc::new(Schema::new(
            ["k", "_datasource", "_ingest_timestamp", "_rescued_data"]
                .map(|n| Field::new(n, DataType::Utf8, true))
                .to_vec(),
        ));
        let files = [file("a.csv")];
        let names = [Some(vec!["k".into(), "x".into(), "_datasource".into()])];
        let added = plan_columns(&flow(""), Some(&schema), &files, &names).unwrap();
        assert_eq!(added.added, ["x"]);
        assert_eq!(added.plan.rescued, ["_datasource"]);
        let rescued = plan_columns(
            &flow("      schema_evolution: rescue\n"),
            Some(&schema),
            &files,
            &names,
        )
        .unwrap();
        assert_eq!(rescued.plan.rescued, ["x", "_datasource"]);
        let refused = plan_columns(
            &flow("      schema_evolution: fail\n"),
            Some(&schema),
            &files,
            &names,
        )
        .unwrap_err()
        .to_string();
        assert!(
            refused.contains("column `x` is not in bronze `b.t`"),
            "{refused}"
        );
    }

    #[test]
    fn without_a_header_columns_are_given_or_numbered_and_a_header_must_match_them() {
        let files = [file("a.csv")];
        let heads = Heads::from([(0, head(&["1", "2", ""]))]);
        let numbered = csv_names(&flow("      header: false\n"), &files, &heads).unwrap();
        assert_eq!(
            numbered,
            [Some(vec!["_c0".into(), "_c1".into(), "_c2".into()])]
        );
        let wrong = csv_names(&flow("      columns: [a]\n"), &files, &heads)
            .unwrap_err()
            .to_string();
        assert!(
            wrong.contains("the header has 2 columns but `columns` names 1"),
            "{wrong}"
        );
    }
}
