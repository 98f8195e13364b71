//! Where a flow stands against its source: the source version it applied last (its
//! watermark, kept in the target's commits) against the source's version now.

use crate::Message;

/// How the target of a flow whose watermark is ahead is set right.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AheadFix {
    /// A rebuild (`--full-refresh`) writes a new watermark.
    FullRefresh,
    /// The target must be dropped: a Delta table written through Spark keeps its
    /// watermark in Delta's idempotent-write `txn`, which no write can lower.
    Drop,
}

/// The message of a watermark ahead of its source: `target` (e.g. "silver `silver.p`")
/// holds source version `stored`, and `source` (e.g. "bronze `bronze.p`") is at `version`.
pub fn ahead(target: &str, source: &str, stored: i64, version: i64, fix: AheadFix) -> Message {
    Message {
        text: format!(
            "{target} has applied version {stored} of {source}, which is only at version {version}: was the source recreated or restored to an older version?"
        ),
        hint: match fix {
            AheadFix::FullRefresh => format!("rebuild {target} with `smelt run --full-refresh`"),
            AheadFix::Drop => format!(
                "drop {target} (and an apply flow's tombstones) and run again: a Delta table's idempotent writes on Spark cannot lower its watermark"
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fix_of_a_watermark_ahead_is_the_engines() {
        let m = ahead("silver `s.p`", "bronze `b.p`", 4, 3, AheadFix::FullRefresh);
        assert!(
            m.text
                .contains("applied version 4 of bronze `b.p`, which is only at version 3")
        );
        assert!(m.hint.contains("--full-refresh"), "{}", m.hint);
        let m = ahead("silver `s.p`", "bronze `b.p`", 4, 3, AheadFix::Drop);
        assert!(m.hint.starts_with("drop silver `s.p`"), "{}", m.hint);
    }
}
