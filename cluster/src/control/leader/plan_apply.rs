//! The leader's plan applier: plans from every worker wait in one queue and
//! are evaluated one at a time against the latest state. What still fits is
//! committed as one raft entry; placements on nodes that went away or filled
//! up are refused, with a refresh index so the worker plans again on newer
//! state.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus::{Histogram, IntCounter, IntGauge, Registry};
use stampede_proto::lock;
use stampede_proto::metric_defs::{histogram, int_counter, int_gauge};
use stampede_proto::{
    log_entry::Msg, Allocation, BatchEntry, LogEntry, NodeStatus, Plan, PlanApplyEntry, PlanResult,
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

/// Most plans written in one raft entry (with raft batching on).
const MAX_PLANS_PER_ENTRY: usize = 256;

/// Plans checked and waiting for the entry in flight, all to be written
/// together in the next one; `state` is the state they were checked on,
/// with each of them applied.
struct Next {
    state: State,
    plans: Vec<Accepted>,
}

/// A checked plan: its answer, the entry that makes it (none when nothing
/// is left to write), and who waits for it.
struct Accepted {
    plan: Plan,
    result: PlanResult,
    entry: Option<PlanApplyEntry>,
    counts: (u64, u64),
    reply: oneshot::Sender<Result<PlanResult, PlanError>>,
}

/// The entry in flight: the state its plans were checked on with them
/// applied (where the next plans are checked until it is committed), and
/// whether it committed.
struct InFlight {
    state: State,
    done: tokio::task::JoinHandle<bool>,
}

/// The applier loop, for one term of leadership. Like Nomad's, it checks
/// the next plans while the previous entry commits, on the state plus what
/// that entry will do, and sends at most one plan entry to raft at a time,
/// so that a plan is never written before one it was checked against. With
/// raft batching on, the plans checked meanwhile are written together.
pub(super) async fn run(
    ctx: LeaderContext,
    broker: Arc<EvalBroker>,
    metrics: Arc<PlanMetrics>,
    mut rx: mpsc::Receiver<PendingPlan>,
) {
    let per_entry = if ctx.proposer.batching() {
        MAX_PLANS_PER_ENTRY
    } else {
        1
    };
    let mut next: Option<Next> = None;
    let mut in_flight: Option<InFlight> = None;
    loop {
        let room = next.as_ref().map_or(0, |n| n.plans.len()) < per_entry;
        tokio::select! {
            committed = async { (&mut in_flight.as_mut().expect("guarded").done).await },
                if in_flight.is_some() =>
            {
                in_flight = None;
                if let Some(mut waiting) = next.take() {
                    if !committed.unwrap_or(false) {
                        // Checked against stops that were never written:
                        // check again on what is committed.
                        waiting = recheck(&ctx, &metrics, waiting);
                    }
                    in_flight = send(&ctx, &metrics, waiting);
                }
            }
            pending = rx.recv(), if room => {
                let Some(mut p) = pending else { break };
                metrics.queue_depth.dec();
                if per_entry == 1 {
                    // One message per entry: the outcome is written on its own.
                    p.plan.evals.clear();
                }
                let waiting = next.get_or_insert_with(|| Next {
                    state: state_after(&ctx, in_flight.as_ref()),
                    plans: Vec::new(),
                });
                if let Some(accepted) = check(&broker, &metrics, &mut waiting.state, p) {
                    waiting.plans.push(accepted);
                }
                if in_flight.is_none() {
                    in_flight = send(&ctx, &metrics, next.take().expect("just filled"));
                }
            }
        }
    }
    if let Some(f) = in_flight {
        let _ = f.done.await;
    }
}

/// Where the next plans are checked: the state the entry in flight was
/// checked on, with its plans applied (Nomad's snapshot plus the pending
/// plan's results), or the latest state when nothing is in flight.
fn state_after(ctx: &LeaderContext, in_flight: Option<&InFlight>) -> State {
    match in_flight {
        Some(f) => f.state.clone(),
        None => ctx.store.snapshot(),
    }
}

/// Puts a checked plan's allocations in the applier's copy of the state,
/// where the next plans are checked (see [`State::place_for_check`]).
fn apply_checked(state: &mut State, entry: &PlanApplyEntry) {
    state.place_for_check(entry);
}

/// Checks one plan on `state` and, when something is left to write,
/// applies it there, so the plans after it see it. `None` when the plan's
/// delivery is no longer valid (its caller was answered).
fn check(
    broker: &EvalBroker,
    m: &PlanMetrics,
    state: &mut State,
    p: PendingPlan,
) -> Option<Accepted> {
    if let Err(e) = broker.check_token(&p.plan.eval_id, &p.plan.eval_token) {
        let _ = p.reply.send(Err(e.into()));
        return None;
    }
    let start = Instant::now();
    let (result, entry, counts) = evaluate_plan(state, &p.plan);
    m.evaluate_seconds.observe(start.elapsed().as_secs_f64());
    m.nodes_rejected.inc_by(result.rejected_nodes.len() as u64);
    if let Some(e) = &entry {
        apply_checked(state, e);
    }
    Some(Accepted {
        plan: p.plan,
        result,
        entry,
        counts,
        reply: p.reply,
    })
}

/// Checks the plans again on the committed state, after the entry they were
/// checked against failed.
fn recheck(ctx: &LeaderContext, m: &PlanMetrics, waiting: Next) -> Next {
    let mut state = ctx.store.snapshot();
    let mut plans = Vec::with_capacity(waiting.plans.len());
    for a in waiting.plans {
        let start = Instant::now();
        let (result, entry, counts) = evaluate_plan(&state, &a.plan);
        m.evaluate_seconds.observe(start.elapsed().as_secs_f64());
        if let Some(e) = &entry {
            apply_checked(&mut state, e);
        }
        plans.push(Accepted {
            plan: a.plan,
            result,
            entry,
            counts,
            reply: a.reply,
        });
    }
    Next { state, plans }
}

/// Writes the waiting plans' entries as one raft entry (a batch when there
/// are several) and answers each plan when it is committed. `None` when no
/// plan had anything to write: those were answered at once.
fn send(ctx: &LeaderContext, m: &Arc<PlanMetrics>, mut waiting: Next) -> Option<InFlight> {
    let mut entries = Vec::new();
    let mut waiters = Vec::new();
    // Everything sent before is committed and applied here now: a worker
    // told to plan again waits for at least this.
    let committed = ctx.store.read(State::index);
    for mut a in std::mem::take(&mut waiting.plans) {
        match a.entry {
            None => {
                if a.result.refresh_index != 0 {
                    a.result.refresh_index = a.result.refresh_index.max(committed);
                }
                let _ = a.reply.send(Ok(a.result));
            }
            Some(e) => {
                entries.push(e);
                waiters.push((a.result, a.counts, a.reply));
            }
        }
    }
    if entries.is_empty() {
        return None;
    }
    let mut plan_entries: Vec<LogEntry> = entries
        .into_iter()
        .map(|e| LogEntry {
            msg: Some(Msg::PlanApply(e)),
        })
        .collect();
    let entry = if plan_entries.len() == 1 {
        plan_entries.pop().expect("one entry")
    } else {
        LogEntry {
            msg: Some(Msg::Batch(BatchEntry {
                entries: plan_entries,
            })),
        }
    };
    let (proposer, m) = (ctx.proposer.clone(), m.clone());
    let done = tokio::spawn(async move {
        let start = Instant::now();
        let written = proposer.write(entry).await;
        m.apply_seconds.observe(start.elapsed().as_secs_f64());
        let ok = written.is_ok();
        for (mut result, (placed, stopped), reply) in waiters {
            let answer = match &written {
                Ok(index) => {
                    m.allocs_placed.inc_by(placed);
                    m.allocs_stopped.inc_by(stopped);
                    result.alloc_index = *index;
                    if result.refresh_index != 0 {
                        // Plan again on a state with this entry in it.
                        result.refresh_index = result.refresh_index.max(*index);
                    }
                    Ok(result)
                }
                Err(e) => Err(PlanError::Propose(e.clone())),
            };
            let _ = reply.send(answer);
        }
        ok
    });
    Some(InFlight {
        state: waiting.state,
        done,
    })
}

/// Checks `plan` on `state`: its answer, the entry to write (none when
/// nothing is left to do) and how many allocations it places and stops.
/// The evaluation's outcome goes into the entry only when every placement
/// was accepted; the answer says whether it did.
fn evaluate_plan(state: &State, plan: &Plan) -> (PlanResult, Option<PlanApplyEntry>, (u64, u64)) {
    let checked = evaluate(state, plan);
    let in_full = checked.rejected.is_empty();
    let mut result = PlanResult {
        refresh_index: if in_full { 0 } else { state.index() },
        rejected_nodes: checked.rejected,
        deployment: plan.deployment.clone(),
        alloc_index: 0,
        evals_recorded: false,
    };
    if checked.placed.is_empty() && checked.stopped.is_empty() && plan.deployment.is_none() {
        return (result, None, (0, 0));
    }
    let counts = (checked.placed.len() as u64, checked.stopped.len() as u64);
    let evals = if in_full {
        plan.evals.clone()
    } else {
        Vec::new()
    };
    result.evals_recorded = !evals.is_empty();
    let mut allocs = checked.stopped;
    allocs.extend(checked.placed);
    let entry = PlanApplyEntry {
        allocs,
        deployment: plan.deployment.clone(),
        eval_id: plan.eval_id.clone(),
        evals,
    };
    (result, Some(entry), counts)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Changes;
    use stampede_proto::{
        log_entry::Msg, AllocDesiredStatus, AllocList, Job, JobRegisterEntry, LogEntry, Node,
        NodeRegisterEntry,
    };

    fn state_with_node(cpu_mhz: u64) -> State {
        let mut s = State::default();
        let node = Node {
            id: "n1".into(),
            status: NodeStatus::Ready as i32,
            resources: Some(Resources {
                cpu_mhz,
                memory_mb: 1024,
            }),
            ..Default::default()
        };
        let job = Job {
            id: "web".into(),
            ..Default::default()
        };
        for (index, msg) in [
            Msg::NodeRegister(NodeRegisterEntry {
                node: Some(node),
                ..Default::default()
            }),
            Msg::JobRegister(JobRegisterEntry {
                job: Some(job),
                ..Default::default()
            }),
        ]
        .into_iter()
        .enumerate()
        {
            let entry = LogEntry { msg: Some(msg) };
            s.apply(index as u64 + 1, &entry, &mut Changes::default());
        }
        s
    }

    fn plan(alloc_id: &str, cpu_mhz: u64) -> Plan {
        let alloc = Allocation {
            id: alloc_id.into(),
            node_id: "n1".into(),
            job_id: "web".into(),
            desired_status: AllocDesiredStatus::Run as i32,
            resources: Some(Resources {
                cpu_mhz,
                memory_mb: 10,
            }),
            ..Default::default()
        };
        Plan {
            job_id: "web".into(),
            node_allocation: [(
                "n1".to_string(),
                AllocList {
                    allocs: vec![alloc],
                },
            )]
            .into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_checked_plan_counts_against_its_node_for_the_next_plans() {
        let mut state = state_with_node(1000);
        let (first, second) = (plan("a1", 600), plan("a2", 600));
        assert!(
            evaluate(&state, &second).rejected.is_empty(),
            "each fits alone"
        );
        let (_, entry, _) = evaluate_plan(&state, &first);
        apply_checked(&mut state, &entry.expect("the first plan places"));
        assert_eq!(evaluate(&state, &second).rejected, vec!["n1".to_string()]);
        // A plan that stops the first allocation makes room again.
        let mut stop = plan("a1", 600);
        stop.node_update = std::mem::take(&mut stop.node_allocation);
        for a in &mut stop.node_update.get_mut("n1").unwrap().allocs {
            a.desired_status = AllocDesiredStatus::Stop as i32;
        }
        let (_, entry, _) = evaluate_plan(&state, &stop);
        apply_checked(&mut state, &entry.expect("the stop is written"));
        assert!(evaluate(&state, &second).rejected.is_empty());
    }
}
