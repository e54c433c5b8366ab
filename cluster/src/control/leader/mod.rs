//! The mechanisms only the leader runs, as in Nomad: the eval broker, the
//! blocked-evaluation tracker, node heartbeat timers, the plan applier, the
//! client-update batcher, the deployment watcher and the timers that expire
//! deliveries and sweep cancelable evaluations.
//!
//! They are built once per server ([`LeaderParts`]) and switched on for each
//! term of leadership. A term's tasks get a [`LeaderContext`] — the state to
//! read and a proposer that writes only on this server — plus what each one
//! needs of its own (the broker, its metrics, its config); none of them sees
//! the rest of the server.
//!
//! - `broker`: the eval broker (one evaluation out per job, nack delays,
//!   the cancelable set of eval cancelation).
//! - `blocked_evals`: evaluations waiting for capacity, unblocked by node
//!   class.
//! - `heartbeat`: node heartbeat timers.
//! - `plan_apply`: the plan applier (its design is argued at its top; the
//!   pieces plans arrive in are cut by the workers, `control::plan_split`);
//!   `unapplied`: what a checked plan still in flight will do.
//! - `alloc_updates`: client updates batched into one entry per window.
//! - `deployment_watcher`: each deployment's next round.
//! - `gc`: the timer that queues core evaluations, and a forced collection.
//! - `timers`: delivery timeouts and the sweep of cancelable evaluations.
//! - `context`: the [`LeaderContext`], and the cancel batches of eval
//!   cancelation.

pub(crate) mod alloc_updates;
pub(crate) mod blocked_evals;
pub mod broker;
mod context;
pub(crate) mod deployment_watcher;
pub(crate) mod gc;
pub(crate) mod heartbeat;
pub(crate) mod plan_apply;
mod timers;
mod unapplied;

use std::sync::{Arc, Mutex};

use prometheus::Registry;
use stampede_proto::{EvalStatus, Evaluation, NodeStatus};
use tokio::task::JoinHandle;

use crate::state::blocking::Blocking;

use self::alloc_updates::AllocUpdates;
use self::blocked_evals::BlockedEvals;
use self::broker::{BrokerConfig, EvalBroker};
pub use self::context::{delivery_limit_reached, LeaderContext};
use self::deployment_watcher::{WatcherConfig, WatcherMetrics};
use self::heartbeat::{HeartbeatConfig, Heartbeats};
use self::plan_apply::PlanQueue;

/// Settings of the leader-only mechanisms (`cluster serve` flags fill them).
#[derive(Debug, Clone)]
pub struct LeaderConfig {
    pub broker: BrokerConfig,
    pub heartbeat: HeartbeatConfig,
    /// How long the leader gathers client allocation updates into one entry.
    pub alloc_update_window: std::time::Duration,
    pub deployments: WatcherConfig,
    /// Blocked evaluations go back to the broker only on capacity in a node
    /// class they may use (Nomad), rather than on any change.
    pub unblock_by_class: bool,
    /// How often garbage collection's core evaluations are queued; `None`
    /// queues none (only a forced collection runs).
    pub gc_interval: Option<std::time::Duration>,
}

impl Default for LeaderConfig {
    fn default() -> Self {
        Self {
            broker: BrokerConfig::default(),
            heartbeat: HeartbeatConfig::default(),
            alloc_update_window: alloc_updates::DEFAULT_WINDOW,
            deployments: WatcherConfig::default(),
            unblock_by_class: true,
            gc_interval: Some(gc::DEFAULT_INTERVAL),
        }
    }
}

/// Where the leader keeps an evaluation, by its status, whether it comes
/// from an applied batch (`control::apply`) or from the state a new term
/// starts with ([`LeaderParts::establish`]): a pending one waits in the
/// broker for a worker, a blocked one in the blocked set for capacity, and
/// any other status (complete, failed, canceled) leaves the blocked set. Both
/// ignore what they are told while this server does not lead.
pub(crate) fn route_eval(broker: &EvalBroker, blocked: &BlockedEvals, eval: &Arc<Evaluation>) {
    match EvalStatus::try_from(eval.status) {
        Ok(EvalStatus::Pending) => broker.enqueue(eval.clone()),
        Ok(EvalStatus::Blocked) => blocked.block(eval.clone()),
        _ => blocked.untrack(&eval.id),
    }
}

/// The leader-only mechanisms of one server: built at start-up, running
/// only while this server leads.
pub struct LeaderParts {
    /// Pending evaluations waiting for a worker.
    pub broker: Arc<EvalBroker>,
    /// Evaluations waiting for capacity.
    pub blocked: Arc<BlockedEvals>,
    /// Node heartbeat timers.
    pub heartbeats: Arc<Heartbeats>,
    /// Where plans wait for the plan applier.
    pub plans: Arc<PlanQueue>,
    /// Where client allocation updates wait for the next batch.
    pub alloc_updates: Arc<AllocUpdates>,
    /// The deployment watcher's settings and metrics, for each term's watcher.
    deployments: WatcherConfig,
    deployment_metrics: Arc<WatcherMetrics>,
    gc_interval: Option<std::time::Duration>,
    /// The tasks of the current term, aborted when it ends.
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl LeaderParts {
    pub fn new(config: &LeaderConfig, registry: &Registry) -> Self {
        let broker = Arc::new(EvalBroker::new(config.broker, registry));
        Self {
            blocked: Arc::new(BlockedEvals::new(
                broker.clone(),
                config.unblock_by_class,
                registry,
            )),
            broker,
            heartbeats: Arc::new(Heartbeats::new(config.heartbeat, registry)),
            plans: Arc::new(PlanQueue::new(registry)),
            alloc_updates: Arc::new(AllocUpdates::new(config.alloc_update_window, registry)),
            deployments: config.deployments,
            deployment_metrics: Arc::new(WatcherMetrics::new(registry)),
            gc_interval: config.gc_interval,
            tasks: Mutex::default(),
        }
    }

    /// Starts a term: restores the broker, the blocked evaluations and the
    /// heartbeat timers from the state, and starts the term's tasks. The
    /// caller has passed a barrier, so the state holds every committed entry.
    pub fn establish(&self, ctx: LeaderContext, blocking: Blocking) {
        self.broker.set_enabled(true);
        self.blocked.set_enabled(true);
        let state = ctx.store.snapshot();
        for eval in state.evals() {
            route_eval(&self.broker, &self.blocked, eval);
        }
        self.heartbeats.set_enabled(
            true,
            state
                .nodes()
                .filter(|n| n.status == NodeStatus::Ready as i32)
                .map(|n| n.id.as_str()),
        );
        let (plan_rx, update_rx) = (self.plans.open(), self.alloc_updates.open());
        let mut tasks = stampede_proto::lock(&self.tasks);
        tasks.push(tokio::spawn(plan_apply::run(
            ctx.clone(),
            self.broker.clone(),
            self.plans.metrics.clone(),
            plan_rx,
        )));
        tasks.push(tokio::spawn(alloc_updates::run(
            ctx.clone(),
            self.alloc_updates.window,
            self.alloc_updates.metrics.clone(),
            update_rx,
        )));
        tasks.push(tokio::spawn(timers::run(
            ctx.clone(),
            self.broker.clone(),
            self.heartbeats.clone(),
        )));
        if let Some(interval) = self.gc_interval {
            tasks.push(tokio::spawn(gc::run(
                ctx.store.clone(),
                self.broker.clone(),
                interval,
            )));
        }
        tasks.push(tokio::spawn(deployment_watcher::run(
            ctx,
            blocking,
            self.deployments,
            self.deployment_metrics.clone(),
        )));
    }

    /// Ends a term: stops its tasks and switches every mechanism off.
    pub fn revoke(&self) {
        for t in stampede_proto::lock(&self.tasks).drain(..) {
            t.abort();
        }
        self.plans.close();
        self.alloc_updates.close();
        self.broker.set_enabled(false);
        self.blocked.set_enabled(false);
        self.heartbeats.set_enabled(false, std::iter::empty());
    }
}
