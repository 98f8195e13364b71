//! The statements of one flow run as they are sent: each shown as progress, recorded for
//! `smelt compile`, and, when it writes, sent only by a real run (a plan or a compile runs
//! the reads, which write nothing, and records the writes).

use std::sync::Mutex;

use smelt_engine::ports::Reporter;
use smelt_engine::{Result, failpoint};

use crate::client::{Rows, Spark};

/// One statement of a flow run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Statement {
    /// What it is for.
    pub what: String,
    /// The Spark SQL text.
    pub sql: String,
    /// Whether it writes a table (a plan or a compile does not send it).
    pub writes: bool,
}

/// What a flow run does with the statements it makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Send them all.
    Run,
    /// Send the reads only and stop before the writes (`smelt plan`).
    Plan,
    /// Send the reads only, and record the writes (`smelt compile`).
    Compile,
}

/// The statements of one flow run on one session.
pub(crate) struct Session<'a> {
    pub(crate) spark: &'a Spark,
    pub(crate) flow: &'a str,
    pub(crate) mode: Mode,
    pub(crate) reporter: &'a dyn Reporter,
    pub(crate) log: Mutex<Vec<Statement>>,
    /// Milliseconds per kind of statement sent (its `what`), in the order first sent.
    timings: Mutex<Vec<(String, u64)>>,
}

impl<'a> Session<'a> {
    pub(crate) fn new(
        spark: &'a Spark,
        flow: &'a str,
        mode: Mode,
        reporter: &'a dyn Reporter,
    ) -> Self {
        Self {
            spark,
            flow,
            mode,
            reporter,
            log: Mutex::new(Vec::new()),
            timings: Mutex::new(Vec::new()),
        }
    }

    /// Sends `sql` and adds its time to `what`'s.
    async fn send(&self, what: &str, sql: &str) -> Result<Rows> {
        let started = std::time::Instant::now();
        let rows = self.spark.sql(what, sql).await;
        let ms = started.elapsed().as_millis() as u64;
        let mut timings = self.timings.lock().expect("statement timings");
        match timings.iter_mut().find(|(w, _)| w == what) {
            Some((_, total)) => *total += ms,
            None => timings.push((what.to_string(), ms)),
        }
        Ok(rows?)
    }

    /// Milliseconds per kind of statement sent so far (the report's `phases_ms`).
    pub(crate) fn phases(&self) -> Vec<(String, u64)> {
        self.timings.lock().expect("statement timings").clone()
    }

    /// Runs a statement that writes nothing.
    pub(crate) async fn read(&self, what: &str, sql: String) -> Result<Rows> {
        self.record(what, &sql, false);
        self.reporter.phase(self.flow, what);
        self.send(what, &sql).await
    }

    /// Runs a statement that writes (not in a plan), after the failpoint `point` where it
    /// has one (crash drills: `SMELT_FAILPOINT=before_spark_silver:abort`).
    pub(crate) async fn write(
        &self,
        point: Option<&str>,
        what: &str,
        sql: String,
    ) -> Result<Option<Rows>> {
        self.record(what, &sql, true);
        if self.mode != Mode::Run {
            return Ok(None);
        }
        if let Some(point) = point {
            failpoint(point)?;
        }
        self.reporter.phase(self.flow, what);
        self.send(what, &sql).await.map(Some)
    }

    /// Defines a temporary view (sent in a plan too: it changes no table).
    pub(crate) async fn view(&self, what: &str, sql: String) -> Result<()> {
        self.record(what, &sql, false);
        self.send(what, &sql).await?;
        Ok(())
    }

    /// Runs a session setting (sent in a plan too: it changes no table).
    pub(crate) async fn setting(&self, sql: String) -> Result<()> {
        self.record("setting", &sql, false);
        self.send("a session setting", &sql).await?;
        Ok(())
    }

    /// A session setting that belongs to the writes (the watermark, the commit's metadata):
    /// recorded, and sent only by a real run.
    pub(crate) async fn write_setting(&self, sql: String) -> Result<()> {
        self.record("setting", &sql, true);
        if self.mode == Mode::Run {
            self.send("a session setting", &sql).await?;
        }
        Ok(())
    }

    /// Records a read sent directly (one whose failure the caller reads).
    pub(crate) fn record_read(&self, what: &str, sql: &str) {
        self.reporter.phase(self.flow, what);
        self.record(what, sql, false);
    }

    fn record(&self, what: &str, sql: &str, writes: bool) {
        self.log.lock().expect("statement log").push(Statement {
            what: what.to_string(),
            sql: sql.to_string(),
            writes,
        });
    }

    /// The statements made so far.
    pub(crate) fn statements(&self) -> Vec<Statement> {
        self.log.lock().expect("statement log").clone()
    }
}
