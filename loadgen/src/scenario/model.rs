//! What a scenario says: the fleet, the arrival process, the job mix, the
//! SLO, variants, a sweep or a search, and fault steps; and how each
//! variant runs it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// What the run is for: one line for the report's title.
    #[serde(default = "defaults::servers")]
    pub servers: u32,
    /// Simulated client nodes.
    pub nodes: u64,
    /// How many `nodesim` processes a local fleet is split across (1 to
    /// 16, the nodes shared out evenly), so that a `pause_fleet` fault can
    /// pause part of it (its `share`) while the rest goes on.
    #[serde(
        default = "defaults::fleet_processes",
        skip_serializing_if = "defaults::is_one"
    )]
    pub fleet_processes: u32,
    /// How long jobs are submitted, e.g. "60s".
    #[cfg_attr(test, schemars(with = "String"))]
    #[serde(with = "humantime_serde_str")]
    pub duration: Duration,
    /// How long after the last submission the run waits for stragglers.
    #[cfg_attr(test, schemars(with = "String"))]
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
    /// Share (0 to 1) of submissions that scale an earlier service job: the
    /// same spec registered again with a different count.
    #[serde(default)]
    pub scale_share: f64,
    /// Share (0 to 1) of submissions that purge an earlier service or system
    /// job (deregister it, not kept for history).
    #[serde(default)]
    pub purge_share: f64,
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
    /// How many times each variant runs, each on a fresh cluster,
    /// interleaved across variants (A B A B ...), for intervals over
    /// repetitions; `loadgen capacity --repeat` overrides it.
    #[serde(default = "defaults::repeat", skip_serializing_if = "defaults::is_one")]
    pub repeat: u32,
    /// How many of each variant's slowest jobs `traces.json` keeps, stage
    /// by stage (0 to 1,000); `loadgen capacity --trace-slowest` overrides it.
    #[serde(
        default = "defaults::trace_slowest",
        skip_serializing_if = "defaults::is_trace_slowest"
    )]
    pub trace_slowest: u32,
    /// Faults injected during the stream of every variant, in time order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<FaultStep>,
}

/// `[[faults]] at = "20s", action = "kill_leader", duration = "5s"`: one
/// fault injected into the local cluster during the job stream.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct FaultStep {
    /// When, from the start of the job stream.
    #[cfg_attr(test, schemars(with = "String"))]
    #[serde(with = "humantime_serde_str")]
    pub at: Duration,
    pub action: FaultAction,
    /// How long a pause or a partition lasts, or how long a killed server
    /// stays down before it is started again on its own data dir.
    #[cfg_attr(test, schemars(with = "String"))]
    #[serde(with = "humantime_serde_str")]
    pub duration: Duration,
    /// `pause_fleet` only: the share of the fleet's processes paused, above
    /// 0 and at most 1 (all of them when absent): the first
    /// ceil(share × `fleet_processes`). The rest of the fleet goes on, so
    /// the cluster keeps placing (the paused nodes' lost allocations among
    /// them) while the paused nodes are down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
}

impl FaultStep {
    /// How many of a fleet of `processes` nodesim processes a `pause_fleet`
    /// step pauses.
    pub fn fleet_processes_paused(&self, processes: usize) -> usize {
        match self.share {
            Some(share) if processes > 0 => {
                ((share * processes as f64).ceil() as usize).clamp(1, processes)
            }
            _ => processes,
        }
    }
}

/// What a fault step does.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(test, derive(schemars::JsonSchema))]
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
    /// SIGSTOP of every nodesim process (or the step's `share` of them),
    /// SIGCONT after `duration`: the nodes miss their heartbeats, are
    /// marked down and their allocations lost.
    PauseFleet,
}

impl FaultAction {
    pub const ALL: [FaultAction; 8] = [
        Self::KillLeader,
        Self::KillFollower,
        Self::KillAll,
        Self::PauseLeader,
        Self::PauseFollower,
        Self::PartitionLeader,
        Self::PartitionFollower,
        Self::PauseFleet,
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
            Self::PauseFleet => "pause_fleet",
        }
    }

    /// Whether it cuts peer links (and so needs the cluster started with them).
    pub fn partitions(self) -> bool {
        matches!(self, Self::PartitionLeader | Self::PartitionFollower)
    }

    /// Whether it strikes the fleet rather than a server.
    pub fn hits_fleet(self) -> bool {
        self == Self::PauseFleet
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
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Sweep {
    pub parameter: SweepParameter,
    pub values: Vec<f64>,
}

/// `[search] budget = "30m"`: the scenario is a search for the highest
/// arrival rate whose measures all meet its `[slo]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct SearchBlock {
    /// How long the whole search may take (`--budget` overrides it).
    #[cfg_attr(test, schemars(with = "String"))]
    #[serde(with = "humantime_serde_str", default = "defaults::search_budget")]
    pub budget: Duration,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(test, derive(schemars::JsonSchema))]
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
    pub fn repeat() -> u32 {
        1
    }
    pub fn fleet_processes() -> u32 {
        1
    }
    pub fn is_one(n: &u32) -> bool {
        *n == 1
    }
    pub fn trace_slowest() -> u32 {
        super::super::DEFAULT_TRACE_SLOWEST
    }
    pub fn is_trace_slowest(n: &u32) -> bool {
        *n == trace_slowest()
    }
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
#[cfg_attr(test, derive(schemars::JsonSchema))]
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
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub enum Kind {
    Service,
    Batch,
    System,
}

/// One kind of job in the mix.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
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
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Slo {
    /// The run fails if p99 placement latency is above this.
    pub p99_placement_ms: Option<f64>,
    /// The run fails if p99 time to running is above this.
    pub p99_running_ms: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
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
    /// The directory holding this variant's `cluster` and `nodesim` (another
    /// build of the project) instead of those beside loadgen: two builds
    /// interleaved in one run, as two settings are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bin_dir: Option<std::path::PathBuf>,
    /// A git revision whose `cluster` and `nodesim` loadgen builds (in a
    /// worktree of its own) and runs for this variant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_rev: Option<String>,
}

impl Scenario {
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
            bin_dir: None,
            git_rev: None,
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
