//! The runner of `ingest` flows: a landing folder's new files → bronze
//! ([`crate::flow::ingest`]).

use async_trait::async_trait;
use smelt_spec::{IngestFlow, TableName};

use super::{IngestTables, run_ingest};
use crate::flow::{FlowCx, FlowRunner, LakeCx, landing_problem};
use crate::ports::{ChangeSource, TableRole};
use crate::rejects::rejects_table;
use crate::report::{FlowEvent, FlowReport};
use crate::{EngineError, Result};

pub(crate) struct Ingest<'a> {
    pub(crate) name: &'a str,
    pub(crate) spec: &'a IngestFlow,
}

#[async_trait]
impl FlowRunner for Ingest<'_> {
    fn output(&self) -> Option<&TableName> {
        Some(&self.spec.into)
    }

    async fn run(&self, cx: &FlowCx<'_>, events: &mut Vec<FlowEvent>) -> Result<FlowReport> {
        let spec = self.spec;
        let mut bronze = cx.output(&spec.into, TableRole::Bronze).await?;
        cx.recover_event(self.name, &*bronze, events).await;
        let mut rejects = cx
            .output(&rejects_table(&spec.into), TableRole::Rejects)
            .await?;
        let tables = IngestTables {
            bronze: &mut *bronze,
            rejects: &mut *rejects,
        };
        let landing = cx.files.landing(spec)?;
        run_ingest(cx.run(self.name, spec), &*landing, tables).await
    }

    async fn check(&self, cx: &LakeCx<'_>, _: Option<&dyn ChangeSource>) -> Vec<EngineError> {
        landing_problem(cx, self.spec, &self.spec.into, false)
            .await
            .into_iter()
            .collect()
    }

    fn landing(&self) -> Option<&IngestFlow> {
        Some(self.spec)
    }
}
