//! Why a capacity run could not start or go on.

use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum CapacityError {
    #[error(transparent)]
    Scenario(#[from] crate::scenario::ScenarioError),
    #[error("{0}")]
    Launch(#[from] stampede_launch::LaunchError),
    #[error(transparent)]
    Security(#[from] stampede_proto::security::SecurityError),
    #[error("--find-max-rate: scenario {0} has no [slo] (p99_placement_ms or p99_running_ms) to search against")]
    SearchNeedsSlo(String),
    #[error("cannot write {0}: {1}")]
    Write(PathBuf, std::io::Error),
    #[error("cannot start nodesim ({0}): {1}")]
    Nodesim(PathBuf, std::io::Error),
    #[error("--servers: {0}")]
    Client(#[from] stampede_proto::client::ClientError),
    #[error("the fleet is not ready: {0}")]
    FleetNotReady(String),
    #[error("--servers needs --metrics, the /metrics URL of every process to sample")]
    NoMetrics,
    #[error("--baseline {0}: {1}")]
    Baseline(PathBuf, String),
    #[error("--serve-metrics {0}: {1}")]
    ServeMetrics(SocketAddr, std::io::Error),
    #[error("--sample-every must be at least 100ms")]
    SampleEvery,
    #[error("scenario {0} has [[faults]], which kill, pause and partition servers loadgen started itself; with --servers it drives a cluster it did not start: run it without --servers")]
    FaultsNeedLocal(String),
    #[error("--variant-bin {0}: the scenario has no such variant (it has {1})")]
    NoVariant(String, String),
    #[error("variant {variant}: {path}: {why}")]
    VariantBin {
        variant: String,
        path: PathBuf,
        why: String,
    },
    #[error("variant {variant}: git_rev {rev}: {why}")]
    GitRev {
        variant: String,
        rev: String,
        why: String,
    },
    #[error("variant {0} names its own binaries (bin_dir, git_rev, --variant-bin), which only a cluster loadgen starts runs: run it without --servers")]
    BinariesNeedLocal(String),
    #[error("--until-conclusive: scenario {0} is a search ([search]), which picks its own probes; it adds rounds to the variants of a plain run")]
    SearchNotSequential(String),
    #[error("--gate {0}: no such measure (one of: {names})", names = crate::summary::measures::names())]
    UnknownGate(String),
    #[error("--until-conclusive compares every variant with the first: scenario {0} has only one (add [[variants]])")]
    NothingToCompare(String),
    #[error("scenario {0} is a search ([search]): each probe starts a cluster of its own, so it cannot run against --servers")]
    SearchNeedsLocal(String),
}
