//! The report's plots as data. Rust decides what is plotted; each plot is a
//! [`Chart`] that the page embeds as JSON and `assets/report.js` draws with
//! uPlot (hover values, zoom, ticks), so no drawing code lives here.

use std::collections::BTreeMap;

use serde::Serialize;
use stampede_proto::metric_names;
use stampede_proto::Binary;

use super::samples::{add, by_label, gauge, rate, Points};
use super::VariantData;

use crate::sampler::Series;
use crate::stream::LatencyQuantiles;
use crate::summary::{RunSummary, VariantSummary};

/// How a chart joins its points.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Samples over a run: lines, broken where a process did not answer.
    Time,
    /// A few measures against a parameter: lines through marked points.
    Xy,
    /// Distributions: y is the fraction of jobs at or below x, from 0 to 1.
    Cdf,
}

/// One plot: uPlot's layout of the data (one x column shared by every
/// series) with what is drawn over it.
#[derive(Debug, Clone, Serialize)]
pub struct Chart {
    pub title: String,
    /// The units of the y and the x axis.
    pub unit: String,
    pub x_unit: String,
    pub kind: Kind,
    pub x: Vec<f64>,
    pub series: Vec<Line>,
    /// Vertical lines with a label: the faults of a run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub marks: Vec<Mark>,
    /// Horizontal lines with a label: SLO thresholds, percentiles.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub levels: Vec<Level>,
    /// Charts with the same key share the cursor: hovering one time chart
    /// of a variant shows the values at that moment on all of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync: Option<String>,
    /// Labelled points on a series: each CDF's p50, p90 and p99 (the level
    /// lines name the percentile, the dot's label its latency).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dots: Vec<Dot>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Line {
    pub label: String,
    /// One value per x; null where the series has none.
    pub values: Vec<Option<f64>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Mark {
    pub x: f64,
    pub label: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Level {
    pub y: f64,
    pub label: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Dot {
    pub x: f64,
    pub y: f64,
    /// The index of the series it sits on (its colour).
    pub series: usize,
    pub label: String,
}

impl Chart {
    /// A chart of `lines`, each with its own x values: they are joined on
    /// the union of the x values, a series being null where it has no point.
    pub fn new(
        title: &str,
        unit: &str,
        x_unit: &str,
        kind: Kind,
        lines: &[(String, Points)],
    ) -> Self {
        let mut x: Vec<f64> = lines
            .iter()
            .flat_map(|(_, p)| p.iter().map(|p| p.0))
            .collect();
        x.sort_by(f64::total_cmp);
        x.dedup();
        let series = lines
            .iter()
            .map(|(label, points)| {
                let mut values = vec![None; x.len()];
                for (px, py) in points {
                    if let Ok(i) = x.binary_search_by(|v| v.total_cmp(px)) {
                        values[i] = Some(*py);
                    }
                }
                Line {
                    label: label.clone(),
                    values,
                }
            })
            .collect();
        Chart {
            title: title.into(),
            unit: unit.into(),
            x_unit: x_unit.into(),
            kind,
            x,
            series,
            marks: Vec::new(),
            levels: Vec::new(),
            sync: None,
            dots: Vec::new(),
        }
    }

    /// Whether there is anything to draw.
    pub fn is_empty(&self) -> bool {
        self.series.is_empty() || self.x.is_empty()
    }
}

/// The faults of a variant, to mark on its time charts.
pub fn fault_marks(v: &VariantSummary) -> Vec<Mark> {
    v.faults
        .iter()
        .map(|f| Mark {
            x: f.at_s,
            label: f.action.name().to_string(),
        })
        .collect()
}

/// The time charts of one variant from its data `d`, its faults marked on each.
pub fn variant(v: &VariantSummary, d: &VariantData) -> Vec<Chart> {
    let time = |title: &str, unit: &str, lines: &[(String, Points)]| {
        let mut c = Chart::new(title, unit, "s", Kind::Time, lines);
        c.marks = fault_marks(v);
        c.sync = Some(v.name.clone());
        c
    };
    let (nodesim, servers, busiest) = by_binary(&d.series);
    let mut out = Vec::new();
    if !d.acks_per_second.is_empty() {
        out.push(time(
            "Job registrations acknowledged",
            "per s",
            &[("acknowledged".into(), d.acks_per_second.clone())],
        ));
    }
    out.push(time(
        "Raft entries by type",
        "entries/s",
        &by_label(&busiest, metric_names::RAFT_ENTRIES_TOTAL, "type", true),
    ));
    for (title, unit, metric, per_s) in [
        (
            "Blocking queries started by source",
            "queries/s",
            metric_names::BLOCKING_QUERIES_STARTED_TOTAL,
            true,
        ),
        (
            "Blocking queries in flight by source",
            "queries",
            metric_names::BLOCKING_QUERIES_INFLIGHT,
            false,
        ),
    ] {
        out.push(time(
            title,
            unit,
            &by_label(&servers, metric, "source", per_s),
        ));
    }
    out.push(time(
        "Client update RPCs by priority",
        "RPCs/s",
        &by_label(
            &nodesim,
            metric_names::NODESIM_UPDATE_RPCS_TOTAL,
            "priority",
            true,
        ),
    ));
    out.push(time("Broker depth", "evaluations", &broker_depth(&servers)));
    let by_process = |line: &dyn Fn(&Series) -> Points| -> Vec<(String, Points)> {
        d.series
            .iter()
            .map(|s| (s.target.name.clone(), line(s)))
            .collect()
    };
    out.push(time(
        "CPU by process",
        "cores",
        &by_process(&|s| rate(s, "process_cpu_seconds_total")),
    ));
    let mib = |s: &Series| -> Points {
        gauge(s, crate::sampler::RSS)
            .into_iter()
            .map(|(t, b)| (t, b / 1048576.0))
            .collect()
    };
    out.push(time("Resident memory by process", "MiB", &by_process(&mib)));
    out.push(time(
        "State rows by table",
        "rows",
        &by_label(&busiest, metric_names::STATE_OBJECTS, "table", false),
    ));
    out.push(time(
        "Garbage collected by kind",
        "rows/s",
        &by_label(&busiest, metric_names::GC_COLLECTED_TOTAL, "kind", true),
    ));
    let windows = p99_by_window(v);
    if windows.len() > 1 {
        out.push(time(
            "p99 time to running of the jobs scheduled in each window",
            "ms",
            &[("p99 time to running".into(), windows)],
        ));
    }
    out
}

/// The series of nodesim's processes, of the servers, and of the server
/// that applied the most (the leader's view of raft entries).
fn by_binary(series: &[Series]) -> (Vec<&Series>, Vec<&Series>, Vec<&Series>) {
    let nodesim: Vec<&Series> = series.iter().filter(|s| s.is(Binary::Nodesim)).collect();
    // loadgen samples itself too: its CPU and memory are plotted below.
    let servers: Vec<&Series> = series
        .iter()
        .filter(|s| !s.is(Binary::Nodesim) && !s.is(Binary::Loadgen))
        .collect();
    // Raft entries from the server that applied the most: the leader's view.
    let busiest: Vec<&Series> = servers
        .iter()
        .copied()
        .max_by_key(|s| s.points.len())
        .into_iter()
        .collect();
    (nodesim, servers, busiest)
}

/// The p99 time to running of the jobs scheduled in each window of the
/// stream, at the window's middle.
fn p99_by_window(v: &VariantSummary) -> Points {
    v.stream
        .running_windows
        .iter()
        .filter_map(|w| Some(((w.from_s + w.to_s) / 2.0, w.time_to_running_p99_ms?)))
        .collect()
}

/// The broker's ready and unacknowledged evaluations and the blocked ones,
/// each summed over the servers (only the leader's are ever non-zero).
fn broker_depth(servers: &[&Series]) -> Vec<(String, Points)> {
    let mut broker = Vec::new();
    for metric in [
        metric_names::BROKER_READY,
        metric_names::BROKER_UNACKED,
        metric_names::BLOCKED_EVALS,
    ] {
        let mut sum = BTreeMap::new();
        for s in servers {
            add(&mut sum, metric.into(), gauge(s, metric));
        }
        broker.extend(
            sum.into_iter()
                .map(|(k, p)| (k.trim_start_matches("stampede_").to_string(), p)),
        );
    }
    broker
}

/// The percentiles marked on each CDF.
const MARKED: &[(f64, &str)] = &[(0.5, "p50"), (0.9, "p90"), (0.99, "p99")];

/// The fraction of jobs at or below `x` ms, read off a quantile sketch:
/// the highest quantile whose latency is at most `x` (0 below the fastest).
fn fraction_at(q: &[f64], ms: &[f64], x: f64) -> f64 {
    let n = ms.partition_point(|v| *v <= x);
    if n == 0 {
        0.0
    } else {
        q[n - 1]
    }
}

/// One CDF per variant of the latency `pick` reads, overlaid. Every
/// variant gets a value at every x (a CDF is defined everywhere), so the
/// hover legend compares them at any latency.
fn cdf(s: &RunSummary, title: &str, pick: fn(&LatencyQuantiles) -> &[f64]) -> Option<Chart> {
    let sketches: Vec<(&str, &LatencyQuantiles)> = s
        .variants
        .iter()
        .map(|v| (v.name.as_str(), &v.stream.latency_quantiles))
        .filter(|(_, l)| !pick(l).is_empty() && pick(l).len() == l.q.len())
        .collect();
    if sketches.is_empty() {
        return None;
    }
    let mut xs: Vec<f64> = sketches
        .iter()
        .flat_map(|(_, l)| pick(l).iter().copied())
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let lines: Vec<(String, Points)> = sketches
        .iter()
        .map(|(name, l)| {
            let pts = xs
                .iter()
                .map(|&x| (x, fraction_at(&l.q, pick(l), x)))
                .collect();
            (name.to_string(), pts)
        })
        .collect();
    let mut c = Chart::new(title, "fraction of jobs", "ms", Kind::Cdf, &lines);
    c.levels = MARKED
        .iter()
        .map(|(y, label)| Level {
            y: *y,
            label: label.to_string(),
        })
        .collect();
    for (i, (_, l)) in sketches.iter().enumerate() {
        for (q, _) in MARKED {
            if let Some(at) = l.q.iter().position(|v| (v - q).abs() < 1e-9) {
                c.dots.push(Dot {
                    x: pick(l)[at],
                    y: *q,
                    series: i,
                    label: ms(pick(l)[at]),
                });
            }
        }
    }
    Some(c)
}

/// A latency in words.
fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0} ms")
    } else {
        format!("{v:.1} ms")
    }
}

/// The latency distributions of every variant: time to placement and time
/// to running.
pub fn latency_cdfs(s: &RunSummary) -> Vec<Chart> {
    [
        cdf(s, "Time to placement", |l| &l.placement_ms),
        cdf(s, "Time to running", |l| &l.time_to_running_ms),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The scenario's SLO thresholds, as levels on a latency chart.
fn slo_levels(s: &RunSummary) -> Vec<Level> {
    [
        ("SLO p99 placement", s.scenario.slo.p99_placement_ms),
        ("SLO p99 running", s.scenario.slo.p99_running_ms),
    ]
    .into_iter()
    .filter_map(|(label, y)| {
        Some(Level {
            y: y?,
            label: label.into(),
        })
    })
    .collect()
}

/// A sweep's measures against its parameter, latencies with the SLO lines.
pub fn sweep(s: &RunSummary) -> Vec<Chart> {
    let Some(sw) = &s.scenario.sweep else {
        return Vec::new();
    };
    let x = sw.parameter.name();
    let against = |f: &dyn Fn(&VariantSummary) -> f64| -> Points {
        s.variants
            .iter()
            .zip(&sw.values)
            .map(|(v, value)| (*value, f(v)))
            .collect()
    };
    let mut latency = Chart::new(
        &format!("Latency against {x}"),
        "ms",
        x,
        Kind::Xy,
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
    );
    latency.levels = slo_levels(s);
    vec![
        latency,
        Chart::new(
            &format!("Server CPU against {x}"),
            "cores",
            x,
            Kind::Xy,
            &[(
                "servers".into(),
                against(&|v| v.processes.server_cpu_cores()),
            )],
        ),
        Chart::new(
            &format!("Raft entries and blocking queries against {x}"),
            "count",
            x,
            Kind::Xy,
            &[
                (
                    "raft entries".into(),
                    against(&|v| v.traffic.raft_entries_by_type.values().sum::<u64>() as f64),
                ),
                (
                    "blocking queries".into(),
                    against(&|v| v.traffic.blocking_queries_by_source.values().sum::<u64>() as f64),
                ),
            ],
        ),
    ]
}

/// `--find-max-rate`: each probe's p99s against its rate, with the SLO
/// lines. A rate probed twice shows its worse run.
pub fn search(s: &RunSummary) -> Option<Chart> {
    let search = s.search.as_ref()?;
    let mut worst: BTreeMap<u64, (f64, f64, f64)> = BTreeMap::new();
    for p in &search.probes {
        let e = worst
            .entry(p.value.to_bits())
            .or_insert((p.value, 0.0, 0.0));
        e.1 = e.1.max(p.p99_placement_ms);
        e.2 = e.2.max(p.p99_running_ms);
    }
    let probes: Vec<(f64, f64, f64)> = worst.into_values().collect();
    let mut c = Chart::new(
        "p99 latency against the rate, with the SLOs",
        "ms",
        "jobs/s",
        Kind::Xy,
        &[
            (
                "p99 placement".into(),
                probes.iter().map(|p| (p.0, p.1)).collect(),
            ),
            (
                "p99 time to running".into(),
                probes.iter().map(|p| (p.0, p.2)).collect(),
            ),
        ],
    );
    c.levels = slo_levels(s);
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_joined_on_every_x_with_nulls_where_one_has_no_point() {
        let c = Chart::new(
            "t",
            "u",
            "s",
            Kind::Time,
            &[
                ("a".into(), vec![(1.0, 10.0), (2.0, 20.0)]),
                ("b".into(), vec![(2.0, 5.0), (3.0, 6.0)]),
            ],
        );
        assert_eq!(c.x, [1.0, 2.0, 3.0]);
        assert_eq!(c.series[0].values, [Some(10.0), Some(20.0), None]);
        assert_eq!(c.series[1].values, [None, Some(5.0), Some(6.0)]);
    }

    #[test]
    fn a_cdf_reads_the_fraction_of_jobs_at_or_below_a_latency() {
        let q = [0.0, 0.5, 1.0];
        let ms = [10.0, 20.0, 40.0];
        assert_eq!(fraction_at(&q, &ms, 5.0), 0.0);
        assert_eq!(fraction_at(&q, &ms, 10.0), 0.0);
        assert_eq!(fraction_at(&q, &ms, 25.0), 0.5);
        assert_eq!(fraction_at(&q, &ms, 40.0), 1.0);
        assert_eq!(fraction_at(&q, &ms, 99.0), 1.0);
    }
}
