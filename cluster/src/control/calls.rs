//! Calls only the leader can answer — the broker, plans, evaluation updates,
//! heartbeats and client allocation updates — for gRPC handlers and
//! in-process workers alike: answered here when this server leads, sent on
//! to the leader otherwise (see [`super::routing`]).

use std::sync::Arc;
use std::time::Duration;

use stampede_proto::eval_reap_request::Collect;
use stampede_proto::log_entry::Msg;
use stampede_proto::{
    Empty, EvalAckRequest, EvalDequeueReply, EvalDequeueRequest, EvalReapRequest,
    EvalUpdateRequest, Evaluation, JobStage, LogEntry, NodeStatus, NodeUpdateAllocRequest,
    NodeUpdateStatusReply, NodeUpdateStatusRequest, Plan, PlanResult, PlanSubmitRequest,
};

use super::error::ControlError;
use super::leader::broker::{EvalBroker, NackOutcome, NackReason};
use super::leader::gc;
use super::leader::heartbeat::Heartbeats;
use super::leader::{delivery_limit_reached, LeaderContext, LeaderParts};
use super::plan_split::PlanBudget;
use super::routing::{eval_client, forwarded, node_client, plan_client, Route, Router};
use super::update_relay::UpdateRelay;
use super::worker::Leader;
use crate::model::identity::{self, NodeDenied, Vouched};
use crate::model::{is_core, validate};
use crate::state::State;

/// Longest a dequeue may wait for work.
const MAX_DEQUEUE_WAIT: Duration = Duration::from_secs(30);

/// The leader-only calls of one server. Cheap to clone.
#[derive(Clone)]
pub struct LeaderCalls(Arc<Inner>);

struct Inner {
    /// Where each call goes.
    router: Router,
    /// The state to check requests against, and the local proposer.
    ctx: LeaderContext,
    broker: Arc<EvalBroker>,
    heartbeats: Arc<Heartbeats>,
    plans: Arc<super::leader::plan_apply::PlanQueue>,
    alloc_updates: Arc<super::leader::alloc_updates::AllocUpdates>,
    /// Client updates on their way to the leader while this server follows.
    relay: UpdateRelay,
}

impl LeaderCalls {
    pub fn new(router: Router, ctx: LeaderContext, parts: &LeaderParts) -> Self {
        Self(Arc::new(Inner {
            router,
            ctx,
            broker: parts.broker.clone(),
            heartbeats: parts.heartbeats.clone(),
            plans: parts.plans.clone(),
            alloc_updates: parts.alloc_updates.clone(),
            relay: UpdateRelay::start(),
        }))
    }

    /// Hands out an evaluation and its delivery token; `fwd` says whether
    /// another server already sent this call on.
    pub async fn dequeue(
        &self,
        req: EvalDequeueRequest,
        fwd: bool,
    ) -> Result<EvalDequeueReply, ControlError> {
        let schedulers = validate::schedulers(&req.schedulers)?;
        if let Route::Leader(to) = self.0.router.route_held(fwd).await? {
            let mut client = eval_client(to.channel());
            return Ok(to.call(client.dequeue(forwarded(req))).await?.into_inner());
        }
        let timeout = Duration::from_millis(req.timeout_ms).min(MAX_DEQUEUE_WAIT);
        match self.0.broker.dequeue(&schedulers, timeout).await? {
            None => Ok(EvalDequeueReply::default()),
            Some((eval, token)) => {
                // The worker must see the evaluation and the job's latest plan.
                let store = &self.0.ctx.store;
                let wait_index = eval
                    .modify_index
                    .max(store.read(|s| s.job_alloc_index(&eval.job_id)));
                let mut eval = Evaluation::clone(&eval);
                let stages = &self.0.ctx.stages;
                if stages.on() {
                    let enqueued_us = self.0.broker.enqueued_us(&eval.id);
                    eval.times.get_or_insert_default().enqueued_us = enqueued_us;
                    // The write that made it pending → ready → taken.
                    let made_pending = store.applied_at_us(eval.modify_index).unwrap_or(0);
                    let now = stampede_proto::unix_us();
                    stages.observe_between(JobStage::Enqueue, made_pending, enqueued_us);
                    stages.observe_between(JobStage::BrokerWait, enqueued_us, now);
                }
                Ok(EvalDequeueReply {
                    eval: Some(eval),
                    token,
                    wait_index,
                })
            }
        }
    }

    /// Acks on the leader; an ack may leave older evaluations of the job
    /// cancelable, and a batch of them is then written in the background, so
    /// cancelations keep pace with the schedulers without delaying the reply.
    pub async fn ack(&self, req: EvalAckRequest, fwd: bool) -> Result<(), ControlError> {
        validate::delivery(&req.eval_id, &req.token)?;
        match self.0.router.route_held(fwd).await? {
            Route::Leader(to) => {
                to.call(eval_client(to.channel()).ack(forwarded(req)))
                    .await?;
            }
            Route::Local => {
                self.0.broker.ack(&req.eval_id, &req.token)?;
                if self.0.broker.cancelable_len() > 0 {
                    let (ctx, broker) = (self.0.ctx.clone(), self.0.broker.clone());
                    tokio::spawn(async move { ctx.cancel_batch(&broker).await });
                }
            }
        }
        Ok(())
    }

    pub async fn nack(&self, req: EvalAckRequest, fwd: bool) -> Result<(), ControlError> {
        validate::delivery(&req.eval_id, &req.token)?;
        match self.0.router.route_held(fwd).await? {
            Route::Leader(to) => {
                to.call(eval_client(to.channel()).nack(forwarded(req)))
                    .await?;
            }
            Route::Local => {
                let reason = NackReason::parse(&req.reason);
                if let NackOutcome::Failed(eval) =
                    self.0.broker.nack(&req.eval_id, &req.token, reason)?
                {
                    if is_core(&eval) {
                        // Only the broker knew it; the next timer makes another.
                        return Ok(());
                    }
                    self.0
                        .ctx
                        .write_evals(vec![delivery_limit_reached(&eval)])
                        .await?;
                }
            }
        }
        Ok(())
    }

    /// A worker records how an evaluation ended; the first evaluation must be
    /// the one its token delivers. Returns the entry's index.
    pub async fn update_evals(
        &self,
        req: EvalUpdateRequest,
        fwd: bool,
    ) -> Result<u64, ControlError> {
        let first = req
            .evals
            .first()
            .ok_or_else(|| ControlError::Invalid("evals: give at least one evaluation".into()))?;
        validate::delivery(&first.id, &req.token)?;
        for (i, e) in req.evals.iter().enumerate() {
            validate::eval(&format!("evals[{i}]"), e)?;
        }
        match self.0.router.route_held(fwd).await? {
            Route::Leader(to) => Ok(to
                .call(eval_client(to.channel()).update(forwarded(req)))
                .await?
                .into_inner()
                .index),
            Route::Local => {
                self.0.broker.check_token(&first.id, &req.token)?;
                Ok(self.0.ctx.write_evals(req.evals).await?)
            }
        }
    }

    /// A core evaluation's garbage collection write, made on the leader
    /// while the evaluation's delivery holds. Returns the entry's index.
    pub async fn reap(&self, req: EvalReapRequest, fwd: bool) -> Result<u64, ControlError> {
        validate::delivery(&req.eval_id, &req.token)?;
        let collect = validate::reap(req.collect.as_ref())?;
        match self.0.router.route_held(fwd).await? {
            Route::Leader(to) => Ok(to
                .call(eval_client(to.channel()).reap(forwarded(req)))
                .await?
                .into_inner()
                .index),
            Route::Local => {
                self.0.broker.check_token(&req.eval_id, &req.token)?;
                Ok(self.0.ctx.proposer.write(gc_entry(collect.clone())).await?)
            }
        }
    }

    /// Queues a forced garbage collection on the leader; returns the core
    /// evaluation's id.
    pub async fn force_gc(&self, fwd: bool) -> Result<String, ControlError> {
        match self.0.router.route_held(fwd).await? {
            Route::Leader(to) => Ok(to
                .call(eval_client(to.channel()).force_gc(forwarded(Empty {})))
                .await?
                .into_inner()
                .eval_id),
            Route::Local => Ok(gc::force(&self.0.ctx.store, &self.0.broker)?),
        }
    }

    /// Queues a plan for the leader's plan applier and waits for its result.
    pub async fn submit_plan(&self, plan: Plan, fwd: bool) -> Result<PlanResult, ControlError> {
        validate::plan(&plan)?;
        if let Some(over) = PlanBudget::over_limit(&plan) {
            return Err(ControlError::TooLarge(over));
        }
        match self.0.router.route_held(fwd).await? {
            Route::Leader(to) => Ok(to
                .call(
                    plan_client(to.channel())
                        .submit(forwarded(PlanSubmitRequest { plan: Some(plan) })),
                )
                .await?
                .into_inner()
                .result
                .unwrap_or_default()),
            Route::Local => Ok(self.0.plans.submit(plan).await?),
        }
    }

    /// A heartbeat (status READY) or another status change from a node.
    pub async fn update_status(
        &self,
        req: NodeUpdateStatusRequest,
        fwd: bool,
    ) -> Result<NodeUpdateStatusReply, ControlError> {
        validate::id("node_id", &req.node_id)?;
        let status = validate::node_status("status", req.status)?;
        identity::secret_field("secret_id", &req.secret_id)?;
        match self.0.router.route_held(fwd).await? {
            Route::Leader(to) => Ok(to
                .call(node_client(to.channel()).update_status(forwarded(req)))
                .await?
                .into_inner()),
            Route::Local => {
                let mut state = self.0.ctx.store.snapshot();
                if !state.has_node(&req.node_id) {
                    // Refused only on current state: this leader may be behind.
                    drop(state);
                    self.0.ctx.proposer.read_barrier().await?;
                    state = self.0.ctx.store.snapshot();
                }
                let node = state.node(&req.node_id).ok_or_else(|| {
                    ControlError::NotFound(format!(
                        "node_id: no node {:?} is registered; register it first",
                        req.node_id
                    ))
                })?;
                // Checked where the status is written: a follower's state
                // may not have the node's registration yet.
                identity::check(node.secret.as_ref(), &node.id, &req.secret_id)?;
                drop(state);
                let mut index = 0;
                if node.status != status as i32 {
                    index = self.0.ctx.set_node_status(&req.node_id, status).await?;
                }
                let ttl = match status {
                    NodeStatus::Ready => self.0.heartbeats.reset(&req.node_id),
                    _ => {
                        self.0.heartbeats.remove(&req.node_id);
                        Some(Duration::ZERO)
                    }
                }
                .ok_or_else(|| ControlError::Unavailable("leadership changed; retry".into()))?;
                Ok(NodeUpdateStatusReply {
                    heartbeat_ttl_ms: ttl.as_millis() as u64,
                    index,
                })
            }
        }
    }

    /// Client allocation updates, batched into the leader's next entry;
    /// returns that entry's index.
    pub async fn update_alloc(
        &self,
        req: NodeUpdateAllocRequest,
        fwd: bool,
    ) -> Result<u64, ControlError> {
        if req.allocs.is_empty() {
            return Err(ControlError::Invalid(
                "allocs: give at least one allocation update".into(),
            ));
        }
        for (i, a) in req.allocs.iter().enumerate() {
            // The position is written out only for an error.
            if validate::alloc_update("allocs", a).is_err() {
                validate::alloc_update(&format!("allocs[{i}]"), a)?;
            }
        }
        let vouched = identity::secrets_form(&req.secrets)?;
        // Where the call goes; an error (a forwarded call here, not the
        // leader) only after the caller's identity is checked.
        let route = self.0.router.route_held(fwd).await;
        // Read under the lock, not from a copy: a copy of the state alive
        // while entries apply makes each apply copy what it touches. Checked
        // on every server the call passes, the leader too: any caller may
        // mark a call forwarded.
        let leader_here = matches!(route, Ok(Route::Local));
        let check = || {
            self.0
                .ctx
                .store
                .read(|state| updates_vouched_for(state, &req, &vouched, leader_here))
        };
        if let Err(e) = check() {
            if !matches!(e, ControlError::NotFound(_)) {
                return Err(e);
            }
            // Refused only on current state: this leader may be behind.
            self.0.ctx.proposer.read_barrier().await?;
            check()?;
        }
        match route? {
            Route::Leader(to) => Ok(to
                .call(self.0.relay.send(to.channel(), req.allocs, req.secrets))
                .await?),
            Route::Local => Ok(self.0.alloc_updates.submit(req.allocs).await?),
        }
    }
}

/// Whether every allocation of `req` exists and `req.secrets` holds the
/// secret of the node it was placed on (`vouched`: those secrets, hashed),
/// each secret matching its node. A follower (`leader_here` false) that has
/// not applied a node or an allocation yet leaves it to the leader, which
/// checks the call again: the node may have learnt of it from a server
/// further ahead.
fn updates_vouched_for(
    state: &State,
    req: &NodeUpdateAllocRequest,
    vouched: &Vouched<'_>,
    leader_here: bool,
) -> Result<(), ControlError> {
    for (node_id, hash) in &vouched.hashes {
        let Some(stored) = state.node_registration(node_id) else {
            if !leader_here {
                continue;
            }
            return Err(ControlError::NotFound(format!(
                "secrets: no node {node_id:?} is registered"
            )));
        };
        identity::check_hash(stored, node_id, hash)?;
    }
    for (i, a) in req.allocs.iter().enumerate() {
        let Some(node) = state.alloc_node(&a.id) else {
            if !leader_here {
                continue;
            }
            return Err(ControlError::NotFound(format!(
                "allocs[{i}].id: no allocation {:?}",
                a.id
            )));
        };
        if !vouched.nodes.contains(node) {
            return Err(NodeDenied::Unvouched {
                index: i,
                node: node.to_string(),
            }
            .into());
        }
    }
    Ok(())
}

/// Workers call the same routed calls as the gRPC handlers, as callers on
/// this server (never forwarded yet).
impl Leader for LeaderCalls {
    async fn dequeue(&self, req: EvalDequeueRequest) -> Result<EvalDequeueReply, ControlError> {
        LeaderCalls::dequeue(self, req, false).await
    }

    async fn ack(&self, req: EvalAckRequest) -> Result<(), ControlError> {
        LeaderCalls::ack(self, req, false).await
    }

    async fn nack(&self, req: EvalAckRequest) -> Result<(), ControlError> {
        LeaderCalls::nack(self, req, false).await
    }

    async fn submit_plan(&self, plan: Plan) -> Result<PlanResult, ControlError> {
        LeaderCalls::submit_plan(self, plan, false).await
    }

    async fn update_evals(&self, req: EvalUpdateRequest) -> Result<u64, ControlError> {
        LeaderCalls::update_evals(self, req, false).await
    }

    async fn reap(&self, req: EvalReapRequest) -> Result<u64, ControlError> {
        LeaderCalls::reap(self, req, false).await
    }

    async fn leadership_moved(&self) {
        self.0.router.leadership_moved().await
    }
}

/// The raft entry of a garbage collection write.
fn gc_entry(collect: Collect) -> LogEntry {
    LogEntry {
        msg: Some(match collect {
            Collect::Evals(e) => Msg::GcEvals(e),
            Collect::Jobs(e) => Msg::GcJobs(e),
            Collect::Deployments(e) => Msg::GcDeployments(e),
            Collect::Nodes(e) => Msg::GcNodes(e),
        }),
    }
}
