//! The measures a comparison (`loadgen compare`, `--baseline`) and a run's
//! intervals are made of: what each is, how it is read from a variant's
//! summary (a typed accessor, so that a field renamed behind a measure
//! fails to compile or fails `every_measure_is_in_a_real_summary`, instead
//! of reading as no data), which way is better, whether it gates, and the
//! noise floor under which a change is not called.

use std::collections::BTreeMap;

use super::{Processes, Traffic, VariantSummary};
use crate::stream::StreamReport;

/// What the measures read of a variant (or of one window of its run):
/// its stream, the cluster's traffic and what each process used.
#[derive(Debug, Clone, Copy)]
pub struct Measured<'a> {
    pub stream: &'a StreamReport,
    pub traffic: &'a Traffic,
    pub processes: &'a Processes,
}

/// One measure of a variant.
#[derive(Debug)]
pub struct Measure {
    /// Its name in `compare.json`, `--gate` and a summary's `repetitions`.
    pub name: &'static str,
    /// How the table says it.
    pub label: &'static str,
    pub higher_is_better: bool,
    /// Whether a `worse` verdict fails `loadgen compare` by default.
    pub gated: bool,
    /// A change within this (0.03: 3%, either way) may be noise: only an
    /// interval wholly beyond it gets a verdict. Set from comparing runs of
    /// one build with itself, five repetitions each (BENCHMARKS.md,
    /// "Comparing runs"): what the medians moved by, with room for the
    /// drift of an hour.
    pub noise_floor: f64,
    /// Reads it from what a variant measured; `None` when the variant has
    /// none (nothing placed, no server sampled).
    pub read: fn(Measured) -> Option<f64>,
}

impl Measure {
    /// The measure's figure in `v`, when it has one that is a number.
    pub fn of(&self, v: &VariantSummary) -> Option<f64> {
        self.of_measured(v.measured())
    }

    /// The measure's figure in `m`, when it has one that is a number.
    pub fn of_measured(&self, m: Measured) -> Option<f64> {
        (self.read)(m).filter(|x| x.is_finite())
    }
}

/// Every measure, in the order the table shows them.
pub const MEASURES: &[Measure] = &[
    Measure {
        name: "placements_per_s",
        label: "placements/s",
        higher_is_better: true,
        gated: true,
        noise_floor: 0.03,
        read: |v| Some(v.stream.placements_per_second),
    },
    Measure {
        name: "p99_placement_ms",
        label: "p99 time to placement (ms)",
        higher_is_better: false,
        gated: true,
        noise_floor: 0.15,
        read: |v| Some(v.stream.placement_ms.p99),
    },
    Measure {
        name: "p99_time_to_running_ms",
        label: "p99 time to running (ms)",
        higher_is_better: false,
        gated: true,
        noise_floor: 0.05,
        read: |v| Some(v.stream.time_to_running_ms.p99),
    },
    Measure {
        name: "cpu_seconds_per_1000_placements",
        label: "CPU-s per 1,000 placements",
        higher_is_better: false,
        gated: true,
        noise_floor: 0.05,
        read: |v| v.processes.cpu_seconds_per_1000_placements,
    },
    Measure {
        name: "server_rss_mib",
        label: "peak server RSS (MiB)",
        higher_is_better: false,
        gated: true,
        noise_floor: 0.05,
        read: |v| {
            (v.processes.rss_mib.iter())
                .filter(|(k, _)| k.starts_with("server"))
                .map(|(_, mib)| *mib)
                .reduce(f64::max)
        },
    },
    Measure {
        name: "raft_bytes_per_placement",
        label: "raft bytes per placement",
        higher_is_better: false,
        gated: true,
        noise_floor: 0.02,
        read: |v| per_placement(v, &v.traffic.raft_bytes_by_type),
    },
    Measure {
        name: "raft_entries_per_placement",
        label: "raft entries per placement",
        higher_is_better: false,
        gated: false,
        noise_floor: 0.02,
        read: |v| per_placement(v, &v.traffic.raft_entries_by_type),
    },
    Measure {
        name: "blocking_queries_per_placement",
        label: "blocking queries per placement",
        higher_is_better: false,
        gated: false,
        noise_floor: 0.02,
        read: |v| per_placement(v, &v.traffic.blocking_queries_by_source),
    },
    Measure {
        name: "p50_time_to_running_ms",
        label: "p50 time to running (ms)",
        higher_is_better: false,
        // Gated: the typical job's wait, where a slower stage shows first
        // (a runner 10% slower moved it ×1.07 and the p99 less).
        gated: true,
        noise_floor: 0.05,
        read: |v| Some(v.stream.time_to_running_ms.p50),
    },
    Measure {
        name: "server_cpu_cores",
        label: "server CPU (cores)",
        higher_is_better: false,
        gated: false,
        noise_floor: 0.05,
        read: |v| Some(v.processes.server_cpu_cores()),
    },
];

/// The measure called `name`.
pub fn by_name(name: &str) -> Option<&'static Measure> {
    MEASURES.iter().find(|m| m.name == name)
}

/// A measure's value as a comparison tells it: whole above 100, else to
/// three decimals (CPU-s per 1,000 placements are about 0.1).
pub fn figure(x: f64) -> String {
    match x.abs() >= 100.0 {
        true => format!("{x:.0}"),
        false => format!("{x:.3}"),
    }
}

/// The names a user may give `--gate`, for an error message.
pub fn names() -> String {
    MEASURES
        .iter()
        .map(|m| m.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A total (the sum of a map's counts) per allocation placed; `None` when
/// nothing was placed.
fn per_placement(v: Measured, counts: &BTreeMap<String, u64>) -> Option<f64> {
    let total: u64 = counts.values().sum();
    let placed = v.stream.allocations_placed;
    (placed > 0).then(|| total as f64 / placed as f64)
}

/// Every measure of one variant, by name: what a repetition keeps of itself.
pub fn figures(variant: &VariantSummary) -> BTreeMap<String, f64> {
    figures_of(variant.measured())
}

/// Every measure of what a run (or a window of it) measured, by name.
pub fn figures_of(m: Measured) -> BTreeMap<String, f64> {
    MEASURES
        .iter()
        .filter_map(|measure| Some((measure.name.to_string(), measure.of_measured(m)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_measure_reads_its_figure_from_a_variant() {
        let mut v = VariantSummary::default();
        v.stream.placements_per_second = 500.0;
        v.stream.allocations_placed = 1000;
        v.stream.placement_ms.p99 = 80.0;
        v.stream.time_to_running_ms.p50 = 300.0;
        v.stream.time_to_running_ms.p99 = 900.0;
        v.processes.cpu_seconds_per_1000_placements = Some(0.2);
        let named = |pairs: &[(&str, f64)]| -> BTreeMap<String, f64> {
            pairs.iter().map(|(k, x)| (k.to_string(), *x)).collect()
        };
        let counts = |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> {
            pairs.iter().map(|(k, x)| (k.to_string(), *x)).collect()
        };
        v.processes.rss_mib = named(&[("server1", 100.0), ("server2", 140.0), ("nodesim", 900.0)]);
        v.processes.cpu_cores = named(&[("server1", 0.25), ("server2", 0.5), ("loadgen", 0.1)]);
        v.traffic.raft_bytes_by_type = counts(&[("plan", 300000), ("client_update", 200000)]);
        v.traffic.raft_entries_by_type = counts(&[("plan", 50), ("client_update", 150)]);
        v.traffic.blocking_queries_by_source = counts(&[("client_allocs", 2000)]);
        let f = figures(&v);
        assert_eq!(f["placements_per_s"], 500.0);
        assert_eq!(f["p99_placement_ms"], 80.0);
        assert_eq!(f["p99_time_to_running_ms"], 900.0);
        assert_eq!(f["p50_time_to_running_ms"], 300.0);
        assert_eq!(f["cpu_seconds_per_1000_placements"], 0.2);
        assert_eq!(f["server_rss_mib"], 140.0);
        assert_eq!(f["server_cpu_cores"], 0.75);
        assert_eq!(f["raft_bytes_per_placement"], 500.0);
        assert_eq!(f["raft_entries_per_placement"], 0.2);
        assert_eq!(f["blocking_queries_per_placement"], 2.0);
        assert_eq!(f.len(), MEASURES.len(), "every measure read: {f:?}");
    }

    #[test]
    fn nothing_placed_has_no_cost_per_placement() {
        let mut v = VariantSummary::default();
        v.traffic.raft_bytes_by_type.insert("plan".into(), 5);
        assert!(!figures(&v).contains_key("raft_bytes_per_placement"));
    }

    #[test]
    fn a_figure_that_is_not_a_number_is_none() {
        let mut v = VariantSummary::default();
        v.stream.placements_per_second = f64::NAN;
        assert!(!figures(&v).contains_key("placements_per_s"));
    }
}
