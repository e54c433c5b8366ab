//! The history as people read it: `list` (runs by scenario and build),
//! `show` (one measure's series in the terminal, change points between
//! the builds) and `report` (one HTML page in the run report's look, each
//! measure over builds with the change points marked).

use std::fmt::Write;

use super::check::{Change, Series};
use crate::report::{self, escape, Chart, Kind, Mark};
use crate::stats::median;
use crate::summary::measures::{figure, Measure, MEASURES};

/// A Unix time as `2026-12-07T15:04:05Z`.
fn when(unix: f64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(unix.max(0.0));
    humantime::format_rfc3339_seconds(t).to_string()
}

/// A build as a line names it: its commit's first 12 characters.
pub fn short(label: &str) -> String {
    let (commit, dirty) = match label.strip_suffix("+dirty") {
        Some(c) => (c, "+dirty"),
        None => (label, ""),
    };
    format!("{}{dirty}", commit.chars().take(12).collect::<String>())
}

/// How a series is headed: `scenario / variant (machine …)`.
fn heading(s: &Series) -> String {
    let machine = match &s.machine {
        Some(m) => format!("machine {m}"),
        None => "machine unknown".into(),
    };
    let cores = (s.builds.iter().flat_map(|b| &b.runs))
        .find_map(|r| r.machine.as_ref())
        .map(|m| format!(", {} cores, {} MiB", m.cores, m.memory_mib))
        .unwrap_or_default();
    format!("{} / {} ({machine}{cores})", s.scenario, s.variant)
}

/// `history list`: every series, build by build in order.
pub fn list(all: &[Series]) -> String {
    let mut out = String::new();
    for s in all {
        let _ = writeln!(out, "{}", heading(s));
        let _ = writeln!(
            out,
            "  {:<3} {:<18} {:>5} {:>6}  {:<20}  {:<20}",
            "#", "build", "runs", "valid", "first run", "last run"
        );
        for (i, b) in s.builds.iter().enumerate() {
            let valid = b.runs.iter().filter(|r| r.valid).count();
            let times: Vec<f64> = b.runs.iter().map(|r| r.started_unix).collect();
            let (first, last) = (
                times.iter().copied().fold(f64::INFINITY, f64::min),
                times.iter().copied().fold(0.0, f64::max),
            );
            let _ = writeln!(
                out,
                "  {:<3} {:<18} {:>5} {:>6}  {:<20}  {:<20}",
                i + 1,
                short(&b.label),
                b.runs.len(),
                valid,
                when(first),
                when(last)
            );
        }
    }
    if all.is_empty() {
        out.push_str("no runs recorded\n");
    }
    out
}

/// `history show`: one measure's series, build by build, with the changes
/// found between the builds.
pub fn show(all: &[Series], m: &Measure, changes: &[Change]) -> String {
    let mut out = String::new();
    for s in all {
        let _ = writeln!(out, "{}: {}", heading(s), m.label);
        let _ = writeln!(
            out,
            "  {:<3} {:<18} {:>5} {:>12}  values (valid runs)",
            "#", "build", "runs", "median"
        );
        for (i, b) in s.builds.iter().enumerate() {
            for c in changes_of(changes, s, m).filter(|c| c.at == i) {
                let _ = writeln!(out, "  --- change: {} ---", said(c));
            }
            let values = b.values(m);
            let shown: Vec<String> = values.iter().map(|x| figure(*x)).collect();
            let _ = writeln!(
                out,
                "  {:<3} {:<18} {:>5} {:>12}  {}",
                i + 1,
                short(&b.label),
                b.runs.len(),
                median(&values).map_or("-".into(), figure),
                shown.join(" ")
            );
        }
    }
    out
}

/// The changes of measure `m` in series `s`.
fn changes_of<'a>(
    changes: &'a [Change],
    s: &'a Series,
    m: &'a Measure,
) -> impl Iterator<Item = &'a Change> {
    changes.iter().filter(move |c| {
        c.scenario == s.scenario
            && c.variant == s.variant
            && c.machine == s.machine
            && c.measure == m.name
    })
}

/// One change in words: `×0.812 [0.790, 0.835] p=0.002, c0ffee..beef, stage broker +6.0 ms, WORSE`.
pub fn said(c: &Change) -> String {
    let stage = match (&c.stage, c.stage_delta_ms) {
        (Some(s), Some(d)) => format!(", stage {s} moved most ({d:+.1} ms)"),
        _ => String::new(),
    };
    format!(
        "{}..{} ×{:.3} [{:.3}, {:.3}] p={:.3} (floor ±{:.0}%){stage}{}",
        short(&c.from_commit),
        short(&c.to_commit),
        c.ratio,
        c.interval[0],
        c.interval[1],
        c.p_value,
        c.floor * 100.0,
        if c.worse { ", worse" } else { ", better" }
    )
}

/// `history report`'s page: per series, each measure's median per build
/// with the change points marked, and the builds in order.
pub fn html(all: &[Series], changes: &[Change], by_commit: bool) -> String {
    let order = match by_commit {
        true => "builds in commit order",
        false => "builds in the order they were first run (not every commit is in this checkout)",
    };
    let lead = format!(
        "Every measure of every recorded run, build by build ({order}); a red line marks a change point \
         `loadgen history check` found: the ratio after/before, and the first build after it."
    );
    report::page("stampede run history", "Run history", &lead, |charts| {
        let mut page = String::new();
        if all.is_empty() {
            page.push_str("<p class=\"warn\">No runs recorded.</p>");
        }
        for s in all {
            let _ = write!(page, "<h2>{}</h2>", escape(&heading(s)));
            let drawn: Vec<Chart> = MEASURES.iter().map(|m| chart(s, m, changes)).collect();
            page.push_str(&charts.grid(drawn));
            page.push_str(&builds_table(s));
        }
        page
    })
}

/// One measure over the builds of a series: the median of each build's
/// valid runs, a mark before each build a change starts at.
fn chart(s: &Series, m: &Measure, changes: &[Change]) -> Chart {
    let points: Vec<(f64, f64)> = (s.builds.iter().enumerate())
        .filter_map(|(i, b)| Some(((i + 1) as f64, median(&b.values(m))?)))
        .collect();
    let mut chart = Chart::new(
        m.label,
        m.label,
        "build",
        Kind::Xy,
        &[("median of valid runs".into(), points)],
    );
    chart.marks = changes_of(changes, s, m)
        .map(|c| Mark {
            x: c.at as f64 + 0.5,
            label: format!("×{:.2} at {}", c.ratio, short(&c.to_commit)),
        })
        .collect();
    chart
}

/// The builds of a series as the charts number them.
fn builds_table(s: &Series) -> String {
    let mut t = String::from(
        "<table class=\"data builds\"><thead><tr><th>#</th><th>build</th><th>runs</th><th>valid</th><th>first run</th></tr></thead><tbody>",
    );
    for (i, b) in s.builds.iter().enumerate() {
        let first = b
            .runs
            .iter()
            .map(|r| r.started_unix)
            .fold(f64::INFINITY, f64::min);
        let _ = write!(
            t,
            "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            i + 1,
            escape(&short(&b.label)),
            b.runs.len(),
            b.runs.iter().filter(|r| r.valid).count(),
            when(first)
        );
    }
    t.push_str("</tbody></table>");
    t
}
