//! The control plane one server runs, as a composition root: it builds the
//! parts, hands each the narrow handles it needs, and follows raft
//! leadership to start and stop the leader-only mechanisms.
//!
//! Its files, each using only those listed above it:
//!
//! - `plan_split`: a plan cut into pieces raft can carry (pure): the
//!   workers on every server cut their own plans, and a call refuses a plan
//!   over the hard limit, so it lives here and not in the leader's room.
//! - [`leader`]: the leader-only mechanisms, each run per term with a
//!   [`leader::LeaderContext`]; `error`: the control plane's errors.
//! - `apply`: what reacts to every applied batch (blocking queries, and on
//!   the leader the broker, blocked evaluations and heartbeat timers).
//! - `routing`: where a call only the leader can answer goes (here, or on
//!   to the leader); `update_relay` sends a follower's client updates on
//!   together.
//! - `worker`: scheduler workers, on every server, reaching the leader
//!   only through the `worker::Leader` trait.
//! - `calls`: the leader-only calls, handled here or sent on to the leader
//!   (`LeaderCalls`, which is the workers' `Leader` on a server).
//! - `fleet`: the leader's gauges of nodes and allocations.

mod apply;
mod calls;
mod error;
mod fleet;
pub mod leader;
mod plan_split;
mod routing;
mod update_relay;
mod worker;

pub use self::calls::LeaderCalls;
pub use self::error::ControlError;
pub use self::fleet::FleetGauges;
pub use self::plan_split::PlanBudget;
pub use self::routing::is_forwarded;
pub use self::worker::{WorkerConfig, WorkerPool, WorkerStatus, MAX_WORKERS};

use std::sync::Arc;

use prometheus::Registry;
use tokio::sync::watch;

use self::apply::ApplyHub;
use self::leader::{LeaderConfig, LeaderContext, LeaderParts};
use self::routing::Router;
use crate::raft::{LocalProposer, PeerChannels, Proposer};
use crate::raft::{NodeId, Raft};
use crate::state::blocking::{Blocking, BlockingMetrics, Watchers};
use crate::state::contact::{Contact, Touch};
use crate::state::parking::{ParkLimits, Parking};
use crate::state::StateStore;

/// Control-plane settings (`cluster serve` flags fill them).
#[derive(Debug, Clone)]
pub struct ControlConfig {
    pub leader: LeaderConfig,
    pub worker: WorkerConfig,
    /// Scheduler workers on this server at start.
    pub workers: usize,
    /// How many blocking queries callers may park here.
    pub parking: ParkLimits,
    /// Whether jobs' paths are stamped and timed (`--job-times`).
    pub job_times: bool,
    /// The longest a leader-only call is held here through an election
    /// (`routing::Router::route_held`): the contact lease, past which a
    /// server without a leader is out of touch anyway.
    pub leader_hold: std::time::Duration,
}

/// The parts that exist before raft does: the state machine's observer
/// needs the leader-only mechanisms it feeds.
pub struct Foundations {
    /// The state the state machine applies to.
    pub store: Arc<StateStore>,
    /// The leader-only mechanisms, which the hub feeds while they are on.
    pub leader: Arc<LeaderParts>,
    /// The state machine's observer: what each applied batch wakes.
    pub hub: Arc<ApplyHub>,
    /// Whether this server is in touch with the cluster (kept by
    /// `raft::contact::follow` once raft runs).
    pub contact: Contact,
}

impl Foundations {
    pub fn new(config: &ControlConfig, registry: &Registry, contact: Contact) -> Self {
        let store = Arc::new(match config.job_times {
            true => StateStore::default(),
            false => StateStore::without_apply_times(),
        });
        let leader = Arc::new(LeaderParts::new(&config.leader, registry));
        let hub = Arc::new(ApplyHub::new(&leader, registry));
        Self {
            store,
            leader,
            hub,
            contact,
        }
    }
}

/// One server's control plane: what the API and HTTP are handed, and what
/// follows leadership to switch the leader-only mechanisms on and off.
pub struct ControlPlane {
    /// This server's raft id: leadership is this id in raft's metrics.
    id: NodeId,
    /// Raft, followed for leadership and asked for the barrier a new term
    /// passes before its leader-only parts start.
    raft: Raft,
    /// The state every part reads (the API's reads, each term's restore).
    store: Arc<StateStore>,
    /// Reads that wait for a change (shared by the API and the watcher).
    pub blocking: Blocking,
    /// Writes through whichever server leads (the public API's writes).
    pub proposer: Proposer,
    /// Leader-only calls, routed (the API's and the workers').
    pub calls: LeaderCalls,
    /// This server's scheduler workers (on every server, leader or not),
    /// paused, resumed and counted over HTTP.
    pub workers: Arc<WorkerPool<LeaderCalls>>,
    /// The leader's gauges of nodes and allocations, for `/metrics`.
    pub fleet: Arc<FleetGauges>,
    /// The leader-only mechanisms, built once and switched on per term.
    leader: Arc<LeaderParts>,
    /// What each term's leader tasks get: the store and a local-only proposer.
    leader_ctx: LeaderContext,
    /// True once this server leads and its leader-only parts are running.
    leading: watch::Sender<bool>,
}

impl ControlPlane {
    pub fn new(
        id: NodeId,
        raft: Raft,
        parts: Foundations,
        proposer: Proposer,
        channels: PeerChannels,
        config: ControlConfig,
        registry: &Registry,
    ) -> Arc<Self> {
        let Foundations {
            store,
            leader,
            hub,
            contact,
        } = parts;
        let (leading, leading_rx) = watch::channel(false);
        let router = Router::new(
            raft.clone(),
            channels,
            leading_rx.clone(),
            contact.clone(),
            config.leader_hold,
            registry,
        );
        tokio::spawn(wake_parked_when_out_of_touch(
            contact.changes(),
            hub.watchers.clone(),
        ));
        let mut blocking_metrics = BlockingMetrics::new(registry);
        blocking_metrics.stages.set_on(config.job_times);
        let blocking_metrics = Arc::new(blocking_metrics);
        let ctx = LeaderContext {
            store: store.clone(),
            proposer: LocalProposer::new(proposer.clone()),
            stages: blocking_metrics.stages.clone(),
        };
        let calls = LeaderCalls::new(router, ctx.clone(), &leader);
        let workers = Arc::new(WorkerPool::new(
            calls.clone(),
            store.clone(),
            config.worker.clone(),
            registry,
            blocking_metrics.stages.clone(),
        ));
        workers.set_count(config.workers);
        Arc::new(Self {
            id,
            blocking: Blocking {
                store: store.clone(),
                watchers: hub.watchers.clone(),
                metrics: blocking_metrics,
                parking: Arc::new(Parking::new(config.parking)),
                contact,
            },
            fleet: Arc::new(FleetGauges::new(store.clone(), leading_rx, registry)),
            raft,
            store,
            proposer,
            calls,
            workers,
            leader,
            leader_ctx: ctx,
            leading,
        })
    }

    pub fn store(&self) -> &Arc<StateStore> {
        &self.store
    }

    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    pub fn is_leading(&self) -> bool {
        *self.leading.borrow()
    }

    /// Follows raft leadership: sets up the leader-only parts when this
    /// server becomes leader and tears them down when it stops being one.
    /// (Raft's server metrics change with the vote and the leadership only,
    /// not with every entry.)
    pub async fn run_leadership(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut rx = self.raft.server_metrics();
        loop {
            let leads = {
                let m = rx.borrow_and_update();
                m.current_leader == Some(self.id) && m.state == openraft::ServerState::Leader
            };
            if leads && !self.is_leading() {
                self.establish().await;
            } else if !leads && self.is_leading() {
                self.revoke();
            }
            tokio::select! {
                changed = rx.changed() => if changed.is_err() { break },
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        self.revoke();
    }

    async fn establish(&self) {
        // Barrier: everything committed before this term is applied here.
        if let Err(e) = self.raft.ensure_linearizable().await {
            tracing::warn!("leadership barrier failed: {e}");
            return;
        }
        self.leader
            .establish(self.leader_ctx.clone(), self.blocking.clone());
        self.leading.send_replace(true);
        tracing::info!(
            id = self.id,
            "leading: broker restored with {:?} (ready, unacked, waiting)",
            self.leader.broker.stats()
        );
    }

    fn revoke(&self) {
        if !self.leading.send_replace(false) {
            return;
        }
        self.leader.revoke();
        tracing::info!(id = self.id, "no longer leading");
    }

    /// Stops workers and leader tasks (server shutdown).
    pub fn shutdown(&self) {
        self.workers.stop_all();
        self.revoke();
    }
}

/// Each time this server loses touch with the cluster, wakes every parked
/// query: a caller's query then ends `Unavailable` and its caller asks a
/// server whose state moves (see `Blocking::query_for`). Ends with the
/// contact's keeper.
async fn wake_parked_when_out_of_touch(mut touch: watch::Receiver<Touch>, watchers: Arc<Watchers>) {
    while touch.changed().await.is_ok() {
        if let Touch::Lost(why) = &*touch.borrow_and_update() {
            let woken = watchers.notify_all();
            tracing::info!("out of touch ({why}): woke {woken} parked queries");
        }
    }
}
