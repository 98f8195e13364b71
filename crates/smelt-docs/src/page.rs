//! The page: one self-contained HTML document (its style inline, no script, nothing fetched
//! when it is opened) — the DAG, then each flow (what it reads and writes, where it stands,
//! its runs as charts, its data quality), then each table (columns, size, history).

use maud::{DOCTYPE, Markup, PreEscaped, html};

use crate::charts;
use crate::graph;
use crate::model::{Docs, FlowDoc, RunDoc, TableDoc, anchor};

/// The page's style.
const STYLE: &str = include_str!("page.css");

/// The page of `docs`.
pub fn render(docs: &Docs) -> String {
    let failed = docs.flows.iter().filter(|f| f.state() == "failed").count();
    let behind = docs
        .flows
        .iter()
        .filter(|f| f.behind.unwrap_or(0) > 0)
        .count();
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="generator" content="smelt docs";
                title { "smelt · " (docs.pipeline) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    h1 { "Pipeline " code { (docs.pipeline) } }
                    p.meta {
                        "lake " code { (docs.lake) } " · engine " (docs.engine)
                        " · page made " span.generated { (docs.generated_at) } " UTC"
                    }
                    p.summary {
                        span.count { (docs.flows.len()) " flows" } " · "
                        span.count { (docs.tables.len()) " tables" } " · "
                        span.count.failed[failed > 0] { (failed) " failed" } " · "
                        span.count { (behind) " behind" }
                    }
                }
                section #dag {
                    h2 { "Flows and tables" }
                    p.legend {
                        span.key.applied { "last run applied or up to date" }
                        span.key.failed { "last run failed" }
                        span.key.never-run { "never run" }
                        span.key.table { "table" }
                    }
                    div.dag-frame { (PreEscaped(graph::svg(docs))) }
                }
                section #flows {
                    h2 { "Flows" }
                    @for f in &docs.flows { (flow(f)) }
                }
                section #tables {
                    h2 { "Tables" }
                    @for t in &docs.tables { (table(t)) }
                }
            }
        }
    };
    page.into_string()
}

/// The text of an optional number.
fn opt(v: Option<i64>) -> String {
    v.map_or_else(|| "–".into(), |v| v.to_string())
}

fn flow(f: &FlowDoc) -> Markup {
    let state = f.state().replace('_', "-");
    let last = f.runs.last();
    html! {
        article.flow.(state) id=(anchor("flow", &f.name)) data-name=(f.name) {
            h3 { (f.name) " " span.kind { (f.kind) } " " span.status { (f.state()) } }
            div.columns {
                dl.facts {
                    dt { "reads" } dd { @for s in &f.sources { code { (s) } " " } }
                    dt { "writes" } dd { code { (f.target) } }
                    @if !f.keys.is_empty() { dt { "keys" } dd { (f.keys.join(", ")) } }
                    @if !f.sequence_by.is_empty() { dt { "sequence" } dd { (f.sequence_by.join(", ")) } }
                    @for (k, v) in &f.options { dt { (k) } dd { code { (v) } } }
                }
                dl.facts.standing {
                    dt { "watermark" } dd { (opt(f.watermark)) }
                    dt { "source version" } dd { (opt(f.source_version)) }
                    dt { "behind" } dd.behind { (opt(f.behind)) " " (f.behind_unit) }
                    @if let Some(p) = &f.problem { dt { "problem" } dd.problem { (p) } }
                    @if let Some(r) = last { (last_run(r)) } @else { dt { "last run" } dd { "never run" } }
                }
            }
            @if !f.runs.is_empty() { (history(&f.runs)) }
            (quality(f))
        }
    }
}

fn last_run(r: &RunDoc) -> Markup {
    html! {
        dt { "last run" }
        dd.last-run { (r.started_at) " UTC, " (format_ms(r.duration_ms)) ", " b { (r.status) } }
        @if let Some(e) = &r.error { dt { "error" } dd { pre.error { (e) } } }
    }
}

fn format_ms(ms: i64) -> String {
    if ms < 1_000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", ms as f64 / 1_000.0)
    }
}

/// The runs as charts, one per figure.
fn history(runs: &[RunDoc]) -> Markup {
    let series = |f: fn(&RunDoc) -> i64| -> Vec<(String, i64)> {
        runs.iter().map(|r| (r.started_at.clone(), f(r))).collect()
    };
    let charts = [
        ("rows_in", "rows in", series(|r| r.rows_in)),
        ("applied", "applied", series(|r| r.applied)),
        ("unchanged", "unchanged", series(|r| r.unchanged)),
        ("deleted", "deleted", series(|r| r.deleted)),
        ("rejected", "rejected", series(|r| r.rejected)),
        ("duration_ms", "duration (ms)", series(|r| r.duration_ms)),
    ];
    html! {
        div.charts data-runs=(runs.len()) {
            @for (metric, title, points) in &charts { (PreEscaped(charts::line(metric, title, points))) }
        }
    }
}

fn quality(f: &FlowDoc) -> Markup {
    let q = &f.quality;
    let any = !q.cast_failures.is_empty()
        || !q.expectations.is_empty()
        || q.quarantined > 0
        || q.sequence_conflicts > 0
        || q.tombstones > 0
        || !q.samples.is_empty();
    html! {
        div.quality {
            h4 { "Data quality" }
            @if !any { p.clean { "Nothing rejected, quarantined or in conflict." } }
            @else {
                p {
                    "quarantined " b.quarantined { (q.quarantined) }
                    " · sequence conflicts " b { (q.sequence_conflicts) }
                    " · tombstones kept " b { (q.tombstones) }
                }
                @if !q.cast_failures.is_empty() {
                    table.cast-failures {
                        caption { "Values that could not be cast" }
                        tr { th { "run" } th { "column" } th { "values" } }
                        @for c in &q.cast_failures { tr { td { (c.run) } td { code { (c.name) } } td.n { (c.n) } } }
                    }
                }
                @if !q.expectations.is_empty() {
                    table.expectations {
                        caption { "Expectations failed" }
                        tr { th { "run" } th { "expectation" } th { "changes" } }
                        @for c in &q.expectations { tr { td { (c.run) } td { code { (c.name) } } td.n { (c.n) } } }
                    }
                }
                @if let (Some(t), false) = (&q.rejects_table, q.samples.is_empty()) {
                    table.samples {
                        caption { "Rows of " code { (t) } ", newest first" }
                        tr { @for (c, _) in &q.samples[0] { th { (c) } } }
                        @for row in &q.samples { tr { @for (_, v) in row { td { (v) } } } }
                    }
                }
            }
        }
    }
}

fn table(t: &TableDoc) -> Markup {
    html! {
        article.table id=(anchor("table", &t.name)) data-name=(t.name) {
            h3 { (t.name) " " span.kind { (t.format) } }
            @if !t.exists { p.missing { "Not created yet: no flow has written it." } }
            @else {
                dl.facts {
                    dt { "location" } dd { code { (t.location) } }
                    dt { "rows" } dd { (opt(t.rows)) }
                    dt { "files" } dd { (opt(t.files)) }
                    dt { "bytes" } dd { (opt(t.bytes)) }
                    @if let Some(f) = t.deleted_fraction { dt { "marked deleted" } dd { (format!("{:.1}%", f * 100.0)) } }
                    @if let Some(m) = &t.write_mode { dt { "write mode" } dd { (m) } }
                    @if let Some(c) = t.change_feed { dt { "change feed" } dd { (if c { "on" } else { "off" }) } }
                }
                table.columns {
                    tr { th { "column" } th { "type" } }
                    @for (c, ty) in &t.columns { tr { td { code { (c) } } td { (ty) } } }
                }
                @if !t.history.is_empty() {
                    table.history {
                        caption { "Last versions" }
                        tr { th { "version" } th { "when (UTC)" } th { "operation" } }
                        @for v in &t.history { tr { td.n { (v.version) } td { (v.timestamp) } td { (v.operation) } } }
                    }
                }
            }
        }
    }
}
