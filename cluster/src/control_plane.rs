//! The control plane one server runs: its state, blocking queries, the
//! leader-only parts (eval broker, blocked evaluations, plan applier,
//! heartbeats, client-update batching) and its scheduler workers.
//!
//! Calls that only the leader can answer go through [`ControlPlane::route`]:
//! handled here when this server leads, otherwise sent on to the leader
//! (once: a forwarded call that finds no leader here answers `Unavailable`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{IntGaugeVec, Opts, Registry};
use stampede_proto::eval_service_client::EvalServiceClient;
use stampede_proto::node_service_client::NodeServiceClient;
use stampede_proto::plan_service_client::PlanServiceClient;
use stampede_proto::{AllocClientStatus, EvalStatus, Evaluation, JobType, NodeStatus};
use tokio::sync::watch;
use tonic::transport::Channel;
use tonic::{Request, Status};

use crate::alloc_updates::AllocUpdates;
use crate::blocked_evals::BlockedEvals;
use crate::blocking::{Blocking, BlockingMetrics, Watchers};
use crate::broker::{BrokerConfig, EvalBroker};
use crate::heartbeat::{HeartbeatConfig, Heartbeats};
use crate::metrics::Metrics;
use crate::network::PeerChannels;
use crate::plan_apply::PlanQueue;
use crate::proposer::Proposer;
use crate::state::{Changes, StateStore};
use crate::types::{NodeId, Raft};
use crate::worker::{WorkerConfig, WorkerPool};

/// gRPC metadata marking a call one server sent on to the leader.
pub const FORWARDED: &str = "x-stampede-forwarded";

/// Control-plane settings (`cluster serve` flags fill them).
#[derive(Debug, Clone)]
pub struct ControlConfig {
    pub broker: BrokerConfig,
    pub heartbeat: HeartbeatConfig,
    pub worker: WorkerConfig,
    pub workers: usize,
    /// How long the leader gathers client allocation updates into one entry.
    pub alloc_update_window: Duration,
    pub deployments: crate::deployment_watcher::WatcherConfig,
}

/// Reacts to every applied batch: wakes blocking queries, and on the leader
/// feeds the broker, the blocked-evaluation tracker and the heartbeat timers.
pub struct ApplyHub {
    pub watchers: Arc<Watchers>,
    pub broker: Arc<EvalBroker>,
    pub blocked: Arc<BlockedEvals>,
    pub heartbeats: Arc<Heartbeats>,
}

impl ApplyHub {
    pub fn applied(&self, changes: &Changes) {
        self.watchers.notify(&changes.keys);
        for eval in &changes.evals {
            match EvalStatus::try_from(eval.status) {
                Ok(EvalStatus::Pending) => self.broker.enqueue(eval.clone()),
                Ok(EvalStatus::Blocked) => self.blocked.block(eval.clone()),
                _ => self.blocked.untrack(&eval.id),
            }
        }
        for node in &changes.nodes {
            if node.status == NodeStatus::Ready as i32 {
                self.heartbeats.reset(&node.id);
            } else {
                self.heartbeats.remove(&node.id);
            }
        }
        if changes.capacity_changed {
            self.blocked.unblock_all(changes.index);
        }
    }
}

/// Where a leader-only call goes.
pub enum Route {
    Local,
    Leader(Channel),
}

pub struct ControlPlane {
    pub id: NodeId,
    pub raft: Raft,
    pub store: Arc<StateStore>,
    pub blocking: Blocking,
    pub proposer: Proposer,
    pub channels: PeerChannels,
    pub hub: Arc<ApplyHub>,
    pub plans: PlanQueue,
    pub alloc_updates: AllocUpdates,
    pub workers: WorkerPool,
    pub deployment_metrics: crate::deployment_watcher::WatcherMetrics,
    pub metrics: Arc<Metrics>,
    pub config: ControlConfig,
    /// True once this server leads and its leader-only parts are running.
    pub leading: watch::Sender<bool>,
    fleet: FleetGauges,
    leader_tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// The leader's view of the fleet, computed when `/metrics` is read.
struct FleetGauges {
    nodes: IntGaugeVec,
    allocs: IntGaugeVec,
}

impl ControlPlane {
    /// The hub is built first: the state machine needs it before raft exists.
    pub fn hub(config: &ControlConfig, registry: &Registry) -> Arc<ApplyHub> {
        let broker = Arc::new(EvalBroker::new(config.broker, registry));
        Arc::new(ApplyHub {
            watchers: Arc::default(),
            blocked: Arc::new(BlockedEvals::new(broker.clone(), registry)),
            broker,
            heartbeats: Arc::new(Heartbeats::new(config.heartbeat, registry)),
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: NodeId,
        raft: Raft,
        store: Arc<StateStore>,
        hub: Arc<ApplyHub>,
        channels: PeerChannels,
        metrics: Arc<Metrics>,
        config: ControlConfig,
        leader_wait: Duration,
    ) -> Arc<Self> {
        let registry = metrics.registry();
        let fleet = FleetGauges {
            nodes: IntGaugeVec::new(
                Opts::new("stampede_nodes", "Leader: client nodes by status."),
                &["status"],
            )
            .unwrap(),
            allocs: IntGaugeVec::new(
                Opts::new("stampede_allocs", "Leader: allocations by client status."),
                &["client_status"],
            )
            .unwrap(),
        };
        registry.register(Box::new(fleet.nodes.clone())).unwrap();
        registry.register(Box::new(fleet.allocs.clone())).unwrap();
        Arc::new(Self {
            id,
            blocking: Blocking {
                store: store.clone(),
                watchers: hub.watchers.clone(),
                metrics: Arc::new(BlockingMetrics::new(registry)),
            },
            proposer: Proposer::new(raft.clone(), channels.clone(), metrics.clone(), leader_wait),
            plans: PlanQueue::new(registry),
            alloc_updates: AllocUpdates::new(config.alloc_update_window, registry),
            workers: WorkerPool::new(config.worker.clone(), registry),
            deployment_metrics: crate::deployment_watcher::WatcherMetrics::new(registry),
            raft,
            store,
            hub,
            channels,
            metrics,
            config,
            leading: watch::channel(false).0,
            fleet,
            leader_tasks: Mutex::default(),
        })
    }

    pub fn broker(&self) -> &EvalBroker {
        &self.hub.broker
    }

    pub fn is_leading(&self) -> bool {
        *self.leading.borrow()
    }

    /// Decides where a leader-only call goes.
    pub fn route(&self, forwarded: bool) -> Result<Route, Status> {
        if self.is_leading() {
            return Ok(Route::Local);
        }
        let m = self.raft.metrics().borrow().clone();
        match m.current_leader {
            None => Err(Status::unavailable(
                "no raft leader is elected yet; retry shortly",
            )),
            Some(l) if l == self.id => Err(Status::unavailable(
                "this server was just elected and is restoring its eval broker; retry shortly",
            )),
            Some(l) => {
                let addr = m
                    .membership_config
                    .nodes()
                    .find(|(id, _)| **id == l)
                    .map(|(_, n)| n.addr.clone())
                    .ok_or_else(|| {
                        Status::unavailable(format!("leader {l} is not in the membership"))
                    })?;
                if forwarded {
                    let mut s = Status::unavailable(format!(
                        "this server is not the leader; the leader is server {l} at {addr}"
                    ));
                    if let Ok(v) = addr.parse() {
                        s.metadata_mut().insert(crate::proposer::LEADER_HEADER, v);
                    }
                    return Err(s);
                }
                Ok(Route::Leader(self.channels.get(l, &addr)))
            }
        }
    }

    pub fn eval_client(ch: Channel) -> EvalServiceClient<Channel> {
        stampede_proto::sized!(EvalServiceClient::new(ch))
    }

    pub fn plan_client(ch: Channel) -> PlanServiceClient<Channel> {
        stampede_proto::sized!(PlanServiceClient::new(ch))
    }

    pub fn node_client(ch: Channel) -> NodeServiceClient<Channel> {
        stampede_proto::sized!(NodeServiceClient::new(ch))
    }

    /// Follows raft leadership: sets up the leader-only parts when this
    /// server becomes leader and tears them down when it stops being one.
    pub async fn run_leadership(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut rx = self.raft.metrics();
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

    async fn establish(self: &Arc<Self>) {
        // Barrier: everything committed before this term is applied here.
        if let Err(e) = self.raft.ensure_linearizable().await {
            tracing::warn!("leadership barrier failed: {e}");
            return;
        }
        let hub = &self.hub;
        hub.broker.set_enabled(true);
        hub.blocked.set_enabled(true);
        let state = self.store.snapshot();
        for eval in state.evals() {
            match EvalStatus::try_from(eval.status) {
                Ok(EvalStatus::Pending) => hub.broker.enqueue(eval.clone()),
                Ok(EvalStatus::Blocked) => hub.blocked.block(eval.clone()),
                _ => {}
            }
        }
        hub.heartbeats.set_enabled(
            true,
            state
                .nodes()
                .filter(|n| n.status == NodeStatus::Ready as i32)
                .map(|n| n.id.as_str()),
        );
        let (plan_rx, update_rx) = (self.plans.open(), self.alloc_updates.open());
        let mut tasks = self.leader_tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.push(tokio::spawn(crate::plan_apply::run(self.clone(), plan_rx)));
        tasks.push(tokio::spawn(crate::alloc_updates::run(
            self.clone(),
            update_rx,
        )));
        tasks.push(tokio::spawn(self.clone().run_timers()));
        tasks.push(tokio::spawn(crate::deployment_watcher::run(self.clone())));
        drop(tasks);
        self.leading.send_replace(true);
        tracing::info!(
            id = self.id,
            "leading: broker restored with {:?} (ready, unacked, waiting)",
            hub.broker.stats()
        );
    }

    fn revoke(&self) {
        if !self.leading.send_replace(false) {
            return;
        }
        for t in self
            .leader_tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            t.abort();
        }
        self.plans.close();
        self.alloc_updates.close();
        self.hub.broker.set_enabled(false);
        self.hub.blocked.set_enabled(false);
        self.hub.heartbeats.set_enabled(false, std::iter::empty());
        tracing::info!(id = self.id, "no longer leading");
    }

    /// Leader: expires unacked deliveries and missed heartbeats, and sweeps
    /// cancelable evaluations.
    async fn run_timers(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        let mut last_sweep = tokio::time::Instant::now();
        loop {
            tick.tick().await;
            if last_sweep.elapsed() >= crate::broker::CANCEL_SWEEP_INTERVAL {
                last_sweep = tokio::time::Instant::now();
                self.sweep_cancelable().await;
            }
            let failed = self.hub.broker.expire_unacked();
            if !failed.is_empty() {
                let evals = failed
                    .iter()
                    .map(|e| Evaluation {
                        status: EvalStatus::Failed as i32,
                        status_description: "delivery limit reached".into(),
                        ..Evaluation::clone(e)
                    })
                    .collect();
                if let Err(e) = self.write_evals(evals).await {
                    tracing::warn!("recording failed evaluations: {e}");
                }
            }
            for node_id in self.hub.heartbeats.expired() {
                if let Err(e) = self.set_node_status(&node_id, NodeStatus::Down).await {
                    tracing::warn!(node_id, "marking node down: {e}");
                }
            }
        }
    }

    /// Leader: cancels what acks left cancelable, so that no stragglers
    /// remain once the cluster is quiet (acks write one batch each).
    async fn sweep_cancelable(&self) {
        while self.cancel_batch().await == crate::broker::CANCEL_BATCH {}
    }

    pub async fn write_evals(&self, evals: Vec<Evaluation>) -> Result<u64, Status> {
        use stampede_proto::{log_entry::Msg, EvalUpdateEntry, LogEntry};
        let entry = LogEntry {
            msg: Some(Msg::EvalUpdate(EvalUpdateEntry { evals })),
        };
        Ok(self.proposer.write(entry).await?)
    }

    /// Leader: writes a node's status change, with evaluations for what it affects.
    pub async fn set_node_status(&self, node_id: &str, status: NodeStatus) -> Result<u64, Status> {
        use stampede_proto::{log_entry::Msg, LogEntry, NodeStatusEntry};
        let state = self.store.snapshot();
        let evals = match status {
            NodeStatus::Down => {
                let mut jobs: Vec<String> = state
                    .node_allocs(node_id)
                    .iter()
                    .filter(|a| !crate::state::alloc_terminal(a))
                    .map(|a| a.job_id.clone())
                    .collect();
                jobs.sort();
                jobs.dedup();
                jobs.iter()
                    .filter_map(|j| state.job(j))
                    .map(|job| new_eval(&job, "node_update", Some(node_id)))
                    .collect()
            }
            NodeStatus::Ready => system_job_evals(&state, node_id),
            _ => Vec::new(),
        };
        let entry = LogEntry {
            msg: Some(Msg::NodeStatus(NodeStatusEntry {
                node_id: node_id.to_string(),
                status: status as i32,
                updated_at_ms: now_ms(),
                evals,
            })),
        };
        Ok(self.proposer.write(entry).await?)
    }

    /// Refreshes the leader-only gauges; followers export none.
    pub fn update_fleet_gauges(&self) {
        self.fleet.nodes.reset();
        self.fleet.allocs.reset();
        if !self.is_leading() {
            return;
        }
        let state = self.store.snapshot();
        for s in [
            NodeStatus::Initializing,
            NodeStatus::Ready,
            NodeStatus::Down,
        ] {
            self.fleet
                .nodes
                .with_label_values(&[node_status_name(s)])
                .set(0);
        }
        for n in state.nodes() {
            let s = NodeStatus::try_from(n.status).unwrap_or(NodeStatus::Unspecified);
            self.fleet
                .nodes
                .with_label_values(&[node_status_name(s)])
                .inc();
        }
        for a in state.allocs() {
            let s = AllocClientStatus::try_from(a.client_status)
                .unwrap_or(AllocClientStatus::Unspecified);
            self.fleet
                .allocs
                .with_label_values(&[client_status_name(s)])
                .inc();
        }
    }

    /// Stops workers and leader tasks (server shutdown).
    pub fn shutdown(&self) {
        self.workers.stop_all();
        self.revoke();
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A pending evaluation of `job`, for the reason `triggered_by`.
pub fn new_eval(
    job: &stampede_proto::Job,
    triggered_by: &str,
    node_id: Option<&str>,
) -> Evaluation {
    Evaluation {
        id: uuid::Uuid::new_v4().to_string(),
        job_id: job.id.clone(),
        r#type: job.r#type,
        priority: job.priority,
        triggered_by: triggered_by.into(),
        status: EvalStatus::Pending as i32,
        job_modify_index: job.job_modify_index,
        node_id: node_id.unwrap_or_default().to_string(),
        ..Default::default()
    }
}

/// Evaluations for every live system job: a node that becomes ready may take them.
pub fn system_job_evals(state: &crate::state::State, node_id: &str) -> Vec<Evaluation> {
    state
        .jobs()
        .filter(|j| j.r#type == JobType::System as i32 && !j.stop)
        .map(|j| new_eval(j, "node_update", Some(node_id)))
        .collect()
}

pub fn node_status_name(s: NodeStatus) -> &'static str {
    match s {
        NodeStatus::Unspecified => "unknown",
        NodeStatus::Initializing => "initializing",
        NodeStatus::Ready => "ready",
        NodeStatus::Down => "down",
    }
}

pub fn client_status_name(s: AllocClientStatus) -> &'static str {
    match s {
        AllocClientStatus::Unspecified => "unknown",
        AllocClientStatus::Pending => "pending",
        AllocClientStatus::Running => "running",
        AllocClientStatus::Complete => "complete",
        AllocClientStatus::Failed => "failed",
        AllocClientStatus::Lost => "lost",
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
