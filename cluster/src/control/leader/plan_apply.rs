//! The leader's plan applier: plans from every worker wait in one queue and
//! are evaluated one at a time against the latest state. What still fits is
//! committed as one raft entry; placements on nodes that went away or filled
//! up are refused, with a refresh index so the worker plans again on newer
//! state.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus::{Histogram, IntCounter, IntGauge, Registry};
use stampede_proto::lock;
use stampede_proto::metric_defs::{histogram, int_counter, int_gauge};
use stampede_proto::{
    log_entry::Msg, AllocList, Allocation, LogEntry, NodeStatus, Plan, PlanApplyEntry, PlanResult,
    Resources,
};
use tokio::sync::{mpsc, oneshot};

use super::broker::{BrokerError, EvalBroker};
use super::context::LeaderContext;
use crate::model::alloc_terminal;
use crate::raft::proposer::ProposeError;
use crate::scheduler::fits;
use crate::state::State;

/// Plans that may wait in the queue before submitters are told to back off.
const QUEUE_DEPTH: usize = 1024;

pub struct PlanMetrics {
    pub queue_depth: IntGauge,
    pub evaluate_seconds: Histogram,
    pub apply_seconds: Histogram,
    pub nodes_rejected: IntCounter,
    pub allocs_placed: IntCounter,
    pub allocs_stopped: IntCounter,
}

impl PlanMetrics {
    fn new(registry: &Registry) -> Self {
        /// 0.1 ms to about 13 s.
        const BUCKETS: (f64, f64, usize) = (0.0001, 2.0, 18);
        Self {
            queue_depth: int_gauge(
                registry,
                "stampede_plan_queue_depth",
                "Plans waiting for the plan applier.",
            ),
            evaluate_seconds: histogram(
                registry,
                "stampede_plan_evaluate_seconds",
                "Time to check a plan against the latest state.",
                BUCKETS,
            ),
            apply_seconds: histogram(
                registry,
                "stampede_plan_apply_seconds",
                "Time to commit and apply a plan's raft entry.",
                BUCKETS,
            ),
            nodes_rejected: int_counter(
                registry,
                "stampede_plan_nodes_rejected_total",
                "Nodes whose placements a plan could no longer make.",
            ),
            allocs_placed: int_counter(
                registry,
                "stampede_plan_allocs_placed_total",
                "Allocations placed by applied plans.",
            ),
            allocs_stopped: int_counter(
                registry,
                "stampede_plan_allocs_stopped_total",
                "Allocations stopped by applied plans.",
            ),
        }
    }
}

/// Why a plan was not applied.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("this server is not the leader; its plan queue is closed")]
    NotLeader,
    #[error("the plan applier stopped: leadership changed")]
    LeadershipChanged,
    #[error(transparent)]
    Broker(#[from] BrokerError),
    #[error(transparent)]
    Propose(#[from] ProposeError),
}

pub struct PendingPlan {
    plan: Plan,
    reply: oneshot::Sender<Result<PlanResult, PlanError>>,
}

/// Where workers submit plans; open only while this server leads.
pub struct PlanQueue {
    tx: Mutex<Option<mpsc::Sender<PendingPlan>>>,
    pub metrics: Arc<PlanMetrics>,
}

impl PlanQueue {
    pub fn new(registry: &Registry) -> Self {
        Self {
            tx: Mutex::default(),
            metrics: Arc::new(PlanMetrics::new(registry)),
        }
    }

    pub(super) fn open(&self) -> mpsc::Receiver<PendingPlan> {
        let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
        *lock(&self.tx) = Some(tx);
        rx
    }

    pub(super) fn close(&self) {
        lock(&self.tx).take();
        self.metrics.queue_depth.set(0);
    }

    /// Queues a plan and waits for the applier's answer.
    pub async fn submit(&self, plan: Plan) -> Result<PlanResult, PlanError> {
        let tx = lock(&self.tx).clone().ok_or(PlanError::NotLeader)?;
        let (reply, rx) = oneshot::channel();
        self.metrics.queue_depth.inc();
        let sent = tx.send(PendingPlan { plan, reply }).await;
        if sent.is_err() {
            self.metrics.queue_depth.dec();
            return Err(PlanError::LeadershipChanged);
        }
        rx.await.map_err(|_| PlanError::LeadershipChanged)?
    }
}

/// The applier loop, for one term of leadership.
pub(super) async fn run(
    ctx: LeaderContext,
    broker: Arc<EvalBroker>,
    metrics: Arc<PlanMetrics>,
    mut rx: mpsc::Receiver<PendingPlan>,
) {
    while let Some(p) = rx.recv().await {
        metrics.queue_depth.dec();
        let result = apply_one(&ctx, &broker, &metrics, p.plan).await;
        let _ = p.reply.send(result);
    }
}

async fn apply_one(
    ctx: &LeaderContext,
    broker: &EvalBroker,
    m: &PlanMetrics,
    plan: Plan,
) -> Result<PlanResult, PlanError> {
    broker.check_token(&plan.eval_id, &plan.eval_token)?;
    let start = Instant::now();
    let state = ctx.store.snapshot();
    let checked = evaluate(&state, &plan);
    m.evaluate_seconds.observe(start.elapsed().as_secs_f64());
    m.nodes_rejected.inc_by(checked.rejected.len() as u64);

    let mut result = PlanResult {
        refresh_index: if checked.rejected.is_empty() {
            0
        } else {
            state.index()
        },
        rejected_nodes: checked.rejected,
        node_allocation: group(&checked.placed),
        node_update: group(&checked.stopped),
        deployment: plan.deployment.clone(),
        alloc_index: 0,
    };
    if checked.placed.is_empty() && checked.stopped.is_empty() && plan.deployment.is_none() {
        return Ok(result);
    }
    let (placed, stopped) = (checked.placed.len() as u64, checked.stopped.len() as u64);
    let mut allocs = checked.stopped;
    allocs.extend(checked.placed);
    let entry = LogEntry {
        msg: Some(Msg::PlanApply(PlanApplyEntry {
            allocs,
            deployment: plan.deployment,
            eval_id: plan.eval_id,
        })),
    };
    let start = Instant::now();
    result.alloc_index = ctx.proposer.write(entry).await?;
    m.apply_seconds.observe(start.elapsed().as_secs_f64());
    m.allocs_placed.inc_by(placed);
    m.allocs_stopped.inc_by(stopped);
    Ok(result)
}

fn group(allocs: &[Allocation]) -> HashMap<String, AllocList> {
    let mut by_node: HashMap<String, AllocList> = HashMap::new();
    for a in allocs {
        by_node
            .entry(a.node_id.clone())
            .or_default()
            .allocs
            .push(a.clone());
    }
    by_node
}

/// What of a plan can still be done on `state`.
pub struct Checked {
    pub placed: Vec<Allocation>,
    pub stopped: Vec<Allocation>,
    pub rejected: Vec<String>,
}

/// Checks a plan against the latest state. Stops are always accepted; a
/// node's placements are accepted all together or not at all.
pub fn evaluate(state: &State, plan: &Plan) -> Checked {
    let stopped: Vec<Allocation> = plan
        .node_update
        .values()
        .flat_map(|l| l.allocs.iter().cloned())
        .collect();
    let stopped_ids: HashSet<&str> = stopped.iter().map(|a| a.id.as_str()).collect();
    let job_live = state.job(&plan.job_id).is_some_and(|j| !j.stop);
    let mut placed = Vec::new();
    let mut rejected = Vec::new();
    let mut nodes: Vec<&String> = plan.node_allocation.keys().collect();
    nodes.sort();
    for node_id in nodes {
        let list = &plan.node_allocation[node_id].allocs;
        let ok = job_live
            && state.node(node_id).is_some_and(|node| {
                node.status == NodeStatus::Ready as i32 && !node.ineligible && {
                    let used = usage_after(state, node_id, &stopped_ids, list);
                    fits(&node, &Resources::default(), &used)
                }
            });
        if ok {
            placed.extend(list.iter().cloned());
        } else {
            rejected.push(node_id.clone());
        }
    }
    Checked {
        placed,
        stopped,
        rejected,
    }
}

/// What the node would hold with this plan: its live allocations, less
/// those the plan stops or replaces, plus the plan's placements.
fn usage_after(
    state: &State,
    node_id: &str,
    stopped: &HashSet<&str>,
    placed: &[Allocation],
) -> Resources {
    let gone = |id: &str| stopped.contains(id) || placed.iter().any(|a| a.id == id);
    let mut used = Resources::default();
    let live = state.node_allocs(node_id);
    for a in live.iter().filter(|a| !alloc_terminal(a) && !gone(&a.id)) {
        add(&mut used, a.resources.as_ref());
    }
    for a in placed.iter().filter(|a| !alloc_terminal(a)) {
        add(&mut used, a.resources.as_ref());
    }
    used
}

fn add(total: &mut Resources, r: Option<&Resources>) {
    if let Some(r) = r {
        total.cpu_mhz += r.cpu_mhz;
        total.memory_mb += r.memory_mb;
    }
}
