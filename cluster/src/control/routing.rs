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
use std::time::Duration;

use prometheus::{IntGauge, Registry};
use stampede_proto::metric_defs::int_gauge;
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
    /// The longest a leader-only call waits, on a server in touch that
    /// knows no leader yet (an election) or was just elected (restoring its
    /// broker), for the call to have somewhere to go, as Nomad's servers
    /// hold an RPC through an election (`rpc_hold_timeout`). Refused at
    /// once, the call came back after its caller's backoff. The contact
    /// lease: a server without a leader for longer is out of touch, and
    /// refuses at once (its callers go elsewhere).
    hold: Duration,
    /// Calls held now.
    held: IntGauge,
}

impl Router {
    pub fn new(
        raft: Raft,
        channels: PeerChannels,
        leading: watch::Receiver<bool>,
        contact: Contact,
        hold: Duration,
        registry: &Registry,
    ) -> Self {
        Self {
            raft,
            channels,
            leading,
            contact,
            hold,
            held: int_gauge(
                registry,
                "stampede_leader_calls_held",
                "Leader-only calls held here until a leader is elected or ready (at most the contact lease).",
            ),
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

    /// [`Router::route`], holding the call while it has nowhere to go yet:
    /// an election on, or this server just elected and not ready, while
    /// it is in touch, for up to the contact lease.
    pub async fn route_held(&self, forwarded: bool) -> Result<Route, ControlError> {
        let deadline = tokio::time::Instant::now() + self.hold;
        loop {
            let seen = self.raft.server_metrics().borrow().current_leader;
            let route = self.route(forwarded);
            let electing = matches!(
                leader_view(&self.raft),
                LeaderView::Unknown | LeaderView::Here
            ) && !self.is_leading()
                && self.contact.lost().is_none();
            if route.is_ok() || !electing {
                return route;
            }
            let mut metrics = self.raft.server_metrics();
            let mut leading = self.leading.clone();
            let _held = Held::new(&self.held);
            let moved = tokio::select! {
                r = metrics.wait_for(|m| m.current_leader != seen) => r.is_ok(),
                r = leading.wait_for(|&l| l) => r.is_ok(),
                _ = self.contact.until_lost() => false,
                _ = tokio::time::sleep_until(deadline) => false,
            };
            if !moved {
                return self.route(forwarded);
            }
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

/// One call counted on the held gauge while it lives: a call whose caller
/// went away is dropped mid-wait, and must not stay counted.
struct Held<'a>(&'a IntGauge);

impl<'a> Held<'a> {
    fn new(gauge: &'a IntGauge) -> Self {
        gauge.inc();
        Self(gauge)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.dec();
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
