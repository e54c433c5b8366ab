//! The leader's plan applier: where the plans of every scheduler worker
//! become raft entries.
//!
//! # Design
//!
//! Workers schedule in parallel, each on its own copy of the state, so two
//! of them may well place on the same free room. They are optimistic; this
//! is where the optimism is paid for. Every plan the cluster makes passes
//! through one queue on the leader ([`PlanQueue`]) and is checked, one plan
//! at a time, against the latest state: a node whose room is gone, or that
//! went down or ineligible, has its placements refused, all of that node's
//! or none; stops are always accepted. What still fits is committed; a plan
//! refused in part answers with a refresh index, and its worker schedules
//! again once its own state has reached that index. Checking plans one at a
//! time is what keeps the cluster from placing more than a node holds,
//! however many workers there are.
//!
//! Checking one at a time must not mean committing one at a time, or the
//! cluster would place no faster than one raft round trip per plan. So the
//! applier is a pipeline of two stages, as Nomad's is: while one plan entry
//! commits, the next plans are checked, against the committed state plus
//! what the entry in flight will do ([`Unapplied`]: only the allocations
//! the next checks read, kept beside the state rather than on a copy of
//! it). At most one plan entry is in raft at a time, so a plan is never
//! written before one it was checked against. With raft batching on, the
//! plans checked while an entry is in flight share the next entry (up to
//! [`MAX_PLANS_PER_ENTRY`]). If the entry in flight fails, what was checked
//! on top of it is checked again on what did commit before it is written.
//!
//! With raft batching on, a plan's evaluation outcome (complete, or a
//! blocked evaluation for what did not fit) rides in the plan's own entry
//! when nothing was refused, one write instead of two; otherwise (or with
//! batching off, one message per entry as Nomad writes them) the worker
//! writes it itself once its plan is in. A plan is checked only if its
//! evaluation's delivery is still the worker's (its token), so a plan from
//! a worker whose delivery timed out never commits.
//!
//! # Plans in pieces
//!
//! One raft entry must stay small enough to replicate within a heartbeat:
//! a system job's plan on a quarter of a million nodes would be tens of
//! MiB. So a worker cuts a plan into pieces within its budget
//! ([`PlanBudget`](crate::control::plan_split::PlanBudget), `--plan-max-allocs`, `--plan-max-bytes`) and
//! submits them one after another; each is checked and committed here as
//! any plan is, the first carrying the deployment and the last the
//! evaluation's outcome. A piece refused in part stops the rest: the worker
//! plans again on the newer state, which holds the pieces committed. The
//! leader refuses outright a plan over the most any budget allows
//! ([`PlanBudget::over_limit`](crate::control::plan_split::PlanBudget::over_limit), checked where plans arrive), so no
//! caller can put an oversized entry in the log.

pub mod slots;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus::{Histogram, IntCounter, IntGauge, Registry};
use stampede_proto::lock;
use stampede_proto::metric_defs::{histogram, int_counter, int_gauge};
use stampede_proto::metric_names;
use stampede_proto::{
    log_entry::Msg, Allocation, BatchEntry, LogEntry, NodeStatus, Plan, PlanApplyEntry, PlanResult,
    Resources,
};
use tokio::sync::{mpsc, oneshot};

use super::broker::{BrokerError, EvalBroker};
use super::context::LeaderContext;
use super::unapplied::{add_placed, Unapplied};
use crate::model::alloc_terminal;
use crate::raft::ProposeError;
use crate::scheduler::fits;
use crate::state::State;
use slots::Places;

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
                metric_names::PLAN_QUEUE_DEPTH,
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

/// How long a committed entry may take to be applied here before the
/// applier says so in its log (it never has to wait: a write is answered
/// once applied). It waits on: the next plans are checked on that state.
const APPLIED_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Most plans written in one raft entry (with raft batching on).
const MAX_PLANS_PER_ENTRY: usize = 256;

/// Plans checked and waiting for the entry in flight, all to be written
/// together in the next one: batch `batch` of [`Unapplied`].
struct Next {
    batch: u64,
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

/// The entry in flight: its batch of [`Unapplied`], and whether it
/// committed (and is applied here).
struct InFlight {
    batch: u64,
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
    let mut unapplied = Unapplied::default();
    let mut batches = 0u64;
    loop {
        let room = next.as_ref().map_or(0, |n| n.plans.len()) < per_entry;
        tokio::select! {
            committed = async { (&mut in_flight.as_mut().expect("guarded").done).await },
                if in_flight.is_some() =>
            {
                let batch = in_flight.take().expect("guarded").batch;
                let committed = committed.unwrap_or(false);
                if committed {
                    unapplied.applied(batch);
                } else {
                    unapplied.clear();
                }
                if let Some(mut waiting) = next.take() {
                    if !committed {
                        // Checked against stops that were never written:
                        // check again on what is committed.
                        waiting = recheck(&ctx, &metrics, &mut unapplied, waiting);
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
                let waiting = next.get_or_insert_with(|| {
                    batches += 1;
                    Next {
                        batch: batches,
                        plans: Vec::new(),
                    }
                });
                let checked = check(&ctx, &broker, &metrics, &mut unapplied, waiting.batch, p);
                if let Some(accepted) = checked {
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

/// Checks one plan, after its delivery's token, and accepts it (see
/// [`accept`]). `None` when the delivery is no longer valid (its caller was
/// answered).
fn check(
    ctx: &LeaderContext,
    broker: &EvalBroker,
    m: &PlanMetrics,
    unapplied: &mut Unapplied,
    batch: u64,
    p: PendingPlan,
) -> Option<Accepted> {
    if let Err(e) = broker.check_token(&p.plan.eval_id, &p.plan.eval_token) {
        let _ = p.reply.send(Err(e.into()));
        return None;
    }
    let accepted = accept(ctx, m, unapplied, batch, p.plan, p.reply);
    m.nodes_rejected
        .inc_by(accepted.result.rejected_nodes.len() as u64);
    Some(accepted)
}

/// Checks the plans again on the committed state, after the entry they were
/// checked against failed (and `unapplied` was cleared).
fn recheck(ctx: &LeaderContext, m: &PlanMetrics, unapplied: &mut Unapplied, waiting: Next) -> Next {
    let plans = waiting
        .plans
        .into_iter()
        .map(|a| accept(ctx, m, unapplied, waiting.batch, a.plan, a.reply))
        .collect();
    Next {
        batch: waiting.batch,
        plans,
    }
}

/// Checks `plan` on the committed state with what is accepted and not yet
/// applied on top, and adds what it writes there as part of batch `batch`,
/// so the plans after it see it.
fn accept(
    ctx: &LeaderContext,
    m: &PlanMetrics,
    unapplied: &mut Unapplied,
    batch: u64,
    plan: Plan,
    reply: oneshot::Sender<Result<PlanResult, PlanError>>,
) -> Accepted {
    let start = Instant::now();
    let (result, entry, counts) = ctx
        .store
        .read(|state| evaluate_plan(state, unapplied, &plan));
    m.evaluate_seconds.observe(start.elapsed().as_secs_f64());
    if let Some(e) = &entry {
        unapplied.add(batch, e);
    }
    Accepted {
        plan,
        result,
        entry,
        counts,
        reply,
    }
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
    let (proposer, store, m) = (ctx.proposer.clone(), ctx.store.clone(), m.clone());
    let done = tokio::spawn(async move {
        let start = Instant::now();
        // Its fate, not a guess at it: an entry given up on at a deadline
        // or a loss of touch may still commit, and the plans checked next
        // without it would place again what it placed (a worker told its
        // plan failed gives its evaluation back, to be scheduled again).
        let written = proposer.write_settled(entry).await;
        m.apply_seconds.observe(start.elapsed().as_secs_f64());
        // The batch leaves what is checked on top of the state only once
        // the state holds it (a write is answered once it is applied here,
        // so this does not wait).
        let ok = match &written {
            Ok(index) => {
                while !store.wait_for_index(*index, APPLIED_WAIT).await {
                    tracing::warn!(
                        "plan entry {index} committed but not applied here after {APPLIED_WAIT:?}"
                    );
                }
                true
            }
            Err(e) => {
                tracing::warn!("plan entry not written: {e}");
                false
            }
        };
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
        batch: waiting.batch,
        done,
    })
}

/// Checks `plan` on `state`: its answer, the entry to write (none when
/// nothing is left to do) and how many allocations it places and stops.
/// The evaluation's outcome goes into the entry only when every placement
/// was accepted; the answer says whether it did.
fn evaluate_plan(
    state: &State,
    unapplied: &Unapplied,
    plan: &Plan,
) -> (PlanResult, Option<PlanApplyEntry>, (u64, u64)) {
    let checked = evaluate(state, unapplied, plan);
    for held in &checked.held_twice {
        // A plan made on a state that missed an earlier plan of its job.
        tracing::warn!(eval = plan.eval_id, "placement refused: {held}");
    }
    let in_full = checked.rejected.is_empty();
    let mut result = PlanResult {
        refresh_index: if in_full { 0 } else { state.index() },
        rejected_nodes: checked.rejected,
        deployment: plan.deployment.clone(),
        alloc_index: 0,
        evals_recorded: false,
    };
    if checked.placed.is_empty()
        && checked.updated.is_empty()
        && checked.stopped.is_empty()
        && plan.deployment.is_none()
    {
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
    allocs.extend(checked.updated);
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
    /// Allocations the state holds, updated in place where they run.
    pub updated: Vec<Allocation>,
    pub stopped: Vec<Allocation>,
    pub rejected: Vec<String>,
    /// Why placements were refused for a place of the job already held
    /// (see [`slots`]), one line each.
    pub held_twice: Vec<String>,
}

/// Checks a plan against the latest state with what is accepted and not
/// yet applied on top. Stops are always accepted; a node's placements and
/// in-place updates are accepted all together or not at all. A node with
/// only in-place updates need not be ready or eligible, nor have room: it
/// keeps running what it runs.
pub fn evaluate(state: &State, unapplied: &Unapplied, plan: &Plan) -> Checked {
    let stopped: Vec<Allocation> = plan
        .node_update
        .values()
        .flat_map(|l| l.allocs.iter().cloned())
        .collect();
    let stopped_ids: HashSet<&str> = stopped.iter().map(|a| a.id.as_str()).collect();
    let job_live = state.job(&plan.job_id).is_some_and(|j| !j.stop);
    let mut places = Places::new(state, unapplied, &plan.job_id, &stopped_ids);
    let mut placed = Vec::new();
    let mut updated = Vec::new();
    let mut rejected = Vec::new();
    let mut held_twice = Vec::new();
    let mut nodes: Vec<&String> = plan.node_allocation.keys().collect();
    nodes.sort();
    for node_id in nodes {
        let list = &plan.node_allocation[node_id].allocs;
        let (updates, new): (Vec<&Allocation>, Vec<&Allocation>) =
            list.iter().partition(|a| state.has_alloc(&a.id));
        let ok = job_live
            && updates
                .iter()
                .all(|a| in_place(state, unapplied, node_id, a))
            && (new.is_empty()
                || state.node(node_id).is_some_and(|node| {
                    node.status == NodeStatus::Ready as i32 && !node.ineligible && {
                        let stops = plan.node_update.get(node_id).map(|l| &l.allocs[..]);
                        let used =
                            usage_after(state, unapplied, node_id, stops.unwrap_or_default(), list);
                        fits(&node, &Resources::default(), &used)
                    }
                }));
        let ok = ok
            && (new.is_empty()
                || places
                    .take(node_id, &new)
                    .map_err(|held| held_twice.push(held))
                    .is_ok());
        if ok {
            placed.extend(new.into_iter().cloned());
            updated.extend(updates.into_iter().cloned());
        } else {
            rejected.push(node_id.clone());
        }
    }
    Checked {
        placed,
        updated,
        stopped,
        rejected,
        held_twice,
    }
}

/// Whether `a` can update in place the allocation of its id that the state
/// holds: still live, on node `node_id`, with the same resources, and not
/// stopped by a plan accepted since. A plan made on older state is refused
/// instead, so a stopped allocation is never brought back.
fn in_place(state: &State, unapplied: &Unapplied, node_id: &str, a: &Allocation) -> bool {
    state.alloc(&a.id).is_some_and(|stored| {
        stored.node_id == node_id && !alloc_terminal(&stored) && stored.resources == a.resources
    }) && !unapplied.stops(node_id, &a.id)
}

/// What the node would hold with this plan: its live allocations, less
/// those the plan stops there (`stops`, the plan's stops listed under the
/// node) or replaces, plus the plan's placements.
fn usage_after(
    state: &State,
    unapplied: &Unapplied,
    node_id: &str,
    stops: &[Allocation],
    placed: &[Allocation],
) -> Resources {
    let gone: Vec<&str> = stops.iter().chain(placed).map(|a| a.id.as_str()).collect();
    let mut used = unapplied.usage(state, node_id, &gone);
    add_placed(&mut used, placed);
    used
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
        let job = Job {
            id: "web".into(),
            ..Default::default()
        };
        register(&mut s, 1, ready_node("n1", cpu_mhz), job);
        s
    }

    /// A ready node of `cpu_mhz` and 1,024 MB.
    fn ready_node(id: &str, cpu_mhz: u64) -> Node {
        Node {
            id: id.into(),
            status: NodeStatus::Ready as i32,
            resources: Some(Resources {
                cpu_mhz,
                memory_mb: 1024,
            }),
            ..Default::default()
        }
    }

    /// Applies `node`'s registration at index `first` and `job`'s after it.
    fn register(state: &mut State, first: u64, node: Node, job: Job) {
        let msgs = [
            Msg::NodeRegister(NodeRegisterEntry {
                node: Some(node),
                ..Default::default()
            }),
            Msg::JobRegister(JobRegisterEntry {
                job: Some(job),
                ..Default::default()
            }),
        ];
        for (index, msg) in (first..).zip(msgs) {
            let entry = LogEntry { msg: Some(msg) };
            state.apply(index, &entry, &mut Changes::default());
        }
    }

    /// A plan placing `alloc_id` (index: its digits) on n1.
    fn plan(alloc_id: &str, cpu_mhz: u64) -> Plan {
        let index = alloc_id
            .trim_start_matches(|c: char| !c.is_ascii_digit())
            .parse()
            .unwrap_or(0);
        let alloc = Allocation {
            id: alloc_id.into(),
            node_id: "n1".into(),
            job_id: "web".into(),
            task_group: "web".into(),
            index,
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
        let mut unapplied = Unapplied::default();
        let (first, second) = (plan("a1", 600), plan("a2", 600));
        assert!(
            evaluate(&state, &unapplied, &second).rejected.is_empty(),
            "each fits alone"
        );
        let (_, entry, _) = evaluate_plan(&state, &unapplied, &first);
        let first_entry = entry.expect("the first plan places");
        unapplied.add(1, &first_entry);
        let refused = vec!["n1".to_string()];
        let checked = evaluate(&state, &unapplied, &second);
        assert_eq!(checked.rejected, refused);
        assert!(checked.held_twice.is_empty(), "for room, not its place");
        // Committed and applied: the state holds it, and it still counts
        // once, not twice, whether or not its batch has left yet.
        state.apply(
            3,
            &LogEntry {
                msg: Some(Msg::PlanApply(first_entry)),
            },
            &mut Changes::default(),
        );
        assert_eq!(evaluate(&state, &unapplied, &second).rejected, refused);
        assert!(
            evaluate(&state, &unapplied, &plan("a1", 600))
                .rejected
                .is_empty(),
            "a plan that replaces a1 does not count it twice"
        );
        unapplied.applied(1);
        assert_eq!(evaluate(&state, &unapplied, &second).rejected, refused);
        // A plan that stops the first allocation makes room again, before
        // its entry is applied.
        let mut stop = plan("a1", 600);
        stop.node_update = std::mem::take(&mut stop.node_allocation);
        for a in &mut stop.node_update.get_mut("n1").unwrap().allocs {
            a.desired_status = AllocDesiredStatus::Stop as i32;
        }
        let (_, entry, _) = evaluate_plan(&state, &unapplied, &stop);
        unapplied.add(2, &entry.expect("the stop is written"));
        assert!(evaluate(&state, &unapplied, &second).rejected.is_empty());
        // The stop's entry failed: it is forgotten, and a1 holds the node.
        unapplied.clear();
        assert_eq!(evaluate(&state, &unapplied, &second).rejected, refused);
    }

    #[test]
    fn an_in_place_update_needs_no_room_but_a_live_allocation() {
        let mut state = state_with_node(1000);
        let (_, entry, _) = evaluate_plan(&state, &Unapplied::default(), &plan("a1", 600));
        let apply = |state: &mut State, index, msg| {
            state.apply(index, &LogEntry { msg: Some(msg) }, &mut Changes::default())
        };
        apply(&mut state, 3, Msg::PlanApply(entry.unwrap()));
        // The node is ineligible now, and full: a1 moves onto a new
        // version where it runs all the same.
        let node = Node {
            ineligible: true,
            ..ready_node("n1", 500)
        };
        apply(
            &mut state,
            4,
            Msg::NodeRegister(NodeRegisterEntry {
                node: Some(node),
                ..Default::default()
            }),
        );
        let mut unapplied = Unapplied::default();
        let mut update = plan("a1", 600);
        update.node_allocation.get_mut("n1").unwrap().allocs[0].job_version = 1;
        let checked = evaluate(&state, &unapplied, &update);
        assert!(checked.rejected.is_empty());
        assert_eq!((checked.updated.len(), checked.placed.len()), (1, 0));
        // Beside a new placement, the node's ineligibility refuses both.
        let mut both = update.clone();
        let new = plan("a2", 10).node_allocation["n1"].allocs[0].clone();
        both.node_allocation.get_mut("n1").unwrap().allocs.push(new);
        assert_eq!(evaluate(&state, &unapplied, &both).rejected, ["n1"]);
        // Stopped by a plan not yet applied: never brought back.
        let mut stop = plan("a1", 600);
        stop.node_update = std::mem::take(&mut stop.node_allocation);
        stop.node_update.get_mut("n1").unwrap().allocs[0].desired_status =
            AllocDesiredStatus::Stop as i32;
        let (_, entry, _) = evaluate_plan(&state, &unapplied, &stop);
        unapplied.add(1, &entry.expect("the stop is written"));
        assert_eq!(evaluate(&state, &unapplied, &update).rejected, ["n1"]);
        // Nor once it is applied.
        let stopped = entry_of(&state, &stop);
        apply(&mut state, 5, Msg::PlanApply(stopped));
        unapplied.applied(1);
        assert_eq!(evaluate(&state, &unapplied, &update).rejected, ["n1"]);
    }

    /// The entry the plan applier makes of `plan` on `state`.
    fn entry_of(state: &State, plan: &Plan) -> PlanApplyEntry {
        evaluate_plan(state, &Unapplied::default(), plan).1.unwrap()
    }

    #[test]
    fn a_later_batch_keeps_an_allocation_when_an_earlier_one_is_applied() {
        let state = state_with_node(1000);
        let mut unapplied = Unapplied::default();
        let (_, placed, _) = evaluate_plan(&state, &unapplied, &plan("a1", 600));
        unapplied.add(1, &placed.expect("places"));
        // Batch 2 changes a1 again (a new version in place) before batch 1
        // is applied; batch 1's leaving must not take batch 2's with it.
        let (_, again, _) = evaluate_plan(&state, &unapplied, &plan("a1", 600));
        unapplied.add(2, &again.expect("replaces"));
        unapplied.applied(1);
        assert_eq!(
            evaluate(&state, &unapplied, &plan("a2", 600)).rejected,
            vec!["n1".to_string()]
        );
    }

    /// `plan` with `alloc` (on n1) stopped too.
    fn stopping(mut plan: Plan, alloc: &str) -> Plan {
        let mut stop = self::plan(alloc, 0).node_allocation.remove("n1").unwrap();
        stop.allocs[0].desired_status = AllocDesiredStatus::Stop as i32;
        plan.node_update.insert("n1".into(), stop);
        plan
    }

    fn apply(state: &mut State, index: u64, entry: PlanApplyEntry) {
        let entry = LogEntry {
            msg: Some(Msg::PlanApply(entry)),
        };
        state.apply(index, &entry, &mut Changes::default());
    }

    #[test]
    fn a_place_of_the_job_already_held_is_refused_until_its_holder_stops() {
        let mut state = state_with_node(10_000);
        let mut unapplied = Unapplied::default();
        let first = entry_of(&state, &plan("a1", 100));
        unapplied.add(1, &first);
        // Index 1 again, from a worker that scheduled without the first.
        let again = plan("b1", 100);
        let checked = evaluate(&state, &unapplied, &again);
        assert_eq!(checked.rejected, ["n1"]);
        assert_eq!(checked.held_twice.len(), 1);
        assert!(
            checked.held_twice[0].contains("web web[1]") && checked.held_twice[0].contains("a1"),
            "{:?}",
            checked.held_twice
        );
        assert!(
            evaluate(&state, &unapplied, &plan("b2", 100))
                .rejected
                .is_empty(),
            "another index is free"
        );
        // Applied, a1 holds it all the same.
        apply(&mut state, 3, first);
        unapplied.applied(1);
        assert_eq!(evaluate(&state, &unapplied, &again).rejected, ["n1"]);
        // A replacement stops a1 in the same plan.
        let replacement = stopping(plan("b1", 100), "a1");
        assert!(evaluate(&state, &unapplied, &replacement)
            .rejected
            .is_empty());
        // Or a plan accepted before it stopped a1.
        let stop = stopping(
            Plan {
                job_id: "web".into(),
                ..Default::default()
            },
            "a1",
        );
        unapplied.add(2, &entry_of(&state, &stop));
        assert!(evaluate(&state, &unapplied, &again).rejected.is_empty());
        // Two placements of one index in one plan: the second is refused.
        let mut twice = plan("c3", 100);
        let mut other = twice.node_allocation["n1"].allocs[0].clone();
        other.id = "d3".into();
        twice
            .node_allocation
            .get_mut("n1")
            .unwrap()
            .allocs
            .push(other);
        assert_eq!(evaluate(&state, &unapplied, &twice).rejected, ["n1"]);
    }

    #[test]
    fn a_canary_shares_its_index_only_with_allocations_of_other_versions() {
        let mut state = state_with_node(10_000);
        let a1 = entry_of(&state, &plan("a1", 100));
        apply(&mut state, 3, a1);
        let canary = |id: &str, version: u64| {
            let mut p = plan(id, 100);
            let a = &mut p.node_allocation.get_mut("n1").unwrap().allocs[0];
            (a.canary, a.job_version) = (true, version);
            p
        };
        let unapplied = Unapplied::default();
        let first = canary("c1", 1);
        assert!(evaluate(&state, &unapplied, &first).rejected.is_empty());
        let c1 = entry_of(&state, &first);
        apply(&mut state, 4, c1);
        assert_eq!(
            evaluate(&state, &unapplied, &canary("d1", 1)).rejected,
            ["n1"],
            "a second canary of version 1 at index 1"
        );
        assert!(
            evaluate(&state, &unapplied, &canary("d1", 2))
                .rejected
                .is_empty(),
            "a canary of the next version"
        );
        assert_eq!(
            evaluate(&state, &unapplied, &plan("e1", 100)).rejected,
            ["n1"],
            "a plain allocation beside the canary"
        );
    }

    #[test]
    fn a_system_job_holds_one_place_per_node() {
        let mut state = state_with_node(10_000);
        let sys = Job {
            id: "web".into(),
            r#type: stampede_proto::JobType::System as i32,
            ..Default::default()
        };
        register(&mut state, 3, ready_node("n2", 10_000), sys);
        // Index 0 on both nodes, as a system job places.
        let mut both = plan("a0", 100);
        let mut on_n2 = both.node_allocation["n1"].allocs[0].clone();
        (on_n2.id, on_n2.node_id) = ("b0".into(), "n2".into());
        both.node_allocation.insert(
            "n2".into(),
            AllocList {
                allocs: vec![on_n2],
            },
        );
        let unapplied = Unapplied::default();
        assert!(evaluate(&state, &unapplied, &both).rejected.is_empty());
        let placed = entry_of(&state, &both);
        apply(&mut state, 5, placed);
        assert_eq!(
            evaluate(&state, &unapplied, &plan("c0", 100)).rejected,
            ["n1"]
        );
    }
}
