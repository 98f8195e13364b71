//! Loading a pipeline file: YAML → raw structs → each flow's validator → the checks across
//! flows (one export per folder, one writer per table, no cycle). Every problem is
//! collected with its line.
//!
//! ```yaml
//! lake: ./lake
//! flows:
//!   product2:
//!     apply:
//!       from: medallion_demo.product2__bronze
//!       into: medallion_demo.product2__silver
//!       schema: product2_silver.sql
//! ```

use std::path::Path;

use serde::Deserialize;

use crate::append::{RawAppend, append_flow};
use crate::apply::{RawApply, apply_flow};
use crate::catalog::{Catalog, RawCatalog, catalogs};
use crate::check::check_lake_url;
use crate::ddl::TableName;
use crate::error::{Result, SpecError, SpecErrors, did_you_mean};
use crate::export::{RawExport, export_flow, same_place};
use crate::ingest::{RawIngest, ingest_flow};
use crate::locate::line_of;
use crate::model::{Engine, Flow, FlowKind, Pipeline};
use crate::ordered::Ordered;
use crate::replace_where::{RawReplaceWhere, replace_where_flow};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPipeline {
    lake: Option<String>,
    #[serde(default)]
    catalogs: Ordered<RawCatalog>,
    #[serde(default)]
    tables: Ordered<String>,
    #[serde(default)]
    flows: OrderedFlows,
    /// The `write_mode` of apply flows that do not set their own.
    write_mode: Option<crate::policy::WriteMode>,
    /// `embedded` (default) or `spark`.
    engine: Option<String>,
    /// The Spark Connect URL of `engine: spark`.
    connect: Option<String>,
    /// Object stores' timeouts and retries.
    storage: Option<crate::storage::RawStorage>,
}

/// `flows:`: flow names to flows.
type OrderedFlows = Ordered<RawFlow>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFlow {
    #[allow(dead_code)]
    description: Option<String>,
    apply: Option<RawApply>,
    ingest: Option<RawIngest>,
    append: Option<RawAppend>,
    replace_where: Option<RawReplaceWhere>,
    export: Option<RawExport>,
}

impl Pipeline {
    /// Reads and validates a pipeline file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            SpecError::new(path, "", format!("cannot read the pipeline file: {e}"))
                .hint("pass the file with `--pipeline <path>` (`-p`) or run `smelt` where `smelt.yaml` is")
        })?;
        Self::from_str(&text, path)
    }

    /// Parses and validates pipeline text; `path` names it in errors and anchors relative paths.
    #[allow(clippy::should_implement_trait)]
    pub fn from_str(text: &str, path: &Path) -> Result<Self> {
        let raw: RawPipeline =
            serde_norway::from_str(text).map_err(|e| yaml_error(path, text, &e))?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut errors = Vec::new();
        let at = |p: &[&str]| line_of(text, p);

        let lake = match raw.lake {
            Some(l) if l.contains("://") => {
                if let Err(message) = check_lake_url(&l) {
                    errors.push(
                        SpecError::new(path, "lake", message)
                            .at(at(&["lake"]))
                            .hint("use a local folder, or an `s3://`, `gs://`, `az://`, `abfss://` or `file://` URL"),
                    );
                }
                l
            }
            Some(l) => dir.join(l).to_string_lossy().into_owned(),
            None => {
                errors.push(
                    SpecError::new(
                        path,
                        "lake",
                        "missing `lake`: the folder that holds the tables",
                    )
                    .at(Some(1))
                    .hint("add `lake: ./lake` at the top of the file"),
                );
                String::new()
            }
        };
        let catalogs = catalogs(path, &dir, text, raw.catalogs, &mut errors);
        let engine = engine(path, text, raw.engine, raw.connect, &mut errors);
        let storage = crate::storage::store_settings(path, text, raw.storage, &mut errors);
        let mut tables = Vec::new();
        for (table, place) in raw.tables.0 {
            let field = format!("tables.{table}");
            let line = at(&["tables", &table]);
            let Some(name) = TableName::parse(&table) else {
                errors.push(
                    SpecError::new(path, &field, format!("`{table}` is not a table name"))
                        .at(line)
                        .hint("write tables as `schema.table`, e.g. `raw.product2: s3://bucket/bronze/product2`"),
                );
                continue;
            };
            if name.catalog.is_some() {
                errors.push(
                    SpecError::new(path, &field, format!("`{table}` is an Iceberg table; its catalog places it"))
                        .at(line)
                        .hint("place Delta tables (`schema.table`) here; an Iceberg table's location is its catalog's"),
                );
                continue;
            }
            if place.contains("://") {
                if let Err(message) = check_lake_url(&place) {
                    errors.push(SpecError::new(path, &field, message).at(line).hint(
                        "use a local folder, or an `s3://`, `gs://`, `az://`, `abfss://` or `file://` URL of the table's folder",
                    ));
                    continue;
                }
                tables.push((name, place));
            } else {
                tables.push((name, dir.join(place).to_string_lossy().into_owned()));
            }
        }
        let default_write_mode = raw.write_mode;
        let mut flows = Vec::new();
        for (name, flow) in raw.flows.0 {
            let field = format!("flows.{name}");
            let kinds = [
                flow.apply.is_some(),
                flow.ingest.is_some(),
                flow.append.is_some(),
                flow.replace_where.is_some(),
                flow.export.is_some(),
            ];
            if kinds.iter().filter(|k| **k).count() > 1 {
                errors.push(
                    SpecError::new(path, field, "the flow has more than one kind")
                        .at(at(&["flows", &name]))
                        .hint("give each `apply:` / `ingest:` / `append:` / `replace_where:` / `export:` block its own flow name"),
                );
                continue;
            }
            let kind = if let Some(mut raw) = flow.apply {
                raw.write_mode = raw.write_mode.or(default_write_mode);
                apply_flow(path, &dir, text, &name, raw, &mut errors).map(FlowKind::Apply)
            } else if let Some(raw) = flow.ingest {
                ingest_flow(path, &dir, text, &name, raw, &mut errors).map(FlowKind::Ingest)
            } else if let Some(raw) = flow.append {
                append_flow(path, &dir, text, &name, raw, &mut errors).map(FlowKind::Append)
            } else if let Some(raw) = flow.replace_where {
                replace_where_flow(path, &dir, text, &name, raw, &mut errors)
                    .map(FlowKind::ReplaceWhere)
            } else if let Some(raw) = flow.export {
                export_flow(path, &dir, text, &name, raw, &mut errors).map(FlowKind::Export)
            } else {
                errors.push(
                    SpecError::new(path, field, "the flow has no kind")
                        .at(at(&["flows", &name]))
                        .hint("give it an `apply:` block (from, into, schema), or `ingest:`, `append:`, `replace_where:` or `export:`"),
                );
                None
            };
            if let Some(kind) = kind {
                flows.push(Flow { name, kind });
            }
        }
        writer_errors(path, text, &flows, &mut errors);
        check_catalog_names(path, text, &flows, &catalogs, &mut errors);
        // No cycle: a flow cannot run after itself.
        cycle_errors(path, text, &flows, &mut errors);
        if errors.is_empty() {
            Ok(Pipeline {
                file: path.to_path_buf(),
                engine,
                lake,
                storage,
                catalogs,
                tables,
                flows,
            })
        } else {
            Err(SpecErrors(errors))
        }
    }
}

/// Checks across flows: one export per folder, one writer per table.
fn writer_errors(path: &Path, text: &str, flows: &[Flow], errors: &mut Vec<SpecError>) {
    // One export per folder: exports keep their state and temporary files there.
    for (i, flow) in flows.iter().enumerate() {
        let FlowKind::Export(e) = &flow.kind else {
            continue;
        };
        let same = flows[..i]
            .iter()
            .find(|f| matches!(&f.kind, FlowKind::Export(o) if same_place(o, e)));
        if let Some(first) = same {
            errors.push(
                SpecError::new(
                    path,
                    format!("flows.{}.export.to", flow.name),
                    format!(
                        "flows `{}` and `{}` both export to `{}`",
                        first.name, flow.name, e.to
                    ),
                )
                .at(line_of(text, &["flows", &flow.name, "export", "to"]))
                .hint("give each export flow its own folder"),
            );
        }
    }
    // One writer per table: two flows merging into one silver would fight over it.
    for (i, flow) in flows.iter().enumerate() {
        if let Some(first) = flows[..i]
            .iter()
            .find(|f| f.writes().is_some() && f.writes() == flow.writes())
        {
            let kind = flow.kind_name();
            errors.push(
                SpecError::new(
                    path,
                    format!("flows.{}.{kind}.into", flow.name),
                    format!(
                        "flows `{}` and `{}` both write `{}`",
                        first.name,
                        flow.name,
                        flow.target()
                    ),
                )
                .at(line_of(text, &["flows", &flow.name, kind, "into"]))
                .hint("give each flow its own `into:` table"),
            );
        }
    }
}

/// `engine:` and `connect:`: where the flows run.
fn engine(
    path: &Path,
    text: &str,
    engine: Option<String>,
    connect: Option<String>,
    errors: &mut Vec<SpecError>,
) -> Engine {
    if let Some(url) = &connect
        && !url.starts_with("sc://")
    {
        errors.push(
            SpecError::new(path, "connect", "`connect` is not a Spark Connect URL")
                .at(line_of(text, &["connect"]))
                .hint("write it as `sc://host:15002` (Databricks: `sc://<workspace-host>:443/;token=…;x-databricks-cluster-id=…`)"),
        );
    }
    match engine.as_deref() {
        None | Some("embedded") => {
            if connect.is_some() {
                errors.push(
                    SpecError::new(
                        path,
                        "connect",
                        "`connect` is set but the engine is embedded",
                    )
                    .at(line_of(text, &["connect"]))
                    .hint(
                        "add `engine: spark` to run the flows on that cluster, or remove `connect`",
                    ),
                );
            }
            Engine::Embedded
        }
        Some("spark") => Engine::Spark { connect },
        Some(other) => {
            let hint = match did_you_mean(other, ["embedded", "spark"]) {
                Some(near) => format!("did you mean `{near}`?"),
                None => "use `embedded` (smelt runs the flows itself) or `spark` (a Spark cluster over Spark Connect)".to_string(),
            };
            errors.push(
                SpecError::new(path, "engine", format!("unknown engine `{other}`"))
                    .at(line_of(text, &["engine"]))
                    .hint(hint),
            );
            Engine::Embedded
        }
    }
}

fn yaml_error(path: &Path, text: &str, e: &serde_norway::Error) -> SpecErrors {
    let line = e.location().map(|l| l.line());
    let mut msg = e.to_string();
    // serde_norway appends " at line X column Y"; the line is shown separately.
    if let Some(i) = msg.find(" at line ") {
        msg.truncate(i);
    }
    // ... and prefixes the path of the field: `flows.product2.apply: unknown field ...`.
    let mut field = String::new();
    if let Some((prefix, rest)) = msg.split_once(": ")
        && !prefix.contains(' ')
    {
        field = prefix.to_string();
        msg = rest.to_string();
    }
    let mut err = SpecError::new(path, field, msg.clone()).at(line);
    if let Some(rest) = msg.strip_prefix("unknown field `") {
        let unknown = rest.split('`').next().unwrap_or("");
        let expected: Vec<&str> = rest
            .split("expected ")
            .nth(1)
            .unwrap_or("")
            .split('`')
            .skip(1)
            .step_by(2)
            .collect();
        err = match did_you_mean(unknown, expected.iter().copied()) {
            Some(near) => err.hint(format!("did you mean `{near}`?")),
            None => err.hint(format!("allowed here: {}", expected.join(", "))),
        };
    } else if msg.starts_with("missing field") {
        err = err.hint("add the field; see docs/pipeline.md for every option");
    } else if line.is_some() && !text.is_empty() {
        err =
            err.hint("check the indentation, quotes and brackets on that line and the one before");
    }
    err.into()
}

/// No flow may read, directly or through other flows, what it writes. The edges are the
/// engine's run order (`smelt-engine`'s `dag::run_order`): a flow runs after the flow
/// whose table it reads, and after the export whose folder its files are under. One error
/// per cycle, at the `from:` of its first flow in file order.
fn cycle_errors(path: &Path, text: &str, flows: &[Flow], errors: &mut Vec<SpecError>) {
    // downstream[j]: the flows that read what flow j writes.
    let mut downstream = vec![Vec::new(); flows.len()];
    for (i, f) in flows.iter().enumerate() {
        for (j, g) in flows.iter().enumerate() {
            if (f.reads().is_some() && f.reads() == g.writes()) || f.reads_files_of(g) {
                downstream[j].push(i);
            }
        }
    }
    let mut reported = vec![false; flows.len()];
    for start in 0..flows.len() {
        if reported[start] {
            continue;
        }
        let Some(cycle) = shortest_cycle(start, &downstream) else {
            continue;
        };
        for &i in &cycle {
            reported[i] = true;
        }
        let names = cycle
            .iter()
            .chain([&start])
            .map(|&i| format!("`{}`", flows[i].name))
            .collect::<Vec<_>>()
            .join(" → ");
        let message = if cycle.len() == 1 {
            format!("flow {names} forms a cycle")
        } else {
            format!("flows {names} form a cycle")
        };
        let flow = &flows[start];
        let kind = flow.kind_name();
        errors.push(
            SpecError::new(path, format!("flows.{}.{kind}.from", flow.name), message)
                .at(line_of(text, &["flows", &flow.name, kind, "from"]))
                .hint("a flow cannot read, directly or through other flows, the table it writes"),
        );
    }
}

/// The shortest cycle through flow `start`, in data order (`start` first, then each flow
/// reading what the one before writes), or `None`.
fn shortest_cycle(start: usize, downstream: &[Vec<usize>]) -> Option<Vec<usize>> {
    let mut parent: Vec<Option<usize>> = vec![None; downstream.len()];
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(i) = queue.pop_front() {
        for &next in &downstream[i] {
            if next == start {
                let (mut cycle, mut at) = (vec![i], i);
                while let Some(p) = parent[at] {
                    cycle.push(p);
                    at = p;
                }
                cycle.reverse();
                return Some(cycle);
            }
            if parent[next].is_none() {
                parent[next] = Some(i);
                queue.push_back(next);
            }
        }
    }
    None
}

/// Errors for flows whose tables name a catalog that `catalogs:` does not define.
pub(crate) fn check_catalog_names(
    path: &Path,
    text: &str,
    flows: &[Flow],
    catalogs: &[Catalog],
    errors: &mut Vec<SpecError>,
) {
    for flow in flows {
        let kind = flow.kind_name();
        for (leaf, table) in [("from", flow.reads()), ("into", flow.writes())] {
            let Some(catalog) = table.and_then(|t| t.catalog.as_deref()) else {
                continue;
            };
            if catalogs.iter().any(|c| c.name == catalog) {
                continue;
            }
            let names: Vec<&str> = catalogs.iter().map(|c| c.name.as_str()).collect();
            let hint = did_you_mean(catalog, names.iter().copied())
                .map(|c| format!("did you mean `{c}`?"))
                .unwrap_or_else(|| {
                format!(
                    "define it under `catalogs:` (e.g. `catalogs: {{{catalog}: {{type: sql, uri: sqlite:catalog.db, warehouse: ./warehouse}}}}`), or write the Delta table as `schema.table`"
                )
            });
            errors.push(
                SpecError::new(
                    path,
                    format!("flows.{}.{kind}.{leaf}", flow.name),
                    format!(
                        "`{}` names catalog `{catalog}`, which `catalogs:` does not define",
                        table.map(ToString::to_string).unwrap_or_default()
                    ),
                )
                .at(line_of(text, &["flows", &flow.name, kind, leaf]))
                .hint(&hint),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Pipeline> {
        Pipeline::from_str(text, Path::new("smelt.yaml"))
    }

    #[test]
    fn unknown_field_names_line_and_near_miss() {
        let err = load("lake: l\nflows:\n  p:\n    apply:\n      from: a.b\n      into: c.d\n      sequnce_by: [x]\n").unwrap_err();
        let e = &err.0[0];
        assert_eq!(e.line, Some(7));
        assert_eq!(e.hint.as_deref(), Some("did you mean `sequence_by`?"));
        assert!(
            e.message.contains("unknown field `sequnce_by`"),
            "{}",
            e.message
        );
        assert_eq!(e.field, "flows.p.apply");
    }

    #[test]
    fn collects_every_problem() {
        let err = load("flows:\n  p:\n    apply:\n      from: nodot\n      into: c.d\n      tz: Mars/Olympus\n      scd: 3\n").unwrap_err();
        let fields: Vec<&str> = err.0.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            vec![
                "lake",
                "flows.p.apply.from",
                "flows.p.apply.scd",
                "flows.p.apply.keys",
                "flows.p.apply.tz"
            ]
        );
        assert_eq!(err.0[1].line, Some(4));
    }

    #[test]
    fn two_flows_cannot_write_one_table() {
        let err = load("lake: l\nflows:\n  a:\n    apply:\n      from: b.x\n      into: s.t\n      keys: [k]\n  b:\n    apply:\n      from: b.y\n      into: s.t\n      keys: [k]\n").unwrap_err();
        assert_eq!(err.0[0].field, "flows.b.apply.into");
        assert_eq!(err.0[0].line, Some(11));
        assert!(err.0[0].message.contains("`a` and `b` both write `s.t`"));
    }

    #[test]
    fn flows_reading_each_other_are_a_cycle() {
        let err = load("lake: l\nflows:\n  a:\n    apply:\n      from: s.b\n      into: s.a\n      keys: [k]\n  b:\n    apply:\n      from: s.a\n      into: s.b\n      keys: [k]\n").unwrap_err();
        assert_eq!(err.0.len(), 1, "{err}");
        let e = &err.0[0];
        assert_eq!(e.message, "flows `a` → `b` → `a` form a cycle");
        assert_eq!(e.field, "flows.a.apply.from");
        assert_eq!(e.line, Some(5));
        assert_eq!(
            e.hint.as_deref(),
            Some("a flow cannot read, directly or through other flows, the table it writes")
        );
    }

    #[test]
    fn a_flow_reading_its_own_table_is_a_cycle() {
        let err = load("lake: l\nflows:\n  a:\n    append:\n      from: s.a\n      into: s.a\n")
            .unwrap_err();
        assert_eq!(err.0[0].message, "flow `a` → `a` forms a cycle");
        assert_eq!(err.0[0].line, Some(5));
    }

    #[test]
    fn a_chain_through_an_export_folder_is_a_cycle() {
        // `load` reads the files `out` exports, and `out` exports the table `load` writes.
        let err = load("lake: l\nflows:\n  out:\n    export:\n      from: b.raw\n      to: ./files\n  load:\n    ingest:\n      from: ./files/**/*.parquet\n      into: b.raw\n      format: parquet\n").unwrap_err();
        assert_eq!(
            err.0[0].message,
            "flows `out` → `load` → `out` form a cycle"
        );
        assert_eq!(err.0[0].field, "flows.out.export.from");
        assert_eq!(err.0[0].line, Some(5));
        // Without the loop back, the same flows load.
        load("lake: l\nflows:\n  out:\n    export:\n      from: s.sales\n      to: ./files\n  load:\n    ingest:\n      from: ./files/**/*.parquet\n      into: b.raw\n      format: parquet\n").unwrap();
    }

    #[test]
    fn tables_map_places_tables_and_names_bad_entries() {
        use crate::policy::WriteMode;
        let p = load("lake: l\nwrite_mode: merge_on_read\nflows:\n  a:\n    apply:\n      from: b.x\n      into: s.a\n      keys: [k]\n  b:\n    apply:\n      from: b.y\n      into: s.b\n      keys: [k]\n      write_mode: copy_on_write\n").unwrap();
        let modes: Vec<_> = p
            .flows
            .iter()
            .map(|f| match &f.kind {
                FlowKind::Apply(a) => a.write_mode,
                _ => unreachable!("two apply flows"),
            })
            .collect();
        assert_eq!(modes, [WriteMode::MergeOnRead, WriteMode::CopyOnWrite]);
        let p = load("lake: s3://bucket/lake\ntables:\n  raw.p: s3://other/bronze/p\n  s.t: ./elsewhere/t\nflows: {}\n").unwrap();
        assert_eq!(p.lake, "s3://bucket/lake");
        assert_eq!(p.tables[0].0.to_string(), "raw.p");
        assert_eq!(p.tables[0].1, "s3://other/bronze/p");
        assert_eq!(p.tables[1].1, "./elsewhere/t");

        let err = load("lake: l\ntables:\n  nodot: s3://b/x\n  s.t: ftp://h/x\nflows: {}\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`nodot` is not a table name"), "{err}");
        assert!(err.contains("`ftp://` is not a storage"), "{err}");
        let err = load("lake: ftp://h/lake\nflows: {}\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`ftp://` is not a storage a lake can be on"),
            "{err}"
        );
    }

    #[test]
    fn a_table_gets_a_change_feed_when_a_flow_of_the_pipeline_reads_it() {
        use crate::model::ChangeFeed;
        let p = load("lake: l\nflows:\n  a:\n    apply:\n      from: b.x\n      into: s.a\n      keys: [k]\n  b:\n    apply:\n      from: s.a\n      into: g.a\n      keys: [k]\n  c:\n    export:\n      from: g.a\n      to: ./out\n").unwrap();
        let feed = |t: &str| p.change_feed(&TableName::parse(t).unwrap());
        assert_eq!(feed("s.a"), ChangeFeed::ReadBy("b".into()));
        assert!(feed("s.a").on());
        // An export reads its source's changes too; a table nothing reads has none.
        assert_eq!(feed("g.a"), ChangeFeed::ReadBy("c".into()));
        assert_eq!(feed("s.a__tombstones"), ChangeFeed::Unread);
        assert!(!feed("s.a__tombstones").on());
        // Bronze is read by `a`: written by no flow here, its feed is not smelt's to set,
        // but were an ingest to create it, it would keep one.
        assert_eq!(feed("b.x"), ChangeFeed::ReadBy("a".into()));
    }
}
