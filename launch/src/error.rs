//! Why a cluster could not be started, reached or changed.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::server::NodeId;

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("cannot prepare {0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("cannot start {bin}: {source}")]
    Spawn {
        bin: PathBuf,
        source: std::io::Error,
    },
    #[error("no `{name}` binary beside {near:?}: build it first (cargo build -p {name})")]
    MissingBin { name: String, near: PathBuf },
    #[error("no server with id {0} in this cluster")]
    UnknownServer(NodeId),
    #[error("server {0} is not running")]
    NotRunning(NodeId),
    #[error("this cluster was started without peer links (LocalCluster::start_with_links), so it cannot be partitioned")]
    NoLinks,
    #[error(
        "{0} has no `serve --peer-via` option, which peer links (partitions) need: rebuild it"
    )]
    NoPeerVia(PathBuf),
    #[error("server {id} at {addr}: {detail}")]
    Http {
        id: NodeId,
        addr: SocketAddr,
        detail: String,
    },
    #[error("cannot create the cluster's TLS files in {dir}: {detail}")]
    Tls { dir: PathBuf, detail: String },
    #[error("timed out after {after:?} waiting until {what}{}", last.as_ref().map(|l| format!(" (last seen: {l})")).unwrap_or_default())]
    Timeout {
        what: String,
        after: Duration,
        last: Option<String>,
    },
}
