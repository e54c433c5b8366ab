//! What a capacity run found, as `summary.json` says it: the summary model,
//! the checks against the scenario's SLO, and the comparison with an earlier
//! run's summary (`--baseline`).
//!
//! It lives apart from `capacity`, which runs the processes and builds the
//! summary, and from `report`, which renders it, so that both depend on it and
//! not on each other. Everything here is pure (no I/O, no processes, no
//! async): it can be tested on values alone.
//!
//! The field names are a contract: `loadgen/summary.schema.json` describes
//! them, and dashboards and baselines read them.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::faults::{Audit, FaultReport};
use crate::sampler::Series;
use crate::scenario::{Scenario, Slo};
use crate::search::{SearchReport, NEAR};
use crate::stream::StreamReport;

/// The version of `summary.json`'s layout (schema: `loadgen/summary.schema.json`).
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    pub schema_version: u32,
    pub scenario: Scenario,
    /// The first variant's totals (the only one when there are no variants).
    pub raft_entries_by_type: BTreeMap<String, u64>,
    pub blocking_queries_by_source: BTreeMap<String, u64>,
    pub variants: Vec<VariantSummary>,
    /// SLO thresholds breached, by variant.
    pub slo_breaches: Vec<String>,
    /// Measures more than 10% worse than `--baseline`'s, by variant.
    pub regressions: Vec<String>,
    /// Audits that found acknowledged jobs missing or jobs never submitted
    /// (or could not check), by variant; the run fails on any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub audit_failures: Vec<String>,
    pub complete: bool,
    /// The Prometheus that scraped the run, when one was installed.
    pub prometheus: Option<PrometheusInfo>,
    /// With `--find-max-rate`: the probes and the highest rate that met the SLOs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search: Option<SearchReport>,
}

/// One variant's results.
#[derive(Debug, Clone, Default, Serialize)]
pub struct VariantSummary {
    pub name: String,
    /// Whether the cluster ran with mutual TLS and ACL tokens.
    pub tls: bool,
    pub server_args: Vec<String>,
    pub nodesim_args: Vec<String>,
    /// Raft entries applied during the run, by message type.
    pub raft_entries_by_type: BTreeMap<String, u64>,
    /// Bytes of those entries, by message type.
    pub raft_bytes_by_type: BTreeMap<String, u64>,
    /// Blocking queries started during the run, by source, over all servers.
    pub blocking_queries_by_source: BTreeMap<String, u64>,
    /// nodesim's Node.UpdateAlloc calls, by priority.
    pub client_update_rpcs: BTreeMap<String, u64>,
    /// Time deployment-watcher queries spent queued for the shared query
    /// rate limiter, summed over queries (the leader's watchers).
    pub deployment_query_wait_seconds: f64,
    /// Share of raft entries that are client allocation updates.
    pub client_update_share: f64,
    /// Share of raft bytes that are client allocation updates.
    pub client_update_byte_share: f64,
    pub stream: StreamReport,
    /// Average cores each process used over the run: every server, every
    /// nodesim and loadgen itself.
    pub cpu_cores: BTreeMap<String, f64>,
    /// CPU-seconds every process of the run used during the stream (the
    /// growth of each one's own CPU counter: servers, nodesim, loadgen),
    /// per 1,000 allocations placed in the same window; null when nothing
    /// was placed. Lower is better.
    pub cpu_seconds_per_1000_placements: Option<f64>,
    /// Peak resident memory of each process, in MiB.
    pub rss_mib: BTreeMap<String, f64>,
    /// How fast the steepest server's resident memory grew over the second
    /// half of the run, MiB per minute (least squares over its samples);
    /// `None` with too few samples.
    pub server_rss_slope_mib_per_min: Option<f64>,
    /// For runs of more than ten minutes: how much the most-grown server's
    /// resident memory grew from ten minutes in to the end (0.1 is 10%).
    pub server_rss_growth_after_10m: Option<f64>,
    /// Rows in the state at the end of the run, by table, and the most at
    /// any sample (the most any server held).
    pub state_objects: BTreeMap<String, u64>,
    pub state_objects_peak: BTreeMap<String, u64>,
    /// Rows garbage collection removed during the run, by kind.
    pub gc_collected: BTreeMap<String, u64>,
    pub seconds: f64,
    /// Wall-clock start and end of the stream, in Unix seconds: the time
    /// range to look at in Prometheus or Grafana.
    pub started_unix: f64,
    pub ended_unix: f64,
    /// Empty when the run completed; otherwise what went wrong (the report is partial).
    pub problems: Vec<String>,
    /// The scenario's faults as they were injected, with what each cost
    /// (absent when the scenario has none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<FaultReport>,
    /// Every acknowledged job checked on every server after the stream
    /// (present whenever the scenario has faults).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit: Option<Audit>,
    /// The samples behind the report's plots; written to `samples.json`, not here.
    #[serde(skip)]
    pub series: Vec<Series>,
    /// Job registrations acknowledged per second over the stream (one-second
    /// bins, seconds from its start), plotted when the scenario has faults.
    #[serde(skip)]
    pub acks_per_second: Vec<(f64, f64)>,
}

impl VariantSummary {
    /// The server CPU the variant used: the sum of the servers' average cores.
    pub fn server_cpu_cores(&self) -> f64 {
        self.cpu_cores
            .iter()
            .filter(|(k, _)| k.starts_with("server"))
            // From +0.0: an empty f64 sum is -0.0, which prints as "-0.00".
            .fold(0.0, |sum, (_, c)| sum + c)
    }
}

/// CPU-seconds per 1,000 placements: `cpu_seconds` used while `placements`
/// allocations were placed, times 1,000; `None` when nothing was placed
/// (there is no cost per placement to speak of).
pub fn cpu_seconds_per_1000_placements(cpu_seconds: f64, placements: u64) -> Option<f64> {
    (placements > 0).then(|| cpu_seconds.max(0.0) * 1000.0 / placements as f64)
}

/// Every variant's failed audit, said in words.
pub fn audit_failures(variants: &[VariantSummary]) -> Vec<String> {
    variants
        .iter()
        .filter_map(|v| Some(format!("{}: {}", v.name, v.audit.as_ref()?.failure()?)))
        .collect()
}

/// What `summary.json` says about the run's Prometheus.
#[derive(Debug, Clone, Serialize)]
pub struct PrometheusInfo {
    /// Where it listened during the run.
    pub url: String,
    /// To browse the run later: the command that serves its data again.
    pub browse: String,
}

/// Each of the scenario's SLO thresholds that is set, with the variant's
/// measure of it: `(what, p99 ms, threshold ms)`.
pub fn slo_measures(slo: &Slo, v: &VariantSummary) -> Vec<(&'static str, f64, f64)> {
    [
        ("placement", v.stream.placement_ms.p99, slo.p99_placement_ms),
        (
            "time to running",
            v.stream.time_to_running_ms.p99,
            slo.p99_running_ms,
        ),
    ]
    .into_iter()
    .filter_map(|(what, p99, max)| Some((what, p99, max?)))
    .collect()
}

/// A breached threshold, said in words.
pub fn breach(what: &str, p99: f64, max: f64) -> String {
    format!("p99 {what} {p99:.0} ms > {max:.0} ms")
}

/// Whether a variant's measures meet the SLO, and whether one of them is
/// near its threshold.
pub fn judge(slo: &Slo, v: &VariantSummary) -> (bool, bool, Vec<String>) {
    let mut breaches = Vec::new();
    let mut near = false;
    for (what, p99, max) in slo_measures(slo, v) {
        if p99 > max {
            breaches.push(breach(what, p99, max));
        }
        near |= (p99 / max - 1.0).abs() <= NEAR;
    }
    // A probe that placed nothing measured nothing: it cannot pass.
    if v.stream.placement_ms.count == 0 {
        breaches.push("nothing was placed".into());
    }
    (breaches.is_empty() && v.problems.is_empty(), near, breaches)
}

/// The scenario's SLO thresholds each variant breached, said in words.
pub fn slo_breaches(slo: &Slo, variants: &[VariantSummary]) -> Vec<String> {
    let mut slo_breaches = Vec::new();
    for v in variants {
        for (what, p99, max) in slo_measures(slo, v) {
            if p99 > max {
                slo_breaches.push(format!("{}: {}", v.name, breach(what, p99, max)));
            }
        }
    }
    slo_breaches
}

/// Why an earlier run's `summary.json` cannot be a baseline.
#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    #[error("not JSON: {0}")]
    NotJson(#[from] serde_json::Error),
    #[error("schema_version {0}, this loadgen writes {SCHEMA_VERSION}")]
    SchemaVersion(u64),
    #[error("not a loadgen summary.json (no schema_version)")]
    NotASummary,
}

/// An earlier run's `summary.json` text, checked to be one this loadgen can
/// compare with. It is kept as JSON, not read back into a [`RunSummary`]:
/// only the compared measures need to be there.
pub fn parse_baseline(text: &str) -> Result<serde_json::Value, BaselineError> {
    let v: serde_json::Value = serde_json::from_str(text)?;
    match v.get("schema_version").and_then(|s| s.as_u64()) {
        Some(n) if n == SCHEMA_VERSION as u64 && v["variants"].is_array() => Ok(v),
        Some(other) => Err(BaselineError::SchemaVersion(other)),
        None => Err(BaselineError::NotASummary),
    }
}

/// What is compared with a baseline: a name, where it is read, the
/// smallest growth that counts (so a handful of extra entries is not news),
/// and the decimals it is told with. For each, lower is better.
const COMPARED: &[(&str, &str, f64, usize)] = &[
    ("raft entries", "/raft_entries_by_type", 10.0, 0),
    ("raft bytes", "/raft_bytes_by_type", 10_000.0, 0),
    ("client update RPCs", "/client_update_rpcs", 10.0, 0),
    ("blocking queries", "/blocking_queries_by_source", 10.0, 0),
    (
        "deployment query wait s",
        "/deployment_query_wait_seconds",
        5.0,
        0,
    ),
    ("p99 placement ms", "/stream/placement_ms/p99", 50.0, 0),
    (
        "p99 time to running ms",
        "/stream/time_to_running_ms/p99",
        50.0,
        0,
    ),
    // Null (nothing placed) on either side: not compared.
    (
        "CPU-s per 1000 placements",
        "/cpu_seconds_per_1000_placements",
        0.0,
        2,
    ),
];

/// A number, or the sum of an object's numbers.
fn measure(v: &serde_json::Value, pointer: &str) -> Option<f64> {
    match v.pointer(pointer)? {
        serde_json::Value::Object(m) => Some(m.values().filter_map(|n| n.as_f64()).sum()),
        n => n.as_f64(),
    }
}

/// Measures of each variant more than 10% above the baseline's variant of
/// the same name.
pub fn regressions(baseline: &serde_json::Value, variants: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    let empty = Vec::new();
    let base = baseline["variants"].as_array().unwrap_or(&empty);
    for v in variants.as_array().unwrap_or(&empty) {
        let name = v["name"].as_str().unwrap_or("?");
        let Some(b) = base.iter().find(|b| b["name"] == v["name"]) else {
            continue;
        };
        for (what, pointer, floor, decimals) in COMPARED {
            let (Some(now), Some(was)) = (measure(v, pointer), measure(b, pointer)) else {
                continue;
            };
            if now > was * 1.10 && now - was > *floor {
                out.push(format!(
                    "{name}: {what} {now:.decimals$}, baseline {was:.decimals$} (+{:.0}%)",
                    if was > 0.0 {
                        100.0 * (now / was - 1.0)
                    } else {
                        100.0
                    }
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_growth_past_ten_percent_and_the_floor_is_a_regression() {
        let base = json!({"schema_version": 1, "variants": [
            {"name": "legacy", "raft_entries_by_type": {"plan_apply": 100, "eval_update": 100},
             "stream": {"placement_ms": {"p99": 100.0}, "time_to_running_ms": {"p99": 1000.0}}},
        ]});
        let now = json!([
            {"name": "legacy", "raft_entries_by_type": {"plan_apply": 150, "eval_update": 100},
             "stream": {"placement_ms": {"p99": 140.0}, "time_to_running_ms": {"p99": 1050.0}}},
            {"name": "new", "raft_entries_by_type": {"plan_apply": 1000}},
        ]);
        let r = regressions(&base, &now);
        assert_eq!(
            r,
            vec!["legacy: raft entries 250, baseline 200 (+25%)".to_string()]
        );
    }

    #[test]
    fn cpu_per_1000_placements_is_cpu_seconds_over_placements_and_null_without_any() {
        // 12 CPU-seconds over 4,000 placements: 3 CPU-s per 1,000.
        assert_eq!(cpu_seconds_per_1000_placements(12.0, 4000), Some(3.0));
        assert_eq!(cpu_seconds_per_1000_placements(0.5, 1), Some(500.0));
        assert_eq!(cpu_seconds_per_1000_placements(7.0, 0), None);
        let v = VariantSummary {
            name: "idle".into(),
            ..Default::default()
        };
        let json = serde_json::to_value(&v).unwrap();
        assert!(
            json["cpu_seconds_per_1000_placements"].is_null(),
            "present, as null: {json}"
        );
    }

    #[test]
    fn more_than_ten_percent_more_cpu_per_placement_is_a_regression() {
        let base = json!({"schema_version": 1, "variants": [
            {"name": "a", "cpu_seconds_per_1000_placements": 4.0},
            {"name": "b", "cpu_seconds_per_1000_placements": 4.0},
            {"name": "c", "cpu_seconds_per_1000_placements": 4.0},
            {"name": "d", "cpu_seconds_per_1000_placements": null},
        ]});
        let now = json!([
            {"name": "a", "cpu_seconds_per_1000_placements": 4.6},
            {"name": "b", "cpu_seconds_per_1000_placements": 4.4},
            {"name": "c", "cpu_seconds_per_1000_placements": null},
            {"name": "d", "cpu_seconds_per_1000_placements": 9.0},
        ]);
        // a: +15%; b: +10% exactly is not more than 10%; c and d: nothing
        // placed on one side, so there is nothing to compare.
        assert_eq!(
            regressions(&base, &now),
            ["a: CPU-s per 1000 placements 4.60, baseline 4.00 (+15%)"]
        );
        // Less CPU per placement is better, never a regression.
        let cheaper = json!([{"name": "a", "cpu_seconds_per_1000_placements": 1.0}]);
        assert!(regressions(&base, &cheaper).is_empty());
    }

    #[test]
    fn only_a_p99_above_its_threshold_breaches_the_slo() {
        let variant = |name: &str, placement: f64, running: f64| {
            let mut v = VariantSummary {
                name: name.into(),
                ..Default::default()
            };
            v.stream.placement_ms.p99 = placement;
            v.stream.time_to_running_ms.p99 = running;
            v
        };
        let variants = [variant("a", 900.0, 5000.0), variant("b", 1200.0, 4000.0)];
        let slo = Slo {
            p99_placement_ms: Some(1000.0),
            p99_running_ms: Some(4500.0),
        };
        assert_eq!(
            slo_breaches(&slo, &variants),
            [
                "a: p99 time to running 5000 ms > 4500 ms",
                "b: p99 placement 1200 ms > 1000 ms",
            ]
        );
        assert!(slo_breaches(&Slo::default(), &variants).is_empty());
    }

    #[test]
    fn an_audit_fails_on_lost_or_phantom_jobs_and_names_them() {
        let ok = Audit {
            acked: 10,
            submitted: 11,
            servers: 3,
            ..Default::default()
        };
        assert_eq!(ok.failure(), None);
        let lost = Audit {
            lost: 1,
            lost_jobs: vec!["web-3 (missing on server 2)".into()],
            ..ok.clone()
        };
        let phantom = Audit {
            phantom: 2,
            phantom_jobs: vec!["x".into(), "y".into()],
            ..ok.clone()
        };
        let variants = [
            VariantSummary {
                name: "a".into(),
                audit: Some(lost),
                ..Default::default()
            },
            VariantSummary {
                name: "b".into(),
                audit: Some(phantom),
                ..Default::default()
            },
            VariantSummary {
                name: "c".into(),
                audit: Some(ok),
                ..Default::default()
            },
            VariantSummary {
                name: "d".into(),
                ..Default::default()
            },
        ];
        assert_eq!(
            audit_failures(&variants),
            [
                "a: 1 acknowledged job(s) lost: web-3 (missing on server 2)",
                "b: 2 job(s) present that were never submitted: x, y",
            ]
        );
        // Without faults there is no audit, and no key in summary.json.
        let json = serde_json::to_value(&variants[3]).unwrap();
        assert!(json.get("audit").is_none() && json.get("faults").is_none());
        let json = serde_json::to_value(&variants[0]).unwrap();
        assert_eq!(json["audit"]["lost"], 1);
    }

    #[test]
    fn a_baseline_that_is_not_a_summary_is_refused() {
        let refused = |text: &str| parse_baseline(text).unwrap_err().to_string();
        assert!(refused("{\"schema_version\": 7, \"variants\": []}").contains("schema_version 7"));
        assert!(refused("not json").contains("not JSON"));
        assert!(refused("{\"variants\": []}").contains("no schema_version"));
        assert!(parse_baseline("{\"schema_version\": 1, \"variants\": []}").is_ok());
    }
}
