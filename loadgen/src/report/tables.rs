//! The report's tables: the summary's rows (one column per variant) that
//! the terminal prints as text (`terminal`) and the page as HTML, the variants side by side,
//! each variant's faults, and the search's probes.

use std::fmt::Write;

use super::escape;
use crate::stats::Method;
use crate::summary::measures::MEASURES;
use crate::summary::{BuildInfo, Leak, RunSummary, VariantSummary};

/// One measure of every variant; `sub` rows detail the row above them.
pub(super) struct Row {
    pub(super) name: String,
    pub(super) sub: bool,
    pub(super) values: Vec<String>,
}

/// A measure to one decimal, or `-` when there is none.
pub(super) fn tenths(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
}

/// A figure with as many digits as it needs.
fn figure(x: f64) -> String {
    match x.abs() {
        a if a >= 100.0 => format!("{x:.0}"),
        a if a >= 1.0 => format!("{x:.2}"),
        _ => format!("{x:.3}"),
    }
}

/// The kinds of garbage collection, in the order the table shows them.
fn gc_kinds() -> [&'static str; 5] {
    ["evals", "allocs", "jobs", "deployments", "nodes"]
}

/// Adds a row: its name (indented: a detail of the row above) and how each
/// variant's cell is read.
type AddRow<'a> = dyn FnMut(&str, &dyn Fn(&VariantSummary) -> String) + 'a;

/// The summary's rows, the same for the terminal and the page: first
/// whether the run measured the cluster and what it did, then what it
/// cost, how it grew, the fleet, the faults and audits, each measure's
/// interval, and what went wrong.
pub(super) fn rows(s: &RunSummary) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut row = |name: &str, f: &dyn Fn(&VariantSummary) -> String| {
        rows.push(Row {
            name: name.trim_start().to_string(),
            sub: name.starts_with(' '),
            values: s.variants.iter().map(f).collect(),
        });
    };
    outcome_rows(&mut row);
    cost_rows(&mut row);
    per_allocation_rows(&mut row);
    growth_rows(s, &mut row);
    if s.variants.iter().any(|v| v.fleet.ready_s.is_some()) {
        fleet_rows(&mut row);
    }
    fault_rows(s, &mut row);
    audit_rows(s, &mut row);
    interval_rows(s, &mut row);
    row("problems", &|v| {
        if v.problems.is_empty() {
            "none".into()
        } else {
            v.problems.join("; ")
        }
    });
    rows
}

/// Whether the run measured the cluster at all, and what the stream did.
fn outcome_rows(row: &mut AddRow) {
    row("validity", &|v| match v.confidence.validity.valid {
        true => "valid".into(),
        false => format!(
            "INVALID ({} reasons below)",
            v.confidence.validity.reasons.len()
        ),
    });
    row("repetitions", &|v| {
        v.confidence.repetitions.len().max(1).to_string()
    });
    row("build (cluster / nodesim)", &build_cell);
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
    row("makespan s (first submitted to all running)", &|v| {
        tenths(v.stream.makespan_s)
    });
}

/// A per-allocation figure with as many digits as it needs, `-` unknown.
fn per_allocation(x: Option<f64>) -> String {
    x.map_or("-".into(), figure)
}

/// What an allocation cost (`per_allocation`) and the snapshots behind it.
fn per_allocation_rows(row: &mut AddRow) {
    row("per allocation: server / nodesim RSS bytes", &|v| {
        let p = &v.per_allocation;
        format!(
            "{} / {}",
            per_allocation(p.server_rss_bytes),
            per_allocation(p.nodesim_rss_bytes)
        )
    });
    row("  raft log bytes", &|v| {
        per_allocation(v.per_allocation.raft_log_bytes)
    });
    row("  snapshot bytes / build us", &|v| {
        let p = &v.per_allocation;
        format!(
            "{} / {}",
            per_allocation(p.snapshot_bytes),
            per_allocation(p.snapshot_seconds.map(|s| s * 1e6))
        )
    });
    row("snapshots built (slowest s, largest MiB)", &|v| {
        let sn = &v.snapshots;
        format!(
            "{} ({}, {})",
            sn.built,
            sn.slowest_build_s.map_or("-".into(), figure),
            sn.largest_bytes
                .map_or("-".into(), |b| figure(b as f64 / 1048576.0))
        )
    });
}

/// The commits the variant's cluster and nodesim were built from (one when
/// they are the same), `+dirty` when built with uncommitted changes.
fn build_cell(v: &VariantSummary) -> String {
    let short = |b: &Option<BuildInfo>| match b {
        Some(b) => {
            let commit: String = b.commit.chars().take(8).collect();
            format!("{commit}{}", if b.dirty { "+dirty" } else { "" })
        }
        None => "-".into(),
    };
    let (cluster, nodesim) = (short(&v.build.cluster), short(&v.build.nodesim));
    match cluster == nodesim {
        true => cluster,
        false => format!("{cluster} / {nodesim}"),
    }
}

/// What the run cost: raft entries and bytes, RPCs, blocking queries, CPU.
fn cost_rows(row: &mut AddRow) {
    row("raft entries", &|v| {
        v.traffic
            .raft_entries_by_type
            .values()
            .sum::<u64>()
            .to_string()
    });
    row("  client update share (entries / bytes)", &|v| {
        format!(
            "{:.1}% / {:.1}%",
            100.0 * v.traffic.client_update_share,
            100.0 * v.traffic.client_update_byte_share
        )
    });
    row("raft MiB", &|v| {
        format!(
            "{:.2}",
            v.traffic.raft_bytes_by_type.values().sum::<u64>() as f64 / 1048576.0
        )
    });
    row("client update RPCs", &|v| {
        v.traffic
            .client_update_rpcs
            .values()
            .sum::<u64>()
            .to_string()
    });
    row("blocking queries", &|v| {
        v.traffic
            .blocking_queries_by_source
            .values()
            .sum::<u64>()
            .to_string()
    });
    row("  deployment_watcher", &|v| {
        v.traffic
            .blocking_queries_by_source
            .get(stampede_proto::QuerySource::DeploymentWatcher.label())
            .copied()
            .unwrap_or(0)
            .to_string()
    });
    row("  queued for the query limiter (s)", &|v| {
        format!("{:.1}", v.traffic.deployment_query_wait_seconds)
    });
    row("server CPU cores (sum)", &|v| {
        format!("{:.2}", v.processes.server_cpu_cores())
    });
    row("CPU-s per 1000 placements (all processes)", &|v| {
        v.processes
            .cpu_seconds_per_1000_placements
            .map_or("- (none placed)".into(), |c| format!("{c:.2}"))
    });
}

/// Growth over a long run: memory and state, what GC took away, and the
/// elections. A slope is only a leak when the state's rows were flat.
fn growth_rows(s: &RunSummary, row: &mut AddRow) {
    row("server memory, 2nd half", &|v| {
        let slope = v
            .processes
            .server_rss_slope_mib_per_min
            .map_or("-".into(), |m| format!("{m:.2} MiB/min"));
        match (
            v.processes.memory.leak_check.verdict,
            v.processes.memory.state_growth_2nd_half,
        ) {
            (Leak::NotJudged, Some(g)) => format!("state {:+.0}%: follows the data", g * 100.0),
            (Leak::NotJudged, None) => "not judged".into(),
            (Leak::Flat, _) => format!("flat ({slope})"),
            (Leak::Grows, _) => format!("GROWS ({slope}) with flat state"),
        }
    });
    row("  server RSS per state row (bytes)", &|v| {
        v.processes
            .memory
            .server_rss_bytes_per_row
            .map_or("-".into(), |b| format!("{b:.0}"))
    });
    if s.variants
        .iter()
        .any(|v| v.processes.server_rss_growth_after_10m.is_some())
    {
        row("server RSS growth after 10 min", &|v| {
            v.processes
                .server_rss_growth_after_10m
                .map_or("-".into(), |g| format!("{:+.1}%", 100.0 * g))
        });
    }
    // One row per table, so that no cell is wider than a figure.
    let tables: std::collections::BTreeSet<&String> = s
        .variants
        .iter()
        .flat_map(|v| v.state.state_objects.keys())
        .collect();
    for table in tables {
        row(
            &format!("state rows: {table}, end (peak)"),
            &|v| match v.state.state_objects.get(table) {
                Some(n) => {
                    let peak = v.state.state_objects_peak.get(table).copied().unwrap_or(*n);
                    format!("{n} ({peak})")
                }
                None => "-".into(),
            },
        );
    }
    row(
        &format!("garbage collected: {}", gc_kinds().join(" / ")),
        &|v| {
            gc_kinds()
                .iter()
                .map(|k| {
                    v.state
                        .gc_collected
                        .get(*k)
                        .copied()
                        .unwrap_or(0)
                        .to_string()
                })
                .collect::<Vec<_>>()
                .join(" / ")
        },
    );
    row("elections", &elections);
}

/// The run's elections in words: how many, who started them and whether
/// the leader was alive, and how many were outside the faults: "1
/// election, started by server-2 while the leader was alive; 1 outside
/// faults". A summary from before `elections_detail` gives the counts.
pub(super) fn elections(v: &VariantSummary) -> String {
    let Some(n) = v.elections else {
        return "-".into();
    };
    let outside = v
        .fleet
        .elections_outside_faults
        .map_or(String::new(), |o| format!("; {o} outside faults"));
    if n == 0 {
        return "0".into();
    }
    if v.elections_detail.is_empty() {
        return format!("{n}{outside}");
    }
    // Who started them, and with the leader alive or lost, in order.
    let mut groups: Vec<((Option<&str>, bool), u64)> = Vec::new();
    for e in &v.elections_detail {
        let key = (e.by.as_deref(), e.leader_was_alive);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, count)) => *count += 1,
            None => groups.push((key, 1)),
        }
    }
    let phrase = |(by, alive): (Option<&str>, bool)| {
        format!(
            "started by {} {}",
            by.unwrap_or("an unknown server"),
            match alive {
                true => "while the leader was alive",
                false => "after the leader was lost",
            }
        )
    };
    let listed = v.elections_detail.len();
    let noun = if listed == 1 { "election" } else { "elections" };
    let said = match &groups[..] {
        [(key, _)] => format!("{listed} {noun}, {}", phrase(*key)),
        _ => {
            let each: Vec<String> = (groups.iter())
                .map(|(key, count)| format!("{count} {}", phrase(*key)))
                .collect();
            format!("{listed} {noun}: {}", each.join(", "))
        }
    };
    format!("{said}{outside}")
}

/// One row per fault step (the variants ran the same steps) and its details.
fn fault_rows(s: &RunSummary, row: &mut AddRow) {
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
        row("  control plane back s", &|v| match v.faults.get(i) {
            Some(f) => tenths(f.control_plane_recovery_s),
            None => "-".into(),
        });
        row(
            "  caught up s / snapshots installed",
            &|v| match v.faults.get(i) {
                Some(f) => format!(
                    "{} / {}",
                    tenths(f.catch_up_time_s),
                    f.snapshots_installed.map_or("-".into(), |n| n.to_string())
                ),
                None => "-".into(),
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
}

/// The acknowledged-jobs audit, and the invariant audit: one row per
/// invariant, its violations or ok.
fn audit_rows(s: &RunSummary, row: &mut AddRow) {
    if s.variants.iter().any(|v| v.audit.is_some()) {
        row("audit: acked / lost / phantom", &|v| match &v.audit {
            Some(a) if a.error.is_some() => "could not check".into(),
            Some(a) => format!("{} / {} / {}", a.acked, a.lost, a.phantom),
            None => "-".into(),
        });
    }
    for name in crate::invariants::NAMES {
        let of = |v: &VariantSummary| v.invariants.iter().find(|i| i.name == name).cloned();
        if !s.variants.iter().any(|v| of(v).is_some()) {
            continue;
        }
        row(&format!("invariant {name}"), &|v| match of(v) {
            Some(i) if i.ok => "ok".into(),
            Some(i) if i.violations == 0 => "not checked".into(),
            Some(i) => format!("{} violations", i.violations),
            None => "-".into(),
        });
    }
}

/// Each measure's median and 95% interval: over the repetitions, or over
/// one run's 10 s windows (batch means).
fn interval_rows(s: &RunSummary, row: &mut AddRow) {
    for m in MEASURES {
        if !s
            .variants
            .iter()
            .any(|v| v.confidence.intervals.contains_key(m.name))
        {
            continue;
        }
        row(&format!("{}: median [95% interval]", m.label), &|v| match v
            .confidence
            .intervals
            .get(m.name)
        {
            Some(i) => format!(
                "{} [{}, {}]{}",
                figure(i.median),
                figure(i.lo),
                figure(i.hi),
                match i.method {
                    Method::BatchMeans => " windows",
                    Method::OrderStatistics => "",
                }
            ),
            None => "-".into(),
        });
    }
}

/// The fleet's rows (`summary.fleet`).
fn fleet_rows(row: &mut AddRow) {
    let num = |x: Option<f64>| x.map_or("-".into(), figure);
    row("fleet: nodes / ready s / registrations/s", &|v| {
        let f = &v.fleet;
        format!(
            "{} / {} / {}",
            f.nodes,
            tenths(f.ready_s),
            num(f.registrations_per_second)
        )
    });
    row("  bytes per node: server / nodesim", &|v| {
        let f = &v.fleet;
        format!(
            "{} / {}",
            num(f.server_rss_bytes_per_node),
            num(f.nodesim_rss_bytes_per_node)
        )
    });
    row("  parked node queries per server", &|v| {
        let by = &v.fleet.parked_node_queries_by_server;
        match by.is_empty() {
            true => "-".into(),
            false => by
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(" / "),
        }
    });
    row("  heartbeats/s (nodes / TTL; TTL s)", &|v| {
        let f = &v.fleet;
        format!(
            "{} ({}; {})",
            num(f.heartbeats_per_second),
            num(f.heartbeats_per_second_by_formula),
            num(f.ttl_s)
        )
    });
    row("  wrongly down after the leader kill", &|v| {
        v.fleet
            .wrongly_down_after_failover
            .map_or("-".into(), |n| n.to_string())
    });
    row("  until every allocation ran s", &|v| {
        tenths(v.fleet.all_running_s)
    });
}

/// The summary as an HTML table: one column per variant.
pub fn summary(s: &RunSummary) -> String {
    let mut html = String::from("<table class=\"data summary\"><thead><tr><th>measure</th>");
    for v in &s.variants {
        let _ = write!(html, "<th>{}</th>", escape(&v.name));
    }
    html.push_str("</tr></thead><tbody>");
    for r in rows(s) {
        let _ = write!(
            html,
            "<tr{}><td>{}</td>",
            if r.sub { " class=\"sub\"" } else { "" },
            escape(&r.name)
        );
        for v in &r.values {
            let _ = write!(html, "<td>{}</td>", escape(v));
        }
        html.push_str("</tr>");
    }
    html.push_str("</tbody></table>");
    html
}

/// A variant's faults and audit, as a table and a line.
pub fn faults(v: &VariantSummary) -> String {
    let mut html = String::new();
    if !v.faults.is_empty() {
        html.push_str(
            "<table class=\"data faults\"><thead><tr><th>fault</th><th>at s</th><th>servers</th>\
             <th>lasted s</th><th>time to leader s</th><th>unavailable s</th><th>elections</th>\
             <th>control plane back s</th><th>caught up s</th><th>snapshots installed</th>\
             <th>acks/s before</th><th>acks/s after</th></tr></thead><tbody>",
        );
        for f in &v.faults {
            let servers: Vec<String> = f.servers.iter().map(|s| s.to_string()).collect();
            let _ = write!(
                html,
                "<tr><td>{}</td><td>{:.1}</td><td>{}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                f.action.name(),
                f.at_s,
                servers.join(", "),
                f.duration_s,
                tenths(f.time_to_leader_s),
                tenths(f.unavailable_s),
                f.elections.map_or("-".into(), |e| e.to_string()),
                tenths(f.control_plane_recovery_s),
                tenths(f.catch_up_time_s),
                f.snapshots_installed.map_or("-".into(), |n| n.to_string()),
                tenths(f.throughput_before),
                tenths(f.throughput_after),
            );
        }
        html.push_str("</tbody></table>");
    }
    if !v.elections_detail.is_empty() {
        let _ = write!(
            html,
            "<p class=\"elections\">Elections: {}.</p>\
             <table class=\"data elections\"><thead><tr><th>term</th><th>at s</th>\
             <th>started by</th><th>the leader before it</th></tr></thead><tbody>",
            escape(&elections(v))
        );
        for e in &v.elections_detail {
            let _ = write!(
                html,
                "<tr class=\"{}\"><td>{}</td><td>{:.1}</td><td>{}</td><td>{}</td></tr>",
                if e.leader_was_alive { "warn" } else { "ok" },
                e.term,
                e.at_s,
                escape(e.by.as_deref().unwrap_or("unknown")),
                if e.leader_was_alive { "alive" } else { "lost" },
            );
        }
        html.push_str("</tbody></table>");
    }
    if !v.invariants.is_empty() {
        html.push_str(
            "<table class=\"data invariants\"><thead><tr><th>invariant</th><th>ok</th>\
             <th>violations</th><th>detail</th></tr></thead><tbody>",
        );
        for i in &v.invariants {
            let _ = write!(
                html,
                "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                if i.ok { "ok" } else { "warn" },
                escape(&i.name),
                if i.ok { "yes" } else { "no" },
                i.violations,
                escape(&i.detail)
            );
        }
        html.push_str("</tbody></table>");
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

/// One number read from a variant's summary (`None` when it has none).
type Measure = Box<dyn Fn(&VariantSummary) -> Option<f64>>;

/// Every variant's costs side by side, and their ratios to the first's.
pub fn comparison(s: &RunSummary) -> String {
    if s.variants.len() < 2 {
        return String::new();
    }
    let base = &s.variants[0];
    // Each measure with the decimals it is shown with.
    let count =
        |f: fn(&VariantSummary) -> f64| -> (Measure, usize) { (Box::new(move |v| Some(f(v))), 0) };
    let measures: Vec<(&str, (Measure, usize))> = vec![
        (
            "raft entries",
            count(|v| v.traffic.raft_entries_by_type.values().sum::<u64>() as f64),
        ),
        (
            "client update entries",
            count(|v| {
                *v.traffic
                    .raft_entries_by_type
                    .get("alloc_client_update")
                    .unwrap_or(&0) as f64
            }),
        ),
        (
            "client update RPCs",
            count(|v| v.traffic.client_update_rpcs.values().sum::<u64>() as f64),
        ),
        (
            "blocking queries",
            count(|v| v.traffic.blocking_queries_by_source.values().sum::<u64>() as f64),
        ),
        (
            "deployment watcher queries",
            count(|v| {
                *v.traffic
                    .blocking_queries_by_source
                    .get(stampede_proto::QuerySource::DeploymentWatcher.label())
                    .unwrap_or(&0) as f64
            }),
        ),
        (
            "deployment queries queued for the limiter, s",
            count(|v| v.traffic.deployment_query_wait_seconds),
        ),
        (
            "deployment watcher delivery p99 ms",
            count(|v| {
                let source = stampede_proto::QuerySource::DeploymentWatcher.label();
                v.traffic
                    .blocking_delivery_ms
                    .get(source)
                    .map_or(0.0, |d| d.p99_ms)
            }),
        ),
        ("p99 placement ms", count(|v| v.stream.placement_ms.p99)),
        (
            "p99 time to running ms",
            count(|v| v.stream.time_to_running_ms.p99),
        ),
        (
            "CPU-s per 1000 placements (all processes)",
            (Box::new(|v| v.processes.cpu_seconds_per_1000_placements), 2),
        ),
    ];
    let mut html = String::from("<table class=\"data comparison\"><thead><tr><th>measure</th>");
    for v in &s.variants {
        let _ = write!(html, "<th>{}</th>", escape(&v.name));
    }
    for v in &s.variants[1..] {
        let _ = write!(
            html,
            "<th class=\"ratio\">{} / {}</th>",
            escape(&v.name),
            escape(&base.name)
        );
    }
    html.push_str("</tr></thead><tbody>");
    for (name, (f, decimals)) in &measures {
        let _ = write!(html, "<tr><td>{name}</td>");
        for v in &s.variants {
            let shown = f(v).map_or("-".into(), |x| format!("{x:.decimals$}"));
            let _ = write!(html, "<td>{shown}</td>");
        }
        for v in &s.variants[1..] {
            let r = match (f(v), f(base)) {
                (Some(x), Some(b)) if b > 0.0 => format!("{:.2}", x / b),
                _ => "-".into(),
            };
            let _ = write!(html, "<td class=\"ratio\">{r}</td>");
        }
        html.push_str("</tr>");
    }
    html.push_str("</tbody></table>");
    html
}

/// `--find-max-rate`: every probe, in the order they ran.
pub fn probes(s: &RunSummary) -> String {
    let Some(search) = &s.search else {
        return String::new();
    };
    let mut html = format!(
        "<p id=\"search\">{}</p><table class=\"data probes\"><thead><tr><th>rate (jobs/s)</th>\
         <th>placements/s taken</th><th>p99 placement ms</th><th>p99 running ms</th>\
         <th>result</th></tr></thead><tbody>",
        escape(&search.confidence)
    );
    for p in &search.probes {
        let _ = write!(
            html,
            "<tr><td>{}{}</td><td>{:.0}</td><td>{:.0}</td><td>{:.0}</td><td>{}</td></tr>",
            p.value,
            if p.repeat { " (again)" } else { "" },
            p.placements_per_s,
            p.p99_placement_ms,
            p.p99_running_ms,
            if p.passed {
                "met the SLOs".to_string()
            } else {
                escape(&p.breaches.join("; "))
            }
        );
    }
    html.push_str("</tbody></table>");
    html
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;

    fn run(variants: Vec<VariantSummary>) -> RunSummary {
        RunSummary {
            build: Default::default(),
            schema_version: crate::summary::SCHEMA_VERSION,
            scenario: Scenario::load("default").unwrap(),
            raft_entries_by_type: Default::default(),
            blocking_queries_by_source: Default::default(),
            variants,
            slo_breaches: vec![],
            regressions: vec![],
            audit_failures: vec![],
            invariants: vec![],
            complete: true,
            prometheus: None,
            search: None,
            seed: None,
            rounds: vec![],
            sequential: None,
            machine: None,
        }
    }

    #[test]
    fn the_build_row_names_each_variants_commits() {
        let build = |commit: &str, dirty: bool| {
            Some(BuildInfo {
                commit: commit.into(),
                dirty,
                version: "0.1.0".into(),
            })
        };
        let mut same = VariantSummary::default();
        same.build.cluster = build("0123456789abcdef", false);
        same.build.nodesim = build("0123456789abcdef", false);
        let mut mixed = VariantSummary::default();
        mixed.build.cluster = build("fedcba9876543210", true);
        mixed.build.nodesim = build("0123456789abcdef", false);
        let older = VariantSummary::default();
        let cells: Vec<String> = [same, mixed, older].iter().map(build_cell).collect();
        assert_eq!(cells, ["01234567", "fedcba98+dirty / 01234567", "-"]);
    }

    #[test]
    fn the_makespan_and_what_an_allocation_cost_are_shown() {
        let mut c2m = VariantSummary {
            name: "c2m".into(),
            ..Default::default()
        };
        c2m.stream.makespan_s = Some(287.44);
        c2m.per_allocation = crate::summary::PerAllocation {
            allocations: 2_000_000,
            server_rss_bytes: Some(812.4),
            nodesim_rss_bytes: Some(301.0),
            raft_log_bytes: Some(96.25),
            snapshot_bytes: Some(171.0),
            snapshot_seconds: Some(2.5e-6),
        };
        c2m.snapshots = crate::summary::Snapshots {
            built: 7,
            slowest_build_s: Some(4.2),
            largest_bytes: Some(300 * 1048576),
            ..Default::default()
        };
        let unknown = VariantSummary {
            name: "unknown".into(),
            ..Default::default()
        };
        let s = run(vec![c2m, unknown]);
        let text = super::super::table(&s);
        let line = |start: &str| {
            (text.lines())
                .find(|l| l.trim_start().starts_with(start))
                .unwrap_or_else(|| panic!("no row {start}: {text}"))
                .to_string()
        };
        let makespan = line("makespan s");
        assert!(
            makespan.contains(" 287.4 ") && makespan.ends_with(" -"),
            "{makespan}"
        );
        let rss = line("per allocation: server / nodesim RSS bytes");
        assert!(
            rss.contains(" 812 / 301 ") && rss.ends_with("- / -"),
            "{rss}"
        );
        assert!(line("raft log bytes").contains(" 96.25 "), "{text}");
        let snap = line("snapshot bytes / build us");
        assert!(snap.contains(" 171 / 2.50 "), "{snap}");
        let built = line("snapshots built");
        assert!(built.contains(" 7 (4.20, 300) "), "{built}");
        assert!(built.ends_with(" 0 (-, -)"), "{built}");
    }

    #[test]
    fn cpu_per_1000_placements_is_shown_and_nothing_placed_says_so() {
        let variant = |name: &str, cpu: Option<f64>| VariantSummary {
            name: name.into(),
            processes: crate::summary::Processes {
                cpu_seconds_per_1000_placements: cpu,
                ..Default::default()
            },
            ..Default::default()
        };
        let s = run(vec![
            variant("base", Some(4.0)),
            variant("costly", Some(5.126)),
            variant("idle", None),
        ]);
        let line = super::super::table(&s)
            .lines()
            .find(|l| l.starts_with("CPU-s per 1000 placements"))
            .expect("a row in the terminal table")
            .to_string();
        assert!(
            line.contains(" 4.00 ") && line.contains(" 5.13 ") && line.ends_with("- (none placed)"),
            "{line}"
        );
        assert!(summary(&s).contains("<td>CPU-s per 1000 placements (all processes)</td>"));
        // Side by side: the figures, and a ratio only where both have one.
        let html = comparison(&s);
        let row = html
            .split("<tr>")
            .find(|r| r.contains("CPU-s per 1000 placements"))
            .unwrap();
        assert!(
            row.contains("<td>4.00</td><td>5.13</td><td>-</td>")
                && row.contains("<td class=\"ratio\">1.28</td><td class=\"ratio\">-</td>"),
            "{row}"
        );
    }
}
