//! "Where the time went": each variant's critical path as the page shows
//! it. Drawn here as inline SVG (bars and a waterfall need no axes to
//! hover), with stable ids and classes a browser test looks for:
//! `#where-the-time-went`, `.time-went` (one per variant), `.bottleneck`,
//! `.stage-bars`, `.stage-legend`, `table.stages`, `.waterfall`.

use std::fmt::Write;

use super::{escape, RunData, VariantData};
use crate::critical_path::{TracedJob, N_STAGES, STAGES};
use crate::summary::{RunSummary, VariantSummary};

/// One colour per stage, in path order; the rollout's a lighter blue than
/// the registration's, whose stage it was part of.
const COLOURS: [&str; N_STAGES] = [
    "#4e79a7", "#a0cbe8", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
    "#ff9da7", "#9c755f", "#bab0ac",
];
/// The SVGs' width, and the room their labels take on the left.
const WIDTH: f64 = 900.0;
const LABEL: f64 = 170.0;
/// The waterfall shows at most this many jobs.
const WATERFALL_ROWS: usize = 50;
/// The outline of a stage that spans a fault.
const FAULT_STROKE: &str = "#d62728";

/// The section, with a part per variant (its waterfall from its `data`).
pub fn section(s: &RunSummary, data: &RunData) -> String {
    let mut html = String::from(
        "<section id=\"where-the-time-went\"><h2>Where the time went</h2>\
         <p>Each job's time to running cut into the stages of its critical path, from its \
         submission to loadgen seeing it run; the shares are of the slowest 1% of jobs' time.</p>",
    );
    for v in &s.variants {
        let d = VariantData::of(data, &v.name);
        html.push_str(&variant(v, &d.slowest_paths, s.variants.len() > 1));
    }
    html.push_str("</section>");
    html
}

fn variant(v: &VariantSummary, slowest: &[TracedJob], named: bool) -> String {
    let mut html = format!(
        "<div class=\"time-went\" data-variant=\"{}\">",
        escape(&v.name)
    );
    if named {
        let _ = write!(html, "<h3>{}</h3>", escape(&v.name));
    }
    let cp = &v.critical_path;
    let c = &cp.trace_check;
    if cp.stages.is_empty() {
        let _ = write!(
            html,
            "<p class=\"hint\">No job was traced ({} ran untraced).</p></div>",
            c.untraced
        );
        return html;
    }
    if let Some(b) = &cp.bottleneck {
        let _ = write!(html, "<p class=\"bottleneck\">{}</p>", escape(&b.text));
    }
    html.push_str(&bars(
        &cp.stages_median_ms.all,
        &cp.stages_median_ms.slowest,
    ));
    html.push_str(&legend());
    html.push_str(&table(v));
    let _ = write!(
        html,
        "<p class=\"hint trace-check\">{} jobs traced, {} untraced; {} boundaries read before \
         the one they follow, moved up by {:.1} ms in all; {} applies read after the step \
         that follows them (a restarted leader's record lost), moved back to it by {:.1} ms. \
         The stages' medians add up to {:.1} ms; the median time to running is {:.1} ms.</p>",
        c.traced,
        c.untraced,
        c.clamps,
        c.clamped_ms,
        c.applies_bounded,
        c.applies_bounded_ms,
        c.sum_of_stage_medians_ms,
        c.median_time_to_running_ms
    );
    html.push_str(&waterfall(slowest));
    html.push_str("</div>");
    html
}

/// Two stacked bars of the median time per stage, on one scale: all jobs
/// and the slowest 1%.
fn bars(all: &[f64], slowest: &[f64]) -> String {
    let rows = [("all jobs", all), ("slowest 1%", slowest)];
    let most = rows
        .iter()
        .map(|(_, ms)| ms.iter().sum::<f64>())
        .fold(0.0, f64::max)
        .max(1e-9);
    let scale = (WIDTH - LABEL - 90.0) / most;
    let mut svg = format!(
        "<svg class=\"stage-bars\" viewBox=\"0 0 {WIDTH} 64\" width=\"{WIDTH}\" height=\"64\" \
         role=\"img\" aria-label=\"median time per stage\">"
    );
    for (row, (label, ms)) in rows.iter().enumerate() {
        let y = 4.0 + row as f64 * 30.0;
        let _ = write!(
            svg,
            "<text x=\"0\" y=\"{:.0}\" font-size=\"12\">{label}</text>",
            y + 16.0
        );
        let mut x = LABEL;
        for (i, m) in ms.iter().enumerate() {
            let w = m * scale;
            let _ = write!(
                svg,
                "<rect class=\"stage\" data-stage=\"{name}\" x=\"{x:.1}\" y=\"{y:.0}\" width=\"{w:.1}\" \
                 height=\"22\" fill=\"{fill}\"><title>{name}: {m:.1} ms</title></rect>",
                name = STAGES[i].name,
                fill = COLOURS[i]
            );
            x += w;
        }
        let _ = write!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.0}\" font-size=\"12\">{:.1} ms</text>",
            x + 6.0,
            y + 16.0,
            ms.iter().sum::<f64>()
        );
    }
    svg.push_str("</svg>");
    svg
}

fn legend() -> String {
    let mut html = String::from("<ul class=\"stage-legend\">");
    for (s, colour) in STAGES.iter().zip(COLOURS) {
        let _ = write!(
            html,
            "<li><span class=\"swatch\" style=\"background:{colour}\"></span>{} <small>({})</small></li>",
            s.name, s.process
        );
    }
    html.push_str("</ul>");
    html
}

fn table(v: &VariantSummary) -> String {
    let cp = &v.critical_path;
    let mut html = String::from(
        "<table class=\"data stages\"><thead><tr><th>stage</th><th>process</th><th>p50 ms</th>\
         <th>p99 ms</th><th>share of the slowest 1%</th><th>median ms, slowest 1%</th></tr></thead><tbody>",
    );
    for (i, s) in cp.stages.iter().enumerate() {
        let slow = cp.stages_median_ms.slowest.get(i).copied().unwrap_or(0.0);
        let _ = write!(
            html,
            "<tr data-stage=\"{}\"><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.0}%</td><td>{:.1}</td></tr>",
            escape(&s.stage),
            escape(&s.stage),
            escape(&s.process),
            s.p50_ms,
            s.p99_ms,
            s.share_of_p99 * 100.0,
            slow
        );
    }
    html.push_str("</tbody></table>");
    html
}

/// One row per slow job, slowest first, a segment per stage on a shared
/// time axis from each job's submission.
fn waterfall(jobs: &[TracedJob]) -> String {
    let jobs = &jobs[..jobs.len().min(WATERFALL_ROWS)];
    if jobs.is_empty() {
        return "<p class=\"hint\">No slow job's path was kept (<code>--trace-slowest 0</code>).</p>"
            .into();
    }
    let most = jobs
        .iter()
        .map(|j| j.time_to_running_ms)
        .fold(0.0, f64::max)
        .max(1e-9);
    let scale = (WIDTH - LABEL - 70.0) / most;
    let height = 20.0 + jobs.len() as f64 * 16.0;
    let mut svg = format!(
        "<p>The slowest {} jobs, stage by stage from their submission:</p>\
         <svg class=\"waterfall\" viewBox=\"0 0 {WIDTH} {height}\" width=\"{WIDTH}\" height=\"{height}\" \
         role=\"img\" aria-label=\"the slowest jobs stage by stage\">",
        jobs.len()
    );
    for (row, job) in jobs.iter().enumerate() {
        let y = 4.0 + row as f64 * 16.0;
        let id = job.spans.first().map_or("", |s| s.job_id.as_str());
        let _ = write!(
            svg,
            "<g class=\"job\" data-job=\"{id}\"><text x=\"0\" y=\"{:.0}\" font-size=\"11\">{id}</text>",
            y + 11.0,
            id = escape(id)
        );
        for (i, span) in job.spans.iter().enumerate() {
            // A stage that spans a fault is outlined, and says which.
            let (mark, spans) = match &span.spans_fault {
                Some(f) => (
                    format!(
                        " data-spans-fault=\"{f}\" stroke=\"{FAULT_STROKE}\" stroke-width=\"1.5\"",
                        f = escape(f)
                    ),
                    format!(", spans {}", escape(f)),
                ),
                None => (String::new(), String::new()),
            };
            let _ = write!(
                svg,
                "<rect class=\"stage\" data-stage=\"{name}\" x=\"{:.1}\" y=\"{y:.0}\" width=\"{:.1}\" \
                 height=\"12\" fill=\"{}\"{mark}><title>{name}: {:.1} to {:.1} ms{spans}</title></rect>",
                LABEL + span.start_ms * scale,
                (span.end_ms - span.start_ms) * scale,
                COLOURS[i % COLOURS.len()],
                span.start_ms,
                span.end_ms,
                name = escape(&span.stage)
            );
        }
        let _ = write!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.0}\" font-size=\"11\">{:.0} ms</text></g>",
            LABEL + job.time_to_running_ms * scale + 6.0,
            y + 11.0,
            job.time_to_running_ms
        );
    }
    svg.push_str("</svg>");
    let faults: std::collections::BTreeSet<&str> = jobs
        .iter()
        .flat_map(|j| &j.spans)
        .filter_map(|s| s.spans_fault.as_deref())
        .flat_map(|f| f.split(", "))
        .collect();
    if !faults.is_empty() {
        let names: Vec<String> = faults.iter().map(|f| escape(f)).collect();
        let _ = write!(
            svg,
            "<p class=\"hint spans-fault\">Stages outlined in red overlap a fault's window, from \
             its injection until the control plane was back: {}.</p>",
            names.join("; ")
        );
    }
    svg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::critical_path::{figures, path, slowest};
    use crate::stream::RanJob;
    use stampede_proto::JobTrace;

    /// A variant of `n` traced jobs, and its slowest paths (at most 20).
    fn traced(n: u64) -> (VariantSummary, Vec<TracedJob>) {
        let paths: Vec<_> = (1..=n)
            .map(|i| {
                let t = |k: u64| 1_000_000 + k * 1000 * i;
                let run = RanJob {
                    job_id: format!("web<{i}>"),
                    scheduled_us: t(0),
                    running_us: t(10),
                };
                let trace = JobTrace {
                    found: true,
                    registered_us: t(1),
                    eval_created_us: t(1),
                    enqueued_us: t(2),
                    dequeued_us: t(3),
                    caught_up_us: t(4),
                    plan_submitted_us: t(5),
                    plan_committed_us: t(6),
                    delivered_us: t(7),
                    started_us: t(8),
                    running_committed_us: t(9),
                    ..Default::default()
                };
                path(&run, &trace).unwrap()
            })
            .collect();
        let v = VariantSummary {
            name: "v & w".into(),
            critical_path: figures(&paths, 0, &[("nodesim".into(), 0.5)].into(), 3.0),
            ..Default::default()
        };
        (v, slowest(&paths, 20, "v & w"))
    }

    #[test]
    fn each_variant_gets_bars_a_legend_a_table_the_sentence_and_a_waterfall() {
        let (v, slowest) = traced(30);
        let html = variant(&v, &slowest, true);
        assert!(html.contains("data-variant=\"v &amp; w\"") && html.contains("<h3>v &amp; w</h3>"));
        assert_eq!(html.matches("<svg class=\"stage-bars\"").count(), 1);
        assert_eq!(
            html.matches("<rect class=\"stage\"").count(),
            2 * 11 + 20 * 11
        );
        assert_eq!(html.matches("<g class=\"job\"").count(), 20);
        assert!(html.contains("data-job=\"web&lt;30&gt;\"") && !html.contains("web<30>"));
        assert_eq!(html.matches("<tr data-stage=").count(), 11);
        assert_eq!(html.matches("<li>").count(), 11);
        assert!(html.contains("<p class=\"bottleneck\">at 3.0 jobs/s the p99 is set by"));
        assert!(html.contains("<svg class=\"waterfall\""));
    }

    #[test]
    fn a_stage_that_spans_a_fault_is_outlined_and_named() {
        let (v, mut slowest) = traced(3);
        assert!(!variant(&v, &slowest, false).contains("data-spans-fault"));
        slowest[0].spans[2].spans_fault = Some("kill_leader@15s".into());
        slowest[1].spans[2].spans_fault = Some("kill_leader@15s, pause_leader@30s".into());
        let html = variant(&v, &slowest, false);
        assert_eq!(
            html.matches("data-spans-fault=\"kill_leader@15s\"").count(),
            1
        );
        assert!(
            html.contains(": kill_leader@15s; pause_leader@30s.</p>"),
            "each fault once"
        );
        assert!(html.contains("ms, spans kill_leader@15s</title>"));
        assert!(html.contains("<p class=\"hint spans-fault\">"));
        assert_eq!(
            html.matches("<rect class=\"stage\"").count(),
            2 * 11 + 3 * 11
        );
    }

    #[test]
    fn a_variant_without_traces_says_so() {
        let html = variant(&VariantSummary::default(), &[], false);
        assert!(html.contains("No job was traced") && !html.contains("<svg"));
    }
}
