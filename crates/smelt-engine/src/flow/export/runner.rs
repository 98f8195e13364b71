//! The runner of `export` flows: a table's changes → files ([`crate::flow::export`]).

use async_trait::async_trait;
use smelt_spec::{ExportFlow, TableName};

use super::{export_state, run_export};
use crate::flow::status::FlowStatus;
use crate::flow::{FlowCx, FlowRunner, LakeCx};
use crate::ports::{LastCommit, SourceOptions};
use crate::report::{FlowEvent, FlowReport};
use crate::{EngineError, Result};

pub(crate) struct Export<'a> {
    pub(crate) name: &'a str,
    pub(crate) spec: &'a ExportFlow,
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
            let last = async {
                if cx.files.target_missing(spec) {
                    return Ok(None);
                }
                let state = export_state(cx.files, self.name, spec).await?;
                Ok(state.run_id.map(|run_id| LastCommit {
                    at_ms: state.at_ms.unwrap_or_default(),
                    run_id: Some(run_id),
                    report: state.report,
                }))
            };
            match last.await {
                Ok(last) => cx.recover_from(self.name, last, events).await,
                // A damaged state fails the run itself, which says so once.
                Err(EngineError::Damaged { .. }) => {}
                Err(e) => cx.cannot_check(self.name, e),
            }
        }
        run_export(cx.run(self.name, spec), &*source, cx.files).await
    }

    /// The watermark is what the export's state says it exported.
    async fn status(&self, cx: &LakeCx<'_>, row: &mut FlowStatus) -> Result<()> {
        if cx.files.target_missing(self.spec) {
            row.problem = Some(smelt_rules::messages::NOT_EXPORTED_YET.into());
        } else {
            match export_state(cx.files, self.name, self.spec).await {
                Ok(state) => row.watermark = state.version,
                Err(e) => row.problem = Some(e.to_string()),
            }
        }
        Ok(())
    }
}
