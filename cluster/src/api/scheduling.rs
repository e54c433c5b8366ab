//! The scheduling API between servers: workers on every server dequeue
//! evaluations from the leader's broker, ack or nack them, record their
//! outcome and submit plans. A call that reaches a follower is sent on to the
//! leader (see `crate::control::routing`). Reading one evaluation is here
//! too, for operators and tests.

use stampede_proto::eval_service_server::EvalService;
use stampede_proto::plan_service_server::PlanService;
use stampede_proto::*;
use tonic::{Request, Response, Status};

use super::{parker_of, Api, Reply};
use crate::control::is_forwarded;
use crate::model::validate;
use crate::state::WatchKey;

#[tonic::async_trait]
impl EvalService for Api {
    async fn get(&self, req: Request<EvalGetRequest>) -> Reply<EvalGetReply> {
        let parker = parker_of(&req);
        let req = req.into_inner();
        validate::id("eval_id", &req.eval_id)?;
        let id = req.eval_id.clone();
        let (eval, index) = self
            .query(
                &parker,
                req.query.as_ref(),
                WatchKey::Eval(id.clone()),
                |s| match s.eval(&id) {
                    Some(e) => e.modify_index,
                    None => s.indexes().evals.max(1),
                },
                |s| s.eval(&id).map(|e| Evaluation::clone(&e)),
            )
            .await?;
        match eval {
            Some(eval) => Ok(Response::new(EvalGetReply {
                eval: Some(eval),
                index,
            })),
            None => Err(Status::not_found(format!("eval_id: no evaluation {id:?}"))),
        }
    }

    async fn dequeue(&self, req: Request<EvalDequeueRequest>) -> Reply<EvalDequeueReply> {
        let fwd = is_forwarded(&req);
        Ok(Response::new(
            self.calls.dequeue(req.into_inner(), fwd).await?,
        ))
    }

    async fn ack(&self, req: Request<EvalAckRequest>) -> Reply<Empty> {
        let fwd = is_forwarded(&req);
        self.calls.ack(req.into_inner(), fwd).await?;
        Ok(Response::new(Empty {}))
    }

    async fn nack(&self, req: Request<EvalAckRequest>) -> Reply<Empty> {
        let fwd = is_forwarded(&req);
        self.calls.nack(req.into_inner(), fwd).await?;
        Ok(Response::new(Empty {}))
    }

    async fn update(&self, req: Request<EvalUpdateRequest>) -> Reply<WriteReply> {
        let fwd = is_forwarded(&req);
        let index = self.calls.update_evals(req.into_inner(), fwd).await?;
        Ok(Response::new(WriteReply { index }))
    }

    async fn reap(&self, req: Request<EvalReapRequest>) -> Reply<WriteReply> {
        let fwd = is_forwarded(&req);
        let index = self.calls.reap(req.into_inner(), fwd).await?;
        Ok(Response::new(WriteReply { index }))
    }

    async fn force_gc(&self, req: Request<Empty>) -> Reply<ForceGcReply> {
        let eval_id = self.calls.force_gc(is_forwarded(&req)).await?;
        Ok(Response::new(ForceGcReply { eval_id }))
    }
}

#[tonic::async_trait]
impl PlanService for Api {
    async fn submit(&self, req: Request<PlanSubmitRequest>) -> Reply<PlanSubmitReply> {
        let fwd = is_forwarded(&req);
        let plan = req
            .into_inner()
            .plan
            .ok_or_else(|| Status::invalid_argument("plan: is required"))?;
        let result = self.calls.submit_plan(plan, fwd).await?;
        Ok(Response::new(PlanSubmitReply {
            result: Some(result),
        }))
    }
}
