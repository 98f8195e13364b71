//! SCD1 on Spark: the latest change per key with the embedded engine's tie-breaks, the
//! newer-than guard against silver and the tombstones, `where` on the key's state, and the
//! action each key gets (`smelt_stage`: [`latest`]); the statements that write silver and
//! the tombstones from it ([`write`]).

pub(super) mod latest;
pub(super) mod write;

use smelt_engine::Result;
use smelt_spec::OnSequenceConflict;

pub(super) use latest::Targets;

use super::shape::Shape;
use super::{Apply, Counts, fail};
use crate::session::Session;
use crate::views::STAGE;

impl Apply<'_> {
    /// Step 4 of SCD1: the latest change per key, guarded, cached (`smelt_stage`); its counts.
    pub(super) async fn latest(
        &self,
        s: &Session<'_>,
        shape: &Shape,
        targets: Targets<'_>,
        counts: &mut Counts,
    ) -> Result<()> {
        s.setting(format!("DROP VIEW IF EXISTS {STAGE}")).await?;
        s.read(
            "pick the latest change per key",
            latest::cache(self.spec, shape, targets),
        )
        .await?;
        let rows = s.read("count what the run does", latest::counts()).await?;
        let one = |name: &str| rows.ints(name).first().copied().flatten().unwrap_or(0) as usize;
        counts.winners = one("winners");
        counts.inserted = one("inserted");
        counts.updated = one("updated");
        counts.unchanged = one("unchanged");
        counts.deleted = one("deleted");
        counts.stale = one("stale");
        counts.tombstones = one("tombstones");
        counts.rejected = one("rejected");
        counts.conflicts = one("conflicts");
        counts.filtered = one("filtered");
        if counts.conflicts > 0 && self.spec.on_sequence_conflict == OnSequenceConflict::Fail {
            return Err(fail::conflict(s, self.spec, shape, counts.conflicts).await);
        }
        Ok(())
    }
}
