//! A plain run: every variant of the scenario in turn (only the first
//! against a given cluster), each `repeat` times, the repetitions
//! interleaved (A B A B ...) so that drift in the machine hits every
//! variant alike; the run's files rewritten after each.

use std::path::Path;

use super::ctx::{finish, Ctx};
use super::error::CapacityError;
use super::local::run_local;
use super::remote::run_remote;
use crate::scenario::Scenario;
use crate::summary::{combine, RunSummary, VariantSummary};

/// Every variant of the scenario (only the first with --servers), `repeat` times.
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
    let repeat = scenario.repeat.max(1) as usize;
    let mut done: Vec<Vec<VariantSummary>> = vec![Vec::new(); runs.len()];
    let finish = |done: &[Vec<VariantSummary>]| {
        let variants: Vec<VariantSummary> = done
            .iter()
            .filter_map(|reps| combine(reps.clone()))
            .collect();
        finish(scenario, &variants, out, runs.len(), ctx, baseline, None)
    };
    'runs: for rep in 0..repeat {
        for (i, v) in runs.iter().enumerate() {
            let scenario_v = scenario.for_variant(v);
            let of = match repeat {
                1 => String::new(),
                _ => format!(", repetition {}/{repeat}", rep + 1),
            };
            eprintln!(
                "loadgen: {} {}/{}: {} ({} nodes, {} of jobs{of})",
                scenario.name,
                i + 1,
                runs.len(),
                v.name,
                scenario_v.nodes,
                humantime::format_duration(scenario.duration)
            );
            let dir = match repeat {
                1 => out.join(&v.name),
                _ => out.join(&v.name).join(format!("rep-{}", rep + 1)),
            };
            let summary = match local {
                true => run_local(&scenario_v, v, &dir, ctx).await?,
                false => run_remote(&scenario_v, v, &dir, ctx).await?,
            };
            let failed = !summary.problems.is_empty();
            // Written after every run, so a later failure leaves this one.
            done[i].push(summary);
            let partial = finish(&done)?;
            if !partial.complete && failed {
                break 'runs;
            }
        }
    }
    finish(&done)
}
