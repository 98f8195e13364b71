//! Progress and warnings: the CLI draws them; libraries never print.

use crate::report::FlowReport;

/// Progress of long phases. The CLI draws it; libraries never print.
pub trait Reporter: Send + Sync {
    /// A flow entered a phase (e.g. "read changes", "merge").
    fn phase(&self, flow: &str, phase: &str);
    /// Files (and their bytes) done out of those a flow loads.
    fn files(&self, flow: &str, done: (usize, u64), total: (usize, u64)) {
        let _ = (flow, done, total);
    }
    /// The flow finished (successfully or not).
    fn done(&self, flow: &str) {
        let _ = flow;
    }
    /// A flow of a run ended: its report, or `None` when it failed (the error ends the
    /// run). Called once per flow, after its last phase.
    fn finished(&self, flow: &str, report: Option<&FlowReport>) {
        let _ = (flow, report);
    }
    /// Something the user should know that does not stop the run.
    fn warn(&self, message: &str) {
        let _ = message;
    }
}

/// A reporter that shows nothing.
pub struct Silent;

impl Reporter for Silent {
    fn phase(&self, _: &str, _: &str) {}
}
