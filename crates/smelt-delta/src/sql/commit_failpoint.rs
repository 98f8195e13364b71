//! The crash drill of `smelt sql` UPDATE, DELETE and MERGE. delta-rs writes such a
//! statement's files and commits them in one call, with no point of smelt's in between; so
//! under a drill (`SMELT_FAILPOINT` naming `before_sql_commit`) the table is opened on a
//! store that fires the failpoint as the commit file is about to be created: the statement's
//! data files written, its commit not.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use deltalake::DeltaTable;
use deltalake::table::builder::DeltaTableBuilder;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};

use crate::error::{Context, Result};

/// The failpoint.
const POINT: &str = "before_sql_commit";

/// `table`, reopened on a store that fires [`POINT`] before its commit when a drill names
/// it; else `table` as it is.
pub(super) async fn armed(table: DeltaTable, name: &smelt_spec::TableName) -> Result<DeltaTable> {
    let drilled = std::env::var("SMELT_FAILPOINT").is_ok_and(|v| v.contains(POINT));
    if !drilled {
        return Ok(table);
    }
    let root = table.log_store().root_object_store(None);
    let url = table.log_store().root_url().clone();
    let mut reopened = DeltaTableBuilder::from_url(url.clone())
        .context(|| format!("opening `{name}`"))?
        .with_storage_backend(Arc::new(BeforeCommit(root)), url)
        .build()
        .context(|| format!("opening `{name}`"))?;
    reopened
        .load()
        .await
        .context(|| format!("opening `{name}`"))?;
    Ok(reopened)
}

/// A store that fires [`POINT`] before a commit file (`_delta_log/<version>.json`) is created.
#[derive(Debug)]
struct BeforeCommit(Arc<dyn ObjectStore>);

impl fmt::Display for BeforeCommit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BeforeCommit({})", self.0)
    }
}

/// True for `…/_delta_log/<20 digits>.json`.
fn is_commit(path: &Path) -> bool {
    let text = path.as_ref();
    let Some((dir, file)) = text.rsplit_once('/') else {
        return false;
    };
    dir.ends_with("_delta_log")
        && file.len() == 25
        && file.ends_with(".json")
        && file[..20].bytes().all(|b| b.is_ascii_digit())
}

fn fire(path: &Path) -> object_store::Result<()> {
    if is_commit(path) {
        smelt_engine::failpoint(POINT).map_err(|e| object_store::Error::Generic {
            store: "failpoint",
            source: Box::new(e),
        })?;
    }
    Ok(())
}

#[async_trait]
impl ObjectStore for BeforeCommit {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        fire(location)?;
        self.0.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.0.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.0.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.0.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.0.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.0.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        fire(to)?;
        self.0.copy_opts(from, to, options).await
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        fire(to)?;
        self.0.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_commit_files_fire() {
        for (path, commit) in [
            ("t/_delta_log/00000000000000000007.json", true),
            ("_delta_log/00000000000000000000.json", true),
            (
                "t/_delta_log/00000000000000000007.checkpoint.parquet",
                false,
            ),
            ("t/_delta_log/_last_checkpoint", false),
            ("t/part-0001.json", false),
            ("t/_delta_log/_commit_x.json.tmp", false),
        ] {
            assert_eq!(is_commit(&Path::from(path)), commit, "{path}");
        }
    }
}
