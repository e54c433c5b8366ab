//! The edge of the server: the gRPC services on `--rpc` and HTTP on
//! `--http`. Handlers check the request, call the part that answers it, and
//! turn that part's error into a `tonic::Status` here, and nowhere deeper:
//! a caller's mistake is `InvalidArgument`, `NotFound` or
//! `FailedPrecondition`; a moving leader is `Unavailable`, with the leader's
//! address when known.
//!
//! - `public`: jobs, nodes and deployments (any client).
//! - `scheduling`: evaluations and plans (workers, server to server).
//! - `peer`: raft and forwarded writes (server to server only).
//! - [`http`]: `/metrics`, `/v1/status` and the worker admin calls.
//! - `conn`: an accepted connection, its TLS handshake and who called.
//! - [`limits`]: the connection caps, timeouts and message sizes of the edge,
//!   and the descriptors kept for raft's storage (docs/security.md, "Limits").
//! - `call_stream`: the server's half of a stream of ticketed calls (for
//!   `ForwardStream` and a node agent's `CallStream`).
//! - `auth`: who may call what (certificate role and token scope per gRPC
//!   method and HTTP route, one table), checked by a tower layer and an
//!   axum middleware before any handler.

mod auth;
mod call_stream;
mod conn;
pub mod http;
pub mod limits;
mod peer;
mod public;
mod scheduling;

pub use self::auth::{http_auth, GrpcAuthLayer, Guard};
pub use self::conn::{Conn, ConnTimeouts, PeerInfo, ServerTls, TlsSetupError};
pub use self::limits::{ConnLimiter, ConnRefused, EdgeLimits, Port};
pub use self::peer::PeerApi;

use std::sync::Arc;
use std::time::Duration;

use stampede_proto::QueryOptions;
use tonic::{Response, Status};

use crate::control::leader::broker::BrokerError;
use crate::control::{ControlError, LeaderCalls};
use crate::model::identity::NodeDenied;
use crate::model::validate::InvalidField;
use crate::raft::client_write::{ClientWrite, Refused, Written};
use crate::raft::{ProposeError, Proposer};
use crate::state::blocking::{Blocking, Look};
use crate::state::parking::{ParkRefused, Parker};
use crate::state::{State, StateStore, WatchKey};

/// gRPC metadata key carrying the leader's address on `Unavailable` answers.
pub const LEADER_HEADER: &str = "x-stampede-leader";

/// How long a write's answer waits for this server to apply it.
const READ_YOUR_WRITES_WAIT: Duration = Duration::from_secs(5);

type Reply<T> = Result<Response<T>, Status>;

/// What the public and scheduling services may touch. Cheap to clone.
#[derive(Clone)]
pub struct Api {
    /// This server's state, for reads.
    pub store: Arc<StateStore>,
    pub blocking: Blocking,
    /// Writes through whichever server leads.
    pub proposer: Proposer,
    /// Leader-only calls, routed.
    pub calls: LeaderCalls,
}

impl Api {
    /// Commits a client's write through the leader, then waits (briefly)
    /// until this server has applied it too, so a client reads its own
    /// writes here.
    async fn write(&self, write: ClientWrite) -> Result<Written, ProposeError> {
        let written = self.proposer.write(write).await?;
        self.store
            .wait_for_index(written.index, READ_YOUR_WRITES_WAIT)
            .await;
        Ok(written)
    }

    /// A caller's blocking query (on a copy of the state), parked only
    /// within `parker`'s bounds.
    async fn query<T>(
        &self,
        parker: &Parker,
        opts: Option<&QueryOptions>,
        key: WatchKey,
        index: impl Fn(&State) -> u64,
        answer: impl Fn(&State) -> T,
    ) -> Result<(T, u64), Status> {
        let answer = self
            .blocking
            .query_for(parker, Look::Copy, opts, key, index, answer);
        Ok(answer.await?)
    }
}

/// Who a caller's parked query counts against: its connection.
fn parker_of<T>(req: &tonic::Request<T>) -> Parker {
    Parker::Connection(
        req.extensions()
            .get::<conn::PeerInfo>()
            .and_then(|p| p.addr),
    )
}

impl From<ParkRefused> for Status {
    fn from(e: ParkRefused) -> Self {
        match e {
            ParkRefused::Over(_) => Status::resource_exhausted(e.to_string()),
            ParkRefused::OutOfTouch(_) => Status::unavailable(e.to_string()),
        }
    }
}

/// `Unavailable`, with the leader's address for a client that wants to go
/// there directly.
fn unavailable_at(message: String, leader_addr: &str) -> Status {
    let mut status = Status::unavailable(message);
    if let Ok(v) = leader_addr.parse() {
        status.metadata_mut().insert(LEADER_HEADER, v);
    }
    status
}

impl From<InvalidField> for Status {
    fn from(e: InvalidField) -> Self {
        Status::invalid_argument(e.to_string())
    }
}

impl From<Refused> for Status {
    fn from(e: Refused) -> Self {
        match e {
            Refused::Invalid(e) => e.into(),
            Refused::NotFound(m) => Status::not_found(m),
            Refused::Denied(e) => e.into(),
            Refused::Exhausted(m) => Status::resource_exhausted(m),
        }
    }
}

/// A node call that is not the node's own: `PermissionDenied`. A node
/// registered before node identity is `NotFound`, as a node not registered
/// is, so that its agent registers it again (and gives it a secret).
impl From<NodeDenied> for Status {
    fn from(e: NodeDenied) -> Self {
        match e {
            NodeDenied::NoSecret(_) => Status::not_found(e.to_string()),
            NodeDenied::Mismatch(_) | NodeDenied::Unvouched { .. } => {
                Status::permission_denied(e.to_string())
            }
        }
    }
}

impl From<BrokerError> for Status {
    fn from(e: BrokerError) -> Self {
        match e {
            BrokerError::Disabled => Status::unavailable(e.to_string()),
            BrokerError::NotOutstanding(_) | BrokerError::TokenMismatch(_) => {
                Status::failed_precondition(e.to_string())
            }
        }
    }
}

impl From<ProposeError> for Status {
    fn from(e: ProposeError) -> Self {
        match e {
            ProposeError::Rejected(status) => *status,
            ProposeError::NotLeader { ref addr, .. }
            | ProposeError::LeaderUnreachable { ref addr, .. } => {
                unavailable_at(e.to_string(), addr)
            }
            ProposeError::NoLeader
            | ProposeError::NotCommitted(_)
            | ProposeError::ShuttingDown
            | ProposeError::OutOfTouch(_)
            | ProposeError::InDoubt { .. } => Status::unavailable(e.to_string()),
            ProposeError::Raft(_) => Status::internal(e.to_string()),
            ProposeError::Refused(e) => e.into(),
        }
    }
}

impl From<ControlError> for Status {
    fn from(e: ControlError) -> Self {
        match e {
            ControlError::Invalid(m) => Status::invalid_argument(m),
            ControlError::TooLarge(m) => Status::resource_exhausted(m),
            ControlError::NotFound(m) => Status::not_found(m),
            ControlError::Denied(e) => e.into(),
            ControlError::Unavailable(m) => Status::unavailable(m),
            ControlError::NotLeader { ref addr, .. } => unavailable_at(e.to_string(), addr),
            ControlError::Broker(e) => e.into(),
            ControlError::Propose(e) => e.into(),
            ControlError::Leader(status) => *status,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_nodes_call_is_denied_and_a_node_without_a_secret_registers_again() {
        let code = |e: NodeDenied| Status::from(e).code();
        assert_eq!(
            code(NodeDenied::Mismatch("n1".into())),
            tonic::Code::PermissionDenied
        );
        let unvouched = NodeDenied::Unvouched {
            index: 0,
            node: "n1".into(),
        };
        assert_eq!(code(unvouched), tonic::Code::PermissionDenied);
        // nodesim registers a node again on NotFound.
        assert_eq!(
            code(NodeDenied::NoSecret("n1".into())),
            tonic::Code::NotFound
        );
    }
}
