//! Calls only the leader can answer — broker, plans, evaluation updates,
//! heartbeats and client allocation updates — for gRPC handlers and
//! in-process workers alike: answered here when this server leads, sent on
//! to the leader otherwise.

use std::sync::Arc;
use std::time::Duration;

use stampede_proto::{
    log_entry::Msg, Empty, EvalAckRequest, EvalDequeueReply, EvalDequeueRequest, EvalStatus,
    EvalUpdateRequest, Evaluation, JobType, LogEntry, NodeStatus, NodeUpdateAllocRequest,
    NodeUpdateStatusReply, NodeUpdateStatusRequest, PlanSubmitReply, PlanSubmitRequest, WriteReply,
};
use tonic::Status;

use crate::broker::{NackOutcome, CANCEL_BATCH};
use crate::control_plane::{forwarded, ControlPlane, Route};

/// Longest a dequeue may wait for work.
const MAX_DEQUEUE_WAIT: Duration = Duration::from_secs(30);

impl ControlPlane {
    pub async fn dequeue(
        &self,
        req: EvalDequeueRequest,
        fwd: bool,
    ) -> Result<EvalDequeueReply, Status> {
        if let Route::Leader(ch) = self.route(fwd)? {
            return Ok(Self::eval_client(ch)
                .dequeue(forwarded(req))
                .await?
                .into_inner());
        }
        let schedulers: Vec<JobType> = req
            .schedulers
            .iter()
            .filter_map(|t| JobType::try_from(*t).ok())
            .filter(|t| *t != JobType::Unspecified)
            .collect();
        if schedulers.is_empty() {
            return Err(Status::invalid_argument(
                "schedulers: name at least one of service, batch, system",
            ));
        }
        let timeout = Duration::from_millis(req.timeout_ms).min(MAX_DEQUEUE_WAIT);
        match self.broker().dequeue(&schedulers, timeout).await? {
            None => Ok(EvalDequeueReply::default()),
            Some((eval, token)) => {
                // The worker must see the evaluation and the job's latest plan.
                let state = self.store.snapshot();
                let wait_index = eval.modify_index.max(state.job_alloc_index(&eval.job_id));
                Ok(EvalDequeueReply {
                    eval: Some(Evaluation::clone(&eval)),
                    token,
                    wait_index,
                })
            }
        }
    }

    /// Acks on the leader; an ack may leave older evaluations of the job
    /// cancelable, and a batch of them is then written in the background, so
    /// cancelations keep pace with the schedulers without delaying the reply.
    pub async fn ack(self: &Arc<Self>, req: EvalAckRequest, fwd: bool) -> Result<Empty, Status> {
        match self.route(fwd)? {
            Route::Leader(ch) => Ok(Self::eval_client(ch)
                .ack(forwarded(req))
                .await?
                .into_inner()),
            Route::Local => {
                self.broker().ack(&req.eval_id, &req.token)?;
                if self.broker().cancelable_len() > 0 {
                    let cp = self.clone();
                    tokio::spawn(async move { cp.cancel_batch().await });
                }
                Ok(Empty {})
            }
        }
    }

    /// Leader: writes up to [`CANCEL_BATCH`] cancelable evaluations as
    /// canceled in one raft entry; returns how many. On failure they go back
    /// to the broker for a later try.
    pub async fn cancel_batch(&self) -> usize {
        let batch = self.broker().take_cancelable(CANCEL_BATCH);
        if batch.is_empty() {
            return 0;
        }
        let evals = batch
            .iter()
            .map(|e| Evaluation {
                status: EvalStatus::Canceled as i32,
                status_description: "canceled after a newer evaluation of the job was processed"
                    .into(),
                ..Evaluation::clone(e)
            })
            .collect();
        let entry = LogEntry {
            msg: Some(Msg::EvalUpdate(stampede_proto::EvalUpdateEntry { evals })),
        };
        // Only from the leader: another leader's broker holds these evaluations.
        match self.proposer.write_local(entry).await {
            Ok(_) => {
                let m = &self.broker().metrics;
                m.cancelled.inc_by(batch.len() as u64);
                m.cancel_batches.inc();
                batch.len()
            }
            Err(e) => {
                tracing::warn!("canceling {} evaluations: {e}", batch.len());
                self.broker().restore_cancelable(batch);
                0
            }
        }
    }

    pub async fn nack(&self, req: EvalAckRequest, fwd: bool) -> Result<Empty, Status> {
        match self.route(fwd)? {
            Route::Leader(ch) => Ok(Self::eval_client(ch)
                .nack(forwarded(req))
                .await?
                .into_inner()),
            Route::Local => {
                if let NackOutcome::Failed(eval) =
                    self.broker().nack(&req.eval_id, &req.token, &req.reason)?
                {
                    let failed = Evaluation {
                        status: EvalStatus::Failed as i32,
                        status_description: "delivery limit reached".into(),
                        ..Evaluation::clone(&eval)
                    };
                    self.write_evals(vec![failed]).await?;
                }
                Ok(Empty {})
            }
        }
    }

    /// A worker records how an evaluation ended; the first evaluation must be
    /// the one its token delivers.
    pub async fn update_evals(
        &self,
        req: EvalUpdateRequest,
        fwd: bool,
    ) -> Result<WriteReply, Status> {
        match self.route(fwd)? {
            Route::Leader(ch) => Ok(Self::eval_client(ch)
                .update(forwarded(req))
                .await?
                .into_inner()),
            Route::Local => {
                let first = req.evals.first().ok_or_else(|| {
                    Status::invalid_argument("evals: give at least one evaluation")
                })?;
                self.broker().check_token(&first.id, &req.token)?;
                for (i, e) in req.evals.iter().enumerate() {
                    crate::validate::id(&format!("evals[{i}].id"), &e.id)?;
                    crate::validate::id(&format!("evals[{i}].job_id"), &e.job_id)?;
                }
                let entry = LogEntry {
                    msg: Some(Msg::EvalUpdate(stampede_proto::EvalUpdateEntry {
                        evals: req.evals,
                    })),
                };
                let index = self.proposer.write_local(entry).await?;
                Ok(WriteReply { index })
            }
        }
    }

    pub async fn submit_plan(
        &self,
        req: PlanSubmitRequest,
        fwd: bool,
    ) -> Result<PlanSubmitReply, Status> {
        match self.route(fwd)? {
            Route::Leader(ch) => Ok(Self::plan_client(ch)
                .submit(forwarded(req))
                .await?
                .into_inner()),
            Route::Local => {
                let plan = req
                    .plan
                    .ok_or_else(|| Status::invalid_argument("plan: is required"))?;
                let result = self.plans.submit(plan).await?;
                Ok(PlanSubmitReply {
                    result: Some(result),
                })
            }
        }
    }

    /// A heartbeat (status READY) or another status change from a node.
    pub async fn update_status(
        self: &Arc<Self>,
        req: NodeUpdateStatusRequest,
        fwd: bool,
    ) -> Result<NodeUpdateStatusReply, Status> {
        crate::validate::id("node_id", &req.node_id)?;
        let status = NodeStatus::try_from(req.status)
            .ok()
            .filter(|s| *s != NodeStatus::Unspecified)
            .ok_or_else(|| Status::invalid_argument("status: give READY, INITIALIZING or DOWN"))?;
        match self.route(fwd)? {
            Route::Leader(ch) => Ok(Self::node_client(ch)
                .update_status(forwarded(req))
                .await?
                .into_inner()),
            Route::Local => {
                let node = self.store.snapshot().node(&req.node_id).ok_or_else(|| {
                    Status::not_found(format!(
                        "node_id: no node {:?} is registered; register it first",
                        req.node_id
                    ))
                })?;
                let mut index = 0;
                if node.status != status as i32 {
                    index = self.set_node_status(&req.node_id, status).await?;
                }
                let ttl = match status {
                    NodeStatus::Ready => self.hub.heartbeats.reset(&req.node_id),
                    _ => {
                        self.hub.heartbeats.remove(&req.node_id);
                        Some(Duration::ZERO)
                    }
                }
                .ok_or_else(|| Status::unavailable("leadership changed; retry"))?;
                Ok(NodeUpdateStatusReply {
                    heartbeat_ttl_ms: ttl.as_millis() as u64,
                    index,
                })
            }
        }
    }

    pub async fn update_alloc(
        &self,
        req: NodeUpdateAllocRequest,
        fwd: bool,
    ) -> Result<WriteReply, Status> {
        if req.allocs.is_empty() {
            return Err(Status::invalid_argument(
                "allocs: give at least one allocation update",
            ));
        }
        let state = self.store.snapshot();
        for (i, a) in req.allocs.iter().enumerate() {
            crate::validate::id(&format!("allocs[{i}].id"), &a.id)?;
            if a.client_status == 0 {
                return Err(Status::invalid_argument(format!(
                    "allocs[{i}].client_status: is required"
                )));
            }
            if state.alloc(&a.id).is_none() {
                return Err(Status::not_found(format!(
                    "allocs[{i}].id: no allocation {:?}",
                    a.id
                )));
            }
        }
        match self.route(fwd)? {
            Route::Leader(ch) => Ok(Self::node_client(ch)
                .update_alloc(forwarded(req))
                .await?
                .into_inner()),
            Route::Local => {
                let index = self.alloc_updates.submit(req.allocs).await?;
                Ok(WriteReply { index })
            }
        }
    }
}
