//! The runner of `export` flows: a table's changes → files, through the
//! [`FileFlows`](crate::ports::FileFlows) port.

use async_trait::async_trait;
use smelt_spec::{ExportFlow, TableName};

use super::{FlowCx, FlowRunner, LakeCx};
use crate::Result;
use crate::ports::SourceOptions;
use crate::report::{FlowEvent, FlowReport};
use crate::status::FlowStatus;

pub(super) struct Export<'a> {
    pub(super) name: &'a str,
    pub(super) spec: &'a ExportFlow,
}

#[async_trait]
impl FlowRunner for Export<'_> {
    fn output(&self) -> Option<&TableName> {
        None
    }

    async fn run(&self, cx: &FlowCx<'_>, events: &mut Vec<FlowEvent>) -> Result<FlowReport> {
        let spec = self.spec;
        let source = cx.lake.source(&spec.from, SourceOptions::default()).await?;
        if !cx.ctx.dry_run {
            // A state that cannot be read is the export's to report (or, with
            // `--full-refresh`, to replace); here it only means nothing to recover.
            match cx.files.last_export(self.name, spec).await {
                Ok(last) => cx.recover_from(self.name, last, events).await,
                Err(e) => cx.cannot_check(self.name, e),
            }
        }
        cx.files
            .export(self.name, spec, &*source, cx.ctx, cx.reporter)
            .await
    }

    /// The watermark is what the export's state says it exported.
    async fn status(&self, cx: &LakeCx<'_>, row: &mut FlowStatus) -> Result<()> {
        if self.spec.url.is_none() && !self.spec.folder.exists() {
            row.problem = Some("not exported yet: run `smelt run`".into());
        } else {
            match cx.files.exported_version(self.name, self.spec).await {
                Ok(version) => row.watermark = version,
                Err(e) => row.problem = Some(e.to_string()),
            }
        }
        Ok(())
    }
}
