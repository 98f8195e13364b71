//! Files that appear or grow while an ingest run is loading: a file that changes while it
//! is read fails the run (never half-loaded); the next run loads it whole, with the files
//! written meanwhile.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use smelt_delta::Lake;
use smelt_delta::table::DeltaLakeTable;
use smelt_engine::flow::FlowRun;
use smelt_engine::flow::apply::RunContext;
use smelt_engine::flow::ingest::{IngestTables, run_ingest};
use smelt_engine::ports::Reporter;
use smelt_engine::rejects::rejects_table;
use smelt_ingest::read::FlowLanding;
use smelt_spec::{FlowKind, Pipeline};

/// Writes a new file and appends to a listed one when the run starts loading.
struct Meddler {
    landing: PathBuf,
    done: AtomicBool,
}

impl Reporter for Meddler {
    fn phase(&self, _: &str, _: &str) {}

    fn files(&self, _: &str, done: (usize, u64), _: (usize, u64)) {
        if done.0 == 0 && !self.done.swap(true, Ordering::SeqCst) {
            std::fs::write(self.landing.join("c.csv"), "id\n5\n").unwrap();
            let mut b = std::fs::read_to_string(self.landing.join("b.csv")).unwrap();
            b.push_str("4\n");
            std::fs::write(self.landing.join("b.csv"), b).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_added_or_growing_during_a_run_wait_for_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let landing = dir.path().join("landing");
    std::fs::create_dir_all(&landing).unwrap();
    std::fs::write(landing.join("a.csv"), "id\n1\n").unwrap();
    std::fs::write(landing.join("b.csv"), "id\n2\n3\n").unwrap();
    let yaml = "lake: ./lake\nflows:\n  f:\n    ingest:\n      from: ./landing/*.csv\n      into: raw.t\n      format: csv\n";
    let pipeline = Pipeline::from_str(yaml, &dir.path().join("smelt.yaml")).unwrap();
    let FlowKind::Ingest(flow) = &pipeline.flows[0].kind else {
        panic!("an ingest flow")
    };
    let lake = Lake::new(dir.path().join("lake")).unwrap();
    let meddler = Meddler {
        landing: landing.clone(),
        done: AtomicBool::new(false),
    };
    let run = async |reporter: &dyn Reporter| {
        let mut bronze = DeltaLakeTable::open(&lake, &flow.into)
            .await
            .unwrap()
            .without_compaction();
        let mut rejects = DeltaLakeTable::open(&lake, &rejects_table(&flow.into))
            .await
            .unwrap();
        let tables = IngestTables {
            bronze: &mut bronze,
            rejects: &mut rejects,
        };
        let landing = FlowLanding::of(flow, &Default::default()).unwrap();
        let ctx = RunContext::new(false, false);
        run_ingest(FlowRun::new("f", flow, &ctx, reporter), &landing, tables).await
    };

    // b.csv grows after the listing: the run fails, committing nothing.
    let err = run(&meddler).await.unwrap_err().to_string();
    assert!(meddler.done.load(Ordering::SeqCst));
    assert!(
        err.contains("/landing/b.csv` changed while it was read"),
        "{err}"
    );
    assert!(!dir.path().join("lake/raw/t/_delta_log").exists());

    // The next run loads all three files whole, c.csv (written during the first run) too.
    let second = run(&smelt_engine::ports::Silent).await.unwrap();
    assert_eq!((second.files_found, second.files_read), (3, 3));
    assert_eq!(second.rows_written, 5, "1 + (2, 3, 4) + 5");
    let third = run(&smelt_engine::ports::Silent).await.unwrap();
    assert_eq!(third.status, smelt_engine::report::ReportStatus::UpToDate);
}
