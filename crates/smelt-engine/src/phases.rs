//! [`Phases`]: how long each phase of a flow run took, for its report.

use std::time::Instant;

/// Milliseconds per phase of a flow run, in order (the report's `phases_ms`).
pub(crate) struct Phases {
    start: Instant,
    /// The phases so far: name and milliseconds.
    pub(crate) done: Vec<(String, u64)>,
}

impl Phases {
    /// The first phase starts now.
    pub(crate) fn new() -> Self {
        Self {
            start: Instant::now(),
            done: Vec::new(),
        }
    }
    /// Ends phase `name` now; the next one starts.
    pub(crate) fn end(&mut self, name: &str) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.add(name, ms);
        self.start = Instant::now();
    }
    /// Adds `ms` to phase `name` (phases repeat once per partition).
    pub(crate) fn add(&mut self, name: &str, ms: u64) {
        match self.done.iter_mut().find(|(n, _)| n == name) {
            Some((_, total)) => *total += ms,
            None => self.done.push((name.to_string(), ms)),
        }
    }
}
