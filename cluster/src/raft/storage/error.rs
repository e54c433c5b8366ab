//! Errors of the raft stores on disk, each saying what to do about it.

use std::path::PathBuf;

use crate::raft::NodeId;

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
