//! Export targets (the [`ExportTarget`] port): a local folder or an object-store prefix,
//! Parquet files written under hidden names, and the export state saved as
//! `<to>/_smelt/<flow>/<n>.json`, each save created only if absent (local: a hard link;
//! S3: `If-None-Match`), so two runs of one export cannot both publish. States saved as
//! `<to>/_smelt/<flow>.json` by earlier versions are still read.

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use futures::StreamExt;
use object_store::buffered::BufWriter;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use parquet::arrow::AsyncArrowWriter;
use parquet::basic::{Compression as ParquetCompression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use smelt_engine::EngineError;
use smelt_engine::flow::export::TMP;
use smelt_engine::ports::{ExportFile, ExportState, ExportTarget};
use smelt_spec::{Compression, ExportFlow, StoreSettings};

use crate::files::Landing;

/// The store and folder exports go to.
pub(crate) struct Target {
    flow: String,
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    url: String,
}

/// A storage error while `what`, its cause kept (the CLI prints the chain).
fn storage(e: impl Into<Box<dyn std::error::Error + Send + Sync>>, what: &str) -> EngineError {
    EngineError::Storage {
        context: what.to_string(),
        source: e.into(),
    }
}

impl Target {
    /// The export target of `flow`; `create` makes a local folder that does not exist.
    pub(crate) fn of(
        name: &str,
        flow: &ExportFlow,
        create: bool,
        settings: &StoreSettings,
    ) -> smelt_engine::Result<Self> {
        let url = match &flow.url {
            Some(u) => u.clone(),
            None => {
                if create || flow.folder.exists() {
                    std::fs::create_dir_all(&flow.folder).map_err(|e| {
                        storage(e, &format!("creating `{}`", flow.folder.display()))
                    })?;
                } else {
                    return Err(EngineError::user(
                        format!("`{}` does not exist yet", flow.folder.display()),
                        "run the flow once to export into it",
                    ));
                }
                let abs = std::fs::canonicalize(&flow.folder)
                    .map_err(|e| storage(e, &format!("opening `{}`", flow.folder.display())))?;
                url::Url::from_directory_path(abs)
                    .map_err(|_| storage("not an absolute path", "export folder"))?
                    .to_string()
            }
        };
        match Landing::store(&url, settings).map_err(|e| storage(e, "export folder"))? {
            Landing::Store { store, prefix, .. } => Ok(Self {
                flow: name.to_string(),
                store,
                prefix,
                url: url.trim_end_matches('/').to_string(),
            }),
            Landing::Local(_) => Err(EngineError::Internal("a URL opened as a folder".into())),
        }
    }

    fn path(&self, relative: &str) -> ObjectPath {
        ObjectPath::from(format!(
            "{}/{relative}",
            self.prefix.as_ref().trim_end_matches('/')
        ))
    }

    /// Where states were kept before they were numbered: read when no numbered one exists.
    fn legacy_state_path(&self, flow: &str) -> ObjectPath {
        self.path(&format!("_smelt/{flow}.json"))
    }

    /// Save `number` of the state of `flow`. Each save creates a new file, only if it does
    /// not exist yet: two runs that loaded the same state cannot both save the next.
    fn state_path(&self, flow: &str, number: u64) -> ObjectPath {
        self.path(&format!("_smelt/{flow}/{number:020}.json"))
    }

    /// The number of the last save of `flow`'s state, 0 when there is none.
    async fn latest(&self, flow: &str) -> smelt_engine::Result<u64> {
        let dir = self.path(&format!("_smelt/{flow}"));
        let mut objects = self.store.list(Some(&dir));
        let mut latest = 0;
        while let Some(meta) = objects.next().await {
            let meta = meta.map_err(|e| storage(e, "listing the export state"))?;
            let number = meta
                .location
                .filename()
                .and_then(|n| n.strip_suffix(".json"))
                .and_then(|n| n.parse::<u64>().ok());
            latest = latest.max(number.unwrap_or(0));
        }
        Ok(latest)
    }

    async fn load(&self, flow: &str) -> smelt_engine::Result<ExportState> {
        let number = self.latest(flow).await?;
        let (path, shown) = match number {
            0 => (self.legacy_state_path(flow), format!("_smelt/{flow}.json")),
            n => (
                self.state_path(flow, n),
                format!("_smelt/{flow}/{n:020}.json"),
            ),
        };
        let mut state = match self.store.get(&path).await {
            Ok(got) => {
                let bytes = got
                    .bytes()
                    .await
                    .map_err(|e| storage(e, "reading the export state"))?;
                serde_json::from_slice(&bytes).map_err(|e| EngineError::Damaged {
                    message: format!(
                        "the export state `{}/{shown}` is damaged: {e}; nothing was published",
                        self.url
                    ),
                    source: None,
                    hint: "the state records what this export has published: put back a copy of the file, or remove the export's folder (its files and `_smelt/`) to export everything again".into(),
                })?
            }
            Err(object_store::Error::NotFound { .. }) => ExportState::default(),
            Err(e) => return Err(storage(e, "reading the export state")),
        };
        state.number = number;
        Ok(state)
    }

    /// Saves `state` as the next save after the one it was loaded from; fails, naming the
    /// flow, when another run saved that one first.
    async fn save(&self, flow: &str, state: &mut ExportState) -> smelt_engine::Result<()> {
        let json = serde_json::to_vec_pretty(state).expect("serialisable");
        let number = state.number + 1;
        let path = self.state_path(flow, number);
        let create = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        // A put is atomic: the state is the old one or the new one.
        match self
            .store
            .put_opts(&path, PutPayload::from(json), create)
            .await
        {
            Ok(_) => {}
            Err(object_store::Error::AlreadyExists { .. }) => {
                return Err(EngineError::user(
                    format!(
                        "another run of this export saved its state first (`{}/_smelt/{flow}/{number:020}.json` exists): what this run wrote is not published",
                        self.url
                    ),
                    "run again: the rerun continues from what the other run exported. Two runs of one export at once cannot both publish",
                ));
            }
            Err(e) => return Err(storage(e, "saving the export state")),
        }
        state.number = number;
        // Older saves are no longer read (the one before this stays, for inspection).
        if number > 2 {
            match self.store.delete(&self.state_path(flow, number - 2)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(storage(e, "removing an old export state")),
            }
        }
        Ok(())
    }

    /// Makes the files of `state.pending` visible (again: a rename already done is skipped).
    async fn finish(&self, flow: &str, state: &mut ExportState) -> smelt_engine::Result<()> {
        for (i, (from, to)) in state.pending.iter().enumerate() {
            let (from, to) = (self.path(from), self.path(to));
            match self.store.rename(&from, &to).await {
                Ok(()) => {}
                // Renamed by a run that stopped before saving the state.
                Err(object_store::Error::NotFound { .. }) if self.store.head(&to).await.is_ok() => {
                }
                Err(e) => return Err(storage(e, &format!("renaming `{from}`"))),
            }
            if i == 0 {
                // One file published: the other renames and the state still to do.
                smelt_engine::failpoint("before_export_rename_rest")?;
            }
        }
        state.pending.clear();
        self.save(flow, state).await?;
        // Hidden files written before this save are no export's any more: runs that
        // crashed before saving, or lost the race to save. (A run still writing started
        // after this save's state, which it loaded: its files are newer.)
        let saved = self
            .store
            .head(&self.state_path(flow, state.number))
            .await
            .map_err(|e| storage(e, "reading the export state"))?;
        self.sweep(flow, saved.last_modified).await?;
        Ok(())
    }

    /// Removes the hidden files of `flow` written before `before` (the store's clock).
    async fn sweep(
        &self,
        flow: &str,
        before: chrono::DateTime<chrono::Utc>,
    ) -> smelt_engine::Result<usize> {
        let mine = format!("{TMP}{flow}-");
        let mut objects = self.store.list(Some(&self.prefix));
        let mut gone = Vec::new();
        while let Some(meta) = objects.next().await {
            let meta = meta.map_err(|e| storage(e, "listing the export folder"))?;
            if meta.last_modified < before
                && meta
                    .location
                    .filename()
                    .is_some_and(|n| n.starts_with(&mine))
            {
                gone.push(meta.location);
            }
        }
        for p in &gone {
            self.store
                .delete(p)
                .await
                .map_err(|e| storage(e, "removing an unfinished export file"))?;
        }
        Ok(gone.len())
    }
}

fn properties(c: Compression) -> WriterProperties {
    let compression = match c {
        Compression::Snappy => ParquetCompression::SNAPPY,
        Compression::Zstd => ParquetCompression::ZSTD(ZstdLevel::default()),
        Compression::None => ParquetCompression::UNCOMPRESSED,
    };
    WriterProperties::builder()
        .set_compression(compression)
        .build()
}

#[async_trait]
impl ExportTarget for Target {
    async fn load(&self) -> smelt_engine::Result<ExportState> {
        Target::load(self, &self.flow).await
    }

    async fn latest(&self) -> smelt_engine::Result<u64> {
        Target::latest(self, &self.flow).await
    }

    async fn save(&self, state: &mut ExportState) -> smelt_engine::Result<()> {
        Target::save(self, &self.flow, state).await
    }

    async fn publish(&self, state: &mut ExportState) -> smelt_engine::Result<()> {
        self.finish(&self.flow, state).await
    }

    async fn create(
        &self,
        relative: &str,
        schema: SchemaRef,
        compression: Compression,
    ) -> smelt_engine::Result<Box<dyn ExportFile>> {
        let writer = AsyncArrowWriter::try_new(
            BufWriter::new(Arc::clone(&self.store), self.path(relative)),
            schema,
            Some(properties(compression)),
        )
        .map_err(|e| storage(e, "writing an export file"))?;
        Ok(Box::new(ParquetFile(writer)))
    }

    async fn size(&self, relative: &str) -> Option<u64> {
        self.store
            .head(&self.path(relative))
            .await
            .ok()
            .map(|m| m.size)
    }
}

/// An export file, written as Parquet through a buffered object-store upload.
struct ParquetFile(AsyncArrowWriter<BufWriter>);

#[async_trait]
impl ExportFile for ParquetFile {
    async fn write(&mut self, batch: &RecordBatch) -> smelt_engine::Result<()> {
        self.0
            .write(batch)
            .await
            .map_err(|e| storage(e, "writing an export file"))
    }

    async fn close(self: Box<Self>) -> smelt_engine::Result<()> {
        self.0
            .close()
            .await
            .map(|_| ())
            .map_err(|e| storage(e, "writing an export file"))
    }
}
