//! The one settings type of a run ([`RunContext`]: its id and time, and what the command
//! line asked), shared by every flow of it, and the watermark id of a flow ([`app_id`]).

/// A run's settings, shared by every flow of it: what the command line asked (`smelt run`,
/// `smelt plan`), its id and its time.
#[derive(Debug, Clone)]
pub struct RunContext {
    /// Unique id of the run.
    pub run_id: String,
    /// The run timestamp (µs since the epoch, UTC): `_update_timestamp` of changed rows.
    pub run_timestamp_us: i64,
    /// Plan only: compute the report, write nothing.
    pub dry_run: bool,
    /// Ignore the watermark and rebuild from the bronze snapshot.
    pub full_refresh: bool,
    /// Replay a window (`--since`): read the bronze versions after this one, up to the
    /// source's version, whatever the watermark says. Safe because of the guard. The
    /// watermark moves forward only when the window leaves no gap after it.
    pub replay_after: Option<i64>,
    /// Memory the run may use for changes in flight, in bytes (`--memory-limit`; by
    /// default half the machine's); `None`: no limit. Larger change sets are applied in
    /// key partitions spilled to local disk.
    pub memory_limit: Option<u64>,
    /// Replay the source versions committed since this instant (`--since`).
    pub since: Option<String>,
    /// … up to this instant (`--until`).
    pub until: Option<String>,
    /// Time zone of `since`/`until` without one (`--tz`).
    pub tz: Option<String>,
}

impl RunContext {
    /// A new run: fresh id, timestamp now.
    pub fn new(dry_run: bool, full_refresh: bool) -> Self {
        Self {
            run_id: uuid::Uuid::new_v4().to_string(),
            run_timestamp_us: chrono::Utc::now().timestamp_micros(),
            dry_run,
            full_refresh,
            replay_after: None,
            memory_limit: default_memory_limit(),
            since: None,
            until: None,
            tz: None,
        }
    }
}

/// Half of the machine's memory (Linux `/proc/meminfo`), or `None` where unknown.
pub fn default_memory_limit() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024 / 2)
}

/// The watermark application id of a flow.
pub fn app_id(flow: &str) -> String {
    format!("smelt/{flow}")
}
