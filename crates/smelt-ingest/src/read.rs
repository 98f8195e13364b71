//! A flow's landing as the engine's [`Landing`] port: list and stat through
//! [`files::Landing`], and each file read by the reader of its format on a blocking
//! thread, its batches handed over a bounded channel as a stream (the reader stays at
//! most a few batches ahead; dropping the stream stops it).

use std::fs::File;
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use futures::stream::{BoxStream, StreamExt};
use smelt_engine::EngineError;
use smelt_engine::ports::{FileRows, Landing, LandingFile, Malformed, RawRows};
use smelt_spec::{FileFormat, IngestFlow, StoreSettings};
use tokio::sync::mpsc;

use crate::{IngestError, RowSink, files};

/// Rows read per batch.
const BATCH_ROWS: usize = 8192;

/// Batches a reader may be ahead of the flow.
const AHEAD: usize = 4;

/// The landing of one flow.
pub struct FlowLanding {
    flow: Arc<IngestFlow>,
    landing: Arc<files::Landing>,
}

impl FlowLanding {
    /// The landing of `flow`.
    pub fn of(flow: &IngestFlow, settings: &StoreSettings) -> smelt_engine::Result<Self> {
        let landing = files::Landing::of(flow, settings).map_err(user)?;
        Ok(Self {
            flow: Arc::new(flow.clone()),
            landing: Arc::new(landing),
        })
    }
}

/// A file error of the flow `flow_name`, with the fix for its kind.
pub(crate) fn user(e: IngestError) -> EngineError {
    let hint = match &e {
        IngestError::Malformed { .. } => {
            "fix or replace the file (a new name loads as a new file), or move it out of the landing folder"
        }
        IngestError::Options(_) => "see docs/pipeline.md for the ingest options",
        IngestError::Io { .. } => "check that the file exists and can be read",
        IngestError::Arrow(_) => {
            return EngineError::Internal(e.to_string());
        }
    };
    EngineError::user(format!("{e}"), hint)
}

#[async_trait]
impl Landing for FlowLanding {
    async fn list(&self) -> smelt_engine::Result<Vec<LandingFile>> {
        self.landing
            .list(self.flow.pattern.as_deref())
            .await
            .map_err(user)
    }

    async fn stat(&self, file: &LandingFile) -> smelt_engine::Result<Option<(u64, i64)>> {
        self.landing.stat(file).await.map_err(user)
    }

    fn read(&self, file: &LandingFile) -> BoxStream<'static, smelt_engine::Result<FileRows>> {
        let (tx, rx) = mpsc::channel(AHEAD);
        let (flow, landing, file) = (
            Arc::clone(&self.flow),
            Arc::clone(&self.landing),
            file.clone(),
        );
        tokio::task::spawn_blocking(move || {
            let read = Arc::new(AtomicU64::new(0));
            let mut sink = Forward {
                tx: tx.clone(),
                read: Arc::clone(&read),
            };
            match read_file(&flow, &landing, &file, read, &mut sink) {
                Ok(()) => {}
                // The flow stopped reading: nobody to tell.
                Err(_) if tx.is_closed() => {}
                Err(e) => {
                    let _ = tx.blocking_send(Err(user(e)));
                }
            }
        });
        receiver_stream(rx).boxed()
    }
}

/// The receiving end of a channel as a stream.
fn receiver_stream<T: Send + 'static>(rx: mpsc::Receiver<T>) -> impl futures::Stream<Item = T> {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|t| (t, rx)) })
}

/// Hands what a reader reads to the flow.
struct Forward {
    tx: mpsc::Sender<smelt_engine::Result<FileRows>>,
    read: Arc<AtomicU64>,
}

impl Forward {
    fn send(&self, item: FileRows) -> crate::Result<()> {
        self.tx
            .blocking_send(Ok(item))
            .map_err(|_| IngestError::Options("the flow stopped reading".into()))
    }
}

impl RowSink for Forward {
    fn rows(&mut self, rows: RawRows) -> crate::Result<()> {
        self.send(FileRows::Rows(rows, self.read.load(Ordering::Relaxed)))
    }

    fn malformed(&mut self, row: Malformed) -> crate::Result<()> {
        self.send(FileRows::Malformed(row))
    }
}

/// Reads one file into `sink` (from a blocking context).
fn read_file(
    flow: &IngestFlow,
    landing: &files::Landing,
    file: &LandingFile,
    read_bytes: Arc<AtomicU64>,
    sink: &mut dyn RowSink,
) -> crate::Result<()> {
    let handle = tokio::runtime::Handle::current();
    let open = || -> crate::Result<Counting> {
        Ok(Counting {
            inner: landing.open(file, &handle)?,
            read: Arc::clone(&read_bytes),
        })
    };
    match flow.format {
        // Only the bytes listed: a file that grows while it is read loads as listed (and
        // counts as changed next run).
        FileFormat::Csv => crate::csv::read_csv(open()?, &file.url, &flow.csv, BATCH_ROWS, sink),
        FileFormat::Json => crate::json::read_json(open()?, &file.url, BATCH_ROWS, sink),
        FileFormat::Parquet => match landing.store_chunks(file, &handle) {
            Some(chunks) => {
                crate::parquet::read_parquet(chunks, &file.url, flow.infer_types, BATCH_ROWS, sink)
            }
            None => {
                let open = File::open(&file.location).map_err(|source| IngestError::Io {
                    file: file.url.clone(),
                    source,
                })?;
                crate::parquet::read_parquet(open, &file.url, flow.infer_types, BATCH_ROWS, sink)
            }
        },
    }
}

/// A reader that counts the bytes read, for progress.
struct Counting {
    inner: Box<dyn Read + Send>,
    read: Arc<AtomicU64>,
}

impl Read for Counting {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::AsArray;
    use futures::TryStreamExt;
    use smelt_spec::{FlowKind, Pipeline};

    use super::*;

    fn landing(dir: &std::path::Path, yaml_from: &str) -> FlowLanding {
        let yaml = format!(
            "lake: ./lake\nflows:\n  f:\n    ingest:\n      from: {yaml_from}\n      into: raw.t\n      format: csv\n"
        );
        let pipeline = Pipeline::from_str(&yaml, &dir.join("smelt.yaml")).unwrap();
        let FlowKind::Ingest(flow) = &pipeline.flows[0].kind else {
            panic!("an ingest flow")
        };
        FlowLanding::of(flow, &StoreSettings::default()).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_file_reads_as_a_stream_in_file_order_with_its_progress() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("landing")).unwrap();
        let rows: String = (0..20_000).map(|i| format!("{i},v{i}\n")).collect();
        let text = format!("id,v\n{rows}");
        std::fs::write(dir.path().join("landing/a.csv"), &text).unwrap();
        let landing = landing(dir.path(), "./landing/*.csv");
        let files = landing.list().await.unwrap();
        assert_eq!(files.len(), 1);

        let items: Vec<FileRows> = landing.read(&files[0]).try_collect().await.unwrap();
        let mut ids = Vec::new();
        let mut progress = Vec::new();
        for item in items {
            let FileRows::Rows(raw, read) = item else {
                panic!("no malformed line")
            };
            ids.extend(
                raw.batch
                    .column(0)
                    .as_string::<i32>()
                    .iter()
                    .map(|v| v.unwrap().to_string()),
            );
            progress.push(read);
        }
        assert_eq!(ids, (0..20_000).map(|i| i.to_string()).collect::<Vec<_>>());
        assert!(progress.len() > 1, "bounded batches: {}", progress.len());
        assert!(progress.is_sorted());
        assert_eq!(*progress.last().unwrap(), text.len() as u64);

        // Dropped after the first batch: the reader stops, and the landing reads again.
        let mut stream = landing.read(&files[0]);
        assert!(stream.try_next().await.unwrap().is_some());
        drop(stream);
        let again: Vec<FileRows> = landing.read(&files[0]).try_collect().await.unwrap();
        assert_eq!(again.len(), progress.len());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_file_that_cannot_be_read_ends_the_stream_with_the_file_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("landing")).unwrap();
        std::fs::write(dir.path().join("landing/a.csv"), "id\n1\n").unwrap();
        let landing = landing(dir.path(), "./landing/*.csv");
        let files = landing.list().await.unwrap();
        std::fs::remove_file(dir.path().join("landing/a.csv")).unwrap();
        let err = landing
            .read(&files[0])
            .try_collect::<Vec<_>>()
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("a.csv"), "{err}");
        // The engine names the flow, once (`EngineError::InFlow`).
        assert!(!err.contains("flow `"), "{err}");
    }
}
