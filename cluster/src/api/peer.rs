//! The raft service between servers: openraft's AppendEntries, Vote and
//! InstallSnapshot, carried as bincode in `RaftPayload`, and writes a
//! follower forwards to the leader. Its own file, because only servers may
//! call it.

use serde::{de::DeserializeOwned, Serialize};
use stampede_proto::raft_service_server::RaftService;
use stampede_proto::{ForwardRequest, RaftPayload, WriteReply};
use tonic::{Request, Response, Status};

use super::Reply;
use crate::raft::metrics::Metrics;
use crate::raft::proposer::Proposer;
use crate::raft::Raft;

/// What the peer service may touch: raft itself, and the proposer for
/// forwarded writes.
#[derive(Clone)]
pub struct PeerApi {
    pub raft: Raft,
    pub proposer: Proposer,
    pub metrics: std::sync::Arc<Metrics>,
}

/// A payload that is not the raft message its call expects.
#[derive(Debug, thiserror::Error)]
#[error("data: not a raft message of this type: {0}")]
struct BadPayload(bincode::Error);

impl From<BadPayload> for Status {
    fn from(e: BadPayload) -> Self {
        Status::invalid_argument(e.to_string())
    }
}

fn decode<T: DeserializeOwned>(req: Request<RaftPayload>) -> Result<T, BadPayload> {
    bincode::deserialize(&req.into_inner().data).map_err(BadPayload)
}

/// Raft's answer that could not be encoded: our own types always encode, so
/// this would be a bug here, hence `Internal`.
#[derive(Debug, thiserror::Error)]
#[error("encoding a raft answer: {0}")]
struct EncodeFailed(bincode::Error);

impl From<EncodeFailed> for Status {
    fn from(e: EncodeFailed) -> Self {
        Status::internal(e.to_string())
    }
}

fn encode<T: Serialize>(value: &T) -> Result<Response<RaftPayload>, EncodeFailed> {
    let data = bincode::serialize(value).map_err(EncodeFailed)?;
    Ok(Response::new(RaftPayload { data }))
}

#[tonic::async_trait]
impl RaftService for PeerApi {
    async fn append_entries(&self, req: Request<RaftPayload>) -> Reply<RaftPayload> {
        let rpc = decode(req)?;
        let start = std::time::Instant::now();
        let answer = self.raft.append_entries(rpc).await;
        self.metrics
            .append_handle_seconds
            .observe(start.elapsed().as_secs_f64());
        Ok(encode(&answer)?)
    }

    async fn vote(&self, req: Request<RaftPayload>) -> Reply<RaftPayload> {
        let rpc = decode(req)?;
        Ok(encode(&self.raft.vote(rpc).await)?)
    }

    async fn install_snapshot(&self, req: Request<RaftPayload>) -> Reply<RaftPayload> {
        let rpc = decode(req)?;
        Ok(encode(&self.raft.install_snapshot(rpc).await)?)
    }

    /// A write a follower sent on. Proposed here only: a server that is not the
    /// leader any more answers `Unavailable` and the sender tries again.
    async fn forward(&self, req: Request<ForwardRequest>) -> Reply<WriteReply> {
        let entry = req
            .into_inner()
            .entry
            .ok_or_else(|| Status::invalid_argument("entry: is required"))?;
        if entry.msg.is_none() {
            return Err(Status::invalid_argument("entry.msg: is required"));
        }
        let index = self.proposer.write_local(entry).await?;
        Ok(Response::new(WriteReply { index }))
    }
}
