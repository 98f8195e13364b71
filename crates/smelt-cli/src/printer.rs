//! Human output: run reports, status tables, query results, and progress on a TTY.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use smelt_engine::ports::Reporter;
use smelt_engine::report::{FlowReport, ReadMode, ReportKind, ReportStatus};

/// A spinner on stderr while a flow works (nothing when stderr is not a terminal); each
/// flow's report on stdout when it ends, unless the output is JSON.
pub struct Progress {
    bar: Option<ProgressBar>,
    reports: bool,
}

impl Progress {
    /// Shows progress if stderr is a TTY and the user did not ask for quiet or JSON.
    /// `reports`: print each flow's report when it ends.
    pub fn new(enabled: bool, reports: bool) -> Self {
        let bar = (enabled && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_style(spinner());
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Self { bar, reports }
    }

    /// Removes the spinner.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Reporter for Progress {
    fn phase(&self, flow: &str, phase: &str) {
        if let Some(bar) = &self.bar {
            bar.set_style(spinner());
            bar.unset_length();
            bar.set_message(format!("{flow}: {phase}"));
        }
    }

    fn files(&self, flow: &str, done: (usize, u64), total: (usize, u64)) {
        if let Some(bar) = &self.bar {
            if bar.length() != Some(total.1) {
                bar.set_style(
                    ProgressStyle::with_template(
                        "{spinner} {elapsed:>4} {msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta})",
                    )
                    .expect("valid template")
                    .progress_chars("=> "),
                );
                bar.set_length(total.1);
            }
            bar.set_position(done.1.min(total.1));
            bar.set_message(format!(
                "{flow}: file {}/{}",
                (done.0 + 1).min(total.0),
                total.0
            ));
        }
    }

    fn finished(&self, _flow: &str, report: Option<&FlowReport>) {
        self.finish();
        if let Some(report) = report.filter(|_| self.reports) {
            print!("{}", flow_report(report));
        }
    }

    fn warn(&self, message: &str) {
        match &self.bar {
            Some(bar) => bar.suspend(|| eprintln!("warning: {message}")),
            None => eprintln!("warning: {message}"),
        }
    }
}

fn spinner() -> ProgressStyle {
    ProgressStyle::with_template("{spinner} {elapsed:>4} {msg}").expect("valid template")
}

/// Bytes as B / KiB / MiB / GiB.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// The human run report of one flow.
pub fn flow_report(r: &FlowReport) -> String {
    if r.kind == ReportKind::Ingest {
        return ingest_report(r);
    }
    if matches!(
        r.kind,
        ReportKind::Append | ReportKind::ReplaceWhere | ReportKind::Export
    ) {
        return move_report(r);
    }
    let range = match r.from_version {
        Some(w) => format!("bronze versions ({w}, {}]", r.to_version),
        None => format!("bronze snapshot at version {}", r.to_version),
    };
    if r.status == ReportStatus::UpToDate && r.mode == ReadMode::Replay {
        return format!(
            "flow {}: {} -> {}\n  nothing to replay: no bronze version in the window\n",
            r.flow, r.from, r.into
        );
    }
    if r.status == ReportStatus::UpToDate {
        return format!(
            "flow {}: {} -> {}\n  up to date: bronze version {} is applied; nothing to do\n",
            r.flow, r.from, r.into, r.to_version
        );
    }
    let mut out = format!(
        "flow {}: {} -> {}\n  {} ({}, {})\n",
        r.flow, r.from, r.into, r.status, r.mode, range
    );
    let rows: [(&str, usize); 11] = [
        ("changes read", r.changes_read),
        ("ignored", r.ignored),
        ("duplicates collapsed", r.duplicates_collapsed),
        ("stale (guard)", r.stale),
        ("rejected", r.rejected),
        ("inserted", r.inserted),
        ("updated", r.updated),
        ("unchanged", r.unchanged),
        ("deleted", r.deleted),
        ("cast failures", r.cast_failures_total()),
        ("files read", r.files_read),
    ];
    for (label, value) in rows {
        out.push_str(&format!("  {label:<22}{value:>10}\n"));
    }
    if r.delete_files_ignored > 0 {
        out.push_str(&format!(
            "  {:<22}{:>10}  (bronze deletes, ignored)\n",
            "delete files ignored", r.delete_files_ignored
        ));
    }
    for (label, value, note) in [
        ("filtered out", r.filtered, "(latest state fails `where`)"),
        ("dropped", r.dropped, "(failed an expectation)"),
        (
            "truncates",
            r.truncates,
            if r.truncated {
                "(silver emptied as of the latest)"
            } else {
                "(not newer than the last truncate)"
            },
        ),
        (
            "quarantined",
            r.quarantined,
            "(written to the rejects table)",
        ),
        (
            "sequence conflicts",
            r.sequence_conflicts,
            "(keys whose latest changes tie but differ)",
        ),
        (
            "tombstones written",
            r.tombstones_written,
            "(deleted keys, guard late changes)",
        ),
        (
            "tombstones expired",
            r.tombstones_expired,
            "(older than tombstone_retention)",
        ),
    ] {
        if value > 0 {
            out.push_str(&format!(
                "  {label:<22}{value:>10}  {note}
"
            ));
        }
    }
    let cast_note = match r.on_cast_error.as_str() {
        "quarantine" => "(quarantined)",
        "fail" => "(the run failed)",
        _ => "(stored as NULL)",
    };
    for (column, count) in &r.cast_failures {
        out.push_str(&format!("    {column:<20}{count:>10}  {cast_note}\n"));
    }
    for (name, count) in &r.expectations {
        out.push_str(&format!("  {:<22}{count:>10}\n", format!("expect {name}")));
    }
    out.push_str(&format!(
        "  {:<22}{:>10}\n",
        "bytes read",
        bytes(r.bytes_read)
    ));
    out.push_str(&format!(
        "  {:<22}{:>10}\n  {:<22}{:>10}\n  {:<22}{:>10}\n",
        "files written",
        r.files_written,
        "files rewritten",
        r.files_removed,
        "bytes written",
        bytes(r.bytes_written)
    ));
    if r.files_marked > 0 {
        out.push_str(&format!(
            "  {:<22}{:>10}  (rows replaced marked in deletion vectors)\n",
            "files marked", r.files_marked
        ));
    }
    if let Some(v) = r.silver_version {
        out.push_str(&format!("  {:<22}{:>10}\n", "silver version", v));
    }
    if r.partitions > 1 {
        out.push_str(&format!(
            "  {:<22}{:>10}  (spilled to disk to stay within --memory-limit)\n",
            "key partitions", r.partitions
        ));
    }
    let phases: Vec<String> = r
        .phases_ms
        .iter()
        .map(|(p, ms)| format!("{p} {ms} ms"))
        .collect();
    out.push_str(&format!("  time: {}\n", phases.join(", ")));
    out
}

/// The human run report of an ingest flow.
fn ingest_report(r: &FlowReport) -> String {
    let mut out = format!("flow {}: {} -> {}\n", r.flow, r.from, r.into);
    let changed = |out: &mut String| {
        if !r.files_changed.is_empty() {
            out.push_str(&format!(
                "  {:<22}{:>10}  (loaded before, changed since; see `on_changed_file`)\n",
                "files changed",
                r.files_changed.len()
            ));
            for url in r.files_changed.iter().take(5) {
                out.push_str(&format!("    {url}\n"));
            }
        }
    };
    if r.status == ReportStatus::UpToDate {
        out.push_str(&format!(
            "  up to date: no new file among {} found\n",
            r.files_found
        ));
        changed(&mut out);
        return out;
    }
    if r.status == ReportStatus::NoColumns {
        out.push_str(&format!(
            "  no columns yet: the {} new file(s) name none (empty, or every line malformed); nothing is recorded\n",
            r.files_new
        ));
    }
    let load = match r.from_version {
        Some(w) => format!("load {}, after {w}", r.to_version),
        None => format!("load {}", r.to_version),
    };
    out.push_str(&format!("  {} ({}, {load})\n", r.status, r.mode));
    counts(
        &mut out,
        &[
            ("files found", r.files_found),
            ("files new", r.files_new),
            ("files read", r.files_read),
            ("rows written", r.rows_written),
        ],
    );
    noted(
        &mut out,
        &[
            (
                "files pending",
                r.files_pending,
                "(over max_files_per_run; next run)",
            ),
            (
                "malformed rows",
                r.malformed,
                "(quarantined in the rejects table)",
            ),
            (
                "rescued rows",
                r.rescued,
                "(values kept in the rescued-data column)",
            ),
        ],
    );
    changed(&mut out);
    if !r.columns_added.is_empty() {
        out.push_str(&format!(
            "  {:<22}{:>10}  ({})\n",
            "columns added",
            r.columns_added.len(),
            r.columns_added.join(", ")
        ));
    }
    out.push_str(&format!(
        "  {:<22}{:>10}\n",
        "bytes read",
        bytes(r.bytes_read)
    ));
    footer(&mut out, r, "bronze version");
    out
}

/// One count a line.
fn counts(out: &mut String, rows: &[(&str, usize)]) {
    for (label, value) in rows {
        out.push_str(&format!("  {label:<22}{value:>10}\n"));
    }
}

/// One count a line, with a note, for the counts that are not zero.
fn noted(out: &mut String, rows: &[(&str, usize, &str)]) {
    for (label, value, note) in rows {
        if *value > 0 {
            out.push_str(&format!("  {label:<22}{value:>10}  {note}\n"));
        }
    }
}

/// Files and bytes written, the output's version (`version` names it) and the time per
/// phase.
fn footer(out: &mut String, r: &FlowReport, version: &str) {
    out.push_str(&format!(
        "  {:<22}{:>10}\n  {:<22}{:>10}\n",
        "files written",
        r.files_written,
        "bytes written",
        bytes(r.bytes_written)
    ));
    if let Some(v) = r.silver_version {
        out.push_str(&format!("  {version:<22}{v:>10}\n"));
    }
    let phases: Vec<String> = r
        .phases_ms
        .iter()
        .map(|(p, ms)| format!("{p} {ms} ms"))
        .collect();
    out.push_str(&format!("  time: {}\n", phases.join(", ")));
}

/// The human run report of an append, replace_where or export flow.
fn move_report(r: &FlowReport) -> String {
    let mut out = format!("flow {}: {} -> {}\n", r.flow, r.from, r.into);
    if r.status == ReportStatus::UpToDate {
        out.push_str(&match r.kind {
            ReportKind::ReplaceWhere => "  up to date: no new batch\n".to_string(),
            _ => format!(
                "  up to date: source version {} is done; nothing to do\n",
                r.to_version
            ),
        });
        return out;
    }
    let range = match (r.kind, r.from_version) {
        (ReportKind::ReplaceWhere, _) => format!("batch {}", r.to_version),
        (_, Some(w)) if r.mode == ReadMode::Incremental => {
            format!("source versions ({w}, {}]", r.to_version)
        }
        _ => format!("source snapshot at version {}", r.to_version),
    };
    out.push_str(&format!("  {} ({}, {range})\n", r.status, r.mode));
    if let Some(p) = &r.predicate {
        out.push_str(&format!("  predicate             {p}\n"));
    }
    if let Some(p) = &r.partition {
        out.push_str(&format!("  partition             {p}\n"));
    }
    counts(
        &mut out,
        &[
            ("rows read", r.changes_read),
            ("rows written", r.rows_written),
        ],
    );
    noted(
        &mut out,
        &[
            (
                "rows replaced",
                r.rows_replaced,
                "(target rows the predicate matched)",
            ),
            ("filtered out", r.filtered, "(`where` is not true)"),
            (
                "ignored",
                r.ignored,
                "(not new rows: update images, deletes)",
            ),
            ("cast failures", r.cast_failures_total(), "(stored as NULL)"),
            ("files new", r.files_new, "(files of the batch)"),
        ],
    );
    if !r.skipped_versions.is_empty() {
        out.push_str(&format!(
            "  skipped versions      {:?}  (they rewrite rows; `on_rewrite: skip`)\n",
            r.skipped_versions
        ));
    }
    footer(&mut out, r, "target version");
    out
}
