//! Validates an `apply:` block into an `ApplyFlow`.

use std::path::Path;

use super::{
    ApplyFlow, AuditColumns, COMMIT_TIMESTAMP, CastDialect, RawApply, UpdateTimestampOn,
    with_audit_columns, with_history_columns,
};
use crate::check::{Checks, parse_duration, pick_columns, read_table_def};
use crate::ddl::{ColumnType, TableDef, TableName};
use crate::error::{SpecError, did_you_mean};
use crate::locate::line_of;
use crate::policy::{ChangeData, OnSequenceConflict, OptimizeMode, UpdateColumns, WriteMode};
use crate::predicate::Predicate;

pub(crate) fn apply_flow(
    path: &Path,
    dir: &Path,
    text: &str,
    name: &str,
    mut raw: RawApply,
    errors: &mut Vec<SpecError>,
) -> Option<ApplyFlow> {
    let before = errors.len();
    let mut c = Checks {
        path,
        text,
        flow: name,
        kind: "apply",
        errors,
    };
    let hint = "write tables as `schema.table`, e.g. `bronze.product2`";
    let from = table(&mut c, "from", &raw.from, hint);
    let into = table(&mut c, "into", &raw.into, hint);
    let scd = raw.scd.unwrap_or(1);
    check_scd(&mut c, scd, &raw);
    // With derived change data the guard does not read stored data, so by default every
    // write stamps the update time (`apply`), as seed 000's MERGE does.
    let derived = raw.change_data == Some(ChangeData::Derived);
    let audit = audit_columns(&mut c, scd, raw.audit.take(), derived);

    let schema_file = raw.schema.as_ref().map(|s| dir.join(s));
    let errors_before_schema = c.errors.len();
    let silver = schema_file.as_ref().and_then(|file| {
        let def = read_table_def(path, file, &c.field("schema"), c.at("schema"), c.errors)?;
        let (field, at) = (c.field("audit"), c.at("audit"));
        Some(with_audit_columns(def, &audit, path, &field, at, c.errors))
    });
    let ddl_failed = c.errors.len() > errors_before_schema;
    let keys = keys(&mut c, raw.keys.take(), silver.as_ref(), ddl_failed);

    let sequence_by = raw
        .sequence_by
        .take()
        .unwrap_or_else(|| vec![COMMIT_TIMESTAMP.to_string()]);
    check_sequence(&mut c, scd, &sequence_by, &raw, &audit);
    let history = pick_columns(
        raw.track_history.take(),
        raw.track_history_except.take(),
        ("track_history", "track_history_except"),
        "keep one: the columns whose change starts a new version, or the columns whose change does not",
        (path, text, name),
        c.errors,
    );
    let silver = silver.map(|def| history_columns(def, scd, &sequence_by));
    if let Some(def) = &silver {
        check_named_columns(&mut c, def, &keys, &history, &sequence_by);
    }
    c.zone("tz", &raw.tz);
    check_options(&mut c, scd, &raw, into.as_ref());

    let update_columns = pick_columns(
        raw.column_list.take(),
        raw.except_column_list.take(),
        ("column_list", "except_column_list"),
        "keep one: the columns an update sets, or the columns it leaves alone",
        (path, text, name),
        c.errors,
    );
    check_update_columns(&mut c, &update_columns, &keys, silver.as_ref());
    let tombstone_retention = tombstone_retention(&mut c, raw.tombstone_retention.as_deref());

    if c.errors.len() > before {
        return None;
    }
    let cast_dialect = raw.cast_dialect.unwrap_or(match &silver {
        Some(def) if def.bigquery_types => CastDialect::BigQuery,
        _ => CastDialect::Spark,
    });
    Some(ApplyFlow {
        from: from?,
        into: into?,
        silver,
        schema_file,
        keys,
        sequence_by,
        audit,
        on_cast_error: raw.on_cast_error.unwrap_or_default(),
        cast_dialect,
        tz: raw.tz,
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
        write_mode: raw.write_mode.unwrap_or_default(),
        change_data: raw.change_data.unwrap_or_default(),
        optimize: raw.optimize.unwrap_or_default(),
    })
}

/// `value` of option `leaf` as a table name.
fn table(c: &mut Checks<'_>, leaf: &str, value: &str, hint: &str) -> Option<TableName> {
    let t = TableName::parse(value);
    if t.is_none() {
        let e = SpecError::new(
            c.path,
            c.field(leaf),
            format!("`{value}` is not a table name"),
        )
        .at(c.at(leaf))
        .hint(hint);
        c.errors.push(e);
    }
    t
}

/// Pushes an error on option `leaf`, at `line`.
fn push(
    c: &mut Checks<'_>,
    leaf: &str,
    line: Option<usize>,
    message: impl Into<String>,
    hint: &str,
) {
    let e = SpecError::new(c.path, c.field(leaf), message)
        .at(line)
        .hint(hint);
    c.errors.push(e);
}

/// Pushes an error on option `leaf`, at its line.
fn refuse(c: &mut Checks<'_>, leaf: &str, message: impl Into<String>, hint: &str) {
    let line = c.at(leaf);
    push(c, leaf, line, message, hint);
}

/// The SCD type, and the options only SCD2 takes.
fn check_scd(c: &mut Checks<'_>, scd: u8, raw: &RawApply) {
    if !matches!(scd, 1 | 2) {
        refuse(
            c,
            "scd",
            format!("there is no SCD type {scd}"),
            "use `scd: 1` (one row per key) or `scd: 2` (history)",
        );
    }
    if scd != 2 && (raw.track_history.is_some() || raw.track_history_except.is_some()) {
        let line = c.at("track_history").or(c.at("track_history_except"));
        push(
            c,
            "track_history",
            line,
            "`track_history` needs `scd: 2`",
            "add `scd: 2`, or remove the option",
        );
    }
}

/// The audit columns, checked against the SCD type; `update_timestamp_on` by default
/// `apply` with derived change data, else `change`.
fn audit_columns(
    c: &mut Checks<'_>,
    scd: u8,
    audit: Option<super::RawAudit>,
    derived: bool,
) -> AuditColumns {
    let default_on = match derived {
        true => UpdateTimestampOn::Apply,
        false => UpdateTimestampOn::Change,
    };
    let Some(a) = audit else {
        return AuditColumns {
            update_timestamp_on: default_on,
            ..AuditColumns::default()
        };
    };
    if scd == 2 && a.update_timestamp_on.is_some() {
        refuse(
            c,
            "audit",
            "`audit.update_timestamp_on` applies to `scd: 1`; `scd: 2` stamps every version it writes",
            "remove `update_timestamp_on`",
        );
    }
    if a.update_timestamp.is_none() && a.update_timestamp_on.is_some() {
        refuse(
            c,
            "audit",
            "`audit.update_timestamp_on` is set but `audit.update_timestamp` is off: there is no stamp to set",
            "name the column with `update_timestamp:`, or remove `update_timestamp_on`",
        );
    }
    AuditColumns {
        ingest_timestamp: a.ingest_timestamp,
        update_timestamp: a.update_timestamp,
        update_timestamp_on: a.update_timestamp_on.unwrap_or(default_on),
    }
}

/// The key columns: `keys`, else the DDL's primary key (`ddl_failed`: the DDL was refused
/// already, so its key is not asked for again).
fn keys(
    c: &mut Checks<'_>,
    keys: Option<Vec<String>>,
    silver: Option<&TableDef>,
    ddl_failed: bool,
) -> Vec<String> {
    match (keys, silver) {
        (Some(k), _) if k.is_empty() => {
            refuse(
                c,
                "keys",
                "`keys` is empty",
                "list the primary key columns, e.g. `keys: [Id]`",
            );
            k
        }
        (Some(k), _) => k,
        (None, Some(def)) if !def.primary_key.is_empty() => def.primary_key.clone(),
        (None, _) if ddl_failed => Vec::new(),
        (None, _) => {
            let line = c.at("apply");
            push(
                c,
                "keys",
                line,
                "no key: `keys` is not set and the table definition has no PRIMARY KEY",
                "add `keys: [Id]` or `PRIMARY KEY (Id) NOT ENFORCED` to the CREATE TABLE",
            );
            Vec::new()
        }
    }
}

/// `sequence_by` against the SCD type, truncates and the audit columns.
fn check_sequence(
    c: &mut Checks<'_>,
    scd: u8,
    sequence_by: &[String],
    raw: &RawApply,
    audit: &AuditColumns,
) {
    if scd == 2 && sequence_by.len() != 1 {
        refuse(
            c,
            "sequence_by",
            "`scd: 2` needs exactly one `sequence_by` column: it becomes __START_AT and __END_AT",
            "sequence by one column, e.g. `sequence_by: [SystemModstamp]`",
        );
    }
    // A truncate empties silver whole, which is right only when nothing stored can be newer
    // than it: when changes are ordered by bronze commit time.
    if raw.apply_as_truncates.is_some() && sequence_by != [COMMIT_TIMESTAMP] {
        refuse(
            c,
            "apply_as_truncates",
            "`apply_as_truncates` needs `sequence_by: [_commit_timestamp]`: with another sequence a late truncate would erase newer rows",
            "sequence by `_commit_timestamp`, or turn truncates into deletes of each key",
        );
    }
    if sequence_by.iter().any(|s| s == COMMIT_TIMESTAMP) && audit.ingest_timestamp.is_none() {
        refuse(
            c,
            "sequence_by",
            "`_commit_timestamp` orders the changes but `audit.ingest_timestamp` is off, so silver could not store it for the guard",
            "keep `audit.ingest_timestamp`, or sequence by a silver column such as `LastModifiedDate`",
        );
    }
}

/// An SCD2 silver's DDL with the history columns, typed as its one sequence column.
fn history_columns(def: TableDef, scd: u8, sequence_by: &[String]) -> TableDef {
    if scd != 2 || sequence_by.len() != 1 {
        return def;
    }
    let ty = if sequence_by[0] == COMMIT_TIMESTAMP {
        Some(ColumnType::Timestamp)
    } else {
        def.columns
            .iter()
            .find(|c| c.name == sequence_by[0])
            .map(|c| c.ty)
    };
    match ty {
        Some(ty) => with_history_columns(def, ty),
        None => def,
    }
}

/// The error of option `leaf` naming column `col`, which `def` lacks (`message`).
fn unknown_column(c: &mut Checks<'_>, leaf: &str, col: &str, message: String, def: &TableDef) {
    let names: Vec<&str> = def.columns.iter().map(|c| c.name.as_str()).collect();
    let e = SpecError::new(c.path, c.field(leaf), message).at(c.at(leaf));
    c.errors
        .push(match did_you_mean(col, names.iter().copied()) {
            Some(near) => e.hint(format!("did you mean `{near}`?")),
            None => e.hint(format!("columns are: {}", names.join(", "))),
        });
}

/// The key, history and sequence columns are columns of the silver DDL `def`.
fn check_named_columns(
    c: &mut Checks<'_>,
    def: &TableDef,
    keys: &[String],
    history: &UpdateColumns,
    sequence_by: &[String],
) {
    let history_leaf = if matches!(history, UpdateColumns::Only(_)) {
        "track_history"
    } else {
        "track_history_except"
    };
    let history = match history {
        UpdateColumns::Only(c) | UpdateColumns::Except(c) => c.as_slice(),
        UpdateColumns::All => &[],
    };
    let named = (keys.iter().map(|k| ("keys", k, "key")))
        .chain(history.iter().map(|h| (history_leaf, h, "history")))
        .chain(
            (sequence_by.iter())
                .filter(|s| *s != COMMIT_TIMESTAMP)
                .map(|s| ("sequence_by", s, "sequence")),
        );
    for (leaf, col, what) in named {
        if !def.columns.iter().any(|d| &d.name == col) {
            let message = format!(
                "unknown {what} column `{col}`: table `{}` has no such column",
                def.name
            );
            unknown_column(c, leaf, col, message, def);
        }
    }
}

/// Expectations and predicates that are empty, and the options an SCD type or a table
/// format does not take.
fn check_options(c: &mut Checks<'_>, scd: u8, raw: &RawApply, into: Option<&TableName>) {
    for (name, predicate) in &raw.expect.0 {
        if predicate.trim().is_empty() {
            let line = line_of(c.text, &["flows", c.flow, "apply", "expect", name]);
            push(
                c,
                &format!("expect.{name}"),
                line,
                format!("expectation `{name}` is empty"),
                "write a SQL predicate over silver columns, e.g. `Name IS NOT NULL`",
            );
        } else if let Err(e) = Predicate::parse(predicate) {
            let line = line_of(c.text, &["flows", c.flow, "apply", "expect", name]);
            let message = format!("expectation `{name}`: {}", e.message);
            push(c, &format!("expect.{name}"), line, message, &e.hint);
        }
    }
    if raw.optimize == Some(OptimizeMode::Auto) && into.is_some_and(|t| t.catalog.is_some()) {
        refuse(
            c,
            "optimize",
            format!(
                "`optimize: auto` works with Delta tables only: smelt does not compact Iceberg tables such as `{}` yet",
                raw.into
            ),
            "remove `optimize: auto`, and compact the table with Spark's `rewrite_data_files` procedure",
        );
    }
    if raw.change_data == Some(ChangeData::Derived) {
        if raw.write_mode != Some(WriteMode::MergeOnRead) {
            refuse(
                c,
                "change_data",
                "`change_data: derived` works with `write_mode: merge_on_read` only: a copy-on-write commit rewrites whole files, whose changes no reader can derive",
                "add `write_mode: merge_on_read`, or remove `change_data`",
            );
        } else if into.is_some_and(|t| t.catalog.is_some()) {
            refuse(
                c,
                "change_data",
                format!(
                    "`change_data` is for Delta tables: Iceberg tables such as `{}` write no change data, their readers always derive changes from snapshots",
                    raw.into
                ),
                "remove `change_data`",
            );
        }
    }
    if scd == 2 && raw.on_sequence_conflict == Some(OnSequenceConflict::Quarantine) {
        refuse(
            c,
            "on_sequence_conflict",
            "`on_sequence_conflict: quarantine` works with `scd: 1` only",
            "with `scd: 2` use `last` (the later change is kept) or `fail`",
        );
    }
    if scd == 2 && raw.apply_as_truncates.is_some() {
        refuse(
            c,
            "apply_as_truncates",
            "`apply_as_truncates` works with `scd: 1` only: a truncate would erase history",
            "use `apply_as_deletes` to close versions, or `scd: 1`",
        );
    }
    for (leaf, predicate) in [
        ("apply_as_deletes", &raw.apply_as_deletes),
        ("apply_as_truncates", &raw.apply_as_truncates),
        ("where", &raw.filter),
    ] {
        if predicate.as_deref().is_some_and(|p| p.trim().is_empty()) {
            refuse(
                c,
                leaf,
                format!("`{leaf}` is empty"),
                "write a SQL predicate, e.g. `IsDeleted = 'true'`",
            );
        } else if let Some(Err(e)) = predicate.as_deref().map(Predicate::parse) {
            refuse(c, leaf, format!("`{leaf}`: {}", e.message), &e.hint);
        }
    }
}

/// `column_list` / `except_column_list`: no key, and columns of the silver DDL.
fn check_update_columns(
    c: &mut Checks<'_>,
    update_columns: &UpdateColumns,
    keys: &[String],
    silver: Option<&TableDef>,
) {
    let (list_leaf, listed) = match update_columns {
        UpdateColumns::Only(c) => ("column_list", c.as_slice()),
        UpdateColumns::Except(c) => ("except_column_list", c.as_slice()),
        UpdateColumns::All => ("column_list", &[][..]),
    };
    for col in listed.iter().filter(|col| keys.contains(col)) {
        refuse(
            c,
            list_leaf,
            format!("key column `{col}` cannot be listed: keys never change"),
            "list only non-key columns",
        );
    }
    let Some(def) = silver else {
        return;
    };
    for col in listed {
        if !def.columns.iter().any(|d| &d.name == col) {
            let message = format!(
                "unknown column `{col}`: table `{}` has no such column",
                def.name
            );
            unknown_column(c, list_leaf, col, message, def);
        }
    }
}

/// `tombstone_retention`: `forever` (`None`) or a duration.
fn tombstone_retention(c: &mut Checks<'_>, text: Option<&str>) -> Option<std::time::Duration> {
    match text {
        None | Some("forever") => None,
        Some(text) => {
            let d = parse_duration(text);
            if d.is_none() {
                refuse(
                    c,
                    "tombstone_retention",
                    format!("`{text}` is not a duration"),
                    "write `forever` (the default) or a number with a unit: `90d`, `12h`, `30m`",
                );
            }
            d
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::error::Result;
    use crate::{AuditColumns, FlowKind, OnCastError, Pipeline};

    fn load(text: &str) -> Result<Pipeline> {
        Pipeline::from_str(text, Path::new("smelt.yaml"))
    }

    #[test]
    fn derived_change_data_stamps_every_write_unless_told_otherwise() {
        let base = "lake: ./lake\nflows:\n  p:\n    apply:\n      from: bronze.p\n      into: silver.p\n      keys: [Id]\n      write_mode: merge_on_read\n      change_data: derived\n";
        let on = |yaml: &str| {
            let p = load(yaml).unwrap();
            let FlowKind::Apply(a) = &p.flows[0].kind else {
                panic!()
            };
            (a.change_data, a.audit.update_timestamp_on)
        };
        use crate::{ChangeData, UpdateTimestampOn};
        assert_eq!(on(base), (ChangeData::Derived, UpdateTimestampOn::Apply));
        let told = format!("{base}      audit: {{update_timestamp_on: change}}\n");
        assert_eq!(on(&told), (ChangeData::Derived, UpdateTimestampOn::Change));
        let written = base.replace("      change_data: derived\n", "");
        assert_eq!(
            on(&written),
            (ChangeData::Written, UpdateTimestampOn::Change)
        );
    }

    #[test]
    fn update_timestamp_on_is_refused_where_it_would_do_nothing() {
        let base = "lake: ./lake\nflows:\n  p:\n    apply:\n      from: bronze.p\n      into: silver.p\n      keys: [Id]\n";
        let ok = load(&format!(
            "{base}      audit: {{update_timestamp_on: apply}}\n"
        ))
        .unwrap();
        let FlowKind::Apply(a) = &ok.flows[0].kind else {
            panic!()
        };
        assert_eq!(a.audit.update_timestamp_on, crate::UpdateTimestampOn::Apply);
        let scd2 = load(&format!(
            "{base}      scd: 2\n      sequence_by: [v]\n      audit: {{update_timestamp_on: apply}}\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(scd2.contains("applies to `scd: 1`"), "{scd2}");
        let off = load(&format!(
            "{base}      audit: {{update_timestamp: null, update_timestamp_on: change}}\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(off.contains("`audit.update_timestamp` is off"), "{off}");
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
        assert_eq!(p.lake, "./lake");
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
    fn truncates_need_the_commit_time_sequence() {
        let err = load("lake: l\nflows:\n  p:\n    apply:\n      from: a.b\n      into: c.d\n      keys: [k]\n      sequence_by: [m]\n      apply_as_truncates: op = 'T'\n").unwrap_err();
        assert_eq!(err.0[0].field, "flows.p.apply.apply_as_truncates");
        assert!(
            err.0[0].message.contains("_commit_timestamp"),
            "{}",
            err.0[0].message
        );
    }
}
