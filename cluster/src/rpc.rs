//! The gRPC services one `--rpc` address serves: raft between servers, and the
//! public API.

use std::sync::Arc;

use serde::{de::DeserializeOwned, Serialize};
use stampede_proto::node_service_server::NodeService;
use stampede_proto::raft_service_server::RaftService;
use stampede_proto::{
    log_entry::Msg, ForwardRequest, LogEntry, Node, NodeGetReply, NodeGetRequest, NodeListReply,
    NodeListRequest, NodeRegisterEntry, NodeRegisterRequest, RaftPayload, WriteReply,
};
use tonic::{Request, Response, Status};

use crate::proposer::Proposer;
use crate::state::StateStore;
use crate::types::Raft;
use crate::validate;

/// Everything the request handlers share.
pub struct Shared {
    pub raft: Raft,
    pub proposer: Proposer,
    pub state: Arc<StateStore>,
}

impl Shared {
    fn applied_index(&self) -> u64 {
        self.raft
            .metrics()
            .borrow()
            .last_applied
            .map_or(0, |l| l.index)
    }
}

#[derive(Clone)]
pub struct RaftRpc(pub Arc<Shared>);

fn decode<T: DeserializeOwned>(req: Request<RaftPayload>) -> Result<T, Status> {
    bincode::deserialize(&req.into_inner().data).map_err(|e| {
        Status::invalid_argument(format!("data: not a raft message of this type: {e}"))
    })
}

fn encode<T: Serialize>(value: &T) -> Result<Response<RaftPayload>, Status> {
    let data = bincode::serialize(value).map_err(|e| Status::internal(e.to_string()))?;
    Ok(Response::new(RaftPayload { data }))
}

#[tonic::async_trait]
impl RaftService for RaftRpc {
    async fn append_entries(
        &self,
        req: Request<RaftPayload>,
    ) -> Result<Response<RaftPayload>, Status> {
        let rpc = decode(req)?;
        encode(&self.0.raft.append_entries(rpc).await)
    }

    async fn vote(&self, req: Request<RaftPayload>) -> Result<Response<RaftPayload>, Status> {
        let rpc = decode(req)?;
        encode(&self.0.raft.vote(rpc).await)
    }

    async fn install_snapshot(
        &self,
        req: Request<RaftPayload>,
    ) -> Result<Response<RaftPayload>, Status> {
        let rpc = decode(req)?;
        encode(&self.0.raft.install_snapshot(rpc).await)
    }

    /// A write a follower sent on. Proposed here only: a server that is not the
    /// leader any more answers `Unavailable` and the sender tries again.
    async fn forward(&self, req: Request<ForwardRequest>) -> Result<Response<WriteReply>, Status> {
        let entry = req
            .into_inner()
            .entry
            .ok_or_else(|| Status::invalid_argument("entry: is required"))?;
        if entry.msg.is_none() {
            return Err(Status::invalid_argument("entry.msg: is required"));
        }
        let index = self.0.proposer.write_local(entry).await?;
        Ok(Response::new(WriteReply { index }))
    }
}

#[derive(Clone)]
pub struct NodeApi(pub Arc<Shared>);

#[tonic::async_trait]
impl NodeService for NodeApi {
    async fn register(
        &self,
        req: Request<NodeRegisterRequest>,
    ) -> Result<Response<WriteReply>, Status> {
        let req = req.into_inner();
        let node = validate::node(req.node.as_ref())?.clone();
        let entry = LogEntry {
            msg: Some(Msg::NodeRegister(NodeRegisterEntry {
                node: Some(Node {
                    create_index: 0,
                    modify_index: 0,
                    ..node
                }),
            })),
        };
        let index = self.0.proposer.write(entry).await?;
        Ok(Response::new(WriteReply { index }))
    }

    async fn get(&self, req: Request<NodeGetRequest>) -> Result<Response<NodeGetReply>, Status> {
        let id = req.into_inner().node_id;
        validate::id("node_id", &id)?;
        let index = self.0.applied_index();
        match self.0.state.snapshot().node(&id) {
            Some(node) => Ok(Response::new(NodeGetReply {
                node: Some(Node::clone(&node)),
                index,
            })),
            None => Err(Status::not_found(format!(
                "node_id: no node {id:?} is registered"
            ))),
        }
    }

    async fn list(
        &self,
        _req: Request<NodeListRequest>,
    ) -> Result<Response<NodeListReply>, Status> {
        let index = self.0.applied_index();
        let state = self.0.state.snapshot();
        Ok(Response::new(NodeListReply {
            nodes: state.nodes().map(|n| Node::clone(n)).collect(),
            index,
        }))
    }
}
