//! Why a server could not start or stopped, each saying what to do about it.

use crate::raft::StoreError;

/// Why a server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Security(String),
    #[error(transparent)]
    Tls(#[from] crate::api::TlsSetupError),
    #[error("invalid raft configuration: {0}")]
    RaftConfig(String),
    #[error("cannot start raft's threads: {0}")]
    RaftRuntime(std::io::Error),
    #[error("raft failed to start: {0}")]
    Raft(String),
    #[error("gRPC server failed: {0}")]
    Grpc(#[from] tonic::transport::Error),
    #[error("HTTP server failed: {0}")]
    Http(std::io::Error),
}
