//! Where a call that only the leader can answer goes: handled here when this
//! server leads, otherwise sent on to the leader, once. A forwarded call that
//! finds no leader here is refused rather than sent on again, so a call
//! never loops between servers during an election.
//! The clients a call is sent on with are made here too, for the leader-only
//! calls and the client-update relay alike.

use stampede_proto::eval_service_client::EvalServiceClient;
use stampede_proto::node_service_client::NodeServiceClient;
use stampede_proto::plan_service_client::PlanServiceClient;
use std::future::Future;

use tokio::sync::watch;
use tonic::transport::Channel;
use tonic::Request;

use crate::control::error::ControlError;
use crate::raft::{leader_replaced, leader_view, LeaderView, NodeId, PeerChannels, Raft};
use crate::state::contact::Contact;

/// gRPC metadata marking a call one server sent on to the leader.
pub const FORWARDED: &str = "x-stampede-forwarded";

/// Where a leader-only call goes.
pub enum Route {
    Local,
    Leader(Forward),
}

/// A call on its way to the leader, server `id`.
pub struct Forward {
    pub id: NodeId,
    ch: Channel,
    /// This server's raft, to notice the leader replaced.
    raft: Raft,
}

impl Forward {
    /// Makes the call on the leader's channel and waits for its answer,
    /// or until this server learns that another leads: a leader that was
    /// paused or cut off never answers, and the caller (a worker, a node)
    /// would otherwise wait on it long after its successor was elected.
    /// The call may have taken effect then, so the answer is `Unavailable`.
    pub async fn call<T>(
        &self,
        answer: impl Future<Output = Result<T, tonic::Status>>,
    ) -> Result<T, ControlError> {
        let id = self.id;
        tokio::select! {
            biased;
            answer = answer => Ok(answer?),
            _ = leader_replaced(&self.raft, id) => Err(ControlError::Unavailable(format!(
                "leader {id} was replaced while it held this call (it may have taken effect); retry"
            ))),
        }
    }

    /// The leader's channel, for the call.
    pub fn channel(&self) -> Channel {
        self.ch.clone()
    }
}

/// Decides routes from raft's view of the leader and this server's own
/// "leading" flag (set once its leader-only parts are running).
#[derive(Clone)]
pub struct Router {
    /// Read for the current leader and its address.
    raft: Raft,
    /// Channels to peers, shared with raft replication.
    channels: PeerChannels,
    /// True while this server leads and its leader-only parts run.
    leading: watch::Receiver<bool>,
    /// Whether this server is in touch with the cluster: a leader out of
    /// touch answers no leader-only call.
    contact: Contact,
}

impl Router {
    pub fn new(
        raft: Raft,
        channels: PeerChannels,
        leading: watch::Receiver<bool>,
        contact: Contact,
    ) -> Self {
        Self {
            raft,
            channels,
            leading,
            contact,
        }
    }

    pub fn is_leading(&self) -> bool {
        *self.leading.borrow()
    }

    /// Resolves when raft's view of the leader, or this server's leading
    /// flag, differs from what it is now; never if neither can change any
    /// more (the server is shutting down).
    pub async fn leadership_moved(&self) {
        let mut metrics = self.raft.server_metrics();
        let mut leading = self.leading.clone();
        let leader = metrics.borrow_and_update().current_leader;
        let lead = *leading.borrow_and_update();
        let moved = tokio::select! {
            r = metrics.wait_for(|m| m.current_leader != leader) => r.is_ok(),
            r = leading.wait_for(|&l| l != lead) => r.is_ok(),
        };
        if !moved {
            std::future::pending::<()>().await;
        }
    }

    /// Decides where a leader-only call goes; `forwarded` says whether
    /// another server already sent it here.
    pub fn route(&self, forwarded: bool) -> Result<Route, ControlError> {
        if self.is_leading() {
            if let Some(why) = self.contact.lost() {
                return Err(ControlError::Unavailable(format!(
                    "{why}; try another server"
                )));
            }
            return Ok(Route::Local);
        }
        match leader_view(&self.raft) {
            LeaderView::Unknown => Err(ControlError::Unavailable(
                "no raft leader is elected yet; retry shortly".into(),
            )),
            LeaderView::Here => Err(ControlError::Unavailable(
                "this server was just elected and is restoring its eval broker; retry shortly"
                    .into(),
            )),
            LeaderView::Unlisted(l) => Err(ControlError::Unavailable(format!(
                "leader {l} is not in the membership"
            ))),
            LeaderView::Elsewhere { id, addr } => {
                if forwarded {
                    return Err(ControlError::NotLeader { id, addr });
                }
                Ok(Route::Leader(Forward {
                    id,
                    ch: self.channels.get(id, &addr),
                    raft: self.raft.clone(),
                }))
            }
        }
    }
}

/// Marks a request as already forwarded once.
pub fn forwarded<T>(msg: T) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut()
        .insert(FORWARDED, tonic::metadata::MetadataValue::from_static("1"));
    r
}

pub fn is_forwarded<T>(req: &Request<T>) -> bool {
    req.metadata().contains_key(FORWARDED)
}

/// Clients for the leader's services, with the message size limits every
/// stampede client has.
pub(super) fn eval_client(ch: Channel) -> EvalServiceClient<Channel> {
    stampede_proto::sized!(EvalServiceClient::new(ch))
}

pub(super) fn plan_client(ch: Channel) -> PlanServiceClient<Channel> {
    stampede_proto::sized!(PlanServiceClient::new(ch))
}

pub(super) fn node_client(ch: Channel) -> NodeServiceClient<Channel> {
    stampede_proto::sized!(NodeServiceClient::new(ch))
}
