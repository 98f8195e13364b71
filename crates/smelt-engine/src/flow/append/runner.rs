//! The runner of `append` flows: new source rows appended to a target ([`crate::flow::append`]).

use async_trait::async_trait;
use smelt_spec::{AppendFlow, TableName};

use super::{check_append, run_append};
use crate::flow::{FlowCx, FlowRunner, LakeCx};
use crate::ports::{ChangeSource, SourceOptions, TableRole};
use crate::report::{FlowEvent, FlowReport};
use crate::{EngineError, Result};

pub(crate) struct Append<'a> {
    pub(crate) name: &'a str,
    pub(crate) spec: &'a AppendFlow,
}

#[async_trait]
impl FlowRunner for Append<'_> {
    fn output(&self) -> Option<&TableName> {
        Some(&self.spec.into)
    }

    async fn run(&self, cx: &FlowCx<'_>, events: &mut Vec<FlowEvent>) -> Result<FlowReport> {
        let spec = self.spec;
        let source = cx.lake.source(&spec.from, SourceOptions::default()).await?;
        let mut target = cx.output(&spec.into, TableRole::Target).await?;
        cx.recover_event(self.name, &*target, events).await;
        run_append(cx.run(self.name, spec), &*source, &mut *target).await
    }

    async fn check(&self, cx: &LakeCx<'_>, source: Option<&dyn ChangeSource>) -> Vec<EngineError> {
        // Opened as a run opens it: a table smelt must not write is a problem too.
        let target = match cx.lake.table(&self.spec.into, TableRole::Target).await {
            Ok(target) => target,
            Err(e) => return vec![e],
        };
        match source {
            Some(source) => check_append(self.spec, &source.schema(), target.schema()).2,
            None => Vec::new(),
        }
    }
}
