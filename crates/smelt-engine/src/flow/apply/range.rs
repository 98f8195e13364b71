//! The range of bronze versions one run applies: the stored watermark, the replay window of
//! `--since`, the watermark to commit, the report's `mode`, and whether silver is up to date
//! (or ahead of bronze, which was recreated).

use smelt_rules::watermark::{self, AheadFix};
use smelt_spec::ApplyFlow;

use crate::context::RunContext;
use crate::ports::{ChangeSource, LakeTable, Watermark, WatermarkSource};
use crate::report::ReadMode;
use crate::{EngineError, Result};

/// The bronze versions one run reads, `(after, to]`, and the watermark it commits.
pub(super) struct Range {
    /// Read the versions after this one; `None`: the snapshot at `to`.
    pub(super) after: Option<i64>,
    /// The source's version: read up to it (inclusive).
    pub(super) to: i64,
    /// The watermark to commit: `to`, except for a replay window that leaves a gap after it.
    pub(super) watermark_to: i64,
    /// The watermark silver holds.
    pub(super) stored: Option<i64>,
}

/// The range of a run of `flow` into `silver`: after the watermark `app` stored, after
/// nothing with `--full-refresh`, after `ctx.replay_after` with `--since`.
pub(super) async fn resolve_range(
    flow: &ApplyFlow,
    source: &dyn ChangeSource,
    silver: &dyn LakeTable,
    app: &str,
    ctx: &RunContext,
) -> Result<Range> {
    let v = source.version();
    let stored = if silver.schema().is_none() {
        None
    } else {
        silver.watermark(app).await?
    };
    // What to read after, and the watermark to commit.
    let (watermark, watermark_to) = match ctx.replay_after {
        Some(after) => {
            let Some(w) = stored else {
                return Err(EngineError::user(
                    format!(
                        "`--since` replays a window into silver `{}`, which no run of this flow has written yet",
                        flow.into
                    ),
                    "run the flow once without `--since`",
                ));
            };
            (Some(after), if after <= w { w.max(v) } else { w })
        }
        None if ctx.full_refresh => (None, v),
        None => (stored, v),
    };
    Ok(Range {
        after: watermark,
        to: v,
        watermark_to,
        stored,
    })
}

impl Range {
    /// The watermark the run's silver commit carries: `source` read through
    /// `watermark_to`, by run `run_id` of the flow whose application id is `app`.
    pub(super) fn watermark(
        &self,
        app: String,
        run_id: &str,
        source: &dyn ChangeSource,
    ) -> Watermark {
        Watermark {
            app_id: app,
            version: self.watermark_to,
            run_id: run_id.to_string(),
            report: None,
            extra: Vec::new(),
            source: Some(WatermarkSource::of(source, self.watermark_to)),
        }
    }

    /// How the source is read, for the report: `replay`, `rebuild`, `snapshot` or
    /// `incremental`.
    pub(super) fn mode(&self, ctx: &RunContext, silver: &dyn LakeTable) -> ReadMode {
        if ctx.replay_after.is_some() {
            ReadMode::Replay
        } else if ctx.full_refresh && silver.schema().is_some() {
            ReadMode::Rebuild
        } else if self.after.is_none() {
            ReadMode::Snapshot
        } else {
            ReadMode::Incremental
        }
    }

    /// True when there is nothing to read: silver has applied the source's version already
    /// (or, replaying, a later one). Silver ahead of bronze is an error: bronze was recreated.
    pub(super) fn up_to_date(&self, flow: &ApplyFlow, ctx: &RunContext) -> Result<bool> {
        let (watermark, v) = (self.after, self.to);
        if let Some(w) = watermark {
            if w >= v && ctx.replay_after.is_some() {
                return Ok(true);
            }
            if w == v {
                return Ok(true);
            }
            if w > v {
                return Err(EngineError::rule(watermark::ahead(
                    &format!("silver `{}`", flow.into),
                    &format!("bronze `{}`", flow.from),
                    w,
                    v,
                    AheadFix::FullRefresh,
                )));
            }
        }
        Ok(false)
    }
}
