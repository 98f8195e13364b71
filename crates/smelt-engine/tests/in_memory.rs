//! The apply flow against the engine's ports in memory (`smelt_test::mem`): the run
//! contract without any storage.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use smelt_core::change::{CHANGE_TYPE, DELETE, INSERT};
use smelt_engine::flow::FlowRun;
use smelt_engine::flow::apply::{ApplyTables, RunContext, run_apply, tombstone_table};
use smelt_engine::ports::{Lake, Silent, TableRole};
use smelt_engine::rejects::rejects_table;
use smelt_engine::report::FlowReport;
use smelt_engine::{EngineError, Result};
use smelt_spec::{FlowKind, Pipeline, TableName};
use smelt_test::mem::{MemLake, MemSource};

/// Bronze commits, each a list of (id, value) rows. A value `v@s` has a sequence column
/// `seq` of `s` (else ten times the version), and `SRCDEL` is a change-feed `delete`.
type Commits = [Vec<(Option<&'static str>, &'static str)>];

fn bronze_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, true),
        Field::new("amount", DataType::Utf8, true),
        Field::new("seq", DataType::Utf8, true),
    ]))
}

/// The amount and sequence of a bronze value of commit `version` (see [`Commits`]).
fn split_value(raw: &str, version: usize) -> (&str, i64) {
    match raw.split_once('@') {
        Some((v, s)) => (v, s.parse().unwrap()),
        None => (raw, version as i64 * 10),
    }
}

/// Flow `f`'s bronze of `commits`, claiming `bytes` of data files (what plans a run's
/// memory).
fn bronze(f: &smelt_spec::ApplyFlow, commits: &Commits, bytes: u64) -> MemSource {
    let mut fields: Vec<Field> = bronze_schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new(CHANGE_TYPE, DataType::Utf8, false));
    let schema = Arc::new(Schema::new(fields));
    let batches = commits
        .iter()
        .enumerate()
        .map(|(v, rows)| {
            let split: Vec<(&str, i64)> = rows.iter().map(|r| split_value(r.1, v)).collect();
            let kind = |s: &(&str, i64)| if s.0 == "SRCDEL" { DELETE } else { INSERT };
            let columns: Vec<ArrayRef> = vec![
                Arc::new(StringArray::from(
                    rows.iter().map(|r| r.0).collect::<Vec<_>>(),
                )),
                Arc::new(StringArray::from_iter_values(split.iter().map(|s| s.0))),
                Arc::new(StringArray::from_iter_values(
                    split.iter().map(|s| s.1.to_string()),
                )),
                Arc::new(StringArray::from_iter_values(split.iter().map(kind))),
            ];
            Some(RecordBatch::try_new(Arc::clone(&schema), columns).expect("bronze columns"))
        })
        .collect();
    MemSource::new(f.from.clone(), bronze_schema(), batches).claiming(bytes)
}

/// A flow's silver, its tombstones and its rejects, in a lake of their own.
struct Tables {
    lake: MemLake,
    silver: TableName,
}

impl Tables {
    fn of(f: &smelt_spec::ApplyFlow) -> Self {
        Tables {
            lake: MemLake::new(),
            silver: f.into.clone(),
        }
    }

    /// Runs flow `name` over `source` as `smelt run` does, each table opened for the run.
    async fn run(
        &self,
        name: &str,
        f: &smelt_spec::ApplyFlow,
        ctx: &RunContext,
        source: &MemSource,
    ) -> Result<FlowReport> {
        let lake = &self.lake;
        let mut silver = lake.table(&f.into, TableRole::Silver).await?;
        let tombstones = tombstone_table(&f.into);
        let mut tombstones = lake.table(&tombstones, TableRole::Tombstones).await?;
        let mut rejects = lake
            .table(&rejects_table(&f.into), TableRole::Rejects)
            .await?;
        let tables = ApplyTables {
            silver: silver.as_mut(),
            tombstones: tombstones.as_mut(),
            rejects: rejects.as_mut(),
        };
        run_apply(FlowRun::new(name, f, ctx, &Silent), source, tables).await
    }

    /// Silver's rows (none before it is created).
    fn rows(&self) -> Option<RecordBatch> {
        self.lake.rows(&self.silver)
    }

    fn tombstones(&self) -> Option<RecordBatch> {
        self.lake.rows(&tombstone_table(&self.silver))
    }

    fn rejects(&self) -> Option<RecordBatch> {
        self.lake.rows(&rejects_table(&self.silver))
    }

    /// The number of commits of `table`.
    async fn commits_of(&self, table: &TableName) -> i64 {
        let view = self.lake.inspect(table).await.unwrap();
        view.version().map_or(0, |v| v + 1)
    }

    /// The number of silver's commits.
    async fn commits(&self) -> i64 {
        self.commits_of(&self.silver).await
    }

    /// Silver's property `key`.
    async fn property(&self, key: &str) -> Option<String> {
        let table = self.lake.table(&self.silver, TableRole::Silver).await;
        table.unwrap().property(key)
    }

    /// Silver's (id, amount) rows, sorted.
    fn amounts(&self) -> Vec<(String, Option<String>)> {
        let Some(rows) = self.rows() else {
            return Vec::new();
        };
        let ids = rows
            .column_by_name("id")
            .unwrap()
            .as_string::<i32>()
            .clone();
        let amounts = rows.column_by_name("amount").unwrap().clone();
        let mut out: Vec<(String, Option<String>)> = (0..rows.num_rows())
            .map(|i| {
                let a = amounts
                    .is_valid(i)
                    .then(|| arrow::util::display::array_value_to_string(&amounts, i).unwrap());
                (ids.value(i).to_string(), a)
            })
            .collect();
        out.sort();
        out
    }
}

fn flow(on_cast_error: &str) -> (String, smelt_spec::ApplyFlow) {
    flow_with(&format!("on_cast_error: {on_cast_error}"))
}

/// A flow with `options` (YAML lines under `apply:`, joined by newlines).
fn flow_with(options: &str) -> (String, smelt_spec::ApplyFlow) {
    flow_with_ddl(
        "CREATE TABLE s.t (id STRING NOT NULL, amount DECIMAL(10,2), PRIMARY KEY (id))",
        options,
    )
}

/// A flow with silver `ddl` and `options`.
fn flow_with_ddl(ddl: &str, options: &str) -> (String, smelt_spec::ApplyFlow) {
    // One folder per call, removed on return: the pipeline reads the schema file while it
    // parses, and tests run in parallel and must not read each other's files.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("s.sql"), ddl).unwrap();
    let options: String = options.lines().map(|l| format!("      {l}\n")).collect();
    let yaml = format!(
        "lake: .\nflows:\n  f:\n    apply:\n      from: b.t\n      into: s.t\n      schema: s.sql\n{options}"
    );
    let p = Pipeline::from_str(&yaml, &dir.join("smelt.yaml")).unwrap();
    let FlowKind::Apply(a) = p.flows[0].kind.clone() else {
        panic!("an apply flow")
    };
    ("f".into(), a)
}

#[tokio::test]
async fn runs_apply_in_order_guard_and_skip_when_up_to_date() {
    let (name, f) = flow("null");
    let t = Tables::of(&f);
    let mut commits = vec![vec![(Some("a"), "1"), (Some("b"), "x"), (None, "3")]];
    let source = bronze(&f, &commits, 0);
    let ctx = RunContext::new(false, false);
    let r = t.run(&name, &f, &ctx, &source).await.unwrap();
    assert_eq!(
        (
            r.inserted,
            r.rejected,
            r.cast_failures.get("amount").copied()
        ),
        (2, 1, Some(1))
    );
    assert_eq!(
        t.amounts(),
        vec![("a".into(), Some("1.00".into())), ("b".into(), None)]
    );

    commits.push(vec![(Some("a"), "2"), (Some("a"), "2.5"), (Some("c"), "7")]);
    let source = bronze(&f, &commits, 0);
    let r = t.run(&name, &f, &ctx, &source).await.unwrap();
    assert_eq!(
        (
            r.inserted,
            r.updated,
            r.duplicates_collapsed,
            r.from_version
        ),
        (1, 1, 1, Some(0))
    );
    assert_eq!(t.amounts()[0], ("a".into(), Some("2.50".into())));

    let before = t.commits().await;
    let r = t.run(&name, &f, &ctx, &source).await.unwrap();
    assert_eq!(r.status, smelt_engine::report::ReportStatus::UpToDate);
    assert_eq!(t.commits().await, before, "no commit when nothing is new");

    // A full refresh rebuilds silver from the bronze snapshot, in one commit.
    let before = t.amounts();
    let r = t
        .run(&name, &f, &RunContext::new(false, true), &source)
        .await
        .unwrap();
    assert_eq!(
        (r.mode.as_str(), r.inserted, r.updated, r.stale),
        ("rebuild", 3, 0, 0)
    );
    assert_eq!(t.amounts(), before);
}

#[tokio::test]
async fn fail_policy_aborts_before_writing() {
    let (name, f) = flow("fail");
    let t = Tables::of(&f);
    let source = bronze(&f, &[vec![(Some("a"), "1"), (Some("b"), "1e9x")]], 0);
    let err = t
        .run(&name, &f, &RunContext::new(false, false), &source)
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::Cast { .. }), "{err}");
    let text = format!("{err}: {}", std::error::Error::source(&err).unwrap());
    assert!(
        text.contains("`amount`") && text.contains("1e9x") && text.contains("id=b"),
        "{text}"
    );
    assert_eq!(t.commits().await, 0, "nothing written");
}

#[tokio::test]
async fn plan_writes_nothing() {
    let (name, f) = flow("null");
    let t = Tables::of(&f);
    let source = bronze(&f, &[vec![(Some("a"), "1")]], 0);
    let r = t
        .run(&name, &f, &RunContext::new(true, false), &source)
        .await
        .unwrap();
    assert_eq!((r.status.as_str(), r.inserted), ("planned", 1));
    assert!(t.rows().is_none(), "silver was created");
    assert_eq!(t.commits().await, 0);
}

#[tokio::test]
async fn key_partitions_spilled_to_disk_give_the_same_silver() {
    let commits = vec![
        vec![
            (Some("a"), "1"),
            (Some("b"), "2"),
            (Some("c"), "3"),
            (Some("d"), "4"),
        ],
        vec![
            (Some("a"), "5"),
            (Some("e"), "6"),
            (Some("a"), "7"),
            (Some("b"), "8"),
        ],
        vec![(Some("f"), "9"), (Some("c"), "3"), (Some("e"), "x")],
    ];
    let (whole, whole_parts) = run_all(&commits, None).await;
    // 10 MB of claimed Parquet needs 160 MB: 6 partitions within a 60 MB limit.
    let (split, split_parts) = run_all(&commits, Some(60_000_000)).await;
    assert_eq!(whole_parts, vec![1, 1, 1]);
    assert_eq!(split_parts, vec![6, 6, 6]);
    assert_eq!(split, whole, "same silver, counts and commits");
    assert_eq!(whole.0[0], ("a".into(), Some("7.00".into())));
}

/// Values the random streams pick from: keys, and amounts (one does not cast).
const KEYS: [&str; 8] = ["a", "b", "c", "d", "e", "f", "g", "h"];
const AMOUNTS: [&str; 5] = ["1", "2.5", "7", "x", "10"];

/// What a sequence of runs left: silver, each run's counts, and the number of commits.
type Outcome = (Vec<(String, Option<String>)>, Vec<[usize; 6]>, i64);

/// Runs every prefix of `commits` in turn (one run per new bronze version) with `limit`;
/// returns the outcome and each run's number of key partitions.
async fn run_all(commits: &Commits, limit: Option<u64>) -> (Outcome, Vec<usize>) {
    let (name, f) = flow("null");
    let t = Tables::of(&f);
    let mut ctx = RunContext::new(false, false);
    ctx.memory_limit = limit;
    let mut counts = Vec::new();
    let mut partitions = Vec::new();
    for n in 1..=commits.len() {
        let source = bronze(&f, &commits[..n], 10_000_000);
        let r = t.run(&name, &f, &ctx, &source).await.unwrap();
        partitions.push(r.partitions);
        counts.push([
            r.inserted,
            r.updated,
            r.unchanged,
            r.stale,
            r.duplicates_collapsed,
            r.cast_failures_total(),
        ]);
    }
    ((t.amounts(), counts, t.commits().await), partitions)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Applying changes in key partitions spilled to disk (a tight memory limit) gives the
    /// same silver and the same counts as applying them in one piece, run after run.
    #[test]
    fn key_partitions_never_change_the_result(
        picks in proptest::collection::vec(
            proptest::collection::vec((0usize..KEYS.len(), 0usize..AMOUNTS.len()), 0..10),
            1..5,
        ),
        partitions in 2u64..12,
    ) {
        let commits: Vec<Vec<(Option<&'static str>, &'static str)>> = picks
            .iter()
            .map(|c| c.iter().map(|&(k, a)| (Some(KEYS[k]), AMOUNTS[a])).collect())
            .collect();
        // 10 MB of claimed Parquet needs 160 MB; half the limit per partition.
        let limit = 2 * 160_000_000 / partitions;
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let (whole, split) = rt.block_on(async {
            (run_all(&commits, None).await, run_all(&commits, Some(limit)).await)
        });
        proptest::prop_assert!(split.1.iter().all(|&p| p > 1));
        proptest::prop_assert_eq!(split.0, whole.0);
    }
}

/// Options of the flow the model tests drive: soft deletes, partial updates, a filter.
const MODEL_OPTIONS: &str = "apply_as_deletes: amount = 'DEL'\nignore_null_updates: true\nwhere: amount IS NULL OR amount < 8";

/// Bronze values of the model tests: amounts (`x` does not cast: NULL), and `DEL` (a delete).
const MODEL_VALUES: [&str; 6] = ["1", "2.5", "7", "x", "10", "DEL"];

/// The reference model of [`MODEL_OPTIONS`]: silver rows (sequence, amount) and tombstones.
#[derive(Debug, Clone, Default, PartialEq)]
struct Model {
    silver: std::collections::BTreeMap<String, (i64, Option<String>)>,
    tombstones: std::collections::BTreeMap<String, i64>,
    /// `on_sequence_conflict: quarantine`: a key whose latest changes (same sequence)
    /// differ is not applied in that run.
    quarantine_conflicts: bool,
    /// `source_deletes: apply`: `SRCDEL` deletes (else it is ignored).
    source_deletes: bool,
}

impl Model {
    /// Applies bronze versions `from..=to` of `commits` as one run. The sequence is the
    /// value's `@s` if it has one, else the version (the commit time); later rows win ties.
    fn run(&mut self, commits: &Commits, from: usize, to: usize) {
        let mut latest: Vec<(String, i64, &str)> = Vec::new();
        let mut conflicted = std::collections::BTreeSet::new();
        for (v, rows) in commits.iter().enumerate().take(to + 1).skip(from) {
            for (i, &(key, raw)) in rows.iter().enumerate() {
                let (raw, seq) = split_value(raw, v);
                if raw == "SRCDEL" && !self.source_deletes {
                    continue; // ignored by kind
                }
                // A change-feed delete that an upsert of the same key and sequence follows
                // in its commit: the key's row replaced (a feed derived from deletion
                // vectors reads so), the delete as if it were not there.
                let replaced = raw == "SRCDEL"
                    && rows[i + 1..].iter().any(|&(k, r)| {
                        let (r, s) = split_value(r, v);
                        k == key && s == seq && !matches!(r, "DEL" | "SRCDEL")
                    });
                if replaced {
                    continue;
                }
                let key = key.expect("model keys are never NULL").to_string();
                // A change with the same sequence and other typed data conflicts; a newer
                // sequence ends the conflict.
                let typed = |raw: &str| match raw {
                    "x" | "DEL" | "SRCDEL" => (None, raw != "x"),
                    other => (Some(other.parse::<f64>().unwrap()), false),
                };
                // The latest change of the key: the greatest sequence, later ones win ties.
                match latest.iter().find(|(k, _, _)| *k == key) {
                    Some((_, best, _)) if seq < *best => continue,
                    Some((_, best, old)) if seq == *best => {
                        if typed(old) != typed(raw) {
                            conflicted.insert(key.clone());
                        }
                    }
                    _ => {
                        conflicted.remove(&key);
                    }
                }
                latest.retain(|(k, _, _)| *k != key);
                latest.push((key, seq, raw));
            }
        }
        if self.quarantine_conflicts {
            latest.retain(|(k, _, _)| !conflicted.contains(k));
        }
        for (key, seq, raw) in latest {
            let stored = self.silver.get(&key).cloned();
            let tomb = self.tombstones.get(&key).copied();
            let mut delete = raw == "DEL" || raw == "SRCDEL";
            let mut value = match raw {
                "1" => Some("1.00".to_string()),
                "2.5" => Some("2.50".to_string()),
                "7" => Some("7.00".to_string()),
                "10" => Some("10.00".to_string()),
                _ => None, // "x" fails to cast; "DEL" is a delete
            };
            if value.is_none()
                && let Some((_, old)) = &stored
            {
                value = old.clone(); // ignore_null_updates
            }
            if !delete && value.as_deref() == Some("10.00") {
                delete = true; // fails `where`
            }
            let past_stored = stored.as_ref().is_none_or(|(s, _)| seq > *s);
            let past_tomb = tomb.is_none_or(|t| seq > t);
            if delete {
                if past_stored {
                    self.silver.remove(&key);
                    if past_tomb {
                        self.tombstones.insert(key, seq);
                    }
                }
            } else if past_stored && past_tomb {
                self.silver.insert(key, (seq, value));
            }
        }
    }

    fn rows(&self) -> Vec<(String, Option<String>)> {
        self.silver
            .iter()
            .map(|(k, (_, v))| (k.clone(), v.clone()))
            .collect()
    }
}

/// Runs the flow of [`MODEL_OPTIONS`] after the bronze versions where `run_after[v]` is
/// true (and after the last one), then a full refresh; returns silver after each run.
async fn run_engine_and_model(
    commits: &Commits,
    run_after: &[bool],
    quarantine_conflicts: bool,
    late: bool,
) -> Vec<(Vec<(String, Option<String>)>, Vec<(String, Option<String>)>)> {
    let mut options = MODEL_OPTIONS.to_string();
    if quarantine_conflicts {
        options.push_str("\non_sequence_conflict: quarantine");
    }
    // Late data: a `seq` column orders the changes, and bronze deletes apply.
    let (name, f) = if late {
        options.push_str("\nsequence_by: [seq]\nsource_deletes: apply");
        flow_with_ddl(
            "CREATE TABLE s.t (id STRING NOT NULL, amount DECIMAL(10,2), seq BIGINT, PRIMARY KEY (id))",
            &options,
        )
    } else {
        flow_with(&options)
    };
    let t = Tables::of(&f);
    let mut model = Model {
        quarantine_conflicts,
        source_deletes: late,
        ..Model::default()
    };
    let mut out = Vec::new();
    let mut applied: Option<usize> = None;
    for v in 0..commits.len() {
        if !(run_after.get(v).copied().unwrap_or(false) || v + 1 == commits.len()) {
            continue;
        }
        let source = bronze(&f, &commits[..=v], 0);
        t.run(&name, &f, &RunContext::new(false, false), &source)
            .await
            .unwrap();
        model.run(commits, applied.map_or(0, |a| a + 1), v);
        applied = Some(v);
        out.push((t.amounts(), model.rows()));
    }
    // A full refresh rebuilds silver as one run over every version from scratch.
    let source = bronze(&f, commits, 0);
    let mut fresh = Model {
        quarantine_conflicts,
        source_deletes: late,
        ..Model::default()
    };
    fresh.run(commits, 0, commits.len() - 1);
    let r = t
        .run(&name, &f, &RunContext::new(false, true), &source)
        .await
        .unwrap();
    assert_eq!(
        (r.mode.as_str(), r.updated, r.deleted, r.inserted),
        ("rebuild", 0, 0, fresh.silver.len()),
        "{r:?}"
    );
    out.push((t.amounts(), fresh.rows()));
    // Tombstones are rebuilt too: one per key whose latest change deletes or is filtered.
    let tombstones = t.tombstones().map_or(0, |t| t.num_rows());
    assert_eq!(tombstones, fresh.tombstones.len());
    out
}

#[tokio::test]
async fn a_deleted_key_stays_deleted_until_a_newer_change() {
    let (name, f) = flow_with(MODEL_OPTIONS);
    let t = Tables::of(&f);
    let ctx = RunContext::new(false, false);
    let mut commits = vec![vec![(Some("a"), "1"), (Some("b"), "2.5")]];
    let source = bronze(&f, &commits, 0);
    t.run(&name, &f, &ctx, &source).await.unwrap();

    // v1: `a` deleted, `b` updated to a value that fails `where`.
    commits.push(vec![(Some("a"), "DEL"), (Some("b"), "10")]);
    let source = bronze(&f, &commits, 0);
    let r = t.run(&name, &f, &ctx, &source).await.unwrap();
    assert_eq!(
        (r.deleted, r.filtered, r.tombstones_written),
        (2, 1, 2),
        "{r:?}"
    );
    assert_eq!(t.amounts(), vec![]);
    assert_eq!(t.tombstones().unwrap().num_rows(), 2);

    // A replay of v0 (as a full refresh would read it) is older than the tombstones.
    let r = t
        .run(&name, &f, &RunContext::new(false, true), &source)
        .await
        .unwrap();
    assert_eq!((r.inserted, r.deleted), (0, 0), "{r:?}");
    assert_eq!(t.amounts(), vec![]);

    // v2: a newer upsert brings `a` back; a NULL (cast failure) for a deleted key stays NULL.
    commits.push(vec![(Some("a"), "7"), (Some("b"), "x")]);
    let source = bronze(&f, &commits, 0);
    let r = t.run(&name, &f, &ctx, &source).await.unwrap();
    assert_eq!(r.inserted, 2, "{r:?}");
    assert_eq!(
        t.amounts(),
        vec![("a".into(), Some("7.00".into())), ("b".into(), None)]
    );

    // Tombstones expire after the retention: a tombstone from this run is kept.
    let (name2, f2) = flow_with(&format!("{MODEL_OPTIONS}\ntombstone_retention: 1h"));
    commits.push(vec![(Some("c"), "DEL")]);
    let source = bronze(&f, &commits, 0);
    let mut late = RunContext::new(false, false);
    late.run_timestamp_us += 2 * 3_600_000_000;
    let r = t.run(&name2, &f2, &late, &source).await.unwrap();
    assert_eq!(
        (r.tombstones_written, r.tombstones_expired),
        (1, 2),
        "{r:?}"
    );
}

#[tokio::test]
async fn expectations_and_cast_failures_are_warned_dropped_quarantined_or_fatal() {
    let commits = vec![vec![
        (Some("a"), "1"),
        (Some("b"), "x"),
        (Some("c"), "500"),
        (Some("d"), "2"),
    ]];
    let run = |options: &'static str| {
        let commits = commits.clone();
        async move {
            let (name, f) = flow_with(options);
            let t = Tables::of(&f);
            let source = bronze(&f, &commits, 0);
            let ctx = RunContext::new(false, false);
            let result = t.run(&name, &f, &ctx, &source).await;
            let written = t.commits().await > 0;
            let rows = written.then(|| t.amounts());
            let rejects = rejects_table(&f.into);
            let rejected = (t.commits_of(&rejects).await > 0).then(|| t.rejects().unwrap());
            (result, rows, rejected)
        }
    };
    let text = |b: &RecordBatch, c: &str| -> Vec<Option<String>> {
        b.column_by_name(c)
            .unwrap()
            .as_string::<i32>()
            .iter()
            .map(|v| v.map(str::to_string))
            .collect()
    };

    let (r, rows, rejects) =
        run("on_cast_error: quarantine\nexpect:\n  small: amount < 100\non_violation: quarantine")
            .await;
    let r = r.unwrap();
    assert_eq!(
        (
            r.quarantined,
            r.expectations["small"],
            r.cast_failures["amount"]
        ),
        (2, 1, 1)
    );
    assert_eq!(
        rows.unwrap(),
        vec![
            ("a".into(), Some("1.00".into())),
            ("d".into(), Some("2.00".into()))
        ]
    );
    let rejects = rejects.unwrap();
    assert_eq!(
        text(&rejects, "rule"),
        [Some("cast".into()), Some("small".into())]
    );
    assert_eq!(text(&rejects, "column_name"), [Some("amount".into()), None]);
    assert_eq!(text(&rejects, "raw_value"), [Some("x".into()), None]);
    assert_eq!(
        text(&rejects, "target_type"),
        [Some("DECIMAL(10,2)".into()), None]
    );
    assert_eq!(
        text(&rejects, "raw_row"),
        [
            Some(r#"{"id":"b","amount":"x","seq":"0"}"#.into()),
            // The raw bronze row, though the expectation reads the typed value.
            Some(r#"{"id":"c","amount":"500","seq":"0"}"#.into())
        ]
    );

    let (r, rows, rejects) = run("expect:\n  small: amount < 100\non_violation: drop").await;
    let r = r.unwrap();
    // b's amount is NULL (SAFE_CAST): a predicate that is NULL is a violation too.
    assert_eq!((r.dropped, r.quarantined), (2, 0));
    assert_eq!(rows.unwrap().len(), 2, "a and d");
    assert!(rejects.is_none());

    let (r, rows, _) = run("expect:\n  small: amount < 100").await;
    assert_eq!(r.unwrap().expectations["small"], 2, "warn: counted, kept");
    assert_eq!(rows.unwrap().len(), 4);

    let (r, rows, _) = run("expect:\n  small: amount < 100\non_violation: fail").await;
    let e = r.unwrap_err().to_string();
    assert!(
        e.contains("expectation `small` (`amount < 100`) failed")
            && e.contains("key id=b")
            && e.contains("2 change(s) failed"),
        "{e}"
    );
    assert!(rows.is_none(), "nothing written");

    let (r, _, _) = run("expect:\n  bad: no_such_column > 1").await;
    let e = r.unwrap_err().to_string();
    assert!(e.contains("expectation `bad`"), "{e}");
}

/// The SCD2 history of `silver`: (id, start, end, amount), sorted.
type History = Vec<(String, i64, Option<i64>, Option<String>)>;

fn history(t: &Tables) -> History {
    let Some(rows) = t.rows() else {
        return Vec::new();
    };
    let ids = rows
        .column_by_name("id")
        .unwrap()
        .as_string::<i32>()
        .clone();
    let ts = |c: &str| {
        rows.column_by_name(c)
            .unwrap()
            .as_primitive::<arrow::datatypes::TimestampMicrosecondType>()
            .clone()
    };
    let (start, end) = (ts("__START_AT"), ts("__END_AT"));
    let amounts = rows.column_by_name("amount").unwrap().clone();
    let mut out: History = (0..rows.num_rows())
        .map(|i| {
            (
                ids.value(i).to_string(),
                start.value(i) / 1_000_000,
                end.is_valid(i).then(|| end.value(i) / 1_000_000),
                amounts
                    .is_valid(i)
                    .then(|| arrow::util::display::array_value_to_string(&amounts, i).unwrap()),
            )
        })
        .collect();
    out.sort();
    out
}

/// The reference SCD2 history of every bronze version: per key, the last change of each
/// version in version order; a new amount opens a version, the same amount changes
/// nothing, a delete closes the open version.
fn model_history(commits: &Commits) -> History {
    let mut events: std::collections::BTreeMap<String, Vec<(i64, &str)>> = Default::default();
    for (v, rows) in commits.iter().enumerate() {
        for &(key, raw) in rows {
            let e = events.entry(key.unwrap().to_string()).or_default();
            if e.last().is_some_and(|(last, _)| *last == v as i64) {
                e.pop();
            }
            e.push((v as i64, raw));
        }
    }
    let mut out = Vec::new();
    for (key, evs) in events {
        let mut open: Option<(i64, Option<String>)> = None;
        for (v, raw) in evs {
            let amount = match raw {
                "DEL" => {
                    if let Some((start, a)) = open.take() {
                        out.push((key.clone(), start, Some(v), a));
                    }
                    continue;
                }
                "x" => None,
                other => Some(format!("{:.2}", other.parse::<f64>().unwrap())),
            };
            match &open {
                Some((_, a)) if *a == amount => {}
                _ => {
                    if let Some((start, a)) = open.take() {
                        out.push((key.clone(), start, Some(v), a));
                    }
                    open = Some((v, amount));
                }
            }
        }
        if let Some((start, a)) = open {
            out.push((key.clone(), start, None, a));
        }
    }
    out.sort();
    out
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// SCD2 over random upserts, deletes, repeated values and cast failures, applied in runs
    /// of one or more bronze versions: the history equals the reference model after every
    /// run and after a full refresh.
    #[test]
    fn scd2_history_matches_the_model(
        picks in proptest::collection::vec(
            proptest::collection::vec((0usize..3, 0usize..MODEL_VALUES.len()), 0..6),
            1..6,
        ),
        run_after in proptest::collection::vec(proptest::bool::ANY, 6),
    ) {
        let commits: Vec<Vec<(Option<&'static str>, &'static str)>> = picks
            .iter()
            .map(|c| c.iter().map(|&(k, a)| (Some(KEYS[k]), MODEL_VALUES[a])).collect())
            .collect();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let (name, f) = flow_with("scd: 2\napply_as_deletes: amount = 'DEL'");
            let t = Tables::of(&f);
                    for v in 0..commits.len() {
                if !(run_after.get(v).copied().unwrap_or(false) || v + 1 == commits.len()) {
                    continue;
                }
                let source = bronze(&f, &commits[..=v], 0);
                t.run(&name, &f, &RunContext::new(false, false), &source)
                    .await
                    .unwrap();
                assert_eq!(history(&t), model_history(&commits[..=v]), "after version {v}");
            }
            let source = bronze(&f, &commits, 0);
            let r = t.run(&name, &f, &RunContext::new(false, true), &source)
                .await
                .unwrap();
            assert_eq!((r.mode.as_str(), r.updated), ("rebuild", 0), "{r:?}");
            assert_eq!(history(&t), model_history(&commits));
        });
    }
}

/// Runs the flow once over `commits` with `ctx`.
async fn run_once(
    (name, f): &(String, smelt_spec::ApplyFlow),
    commits: &Commits,
    t: &Tables,
    ctx: RunContext,
) -> FlowReport {
    let source = bronze(f, commits, 0);
    t.run(name, f, &ctx, &source).await.unwrap()
}

#[tokio::test]
async fn a_truncate_empties_silver_and_older_changes_never_come_back() {
    let flow = flow_with("apply_as_truncates: amount = 'TRUNC'");
    let t = Tables::of(&flow.1);
    let fresh = || RunContext::new(false, false);
    let mut commits = vec![vec![(Some("a"), "1"), (Some("b"), "2")]];
    run_once(&flow, &commits, &t, fresh()).await;

    // v1: a truncate between two upserts of the same commit (same sequence: both stale).
    commits.push(vec![
        (Some("c"), "3"),
        (Some("x"), "TRUNC"),
        (Some("d"), "4"),
    ]);
    let r = run_once(&flow, &commits, &t, fresh()).await;
    assert_eq!(
        (r.truncates, r.truncated, r.stale, r.cast_failures_total()),
        (1, true, 2, 0),
        "{r:?}"
    );
    assert_eq!(t.amounts(), vec![]);
    // v2: a newer change lands in the emptied table.
    commits.push(vec![(Some("e"), "5")]);
    run_once(&flow, &commits, &t, fresh()).await;
    // Replaying every version: changes up to the truncate stay out, and the truncate is not
    // applied again.
    let mut replay = fresh();
    replay.replay_after = Some(-1);
    let r = run_once(&flow, &commits, &t, replay).await;
    assert_eq!((r.truncated, r.inserted, r.stale), (false, 0, 5), "{r:?}");
    assert_eq!(t.amounts(), vec![("e".into(), Some("5.00".into()))]);
    assert!(t.property("smelt.truncatedThrough").await.is_some());
}

/// Values of the late-data model test: every value of [`MODEL_VALUES`] and `SRCDEL` (a
/// bronze delete), with a sequence `@0`–`@3` independent of the commit it lands in.
const LATE_VALUES: [&str; 24] = [
    "1@0", "1@1", "1@2", "1@3", "2.5@0", "2.5@1", "2.5@2", "2.5@3", "x@0", "x@1", "x@2", "x@3",
    "10@0", "10@1", "10@2", "10@3", "DEL@0", "DEL@1", "DEL@2", "DEL@3", "SRCDEL@0", "SRCDEL@1",
    "SRCDEL@2", "SRCDEL@3",
];

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

    /// Streams of upserts, soft deletes, cast failures (NULL, kept by
    /// `ignore_null_updates`), values failing `where` and equal-sequence conflicts (both
    /// policies), applied in runs of one or more bronze versions; with `late`, sequenced by a
    /// `seq` column independent of the commit (late, early and equal sequences) and with
    /// bronze deletes applied. Silver equals the reference model after every run, and a full
    /// refresh afterwards equals the model applied once to every version.
    #[test]
    fn deletes_filters_partial_updates_and_late_data_match_the_model(
        picks in proptest::collection::vec(
            proptest::collection::vec((0usize..4, 0usize..LATE_VALUES.len()), 0..8),
            1..6,
        ),
        run_after in proptest::collection::vec(proptest::bool::ANY, 6),
        quarantine_conflicts in proptest::bool::ANY,
        late in proptest::bool::ANY,
    ) {
        let values: &[&'static str] = if late { &LATE_VALUES } else { &MODEL_VALUES };
        let commits: Vec<Vec<(Option<&'static str>, &'static str)>> = picks
            .iter()
            .map(|c| c.iter().map(|&(k, a)| (Some(KEYS[k]), values[a % values.len()])).collect())
            .collect();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for (got, want) in rt.block_on(run_engine_and_model(&commits, &run_after, quarantine_conflicts, late)) {
            proptest::prop_assert_eq!(got, want);
        }
    }
}

#[tokio::test]
async fn widening_the_sequence_widens_the_tombstones_and_keeps_them_guarding() {
    let narrow = flow_with_ddl(
        "CREATE TABLE s.t (id STRING NOT NULL, amount DECIMAL(10,2), seq INT, PRIMARY KEY (id))",
        "sequence_by: [seq]\napply_as_deletes: amount = 'DEL'",
    );
    let t = Tables::of(&narrow.1);
    let ctx = || RunContext::new(false, false);
    let mut commits = vec![vec![(Some("a"), "1@5"), (Some("b"), "2@5")]];
    run_once(&narrow, &commits, &t, ctx()).await;
    commits.push(vec![(Some("a"), "DEL@7")]);
    run_once(&narrow, &commits, &t, ctx()).await;

    let wide = flow_with_ddl(
        "CREATE TABLE s.t (id STRING NOT NULL, amount DECIMAL(10,2), seq BIGINT, PRIMARY KEY (id))",
        "sequence_by: [seq]\napply_as_deletes: amount = 'DEL'\nwiden_types: true",
    );
    commits.push(vec![(Some("a"), "7@6"), (Some("c"), "3@6")]);
    let r = run_once(&wide, &commits, &t, ctx()).await;
    assert!(r.types_widened);
    assert_eq!(
        (r.inserted, r.stale),
        (1, 1),
        "a's late upsert stays out: {r:?}"
    );
    let tomb_schema = t.tombstones().unwrap().schema();
    assert_eq!(
        tomb_schema.field_with_name("seq").unwrap().data_type(),
        &DataType::Int64
    );
    assert_eq!(
        t.amounts(),
        vec![
            ("b".into(), Some("2.00".into())),
            ("c".into(), Some("3.00".into()))
        ]
    );
}

#[tokio::test]
async fn two_deletes_of_one_sequence_are_no_conflict() {
    let flow = flow_with("apply_as_deletes: amount LIKE 'DEL%'\non_sequence_conflict: fail");
    let t = Tables::of(&flow.1);
    let commits = vec![
        vec![(Some("a"), "1")],
        vec![(Some("a"), "DEL-1"), (Some("a"), "DEL-2")],
    ];
    let ctx = || RunContext::new(false, false);
    run_once(&flow, &commits[..1], &t, ctx()).await;
    let r = run_once(&flow, &commits, &t, ctx()).await;
    assert_eq!((r.sequence_conflicts, r.deleted), (0, 1), "{r:?}");
}

#[tokio::test]
async fn rejects_of_a_replay_window_with_a_gap_are_written_once_by_the_next_run() {
    let flow = flow_with("on_cast_error: quarantine");
    let t = Tables::of(&flow.1);
    let ctx = || RunContext::new(false, false);
    let commits = vec![
        vec![(Some("a"), "1")],
        vec![(Some("b"), "x")],
        vec![(Some("c"), "y")],
    ];
    run_once(&flow, &commits[..1], &t, ctx()).await;
    // Replay only version 2: the watermark (0) stays, so its reject waits.
    let mut window = ctx();
    window.replay_after = Some(1);
    let r = run_once(&flow, &commits, &t, window).await;
    assert_eq!(r.quarantined, 1);
    assert!(
        t.rejects().is_none_or(|r| r.num_rows() == 0),
        "nothing written yet"
    );
    run_once(&flow, &commits, &t, ctx()).await;
    let rows = t.rejects().unwrap();
    assert_eq!(rows.num_rows(), 2, "b and c, once each");
}
