//! Checking a parsed scenario: each field within what a run can do, and
//! the fault steps within the stream and one at a time.

use std::time::Duration;

use super::{
    Arrival, FaultAction, FaultStep, Kind, Scenario, ScenarioError, SweepParameter, MAX_DURATION,
    MAX_FLEET_PROCESSES, MAX_REPEAT, MAX_TRACE_SLOWEST,
};

/// The refusal of `field` of the scenario from `origin`, saying why.
fn invalid(origin: &str, field: &str, message: &str) -> Result<(), ScenarioError> {
    Err(ScenarioError::Invalid {
        origin: origin.into(),
        field: field.into(),
        message: message.into(),
    })
}

impl Scenario {
    /// Checks every field against what a run can do; the error names the
    /// field and why.
    pub(super) fn check(&self, origin: &str) -> Result<(), ScenarioError> {
        let bad = |field: &str, message: &str| invalid(origin, field, message);
        if !(1..=9).contains(&self.servers) {
            return bad("servers", "must be 1 to 9");
        }
        if !(1..=MAX_REPEAT).contains(&self.repeat) {
            return bad("repeat", &format!("must be 1 to {MAX_REPEAT}"));
        }
        if self.trace_slowest > MAX_TRACE_SLOWEST {
            return bad(
                "trace_slowest",
                &format!("must be 0 to {MAX_TRACE_SLOWEST}"),
            );
        }
        if self.nodes == 0 || self.nodes > 1_000_000 {
            return bad("nodes", "must be 1 to 1,000,000");
        }
        if !(1..=MAX_FLEET_PROCESSES).contains(&self.fleet_processes)
            || u64::from(self.fleet_processes) > self.nodes
        {
            return bad(
                "fleet_processes",
                &format!(
                    "must be 1 to {MAX_FLEET_PROCESSES}, and at most the nodes ({})",
                    self.nodes
                ),
            );
        }
        if self.duration.is_zero() || self.duration > MAX_DURATION {
            return bad("duration", "must be above 0 and at most 24h");
        }
        self.check_stream(origin)?;
        self.check_runs(origin)?;
        self.check_faults(origin)
    }

    /// The arrivals, the shares of each kind of write and the job mix.
    fn check_stream(&self, origin: &str) -> Result<(), ScenarioError> {
        let bad = |field: &str, message: &str| invalid(origin, field, message);
        let rates = match self.arrival {
            Arrival::Constant { rate } | Arrival::Poisson { rate } => vec![rate],
            Arrival::Ramp { from, to } => vec![from, to],
        };
        if rates
            .iter()
            .any(|r| !(r.is_finite() && *r >= 0.0 && *r <= 100_000.0))
            || rates.iter().all(|r| *r == 0.0)
        {
            return bad("arrival.rate", "must be 0 to 100,000 per second, not all 0");
        }
        if !(0.0..=1.0).contains(&self.update_share) {
            return bad("update_share", "must be between 0 and 1");
        }
        let shares = [
            ("stop_share", self.stop_share),
            ("scale_share", self.scale_share),
            ("purge_share", self.purge_share),
        ];
        for (field, share) in shares {
            if !(0.0..=1.0).contains(&share) {
                return bad(field, "must be between 0 and 1");
            }
        }
        let writes = self.update_share + self.stop_share + self.scale_share + self.purge_share;
        if writes > 1.0 {
            return bad(
                "stop_share",
                "update_share, stop_share, scale_share and purge_share add up to at most 1",
            );
        }
        if self.job_mix.is_empty() {
            return bad("jobs", "needs at least one [[jobs]] entry");
        }
        for (i, j) in self.job_mix.iter().enumerate() {
            let field = |f: &str| format!("jobs[{i}].{f} ({})", j.name);
            if j.weight == 0 {
                return bad(&field("weight"), "must be at least 1");
            }
            if j.kind != Kind::System && !(1..=100_000).contains(&j.count) {
                return bad(&field("count"), "must be 1 to 100,000");
            }
            if j.cpu_mhz == 0 || j.memory_mb == 0 {
                return bad(&field("cpu_mhz"), "resources must be above 0");
            }
        }
        Ok(())
    }

    /// How the variants run: a sweep, a search or variants, each checked.
    fn check_runs(&self, origin: &str) -> Result<(), ScenarioError> {
        let bad = |field: &str, message: &str| invalid(origin, field, message);
        if let Some(sweep) = &self.sweep {
            if !self.variants.is_empty() {
                return bad("sweep", "a scenario has variants or a sweep, not both");
            }
            let ok = |v: &f64| match sweep.parameter {
                SweepParameter::Nodes => (1.0..=1_000_000.0).contains(v) && v.fract() == 0.0,
                SweepParameter::Rate => *v > 0.0 && *v <= 100_000.0,
            };
            if sweep.values.is_empty() || !sweep.values.iter().all(ok) {
                return bad(
                    "sweep.values",
                    "needs values: whole node counts 1 to 1,000,000, or rates above 0",
                );
            }
        }
        if let Some(search) = &self.search {
            if !self.variants.is_empty() || self.sweep.is_some() {
                return bad(
                    "search",
                    "a search varies the rate itself: no variants or sweep",
                );
            }
            if self.slo.p99_placement_ms.is_none() && self.slo.p99_running_ms.is_none() {
                return bad(
                    "search",
                    "needs an [slo] (p99_placement_ms or p99_running_ms)",
                );
            }
            if search.budget.is_zero() || search.budget > MAX_DURATION {
                return bad("search.budget", "must be above 0 and at most 24h");
            }
        }
        let mut names = std::collections::HashSet::new();
        for (i, v) in self.variants.iter().enumerate() {
            if v.name.is_empty() || !names.insert(&v.name) {
                return bad(&format!("variants[{i}].name"), "must be set and unique");
            }
            if v.bin_dir.is_some() && v.git_rev.is_some() {
                return bad(
                    &format!("variants[{i}].git_rev"),
                    "a variant names its binaries by bin_dir or by git_rev, not both",
                );
            }
            if v.git_rev
                .as_deref()
                .is_some_and(|r| r.trim().is_empty() || r.starts_with('-'))
            {
                return bad(&format!("variants[{i}].git_rev"), "must name a revision");
            }
        }
        Ok(())
    }

    fn check_faults(&self, origin: &str) -> Result<(), ScenarioError> {
        let bad = |i: usize, f: &FaultStep, field: &str, message: String| {
            Err(ScenarioError::Invalid {
                origin: origin.into(),
                field: format!("faults[{i}].{field} ({})", f.action.name()),
                message,
            })
        };
        let secs = |d: Duration| humantime::format_duration(d).to_string();
        let mut previous_end: Option<(usize, Duration)> = None;
        for (i, f) in self.faults.iter().enumerate() {
            if f.at >= self.duration {
                return bad(
                    i,
                    f,
                    "at",
                    format!(
                        "{} is not within the job stream (duration {}): faults run during it",
                        secs(f.at),
                        secs(self.duration)
                    ),
                );
            }
            let kill = matches!(
                f.action,
                FaultAction::KillLeader | FaultAction::KillFollower | FaultAction::KillAll
            );
            if !kill && f.duration.is_zero() {
                return bad(
                    i,
                    f,
                    "duration",
                    "a pause or a partition must last more than 0s".into(),
                );
            }
            if f.duration > Duration::from_secs(3600) {
                return bad(i, f, "duration", "must be at most 1h".into());
            }
            if let Some((j, end)) = previous_end {
                if f.at <= end {
                    return bad(
                        i,
                        f,
                        "at",
                        format!(
                            "{} is before faults[{j}] has ended ({}): steps run one at a time, in time order",
                            secs(f.at),
                            secs(end)
                        ),
                    );
                }
            }
            if let Some(share) = f.share {
                if !f.action.hits_fleet() {
                    return bad(
                        i,
                        f,
                        "share",
                        "only a pause_fleet step pauses a share of the fleet".into(),
                    );
                }
                if !(share > 0.0 && share <= 1.0) {
                    return bad(i, f, "share", "must be above 0 and at most 1".into());
                }
                let paused = f.fleet_processes_paused(self.fleet_processes as usize);
                if share < 1.0 && paused == self.fleet_processes as usize {
                    return bad(
                        i,
                        f,
                        "share",
                        format!(
                            "{share} of {} fleet process(es) is all of them: set fleet_processes so that part of the fleet goes on",
                            self.fleet_processes
                        ),
                    );
                }
            }
            if self.servers < 3 && f.action != FaultAction::KillAll && !f.action.hits_fleet() {
                return bad(
                    i,
                    f,
                    "action",
                    format!(
                        "needs at least 3 servers (the scenario has {}), so that the others keep a quorum",
                        self.servers
                    ),
                );
            }
            previous_end = Some((i, f.at + f.duration));
        }
        Ok(())
    }
}
