//! The measures a comparison (`loadgen compare`, `--baseline`) and a run's
//! intervals are made of: what each is, where
//! a variant's summary holds it, which way is better, whether it gates, and
//! the noise floor under which a change is not called.

use std::collections::BTreeMap;

use serde_json::Value;

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
    /// Reads it from a variant of `summary.json` (or from a repetition's
    /// figures, which hold it by name).
    pub read: fn(&Value) -> Option<f64>,
}

/// Every measure, in the order the table shows them.
pub const MEASURES: &[Measure] = &[
    Measure {
        name: "placements_per_s",
        label: "placements/s",
        higher_is_better: true,
        gated: true,
        noise_floor: 0.03,
        read: |v| v.pointer("/stream/placements_per_second")?.as_f64(),
    },
    Measure {
        name: "p99_placement_ms",
        label: "p99 time to placement (ms)",
        higher_is_better: false,
        gated: true,
        noise_floor: 0.15,
        read: |v| v.pointer("/stream/placement_ms/p99")?.as_f64(),
    },
    Measure {
        name: "p99_time_to_running_ms",
        label: "p99 time to running (ms)",
        higher_is_better: false,
        gated: true,
        noise_floor: 0.05,
        read: |v| v.pointer("/stream/time_to_running_ms/p99")?.as_f64(),
    },
    Measure {
        name: "cpu_seconds_per_1000_placements",
        label: "CPU-s per 1,000 placements",
        higher_is_better: false,
        gated: true,
        noise_floor: 0.05,
        read: |v| v.get("cpu_seconds_per_1000_placements")?.as_f64(),
    },
    Measure {
        name: "server_rss_mib",
        label: "peak server RSS (MiB)",
        higher_is_better: false,
        gated: true,
        noise_floor: 0.05,
        read: |v| {
            let rss = v.get("rss_mib")?.as_object()?;
            rss.iter()
                .filter(|(k, _)| k.starts_with("server"))
                .filter_map(|(_, mib)| mib.as_f64())
                .reduce(f64::max)
        },
    },
    Measure {
        name: "raft_bytes_per_placement",
        label: "raft bytes per placement",
        higher_is_better: false,
        gated: true,
        noise_floor: 0.02,
        read: |v| per_placement(v, "raft_bytes_by_type"),
    },
    Measure {
        name: "raft_entries_per_placement",
        label: "raft entries per placement",
        higher_is_better: false,
        gated: false,
        noise_floor: 0.02,
        read: |v| per_placement(v, "raft_entries_by_type"),
    },
    Measure {
        name: "blocking_queries_per_placement",
        label: "blocking queries per placement",
        higher_is_better: false,
        gated: false,
        noise_floor: 0.02,
        read: |v| per_placement(v, "blocking_queries_by_source"),
    },
    Measure {
        name: "p50_time_to_running_ms",
        label: "p50 time to running (ms)",
        higher_is_better: false,
        // Gated: the typical job's wait, where a slower stage shows first
        // (a runner 10% slower moved it ×1.07 and the p99 less).
        gated: true,
        noise_floor: 0.05,
        read: |v| v.pointer("/stream/time_to_running_ms/p50")?.as_f64(),
    },
    Measure {
        name: "server_cpu_cores",
        label: "server CPU (cores)",
        higher_is_better: false,
        gated: false,
        noise_floor: 0.05,
        read: |v| {
            let cores = v.get("cpu_cores")?.as_object()?;
            let servers = cores.iter().filter(|(k, _)| k.starts_with("server"));
            Some(servers.filter_map(|(_, c)| c.as_f64()).sum())
        },
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

/// A total (the sum of an object's numbers) per allocation placed; `None`
/// when nothing was placed.
fn per_placement(v: &Value, field: &str) -> Option<f64> {
    let total: f64 = v
        .get(field)?
        .as_object()?
        .values()
        .filter_map(Value::as_f64)
        .sum();
    let placed = v.pointer("/stream/allocations_placed")?.as_f64()?;
    (placed > 0.0).then(|| total / placed)
}

/// Every measure of one variant of `summary.json`, by name: what a
/// repetition keeps of itself.
pub fn figures(variant: &Value) -> BTreeMap<String, f64> {
    MEASURES
        .iter()
        .filter_map(|m| Some((m.name.to_string(), (m.read)(variant)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_measure_reads_its_figure_from_a_variant() {
        let v = json!({
            "stream": {"placements_per_second": 500.0, "allocations_placed": 1000,
                       "placement_ms": {"p99": 80.0},
                       "time_to_running_ms": {"p50": 300.0, "p99": 900.0}},
            "cpu_seconds_per_1000_placements": 0.2,
            "rss_mib": {"server1": 100.0, "server2": 140.0, "nodesim": 900.0},
            "cpu_cores": {"server1": 0.25, "server2": 0.5, "loadgen": 0.1},
            "raft_bytes_by_type": {"plan": 300000, "client_update": 200000},
            "raft_entries_by_type": {"plan": 50, "client_update": 150},
            "blocking_queries_by_source": {"client_allocs": 2000},
        });
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
    }

    #[test]
    fn nothing_placed_has_no_cost_per_placement() {
        let v = json!({"stream": {"allocations_placed": 0}, "raft_bytes_by_type": {"plan": 5}});
        assert!(!figures(&v).contains_key("raft_bytes_per_placement"));
    }
}
