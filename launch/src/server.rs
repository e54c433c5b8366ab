//! One server of a local cluster: its raft id, and the process and the
//! places (ports, data dir, log) that are its.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Child;

/// A server's raft id.
pub type NodeId = u64;

/// One server process and where it lives.
#[derive(Debug)]
pub struct ServerProc {
    pub id: NodeId,
    pub rpc: SocketAddr,
    pub http: SocketAddr,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    pub(crate) child: Option<Child>,
    /// Stopped with SIGSTOP and not yet continued.
    pub(crate) paused: bool,
    /// RLIMIT_NOFILE (soft and hard) for its next start, if not inherited.
    pub(crate) nofile: Option<u64>,
}
