//! What a capacity run says: a summary table for the terminal and a
//! self-contained `report.html` whose plots are SVG drawn here.
//!
//! It renders from the run's summary (`summary`) and its samples (`sampler`)
//! alone; `capacity`, which runs things, calls it, never the other way round.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::sampler::{label, Series};
use crate::summary::{RunSummary, VariantSummary};

const COLORS: &[&str] = &[
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

/// The terminal summary: one column per variant.
pub fn table(s: &RunSummary) -> String {
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let mut row = |name: &str, f: &dyn Fn(&VariantSummary) -> String| {
        rows.push((name.to_string(), s.variants.iter().map(f).collect()));
    };
    row("jobs submitted (late, dropped, failed)", &|v| {
        let st = &v.stream;
        format!(
            "{} ({}, {}, {})",
            st.submitted, st.late, st.dropped, st.failed
        )
    });
    row("placement p50 / p99 ms", &|v| {
        format!(
            "{:.0} / {:.0}",
            v.stream.placement_ms.p50, v.stream.placement_ms.p99
        )
    });
    row("time to running p50 / p99 ms", &|v| {
        let r = &v.stream.time_to_running_ms;
        format!("{:.0} / {:.0}", r.p50, r.p99)
    });
    row("placements/s", &|v| {
        format!("{:.0}", v.stream.placements_per_second)
    });
    row("raft entries", &|v| {
        v.raft_entries_by_type.values().sum::<u64>().to_string()
    });
    row("  client update share (entries / bytes)", &|v| {
        format!(
            "{:.1}% / {:.1}%",
            100.0 * v.client_update_share,
            100.0 * v.client_update_byte_share
        )
    });
    row("raft MiB", &|v| {
        format!(
            "{:.2}",
            v.raft_bytes_by_type.values().sum::<u64>() as f64 / 1048576.0
        )
    });
    row("client update RPCs", &|v| {
        v.client_update_rpcs.values().sum::<u64>().to_string()
    });
    row("blocking queries", &|v| {
        v.blocking_queries_by_source
            .values()
            .sum::<u64>()
            .to_string()
    });
    row("  deployment_watcher", &|v| {
        v.blocking_queries_by_source
            .get(stampede_proto::QuerySource::DeploymentWatcher.label())
            .copied()
            .unwrap_or(0)
            .to_string()
    });
    row("  queued for the query limiter (s)", &|v| {
        format!("{:.1}", v.deployment_query_wait_seconds)
    });
    row("server CPU cores (sum)", &|v| {
        let sum: f64 = v
            .cpu_cores
            .iter()
            .filter(|(k, _)| k.starts_with("server"))
            .map(|(_, c)| c)
            .sum();
        format!("{sum:.2}")
    });
    // Faults: one row per step (the variants ran the same steps), then the audit.
    let steps = s.variants.iter().map(|v| v.faults.len()).max().unwrap_or(0);
    for i in 0..steps {
        let action = s.scenario.faults.get(i).map_or("?", |f| f.action.name());
        row(
            &format!(
                "fault {}: {action} (leader s / unavailable s / elections)",
                i + 1
            ),
            &|v| match v.faults.get(i) {
                Some(f) => format!(
                    "@{:.0}s: {} / {} / {}",
                    f.at_s,
                    tenths(f.time_to_leader_s),
                    tenths(f.unavailable_s),
                    f.elections.map_or("-".into(), |e| e.to_string())
                ),
                None => "not injected".into(),
            },
        );
        row("  acks/s before / after", &|v| match v.faults.get(i) {
            Some(f) => format!(
                "{} / {}",
                tenths(f.throughput_before),
                tenths(f.throughput_after)
            ),
            None => "-".into(),
        });
    }
    if s.variants.iter().any(|v| v.audit.is_some()) {
        row("audit: acked / lost / phantom", &|v| match &v.audit {
            Some(a) if a.error.is_some() => "could not check".into(),
            Some(a) => format!("{} / {} / {}", a.acked, a.lost, a.phantom),
            None => "-".into(),
        });
    }
    row("problems", &|v| {
        if v.problems.is_empty() {
            "none".into()
        } else {
            v.problems.join("; ")
        }
    });
    let width = rows.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let cols: Vec<usize> = (0..s.variants.len())
        .map(|i| {
            rows.iter()
                .map(|(_, v)| v[i].len())
                .chain([s.variants[i].name.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = format!("{:width$}", format!("scenario {}", s.scenario.name));
    for (v, w) in s.variants.iter().zip(&cols) {
        let _ = write!(out, "  {:>w$}", v.name);
    }
    for (name, values) in &rows {
        let _ = write!(out, "\n{name:width$}");
        for (v, w) in values.iter().zip(&cols) {
            let _ = write!(out, "  {v:>w$}");
        }
    }
    if let Some(search) = &s.search {
        let _ = write!(out, "\nsearch for the highest rate: {}", search.confidence);
        for p in &search.probes {
            let _ = write!(
                out,
                "\n  {:>9} jobs/s  p99 placement {:>8.0} ms  p99 running {:>8.0} ms  {}{}",
                p.value,
                p.p99_placement_ms,
                p.p99_running_ms,
                if p.passed { "met the SLOs" } else { "failed" },
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

/// A measure to one decimal, or `-` when there is none.
fn tenths(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
}

/// A rate per second of a counter between consecutive points.
fn rate(s: &Series, name: &str) -> Vec<(f64, f64)> {
    s.points
        .windows(2)
        .filter_map(|w| {
            let (a, b) = (&w[0], &w[1]);
            let dt = b.t - a.t;
            let (x, y) = (a.values.get(name)?, b.values.get(name)?);
            (dt > 0.0).then(|| (b.t, ((y - x) / dt).max(0.0)))
        })
        .collect()
}

fn gauge(s: &Series, name: &str) -> Vec<(f64, f64)> {
    s.points
        .iter()
        .filter_map(|p| Some((p.t, *p.values.get(name)?)))
        .collect()
}

/// Adds series point by point (they share sample times within a run).
fn add(into: &mut BTreeMap<String, Vec<(f64, f64)>>, key: String, pts: Vec<(f64, f64)>) {
    let e = into.entry(key).or_default();
    if e.is_empty() {
        *e = pts;
    } else {
        for (a, b) in e.iter_mut().zip(pts) {
            a.1 += b.1;
        }
    }
}

/// Per label value of `metric`, summed over `series`, as rates or gauges.
fn by_label(
    series: &[&Series],
    metric: &str,
    lbl: &str,
    as_rate: bool,
) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut out = BTreeMap::new();
    for s in series {
        for name in s.names_of(metric) {
            let key = label(&name, lbl).unwrap_or(metric).to_string();
            let pts = if as_rate {
                rate(s, &name)
            } else {
                gauge(s, &name)
            };
            add(&mut out, key, pts);
        }
    }
    out.into_iter().collect()
}

/// An SVG line chart of time series (x in seconds) with axes, a title, a
/// unit and a legend.
pub fn chart(title: &str, unit: &str, lines: &[(String, Vec<(f64, f64)>)]) -> String {
    chart_marked(title, unit, lines, &[])
}

/// A time chart with marks: a dashed vertical line and a label at each
/// `(x, label)`, such as the moments faults were injected.
pub fn chart_marked(
    title: &str,
    unit: &str,
    lines: &[(String, Vec<(f64, f64)>)],
    marks: &[(f64, String)],
) -> String {
    draw(title, unit, "s", lines, marks)
}

/// The same with x in `x_unit`.
pub fn chart_over(
    title: &str,
    unit: &str,
    x_unit: &str,
    lines: &[(String, Vec<(f64, f64)>)],
) -> String {
    draw(title, unit, x_unit, lines, &[])
}

fn draw(
    title: &str,
    unit: &str,
    x_unit: &str,
    lines: &[(String, Vec<(f64, f64)>)],
    marks: &[(f64, String)],
) -> String {
    let (w, h, left, right, top, bottom) = (640.0, 260.0, 60.0, 150.0, 28.0, 30.0);
    let pts = lines.iter().flat_map(|(_, p)| p.iter());
    let xmax = pts
        .clone()
        .map(|p| p.0)
        .chain(marks.iter().map(|m| m.0))
        .fold(1.0f64, f64::max);
    let ymax = pts.map(|p| p.1).fold(0.0f64, f64::max).max(1e-9) * 1.1;
    let x = |v: f64| left + (v / xmax) * (w - left - right);
    let y = |v: f64| top + (1.0 - v / ymax) * (h - top - bottom);
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{title}">"#
    );
    let _ = write!(
        svg,
        r#"<text x="{left}" y="16" font-size="13" font-weight="bold">{title}</text><text x="{}" y="16" font-size="11" text-anchor="end">{unit}</text>"#,
        w - right
    );
    for i in 0..=4 {
        let v = ymax * i as f64 / 4.0;
        let _ = write!(
            svg,
            r##"<line x1="{left}" x2="{}" y1="{y0:.1}" y2="{y0:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" font-size="10" text-anchor="end">{}</text>"##,
            w - right,
            left - 4.0,
            y(v) + 3.0,
            short(v),
            y0 = y(v)
        );
    }
    let _ = write!(
        svg,
        r##"<line x1="{left}" x2="{}" y1="{b}" y2="{b}" stroke="#333"/><text x="{}" y="{}" font-size="10" text-anchor="end">{xmax:.0} {x_unit}</text><text x="{left}" y="{}" font-size="10">0 {x_unit}</text>"##,
        w - right,
        w - right,
        h - 8.0,
        h - 8.0,
        b = h - bottom
    );
    for (i, (at, label)) in marks.iter().enumerate() {
        // Labels alternate between two heights so that close marks stay readable.
        let ly = top + 10.0 + 12.0 * (i % 2) as f64;
        let _ = write!(
            svg,
            r##"<g class="mark"><line x1="{mx:.1}" x2="{mx:.1}" y1="{top}" y2="{b}" stroke="#c00" stroke-dasharray="4,3"/><text x="{tx:.1}" y="{ly}" font-size="9" fill="#c00">{}</text></g>"##,
            escape(label),
            mx = x(*at),
            tx = x(*at) + 3.0,
            b = h - bottom
        );
    }
    for (i, (name, p)) in lines.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let path: Vec<String> = p
            .iter()
            .map(|(a, b)| format!("{:.1},{:.1}", x(*a), y(*b)))
            .collect();
        if !path.is_empty() {
            let _ = write!(
                svg,
                r#"<polyline class="series" fill="none" stroke="{color}" stroke-width="1.5" points="{}"/>"#,
                path.join(" ")
            );
        }
        let ly = top + 14.0 * i as f64;
        let _ = write!(
            svg,
            r#"<rect x="{}" y="{}" width="10" height="3" fill="{color}"/><text x="{}" y="{}" font-size="10">{}</text>"#,
            w - right + 8.0,
            ly + 2.0,
            w - right + 22.0,
            ly + 6.0,
            escape(name)
        );
    }
    svg.push_str("</svg>");
    svg
}

fn short(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Where the variant's faults go on its time charts.
fn fault_marks(v: &VariantSummary) -> Vec<(f64, String)> {
    v.faults
        .iter()
        .map(|f| (f.at_s, f.action.name().to_string()))
        .collect()
}

/// The charts of one variant.
fn charts(v: &VariantSummary) -> Vec<String> {
    let marks = fault_marks(v);
    let chart = |title: &str, unit: &str, lines: &[(String, Vec<(f64, f64)>)]| {
        chart_marked(title, unit, lines, &marks)
    };
    let servers: Vec<&Series> = v
        .series
        .iter()
        .filter(|s| s.target.name != "nodesim")
        .collect();
    let nodesim: Vec<&Series> = v
        .series
        .iter()
        .filter(|s| s.target.name == "nodesim" || !s.names_of("stampede_nodesim_nodes").is_empty())
        .collect();
    // Raft entries from the server that applied the most: the leader's view.
    let busiest: Vec<&Series> = servers
        .iter()
        .max_by_key(|s| s.points.len())
        .copied()
        .into_iter()
        .collect();
    let mut out = vec![
        chart(
            "Raft entries by type",
            "entries/s",
            &by_label(&busiest, "stampede_raft_entries_total", "type", true),
        ),
        chart(
            "Blocking queries started by source",
            "queries/s",
            &by_label(
                &servers,
                "stampede_blocking_queries_started_total",
                "source",
                true,
            ),
        ),
        chart(
            "Blocking queries in flight by source",
            "queries",
            &by_label(
                &servers,
                "stampede_blocking_queries_inflight",
                "source",
                false,
            ),
        ),
        chart(
            "Client update RPCs by priority",
            "RPCs/s",
            &by_label(
                &nodesim,
                "stampede_nodesim_update_rpcs_total",
                "priority",
                true,
            ),
        ),
    ];
    let mut broker = Vec::new();
    for metric in [
        "stampede_broker_ready",
        "stampede_broker_unacked",
        "stampede_blocked_evals",
    ] {
        let mut sum = BTreeMap::new();
        for s in &servers {
            add(&mut sum, metric.into(), gauge(s, metric));
        }
        broker.extend(
            sum.into_iter()
                .map(|(k, p)| (k.trim_start_matches("stampede_").to_string(), p)),
        );
    }
    out.push(chart("Broker depth", "evaluations", &broker));
    let cpu: Vec<(String, Vec<(f64, f64)>)> = v
        .series
        .iter()
        .map(|s| (s.target.name.clone(), rate(s, "process_cpu_seconds_total")))
        .collect();
    out.push(chart("CPU by process", "cores", &cpu));
    let rss: Vec<(String, Vec<(f64, f64)>)> = v
        .series
        .iter()
        .map(|s| {
            let p = gauge(s, "process_resident_memory_bytes")
                .into_iter()
                .map(|(t, b)| (t, b / 1048576.0))
                .collect();
            (s.target.name.clone(), p)
        })
        .collect();
    out.push(chart("Resident memory by process", "MiB", &rss));
    if !v.acks_per_second.is_empty() {
        out.insert(
            0,
            chart(
                "Job registrations acknowledged",
                "per s",
                &[("acknowledged".into(), v.acks_per_second.clone())],
            ),
        );
    }
    out
}

/// A variant's faults and audit, as a table and a line.
fn faults_section(v: &VariantSummary) -> String {
    let mut html = String::new();
    if !v.faults.is_empty() {
        html.push_str(
            "<table class=\"faults\"><tr><th>fault</th><th>at s</th><th>servers</th>\
             <th>lasted s</th><th>time to leader s</th><th>unavailable s</th><th>elections</th>\
             <th>acks/s before</th><th>acks/s after</th></tr>",
        );
        for f in &v.faults {
            let servers: Vec<String> = f.servers.iter().map(|s| s.to_string()).collect();
            let _ = write!(
                html,
                "<tr><td>{}</td><td>{:.1}</td><td>{}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                f.action.name(),
                f.at_s,
                servers.join(", "),
                f.duration_s,
                tenths(f.time_to_leader_s),
                tenths(f.unavailable_s),
                f.elections.map_or("-".into(), |e| e.to_string()),
                tenths(f.throughput_before),
                tenths(f.throughput_after),
            );
        }
        html.push_str("</table>");
    }
    if let Some(a) = &v.audit {
        match a.failure() {
            None => {
                let _ = write!(
                    html,
                    "<p class=\"audit\">Audit: all {} acknowledged jobs are on each of the {} servers \
                     (at raft index {}); nothing is there that was not submitted ({} submitted).</p>",
                    a.acked, a.servers, a.applied_index, a.submitted
                );
            }
            Some(failure) => {
                let _ = write!(
                    html,
                    "<p class=\"warn audit\">Audit failed: {}</p>",
                    escape(&failure)
                );
            }
        }
    }
    html
}

/// One number read from a variant's summary.
type Measure = Box<dyn Fn(&VariantSummary) -> f64>;

/// Ratios of the first variant's costs to every other's.
fn comparison(s: &RunSummary) -> String {
    if s.variants.len() < 2 {
        return String::new();
    }
    let base = &s.variants[0];
    let measures: Vec<(&str, Measure)> = vec![
        (
            "raft entries",
            Box::new(|v| v.raft_entries_by_type.values().sum::<u64>() as f64),
        ),
        (
            "client update entries",
            Box::new(|v| {
                *v.raft_entries_by_type
                    .get("alloc_client_update")
                    .unwrap_or(&0) as f64
            }),
        ),
        (
            "client update RPCs",
            Box::new(|v| v.client_update_rpcs.values().sum::<u64>() as f64),
        ),
        (
            "blocking queries",
            Box::new(|v| v.blocking_queries_by_source.values().sum::<u64>() as f64),
        ),
        (
            "deployment watcher queries",
            Box::new(|v| {
                *v.blocking_queries_by_source
                    .get(stampede_proto::QuerySource::DeploymentWatcher.label())
                    .unwrap_or(&0) as f64
            }),
        ),
        (
            "deployment queries queued for the limiter, s",
            Box::new(|v| v.deployment_query_wait_seconds),
        ),
        ("p99 placement ms", Box::new(|v| v.stream.placement_ms.p99)),
        (
            "p99 time to running ms",
            Box::new(|v| v.stream.time_to_running_ms.p99),
        ),
    ];
    let mut html = String::from("<h2>Side by side</h2><table><tr><th>measure</th>");
    for v in &s.variants {
        let _ = write!(html, "<th>{}</th>", escape(&v.name));
    }
    for v in &s.variants[1..] {
        let _ = write!(
            html,
            "<th>{} / {}</th>",
            escape(&v.name),
            escape(&base.name)
        );
    }
    html.push_str("</tr>");
    for (name, f) in &measures {
        let _ = write!(html, "<tr><td>{name}</td>");
        for v in &s.variants {
            let _ = write!(html, "<td>{:.0}</td>", f(v));
        }
        for v in &s.variants[1..] {
            let b = f(base);
            let r = if b > 0.0 {
                format!("{:.2}", f(v) / b)
            } else {
                "-".into()
            };
            let _ = write!(html, "<td>{r}</td>");
        }
        html.push_str("</tr>");
    }
    html.push_str("</table>");
    html
}

/// A sweep's cost plotted against its parameter.
fn sweep(s: &RunSummary) -> String {
    let Some(sw) = &s.scenario.sweep else {
        return String::new();
    };
    let x = sw.parameter.name();
    let against = |f: &dyn Fn(&VariantSummary) -> f64| -> Vec<(f64, f64)> {
        s.variants
            .iter()
            .zip(&sw.values)
            .map(|(v, value)| (*value, f(v)))
            .collect()
    };
    let server_cpu = |v: &VariantSummary| -> f64 {
        v.cpu_cores
            .iter()
            .filter(|(k, _)| k.starts_with("server"))
            .map(|(_, c)| c)
            .sum()
    };
    let mut html = format!("<h2>Cost against {x}</h2><div class=\"charts\">");
    html.push_str(&chart_over(
        &format!("Server CPU against {x}"),
        "cores",
        x,
        &[("servers".into(), against(&server_cpu))],
    ));
    html.push_str(&chart_over(
        &format!("Raft entries and blocking queries against {x}"),
        "count",
        x,
        &[
            (
                "raft entries".into(),
                against(&|v| v.raft_entries_by_type.values().sum::<u64>() as f64),
            ),
            (
                "blocking queries".into(),
                against(&|v| v.blocking_queries_by_source.values().sum::<u64>() as f64),
            ),
        ],
    ));
    html.push_str(&chart_over(
        &format!("Latency against {x}"),
        "ms",
        x,
        &[
            (
                "p99 placement".into(),
                against(&|v| v.stream.placement_ms.p99),
            ),
            (
                "p99 time to running".into(),
                against(&|v| v.stream.time_to_running_ms.p99),
            ),
        ],
    ));
    html.push_str("</div>");
    html
}

/// `--find-max-rate`: every probe, and p99s against the rate with the SLO lines.
fn search_section(s: &RunSummary) -> String {
    let Some(search) = &s.search else {
        return String::new();
    };
    let mut html = format!(
        "<h2>The highest rate that meets the SLOs</h2><p id=\"search\">{}</p>\
         <table><tr><th>rate (jobs/s)</th><th>p99 placement ms</th><th>p99 running ms</th><th>result</th></tr>",
        escape(&search.confidence)
    );
    for p in &search.probes {
        let _ = write!(
            html,
            "<tr><td>{}{}</td><td>{:.0}</td><td>{:.0}</td><td>{}</td></tr>",
            p.value,
            if p.repeat { " (again)" } else { "" },
            p.p99_placement_ms,
            p.p99_running_ms,
            if p.passed {
                "met the SLOs".to_string()
            } else {
                escape(&p.breaches.join("; "))
            }
        );
    }
    html.push_str("</table>");
    let mut probes = search.probes.clone();
    probes.sort_by(|a, b| a.value.total_cmp(&b.value));
    let (lo, hi) = (
        probes.first().map_or(0.0, |p| p.value),
        probes.last().map_or(1.0, |p| p.value),
    );
    let mut lines = vec![
        (
            "p99 placement".to_string(),
            probes
                .iter()
                .map(|p| (p.value, p.p99_placement_ms))
                .collect(),
        ),
        (
            "p99 time to running".to_string(),
            probes.iter().map(|p| (p.value, p.p99_running_ms)).collect(),
        ),
    ];
    for (name, max) in [
        ("SLO: p99 placement", s.scenario.slo.p99_placement_ms),
        ("SLO: p99 running", s.scenario.slo.p99_running_ms),
    ] {
        if let Some(max) = max {
            lines.push((name.to_string(), vec![(lo, max), (hi, max)]));
        }
    }
    html.push_str("<div class=\"charts\">");
    html.push_str(&chart_over(
        "Latency against the rate, with the SLOs",
        "ms",
        "jobs/s",
        &lines,
    ));
    html.push_str("</div>");
    html
}

/// The self-contained report page.
pub fn html(s: &RunSummary) -> String {
    let mut page = format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>stampede capacity run: {name}</title>\
         <style>body{{font-family:sans-serif;margin:2em;max-width:1400px}}table{{border-collapse:collapse;margin:1em 0}}\
         td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}th:first-child,td:first-child{{text-align:left}}\
         .warn{{background:#fee;border:1px solid #c00;padding:8px}}.charts{{display:flex;flex-wrap:wrap;gap:12px}}</style>\
         </head><body><h1>Capacity run: {name}</h1><p>{desc}</p>",
        name = escape(&s.scenario.name),
        desc = escape(&s.scenario.description)
    );
    if !s.complete {
        page.push_str("<p class=\"warn\" id=\"partial\">This run did not complete: the report is partial.</p>");
    }
    for b in &s.slo_breaches {
        let _ = write!(page, "<p class=\"warn\">SLO breached: {}</p>", escape(b));
    }
    for r in &s.regressions {
        let _ = write!(
            page,
            "<p class=\"warn\">Worse than the baseline: {}</p>",
            escape(r)
        );
    }
    for a in &s.audit_failures {
        let _ = write!(page, "<p class=\"warn\">Audit failed: {}</p>", escape(a));
    }
    let _ = write!(page, "<h2>Summary</h2><pre>{}</pre>", escape(&table(s)));
    page.push_str(&comparison(s));
    page.push_str(&sweep(s));
    page.push_str(&search_section(s));
    for v in &s.variants {
        let _ = write!(
            page,
            "<h2>{}</h2><p>server flags: <code>{}</code>; nodesim flags: <code>{}</code></p>",
            escape(&v.name),
            escape(&v.server_args.join(" ")),
            escape(&v.nodesim_args.join(" "))
        );
        for p in &v.problems {
            let _ = write!(page, "<p class=\"warn\">{}</p>", escape(p));
        }
        page.push_str(&faults_section(v));
        page.push_str("<div class=\"charts\">");
        for c in charts(v) {
            page.push_str(&c);
        }
        page.push_str("</div>");
    }
    page.push_str(DRAWN_CHECK);
    page.push_str("</body></html>");
    page
}

/// Counts, once the page has loaded, the plots the browser actually drew
/// (an SVG with a size and at least one line with a size), into
/// `data-plots` and `data-plots-drawn` on the body: what the report's
/// browser test reads.
const DRAWN_CHECK: &str = r#"<script>
window.addEventListener('load', () => {
  const charts = [...document.querySelectorAll('svg.chart')];
  const drawn = charts.filter(svg => {
    const box = svg.getBoundingClientRect();
    const lines = [...svg.querySelectorAll('polyline')].filter(p => {
      const b = p.getBBox();
      return b.width > 0 || b.height > 0;
    });
    return box.width > 0 && box.height > 0 && lines.length > 0;
  });
  document.body.dataset.plots = charts.length;
  document.body.dataset.plotsDrawn = drawn.length;
});
</script>"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{FaultAction, Scenario};
    use crate::summary::{Audit, FaultReport, RunSummary, SCHEMA_VERSION};

    fn with_faults() -> RunSummary {
        let fault = FaultReport {
            action: FaultAction::KillLeader,
            at_s: 20.4,
            scheduled_at_s: 20.0,
            duration_s: 3.0,
            servers: vec![2],
            leader_before: Some(2),
            time_to_leader_s: Some(1.3),
            leader_after: Some(3),
            unavailable_s: Some(1.5),
            elections: Some(1),
            recovered_s: Some(23.4),
            throughput_before: Some(4.0),
            throughput_after: Some(3.9),
        };
        let variant = VariantSummary {
            name: "faults".into(),
            faults: vec![fault],
            audit: Some(Audit {
                acked: 100,
                submitted: 101,
                servers: 3,
                ..Default::default()
            }),
            acks_per_second: vec![(1.0, 4.0), (2.0, 3.0)],
            ..Default::default()
        };
        RunSummary {
            schema_version: SCHEMA_VERSION,
            scenario: Scenario::load("faults").unwrap(),
            raft_entries_by_type: Default::default(),
            blocking_queries_by_source: Default::default(),
            variants: vec![variant],
            slo_breaches: vec![],
            regressions: vec![],
            audit_failures: vec![],
            complete: true,
            prometheus: None,
            search: None,
        }
    }

    #[test]
    fn the_table_shows_each_fault_and_the_audit() {
        let t = table(&with_faults());
        assert!(
            t.contains("fault 1: kill_leader (leader s / unavailable s / elections)"),
            "{t}"
        );
        assert!(t.contains("@20s: 1.3 / 1.5 / 1"), "{t}");
        assert!(t.contains("4.0 / 3.9"), "{t}");
        assert!(t.contains("audit: acked / lost / phantom") && t.contains("100 / 0 / 0"));
    }

    #[test]
    fn time_plots_mark_each_fault_with_a_line_and_its_label() {
        let page = html(&with_faults());
        assert!(page.contains("Job registrations acknowledged"));
        // Every time chart of the variant carries the mark.
        let marks = page.matches("<g class=\"mark\">").count();
        assert!(marks >= 7, "{marks} marks");
        assert!(page.contains(">kill_leader</text>"));
        assert!(page.contains("Audit: all 100 acknowledged jobs"));
        let plain = chart("x", "y", &[("a".into(), vec![(1.0, 1.0)])]);
        assert!(!plain.contains("class=\"mark\""));
    }
}
