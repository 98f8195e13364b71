//! An apply flow with `scd: 2` on Spark: the contract of DESIGN §4 — one row per version,
//! late changes rebuilding the key's history, deletes that close nothing kept as
//! tombstones — as the embedded engine keeps it ([`smelt_core::scd2`]), compiled into
//! set-based Spark SQL over the keys a run changes ([`events`], in the terms of [`names`]). The reads, the casts and the
//! writes' order and watermark are those of an SCD1 run ([`crate::flow::apply`]); what differs is
//! step 4 (the history rebuilt, cached on the cluster) and the statements that write it
//! ([`write`]).

mod events;
mod names;
pub(crate) mod write;

use smelt_engine::{EngineError, Result};
use smelt_spec::OnSequenceConflict;

use crate::flow::apply::{Apply, Counts, Shape};
use crate::session::Session;
use crate::views::{EVENTS, HCHANGES, View};
pub(crate) use events::Stored;

/// The caches an SCD2 run makes, dropped before and after.
pub(crate) const VIEWS: [View; 2] = [EVENTS, HCHANGES];

/// The session conf that keeps a view's analyzed plan instead of its text (on while an SCD2
/// run makes its views and caches; see [`sql`]).
const ANALYZED_VIEWS: &str = "spark.sql.legacy.storeAnalyzedPlanForView";

/// From here on the run's views keep their analyzed plans (`on`: an SCD2 run, from the first
/// view over bronze's log to the last cache, reset once the caches are made) or their text
/// (every other run, whatever a failed run left set).
pub(crate) async fn keep_analyzed_views(s: &Session<'_>, on: bool) -> Result<()> {
    match on {
        true => s.setting(format!("SET {ANALYZED_VIEWS}=true")).await,
        false => s.setting(format!("RESET {ANALYZED_VIEWS}")).await,
    }
}

impl Apply<'_> {
    /// The history of every key the changes touch rebuilt and cached; the run's counts.
    pub(crate) async fn history(
        &self,
        s: &Session<'_>,
        shape: &Shape,
        stored: Stored<'_>,
        counts: &mut Counts,
    ) -> Result<()> {
        for view in VIEWS {
            s.setting(format!("DROP VIEW IF EXISTS {view}")).await?;
        }
        let caches = events::caches(self.spec, shape, stored)
            .ok_or_else(|| EngineError::Internal("scd: 2 without history columns".into()))?;
        let mut made = Ok(());
        for (what, statement) in caches {
            made = s.read(what, statement).await.map(|_| ());
            if made.is_err() {
                break;
            }
        }
        s.setting(format!("RESET {ANALYZED_VIEWS}")).await?;
        made?;
        let rows = s.read("count what the run does", write::counts()).await?;
        let changes = s
            .read("count the changes kept", write::change_counts())
            .await?;
        let one = |name: &str| {
            let rows = match name {
                "rejected" | "filtered" => &changes,
                _ => &rows,
            };
            rows.ints(name).first().copied().flatten().unwrap_or(0) as usize
        };
        counts.inserted = one("inserted");
        counts.updated = one("updated");
        counts.stale = one("stale");
        counts.deleted = one("deleted");
        counts.conflicts = one("conflicts");
        counts.tombstones = one("tombstones");
        counts.rejected = one("rejected");
        counts.filtered = one("filtered");
        // Every change is applied: none collapses into another.
        counts.winners = counts.kept;
        if counts.conflicts > 0 && self.spec.on_sequence_conflict == OnSequenceConflict::Fail {
            return Err(EngineError::rule(
                smelt_rules::messages::history_sequence_conflict(counts.conflicts),
            ));
        }
        Ok(())
    }
}
