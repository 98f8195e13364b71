//! `cast_dialect` through a real flow: seed 000's BigQuery DDL makes BigQuery's `SAFE_CAST`
//! the default (`' true'` and `'yes'` are not BOOLs there), `cast_dialect: spark` takes
//! Spark's `try_cast` rules, and `lenient` smelt's own.

use crate::common::Project;
use serde_json::Value;

/// Bronze rows whose strings the dialects read differently.
const ROWS: &str = "INSERT INTO `medallion_demo.product2__bronze` (`Id`, `IsActive`, `CreatedDate`, `IsDeleted`) VALUES
('01t00000000000AAAA', ' true', '2026-07-01 09:00:00 Asia/Tokyo', 'false'),
('01t00000000000BAAA', 'yes', '2026-07-01 09:00', 'FALSE'),
('01t00000000000CAAA', 'TRUE', '2026-07-01T09:00:00.000+0000', '0');";

fn run(p: &Project, dialect: Option<&str>) -> (Vec<Value>, Value) {
    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    let base = yaml
        .lines()
        .filter(|l| !l.trim_start().starts_with("cast_dialect:"))
        .collect::<Vec<_>>()
        .join("\n");
    let yaml = match dialect {
        Some(d) => base.replacen(
            "      schema: silver.sql",
            &format!("      schema: silver.sql\n      cast_dialect: {d}"),
            1,
        ),
        None => base,
    };
    p.write("smelt.yaml", &yaml);
    let json: Value = serde_json::from_str(&p.ok(&["--json", "run", "--full-refresh"])).unwrap();
    let rows = p.query(
        "SELECT Id, IsActive, CreatedDate, IsDeleted FROM medallion_demo.product2__silver ORDER BY Id",
    );
    (rows, json["flows"][0]["cast_failures"].clone())
}

#[test]
fn the_dialect_decides_which_strings_cast() {
    let p = Project::product2();
    p.ok(&["sql", "-f", "bronze.sql"]);
    p.ok(&["sql", ROWS]);
    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    assert!(yaml.contains("      schema: silver.sql"), "{yaml}");

    // Default for BigQuery DDL: BigQuery's rules.
    let (rows, failures) = run(&p, None);
    assert_eq!(
        rows[0].get("IsActive"),
        None,
        "' true' is no BOOL: {rows:?}"
    );
    assert_eq!(rows[0]["CreatedDate"], "2026-07-01T00:00:00Z", "{rows:?}");
    assert_eq!(rows[1].get("IsActive"), None, "'yes' is no BOOL: {rows:?}");
    assert_eq!(
        rows[1].get("CreatedDate"),
        None,
        "seconds are required: {rows:?}"
    );
    assert_eq!(rows[1]["IsDeleted"], false);
    assert_eq!(rows[2]["IsActive"], true);
    assert_eq!(rows[2].get("IsDeleted"), None, "'0' is no BOOL: {rows:?}");
    assert_eq!(failures["IsActive"], 2, "{failures}");
    assert_eq!(failures["CreatedDate"], 1, "{failures}");
    assert_eq!(failures["IsDeleted"], 1, "{failures}");

    // Spark's try_cast.
    let (rows, failures) = run(&p, Some("spark"));
    assert_eq!(rows[0]["IsActive"], true, "{rows:?}");
    assert_eq!(rows[0]["CreatedDate"], "2026-07-01T00:00:00Z");
    assert_eq!(rows[1]["IsActive"], true);
    assert_eq!(rows[1]["CreatedDate"], "2026-07-01T09:00:00Z");
    assert_eq!(rows[2]["IsDeleted"], false);
    assert_eq!(failures.as_object().map_or(0, |f| f.len()), 0, "{failures}");

    // smelt's lenient rules, as before the dialects: trimmed booleans, Arrow's timestamp
    // parser (a zone name, but not a time without seconds).
    let (rows, _) = run(&p, Some("lenient"));
    assert_eq!(rows[0]["IsActive"], true, "{rows:?}");
    assert_eq!(rows[0]["CreatedDate"], "2026-07-01T00:00:00Z", "{rows:?}");
    assert_eq!(rows[1].get("CreatedDate"), None, "{rows:?}");
    assert_eq!(rows[2]["CreatedDate"], "2026-07-01T09:00:00Z");

    // An unknown dialect is refused by name.
    let yaml = std::fs::read_to_string(p.file("smelt.yaml")).unwrap();
    p.write(
        "smelt.yaml",
        &yaml.replace("cast_dialect: lenient", "cast_dialect: postgres"),
    );
    let (_, err) = p.fails(&["validate"], 2);
    assert!(err.contains("postgres"), "{err}");
}
