//! `loadgen capacity`'s options, and what they decide before anything
//! runs: the inventory's targets, and whether the run is a search.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use stampede_proto::address::{ServerAddresses, ADDRESS_ARG};
use stampede_proto::security::ClientSecurityArgs;

use crate::capacity::error::{AddressSource, CapacityError};
use crate::inventory::Inventory;
use crate::scenario::Scenario;

#[derive(Debug, Clone, Args)]
#[command(mut_arg(ADDRESS_ARG, |a| a.help("Drive an existing cluster at these gRPC addresses (with --metrics, or --inventory in their place); nothing is spawned, and only the scenario's first variant runs. STAMPEDE_ADDRESS, exported, makes a run drive that cluster too: unset, loadgen starts a cluster of its own.")))]
pub struct CapacityOpts {
    /// A built-in scenario (default, client-updates, deployments, c2m-mini, c2m, c2m-ceiling, faults, audit, audit-gc, failover, tls, soak, churn, max-rate, fleet-100k, fleet-250k) or a TOML file.
    #[arg(long, default_value = "default")]
    pub scenario: String,
    /// How long jobs are submitted, overriding the scenario's `duration`
    /// (e.g. `30m` for a soak, `2m` in CI); at most 24h.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// Search for the highest arrival rate whose measures all meet the
    /// scenario's SLOs: each probe is a whole run at one rate, doubling or
    /// halving until one passes and one fails, then narrowing to 10%.
    #[arg(long)]
    pub find_max_rate: bool,
    /// With --find-max-rate or a scenario's [search]: how long the search may
    /// take in all; it stops before a probe that would not fit [default: the
    /// scenario's [search] budget, or 30m]. With --until-conclusive: no
    /// round starts that would end past it [default: no limit but
    /// --max-repeat].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub budget: Option<Duration>,
    /// Add rounds (every variant once each, in a random order) while a
    /// gated measure of a variant against the first is still inconclusive,
    /// and stop as soon as each is better, worse or the same; at most
    /// --max-repeat rounds and within --budget. Looks start at the first
    /// round that can decide at the level the looks share (with 10 rounds
    /// at most: round 8, each look at 98.4%), and not before --repeat.
    #[arg(long, conflicts_with_all = ["find_max_rate", "inventory"])]
    pub until_conclusive: bool,
    /// With --until-conclusive: a measure that must be decided before the run
    /// stops; may be repeated [default: the gated measures of `loadgen
    /// compare`].
    #[arg(long = "gate", value_name = "MEASURE", requires = "until_conclusive")]
    pub gates: Vec<String>,
    /// With --until-conclusive: the most rounds it runs.
    #[arg(long, value_name = "N", requires = "until_conclusive", value_parser = clap::value_parser!(u32).range(crate::capacity::options::FIRST_LOOK as i64..=crate::scenario::MAX_REPEAT as i64))]
    pub max_repeat: Option<u32>,
    /// The seed that draws each round's order of the variants (default: a
    /// random one); summary.json records it, so a run's order can be
    /// repeated.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Run variant NAME with the `cluster` and `nodesim` in DIR (another
    /// build of the project), as a scenario's `bin_dir` does; may be
    /// repeated, one per variant.
    #[arg(long = "variant-bin", value_name = "NAME=DIR", value_parser = parse_variant_bin)]
    pub variant_bins: Vec<(String, PathBuf)>,
    /// Run each variant N times, each on a fresh cluster, interleaved across
    /// variants (A B A B ...) so that drift in the machine hits all alike;
    /// summary.json gets every repetition's measures and each measure's
    /// median with a 95% interval [default: the scenario's `repeat`, or 1].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=crate::scenario::MAX_REPEAT as i64))]
    pub repeat: Option<u32>,
    /// How many of each variant's slowest jobs traces.json keeps, each
    /// stage by stage from its submission (0 to 1000) [default: the
    /// scenario's `trace_slowest`, or 20].
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(0..=crate::scenario::MAX_TRACE_SLOWEST as i64))]
    pub trace_slowest: Option<u32>,
    /// A `cluster serve` flag for every variant's servers, after the
    /// scenario's own (may be repeated; give a flag and its value apart:
    /// `--server-arg=--raft-batching --server-arg=off`): what a change of
    /// setting buys, with the same scenario.
    #[arg(long = "server-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub server_args: Vec<String>,
    /// The run directory [default: runs/SCENARIO-UNIXTIME].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Drive an existing cluster at these gRPC addresses (with --metrics,
    /// or --inventory in their place); nothing is spawned, and only the
    /// scenario's first variant runs. STAMPEDE_ADDRESS, exported, makes a
    /// run drive that cluster too: unset, loadgen starts a cluster of its
    /// own.
    #[command(flatten)]
    pub servers: ServerAddresses,
    /// With --address: every process's /metrics URL to sample (servers and nodesim shards).
    #[arg(long, value_delimiter = ',')]
    pub metrics: Vec<String>,
    /// The servers and nodesim shards of a deployed run, from a TOML file
    /// (see loadgen/README.md, "Remote mode with an inventory"): in place of --address and --metrics, and
    /// the stream waits until the shards' whole fleet is ready.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["metrics", "find_max_rate"])]
    pub inventory: Option<PathBuf>,
    /// The nodesim shards' /metrics, from --inventory.
    #[arg(skip)]
    pub fleet_metrics: Vec<String>,
    /// With --address: the TLS files and token to present to that cluster.
    #[command(flatten)]
    pub security: ClientSecurityArgs,
    /// An earlier run's summary.json: flag (and fail on) costs or latencies
    /// more than 10% above it, variant by variant.
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// How often every process's /metrics is read.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub sample_every: Duration,
    /// Where loadgen serves its own /metrics (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub serve_metrics: SocketAddr,
    /// Do not start Prometheus even if it is installed.
    #[arg(long)]
    pub no_prometheus: bool,
    /// With [[faults]]: how long, past a fault's injection or its end
    /// (whichever is later), a leader may take to appear before the fault
    /// is reported without one.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub fault_leader_wait: Duration,
    /// With [[faults]] or --audit: how long the servers may take, after the
    /// stream, to answer and apply the same raft index (and, for the
    /// invariants, empty their queues) before the audit gives up (and the
    /// run fails).
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    pub audit_wait: Duration,
    /// End each variant with the invariant audit (always on with [[faults]]):
    /// once the cluster is at rest, every server is read and checked
    /// against the scheduler's promises (`invariants` in summary.json).
    /// Needs servers loadgen starts.
    #[arg(long, conflicts_with = "inventory")]
    pub audit: bool,
    /// The run history the run is recorded in (`loadgen history`).
    #[command(flatten)]
    pub history: crate::history::HistoryArg,
    /// Record the run in no history (wins over --history and STAMPEDE_HISTORY).
    #[arg(long)]
    pub no_history: bool,
    /// Whether the addresses came from STAMPEDE_ADDRESS rather than
    /// --address (set by the binary from its parsed command line): the
    /// flags that need servers loadgen starts are checked against
    /// --address here, not by clap, so that their refusal can say which.
    #[arg(skip)]
    pub address_from_env: bool,
}

/// With --until-conclusive: the fewest rounds before the first look (each
/// variant's spread needs three to calibrate its noise floor; a paired
/// interval needs more to reach its level, see `variants::sequential_level`).
pub const FIRST_LOOK: u32 = 3;

/// With --until-conclusive: the most rounds without --max-repeat.
pub const DEFAULT_MAX_ROUNDS: u32 = 10;

/// `--variant-bin NAME=DIR`.
fn parse_variant_bin(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((name, dir)) if !name.is_empty() && !dir.is_empty() => {
            Ok((name.to_string(), PathBuf::from(dir)))
        }
        _ => Err(format!("{s:?}: expected NAME=DIR (a variant's name and the directory holding its cluster and nodesim)")),
    }
}

impl CapacityOpts {
    /// Checks, before anything runs, that the addresses of a cluster to
    /// drive go with the other flags: an inventory names its own servers
    /// (an exported STAMPEDE_ADDRESS gives way to it, a typed --address does
    /// not); `--find-max-rate`, `--until-conclusive` and `--audit` need
    /// servers loadgen starts; a cluster loadgen did not start is sampled
    /// through --metrics.
    pub(super) fn check_address(&mut self) -> Result<(), CapacityError> {
        if self.servers.is_empty() {
            return Ok(());
        }
        if self.inventory.is_some() {
            if self.address_from_env {
                self.servers.clear();
                return Ok(());
            }
            return Err(CapacityError::NeedsNoAddress {
                what: "--inventory (which names the servers itself)".into(),
                from: self.address_source(),
            });
        }
        let local_only = [
            (self.find_max_rate, "--find-max-rate"),
            (self.until_conclusive, "--until-conclusive"),
            (self.audit, "--audit"),
        ];
        if let Some((_, flag)) = local_only.iter().find(|(on, _)| *on) {
            return Err(CapacityError::NeedsNoAddress {
                what: format!("{flag} (which needs servers loadgen starts)"),
                from: self.address_source(),
            });
        }
        if self.metrics.is_empty() {
            return Err(CapacityError::NoMetrics(self.address_source()));
        }
        Ok(())
    }

    /// Where the addresses of the cluster to drive came from, and how not
    /// to drive it, for a refusal.
    pub(super) fn address_source(&self) -> AddressSource {
        AddressSource {
            from_env: self.address_from_env,
            addresses: self.servers.join(","),
        }
    }

    /// `--inventory`: its servers and shards in place of `--address` and `--metrics`.
    pub(super) fn read_inventory(&mut self) -> Result<(), crate::inventory::InventoryError> {
        if let Some(path) = &self.inventory {
            let inventory = Inventory::load(path)?;
            *self.servers = inventory.server_addrs();
            self.metrics = inventory.metrics_urls();
            self.fleet_metrics = inventory.fleet_urls();
        }
        Ok(())
    }

    /// The run directory: `--out`, or `runs/SCENARIO-UNIXTIME`.
    pub(super) fn out_dir(&self, scenario: &Scenario) -> PathBuf {
        self.out.clone().unwrap_or_else(|| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            PathBuf::from("runs").join(format!("{}-{now}", scenario.name))
        })
    }
}

/// The search's time budget when the run is a search (`--find-max-rate`, or
/// a scenario with `[search]`): `--budget` first, then the scenario's.
pub(super) fn search_budget(scenario: &Scenario, opts: &CapacityOpts) -> Option<Duration> {
    if !opts.find_max_rate && scenario.search.is_none() {
        return None;
    }
    let from_scenario = scenario.search.as_ref().map(|s| s.budget);
    Some(
        opts.budget
            .or(from_scenario)
            .unwrap_or(crate::scenario::DEFAULT_SEARCH_BUDGET),
    )
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        opts: CapacityOpts,
    }

    fn budget(scenario: &str, args: &[&str]) -> Option<Duration> {
        let cli = Cli::parse_from(["capacity"].iter().chain(args));
        search_budget(&Scenario::load(scenario).unwrap(), &cli.opts)
    }

    #[test]
    fn variant_bin_takes_name_equals_dir_and_until_conclusive_bounds_its_rounds() {
        let cli = Cli::parse_from(["capacity", "--variant-bin", "new=/opt/b=1"]);
        assert_eq!(
            cli.opts.variant_bins,
            [("new".to_string(), PathBuf::from("/opt/b=1"))]
        );
        for bad in ["new", "=dir", "new="] {
            let err = Cli::try_parse_from(["capacity", "--variant-bin", bad])
                .err()
                .unwrap()
                .to_string();
            assert!(err.contains("NAME=DIR"), "{err}");
        }
        let max =
            |n: &str| Cli::try_parse_from(["capacity", "--until-conclusive", "--max-repeat", n]);
        assert_eq!(max("10").unwrap().opts.max_repeat, Some(10));
        assert!(max("2").is_err(), "below the first look");
        assert!(max("101").is_err());
        assert!(
            Cli::try_parse_from(["capacity", "--max-repeat", "5"]).is_err(),
            "needs --until-conclusive"
        );
    }

    #[test]
    fn trace_slowest_takes_0_to_1000_and_refuses_more() {
        let parse = |k: &str| Cli::try_parse_from(["capacity", "--trace-slowest", k]);
        assert_eq!(parse("0").unwrap().opts.trace_slowest, Some(0));
        assert_eq!(parse("1000").unwrap().opts.trace_slowest, Some(1000));
        let err = parse("1001").err().unwrap().to_string();
        assert!(
            err.contains("--trace-slowest") && err.contains("0..=1000"),
            "{err}"
        );
        assert!(parse("-1").is_err());
        assert_eq!(Cli::parse_from(["capacity"]).opts.trace_slowest, None);
    }

    #[test]
    fn a_search_runs_with_the_flag_or_the_scenarios_block_and_budget_comes_from_the_flag_first() {
        let min = |m: u64| Some(Duration::from_secs(60 * m));
        assert_eq!(budget("default", &[]), None);
        assert_eq!(budget("default", &["--find-max-rate"]), min(30));
        assert_eq!(
            budget("default", &["--find-max-rate", "--budget", "5m"]),
            min(5)
        );
        assert_eq!(budget("max-rate", &[]), min(30));
        assert_eq!(budget("max-rate", &["--budget", "12m"]), min(12));
    }
}
