//! The summary as the terminal prints it (`scripts/run.sh`, `loadgen
//! capacity`): the table, one column per variant; then the search, the
//! breaches and what else went wrong; and last the answer, where the time
//! went: each variant's bottleneck in one sentence and its stages' p50 and
//! p99, so the first screen says it without opening `report.html`.

use std::fmt::Write;

use super::tables::{rows, Row};
use crate::summary::{RunSummary, VariantSummary};

/// The terminal summary.
pub fn terminal(s: &RunSummary) -> String {
    let mut out = columns(s);
    out.push_str(&verdicts(s));
    out.push_str(&answer(s));
    out
}

/// The table: a row per measure, a column per variant.
fn columns(s: &RunSummary) -> String {
    let rows = rows(s);
    let name = |r: &Row| {
        if r.sub {
            format!("  {}", r.name)
        } else {
            r.name.clone()
        }
    };
    let width = rows.iter().map(|r| name(r).len()).max().unwrap_or(0);
    let cols: Vec<usize> = (0..s.variants.len())
        .map(|i| {
            rows.iter()
                .map(|r| r.values[i].len())
                .chain([s.variants[i].name.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = format!("{:width$}", format!("scenario {}", s.scenario.name));
    for (v, w) in s.variants.iter().zip(&cols) {
        let _ = write!(out, "  {:>w$}", v.name);
    }
    for r in &rows {
        let _ = write!(out, "\n{:width$}", name(r));
        for (v, w) in r.values.iter().zip(&cols) {
            let _ = write!(out, "  {v:>w$}");
        }
    }
    out
}

/// Lines that judge the run: invalid variants, the search's probes or the
/// SLO breaches, failed audits, regressions, and a partial run.
fn verdicts(s: &RunSummary) -> String {
    let mut out = String::new();
    for v in s.variants.iter().filter(|v| !v.confidence.validity.valid) {
        for why in &v.confidence.validity.reasons {
            let _ = write!(out, "\nINVALID {}: {why}", v.name);
        }
    }
    if let Some(search) = &s.search {
        let _ = write!(out, "\nsearch for the highest rate: {}", search.confidence);
        for p in &search.probes {
            let _ = write!(
                out,
                "\n  {:>9} jobs/s  {:>8.0} placements/s taken  p99 placement {:>8.0} ms  p99 running {:>8.0} ms  {}{}",
                p.value,
                p.placements_per_s,
                p.p99_placement_ms,
                p.p99_running_ms,
                match (p.valid, p.passed) {
                    (false, _) => "unknown (invalid run)",
                    (true, true) => "met the SLOs",
                    (true, false) => "failed",
                },
                if p.repeat { " (again)" } else { "" }
            );
        }
    } else if !s.slo_breaches.is_empty() {
        let _ = write!(out, "\nSLO breached: {}", s.slo_breaches.join("; "));
    }
    for a in &s.audit_failures {
        let _ = write!(out, "\naudit failed: {a}");
    }
    for r in &s.regressions {
        let _ = write!(out, "\nworse than the baseline: {r}");
    }
    if !s.complete {
        out.push_str("\nthe run did not complete: this report is partial");
    }
    out
}

/// Where the time went, variant by variant: the bottleneck sentence, then
/// each stage's p50 / p99 in path order (the page's "Where the time went").
fn answer(s: &RunSummary) -> String {
    if s.variants.is_empty() {
        return String::new();
    }
    let mut out = String::from("\nwhere the time went:");
    for v in &s.variants {
        let _ = write!(out, "\n{}: {}", v.name, sentence(v));
        if !v.critical_path.stages.is_empty() {
            let _ = write!(out, "\n  stage p50 / p99 ms: {}", stage_line(v));
        }
    }
    out
}

/// The variant's bottleneck in one sentence, or why there is none.
fn sentence(v: &VariantSummary) -> String {
    let cp = &v.critical_path;
    match (&cp.bottleneck, cp.stages.is_empty()) {
        (Some(b), _) => b.text.clone(),
        (None, true) => format!(
            "no job was traced ({} ran untraced)",
            cp.trace_check.untraced
        ),
        (None, false) => "no stage stood out".into(),
    }
}

/// Every stage's p50 / p99, in path order.
fn stage_line(v: &VariantSummary) -> String {
    (v.critical_path.stages.iter())
        .map(|st| format!("{} {} / {}", st.stage, ms(st.p50_ms), ms(st.p99_ms)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Milliseconds with a decimal below ten, whole above.
fn ms(x: f64) -> String {
    match x.abs() < 10.0 {
        true => format!("{x:.1}"),
        false => format!("{x:.0}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;

    fn run(variants: Vec<VariantSummary>) -> RunSummary {
        let scenario = Scenario::load("default").unwrap();
        RunSummary::new(&scenario, &variants, variants.len(), None, None, None)
    }

    #[test]
    fn the_terminal_summary_ends_with_where_the_time_went() {
        let mut traced = VariantSummary {
            name: "fixed".into(),
            ..Default::default()
        };
        let cp = &mut traced.critical_path;
        cp.stages = vec![Default::default(); 2];
        let figures = [("register", 4.3, 12.0), ("broker_wait", 210.0, 886.6)];
        for (st, (name, p50, p99)) in cp.stages.iter_mut().zip(figures) {
            (st.stage, st.p50_ms, st.p99_ms) = (name.into(), p50, p99);
        }
        let b = cp.bottleneck.insert(Default::default());
        b.stage = "broker_wait".into();
        b.text = "at 2.0 jobs/s the p99 is set by the broker's queue (broker_wait, 33%)".into();
        let mut untraced = VariantSummary {
            name: "legacy".into(),
            ..Default::default()
        };
        untraced.critical_path.trace_check.untraced = 7;
        untraced.confidence.validity.reasons = vec!["loadgen fell behind".into()];
        let s = run(vec![traced, untraced]);
        let text = terminal(&s);
        let last: Vec<&str> = text.lines().rev().take(4).collect();
        assert_eq!(
            last,
            [
                "legacy: no job was traced (7 ran untraced)",
                "  stage p50 / p99 ms: register 4.3 / 12, broker_wait 210 / 887",
                "fixed: at 2.0 jobs/s the p99 is set by the broker's queue (broker_wait, 33%)",
                "where the time went:",
            ],
            "{text}"
        );
        // After the table and its verdicts.
        let before = text.lines().rev().nth(4).unwrap();
        assert!(before.starts_with("INVALID legacy: "), "{text}");
        assert!(text.starts_with("scenario default"), "{text}");
    }
}
