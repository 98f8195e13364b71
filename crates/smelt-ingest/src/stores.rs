//! [`Files`]: the engine's [`FileStores`] port, on this crate's readers and writers.

use async_trait::async_trait;
use smelt_engine::ports::{ExportTarget, FileStores, Landing};
use smelt_spec::{ExportFlow, IngestFlow, StoreSettings};

use crate::read::FlowLanding;
use crate::target::Target;

/// Landing folders and export targets, local or at URLs (`object_store`; credentials from
/// the environment, as the cloud SDKs read them: `AWS_*`, `GOOGLE_*`, `AZURE_*`; timeouts
/// and retries from the pipeline's `storage:`).
#[derive(Debug, Default, Clone, Copy)]
pub struct Files {
    store: StoreSettings,
}

impl Files {
    /// Files whose stores time out and retry as `settings` say.
    pub fn new(settings: StoreSettings) -> Self {
        Files { store: settings }
    }
}

#[async_trait]
impl FileStores for Files {
    fn landing(&self, flow: &IngestFlow) -> smelt_engine::Result<Box<dyn Landing>> {
        Ok(Box::new(FlowLanding::of(flow, &self.store)?))
    }

    async fn export_target(
        &self,
        name: &str,
        flow: &ExportFlow,
        create: bool,
    ) -> smelt_engine::Result<Box<dyn ExportTarget>> {
        Ok(Box::new(Target::of(name, flow, create, &self.store)?))
    }
}
