//! The names of the temporary views and caches a run makes on its session.
//!
//! A temporary view is its session's own, but Spark's cache manager is the cluster's: a
//! `DROP VIEW` or `UNCACHE TABLE` uncaches every cached view *of that name* in every session,
//! and compiles again, in the session dropping it, the caches of other sessions that read a
//! view of that name. Two smelt runs on one cluster that share view names thus break each
//! other's caches (seen as Spark's `INTERNAL_ERROR_ATTRIBUTE_NOT_FOUND` in a `MERGE` of one run
//! while another dropped its views). So each name carries a token drawn once per process:
//! `smelt_stage_1f0c9a2b`.

use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

/// A temporary view of a run, shown as its name on this process's sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct View(&'static str);

impl View {
    /// The view `smelt_<what>_<token>`.
    pub(crate) const fn new(what: &'static str) -> Self {
        Self(what)
    }
}

impl fmt::Display for View {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "smelt_{}_{}", self.0, token())
    }
}

/// This process's token: 32 random bits (std's per-process random hasher keys), in hex.
fn token() -> &'static str {
    static TOKEN: OnceLock<String> = OnceLock::new();
    TOKEN.get_or_init(|| {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        format!("{:08x}", hasher.finish() as u32)
    })
}

/// `smelt_log`: the action lines of the bronze commits a run reads.
pub(crate) const LOG: View = View::new("log");
/// `smelt_commits`: the commits read.
pub(crate) const COMMITS: View = View::new("commits");
/// `smelt_files`: the files read, in read order.
pub(crate) const FILES: View = View::new("files");
/// `smelt_raw`: bronze's rows read, with their read order.
pub(crate) const RAW: View = View::new("raw");
/// `smelt_changes`: the typed changes (cached).
pub(crate) const CHANGES: View = View::new("changes");
/// `smelt_stage`: what each key's latest change does, SCD1 (cached).
pub(crate) const STAGE: View = View::new("stage");
/// `smelt_hchanges`: the changes an SCD2 run applies (cached).
pub(crate) const HCHANGES: View = View::new("hchanges");
/// `smelt_events`: the history an SCD2 run rebuilds (cached).
pub(crate) const EVENTS: View = View::new("events");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_carries_the_process_token() {
        let name = STAGE.to_string();
        let token = name.strip_prefix("smelt_stage_").expect(&name);
        assert_eq!(token.len(), 8);
        assert!(token.chars().all(|c| c.is_ascii_hexdigit()), "{name}");
        assert_eq!(CHANGES.to_string(), format!("smelt_changes_{token}"));
    }
}
