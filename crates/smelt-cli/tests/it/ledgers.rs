//! The ledgers of ingest and replace_where flows — which files a table already holds — outlive
//! Delta log cleanup and checkpoints: a file is never applied twice, however old.

use std::path::Path;

use crate::common::{Project, count};

/// Checkpoints the table at `dir` and removes every log entry before the checkpoint,
/// whatever the table's retention (what a Spark checkpoint 30 days later does).
fn checkpoint_and_clean_up(dir: &Path) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let url = url::Url::from_directory_path(std::path::absolute(dir).unwrap()).unwrap();
        let table = deltalake::open_table(url).await.unwrap();
        deltalake::checkpoints::create_checkpoint(&table, None)
            .await
            .unwrap();
        let version = table.version().unwrap();
        let tomorrow_ms = chrono::Utc::now().timestamp_millis() + 86_400_000;
        deltalake::checkpoints::cleanup_expired_logs_for(
            version,
            table.log_store().as_ref(),
            tomorrow_ms,
            None,
        )
        .await
        .unwrap();
    });
    assert!(
        !dir.join("_delta_log/00000000000000000000.json").exists(),
        "the log before the checkpoint is gone"
    );
}

#[test]
fn ingested_files_stay_loaded_after_a_checkpoint_and_log_cleanup() {
    let p = Project::with_pipeline(
        "lake: ./lake\nflows:\n  items:\n    ingest:\n      from: ./in\n      into: raw.items\n      format: csv\n",
    );
    p.write("in/1.csv", "id,name\n1,a\n");
    p.ok(&["run"]);
    p.write("in/2.csv", "id,name\n2,b\n");
    p.ok(&["run"]);
    let ledger = p.file("lake/raw/items/_smelt/ledger");
    assert!(ledger.is_dir());
    // As after a crash right after a commit (or a table loaded by an older smelt): the
    // entries are only in the log; the next commit writes them back beside the table.
    std::fs::remove_dir_all(&ledger).unwrap();
    p.write("in/3.csv", "id,name\n3,c\n");
    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["files_read"], 1, "{:?}", flows[0]);
    checkpoint_and_clean_up(&p.file("lake/raw/items"));

    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["status"], "up_to_date", "{:?}", flows[0]);
    p.write("in/4.csv", "id,name\n4,d\n");
    let flows = p.flows(&["run"]);
    assert_eq!(flows[0]["files_read"], 1, "{:?}", flows[0]);
    assert_eq!(count(&p, "raw.items"), 4);
}

#[test]
fn replaced_batches_stay_applied_after_a_checkpoint_and_log_cleanup() {
    // Seed 003: an export writes Parquet files, replace_where applies each file once.
    let p = Project::example("export_replace");
    p.ok(&["sql", "-f", "source.sql"]);
    p.ok(&["sql", "-f", "target.sql"]);
    p.ok(&["run"]);
    let before = p.query("SELECT * FROM demo.sales ORDER BY sale_id");
    checkpoint_and_clean_up(&p.file("lake/demo/sales"));

    let flows = p.flows(&["run"]);
    let sales = flows.iter().find(|f| f["flow"] == "sales").unwrap();
    assert_eq!(sales["status"], "up_to_date", "{sales:?}");
    assert_eq!(p.query("SELECT * FROM demo.sales ORDER BY sale_id"), before);
}

/// Every ledger file of the ingest flow's table.
fn ledger_files(p: &Project) -> Vec<std::path::PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&p.file("lake/raw/items/_smelt/ledger"), &mut out);
    out.sort();
    out
}

/// A damaged ledger entry (a crash mid-write on a file system without ordered writes) is
/// taken from the table's log while the log still has it; once the log is cleaned up, the
/// run stops, naming the file, rather than load its files again.
#[test]
fn a_damaged_ledger_entry_is_repaired_from_the_log_or_refused() {
    let p = Project::with_pipeline(
        "lake: ./lake\nflows:\n  items:\n    ingest:\n      from: ./in\n      into: raw.items\n      format: csv\n",
    );
    p.write("in/1.csv", "id,name\n1,a\n");
    p.ok(&["run"]);
    let entry = ledger_files(&p).pop().expect("a ledger entry");
    std::fs::write(&entry, "{\"app\": \"smelt/it").unwrap();
    p.write("in/2.csv", "id,name\n2,b\n");
    let flows = p.flows(&["run"]);
    assert_eq!(
        flows[0]["files_read"], 1,
        "only the new file: {:?}",
        flows[0]
    );
    assert_eq!(count(&p, "raw.items"), 2);

    checkpoint_and_clean_up(&p.file("lake/raw/items"));
    let first = ledger_files(&p)
        .into_iter()
        .next()
        .expect("the first entry");
    std::fs::write(&first, "{\"app\": \"smelt/it").unwrap();
    p.write("in/3.csv", "id,name\n3,c\n");
    let (_, err) = p.fails(&["run"], 1);
    insta::assert_snapshot!("damaged_ledger_entry", crate::common::pinned(&p, &err));
    assert_eq!(count(&p, "raw.items"), 2, "nothing loaded again");
}
