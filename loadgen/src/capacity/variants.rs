//! A plain run, in rounds: each round runs every variant of the scenario
//! once (only the first against a given cluster), each on a fresh cluster,
//! in an order drawn per round from the run's seed, so that a drift of the
//! machine or a periodic neighbour cannot line up with one variant; the
//! run's files are rewritten after each variant.
//!
//! `--repeat N` runs N rounds. `--until-conclusive` compares every variant
//! with the first after each round, round by round, and stops as soon as
//! every gated measure is decided (better, worse or the same), or at
//! `--max-repeat` rounds, or before a round that would end past `--budget`.
//! Looking after every round gives a false verdict more chances, so the
//! 5% a single comparison may err by is spent over the looks
//! ([`sequential_level`]): each look's interval is drawn at 1 - 5% / L for
//! the L looks that can decide anything at that level. A paired interval
//! of n rounds reaches at most 1 - 2/2^n, so early looks cannot decide and
//! cost nothing: with at most 10 rounds, rounds 8, 9 and 10 are looked at,
//! each at 98.4%.

use std::path::Path;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use super::ctx::{finish, Ctx, Schedule};
use super::drive::Done;
use super::error::CapacityError;
use super::local::run_local;
use super::options::{DEFAULT_MAX_ROUNDS, FIRST_LOOK};
use super::remote::run_remote;
use crate::report::RunData;
use crate::scenario::{Scenario, Variant};
use crate::stats::paired_max_confidence;
use crate::summary::measures::Measure;
use crate::summary::{combine, Judging, Round, RunSummary, Sequential, VariantSummary};

/// When a run stops adding rounds.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Plan {
    /// Rounds before the first look (all of them without looks).
    pub(super) rounds: u32,
    /// With `--until-conclusive`: the most rounds, and each look's level.
    pub(super) looks: Option<(u32, f64)>,
    pub(super) budget: Option<Duration>,
}

impl Plan {
    /// From the scenario's `repeat` and the flags.
    pub(super) fn new(
        repeat: u32,
        until_conclusive: bool,
        max: Option<u32>,
        budget: Option<Duration>,
    ) -> Plan {
        let repeat = repeat.max(1);
        if !until_conclusive {
            return Plan {
                rounds: repeat,
                looks: None,
                budget: None,
            };
        }
        let max = max
            .unwrap_or(DEFAULT_MAX_ROUNDS)
            .max(repeat.max(FIRST_LOOK));
        let (level, first) = sequential_level(repeat.max(FIRST_LOOK), max);
        Plan {
            rounds: first,
            looks: Some((max, level)),
            budget,
        }
    }
}

/// The false-verdict chance one comparison may have, spent over the looks.
const ALPHA: f64 = 0.05;

/// For looks after each round from `first` to `max`: the level every look's
/// interval is drawn at, and the first round that can decide anything at
/// it. The level is `1 - α` with α = 5% / L, L the looks from that round on:
/// a round whose widest interval (`1 - 2/2^n`) falls short of the level
/// cannot call anything, so it spends nothing (Bonferroni over the looks
/// that can). With too few rounds for any look to decide, one look at 95%
/// after the last, which says so.
pub(super) fn sequential_level(first: u32, max: u32) -> (f64, u32) {
    for m in first..=max {
        let mut alpha = ALPHA / (max - m + 1) as f64;
        if m > first {
            // Just short of what round m - 1 could reach, so that it cannot.
            alpha = alpha.min((1.0 - paired_max_confidence(m as usize - 1)) * (1.0 - 1e-9));
        }
        if 1.0 - paired_max_confidence(m as usize) <= alpha {
            return (1.0 - alpha, m);
        }
    }
    (1.0 - ALPHA, max)
}

/// Every variant of the scenario (only the first with --address), round by round.
pub(super) async fn run_variants(
    scenario: &Scenario,
    out: &Path,
    ctx: &Ctx<'_>,
) -> Result<RunSummary, CapacityError> {
    let local = ctx.opts.servers.is_empty();
    let runs = if local {
        scenario.runs()
    } else {
        scenario.runs().into_iter().take(1).collect()
    };
    let plan = Plan::new(
        scenario.repeat,
        ctx.opts.until_conclusive,
        ctx.opts.max_repeat,
        ctx.opts.budget,
    );
    if plan.looks.is_some() && runs.len() < 2 {
        return Err(CapacityError::NothingToCompare(scenario.name.clone()));
    }
    let seed = ctx.opts.seed.unwrap_or_else(rand::random);
    let mut rounds = Rounds {
        scenario,
        out,
        ctx,
        local,
        plan,
        done: runs.iter().map(|_| Vec::new()).collect(),
        runs,
        schedule: Schedule {
            seed,
            ..Schedule::default()
        },
        started: Instant::now(),
    };
    let mut rng = StdRng::seed_from_u64(seed);
    // The summary written after the latest run (none before the first).
    let mut summary = None;
    for round in 1.. {
        let (written, go_on) = rounds.round(round, &mut rng).await?;
        summary = written.or(summary);
        if !go_on {
            break;
        }
        let Some((max, level)) = rounds.plan.looks else {
            if round >= rounds.plan.rounds {
                break;
            }
            continue;
        };
        if round < rounds.plan.rounds {
            continue;
        }
        let Some(so_far) = &summary else { break };
        let stopped = rounds.look(round, so_far, max, level);
        summary = Some(rounds.write()?);
        if stopped {
            break;
        }
    }
    match summary {
        Some(s) => Ok(s),
        None => rounds.write(),
    }
}

/// A plain run's rounds as they go: what runs, and what has run.
struct Rounds<'a, 'c> {
    scenario: &'a Scenario,
    out: &'a Path,
    ctx: &'a Ctx<'c>,
    /// Whether loadgen starts each variant's cluster (else `--servers`).
    local: bool,
    runs: Vec<Variant>,
    plan: Plan,
    /// The seed, the rounds' orders, and the looks so far.
    schedule: Schedule,
    /// Each variant's runs so far, in `runs`' order.
    done: Vec<Vec<Done>>,
    started: Instant,
}

impl Rounds<'_, '_> {
    /// Runs round `round`: every variant once, in an order drawn from
    /// `rng`, the run's files written after each. The summary last
    /// written, and whether to go on (not when a failed run left the run
    /// incomplete).
    async fn round(
        &mut self,
        round: u32,
        rng: &mut StdRng,
    ) -> Result<(Option<RunSummary>, bool), CapacityError> {
        let mut order: Vec<usize> = (0..self.runs.len()).collect();
        order.shuffle(rng);
        self.schedule.rounds.push(Round {
            round,
            order: order.iter().map(|&i| self.runs[i].name.clone()).collect(),
        });
        let mut written = None;
        for (k, &i) in order.iter().enumerate() {
            let run = self.run_one(round, k, i).await?;
            let failed = !run.summary.problems.is_empty();
            // Written after every run, so a later failure leaves this one.
            self.done[i].push(run);
            let summary = self.write()?;
            let stop = !summary.complete && failed;
            written = Some(summary);
            if stop {
                return Ok((written, false));
            }
        }
        Ok((written, true))
    }

    /// Runs variant `i`, the `k`th of round `round`, into its directory.
    async fn run_one(&self, round: u32, k: usize, i: usize) -> Result<Done, CapacityError> {
        let v = &self.runs[i];
        let scenario_v = self.scenario.for_variant(v);
        let of = match (self.plan.rounds, self.plan.looks) {
            (1, None) => String::new(),
            (n, None) => format!(", round {round}/{n}"),
            (_, Some((max, _))) => format!(", round {round} of at most {max}"),
        };
        eprintln!(
            "loadgen: {} {}/{}: {} ({} nodes, {} of jobs{of})",
            self.scenario.name,
            k + 1,
            self.runs.len(),
            v.name,
            scenario_v.nodes,
            humantime::format_duration(self.scenario.duration)
        );
        let dir = match (self.plan.rounds, self.plan.looks) {
            (1, None) => self.out.join(&v.name),
            _ => self.out.join(&v.name).join(format!("rep-{round}")),
        };
        match self.local {
            true => run_local(&scenario_v, v, &dir, self.ctx).await,
            false => run_remote(&scenario_v, v, &dir, self.ctx).await,
        }
    }

    /// The look after round `round` of an until-conclusive run (at most
    /// `max` rounds, intervals at `level`), recorded in the schedule:
    /// whether the run stops here.
    fn look(&mut self, round: u32, so_far: &RunSummary, max: u32, level: f64) -> bool {
        let undecided = undecided(so_far, level, &self.ctx.opts.gates);
        let per_round = self.started.elapsed() / round;
        let stopped = if undecided.is_empty() {
            Some("decided")
        } else if round >= max {
            Some("max-repeat")
        } else if self
            .plan
            .budget
            .is_some_and(|b| self.started.elapsed() + per_round > b)
        {
            Some("budget")
        } else {
            None
        };
        eprintln!(
            "loadgen: after round {round}: {}",
            match undecided.is_empty() {
                true => "every gated measure is decided".to_string(),
                false => format!("still inconclusive: {}", undecided.join("; ")),
            }
        );
        self.schedule.sequential = Some(Sequential {
            first_look: self.plan.rounds,
            max_rounds: max,
            level,
            rounds_run: round,
            stopped: stopped.unwrap_or("running").to_string(),
            undecided,
        });
        stopped.is_some()
    }

    /// Writes the run's files from the runs so far, and returns the summary.
    fn write(&self) -> Result<RunSummary, CapacityError> {
        let mut variants: Vec<VariantSummary> = Vec::new();
        let mut data = RunData::new();
        for reps in &self.done {
            let summaries: Vec<&VariantSummary> = reps.iter().map(|d| &d.summary).collect();
            if let Some((v, median)) = combine(&summaries) {
                data.insert(&reps[median].summary.name, &reps[median].data);
                variants.push(v);
            }
        }
        finish(
            self.scenario,
            &variants,
            &data,
            self.out,
            self.runs.len(),
            self.ctx,
            None,
            Some(&self.schedule),
        )
    }
}

/// The gated measures (`gates`, or each measure's default) of each
/// variant, compared round by round with the first at `level`, that are
/// still inconclusive, as "variant: measure (B/A [lo, hi])".
pub(super) fn undecided(summary: &RunSummary, level: f64, gates: &[String]) -> Vec<String> {
    let judging = Judging {
        paired: true,
        level,
    };
    let gated = |m: &Measure| match gates.is_empty() {
        true => m.gated,
        false => gates.iter().any(|g| g == m.name),
    };
    let Some(first) = summary.variants.first() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for v in summary.variants.iter().skip(1) {
        for m in judging.variant(first, v, &gated) {
            if m.gated && !m.verdict.decided() {
                out.push(format!(
                    "{}: {} (x{:.3} [{:.3}, {:.3}], floor {:.1}%)",
                    v.name,
                    m.measure,
                    m.ratio,
                    m.lo,
                    m.hi,
                    m.floor * 100.0
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_run_runs_its_repeats_and_a_sequential_one_looks_when_a_look_can_decide() {
        let plain = Plan::new(4, false, None, None);
        assert_eq!((plain.rounds, plain.looks), (4, None));
        // At most 10 rounds: rounds 8, 9 and 10 can decide, each at 1 -
        // α with 3α within 5% and round 7 (98.4% at most) unable to.
        let seq = Plan::new(1, true, None, None);
        let (max, level) = seq.looks.unwrap();
        assert_eq!((seq.rounds, max), (8, DEFAULT_MAX_ROUNDS));
        let alpha = 1.0 - level;
        assert!(
            3.0 * alpha <= ALPHA && alpha < 1.0 - paired_max_confidence(7),
            "{level}"
        );
        assert!(1.0 - paired_max_confidence(8) <= alpha);
        // More rounds allowed: later first look, each at a higher level.
        let (level20, first20) = sequential_level(3, 20);
        assert!(first20 > 8 && level20 > level, "{first20} {level20}");
        // Three rounds cannot reach 95%: one look after the last, at 95%.
        let three = Plan::new(1, true, Some(3), None);
        assert_eq!(three.rounds, 3);
        assert!((three.looks.unwrap().1 - 0.95).abs() < 1e-12);
        // Every level the plan draws can be reached by its first look.
        for max in FIRST_LOOK..=30 {
            let (level, first) = sequential_level(FIRST_LOOK, max);
            let spent = (1.0 - level) * (max - first + 1) as f64;
            assert!(spent <= ALPHA + 1e-12, "{max}: {spent}");
            if first < max || max >= 6 {
                assert!(paired_max_confidence(first as usize) >= level, "{max}");
            }
        }
    }
}
