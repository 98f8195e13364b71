//! The names of the temporary views and caches a run makes on its session.
//!
//! A temporary view is its session's own, but Spark's cache manager is the cluster's: a
//! `DROP VIEW` or `UNCACHE TABLE` uncaches every cached view *of that name* in every session,
//! and compiles again, in the session dropping it, the caches of other sessions that read a
//! view of that name. Two smelt runs on one cluster that share view names thus break each
//! other's caches (seen as Spark's `INTERNAL_ERROR_ATTRIBUTE_NOT_FOUND` in a `MERGE` of one run
//! while another dropped its views). So each name carries a token of the flow being run — a
//! hash of its lake and name, `smelt_stage_1f0c9a2b` —: runs of other flows never share a name,
//! and a run's `DROP VIEW`s before it makes its caches also free those a killed run of the same
//! flow left on the cluster (a killed process never drops them, and Spark keeps them).

use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::RwLock;

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

/// The token of the flow being run (set by [`scope_to`]; the flows of a process run one
/// after another).
static TOKEN: RwLock<String> = RwLock::new(String::new());

/// From here on, the views are flow `flow`'s of lake `lake`: 32 bits of a hash of both, in hex.
pub(crate) fn scope_to(lake: &str, flow: &str) {
    *TOKEN.write().expect("the view token") = token_of(lake, flow);
}

fn token_of(lake: &str, flow: &str) -> String {
    let mut hasher = DefaultHasher::new();
    (lake, flow).hash(&mut hasher);
    format!("{:08x}", hasher.finish() as u32)
}

fn token() -> String {
    TOKEN.read().expect("the view token").clone()
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
    fn a_flow_has_its_own_token_in_every_run() {
        let token = token_of("/lake", "f");
        assert_eq!(token.len(), 8);
        assert!(token.chars().all(|c| c.is_ascii_hexdigit()), "{token}");
        assert_eq!(token_of("/lake", "f"), token);
        assert_ne!(token_of("/other", "f"), token);
        assert_ne!(token_of("/lake", "g"), token);
        assert!(STAGE.to_string().starts_with("smelt_stage_"));
    }
}
