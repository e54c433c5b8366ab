//! What a capacity run found, as `summary.json` says it: the summary model,
//! the checks against the scenario's SLO, and the comparison with an earlier
//! run's summary (`--baseline`).
//!
//! It lives apart from `capacity`, which runs the processes, and from
//! `report`, which renders it, so that both depend on it and not on each
//! other. [`assemble()`] is the one place a variant's summary is made, in
//! one struct literal from the [`VariantInputs`] `capacity` gathered:
//! [`figures`] turns its samples into its sections (the results model),
//! [`intervals`] its windows into its confidence, and `build.rs` names the
//! builds that ran. The samples themselves are not part of the summary:
//! the report gets them apart (`report::VariantData`). [`slo`] checks a summary against the scenario,
//! [`baseline`] reads one back and judges it against an earlier run, and
//! [`measures`] are what a comparison reads of it, typed. Everything here
//! is pure (no I/O, no processes, no async): it can be tested on values
//! alone.
//!
//! The field names are a contract: `loadgen/summary.schema.json`, drawn
//! from these types by `schema` (a test fails when it drifts), describes
//! them, dashboards and baselines read them, and `loadgen compare` reads
//! older runs' summaries back into these types (a field they lack takes its
//! default). `builder`'s tests fill a whole summary from a realistic run
//! and fail when a field behind a compared measure is renamed, or when a
//! field of a summary written before (`loadgen/tests/fixtures/`) is gone,
//! renamed or retyped.

mod baseline;
mod build;
mod builder;
pub mod comparison;
pub mod delivery;
pub mod elections;
mod figures;
pub mod fleet;
pub mod intervals;
pub mod measures;
mod memory;
pub mod per_allocation;
#[cfg(test)]
mod schema;
mod slo;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use baseline::{parse_summary, regressions};
pub use build::{BuildInfo, Builds};
pub use builder::{assemble, Faulted, VariantInputs};
pub use comparison::Judging;
pub use figures::{sampled, Processes, Sampled, StateRows, Traffic};
pub use intervals::{combine, window_figures, Confidence};
pub use measures::Measured;
pub use memory::{Leak, Memory};
pub use per_allocation::{PerAllocation, Snapshots};
pub use slo::{audit_failures, judge, slo_breaches};

use crate::critical_path::CriticalPath;
use crate::faults::{Audit, FaultReport};
use crate::invariants::{AuditCost, Invariant};
use crate::scenario::Scenario;
use crate::search::SearchReport;
use crate::stream::StreamReport;

/// The version of `summary.json`'s layout (schema: `loadgen/summary.schema.json`).
pub const SCHEMA_VERSION: u32 = 1;

/// A capacity run's `summary.json`: the scenario, each variant's summary,
/// and what the run concluded (SLO breaches, regressions, failed audits).
/// Top-level totals are the first variant's.
///
/// Read back (`loadgen compare`, `--baseline`), a field an earlier loadgen
/// did not write takes its default, so that a new build compares with an
/// old run; only `schema_version`, `scenario` and `variants` are required.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct RunSummary {
    pub schema_version: u32,
    /// The builds that ran: the first variant's (each variant has its own,
    /// which differ when variants run other builds).
    #[serde(default)]
    pub build: Builds,
    pub scenario: Scenario,
    /// The first variant's totals (the only one when there are no variants).
    #[serde(default)]
    pub raft_entries_by_type: BTreeMap<String, u64>,
    #[serde(default)]
    pub blocking_queries_by_source: BTreeMap<String, u64>,
    pub variants: Vec<VariantSummary>,
    /// SLO thresholds breached, by variant.
    #[serde(default)]
    pub slo_breaches: Vec<String>,
    /// Measures more than 10% worse than `--baseline`'s, by variant.
    #[serde(default)]
    pub regressions: Vec<String>,
    /// Audits that found acknowledged jobs missing or jobs never submitted
    /// (or could not check), by variant; the run fails on any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audit_failures: Vec<String>,
    /// The invariant audit over every variant: each invariant ok only if it
    /// held in every variant (absent when no variant was audited).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub invariants: Vec<Invariant>,
    #[serde(default)]
    pub complete: bool,
    /// The Prometheus that scraped the run, when one was installed.
    #[serde(default)]
    pub prometheus: Option<PrometheusInfo>,
    /// With `--find-max-rate`: the probes and the highest rate that met the SLOs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<SearchReport>,
    /// The seed that drew each round's order of the variants (`--seed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Each round: every variant once, in the order it ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<Round>,
    /// With `--until-conclusive`: how the run decided to stop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequential: Option<Sequential>,
    /// The machine loadgen ran on (absent in summaries from before it was
    /// recorded): the run history keeps a series per machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<Machine>,
}

/// A machine as the run history tells machines apart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Machine {
    /// The cores the run's processes could use.
    pub cores: u32,
    /// Its physical memory, in MiB.
    pub memory_mib: u64,
    /// A hash of its identity (machine id, CPU model, cores and memory):
    /// equal on the same machine, different on another.
    pub fingerprint: String,
}

/// A variant's own build of the project.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Binaries {
    /// The directory its `cluster` and `nodesim` ran from.
    pub dir: String,
    /// The revision it was built from, as given and as resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_rev: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

/// One round of a run: every variant once, in an order drawn from the
/// run's seed, so that a drift or a periodic neighbour cannot line up with
/// one variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Round {
    pub round: u32,
    pub order: Vec<String>,
}

/// How a run with `--until-conclusive` added rounds and why it stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Sequential {
    /// The first round after which the variants were compared.
    pub first_look: u32,
    /// The most rounds it could run (`--max-repeat`).
    pub max_rounds: u32,
    /// The level every look's intervals were drawn at: 1 - 0.05 / looks, so
    /// that over all the looks it may take the chance of a false verdict on
    /// a measure stays under 5% (Bonferroni).
    pub level: f64,
    pub rounds_run: u32,
    /// `decided` (every gated measure of every variant against the first
    /// is better, worse or the same), `max-repeat` or `budget`.
    pub stopped: String,
    /// The gated measures still inconclusive when it stopped, as
    /// "variant: measure".
    pub undecided: Vec<String>,
}

/// One variant's results: the contract `summary.json` holds of it, built
/// in one struct literal by [`assemble()`] from typed sections (a section
/// flattened here keeps its fields at the variant's top level, as earlier
/// runs wrote them), and by [`combine`] over repetitions. What only the
/// report draws (samples, traces) is the report's own. Read back with a
/// default for every field an earlier loadgen did not write.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(default)]
pub struct VariantSummary {
    pub name: String,
    /// The builds of `cluster`, `nodesim` and loadgen this variant ran, as
    /// each process said it.
    pub build: Builds,
    /// Whether to trust the figures, and how far: validity, repetitions,
    /// intervals, noise floors.
    #[serde(flatten)]
    pub confidence: Confidence,
    /// Whether the cluster ran with mutual TLS and ACL tokens.
    pub tls: bool,
    pub server_args: Vec<String>,
    pub nodesim_args: Vec<String>,
    /// Where the variant's `cluster` and `nodesim` came from, when not from
    /// beside loadgen (`bin_dir`, `git_rev`, `--variant-bin`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binaries: Option<Binaries>,
    /// What the cluster did: raft entries, blocking queries, client updates.
    #[serde(flatten)]
    pub traffic: Traffic,
    pub stream: StreamReport,
    /// Where the jobs' time went, stage by stage along their critical path
    /// (`stages`, `bottleneck`, `stages_median_ms`, `trace_check`; see
    /// `critical_path`).
    #[serde(flatten)]
    pub critical_path: CriticalPath,
    /// What each process used: CPU, memory, and their cost per placement.
    #[serde(flatten)]
    pub processes: Processes,
    /// What carrying an allocation cost: the fullest server's and
    /// nodesim's peak memory, the raft log's bytes, a snapshot's bytes and
    /// build seconds, each per allocation (null when unknown; see
    /// [`per_allocation`]).
    pub per_allocation: PerAllocation,
    /// The snapshots the servers built during the run: how many, the
    /// slowest build's seconds and the largest's bytes, with the
    /// allocations each held.
    pub snapshots: Snapshots,
    /// Rows in the state, and rows garbage collection removed.
    #[serde(flatten)]
    pub state: StateRows,
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
    /// The invariant audit (with [[faults]] or `--audit`): each of the
    /// scheduler's promises checked on every server at rest.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub invariants: Vec<Invariant>,
    /// What that audit cost loadgen: its time and loadgen's peak memory
    /// (absent when there was none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invariants_audit: Option<AuditCost>,
    /// Raft elections over the whole run, from the cluster's first leader
    /// (registration included) to the end: the growth of the highest term;
    /// null when no server's term was read at the start.
    pub elections: Option<u64>,
    /// Each of those elections explained: the term it raised, the server
    /// that started it, when, and whether the previous leader was alive
    /// (`summary::elections`); empty when `elections` is null or 0.
    pub elections_detail: Vec<elections::Election>,
    /// The simulated fleet: registration, memory per node, parked queries,
    /// heartbeats against the TTL formula, nodes wrongly down after a
    /// leader kill.
    pub fleet: fleet::Fleet,
}

impl VariantSummary {
    /// What the measures read of it.
    pub fn measured(&self) -> Measured<'_> {
        Measured {
            stream: &self.stream,
            traffic: &self.traffic,
            processes: &self.processes,
        }
    }
}

/// CPU-seconds per 1,000 placements: `cpu_seconds` used while `placements`
/// allocations were placed, times 1,000; `None` when nothing was placed
/// (there is no cost per placement to speak of).
pub fn cpu_seconds_per_1000_placements(cpu_seconds: f64, placements: u64) -> Option<f64> {
    (placements > 0).then(|| cpu_seconds.max(0.0) * 1000.0 / placements as f64)
}

/// What `summary.json` says about the run's Prometheus.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct PrometheusInfo {
    /// Where it listened during the run.
    pub url: String,
    /// To browse the run later: the command that serves its data again.
    pub browse: String,
}

impl RunSummary {
    /// The run's summary from the variants run so far, of `planned`: the
    /// first variant's totals, the SLO breaches, the regressions against
    /// `baseline`, failed audits, and whether the run is complete.
    pub fn new(
        scenario: &Scenario,
        variants: &[VariantSummary],
        planned: usize,
        baseline: Option<&RunSummary>,
        prometheus: Option<PrometheusInfo>,
        search: Option<SearchReport>,
    ) -> Self {
        let first = variants.first();
        RunSummary {
            schema_version: SCHEMA_VERSION,
            build: first.map(|v| v.build.clone()).unwrap_or_default(),
            scenario: scenario.clone(),
            raft_entries_by_type: first
                .map(|v| v.traffic.raft_entries_by_type.clone())
                .unwrap_or_default(),
            blocking_queries_by_source: first
                .map(|v| v.traffic.blocking_queries_by_source.clone())
                .unwrap_or_default(),
            variants: variants.to_vec(),
            regressions: baseline
                .map(|b| regressions(b, variants))
                .unwrap_or_default(),
            slo_breaches: slo_breaches(&scenario.slo, variants),
            audit_failures: audit_failures(variants),
            invariants: crate::invariants::across(
                &variants
                    .iter()
                    .map(|v| (v.name.as_str(), v.invariants.as_slice()))
                    .collect::<Vec<_>>(),
            ),
            complete: variants.len() == planned && variants.iter().all(|v| v.problems.is_empty()),
            prometheus,
            search,
            seed: None,
            rounds: Vec::new(),
            sequential: None,
            machine: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
