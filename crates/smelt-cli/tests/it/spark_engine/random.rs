//! Random change streams and SCD2 histories (proptest), written to bronze by the cluster
//! itself and run on both engines.

use super::*;

/// A bronze row of the random streams: key, sequence, value, deleted flag (all text, as
/// bronze holds them; `None` is NULL).
pub(super) type Row = (Option<String>, Option<String>, Option<String>, &'static str);

pub(super) fn text_of(choices: &'static [&'static str]) -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        1 => Just(None),
        6 => proptest::sample::select(choices).prop_map(|s| Some(s.to_string())),
    ]
}

pub(super) fn row() -> impl Strategy<Value = Row> {
    (
        // Few keys (repeats inside a commit are the point), a NULL key now and then.
        prop_oneof![1 => Just(None), 12 => proptest::sample::select(&["a", "b", "c", "d"][..]).prop_map(|s| Some(s.to_string()))],
        // Few sequences: ties and late changes; one that does not cast.
        text_of(&["1", "2", "3", "4", "x"]),
        text_of(&["10", "20", "30", "oops", ""]),
        proptest::sample::select(&["false", "false", "false", "true"][..]),
    )
}

/// Commits of 1–8 rows, written by Spark in two files each.
pub(super) fn stream() -> impl Strategy<Value = Vec<Vec<Row>>> {
    proptest::collection::vec(proptest::collection::vec(row(), 1..9), 2..5)
}

pub(super) const RANDOM: &str = "  r:
    apply:
      from: medallion_demo.product2__bronze
      into: medallion_demo.product2__silver
      schema: silver.sql
      sequence_by: [seq]
      apply_as_deletes: IsDeleted = 'true'
      cast_dialect: spark
      expect:
        small: v < 25
      on_violation: drop
      where: v <> 20
";

/// Random change streams — keys repeated inside a commit and across its two files, equal
/// and NULL sequences, late changes, deletes, values that do not cast, NULL keys, changes
/// dropped by an expectation (`v < 25`: 30, "oops" and NULL fail it), keys filtered out by
/// `where` (`v <> 20`: deleted from silver, with a tombstone) — applied
/// commit by commit by both engines, then replayed from the snapshot (`--full-refresh`).
pub(super) fn random_streams(url: &str, writer: &Writer) {
    // One random case (more with `PROPTEST_CASES`): the model suites (`model.rs`) draw
    // random streams on Spark too.
    let mut runner = one_case();
    runner
        .run(&stream(), |commits| {
            let p = Project::with_pipeline("flows: {}\n");
            p.write(
                "silver.sql",
                "CREATE TABLE medallion_demo.product2__silver (Id STRING NOT NULL, seq INT, v INT, \
                 IsDeleted BOOLEAN, PRIMARY KEY (Id))",
            );
            let pair = Pair::new(p, RANDOM, url);
            let table = random_bronze(&pair, writer);
            for (i, rows) in commits.iter().enumerate() {
                insert_rows(writer, &table, rows);
                let step = format!("commit {i} of {commits:?}");
                same_reports(&step, &pair.run(&[]));
                pair.same_tables_if_any(&step);
            }
            let step = format!("rebuild of {commits:?}");
            same_reports(&step, &pair.run(&["--full-refresh"]));
            pair.same_tables_if_any(&step);
            Ok(())
        })
        .unwrap();
}

pub(super) const RANDOM_HISTORY: &str = "  r:
    apply:
      from: medallion_demo.product2__bronze
      into: medallion_demo.product2__silver
      schema: silver.sql
      scd: 2
      sequence_by: [seq]
      apply_as_deletes: IsDeleted = 'true'
      track_history: [v]
      cast_dialect: spark
      where: v <> 20
";

/// Random change streams as in [`random_streams`], into SCD type 2 history: late changes
/// splitting versions, in-place updates (only `v` is tracked: a change of `seq` alone
/// updates the version), deletes before the versions they close (tombstones), replays of
/// one sequence — applied commit by commit by both engines, then rebuilt. First the streams
/// that found bugs.
pub(super) fn random_histories(url: &str, writer: &Writer) {
    let some = |s: &str| Some(s.to_string());
    // Streams that found bugs first. An upsert and a delete of one key and sequence in one
    // commit: the delete, read last, wins (Spark kept the upsert).
    let found: Vec<Vec<Row>> = vec![
        vec![
            (some("c"), some("x"), some(""), "false"),
            (some("a"), some("2"), some("10"), "false"),
            (some("c"), some("4"), some("30"), "false"),
        ],
        vec![
            (some("c"), some("4"), some(""), "false"),
            (some("b"), some("x"), None, "false"),
        ],
    ];
    history_stream(url, writer, &found);
    // A late change with the stored version's tracked values: the stored version merges
    // into the version the change opens, and is deleted at its own start (Spark kept it).
    let merged: Vec<Vec<Row>> = vec![
        vec![(some("a"), some("5"), some("10"), "false")],
        vec![(some("a"), some("3"), some("10"), "false")],
    ];
    history_stream(url, writer, &merged);
    // One random case (more with `PROPTEST_CASES`): the model suites (`model.rs`) draw
    // random streams on Spark too.
    let mut runner = one_case();
    runner
        .run(&stream(), |commits| {
            history_stream(url, writer, &commits);
            Ok(())
        })
        .unwrap();
}

/// `commits` applied commit by commit into SCD2 history by both engines, then rebuilt: the
/// history, the tombstones and the reports equal at every step.
pub(super) fn history_stream(url: &str, writer: &Writer, commits: &[Vec<Row>]) {
    let p = Project::with_pipeline("flows: {}\n");
    p.write(
        "silver.sql",
        "CREATE TABLE medallion_demo.product2__silver (Id STRING NOT NULL, seq INT, v INT, \
         IsDeleted BOOLEAN, PRIMARY KEY (Id))",
    );
    let pair = Pair::new(p, RANDOM_HISTORY, url);
    let table = random_bronze(&pair, writer);
    let silver = "SELECT * FROM medallion_demo.product2__silver ORDER BY Id, __START_AT";
    let tombstones = "SELECT * FROM medallion_demo.product2__silver__tombstones ORDER BY Id, seq";
    let same = |step: &str| {
        let (e, s) = pair.rows(silver, &["_update_timestamp"]);
        assert_eq!(e, s, "{step}: history differs (left embedded, right Spark)");
        if pair
            .p
            .file("lake_e/medallion_demo/product2__silver__tombstones")
            .exists()
        {
            let (e, s) = pair.rows(tombstones, &["_deleted_at"]);
            assert_eq!(
                e, s,
                "{step}: tombstones differ (left embedded, right Spark)"
            );
        }
    };
    for (i, rows) in commits.iter().enumerate() {
        insert_rows(writer, &table, rows);
        let step = format!("commit {i} of {commits:?}");
        same_reports(&step, &pair.run(&[]));
        same(&step);
    }
    let step = format!("rebuild of {commits:?}");
    same_reports(&step, &pair.run(&["--full-refresh"]));
    same(&step);
}

/// The random streams' bronze table, created by Spark; its SQL name.
pub(super) fn random_bronze(pair: &Pair, writer: &Writer) -> String {
    let table = format!("delta.`{}`", pair.p.file("bronze").display());
    writer.sql(&format!(
        "CREATE TABLE {table} (Id STRING, seq STRING, v STRING, IsDeleted STRING) USING DELTA \
         TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    ));
    table
}

/// One commit of `rows` into `table`, written by Spark in two files.
pub(super) fn insert_rows(writer: &Writer, table: &str, rows: &[Row]) {
    let lit = |v: &Option<String>| v.as_deref().map_or("NULL".into(), string_literal);
    let values: Vec<String> = rows
        .iter()
        .map(|(k, s, v, d)| format!("({}, {}, {}, '{d}')", lit(k), lit(s), lit(v)))
        .collect();
    writer.sql(&format!(
        "INSERT INTO {table} SELECT /*+ REPARTITION(2) */ * FROM VALUES {} AS t(Id, seq, v, IsDeleted)",
        values.join(", ")
    ));
}

/// A runner of one random case (more with `PROPTEST_CASES`), shrinking little: each case is
/// several Spark runs.
pub(super) fn one_case() -> TestRunner {
    TestRunner::new(Config {
        cases: smelt_test::cases(1),
        failure_persistence: None,
        max_shrink_iters: 8,
        ..Config::default()
    })
}
