//! Errors a server meets on start-up, each saying what to do about it.

use std::path::PathBuf;

use crate::types::NodeId;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the raft store in {path}: {source}; if the data dir is corrupt, move it aside and let this server catch up from the others")]
    Open {
        path: PathBuf,
        source: rocksdb::Error,
    },
    #[error("corrupt {what} in {path}: {detail}")]
    Corrupt {
        path: PathBuf,
        what: &'static str,
        detail: String,
    },
    #[error("data dir {path} belongs to server {found}, not server {expected}: give each server its own --data-dir")]
    OtherServer {
        path: PathBuf,
        found: NodeId,
        expected: NodeId,
    },
    #[error(
        "data dir {path} belongs to a cluster of servers {found:?}, but --peers lists {expected:?}"
    )]
    OtherCluster {
        path: PathBuf,
        found: Vec<NodeId>,
        expected: Vec<NodeId>,
    },
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
}

/// Why a server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("invalid raft configuration: {0}")]
    RaftConfig(String),
    #[error("raft failed to start: {0}")]
    Raft(String),
    #[error("gRPC server failed: {0}")]
    Grpc(#[from] tonic::transport::Error),
    #[error("HTTP server failed: {0}")]
    Http(std::io::Error),
}
