//! Writes: propose a command to raft on the leader, or send it on to the
//! leader from a follower, so a client may write through any server.

use std::time::{Duration, Instant};

use openraft::error::{ClientWriteError, RaftError};
use stampede_proto::{ForwardRequest, LogEntry};
use tonic::Status;

use crate::metrics::Metrics;
use crate::network::PeerChannels;
use crate::types::{Command, NodeId, Raft};
use std::sync::Arc;

/// gRPC metadata key carrying the leader's address on `Unavailable` answers.
pub const LEADER_HEADER: &str = "x-stampede-leader";

/// Pause between attempts while leadership moves.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

#[derive(Debug, thiserror::Error)]
pub enum ProposeError {
    #[error("no raft leader is elected yet; retry shortly")]
    NoLeader,
    #[error("this server is not the leader; the leader is server {id} at {addr}")]
    NotLeader { id: NodeId, addr: String },
    #[error("the leader, server {id} at {addr}, did not take the write: {detail}")]
    LeaderUnreachable {
        id: NodeId,
        addr: String,
        detail: String,
    },
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error("{0}")]
    Rejected(Status),
}

impl From<ProposeError> for Status {
    fn from(e: ProposeError) -> Self {
        match e {
            ProposeError::Rejected(status) => status,
            ProposeError::NotLeader { ref addr, .. }
            | ProposeError::LeaderUnreachable { ref addr, .. } => {
                let mut status = Status::unavailable(e.to_string());
                if let Ok(v) = addr.parse() {
                    status.metadata_mut().insert(LEADER_HEADER, v);
                }
                status
            }
            ProposeError::NoLeader | ProposeError::ShuttingDown => {
                Status::unavailable(e.to_string())
            }
        }
    }
}

pub struct Proposer {
    raft: Raft,
    channels: PeerChannels,
    metrics: Arc<Metrics>,
    /// How long a write may wait for a leader before it is refused.
    leader_wait: Duration,
}

impl Proposer {
    pub fn new(
        raft: Raft,
        channels: PeerChannels,
        metrics: Arc<Metrics>,
        leader_wait: Duration,
    ) -> Self {
        Self {
            raft,
            channels,
            metrics,
            leader_wait,
        }
    }

    /// Commits `entry` through whichever server leads, waiting out an election,
    /// and returns the raft index at which it was applied.
    pub async fn write(&self, entry: LogEntry) -> Result<u64, ProposeError> {
        let deadline = Instant::now() + self.leader_wait;
        loop {
            let err = match self.write_local(entry.clone()).await {
                Ok(index) => return Ok(index),
                Err(ProposeError::NotLeader { id, addr }) => {
                    match self.forward(id, &addr, entry.clone()).await {
                        Ok(index) => return Ok(index),
                        Err(e) => e,
                    }
                }
                Err(e) => e,
            };
            let retry = matches!(
                err,
                ProposeError::NoLeader
                    | ProposeError::LeaderUnreachable { .. }
                    | ProposeError::NotLeader { .. }
            );
            let now = Instant::now();
            if !retry || now >= deadline {
                return Err(err);
            }
            if matches!(err, ProposeError::NoLeader) {
                // Wake as soon as a leader is known rather than polling.
                let _ = self
                    .raft
                    .wait(Some(deadline - now))
                    .metrics(|m| m.current_leader.is_some(), "a leader is elected")
                    .await;
            } else {
                tokio::time::sleep(RETRY_PAUSE.min(deadline - now)).await;
            }
        }
    }

    /// Proposes on this server; fails with `NotLeader` on a follower.
    pub async fn write_local(&self, entry: LogEntry) -> Result<u64, ProposeError> {
        let start = Instant::now();
        match self.raft.client_write(Command(entry)).await {
            Ok(resp) => {
                self.metrics
                    .raft_apply_seconds
                    .observe(start.elapsed().as_secs_f64());
                Ok(resp.log_id.index)
            }
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                match (f.leader_id, f.leader_node) {
                    (Some(id), Some(node)) => Err(ProposeError::NotLeader {
                        id,
                        addr: node.addr,
                    }),
                    _ => Err(ProposeError::NoLeader),
                }
            }
            Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e))) => {
                Err(ProposeError::Rejected(Status::internal(e.to_string())))
            }
            Err(RaftError::Fatal(_)) => Err(ProposeError::ShuttingDown),
        }
    }

    async fn forward(&self, id: NodeId, addr: &str, entry: LogEntry) -> Result<u64, ProposeError> {
        self.metrics.writes_forwarded.inc();
        let mut client = self.channels.raft_client(id, addr);
        match client.forward(ForwardRequest { entry: Some(entry) }).await {
            Ok(reply) => Ok(reply.into_inner().index),
            Err(status) if status.code() == tonic::Code::Unavailable => {
                Err(ProposeError::LeaderUnreachable {
                    id,
                    addr: addr.to_string(),
                    detail: status.message().to_string(),
                })
            }
            Err(status) => Err(ProposeError::Rejected(status)),
        }
    }
}
