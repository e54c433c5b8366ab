//! Capacity scenarios: the fleet, the job stream and the settings to compare,
//! read from TOML. Built-in scenarios live in `loadgen/scenarios/` and are
//! compiled in, so `loadgen capacity --scenario NAME` needs no file.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Longest job stream a scenario (or `--duration`) may ask for.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

/// A named built-in scenario and its TOML.
pub const BUILT_IN: &[(&str, &str)] = &[
    ("default", include_str!("../scenarios/default.toml")),
    (
        "client-updates",
        include_str!("../scenarios/client-updates.toml"),
    ),
    ("deployments", include_str!("../scenarios/deployments.toml")),
    ("c2m-mini", include_str!("../scenarios/c2m-mini.toml")),
    ("faults", include_str!("../scenarios/faults.toml")),
    ("failover", include_str!("../scenarios/failover.toml")),
    ("tls", include_str!("../scenarios/tls.toml")),
    ("soak", include_str!("../scenarios/soak.toml")),
    ("churn", include_str!("../scenarios/churn.toml")),
    ("max-rate", include_str!("../scenarios/max-rate.toml")),
];

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("no built-in scenario {0:?} and no such file (built-in: {1})")]
    Unknown(String, String),
    #[error("cannot read {0}: {1}")]
    Read(String, std::io::Error),
    /// toml's message names the line, the column and the field.
    #[error("{origin}: {message}")]
    Parse { origin: String, message: String },
    #[error("{origin}: {field}: {message}")]
    Invalid {
        origin: String,
        field: String,
        message: String,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// What the run is for: one line for the report's title.
    #[serde(default = "defaults::servers")]
    pub servers: u32,
    /// Simulated client nodes.
    pub nodes: u64,
    /// How long jobs are submitted, e.g. "60s".
    #[serde(with = "humantime_serde_str")]
    pub duration: Duration,
    /// How long after the last submission the run waits for stragglers.
    #[serde(with = "humantime_serde_str", default = "defaults::drain")]
    pub drain: Duration,
    pub arrival: Arrival,
    /// Share (0 to 1) of submissions that update an earlier job's spec
    /// instead of registering a new job: these start deployments.
    #[serde(default)]
    pub update_share: f64,
    /// Share (0 to 1) of submissions that stop (deregister, keeping it for
    /// history) an earlier service or system job that is done being
    /// followed: its allocations stop, and garbage collection has work.
    #[serde(default)]
    pub stop_share: f64,
    #[serde(rename = "jobs")]
    pub job_mix: Vec<JobKind>,
    /// `cluster serve` flags for every variant.
    #[serde(default)]
    pub server_args: Vec<String>,
    /// `nodesim` flags for every variant.
    #[serde(default)]
    pub nodesim_args: Vec<String>,
    /// Mutual TLS and ACL tokens between every process (the default), or
    /// the bare protocol (`cluster serve --insecure`).
    #[serde(default = "defaults::tls")]
    pub tls: bool,
    #[serde(default)]
    pub slo: Slo,
    /// Settings compared on the same workload; one run with none.
    #[serde(default)]
    pub variants: Vec<Variant>,
    /// One parameter run at several values; the report plots cost against it.
    pub sweep: Option<Sweep>,
    /// Run as a search for the highest arrival rate that meets the SLOs, as
    /// `--find-max-rate` does for any scenario.
    pub search: Option<SearchBlock>,
    /// Faults injected during the stream of every variant, in time order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<FaultStep>,
}

/// `[[faults]] at = "20s", action = "kill_leader", duration = "5s"`: one
/// fault injected into the local cluster during the job stream.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FaultStep {
    /// When, from the start of the job stream.
    #[serde(with = "humantime_serde_str")]
    pub at: Duration,
    pub action: FaultAction,
    /// How long a pause or a partition lasts, or how long a killed server
    /// stays down before it is started again on its own data dir.
    #[serde(with = "humantime_serde_str")]
    pub duration: Duration,
}

/// What a fault step does.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum FaultAction {
    /// kill -9 of the leader.
    KillLeader,
    /// kill -9 of a follower.
    KillFollower,
    /// kill -9 of every server at once.
    KillAll,
    /// SIGSTOP of the leader, SIGCONT after `duration`.
    PauseLeader,
    /// SIGSTOP of a follower, SIGCONT after `duration`.
    PauseFollower,
    /// The leader cut off from the other servers (its peer links, both ways).
    PartitionLeader,
    /// A follower cut off from the other servers.
    PartitionFollower,
}

impl FaultAction {
    pub const ALL: [FaultAction; 7] = [
        Self::KillLeader,
        Self::KillFollower,
        Self::KillAll,
        Self::PauseLeader,
        Self::PauseFollower,
        Self::PartitionLeader,
        Self::PartitionFollower,
    ];

    /// The name a scenario gives it.
    pub fn name(self) -> &'static str {
        match self {
            Self::KillLeader => "kill_leader",
            Self::KillFollower => "kill_follower",
            Self::KillAll => "kill_all",
            Self::PauseLeader => "pause_leader",
            Self::PauseFollower => "pause_follower",
            Self::PartitionLeader => "partition_leader",
            Self::PartitionFollower => "partition_follower",
        }
    }

    /// Whether it cuts peer links (and so needs the cluster started with them).
    pub fn partitions(self) -> bool {
        matches!(self, Self::PartitionLeader | Self::PartitionFollower)
    }

    /// Whether it strikes the leader (all servers count).
    pub fn hits_leader(self) -> bool {
        matches!(
            self,
            Self::KillLeader | Self::KillAll | Self::PauseLeader | Self::PartitionLeader
        )
    }
}

/// `[sweep] parameter = "nodes", values = [1000, 5000, 10000]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    pub parameter: SweepParameter,
    pub values: Vec<f64>,
}

/// `[search] budget = "30m"`: the scenario is a search for the highest
/// arrival rate whose measures all meet its `[slo]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SearchBlock {
    /// How long the whole search may take (`--budget` overrides it).
    #[serde(with = "humantime_serde_str", default = "defaults::search_budget")]
    pub budget: Duration,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SweepParameter {
    /// The fleet size.
    Nodes,
    /// The submission rate, jobs per second (a ramp scales both ends).
    Rate,
}

impl SweepParameter {
    pub fn name(self) -> &'static str {
        match self {
            Self::Nodes => "nodes",
            Self::Rate => "rate",
        }
    }
}

mod defaults {
    use std::time::Duration;
    pub fn servers() -> u32 {
        3
    }
    pub fn drain() -> Duration {
        Duration::from_secs(30)
    }
    pub fn weight() -> u32 {
        1
    }
    pub fn memory() -> u64 {
        64
    }
    pub fn tls() -> bool {
        true
    }
    pub fn search_budget() -> Duration {
        super::DEFAULT_SEARCH_BUDGET
    }
}

/// A search's time budget when neither the scenario nor `--budget` sets one.
pub const DEFAULT_SEARCH_BUDGET: Duration = Duration::from_secs(30 * 60);

/// `duration = "60s"` in TOML.
mod humantime_serde_str {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s)
            .map_err(|e| serde::de::Error::custom(format!("{s:?} is not a duration ({e})")))
    }
}

/// When submissions are scheduled.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, tag = "process", rename_all = "snake_case")]
pub enum Arrival {
    /// `rate` submissions per second, evenly spaced.
    Constant { rate: f64 },
    /// `rate` per second on average, exponential gaps.
    Poisson { rate: f64 },
    /// From `from` to `to` per second, linearly over the duration.
    Ramp { from: f64, to: f64 },
}

impl Arrival {
    /// The submission rate at `t` seconds into a run of `total` seconds.
    pub fn rate_at(&self, t: f64, total: f64) -> f64 {
        match self {
            Arrival::Constant { rate } | Arrival::Poisson { rate } => *rate,
            Arrival::Ramp { from, to } => from + (to - from) * (t / total.max(1e-9)).min(1.0),
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Service,
    Batch,
    System,
}

/// One kind of job in the mix.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct JobKind {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: Kind,
    /// Relative share of submissions.
    #[serde(default = "defaults::weight")]
    pub weight: u32,
    /// Allocations per job (system jobs: one per node, this is ignored).
    #[serde(default)]
    pub count: u32,
    pub cpu_mhz: u64,
    #[serde(default = "defaults::memory")]
    pub memory_mb: u64,
    /// An update block: deployments with this many allocations at a time.
    #[serde(default)]
    pub max_parallel: u32,
    #[serde(default)]
    pub min_healthy_time_ms: u64,
    /// Only nodes of this class may run it (a `node_class` constraint); a
    /// class the fleet lacks leaves it blocked.
    #[serde(default)]
    pub node_class: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Slo {
    /// The run fails if p99 placement latency is above this.
    pub p99_placement_ms: Option<f64>,
    /// The run fails if p99 time to running is above this.
    pub p99_running_ms: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    /// Names its setting, e.g. `legacy` or `prioritized`.
    pub name: String,
    /// Overrides the scenario's fleet size.
    #[serde(default)]
    pub nodes: Option<u64>,
    /// Overrides the scenario's submission rate (jobs per second).
    #[serde(default)]
    pub rate: Option<f64>,
    #[serde(default)]
    pub server_args: Vec<String>,
    #[serde(default)]
    pub nodesim_args: Vec<String>,
    /// Overrides the scenario's `tls`: a pair of variants measures what TLS costs.
    #[serde(default)]
    pub tls: Option<bool>,
}

impl Scenario {
    /// A built-in scenario by name, or a TOML file by path.
    pub fn load(name_or_path: &str) -> Result<Self, ScenarioError> {
        if let Some((_, text)) = BUILT_IN.iter().find(|(n, _)| *n == name_or_path) {
            return Self::parse(text, &format!("built-in scenario {name_or_path}"));
        }
        let path = Path::new(name_or_path);
        if !path.exists() {
            let names: Vec<&str> = BUILT_IN.iter().map(|(n, _)| *n).collect();
            return Err(ScenarioError::Unknown(
                name_or_path.into(),
                names.join(", "),
            ));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| ScenarioError::Read(path.display().to_string(), e))?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses and checks a scenario; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ScenarioError> {
        let s: Scenario = toml::from_str(text).map_err(|e| ScenarioError::Parse {
            origin: origin.into(),
            message: e.to_string().trim_end().into(),
        })?;
        s.check(origin)?;
        Ok(s)
    }

    /// The scenario with its stream lasting `duration` instead
    /// (`loadgen capacity --duration`), checked again: faults must still
    /// fall within the stream.
    pub fn with_duration(mut self, duration: Duration) -> Result<Self, ScenarioError> {
        self.duration = duration;
        let origin = format!("scenario {} with --duration", self.name);
        self.check(&origin)?;
        Ok(self)
    }

    fn check(&self, origin: &str) -> Result<(), ScenarioError> {
        let bad = |field: &str, message: &str| {
            Err(ScenarioError::Invalid {
                origin: origin.into(),
                field: field.into(),
                message: message.into(),
            })
        };
        if !(1..=9).contains(&self.servers) {
            return bad("servers", "must be 1 to 9");
        }
        if self.nodes == 0 || self.nodes > 1_000_000 {
            return bad("nodes", "must be 1 to 1,000,000");
        }
        if self.duration.is_zero() || self.duration > MAX_DURATION {
            return bad("duration", "must be above 0 and at most 24h");
        }
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
        if !(0.0..=1.0).contains(&self.stop_share) || self.update_share + self.stop_share > 1.0 {
            return bad(
                "stop_share",
                "must be between 0 and 1, and with update_share at most 1",
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
        }
        self.check_faults(origin)
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
            if self.servers < 3 && f.action != FaultAction::KillAll {
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

    /// Whether any fault step cuts peer links.
    pub fn partitions(&self) -> bool {
        self.faults.iter().any(|f| f.action.partitions())
    }

    /// The variants to run: those declared, one per sweep value, or one
    /// named for the scenario.
    pub fn runs(&self) -> Vec<Variant> {
        let plain = |name: String| Variant {
            name,
            nodes: None,
            rate: None,
            server_args: vec![],
            nodesim_args: vec![],
            tls: None,
        };
        if let Some(sweep) = &self.sweep {
            return sweep
                .values
                .iter()
                .map(|&x| {
                    let mut v = plain(format!("{}-{x}", sweep.parameter.name()));
                    match sweep.parameter {
                        SweepParameter::Nodes => v.nodes = Some(x as u64),
                        SweepParameter::Rate => v.rate = Some(x),
                    }
                    v
                })
                .collect();
        }
        if self.variants.is_empty() {
            vec![plain(self.name.clone())]
        } else {
            self.variants.clone()
        }
    }

    /// The scenario as variant `v` runs it: its fleet size and rate.
    pub fn for_variant(&self, v: &Variant) -> Scenario {
        let mut s = self.clone();
        if let Some(n) = v.nodes {
            s.nodes = n;
        }
        if let Some(tls) = v.tls {
            s.tls = tls;
        }
        if let Some(r) = v.rate {
            s.arrival = match s.arrival {
                Arrival::Constant { .. } => Arrival::Constant { rate: r },
                Arrival::Poisson { .. } => Arrival::Poisson { rate: r },
                Arrival::Ramp { from, to } => {
                    let scale = r / to.max(1e-9);
                    Arrival::Ramp {
                        from: from * scale,
                        to: r,
                    }
                }
            };
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duration_overrides_the_stream_and_keeps_faults_inside_it() {
        let d = Scenario::load("default")
            .unwrap()
            .with_duration(Duration::from_secs(1800))
            .unwrap();
        assert_eq!(d.duration, Duration::from_secs(1800));
        let e = Scenario::load("faults")
            .unwrap()
            .with_duration(Duration::from_secs(30))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--duration") && e.contains("not within the job stream"),
            "{e}"
        );
        let e = Scenario::load("default")
            .unwrap()
            .with_duration(Duration::from_secs(25 * 3600))
            .unwrap_err()
            .to_string();
        assert!(e.contains("at most 24h"), "{e}");
    }

    #[test]
    fn every_built_in_scenario_parses() {
        for (name, _) in BUILT_IN {
            let s = Scenario::load(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(s.name, *name);
        }
        let s = Scenario::load("client-updates").unwrap();
        let names: Vec<String> = s.runs().into_iter().map(|v| v.name).collect();
        assert_eq!(names, ["legacy", "prioritized"]);
    }

    #[test]
    fn a_bad_scenario_names_the_field_and_line() {
        let text = "name = \"x\"\nnodes = 10\nduration = \"10s\"\narival = { process = \"constant\", rate = 1.0 }\n";
        let e = Scenario::parse(text, "x.toml").unwrap_err().to_string();
        assert!(
            e.contains("x.toml") && e.contains("line 4") && e.contains("arival"),
            "{e}"
        );

        let text = "name = \"x\"\nnodes = 10\nduration = \"soon\"\n";
        let e = Scenario::parse(text, "x.toml").unwrap_err().to_string();
        assert!(
            e.contains("line 3") && e.contains("\"soon\" is not a duration"),
            "{e}"
        );

        let text = r#"
name = "x"
nodes = 10
duration = "10s"
arrival = { process = "constant", rate = 1.0 }
[[jobs]]
name = "web"
type = "service"
count = 0
cpu_mhz = 100
"#;
        let e = Scenario::parse(text, "x.toml").unwrap_err().to_string();
        assert!(e.contains("jobs[0].count (web)"), "{e}");

        let e = Scenario::load("no-such-scenario").unwrap_err().to_string();
        assert!(e.contains("c2m-mini"), "{e}");
    }

    #[test]
    fn a_sweep_runs_one_variant_per_value() {
        let text = r#"
name = "grow"
nodes = 10
duration = "10s"
arrival = { process = "constant", rate = 1.0 }
[[jobs]]
name = "web"
type = "service"
count = 1
cpu_mhz = 100
[sweep]
parameter = "nodes"
values = [100, 1000]
"#;
        let s = Scenario::parse(text, "grow.toml").unwrap();
        let runs = s.runs();
        let names: Vec<&str> = runs.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["nodes-100", "nodes-1000"]);
        assert_eq!(s.for_variant(&runs[1]).nodes, 1000);
        let bad = text.replace("[100, 1000]", "[100, 0.5]");
        let e = Scenario::parse(&bad, "grow.toml").unwrap_err().to_string();
        assert!(e.contains("sweep.values"), "{e}");
    }

    #[test]
    fn a_search_block_needs_an_slo_and_no_variants() {
        let s = Scenario::load("max-rate").unwrap();
        assert_eq!(s.search.as_ref().unwrap().budget, DEFAULT_SEARCH_BUDGET);
        let text = BUILT_IN.iter().find(|(n, _)| *n == "max-rate").unwrap().1;
        let no_slo = text.replace("p99_placement_ms = 5000", "");
        let e = Scenario::parse(&no_slo, "x.toml").unwrap_err().to_string();
        assert!(e.contains("search: needs an [slo]"), "{e}");
        let zero = text.replace("budget = \"30m\"", "budget = \"0s\"");
        let e = Scenario::parse(&zero, "x.toml").unwrap_err().to_string();
        assert!(e.contains("search.budget"), "{e}");
        let swept = format!("{text}\n[sweep]\nparameter = \"nodes\"\nvalues = [10]\n");
        let e = Scenario::parse(&swept, "x.toml").unwrap_err().to_string();
        assert!(e.contains("no variants or sweep"), "{e}");
    }

    const WITH_FAULTS: &str = r#"
name = "f"
nodes = 10
duration = "60s"
arrival = { process = "constant", rate = 1.0 }
[[jobs]]
name = "web"
type = "service"
count = 1
cpu_mhz = 100
[[faults]]
at = "10s"
action = "kill_leader"
duration = "2s"
[[faults]]
at = "20s"
action = "partition_follower"
duration = "5s"
"#;

    #[test]
    fn fault_steps_parse_with_their_times_and_actions() {
        let s = Scenario::parse(WITH_FAULTS, "f.toml").unwrap();
        assert_eq!(
            s.faults,
            [
                FaultStep {
                    at: Duration::from_secs(10),
                    action: FaultAction::KillLeader,
                    duration: Duration::from_secs(2),
                },
                FaultStep {
                    at: Duration::from_secs(20),
                    action: FaultAction::PartitionFollower,
                    duration: Duration::from_secs(5),
                },
            ]
        );
        assert!(s.partitions());
        for a in FaultAction::ALL {
            let text = WITH_FAULTS.replace("partition_follower", a.name());
            let s = Scenario::parse(&text, "f.toml").unwrap_or_else(|e| panic!("{a:?}: {e}"));
            assert_eq!(s.faults[1].action, a);
        }
        // A scenario without faults serializes as before (no `faults` key).
        let plain = Scenario::load("default").unwrap();
        assert!(plain.faults.is_empty());
        let json = serde_json::to_value(&plain).unwrap();
        assert!(json.get("faults").is_none());
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["faults"][0]["action"], "kill_leader");
        assert_eq!(json["faults"][0]["at"], "10s");
    }

    #[test]
    fn bad_fault_steps_are_refused_with_their_field() {
        let refused = |from: &str, to: &str| {
            let text = WITH_FAULTS.replace(from, to);
            Scenario::parse(&text, "f.toml").unwrap_err().to_string()
        };
        let e = refused("\"kill_leader\"", "\"kill_everything\"");
        assert!(
            e.contains("f.toml") && e.contains("line 13") && e.contains("kill_everything"),
            "{e}"
        );
        let e = refused("at = \"10s\"", "at = \"soon\"");
        assert!(e.contains("\"soon\" is not a duration"), "{e}");
        let e = refused("at = \"20s\"", "at = \"90s\"");
        assert!(
            e.contains("faults[1].at (partition_follower)") && e.contains("within the job stream"),
            "{e}"
        );
        let e = refused("at = \"20s\"", "at = \"11s\"");
        assert!(
            e.contains("faults[1].at") && e.contains("before faults[0] has ended"),
            "{e}"
        );
        let e = refused("duration = \"5s\"", "duration = \"0s\"");
        assert!(e.contains("faults[1].duration"), "{e}");
        let e = refused(
            "action = \"kill_leader\"\nduration = \"2s\"",
            "action = \"kill_leader\"",
        );
        assert!(e.contains("missing field `duration`"), "{e}");
        let e = refused("nodes = 10", "nodes = 10\nservers = 1");
        assert!(
            e.contains("faults[0].action (kill_leader)") && e.contains("at least 3 servers"),
            "{e}"
        );
        let e = refused("duration = \"2s\"", "duration = \"2s\"\nwhen = 3");
        assert!(e.contains("unknown field `when`"), "{e}");
        // A kill may restart at once.
        assert!(Scenario::parse(&WITH_FAULTS.replace("\"2s\"", "\"0s\""), "f.toml").is_ok());
    }

    #[test]
    fn a_ramp_goes_from_one_rate_to_the_other() {
        let a = Arrival::Ramp {
            from: 1.0,
            to: 11.0,
        };
        assert_eq!(a.rate_at(0.0, 10.0), 1.0);
        assert_eq!(a.rate_at(5.0, 10.0), 6.0);
        assert_eq!(a.rate_at(20.0, 10.0), 11.0);
    }
}
