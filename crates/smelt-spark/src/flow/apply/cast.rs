//! `smelt_changes`: every change read, its kind, its columns cast to silver's types, its
//! cast failures and expectations, cached on the cluster; their counts; the first failure
//! of an `on_*: fail` option. Both SCDs start from it.

use smelt_spec::{ApplyFlow, OnCastError, OnViolation, SourceDeletes};

use smelt_engine::Result;

use super::shape::Shape;
use super::{Apply, Counts, fail};
use crate::session::Session;
use crate::sql::{ident, try_cast as cast};
use crate::views::{CHANGES, RAW};

impl Apply<'_> {
    /// Step 3a: the typed changes, cached; their counts; `on_cast_error: fail`.
    pub(super) async fn changes(&self, s: &Session<'_>, shape: &Shape) -> Result<Counts> {
        s.setting(format!("DROP VIEW IF EXISTS {CHANGES}")).await?;
        s.read("read and cast the changes", changes_cache(self.spec, shape))
            .await?;
        let rows = s
            .read("count the changes", changes_counts(self.spec, shape))
            .await?;
        let one = |name: &str| rows.ints(name).first().copied().flatten().unwrap_or(0) as usize;
        let mut counts = Counts {
            changes_read: one("changes_read"),
            ignored: one("ignored"),
            ..Counts::default()
        };
        counts.kept = counts.changes_read - counts.ignored - one("bad");
        for i in shape.cast_columns() {
            let failed = one(&format!("f{i}"));
            if failed > 0 {
                counts
                    .cast_failures
                    .insert(shape.silver.columns[i].name.clone(), failed);
            }
        }
        for (j, (name, _)) in self.spec.expectations.iter().enumerate() {
            let failed = one(&format!("x{j}"));
            if failed > 0 {
                counts.expectations.insert(name.clone(), failed);
            }
        }
        if self.spec.on_cast_error == OnCastError::Fail && !counts.cast_failures.is_empty() {
            return Err(fail::cast(s, self.spec, shape, &counts.cast_failures).await);
        }
        if self.spec.on_violation == OnViolation::Fail && !counts.expectations.is_empty() {
            return Err(fail::violation(s, self.written, shape, &counts.expectations).await);
        }
        Ok(counts)
    }
}

/// `smelt_changes`: every change row read, its kind (`upsert`, `delete`, `ignored`), its
/// columns cast to silver's types (`__v<i>`), per cast column whether the cast failed
/// (`__f<i>`: a value that is neither NULL nor blank and does not cast), per expectation
/// whether the change fails it (`__x<j>`) and whether it is left out of the apply (`__bad`:
/// quarantined, or dropped by `on_violation`).
pub(crate) fn changes_cache(spec: &ApplyFlow, shape: &Shape) -> String {
    let delete = match &spec.apply_as_deletes {
        Some(pred) => format!("coalesce(({pred}), false)"),
        None => "false".to_string(),
    };
    // `source_deletes: apply`: bronze's own deletes (change-data rows) delete the key.
    let source_delete = match spec.source_deletes {
        SourceDeletes::Apply => "WHEN r._change_type = 'delete' THEN 'delete' ",
        SourceDeletes::Ignore => "",
    };
    let mut cols = vec![format!(
        "CASE WHEN r._change_type IN ('insert', 'update_postimage') \
         THEN CASE WHEN {delete} THEN 'delete' ELSE 'upsert' END {source_delete}ELSE 'ignored' END AS __kind"
    )];
    for i in shape.cast_columns() {
        let c = &shape.silver.columns[i];
        let raw = format!("r.{}", ident(&c.name));
        let (typed, failed) = cast(&raw, c.ty);
        cols.push(format!("{typed} AS __v{i}"));
        cols.push(format!("{failed} AS __f{i}"));
    }
    // `on_cast_error: quarantine`: an upsert with a value that does not cast is left out
    // whole (its rejects rows record it), before the latest per key is picked.
    let bad = match spec.on_cast_error {
        OnCastError::Quarantine => {
            let any: Vec<String> = shape
                .cast_columns()
                .map(|i| format!("__f{i}"))
                .chain(["false".to_string()])
                .collect();
            format!("(__kind = 'upsert' AND ({}))", any.join(" OR "))
        }
        _ => "false".to_string(),
    };
    // With expectations, `__bad` is widened after them: the casts' own is `__cbad`.
    let flag = match spec.expectations.is_empty() {
        true => "__bad",
        false => "__cbad",
    };
    let cast = format!(
        "SELECT *, {bad} AS {flag} FROM (SELECT r.*,\n  {}\nFROM {RAW} r) r",
        cols.join(",\n  ")
    );
    format!(
        "CACHE TABLE {CHANGES} AS\n{}",
        expectations(spec, shape, &cast)
    )
}

/// The changes of `cast` with the expectations checked (`__x<j>`) and `__bad` widened to
/// the changes `on_violation` leaves out, as the embedded engine does: on the upserts not
/// quarantined already, a predicate that is false or NULL fails; under `drop` and
/// `quarantine` a change counts for the first expectation it fails only.
fn expectations(spec: &ApplyFlow, shape: &Shape, cast: &str) -> String {
    if spec.expectations.is_empty() {
        return cast.to_string();
    }
    let leaves = matches!(
        spec.on_violation,
        OnViolation::Drop | OnViolation::Quarantine
    );
    // The predicates see the typed values under silver's names (and the change's
    // `_commit_timestamp` / `_commit_version`); the row itself rides along in `__row`.
    let typed: Vec<String> = shape
        .cast_columns()
        .map(|i| format!("__v{i} AS {}", shape.name(i)))
        .chain(["_commit_timestamp".into(), "_commit_version".into()])
        .collect();
    let mut checks = Vec::new();
    for (j, (_, pred)) in spec.expectations.iter().enumerate() {
        let earlier: Vec<String> = (0..j).map(|k| format!("NOT __x{k}")).collect();
        let mut fails = vec![
            "__row.__kind = 'upsert'".to_string(),
            "NOT __row.__cbad".to_string(),
            format!("NOT coalesce(({pred}), false)"),
        ];
        if leaves {
            fails.extend(earlier);
        }
        checks.push(format!("({}) AS __x{j}", fails.join(" AND ")));
    }
    // Each check refers to the ones before it: one projection each.
    let mut sql = format!(
        "SELECT {}, struct(r.*) AS __row FROM ({cast}) r",
        typed.join(", ")
    );
    for (j, check) in checks.iter().enumerate() {
        sql = format!("SELECT *, {check} FROM ({sql}) e{j}");
    }
    let xs: Vec<String> = (0..checks.len()).map(|j| format!("__x{j}")).collect();
    let bad = match leaves {
        true => format!("(__row.__cbad OR {})", xs.join(" OR ")),
        false => "__row.__cbad".to_string(),
    };
    format!(
        "SELECT __row.*, {}, {bad} AS __bad FROM ({sql}) e",
        xs.join(", ")
    )
}

/// The counts of the changes read (collected): rows, ignored, left out, the cast failures
/// of each cast column (`f<i>`) and the changes failing each expectation (`x<j>`).
pub(crate) fn changes_counts(spec: &ApplyFlow, shape: &Shape) -> String {
    let mut cols = vec![
        "count(*) AS changes_read".to_string(),
        "count_if(__kind = 'ignored') AS ignored".to_string(),
        "count_if(__bad) AS bad".to_string(),
    ];
    for i in shape.cast_columns() {
        cols.push(format!("count_if(__kind = 'upsert' AND __f{i}) AS f{i}"));
    }
    for j in 0..spec.expectations.len() {
        cols.push(format!("count_if(__x{j}) AS x{j}"));
    }
    format!("SELECT {} FROM {CHANGES}", cols.join(", "))
}
