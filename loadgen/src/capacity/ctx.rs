//! What every variant and probe of a run shares, and the run's summary
//! written after each of them.

use std::path::{Path, PathBuf};

use super::error::CapacityError;
use super::options::CapacityOpts;
use super::output;
use crate::metrics::LoadMetrics;
use crate::prometheus_run::PrometheusRun;
use crate::report::RunData;
use crate::sampler::Target;
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
    /// `--baseline`'s summary, which every variant is judged against.
    pub(super) baseline: Option<RunSummary>,
    /// The variants that run a build of their own, by name (`builds`).
    pub(super) binaries: std::collections::BTreeMap<String, crate::summary::Binaries>,
    /// The machine the run is on, as summary.json and the history say it.
    pub(super) machine: crate::summary::Machine,
}

impl Ctx<'_> {
    /// loadgen itself, as a process to sample.
    pub(super) fn loadgen_target(&self) -> Target {
        Target::loadgen(self.own_metrics.clone())
    }
}

/// The run's summary of the variants so far, written to the run directory
/// with what the report draws of them (`data`).
#[allow(clippy::too_many_arguments)]
pub(super) fn finish(
    scenario: &Scenario,
    variants: &[VariantSummary],
    data: &RunData,
    out: &Path,
    planned: usize,
    ctx: &Ctx,
    search: Option<SearchReport>,
    schedule: Option<&Schedule>,
) -> Result<RunSummary, CapacityError> {
    let prometheus = ctx.prometheus.map(|p| p.info().clone());
    let mut summary = RunSummary::new(
        scenario,
        variants,
        planned,
        ctx.baseline.as_ref(),
        prometheus,
        search,
    );
    summary.machine = Some(ctx.machine.clone());
    if let Some(s) = schedule {
        summary.seed = Some(s.seed);
        summary.rounds = s.rounds.clone();
        summary.sequential = s.sequential.clone();
    }
    output::write_run(out, &summary, data)?;
    Ok(summary)
}

/// The rounds of a plain run: the seed that drew their order, each round's
/// order, and with `--until-conclusive` how it decided to stop.
#[derive(Debug, Clone, Default)]
pub(super) struct Schedule {
    pub(super) seed: u64,
    pub(super) rounds: Vec<crate::summary::Round>,
    pub(super) sequential: Option<crate::summary::Sequential>,
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
