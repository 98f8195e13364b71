//! The pipeline file: `lake` plus named flows.
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

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde::Deserialize;

use crate::ddl::{self, ColumnType, TableDef, TableName};
use crate::error::{Result, SpecError, SpecErrors, did_you_mean};
use crate::flows::{
    AppendFlow, ExportFlow, RawAppend, RawExport, RawReplaceWhere, ReplaceSource, ReplaceWhereFlow,
    append_flow, export_flow, replace_where_flow,
};
use crate::ingest::{IngestFlow, RawIngest, ingest_flow};
use crate::locate::line_of;

/// The change-metadata column that the default sequence uses.
pub const COMMIT_TIMESTAMP: &str = "_commit_timestamp";

/// A validated pipeline file.
#[derive(Debug, Clone)]
pub struct Pipeline {
    /// The file it was read from.
    pub file: PathBuf,
    /// The lake root: a local folder, resolved against the file's folder.
    pub lake: PathBuf,
    /// Flows in file order.
    pub flows: Vec<Flow>,
}

/// One named flow.
#[derive(Debug, Clone)]
pub struct Flow {
    /// Name (the key under `flows:`).
    pub name: String,
    /// What the flow does.
    pub kind: FlowKind,
}

/// The kinds of flow (DESIGN §4).
#[derive(Debug, Clone)]
pub enum FlowKind {
    /// Bronze → silver by key.
    Apply(ApplyFlow),
    /// Files → bronze, each file once.
    Ingest(IngestFlow),
    /// Rows added to a table → appended to another.
    Append(AppendFlow),
    /// A batch replaces the rows of a table matching a predicate.
    ReplaceWhere(ReplaceWhereFlow),
    /// Changed rows → Parquet files.
    Export(ExportFlow),
}

impl Flow {
    /// The table the flow reads, if it reads one.
    pub fn reads(&self) -> Option<&TableName> {
        match &self.kind {
            FlowKind::Apply(a) => Some(&a.from),
            FlowKind::Append(a) => Some(&a.from),
            FlowKind::Export(e) => Some(&e.from),
            FlowKind::ReplaceWhere(r) => match &r.from {
                ReplaceSource::Table(t) => Some(t),
                ReplaceSource::Files(_) => None,
            },
            FlowKind::Ingest(_) => None,
        }
    }

    /// The table the flow writes (`None` for an export, which writes files).
    pub fn writes(&self) -> Option<&TableName> {
        match &self.kind {
            FlowKind::Apply(a) => Some(&a.into),
            FlowKind::Ingest(i) => Some(&i.into),
            FlowKind::Append(a) => Some(&a.into),
            FlowKind::ReplaceWhere(r) => Some(&r.into),
            FlowKind::Export(_) => None,
        }
    }

    /// The flow's kind as written in the file (`apply`, `ingest`, …).
    pub fn kind_name(&self) -> &'static str {
        match &self.kind {
            FlowKind::Apply(_) => "apply",
            FlowKind::Ingest(_) => "ingest",
            FlowKind::Append(_) => "append",
            FlowKind::ReplaceWhere(_) => "replace_where",
            FlowKind::Export(_) => "export",
        }
    }

    /// Where the flow reads from, for reports: a table or a folder.
    pub fn source(&self) -> String {
        match &self.kind {
            FlowKind::Ingest(i) => i.from.clone(),
            FlowKind::ReplaceWhere(r) => r.from_text.clone(),
            _ => self.reads().map(|t| t.to_string()).unwrap_or_default(),
        }
    }

    /// Whether the flow reads files that `other` writes (below an export's folder).
    pub fn reads_files_of(&self, other: &Flow) -> bool {
        let FlowKind::Export(e) = &other.kind else {
            return false;
        };
        let files = match &self.kind {
            FlowKind::Ingest(i) => i,
            FlowKind::ReplaceWhere(r) => match &r.from {
                ReplaceSource::Files(f) => f.as_ref(),
                ReplaceSource::Table(_) => return false,
            },
            _ => return false,
        };
        match (&files.url, &e.url) {
            (Some(a), Some(b)) => format!("{}/", a.trim_end_matches('/'))
                .starts_with(&format!("{}/", b.trim_end_matches('/'))),
            (None, None) => {
                let clean = |p: &Path| {
                    p.components()
                        .filter(|c| !matches!(c, std::path::Component::CurDir))
                        .collect::<PathBuf>()
                };
                clean(&files.folder).starts_with(clean(&e.folder))
            }
            _ => false,
        }
    }

    /// Where the flow writes, for reports: a table or a folder.
    pub fn target(&self) -> String {
        match &self.kind {
            FlowKind::Export(e) => e.to.clone(),
            _ => self.writes().map(|t| t.to_string()).unwrap_or_default(),
        }
    }
}

/// What to do with a value that cannot be cast to its silver type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnCastError {
    /// Store NULL (BigQuery SAFE_CAST); the failure is counted in the report.
    #[default]
    Null,
    /// Abort the run before anything is written, naming the column, value and row.
    Fail,
    /// Leave the change out and write it to the rejects table (`<silver>__rejects`) with
    /// the column, raw value and target type.
    Quarantine,
}

/// What to do with a change that fails an expectation (`expect:`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnViolation {
    /// Apply it anyway; count the violation per expectation.
    #[default]
    Warn,
    /// Leave it out; counted.
    Drop,
    /// Leave it out and write it to the rejects table.
    Quarantine,
    /// Abort the run before anything is written, naming the expectation and the row.
    Fail,
}

/// What to do when two changes of one key have the same (greatest) sequence and
/// different data.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnSequenceConflict {
    /// The later one in bronze order wins (commit version, file, row); counted.
    #[default]
    Last,
    /// Neither is applied this run: all of them go to the rejects table.
    Quarantine,
    /// Abort the run before anything is written, naming the key and sequence.
    Fail,
}

/// Names of the audit columns smelt maintains in silver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditColumns {
    /// Commit timestamp of the winning bronze change (`None` = not kept).
    pub ingest_timestamp: Option<String>,
    /// Time of the run that last inserted or changed the row (`None` = not kept).
    pub update_timestamp: Option<String>,
}

impl Default for AuditColumns {
    fn default() -> Self {
        Self {
            ingest_timestamp: Some("_ingest_timestamp".into()),
            update_timestamp: Some("_update_timestamp".into()),
        }
    }
}

/// An `apply` flow: bronze changes → one silver row per key (SCD type 1).
#[derive(Debug, Clone)]
pub struct ApplyFlow {
    /// Bronze table.
    pub from: TableName,
    /// Silver table.
    pub into: TableName,
    /// Silver schema from the DDL file (audit columns included), if `schema:` is given;
    /// otherwise silver must already exist.
    pub silver: Option<TableDef>,
    /// The DDL file, if any.
    pub schema_file: Option<PathBuf>,
    /// Key columns (from `keys:` or the DDL's primary key).
    pub keys: Vec<String>,
    /// Columns ordering changes of one key; `_commit_timestamp` means the bronze commit time.
    pub sequence_by: Vec<String>,
    /// Audit columns.
    pub audit: AuditColumns,
    /// Cast failure policy.
    pub on_cast_error: OnCastError,
    /// Zone for timestamps written without an offset (IANA name or `+HH:MM`); UTC by default.
    pub tz: Option<String>,
    /// SQL predicate over the bronze row that turns an upsert into a delete
    /// (`IsDeleted = 'true'`, `op = 'D'`).
    pub apply_as_deletes: Option<String>,
    /// What bronze change-feed deletes do.
    pub source_deletes: SourceDeletes,
    /// SQL predicate over the bronze row that makes a change a truncate: silver is emptied
    /// as of its sequence (SCD1 only).
    pub apply_as_truncates: Option<String>,
    /// A NULL in a change keeps the stored value instead of overwriting it.
    pub ignore_null_updates: bool,
    /// Which silver columns an update of an existing key sets.
    pub update_columns: UpdateColumns,
    /// SQL predicate over the latest (typed) state of a key: keys that fail it are not kept.
    pub filter: Option<String>,
    /// How long tombstones of deleted keys are kept (`None`: forever).
    pub tombstone_retention: Option<std::time::Duration>,
    /// Named SQL predicates over the typed change (`expect:`), in file order.
    pub expectations: Vec<(String, String)>,
    /// What a change failing an expectation does.
    pub on_violation: OnViolation,
    /// What equal-sequence conflicts do.
    pub on_sequence_conflict: OnSequenceConflict,
    /// What new columns do.
    pub schema_evolution: SchemaEvolution,
    /// A DDL type wider than the table's (INT → BIGINT, DECIMAL precision up) rewrites
    /// silver with the wider type instead of failing.
    pub widen_types: bool,
    /// SCD type: 1 (one row per key) or 2 (history: one row per version, with
    /// [`START_AT`] and [`END_AT`]).
    pub scd: u8,
    /// SCD2: the columns whose change starts a new version (`track_history`); a change in
    /// the others updates the current version in place.
    pub history: UpdateColumns,
}

/// SCD2: the column holding the sequence at which a version starts.
pub const START_AT: &str = "__START_AT";
/// SCD2: the column holding the sequence at which a version ends (NULL: current).
pub const END_AT: &str = "__END_AT";

/// Adds the SCD2 history columns, typed like the sequence, unless the DDL declares them.
fn with_history_columns(mut def: TableDef, ty: ColumnType) -> TableDef {
    for name in [START_AT, END_AT] {
        if !def.columns.iter().any(|c| c.name == name) {
            def.columns.push(ddl::ColumnDef {
                name: name.to_string(),
                ty,
                nullable: true,
            });
        }
    }
    def
}

/// What new columns (in bronze, or declared in the DDL but missing from silver) do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SchemaEvolution {
    /// Reported only; a DDL column missing from silver is an error.
    #[default]
    None,
    /// Added to silver in the run's commit: typed as in the DDL, else as in bronze (STRING).
    AddNewColumns,
}

/// What bronze Change Data Feed deletes do to silver.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceDeletes {
    /// Ignored: bronze retention (DELETE, TRUNCATE) never deletes silver.
    #[default]
    Ignore,
    /// A bronze delete deletes the key from silver (guarded by sequence, like any change).
    Apply,
}

/// Which silver columns an update of an existing key sets (an insert sets them all).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum UpdateColumns {
    /// Every column.
    #[default]
    All,
    /// Only these (`column_list`); the others keep their stored values.
    Only(Vec<String>),
    /// All but these (`except_column_list`).
    Except(Vec<String>),
}

impl UpdateColumns {
    /// True when an update sets column `name`.
    pub fn updates(&self, name: &str) -> bool {
        match self {
            Self::All => true,
            Self::Only(c) => c.iter().any(|c| c == name),
            Self::Except(c) => !c.iter().any(|c| c == name),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPipeline {
    lake: Option<String>,
    #[serde(default)]
    flows: OrderedFlows,
}

/// A YAML map in file order, names unique (`flows:`, `expect:`).
#[derive(Debug)]
struct Ordered<T>(IndexMap<String, T>);

impl<T> Default for Ordered<T> {
    fn default() -> Self {
        Self(IndexMap::new())
    }
}

/// `flows:`: flow names to flows.
type OrderedFlows = Ordered<RawFlow>;

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Ordered<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visit<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Visit<T> {
            type Value = Ordered<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of names to entries")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let mut out = IndexMap::new();
                while let Some((k, v)) = map.next_entry::<String, T>()? {
                    if out.contains_key(&k) {
                        return Err(serde::de::Error::custom(format!("`{k}` is defined twice")));
                    }
                    out.insert(k, v);
                }
                Ok(Ordered(out))
            }
            fn visit_unit<E: serde::de::Error>(self) -> std::result::Result<Self::Value, E> {
                Ok(Ordered::default())
            }
        }
        d.deserialize_any(Visit(std::marker::PhantomData))
    }
}

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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApply {
    from: String,
    into: String,
    schema: Option<PathBuf>,
    keys: Option<Vec<String>>,
    sequence_by: Option<Vec<String>>,
    scd: Option<u8>,
    audit: Option<RawAudit>,
    on_cast_error: Option<OnCastError>,
    tz: Option<String>,
    apply_as_deletes: Option<String>,
    apply_as_truncates: Option<String>,
    source_deletes: Option<SourceDeletes>,
    #[serde(default)]
    ignore_null_updates: bool,
    column_list: Option<Vec<String>>,
    except_column_list: Option<Vec<String>>,
    #[serde(rename = "where")]
    filter: Option<String>,
    tombstone_retention: Option<String>,
    track_history: Option<Vec<String>>,
    track_history_except: Option<Vec<String>>,
    schema_evolution: Option<SchemaEvolution>,
    #[serde(default)]
    widen_types: bool,
    #[serde(default)]
    expect: Ordered<String>,
    on_violation: Option<OnViolation>,
    on_sequence_conflict: Option<OnSequenceConflict>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAudit {
    #[serde(default = "some_ingest")]
    ingest_timestamp: Option<String>,
    #[serde(default = "some_update")]
    update_timestamp: Option<String>,
}

fn some_ingest() -> Option<String> {
    AuditColumns::default().ingest_timestamp
}
fn some_update() -> Option<String> {
    AuditColumns::default().update_timestamp
}

impl Pipeline {
    /// Reads and validates a pipeline file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            SpecError::new(path, "", format!("cannot read the pipeline file: {e}"))
                .hint("pass the file with `--file <path>` or run `smelt` where `smelt.yaml` is")
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
            Some(l) => dir.join(l),
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
                PathBuf::new()
            }
        };
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
            let kind = if let Some(raw) = flow.apply {
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
        if errors.is_empty() {
            Ok(Pipeline {
                file: path.to_path_buf(),
                lake,
                flows,
            })
        } else {
            Err(SpecErrors(errors))
        }
    }

    /// The flow called `name`.
    pub fn flow(&self, name: &str) -> Option<&Flow> {
        self.flows.iter().find(|f| f.name == name)
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

fn apply_flow(
    path: &Path,
    dir: &Path,
    text: &str,
    name: &str,
    raw: RawApply,
    errors: &mut Vec<SpecError>,
) -> Option<ApplyFlow> {
    let name_of_flow = name;
    let at = |leaf: &str| line_of(text, &["flows", name, "apply", leaf]);
    let field = |leaf: &str| format!("flows.{name}.apply.{leaf}");
    let before = errors.len();

    let mut table = |leaf: &str, value: &str| match TableName::parse(value) {
        Some(t) => Some(t),
        None => {
            errors.push(
                SpecError::new(path, field(leaf), format!("`{value}` is not a table name"))
                    .at(at(leaf))
                    .hint("write tables as `schema.table`, e.g. `bronze.product2`"),
            );
            None
        }
    };
    let from = table("from", &raw.from);
    let into = table("into", &raw.into);

    let scd = raw.scd.unwrap_or(1);
    if !matches!(scd, 1 | 2) {
        errors.push(
            SpecError::new(path, field("scd"), format!("there is no SCD type {scd}"))
                .at(at("scd"))
                .hint("use `scd: 1` (one row per key) or `scd: 2` (history)"),
        );
    }
    if scd != 2 && (raw.track_history.is_some() || raw.track_history_except.is_some()) {
        errors.push(
            SpecError::new(
                path,
                field("track_history"),
                "`track_history` needs `scd: 2`",
            )
            .at(at("track_history").or(at("track_history_except")))
            .hint("add `scd: 2`, or remove the option"),
        );
    }

    let audit = match raw.audit {
        Some(a) => AuditColumns {
            ingest_timestamp: a.ingest_timestamp,
            update_timestamp: a.update_timestamp,
        },
        None => AuditColumns::default(),
    };

    let schema_file = raw.schema.as_ref().map(|s| dir.join(s));
    let mut silver = None;
    let errors_before_schema = errors.len();
    if let Some(file) = &schema_file
        && let Some(def) = read_table_def(path, file, &field("schema"), at("schema"), errors)
    {
        silver = Some(with_audit_columns(
            def,
            &audit,
            path,
            &field("audit"),
            at("audit"),
            errors,
        ));
    }

    let keys = match (raw.keys, &silver) {
        (Some(k), _) if k.is_empty() => {
            errors.push(
                SpecError::new(path, field("keys"), "`keys` is empty")
                    .at(at("keys"))
                    .hint("list the primary key columns, e.g. `keys: [Id]`"),
            );
            k
        }
        (Some(k), _) => k,
        (None, Some(def)) if !def.primary_key.is_empty() => def.primary_key.clone(),
        (None, _) if errors.len() > errors_before_schema => Vec::new(), // the DDL already failed
        (None, _) => {
            errors.push(
                SpecError::new(
                    path,
                    field("keys"),
                    "no key: `keys` is not set and the table definition has no PRIMARY KEY",
                )
                .at(at("apply"))
                .hint("add `keys: [Id]` or `PRIMARY KEY (Id) NOT ENFORCED` to the CREATE TABLE"),
            );
            Vec::new()
        }
    };

    let sequence_by = raw
        .sequence_by
        .unwrap_or_else(|| vec![COMMIT_TIMESTAMP.to_string()]);
    if scd == 2 && sequence_by.len() != 1 {
        errors.push(
            SpecError::new(
                path,
                field("sequence_by"),
                "`scd: 2` needs exactly one `sequence_by` column: it becomes __START_AT and __END_AT",
            )
            .at(at("sequence_by"))
            .hint("sequence by one column, e.g. `sequence_by: [SystemModstamp]`"),
        );
    }
    // A truncate empties silver whole, which is right only when nothing stored can be newer
    // than it: when changes are ordered by bronze commit time.
    if raw.apply_as_truncates.is_some() && sequence_by != [COMMIT_TIMESTAMP] {
        errors.push(
            SpecError::new(
                path,
                field("apply_as_truncates"),
                "`apply_as_truncates` needs `sequence_by: [_commit_timestamp]`: with another sequence a late truncate would erase newer rows",
            )
            .at(at("apply_as_truncates"))
            .hint("sequence by `_commit_timestamp`, or turn truncates into deletes of each key"),
        );
    }
    let history = pick_columns(
        raw.track_history,
        raw.track_history_except,
        ("track_history", "track_history_except"),
        "keep one: the columns whose change starts a new version, or the columns whose change does not",
        (path, text, name),
        errors,
    );
    let silver = match silver {
        Some(def) if scd == 2 && sequence_by.len() == 1 => {
            let ty = if sequence_by[0] == COMMIT_TIMESTAMP {
                Some(ColumnType::Timestamp)
            } else {
                def.columns
                    .iter()
                    .find(|c| c.name == sequence_by[0])
                    .map(|c| c.ty)
            };
            ty.map(|ty| with_history_columns(def.clone(), ty))
                .or(Some(def))
        }
        other => other,
    };
    if sequence_by.iter().any(|s| s == COMMIT_TIMESTAMP) && audit.ingest_timestamp.is_none() {
        errors.push(
            SpecError::new(path, field("sequence_by"), "`_commit_timestamp` orders the changes but `audit.ingest_timestamp` is off, so silver could not store it for the guard")
                .at(at("sequence_by"))
                .hint("keep `audit.ingest_timestamp`, or sequence by a silver column such as `LastModifiedDate`"),
        );
    }

    if let Some(def) = &silver {
        let names: Vec<&str> = def.columns.iter().map(|c| c.name.as_str()).collect();
        let mut check = |leaf: &str, col: &str, what: &str| {
            if !names.contains(&col) {
                let mut e = SpecError::new(
                    path,
                    field(leaf),
                    format!(
                        "unknown {what} column `{col}`: table `{}` has no such column",
                        def.name
                    ),
                )
                .at(at(leaf));
                e = match did_you_mean(col, names.iter().copied()) {
                    Some(near) => e.hint(format!("did you mean `{near}`?")),
                    None => e.hint(format!("columns are: {}", names.join(", "))),
                };
                errors.push(e);
            }
        };
        for k in &keys {
            check("keys", k, "key");
        }
        for c in match &history {
            UpdateColumns::Only(c) => c.as_slice(),
            UpdateColumns::Except(c) => c.as_slice(),
            UpdateColumns::All => &[],
        } {
            check(
                if matches!(history, UpdateColumns::Only(_)) {
                    "track_history"
                } else {
                    "track_history_except"
                },
                c,
                "history",
            );
        }
        for s in &sequence_by {
            if s != COMMIT_TIMESTAMP {
                check("sequence_by", s, "sequence");
            }
        }
    }

    let tz = raw.tz;
    if let Some(zone) = &tz
        && !valid_zone(zone)
    {
        errors.push(
            SpecError::new(path, field("tz"), format!("unknown time zone `{zone}`"))
                .at(at("tz"))
                .hint("use an IANA name such as `Asia/Tokyo` or an offset such as `+09:00`"),
        );
    }

    for (name, predicate) in &raw.expect.0 {
        if predicate.trim().is_empty() {
            errors.push(
                SpecError::new(
                    path,
                    field(&format!("expect.{name}")),
                    format!("expectation `{name}` is empty"),
                )
                .at(line_of(
                    text,
                    &["flows", name_of_flow, "apply", "expect", name],
                ))
                .hint("write a SQL predicate over silver columns, e.g. `Name IS NOT NULL`"),
            );
        }
    }
    if scd == 2 && raw.on_sequence_conflict == Some(OnSequenceConflict::Quarantine) {
        errors.push(
            SpecError::new(
                path,
                field("on_sequence_conflict"),
                "`on_sequence_conflict: quarantine` works with `scd: 1` only",
            )
            .at(at("on_sequence_conflict"))
            .hint("with `scd: 2` use `last` (the later change is kept) or `fail`"),
        );
    }
    if scd == 2 && raw.apply_as_truncates.is_some() {
        errors.push(
            SpecError::new(
                path,
                field("apply_as_truncates"),
                "`apply_as_truncates` works with `scd: 1` only: a truncate would erase history",
            )
            .at(at("apply_as_truncates"))
            .hint("use `apply_as_deletes` to close versions, or `scd: 1`"),
        );
    }
    for (leaf, predicate) in [
        ("apply_as_deletes", &raw.apply_as_deletes),
        ("apply_as_truncates", &raw.apply_as_truncates),
        ("where", &raw.filter),
    ] {
        if predicate.as_deref().is_some_and(|p| p.trim().is_empty()) {
            errors.push(
                SpecError::new(path, field(leaf), format!("`{leaf}` is empty"))
                    .at(at(leaf))
                    .hint("write a SQL predicate, e.g. `IsDeleted = 'true'`"),
            );
        }
    }

    let update_columns = pick_columns(
        raw.column_list,
        raw.except_column_list,
        ("column_list", "except_column_list"),
        "keep one: the columns an update sets, or the columns it leaves alone",
        (path, text, name),
        errors,
    );
    let (list_leaf, listed) = match &update_columns {
        UpdateColumns::Only(c) => ("column_list", c.as_slice()),
        UpdateColumns::Except(c) => ("except_column_list", c.as_slice()),
        UpdateColumns::All => ("column_list", &[][..]),
    };
    for c in listed {
        if keys.contains(c) {
            errors.push(
                SpecError::new(
                    path,
                    field(list_leaf),
                    format!("key column `{c}` cannot be listed: keys never change"),
                )
                .at(at(list_leaf))
                .hint("list only non-key columns"),
            );
        }
    }
    if let Some(def) = &silver {
        let names: Vec<&str> = def.columns.iter().map(|c| c.name.as_str()).collect();
        for c in listed {
            if !names.contains(&c.as_str()) {
                let e = SpecError::new(
                    path,
                    field(list_leaf),
                    format!(
                        "unknown column `{c}`: table `{}` has no such column",
                        def.name
                    ),
                )
                .at(at(list_leaf));
                errors.push(match did_you_mean(c, names.iter().copied()) {
                    Some(near) => e.hint(format!("did you mean `{near}`?")),
                    None => e.hint(format!("columns are: {}", names.join(", "))),
                });
            }
        }
    }

    let tombstone_retention = match raw.tombstone_retention.as_deref() {
        None | Some("forever") => None,
        Some(text) => match parse_duration(text) {
            Some(d) => Some(d),
            None => {
                errors.push(
                    SpecError::new(
                        path,
                        field("tombstone_retention"),
                        format!("`{text}` is not a duration"),
                    )
                    .at(at("tombstone_retention"))
                    .hint("write `forever` (the default) or a number with a unit: `90d`, `12h`, `30m`"),
                );
                None
            }
        },
    };

    if errors.len() > before {
        return None;
    }
    Some(ApplyFlow {
        from: from?,
        into: into?,
        silver,
        schema_file,
        keys,
        sequence_by,
        audit,
        on_cast_error: raw.on_cast_error.unwrap_or_default(),
        tz,
        apply_as_deletes: raw.apply_as_deletes,
        apply_as_truncates: raw.apply_as_truncates,
        source_deletes: raw.source_deletes.unwrap_or_default(),
        ignore_null_updates: raw.ignore_null_updates,
        update_columns,
        filter: raw.filter,
        tombstone_retention,
        expectations: raw.expect.0.into_iter().collect(),
        scd,
        history,
        schema_evolution: raw.schema_evolution.unwrap_or_default(),
        widen_types: raw.widen_types,
        on_violation: raw.on_violation.unwrap_or_default(),
        on_sequence_conflict: raw.on_sequence_conflict.unwrap_or_default(),
    })
}

/// The columns an option pair picks (`column_list` / `except_column_list`,
/// `track_history` / `track_history_except`): one of them, never both.
fn pick_columns(
    only: Option<Vec<String>>,
    except: Option<Vec<String>>,
    (only_leaf, except_leaf): (&str, &str),
    hint: &str,
    (path, text, flow): (&Path, &str, &str),
    errors: &mut Vec<SpecError>,
) -> UpdateColumns {
    match (only, except) {
        (Some(_), Some(_)) => {
            errors.push(
                SpecError::new(
                    path,
                    format!("flows.{flow}.apply.{except_leaf}"),
                    format!("`{only_leaf}` and `{except_leaf}` are both set"),
                )
                .at(line_of(text, &["flows", flow, "apply", except_leaf]))
                .hint(hint),
            );
            UpdateColumns::All
        }
        (Some(c), None) => UpdateColumns::Only(c),
        (None, Some(c)) => UpdateColumns::Except(c),
        (None, None) => UpdateColumns::All,
    }
}

/// Parses a duration written as a number and a unit: `90d`, `12h`, `30m`, `45s`, `2w`.
pub fn parse_duration(text: &str) -> Option<std::time::Duration> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = t.split_at(split);
    let n: u64 = number.parse().ok()?;
    let secs = match unit.trim() {
        "s" | "sec" | "secs" | "second" | "seconds" => 1,
        "m" | "min" | "mins" | "minute" | "minutes" => 60,
        "h" | "hour" | "hours" => 3600,
        "d" | "day" | "days" => 86_400,
        "w" | "week" | "weeks" => 7 * 86_400,
        _ => return None,
    };
    Some(std::time::Duration::from_secs(n.checked_mul(secs)?))
}

/// Whether two exports write to the same folder.
fn same_place(a: &ExportFlow, b: &ExportFlow) -> bool {
    let clean = |p: &Path| {
        p.components()
            .filter(|c| !matches!(c, std::path::Component::CurDir))
            .collect::<PathBuf>()
    };
    match (&a.url, &b.url) {
        (Some(x), Some(y)) => x.trim_end_matches('/') == y.trim_end_matches('/'),
        (None, None) => clean(&a.folder) == clean(&b.folder),
        _ => false,
    }
}

/// Reads the CREATE TABLE file `file` named by option `field` (at `line`) of `path`.
pub(crate) fn read_table_def(
    path: &Path,
    file: &Path,
    field: &str,
    line: Option<usize>,
    errors: &mut Vec<SpecError>,
) -> Option<TableDef> {
    match std::fs::read_to_string(file) {
        Ok(sql) => match ddl::parse_table(&sql, file) {
            Ok(def) => Some(def),
            Err(es) => {
                errors.extend(es.0);
                None
            }
        },
        Err(e) => {
            errors.push(
                SpecError::new(
                    path,
                    field,
                    format!("cannot read `{}`: {e}", file.display()),
                )
                .at(line)
                .hint("`schema:` is a path to a CREATE TABLE file, relative to the pipeline file"),
            );
            None
        }
    }
}

/// Adds the audit columns to a silver definition when the DDL does not declare them, and
/// checks their type when it does.
fn with_audit_columns(
    mut def: TableDef,
    audit: &AuditColumns,
    path: &Path,
    field: &str,
    line: Option<usize>,
    errors: &mut Vec<SpecError>,
) -> TableDef {
    for name in [&audit.ingest_timestamp, &audit.update_timestamp]
        .into_iter()
        .flatten()
    {
        match def.columns.iter().find(|c| &c.name == name) {
            Some(c) if c.ty != ColumnType::Timestamp => errors.push(
                SpecError::new(
                    path,
                    field,
                    format!("audit column `{name}` is {} in the table definition", c.ty),
                )
                .at(line)
                .hint("declare it as TIMESTAMP, or name another audit column"),
            ),
            Some(_) => {}
            None => def.columns.push(ddl::ColumnDef {
                name: name.clone(),
                ty: ColumnType::Timestamp,
                nullable: true,
            }),
        }
    }
    def
}

pub(crate) fn valid_zone(zone: &str) -> bool {
    if zone.parse::<chrono_tz::Tz>().is_ok() {
        return true;
    }
    let b = zone.as_bytes();
    matches!(b.first(), Some(b'+' | b'-'))
        && zone[1..].chars().all(|c| c.is_ascii_digit() || c == ':')
        && matches!(zone.len(), 3 | 5 | 6)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Pipeline> {
        Pipeline::from_str(text, Path::new("smelt.yaml"))
    }

    #[test]
    fn minimal_apply_flow_gets_defaults() {
        let p = load("lake: ./lake\nflows:\n  p:\n    apply:\n      from: bronze.p\n      into: silver.p\n      keys: [Id]\n").unwrap();
        let FlowKind::Apply(a) = &p.flows[0].kind else {
            panic!()
        };
        assert_eq!(a.sequence_by, vec!["_commit_timestamp"]);
        assert_eq!(a.on_cast_error, OnCastError::Null);
        assert_eq!(a.audit, AuditColumns::default());
        assert_eq!(p.lake, PathBuf::from("./lake"));
    }

    #[test]
    fn yaml_null_means_the_null_policy() {
        let p = load("lake: l\nflows:\n  p:\n    apply:\n      from: a.b\n      into: c.d\n      keys: [k]\n      on_cast_error: null\n").unwrap();
        let FlowKind::Apply(a) = &p.flows[0].kind else {
            panic!()
        };
        assert_eq!(a.on_cast_error, OnCastError::Null);
        let p = load("lake: l\nflows:\n  p:\n    apply:\n      from: a.b\n      into: c.d\n      keys: [k]\n      on_cast_error: fail\n").unwrap();
        let FlowKind::Apply(a) = &p.flows[0].kind else {
            panic!()
        };
        assert_eq!(a.on_cast_error, OnCastError::Fail);
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
    fn truncates_need_the_commit_time_sequence() {
        let err = load("lake: l\nflows:\n  p:\n    apply:\n      from: a.b\n      into: c.d\n      keys: [k]\n      sequence_by: [m]\n      apply_as_truncates: op = 'T'\n").unwrap_err();
        assert_eq!(err.0[0].field, "flows.p.apply.apply_as_truncates");
        assert!(
            err.0[0].message.contains("_commit_timestamp"),
            "{}",
            err.0[0].message
        );
    }

    #[test]
    fn a_name_defined_twice_names_the_map_and_the_line() {
        let err = load("lake: l\nflows:\n  p:\n    apply:\n      from: a.b\n      into: c.d\n      keys: [k]\n      expect:\n        named: x > 1\n        named: x > 2\n").unwrap_err();
        let e = &err.0[0];
        assert!(
            e.message.contains("`named` is defined twice"),
            "{}",
            e.message
        );
        assert!(e.field.contains("expect"), "{}", e.field);
        assert!(e.line.is_some());
    }

    #[test]
    fn zones() {
        for z in ["UTC", "Asia/Tokyo", "+09:00", "-0500", "+09"] {
            assert!(valid_zone(z), "{z}");
        }
        for z in ["Mars/Olympus", "+9:00:00x", "JST9"] {
            assert!(!valid_zone(z), "{z}");
        }
    }
}
