//! Validates an `apply:` block into an `ApplyFlow`.

use std::path::Path;

use super::{
    ApplyFlow, AuditColumns, COMMIT_TIMESTAMP, CastDialect, RawApply, with_audit_columns,
    with_history_columns,
};
use crate::check::{parse_duration, pick_columns, read_table_def, valid_zone};
use crate::ddl::{ColumnType, TableName};
use crate::error::{SpecError, did_you_mean};
use crate::locate::line_of;
use crate::policy::{OnSequenceConflict, OptimizeMode, UpdateColumns};

pub(crate) fn apply_flow(
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
        Some(a) => {
            if scd == 2 && a.update_timestamp_on.is_some() {
                errors.push(
                    SpecError::new(path, field("audit"), "`audit.update_timestamp_on` applies to `scd: 1`; `scd: 2` stamps every version it writes")
                        .at(at("audit"))
                        .hint("remove `update_timestamp_on`"),
                );
            }
            if a.update_timestamp.is_none() && a.update_timestamp_on.is_some() {
                errors.push(
                    SpecError::new(path, field("audit"), "`audit.update_timestamp_on` is set but `audit.update_timestamp` is off: there is no stamp to set")
                        .at(at("audit"))
                        .hint("name the column with `update_timestamp:`, or remove `update_timestamp_on`"),
                );
            }
            AuditColumns {
                ingest_timestamp: a.ingest_timestamp,
                update_timestamp: a.update_timestamp,
                update_timestamp_on: a.update_timestamp_on.unwrap_or_default(),
            }
        }
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
    if raw.optimize == Some(OptimizeMode::Auto)
        && into.as_ref().is_some_and(|t| t.catalog.is_some())
    {
        errors.push(
            SpecError::new(
                path,
                field("optimize"),
                format!(
                    "`optimize: auto` works with Delta tables only: smelt does not compact Iceberg tables such as `{}` yet",
                    raw.into
                ),
            )
            .at(at("optimize"))
            .hint("remove `optimize: auto`, and compact the table with Spark's `rewrite_data_files` procedure"),
        );
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
        write_mode: raw.write_mode.unwrap_or_default(),
        optimize: raw.optimize.unwrap_or_default(),
    })
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
