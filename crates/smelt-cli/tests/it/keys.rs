//! Composite keys with NULLs, a user sequence column and a flow time zone, through Delta.

use crate::common::Project;
use serde_json::Value;

fn project() -> Project {
    let p = Project::product2();
    p.write(
        "smelt.yaml",
        "lake: ./lake\nflows:\n  orders:\n    apply:\n      from: shop.orders_bronze\n      into: shop.orders\n      schema: orders.sql\n      keys: [region, code]\n      sequence_by: [modified]\n      tz: Asia/Tokyo\n",
    );
    p.write("orders.sql", "CREATE TABLE shop.orders (region STRING, code STRING, amount DECIMAL(10,2), modified TIMESTAMP);");
    p.ok(&["sql", "CREATE TABLE shop.orders_bronze (region STRING, code STRING, amount STRING, modified STRING) OPTIONS (enable_change_history = TRUE)"]);
    p
}

fn orders(p: &Project) -> Vec<Value> {
    p.query("SELECT region, code, CAST(amount AS VARCHAR) AS amount, CAST(modified AS VARCHAR) AS modified FROM shop.orders ORDER BY region NULLS FIRST, code NULLS FIRST")
}

#[test]
fn null_key_parts_match_null_safely_and_the_guard_uses_the_sequence_column() {
    let p = project();
    p.ok(&["sql", "INSERT INTO shop.orders_bronze VALUES ('eu', 'a', '1.50', '2026-01-01 10:00:00'), (NULL, 'a', '2', '2026-01-01 10:00:00'), ('eu', NULL, ' 3 ', '2026-01-01 10:00:00'), ('eu', 'a', '1.75', '2026-01-01 09:00:00')"]);
    let json: Value = serde_json::from_str(&p.ok(&["--json", "run"])).unwrap();
    let f = &json["flows"][0];
    assert_eq!(
        (f["inserted"].as_i64(), f["duplicates_collapsed"].as_i64()),
        (Some(3), Some(1)),
        "{f}"
    );
    let rows = orders(&p);
    assert_eq!(rows.len(), 3);
    assert_eq!(
        rows[2]["amount"], "1.50",
        "the later-sequenced change wins within a run, not the later row"
    );
    assert_eq!(rows[1]["amount"], "3.00", "trimmed and cast");
    assert_eq!(
        rows[0]["modified"], "2026-01-01T01:00:00Z",
        "no offset: read in Asia/Tokyo"
    );

    p.ok(&["sql", "INSERT INTO shop.orders_bronze VALUES (NULL, 'a', '5', '2026-01-02 10:00:00'), ('eu', 'a', '9', '2025-12-31 10:00:00'), ('eu', NULL, '3.00', '2026-01-03 10:00:00')"]);
    let json: Value = serde_json::from_str(&p.ok(&["--json", "run"])).unwrap();
    let f = &json["flows"][0];
    assert_eq!(
        (
            f["inserted"].as_i64(),
            f["updated"].as_i64(),
            f["unchanged"].as_i64(),
            f["stale"].as_i64()
        ),
        (Some(0), Some(2), Some(0), Some(1)),
        "{f}"
    );
    let rows = orders(&p);
    assert_eq!(
        rows.len(),
        3,
        "NULL key parts matched the stored rows: {rows:?}"
    );
    assert!(rows[0]["region"].is_null());
    assert_eq!(rows[0]["amount"], "5.00");
    assert_eq!(
        rows[1]["modified"], "2026-01-03T01:00:00Z",
        "a newer sequence is a change of the row"
    );
    assert_eq!(
        rows[2]["amount"], "1.50",
        "an older sequence never overwrites"
    );
}
