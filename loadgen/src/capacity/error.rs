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
    #[error("--address: {0}")]
    Client(#[from] stampede_proto::client::ClientError),
    #[error("the fleet is not ready: {0}")]
    FleetNotReady(String),
    #[error("{0}; a cluster loadgen did not start is sampled through --metrics (the /metrics URL of every process) or --inventory")]
    NoMetrics(AddressSource),
    #[error("{what} cannot run while {from}")]
    NeedsNoAddress { what: String, from: AddressSource },
    #[error("--baseline {0}: {1}")]
    Baseline(PathBuf, String),
    #[error("--serve-metrics {0}: {1}")]
    ServeMetrics(SocketAddr, std::io::Error),
    #[error("--sample-every must be at least 100ms")]
    SampleEvery,
    #[error("scenario {0} has [[faults]], which kill, pause and partition servers loadgen started itself, but {1}")]
    FaultsNeedLocal(String, AddressSource),
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
    #[error("variant {0} names its own binaries (bin_dir, git_rev, --variant-bin), which only a cluster loadgen starts runs, but {1}")]
    BinariesNeedLocal(String, AddressSource),
    #[error("--until-conclusive: scenario {0} is a search ([search]), which picks its own probes; it adds rounds to the variants of a plain run")]
    SearchNotSequential(String),
    #[error("--gate {0}: no such measure (one of: {names})", names = crate::summary::measures::names())]
    UnknownGate(String),
    #[error("--until-conclusive compares every variant with the first: scenario {0} has only one (add [[variants]])")]
    NothingToCompare(String),
    #[error(
        "scenario {0} is a search ([search]): each probe starts a cluster of its own, but {1}"
    )]
    SearchNeedsLocal(String, AddressSource),
}

/// Where the addresses of a cluster to drive came from (`--address`, or
/// an exported STAMPEDE_ADDRESS), as a refusal names them: a run that
/// needs servers of its own says which to drop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressSource {
    pub from_env: bool,
    pub addresses: String,
}

impl std::fmt::Display for AddressSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use stampede_proto::address::ADDRESS_ENV;
        let addresses = &self.addresses;
        match self.from_env {
            true => write!(
                f,
                "{ADDRESS_ENV} names a cluster to drive ({addresses}, exported; unset it for a cluster loadgen starts)"
            ),
            false => write!(
                f,
                "--address names a cluster to drive ({addresses}; run without --address for a cluster loadgen starts)"
            ),
        }
    }
}
