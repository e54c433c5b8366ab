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
    #[error("scenario {0} is a search ([search]): each probe starts a cluster of its own, so it cannot run against --servers")]
    SearchNeedsLocal(String),
}
