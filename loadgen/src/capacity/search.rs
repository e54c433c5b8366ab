//! Driving the max-rate search (`--find-max-rate` or `[search]`): each
//! probe a whole local run at one rate, judged against the scenario's SLO,
//! until [`Search`] has its bracket or the budget would be overrun.

use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use super::ctx::{finish, Ctx};
use super::drive::Done;
use super::error::CapacityError;
use super::local::run_local;
use crate::report::{RunData, VariantData};
use crate::scenario::{Arrival, Kind, Scenario, Variant};
use crate::search::{Probe, Search};
use crate::summary::{self, RunSummary, VariantSummary};

/// Probes of the whole scenario at one rate each (see [`crate::search`]),
/// every probe a variant of the run and the search's outcome in
/// `summary.json`'s `search`.
pub(super) async fn find_max_rate(
    scenario: &Scenario,
    budget: Duration,
    out: &Path,
    ctx: &Ctx<'_>,
) -> Result<RunSummary, CapacityError> {
    if scenario.slo.p99_placement_ms.is_none() && scenario.slo.p99_running_ms.is_none() {
        return Err(CapacityError::SearchNeedsSlo(scenario.name.clone()));
    }
    let start = match scenario.arrival {
        Arrival::Constant { rate } | Arrival::Poisson { rate } => rate,
        Arrival::Ramp { to, .. } => to,
    };
    let budget_s = budget.as_secs_f64();
    let began = Instant::now();
    let mut search = Search::new(start);
    let mut variants: Vec<VariantSummary> = Vec::new();
    let mut data: Vec<VariantData> = Vec::new();
    let mut longest = Duration::ZERO;
    let mut again: Option<f64> = None;
    let mut out_of_budget = false;
    let finish = |variants: &[VariantSummary], data: &[VariantData], report| {
        let by_name: RunData = (variants.iter().zip(data))
            .map(|(v, d)| (v.name.as_str(), d))
            .collect();
        finish(
            scenario,
            variants,
            &by_name,
            out,
            variants.len(),
            ctx,
            Some(report),
            None,
        )
    };
    loop {
        let (value, repeat) = match again.take() {
            Some(v) => (v, true),
            None => match search.next() {
                Some(v) => (v, false),
                None => break,
            },
        };
        if began.elapsed() + longest > budget {
            out_of_budget = true;
            break;
        }
        announce(variants.len() + 1, value, repeat, budget, began);
        let (summary, drawn, probe, took) = run_probe(scenario, value, repeat, out, ctx).await?;
        longest = longest.max(took);
        if probe.probe.valid && probe.passed && probe.near && !repeat {
            again = Some(value);
        }
        search.record(probe.probe);
        variants.push(summary);
        data.push(drawn);
        let so_far = search.report(budget_s, began.elapsed().as_secs_f64(), false);
        finish(
            &variants,
            &data,
            so_far.with_placements(placements_per_job(scenario)),
        )?;
    }
    let report = search
        .report(budget_s, began.elapsed().as_secs_f64(), out_of_budget)
        .with_placements(placements_per_job(scenario));
    eprintln!("loadgen: search: {}", report.confidence);
    finish(&variants, &data, report)
}

/// The allocations a job of the scenario asks for: the mix's mean,
/// weighted by each kind's share (a system job asks one per node); `None`
/// for an empty mix.
pub(super) fn placements_per_job(scenario: &Scenario) -> Option<f64> {
    let weights: u64 = scenario.job_mix.iter().map(|j| j.weight as u64).sum();
    let allocations: f64 = (scenario.job_mix.iter())
        .map(|j| {
            let count = match j.kind {
                Kind::System => scenario.nodes as f64,
                _ => j.count as f64,
            };
            j.weight as f64 * count
        })
        .sum();
    (weights > 0).then(|| allocations / weights as f64)
}

/// Says which probe runs next, and how much of the budget is left.
fn announce(n: usize, value: f64, repeat: bool, budget: Duration, began: Instant) {
    eprintln!(
        "loadgen: search probe {n}: {value} jobs/s{} ({} of the {} budget left)",
        if repeat {
            ", again: near a threshold"
        } else {
            ""
        },
        humantime::format_duration(Duration::from_secs(
            budget.saturating_sub(began.elapsed()).as_secs()
        )),
        humantime::format_duration(budget)
    );
}

/// A probe's outcome: the search's record of it, and whether it passed
/// with a measure near a threshold (so it runs again).
struct Judged {
    probe: Probe,
    passed: bool,
    near: bool,
}

/// One probe: the scenario at `value` jobs/s on a cluster of its own, judged
/// against its SLO; and how long the run took.
async fn run_probe(
    scenario: &Scenario,
    value: f64,
    repeat: bool,
    out: &Path,
    ctx: &Ctx<'_>,
) -> Result<(VariantSummary, VariantData, Judged, Duration), CapacityError> {
    let v = Variant {
        name: format!("rate-{value}{}", if repeat { "-again" } else { "" }),
        nodes: None,
        rate: Some(value),
        server_args: vec![],
        nodesim_args: vec![],
        tls: None,
        ..Default::default()
    };
    let t0 = Instant::now();
    let Done { summary, data } =
        run_local(&scenario.for_variant(&v), &v, &out.join(&v.name), ctx).await?;
    let took = t0.elapsed();
    let (passed, near, breaches) = summary::judge(&scenario.slo, &summary);
    let valid = summary.confidence.validity.valid;
    eprintln!(
        "loadgen:   {value} jobs/s {}",
        match (valid, passed) {
            (false, _) => format!(
                "unknown: the run was invalid ({})",
                summary.confidence.validity.reasons.join("; ")
            ),
            (true, true) => "met every SLO".to_string(),
            (true, false) => format!("failed: {}", breaches.join("; ")),
        }
    );
    let probe = Probe {
        value,
        passed,
        p99_placement_ms: summary.stream.placement_ms.p99,
        p99_running_ms: summary.stream.time_to_running_ms.p99,
        breaches,
        repeat,
        seconds: t0.elapsed().as_secs_f64(),
        valid,
        invalid: summary.confidence.validity.reasons.clone(),
        placements_per_s: summary.stream.placements_per_second,
    };
    Ok((
        summary,
        data,
        Judged {
            probe,
            passed,
            near,
        },
        took,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_of_the_scenario_asks_its_mixs_mean_allocations() {
        let ceiling = Scenario::load("c2m-ceiling").unwrap();
        assert_eq!(placements_per_job(&ceiling), Some(1000.0));
        // max-rate: web (6 x 5), etl (3 x 10), agent (1 x a system job
        // on every one of 1,000 nodes).
        let mix = Scenario::load("max-rate").unwrap();
        assert_eq!(
            placements_per_job(&mix),
            Some((30.0 + 30.0 + 1000.0) / 10.0)
        );
    }
}
