//! A plain run: every variant of the scenario in turn (only the first
//! against a given cluster), the run's files rewritten after each.

use std::path::Path;

use super::ctx::{finish, Ctx};
use super::error::CapacityError;
use super::local::run_local;
use super::remote::run_remote;
use crate::scenario::Scenario;
use crate::summary::{RunSummary, VariantSummary};

/// Every variant of the scenario in turn (only the first with --servers).
pub(super) async fn run_variants(
    scenario: &Scenario,
    out: &Path,
    ctx: &Ctx<'_>,
    baseline: Option<&serde_json::Value>,
) -> Result<RunSummary, CapacityError> {
    let local = ctx.opts.servers.is_empty();
    let runs = if local {
        scenario.runs()
    } else {
        scenario.runs().into_iter().take(1).collect()
    };
    let mut variants = Vec::new();
    let finish = |variants: &[VariantSummary]| {
        finish(scenario, variants, out, runs.len(), ctx, baseline, None)
    };
    for (i, v) in runs.iter().enumerate() {
        let scenario_v = scenario.for_variant(v);
        eprintln!(
            "loadgen: {} {}/{}: {} ({} nodes, {} of jobs)",
            scenario.name,
            i + 1,
            runs.len(),
            v.name,
            scenario_v.nodes,
            humantime::format_duration(scenario.duration)
        );
        let dir = out.join(&v.name);
        let summary = match local {
            true => run_local(&scenario_v, v, &dir, ctx).await?,
            false => run_remote(&scenario_v, v, &dir, ctx).await?,
        };
        // Written after every variant, so a later failure leaves this one.
        variants.push(summary);
        let partial = finish(&variants)?;
        if !partial.complete && variants.last().is_some_and(|v| !v.problems.is_empty()) {
            break;
        }
    }
    finish(&variants)
}
