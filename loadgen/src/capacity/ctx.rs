//! What every variant and probe of a run shares, and the run's summary
//! written after each of them.

use std::path::{Path, PathBuf};

use super::error::CapacityError;
use super::options::CapacityOpts;
use super::output;
use crate::metrics::LoadMetrics;
use crate::prometheus_run::PrometheusRun;
use crate::sampler::{Target, LOADGEN_TARGET};
use crate::scenario::Scenario;
use crate::search::SearchReport;
use crate::summary::{RunSummary, VariantSummary};

/// What every variant of a run shares.
pub(super) struct Ctx<'a> {
    pub(super) opts: &'a CapacityOpts,
    pub(super) metrics: &'a LoadMetrics,
    pub(super) prometheus: Option<&'a PrometheusRun>,
    /// The CA, certificates and token every local cluster of the run uses
    /// (so that Prometheus, set up once, can scrape them all).
    pub(super) tls_dir: PathBuf,
    /// loadgen's own `/metrics`, sampled like every other process's so that
    /// its CPU counts in the run's cost.
    pub(super) own_metrics: String,
}

impl Ctx<'_> {
    /// loadgen itself, as a process to sample.
    pub(super) fn loadgen_target(&self) -> Target {
        Target {
            name: LOADGEN_TARGET.into(),
            url: self.own_metrics.clone(),
        }
    }
}

/// The run's summary of the variants so far, written to the run directory.
pub(super) fn finish(
    scenario: &Scenario,
    variants: &[VariantSummary],
    out: &Path,
    planned: usize,
    ctx: &Ctx,
    baseline: Option<&serde_json::Value>,
    search: Option<SearchReport>,
) -> Result<RunSummary, CapacityError> {
    let prometheus = ctx.prometheus.map(|p| p.info().clone());
    let summary = RunSummary::new(scenario, variants, planned, baseline, prometheus, search);
    output::write_run(out, &summary)?;
    Ok(summary)
}

/// Names as the cluster takes them in ids: letters, digits and `-_.:`.
pub(super) fn id_safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.:".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect()
}
