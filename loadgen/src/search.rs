//! `loadgen capacity --find-max-rate`: the highest arrival rate whose
//! measures all meet the scenario's SLOs. Each probe is a whole run of the
//! scenario at one rate, on a fresh cluster. The search doubles (or halves)
//! the rate until one probe passes and one fails, then narrows the bracket
//! geometrically until the failing rate is within 10% of the passing one,
//! as long as the time budget allows another probe. A probe whose p99 lands
//! within 10% of a threshold is run again, and its rate passes only if both
//! runs do: one run's noise is not a capacity figure. A probe whose run was
//! invalid (loadgen, nodesim or the machine saturated, or an election that no
//! fault caused: `validity`) measured the harness or a failure, not the
//! cluster at that rate: it counts as unknown, never as a pass, and the
//! search stays below its rate, saying "at least" what passed.

use serde::{Deserialize, Serialize};

/// The bracket is narrow enough when the failing rate is within this factor
/// of the passing one.
pub const PRECISION: f64 = 1.10;
/// A p99 within this factor of its threshold (either side) is near it.
pub const NEAR: f64 = 0.10;
/// Rates the search stays within, jobs per second.
pub const MIN_RATE: f64 = 0.01;
pub const MAX_RATE: f64 = 10_000.0;

/// One run of the scenario at one rate.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Probe {
    /// The arrival rate, jobs per second.
    pub value: f64,
    pub passed: bool,
    pub p99_placement_ms: f64,
    pub p99_running_ms: f64,
    /// What the probe breached, in words.
    pub breaches: Vec<String>,
    /// Whether this run repeated the previous one (its p99 was near a threshold).
    pub repeat: bool,
    /// How long the probe took, start to end, seconds.
    pub seconds: f64,
    /// Whether the run measured the cluster; an invalid probe is unknown.
    pub valid: bool,
    /// Why it was invalid.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub invalid: Vec<String>,
    /// The placements per second the cluster took in this run
    /// (`stream.placements_per_second`), whatever it was offered.
    #[serde(default)]
    pub placements_per_s: f64,
}

/// The search's outcome, as `summary.json` gives it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct SearchReport {
    /// What was searched over: `rate` (jobs per second).
    pub parameter: String,
    /// The highest rate that met every SLO (in every run of it).
    pub max_passing: Option<f64>,
    /// Whether `max_passing` is only a lower bound: no failing rate was
    /// found above it (the top of the range, the budget, or the harness's
    /// own limit stopped the search).
    pub at_least: bool,
    /// The lowest rate whose probe was invalid: the harness's limit on this
    /// machine, above which the search does not go.
    pub harness_limit: Option<f64>,
    /// The lowest rate that breached one.
    pub min_failing: Option<f64>,
    pub probes: Vec<Probe>,
    /// How far to trust the answer, in words.
    pub confidence: String,
    pub budget_seconds: f64,
    pub spent_seconds: f64,
    /// The allocations each job of the scenario asks for (the mix's
    /// weighted mean; a system job counts the fleet's nodes): what turns a
    /// rate of jobs into one of placements.
    #[serde(default)]
    pub placements_per_job: Option<f64>,
    /// `max_passing` and `min_failing` offered in placements per second.
    #[serde(default)]
    pub max_passing_placements_per_s: Option<f64>,
    #[serde(default)]
    pub min_failing_placements_per_s: Option<f64>,
    /// The placements per second the cluster took at `max_passing` (the
    /// lowest of its runs): the ceiling a planner reads.
    #[serde(default)]
    pub taken_placements_per_s: Option<f64>,
}

impl SearchReport {
    /// The report with its bracket in placements per second too, jobs of
    /// `per_job` allocations each, and the placements taken at the highest
    /// passing rate said in its confidence.
    pub fn with_placements(mut self, per_job: Option<f64>) -> Self {
        let times = |rate: Option<f64>| Some(rate? * per_job?);
        self.placements_per_job = per_job;
        self.max_passing_placements_per_s = times(self.max_passing);
        self.min_failing_placements_per_s = times(self.min_failing);
        self.taken_placements_per_s = self.max_passing.and_then(|lo| {
            (self.probes.iter())
                .filter(|p| p.value == lo)
                .map(|p| p.placements_per_s)
                .reduce(f64::min)
        });
        if let (Some(lo), Some(offered), Some(taken)) = (
            self.max_passing,
            self.max_passing_placements_per_s,
            self.taken_placements_per_s,
        ) {
            let mut said = format!(
                "; at {lo} jobs/s the offer was {offered:.0} placements/s and the cluster took {taken:.0}/s"
            );
            if let Some(hi) = self.min_failing_placements_per_s {
                said.push_str(&format!(
                    " (the ceiling is below {hi:.0} placements/s offered)"
                ));
            }
            self.confidence.push_str(&said);
        }
        self
    }
}

/// Where the search stands: the probes so far, by rate.
#[derive(Debug, Default)]
pub struct Search {
    start: f64,
    probes: Vec<Probe>,
}

impl Search {
    pub fn new(start: f64) -> Self {
        Self {
            start: start.clamp(MIN_RATE, MAX_RATE),
            probes: Vec::new(),
        }
    }

    pub fn record(&mut self, probe: Probe) {
        self.probes.push(probe);
    }

    /// Whether every run at `value` was valid and passed (a rate run twice
    /// passes only if both runs did).
    fn passed_at(&self, value: f64) -> bool {
        self.probes
            .iter()
            .filter(|p| p.value == value)
            .all(|p| p.valid && p.passed)
    }

    /// Whether a valid run at `value` breached an SLO.
    fn failed_at(&self, value: f64) -> bool {
        let at = self.probes.iter().filter(|p| p.value == value);
        at.filter(|p| p.valid).any(|p| !p.passed)
    }

    /// The lowest rate whose run was invalid, above the highest that
    /// passed: an invalid run below a rate that later passed, valid, was a
    /// busy moment of the machine, not the harness's limit.
    pub fn harness_limit(&self) -> Option<f64> {
        let passed = self.bracket().0;
        let invalid = self.probes.iter().filter(|p| !p.valid).map(|p| p.value);
        invalid
            .filter(|v| passed.is_none_or(|lo| *v > lo))
            .min_by(f64::total_cmp)
    }

    /// The highest rate that passed every time, and the lowest that did not
    /// (invalid runs count as neither).
    pub fn bracket(&self) -> (Option<f64>, Option<f64>) {
        let mut values: Vec<f64> = self.probes.iter().map(|p| p.value).collect();
        values.sort_by(f64::total_cmp);
        values.dedup();
        let min_failing = values.iter().copied().find(|v| self.failed_at(*v));
        let max_passing = values
            .iter()
            .copied()
            .rev()
            .find(|v| self.passed_at(*v) && min_failing.is_none_or(|f| *v < f));
        (max_passing, min_failing)
    }

    /// The next rate to probe, or `None` when the bracket is narrow enough
    /// (or the rate left the range it may take).
    pub fn next(&self) -> Option<f64> {
        if self.probes.is_empty() {
            return Some(self.start);
        }
        // Above the harness's limit nothing can be measured: it bounds the
        // bracket from above like a failing rate.
        let (lo, failing) = self.bracket();
        let hi = match (failing, self.harness_limit()) {
            (Some(f), Some(h)) => Some(f.min(h)),
            (f, h) => f.or(h),
        };
        let next = match (lo, hi) {
            (Some(lo), Some(hi)) if hi / lo <= PRECISION => return None,
            (Some(lo), Some(hi)) => (lo * hi).sqrt(),
            (Some(lo), None) => lo * 2.0,
            (None, Some(hi)) => hi / 2.0,
            (None, None) => return None,
        };
        let next = (next * 1000.0).round() / 1000.0;
        (MIN_RATE..=MAX_RATE)
            .contains(&next)
            .then_some(next)
            .filter(|n| self.probes.iter().all(|p| p.value != *n))
    }

    /// The report, with a word on how far to trust it.
    pub fn report(
        &self,
        budget_seconds: f64,
        spent_seconds: f64,
        out_of_budget: bool,
    ) -> SearchReport {
        let (max_passing, min_failing) = self.bracket();
        let harness_limit = self.harness_limit();
        let repeats = self.probes.iter().filter(|p| p.repeat).count();
        let invalid = self.probes.iter().filter(|p| !p.valid).count();
        let at_least = max_passing.is_some() && min_failing.is_none();
        let mut confidence = match (max_passing, min_failing) {
            (Some(lo), None) if harness_limit.is_some() => format!(
                "at least {lo} jobs/s met every SLO; at {} jobs/s the harness itself saturated, so the cluster's limit is above what this machine can measure",
                harness_limit.unwrap_or_default()
            ),
            (Some(lo), None) => format!(
                "at least {lo} jobs/s: every rate probed met the SLOs and no failing rate was found (the search may probe up to {MAX_RATE} jobs/s)"
            ),
            (Some(lo), Some(hi)) if hi / lo <= PRECISION => format!(
                "{lo} jobs/s met every SLO and {hi} jobs/s ({:.0}% more) did not",
                (hi / lo - 1.0) * 100.0
            ),
            (Some(lo), Some(hi)) => format!(
                "between {lo} and {hi} jobs/s: the bracket is still {:.0}% wide",
                (hi / lo - 1.0) * 100.0
            ),
            (None, Some(hi)) => format!("even {hi} jobs/s breached an SLO; no passing rate found"),
            (None, None) => "no probe ran".into(),
        };
        if out_of_budget {
            confidence.push_str("; the time budget ran out");
        }
        if invalid > 0 {
            confidence.push_str(&format!(
                "; {invalid} probe(s) were invalid (the harness saturated, or an election no fault caused: see each probe's validity) and count as unknown"
            ));
        }
        if repeats > 0 {
            confidence.push_str(&format!(
                "; {repeats} probe(s) near a threshold were run twice and pass only if both did"
            ));
        }
        SearchReport {
            parameter: "rate".into(),
            max_passing,
            at_least,
            harness_limit,
            min_failing,
            probes: self.probes.clone(),
            confidence,
            budget_seconds,
            spent_seconds,
            placements_per_job: None,
            max_passing_placements_per_s: None,
            min_failing_placements_per_s: None,
            taken_placements_per_s: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(value: f64, passed: bool) -> Probe {
        Probe {
            value,
            passed,
            p99_placement_ms: 0.0,
            p99_running_ms: 0.0,
            breaches: vec![],
            repeat: false,
            seconds: 1.0,
            valid: true,
            invalid: vec![],
            placements_per_s: value * 900.0,
        }
    }

    #[test]
    fn the_bracket_is_said_in_placements_per_second_too() {
        // Jobs of 1,000 allocations; the cluster takes 90% of the offer.
        let s = run(4.0, 13.0);
        let r = s.report(60.0, 30.0, false).with_placements(Some(1000.0));
        let (lo, hi) = (r.max_passing.unwrap(), r.min_failing.unwrap());
        assert_eq!(r.placements_per_job, Some(1000.0));
        assert_eq!(r.max_passing_placements_per_s, Some(lo * 1000.0));
        assert_eq!(r.min_failing_placements_per_s, Some(hi * 1000.0));
        assert_eq!(r.taken_placements_per_s, Some(lo * 900.0));
        let said = format!(
            "at {lo} jobs/s the offer was {:.0} placements/s and the cluster took {:.0}/s",
            lo * 1000.0,
            lo * 900.0
        );
        assert!(r.confidence.contains(&said), "{}", r.confidence);
        // A run twice at the highest passing rate: the lower take counts.
        let mut s = Search::new(4.0);
        s.record(probe(4.0, true));
        s.record(Probe {
            repeat: true,
            placements_per_s: 3000.0,
            ..probe(4.0, true)
        });
        let r = s.report(60.0, 10.0, false).with_placements(Some(1000.0));
        assert_eq!(r.taken_placements_per_s, Some(3000.0));
        // Without a count per job (or a passing rate) there is nothing to say.
        let r = s.report(60.0, 10.0, false).with_placements(None);
        assert_eq!(r.max_passing_placements_per_s, None);
        assert!(!r.confidence.contains("placements/s"), "{}", r.confidence);
    }

    /// A cluster that meets the SLO up to `capacity` jobs/s.
    fn run(start: f64, capacity: f64) -> Search {
        let mut s = Search::new(start);
        while let Some(v) = s.next() {
            s.record(probe(v, v <= capacity));
            assert!(s.probes.len() < 40, "the search ends");
        }
        s
    }

    #[test]
    fn the_search_brackets_the_capacity_within_ten_percent() {
        for (start, capacity) in [(4.0, 13.0), (4.0, 1.1), (100.0, 3.3), (1.0, 1.05)] {
            let s = run(start, capacity);
            let (lo, hi) = s.bracket();
            let (lo, hi) = (lo.unwrap(), hi.unwrap());
            assert!(
                lo <= capacity && hi > capacity,
                "{start} {capacity}: {lo}..{hi}"
            );
            assert!(hi / lo <= PRECISION, "{start} {capacity}: {lo}..{hi}");
            let r = s.report(60.0, 30.0, false);
            assert!(r.confidence.contains("did not"), "{}", r.confidence);
        }
    }

    #[test]
    fn a_rate_run_twice_passes_only_if_both_runs_did() {
        let mut s = Search::new(4.0);
        s.record(probe(4.0, true));
        s.record(Probe {
            repeat: true,
            ..probe(4.0, false)
        });
        assert_eq!(s.bracket(), (None, Some(4.0)));
        assert_eq!(s.next(), Some(2.0));
        let r = s.report(60.0, 10.0, true);
        assert!(r.confidence.contains("budget ran out") && r.confidence.contains("twice"));
    }

    #[test]
    fn an_invalid_probe_is_unknown_and_the_search_stays_below_it() {
        // The cluster would meet the SLO up to 100 jobs/s, but from 16
        // jobs/s on the harness saturates: those runs are invalid.
        let mut s = Search::new(4.0);
        while let Some(v) = s.next() {
            let saturated = v >= 16.0;
            s.record(Probe {
                valid: !saturated,
                invalid: if saturated {
                    vec!["nodesim used 0.97".into()]
                } else {
                    vec![]
                },
                ..probe(v, v <= 100.0)
            });
            assert!(s.probes.len() < 40, "the search ends");
        }
        let (lo, hi) = s.bracket();
        assert_eq!(hi, None, "an invalid probe is no failure");
        let lo = lo.unwrap();
        assert!(lo < 16.0 && 16.0 / lo <= PRECISION, "{lo}");
        assert!(s
            .probes
            .iter()
            .filter(|p| !p.valid)
            .all(|p| p.value >= 16.0));
        let r = s.report(60.0, 30.0, false);
        assert!(r.at_least && r.harness_limit == Some(16.0), "{r:?}");
        assert!(
            r.confidence.starts_with(&format!("at least {lo} jobs/s")),
            "{}",
            r.confidence
        );
        assert!(
            r.confidence.contains("harness itself saturated"),
            "{}",
            r.confidence
        );
    }

    #[test]
    fn an_invalid_probe_below_a_rate_that_passed_is_not_the_harness_limit() {
        // A neighbour took the other core during the probe at 8 jobs/s; 16
        // then passed, valid, and 32 failed: the search goes on between
        // them instead of stopping at 8.
        let mut s = Search::new(8.0);
        s.record(Probe {
            valid: false,
            invalid: vec!["the machine's cores were 97% busy".into()],
            ..probe(8.0, true)
        });
        assert_eq!(s.harness_limit(), Some(8.0), "nothing passed yet");
        s.record(probe(16.0, true));
        s.record(probe(32.0, false));
        assert_eq!(s.harness_limit(), None);
        assert_eq!(s.bracket(), (Some(16.0), Some(32.0)));
        assert_eq!(s.next(), Some(22.627));
    }

    #[test]
    fn a_search_that_passes_at_the_top_of_its_range_says_at_least() {
        let s = run(5_000.0, 1e9);
        let r = s.report(60.0, 30.0, false);
        assert_eq!(
            (r.max_passing, r.min_failing, r.at_least),
            (Some(MAX_RATE), None, true)
        );
        assert!(
            r.confidence.starts_with("at least 10000 jobs/s"),
            "{}",
            r.confidence
        );
    }

    #[test]
    fn a_search_that_never_passes_stops_at_the_lowest_rate() {
        let s = run(1.0, 0.0);
        assert_eq!(s.bracket().0, None);
        assert!(s.probes.last().unwrap().value >= MIN_RATE);
    }
}
