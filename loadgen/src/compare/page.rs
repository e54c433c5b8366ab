//! A comparison as the terminal table and as `compare.html`: the verdicts,
//! then each variant's latency distributions and its windows over the
//! stream, A and B overlaid. The page is self-contained (inline SVG, no
//! script), so it opens from anywhere.

use std::fmt::Write;

use super::{Comparison, Verdict};
use crate::report::escape;
use crate::stream::Window;
use crate::summary::measures::{by_name, figure};
use crate::summary::{RunSummary, VariantSummary};

/// The table for the terminal.
pub fn table(c: &Comparison) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "compare {} -> {} ({})", c.a, c.b, c.scenario);
    let _ = writeln!(out, "  A ran {}", c.build_a.line());
    let _ = writeln!(out, "  B ran {}", c.build_b.line());
    for v in &c.variants {
        let _ = writeln!(out, "\nvariant {}", v.name);
        // A variant that ran a build other than its run's says so.
        if (&v.build_a, &v.build_b) != (&c.build_a, &c.build_b) {
            let _ = writeln!(out, "  A ran {}", v.build_a.line());
            let _ = writeln!(out, "  B ran {}", v.build_b.line());
        }
        let _ = writeln!(
            out,
            "  {:<34} {:>12} {:>12} {:>8} {:>17} {:>8}  {:<12} samples",
            "measure", "A", "B", "B/A", "interval", "floor", "verdict"
        );
        for m in &v.measures {
            let label = by_name(m.measure).map_or(m.measure, |x| x.label);
            let gate = if m.gated { "*" } else { " " };
            let _ = writeln!(
                out,
                "  {gate}{label:<33} {:>12} {:>12} {:>8.3} {:>17} {:>8}  {:<12} {} ({}/{})",
                figure(m.a),
                figure(m.b),
                m.ratio,
                format!("[{:.3}, {:.3}]", m.lo, m.hi),
                floor(m),
                verdict(m.verdict),
                serde_json::to_value(m.samples)
                    .ok()
                    .and_then(|s| s.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                m.n_a,
                m.n_b,
            );
        }
    }
    let _ = writeln!(
        out,
        "\n* gated measure; interval: B/A at its confidence ({}); floor: ±, c calibrated from the runs' spread, f fixed",
        levels(c)
    );
    match c.worse.is_empty() {
        true => {
            let _ = writeln!(out, "no gated measure is worse");
        }
        false => {
            let _ = writeln!(out, "worse: {}", c.worse.join("; "));
        }
    }
    out
}

fn verdict(v: Verdict) -> &'static str {
    match v {
        Verdict::Better => "better",
        Verdict::Worse => "WORSE",
        Verdict::Same => "same",
        Verdict::Inconclusive => "inconclusive",
    }
}

/// A measure's noise floor as the table shows it: `5.0%c` (calibrated) or
/// `15.0%f` (fixed).
fn floor(m: &super::MeasureComparison) -> String {
    let source = match m.floor_source {
        super::FloorSource::Calibrated => 'c',
        super::FloorSource::Fixed => 'f',
    };
    format!("{:.1}%{source}", m.floor * 100.0)
}

/// The confidences the comparison's intervals reach, as the legend says them.
fn levels(c: &Comparison) -> String {
    let mut levels: Vec<String> = (c.variants.iter().flat_map(|v| &v.measures))
        .map(|m| format!("{:.1}%", m.confidence * 100.0))
        .collect();
    levels.sort();
    levels.dedup();
    levels.join(", ")
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:2em;color:#222}\
table{border-collapse:collapse}td,th{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}\
td:first-child,th:first-child{text-align:left}.better{color:#17803d;font-weight:600}\
.worse{color:#c0262d;font-weight:600}.inconclusive{color:#777}.same{color:#444}.charts{display:flex;flex-wrap:wrap;gap:1em}\
svg{background:#fafafa;border:1px solid #ddd}.a{stroke:#1f6fb2}.b{stroke:#d9651f}";

/// The page: the verdict tables, then per variant the two runs' latency
/// distributions and windows overlaid.
pub fn html(c: &Comparison, a: &RunSummary, b: &RunSummary) -> String {
    let mut out = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>compare: {}</title><style>{STYLE}</style></head><body>",
        escape(&c.scenario)
    );
    let _ = write!(
        out,
        "<h1>{} compared</h1><p>A: <code>{}</code> (blue), ran {}<br>B: <code>{}</code> (orange), ran {}</p>",
        escape(&c.scenario),
        escape(&c.a),
        escape(&c.build_a.line()),
        escape(&c.b),
        escape(&c.build_b.line())
    );
    match c.worse.is_empty() {
        true => out.push_str("<p class=\"better\">No gated measure is worse.</p>"),
        false => {
            let _ = write!(
                out,
                "<p class=\"worse\">Worse: {}</p>",
                escape(&c.worse.join("; "))
            );
        }
    }
    for (i, v) in c.variants.iter().enumerate() {
        let _ = write!(out, "<h2>Variant {}</h2><table><tr><th>measure</th><th>A</th><th>B</th><th>B/A</th><th>interval</th><th>confidence</th><th>noise floor</th><th>verdict</th><th>samples</th></tr>", escape(&v.name));
        for m in &v.measures {
            let label = by_name(m.measure).map_or(m.measure, |x| x.label);
            let class = verdict(m.verdict).to_lowercase();
            let _ = write!(
                out,
                "<tr><td>{}{}</td><td>{}</td><td>{}</td><td>{:.3}</td><td>[{:.3}, {:.3}]</td><td>{:.1}%</td><td>{}</td><td class=\"{class}\" title=\"{}\">{class}</td><td>{:?} ({}/{})</td></tr>",
                escape(label),
                if m.gated { " *" } else { "" },
                figure(m.a),
                figure(m.b),
                m.ratio,
                m.lo,
                m.hi,
                m.confidence * 100.0,
                floor(m),
                escape(m.why.as_deref().unwrap_or("")),
                m.samples,
                m.n_a,
                m.n_b
            );
        }
        out.push_str("</table><div class=\"charts\">");
        // The comparison has the variants both summaries have, in order.
        let (Some(va), Some(vb)) = (a.variants.get(i), b.variants.get(i)) else {
            out.push_str("</div>");
            continue;
        };
        let latencies: [(&str, Latencies); 2] = [
            ("Time to placement", |v| {
                &v.stream.latency_quantiles.placement_ms
            }),
            ("Time to running", |v| {
                &v.stream.latency_quantiles.time_to_running_ms
            }),
        ];
        for (title, ms) in latencies {
            let (pa, pb) = (cdf_points(va, ms(va)), cdf_points(vb, ms(vb)));
            out.push_str(&svg(title, "ms", "fraction of jobs", &pa, &pb));
        }
        let windows = |v: &VariantSummary, f: fn(&Window) -> Option<f64>| -> Vec<(f64, f64)> {
            let pts = v.stream.running_windows.iter();
            pts.filter_map(|w| Some((w.from_s, f(w)?))).collect()
        };
        let jobs = |w: &Window| Some(w.jobs as f64);
        let p99 = |w: &Window| w.time_to_running_p99_ms;
        out.push_str(&svg(
            "Jobs running, per window",
            "s",
            "jobs",
            &windows(va, jobs),
            &windows(vb, jobs),
        ));
        out.push_str(&svg(
            "p99 time to running, per window",
            "s",
            "ms",
            &windows(va, p99),
            &windows(vb, p99),
        ));
        out.push_str("</div>");
    }
    out.push_str("<p>* gated measure. A verdict needs the 95% interval of B/A to reach 90% confidence and to lie wholly beyond the measure's noise floor.</p></body></html>\n");
    out
}

/// Where a variant's summary holds one latency's sketch.
type Latencies = fn(&VariantSummary) -> &[f64];

/// A variant's latency distribution: (latency, fraction at or below it),
/// from its sketch's latencies `ms` at its quantiles.
fn cdf_points(v: &VariantSummary, ms: &[f64]) -> Vec<(f64, f64)> {
    let q = &v.stream.latency_quantiles.q;
    ms.iter().zip(q).map(|(ms, q)| (*ms, *q)).collect()
}

/// One small line chart of A (blue) and B (orange).
fn svg(title: &str, x_unit: &str, y_unit: &str, a: &[(f64, f64)], b: &[(f64, f64)]) -> String {
    let (w, h, pad) = (420.0, 240.0, 40.0);
    let all = a.iter().chain(b);
    let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0.0f64);
    for &(x, y) in all {
        (x0, x1, y1) = (x0.min(x), x1.max(x), y1.max(y));
    }
    if x0 > x1 {
        return String::new();
    }
    let xs = if x1 > x0 { x1 - x0 } else { 1.0 };
    let ys = if y1 > 0.0 { y1 } else { 1.0 };
    let path = |pts: &[(f64, f64)]| -> String {
        pts.iter()
            .map(|(x, y)| {
                format!(
                    "{:.1},{:.1}",
                    pad + (x - x0) / xs * (w - 2.0 * pad),
                    h - pad - y / ys * (h - 2.0 * pad)
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    format!(
        "<svg width=\"{w}\" height=\"{h}\" role=\"img\"><title>{t}</title>\
<text x=\"{pad}\" y=\"18\" font-weight=\"600\">{t}</text>\
<text x=\"{pad}\" y=\"{yl}\" font-size=\"11\">{x0:.0}</text><text x=\"{xr}\" y=\"{yl}\" font-size=\"11\" text-anchor=\"end\">{x1:.0} {xu}</text>\
<text x=\"4\" y=\"{pad}\" font-size=\"11\">{y1:.2} {yu}</text>\
<polyline class=\"a\" fill=\"none\" stroke-width=\"2\" points=\"{pa}\"/>\
<polyline class=\"b\" fill=\"none\" stroke-width=\"2\" points=\"{pb}\"/></svg>",
        t = escape(title),
        yl = h - pad + 16.0,
        xr = w - pad,
        xu = escape(x_unit),
        yu = escape(y_unit),
        pa = path(a),
        pb = path(b),
    )
}
