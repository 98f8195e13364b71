//! What each pipeline predicate sees, and what it may say so that it means the same on
//! both engines.
//!
//! A predicate is parsed once ([`smelt_spec::Predicate`]); both engines check the columns it
//! reads against its scope here, with the same message, and write it for themselves. The
//! Spark engine writes only the functions of [`SHARED_FUNCTIONS`] (under Spark's name) and
//! refuses the rest by name: a function that exists on both engines under one name but
//! computes something else (DataFusion's `log` is base 10, Spark's natural; `concat` skips
//! NULLs embedded and not on Spark) would otherwise change silver silently.

use smelt_spec::{ApplyFlow, END_AT, START_AT};

/// The change columns a bronze row carries: its kind, its commit's version and time.
pub const CHANGE_COLUMNS: [&str; 3] = [
    "_change_type",
    crate::order::COMMIT_VERSION,
    smelt_spec::COMMIT_TIMESTAMP,
];

/// Columns smelt fills itself: the audit columns and, for SCD2, the history bounds.
pub fn is_audit(flow: &ApplyFlow, name: &str) -> bool {
    Some(name) == flow.audit.ingest_timestamp.as_deref()
        || Some(name) == flow.audit.update_timestamp.as_deref()
        || (flow.scd == 2 && (name == START_AT || name == END_AT))
}

/// What `apply_as_deletes` and `apply_as_truncates` see: bronze's columns as stored, and
/// the change columns.
pub fn change_scope<'a>(bronze: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut scope: Vec<String> = bronze.into_iter().map(String::from).collect();
    for c in CHANGE_COLUMNS {
        if !scope.iter().any(|s| s == c) {
            scope.push(c.to_string());
        }
    }
    scope
}

/// What an expectation sees: silver's columns but those smelt fills, typed, and the
/// change's `_commit_timestamp` and `_commit_version`.
pub fn expectation_scope<'a>(
    flow: &ApplyFlow,
    silver: impl IntoIterator<Item = &'a str>,
) -> Vec<String> {
    let mut scope: Vec<String> = silver
        .into_iter()
        .filter(|c| !is_audit(flow, c))
        .map(String::from)
        .collect();
    // The change columns but `_change_type` (an expectation sees upserts only).
    for c in [smelt_spec::COMMIT_TIMESTAMP, crate::order::COMMIT_VERSION] {
        if !scope.iter().any(|s| s == c) {
            scope.push(c.to_string());
        }
    }
    scope
}

/// Which columns an apply flow's predicate sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sees {
    /// [`expectation_scope`]: the typed change.
    Expectation,
    /// [`state_scope`]: the key's state.
    State,
    /// [`change_scope`]: the change as bronze holds it.
    Change,
}

/// An apply flow's predicates as written: the option each is (for messages, e.g.
/// "`where`"), its text, and what it sees.
pub fn apply_predicates(flow: &ApplyFlow) -> Vec<(String, &str, Sees)> {
    let mut out: Vec<(String, &str, Sees)> = flow
        .expectations
        .iter()
        .map(|(name, p)| {
            (
                format!("expectation `{name}`"),
                p.as_str(),
                Sees::Expectation,
            )
        })
        .collect();
    out.extend(
        flow.filter
            .iter()
            .map(|p| ("`where`".into(), p.as_str(), Sees::State)),
    );
    for (what, p) in [
        ("`apply_as_deletes`", &flow.apply_as_deletes),
        ("`apply_as_truncates`", &flow.apply_as_truncates),
    ] {
        out.extend(
            p.iter()
                .map(|p| (what.to_string(), p.as_str(), Sees::Change)),
        );
    }
    out
}

/// The columns a predicate that `sees` so sees, silver's columns being `silver` and
/// bronze's `bronze`.
pub fn scope(flow: &ApplyFlow, sees: Sees, silver: &[&str], bronze: &[&str]) -> Vec<String> {
    match sees {
        Sees::Expectation => expectation_scope(flow, silver.iter().copied()),
        Sees::State => state_scope(flow, silver.iter().copied()),
        Sees::Change => change_scope(bronze.iter().copied()),
    }
}

/// What an apply flow's `where` sees: the key's state — silver's columns but the update
/// audit column and the history bounds (the ingest audit column is the winning change's).
pub fn state_scope<'a>(flow: &ApplyFlow, silver: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let update = flow.audit.update_timestamp.as_deref();
    silver
        .into_iter()
        .filter(|c| Some(*c) != update && *c != START_AT && *c != END_AT)
        .map(String::from)
        .collect()
}

/// The functions a predicate may call on both engines: DataFusion's name, then Spark's.
/// Each computes the same on both for the values a predicate meets.
pub const SHARED_FUNCTIONS: &[(&str, &str)] = &[
    ("abs", "abs"),
    ("btrim", "btrim"),
    ("ceil", "ceil"),
    ("char_length", "char_length"),
    ("character_length", "character_length"),
    ("coalesce", "coalesce"),
    ("ends_with", "endswith"),
    ("floor", "floor"),
    ("greatest", "greatest"),
    ("ifnull", "ifnull"),
    ("isnan", "isnan"),
    ("least", "least"),
    ("length", "length"),
    ("lower", "lower"),
    ("ltrim", "ltrim"),
    ("nullif", "nullif"),
    ("nvl", "nvl"),
    ("regexp_like", "regexp_like"),
    ("replace", "replace"),
    ("rtrim", "rtrim"),
    ("starts_with", "startswith"),
    ("trim", "trim"),
    ("upper", "upper"),
];

/// Why a function is not among [`SHARED_FUNCTIONS`], for the ones users reach for.
fn why_not(name: &str) -> &'static str {
    match name {
        "log" => "`log` is base 10 embedded and the natural logarithm on Spark",
        "concat" => "`concat` skips NULLs embedded and is NULL on Spark; write `a || b`",
        "to_date" | "to_timestamp" => {
            "its format strings are chrono's embedded and Java's on Spark"
        }
        "left" | "right" => {
            "a negative length counts from the other end embedded and gives '' on Spark"
        }
        "substr" | "substring" => {
            "a start of 0 or less counts from the other end on Spark and not embedded"
        }
        "round" => "a double is rounded in binary embedded and as a decimal on Spark",
        "date_trunc" => "it truncates in UTC embedded and in the flow's `tz` on Spark",
        "now" | "current_date" | "current_timestamp" => {
            "the time of a run is not the same value on both engines; compare with `_commit_timestamp`"
        }
        _ => "it is not one of the functions that compute the same on both engines",
    }
}

/// Spark's name for function `name` of a predicate, or the message and hint of its refusal.
pub fn spark_function(name: &str) -> Result<&'static str, (String, String)> {
    let lower = name.to_lowercase();
    SHARED_FUNCTIONS
        .iter()
        .find(|(df, _)| *df == lower)
        .map(|(_, spark)| *spark)
        .ok_or_else(|| {
            (
                format!(
                    "the function `{name}` does not run on Spark as it runs embedded: {}",
                    why_not(&lower)
                ),
                format!(
                    "use one of {}, or run the flow with `--engine embedded`",
                    SHARED_FUNCTIONS
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })
}

/// Why `/` is refused in a predicate that runs on Spark.
pub const SPARK_DIVISION: (&str, &str) = (
    "`/` divides integers without a remainder embedded and to a fraction on Spark",
    "compare products instead (`a > 2 * b`), or run the flow with `--engine embedded`",
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spark_names_and_refusals() {
        assert_eq!(spark_function("STARTS_WITH"), Ok("startswith"));
        assert_eq!(spark_function("lower"), Ok("lower"));
        for name in ["left", "substr", "round", "date_trunc"] {
            assert!(spark_function(name).is_err(), "{name}");
        }
        let (message, hint) = spark_function("log").unwrap_err();
        assert!(message.contains("base 10"), "{message}");
        assert!(hint.contains("coalesce"), "{hint}");
    }

    #[test]
    fn the_change_scope_adds_the_change_columns_once() {
        assert_eq!(
            change_scope(["Id", "_commit_version"]),
            ["Id", "_commit_version", "_change_type", "_commit_timestamp"]
        );
    }
}
