//! The gRPC services one `--rpc` address serves: raft between servers, and
//! the public API. Handlers are thin: they check the request and call the
//! control plane.

use std::sync::Arc;

use serde::{de::DeserializeOwned, Serialize};
use stampede_proto::deployment_service_server::DeploymentService;
use stampede_proto::eval_service_server::EvalService;
use stampede_proto::job_service_server::JobService;
use stampede_proto::node_service_server::NodeService;
use stampede_proto::plan_service_server::PlanService;
use stampede_proto::raft_service_server::RaftService;
use stampede_proto::*;
use tonic::{Request, Response, Status};

use crate::blocking;
use crate::control_plane::{is_forwarded, new_eval, system_job_evals, ControlPlane};
use crate::state::{State, WatchKey};
use crate::validate;

type Reply<T> = Result<Response<T>, Status>;

/// How long a write's answer waits for this server to apply it.
const READ_YOUR_WRITES_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

fn ok<T>(v: T) -> Reply<T> {
    Ok(Response::new(v))
}

#[derive(Clone)]
pub struct Api(pub Arc<ControlPlane>);

fn decode<T: DeserializeOwned>(req: Request<RaftPayload>) -> Result<T, Status> {
    bincode::deserialize(&req.into_inner().data).map_err(|e| {
        Status::invalid_argument(format!("data: not a raft message of this type: {e}"))
    })
}

fn encode<T: Serialize>(value: &T) -> Reply<RaftPayload> {
    let data = bincode::serialize(value).map_err(|e| Status::internal(e.to_string()))?;
    ok(RaftPayload { data })
}

#[tonic::async_trait]
impl RaftService for Api {
    async fn append_entries(&self, req: Request<RaftPayload>) -> Reply<RaftPayload> {
        let rpc = decode(req)?;
        encode(&self.0.raft.append_entries(rpc).await)
    }

    async fn vote(&self, req: Request<RaftPayload>) -> Reply<RaftPayload> {
        let rpc = decode(req)?;
        encode(&self.0.raft.vote(rpc).await)
    }

    async fn install_snapshot(&self, req: Request<RaftPayload>) -> Reply<RaftPayload> {
        let rpc = decode(req)?;
        encode(&self.0.raft.install_snapshot(rpc).await)
    }

    /// A write a follower sent on. Proposed here only: a server that is not the
    /// leader any more answers `Unavailable` and the sender tries again.
    async fn forward(&self, req: Request<ForwardRequest>) -> Reply<WriteReply> {
        let entry = req
            .into_inner()
            .entry
            .ok_or_else(|| Status::invalid_argument("entry: is required"))?;
        if entry.msg.is_none() {
            return Err(Status::invalid_argument("entry.msg: is required"));
        }
        let index = self.0.proposer.write_local(entry).await?;
        ok(WriteReply { index })
    }
}

impl Api {
    /// Commits a write through the leader, then waits (briefly) until this
    /// server has applied it too, so a client reads its own writes here.
    async fn write(&self, msg: log_entry::Msg) -> Result<u64, Status> {
        let index = self.0.proposer.write(LogEntry { msg: Some(msg) }).await?;
        self.0
            .store
            .wait_for_index(index, READ_YOUR_WRITES_WAIT)
            .await;
        Ok(index)
    }

    async fn query<T>(
        &self,
        opts: Option<&QueryOptions>,
        keys: &[WatchKey],
        run: impl Fn(&State) -> (T, u64),
    ) -> (T, u64) {
        self.0.blocking.query(opts, keys, run).await
    }
}

#[tonic::async_trait]
impl NodeService for Api {
    async fn register(&self, req: Request<NodeRegisterRequest>) -> Reply<WriteReply> {
        let req = req.into_inner();
        let node = validate::node(req.node.as_ref())?.clone();
        let evals = if node.status == NodeStatus::Down as i32 {
            Vec::new()
        } else {
            system_job_evals(&self.0.store.snapshot(), &node.id)
        };
        let node = Node {
            create_index: 0,
            modify_index: 0,
            ..node
        };
        let index = self
            .write(log_entry::Msg::NodeRegister(NodeRegisterEntry {
                node: Some(node),
                evals,
            }))
            .await?;
        ok(WriteReply { index })
    }

    async fn get(&self, req: Request<NodeGetRequest>) -> Reply<NodeGetReply> {
        let id = req.into_inner().node_id;
        validate::id("node_id", &id)?;
        let state = self.0.store.snapshot();
        match state.node(&id) {
            Some(node) => ok(NodeGetReply {
                node: Some(Node::clone(&node)),
                index: state.index(),
            }),
            None => Err(Status::not_found(format!(
                "node_id: no node {id:?} is registered"
            ))),
        }
    }

    async fn list(&self, req: Request<NodeListRequest>) -> Reply<NodeListReply> {
        let req = req.into_inner();
        let (nodes, index) = self
            .query(req.query.as_ref(), &[WatchKey::Nodes], |s| {
                (
                    s.nodes().map(|n| Node::clone(n)).collect(),
                    s.indexes().nodes.max(1),
                )
            })
            .await;
        ok(NodeListReply { nodes, index })
    }

    async fn update_status(
        &self,
        req: Request<NodeUpdateStatusRequest>,
    ) -> Reply<NodeUpdateStatusReply> {
        let fwd = is_forwarded(&req);
        ok(self.0.update_status(req.into_inner(), fwd).await?)
    }

    async fn get_client_allocs(
        &self,
        req: Request<NodeClientAllocsRequest>,
    ) -> Reply<NodeClientAllocsReply> {
        let req = req.into_inner();
        validate::id("node_id", &req.node_id)?;
        if self.0.store.snapshot().node(&req.node_id).is_none() {
            return Err(Status::not_found(format!(
                "node_id: no node {:?} is registered",
                req.node_id
            )));
        }
        let node = req.node_id.clone();
        let (allocs, index) = self
            .query(
                req.query.as_ref(),
                &[WatchKey::NodeAllocs(node.clone())],
                |s| {
                    let allocs = s
                        .node_allocs(&node)
                        .iter()
                        .map(|a| (a.id.clone(), a.alloc_modify_index))
                        .collect();
                    (allocs, s.node_alloc_index(&node).max(1))
                },
            )
            .await;
        ok(NodeClientAllocsReply { allocs, index })
    }

    async fn get_allocs(&self, req: Request<AllocsGetRequest>) -> Reply<AllocationsReply> {
        let req = req.into_inner();
        if let Some(q) = req.query.as_ref().filter(|q| q.min_index > 0) {
            let wait = blocking::wait_of(q);
            if !self.0.store.wait_for_index(q.min_index, wait).await {
                return Err(Status::unavailable(format!(
                    "this server has not reached index {} within {wait:?}; ask another",
                    q.min_index
                )));
            }
        }
        let state = self.0.store.snapshot();
        let allocs = req
            .alloc_ids
            .iter()
            .filter_map(|id| state.alloc(id))
            .map(|a| Allocation::clone(&a))
            .collect();
        ok(AllocationsReply {
            allocs,
            index: state.indexes().allocs,
        })
    }

    async fn update_alloc(&self, req: Request<NodeUpdateAllocRequest>) -> Reply<WriteReply> {
        let fwd = is_forwarded(&req);
        ok(self.0.update_alloc(req.into_inner(), fwd).await?)
    }
}

#[tonic::async_trait]
impl JobService for Api {
    async fn register(&self, req: Request<JobRegisterRequest>) -> Reply<JobRegisterReply> {
        let req = req.into_inner();
        let mut job = validate::job(req.job.as_ref())?.clone();
        if job.priority == 0 {
            job.priority = validate::DEFAULT_PRIORITY;
        }
        let eval = new_eval(&job, "job_register", None);
        let eval_id = eval.id.clone();
        let index = self
            .write(log_entry::Msg::JobRegister(JobRegisterEntry {
                job: Some(job.clone()),
                eval: Some(eval),
            }))
            .await?;
        let job_modify_index = self
            .0
            .store
            .snapshot()
            .job(&job.id)
            .map_or(index, |j| j.job_modify_index);
        ok(JobRegisterReply {
            eval_id,
            index,
            job_modify_index,
        })
    }

    async fn deregister(&self, req: Request<JobDeregisterRequest>) -> Reply<JobRegisterReply> {
        let req = req.into_inner();
        validate::id("job_id", &req.job_id)?;
        let job = self.0.store.snapshot().job(&req.job_id).ok_or_else(|| {
            Status::not_found(format!("job_id: no job {:?} is registered", req.job_id))
        })?;
        let eval = new_eval(&job, "job_deregister", None);
        let eval_id = eval.id.clone();
        let index = self
            .write(log_entry::Msg::JobDeregister(JobDeregisterEntry {
                job_id: req.job_id,
                purge: req.purge,
                eval: Some(eval),
            }))
            .await?;
        ok(JobRegisterReply {
            eval_id,
            index,
            job_modify_index: index,
        })
    }

    async fn get(&self, req: Request<JobGetRequest>) -> Reply<JobGetReply> {
        let req = req.into_inner();
        validate::id("job_id", &req.job_id)?;
        let id = req.job_id.clone();
        let (job, index) = self
            .query(
                req.query.as_ref(),
                &[WatchKey::Job(id.clone())],
                |s| match s.job(&id) {
                    Some(j) => (Some(Job::clone(&j)), j.modify_index),
                    None => (None, s.indexes().jobs.max(1)),
                },
            )
            .await;
        match job {
            Some(job) => ok(JobGetReply {
                job: Some(job),
                index,
            }),
            None => Err(Status::not_found(format!(
                "job_id: no job {id:?} is registered"
            ))),
        }
    }

    async fn list(&self, req: Request<JobListRequest>) -> Reply<JobListReply> {
        let req = req.into_inner();
        let (jobs, index) = self
            .query(req.query.as_ref(), &[WatchKey::Jobs], |s| {
                (
                    s.jobs().map(|j| Job::clone(j)).collect(),
                    s.indexes().jobs.max(1),
                )
            })
            .await;
        ok(JobListReply { jobs, index })
    }

    async fn allocations(&self, req: Request<JobAllocationsRequest>) -> Reply<AllocationsReply> {
        let req = req.into_inner();
        validate::id("job_id", &req.job_id)?;
        let id = req.job_id.clone();
        let (allocs, index) = self
            .query(
                req.query.as_ref(),
                &[WatchKey::JobAllocs(id.clone())],
                |s| {
                    let allocs = s
                        .job_allocs(&id)
                        .iter()
                        .map(|a| Allocation::clone(a))
                        .collect();
                    (allocs, s.job_alloc_index(&id).max(1))
                },
            )
            .await;
        ok(AllocationsReply { allocs, index })
    }

    async fn evaluations(&self, req: Request<JobEvaluationsRequest>) -> Reply<EvaluationsReply> {
        let req = req.into_inner();
        validate::id("job_id", &req.job_id)?;
        let id = req.job_id.clone();
        let (evals, index) = self
            .query(req.query.as_ref(), &[WatchKey::JobEvals(id.clone())], |s| {
                let evals: Vec<Evaluation> = s
                    .job_evals(&id)
                    .iter()
                    .map(|e| Evaluation::clone(e))
                    .collect();
                let index = evals.iter().map(|e| e.modify_index).max().unwrap_or(1);
                (evals, index)
            })
            .await;
        ok(EvaluationsReply { evals, index })
    }
}

#[tonic::async_trait]
impl EvalService for Api {
    async fn get(&self, req: Request<EvalGetRequest>) -> Reply<EvalGetReply> {
        let req = req.into_inner();
        validate::id("eval_id", &req.eval_id)?;
        let id = req.eval_id.clone();
        let (eval, index) = self
            .query(
                req.query.as_ref(),
                &[WatchKey::Eval(id.clone())],
                |s| match s.eval(&id) {
                    Some(e) => (Some(Evaluation::clone(&e)), e.modify_index),
                    None => (None, s.indexes().evals.max(1)),
                },
            )
            .await;
        match eval {
            Some(eval) => ok(EvalGetReply {
                eval: Some(eval),
                index,
            }),
            None => Err(Status::not_found(format!("eval_id: no evaluation {id:?}"))),
        }
    }

    async fn dequeue(&self, req: Request<EvalDequeueRequest>) -> Reply<EvalDequeueReply> {
        let fwd = is_forwarded(&req);
        ok(self.0.dequeue(req.into_inner(), fwd).await?)
    }

    async fn ack(&self, req: Request<EvalAckRequest>) -> Reply<Empty> {
        let fwd = is_forwarded(&req);
        ok(self.0.ack(req.into_inner(), fwd).await?)
    }

    async fn nack(&self, req: Request<EvalAckRequest>) -> Reply<Empty> {
        let fwd = is_forwarded(&req);
        ok(self.0.nack(req.into_inner(), fwd).await?)
    }

    async fn update(&self, req: Request<EvalUpdateRequest>) -> Reply<WriteReply> {
        let fwd = is_forwarded(&req);
        ok(self.0.update_evals(req.into_inner(), fwd).await?)
    }
}

#[tonic::async_trait]
impl PlanService for Api {
    async fn submit(&self, req: Request<PlanSubmitRequest>) -> Reply<PlanSubmitReply> {
        let fwd = is_forwarded(&req);
        ok(self.0.submit_plan(req.into_inner(), fwd).await?)
    }
}

#[tonic::async_trait]
impl DeploymentService for Api {
    async fn get(&self, req: Request<DeploymentGetRequest>) -> Reply<DeploymentGetReply> {
        let req = req.into_inner();
        validate::id("deployment_id", &req.deployment_id)?;
        let id = req.deployment_id.clone();
        let (d, index) = self
            .query(
                req.query.as_ref(),
                &[WatchKey::Deployment(id.clone())],
                |s| match s.deployment(&id) {
                    Some(d) => (Some(Deployment::clone(&d)), d.modify_index),
                    None => (None, s.indexes().deployments.max(1)),
                },
            )
            .await;
        match d {
            Some(d) => ok(DeploymentGetReply {
                deployment: Some(d),
                index,
            }),
            None => Err(Status::not_found(format!(
                "deployment_id: no deployment {id:?}"
            ))),
        }
    }

    async fn for_job(&self, req: Request<JobDeploymentsRequest>) -> Reply<DeploymentsReply> {
        let req = req.into_inner();
        validate::id("job_id", &req.job_id)?;
        let id = req.job_id.clone();
        let (deployments, index) = self
            .query(
                req.query.as_ref(),
                &[WatchKey::JobDeployments(id.clone())],
                |s| {
                    let ds: Vec<Deployment> = s
                        .job_deployments(&id)
                        .iter()
                        .map(|d| Deployment::clone(d))
                        .collect();
                    let index = ds.iter().map(|d| d.modify_index).max().unwrap_or(1);
                    (ds, index)
                },
            )
            .await;
        ok(DeploymentsReply { deployments, index })
    }
}
