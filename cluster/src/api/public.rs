//! The public API: jobs, nodes and deployments. Reads answer from this
//! server's state (blocking when asked); writes go through the leader and
//! answer once this server has applied them, so a client reads its own
//! writes wherever it asks.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures::TryFutureExt;
use stampede_proto::deployment_service_server::DeploymentService;
use stampede_proto::job_service_server::JobService;
use stampede_proto::node_service_server::NodeService;
use stampede_proto::*;
use tonic::{Request, Response, Status, Streaming};

use super::call_stream::{Answers, Ticketed};
use super::{parker_of, Api, Reply};
use crate::control::is_forwarded;
use crate::model::identity;
use crate::model::validate::{self, quote};
use crate::raft::client_write::{ClientWrite, Refused};
use crate::state::blocking::{self, Look};
use crate::state::parking::Parker;
use crate::state::{Id, State, WatchKey};

#[tonic::async_trait]
impl NodeService for Api {
    async fn register(&self, req: Request<NodeRegisterRequest>) -> Reply<WriteReply> {
        Ok(Response::new(self.register_node(req.into_inner()).await?))
    }

    async fn get(&self, req: Request<NodeGetRequest>) -> Reply<NodeGetReply> {
        let id = req.into_inner().node_id;
        validate::id("node_id", &id)?;
        let state = self.store.snapshot();
        match state.node(&id) {
            Some(node) => Ok(Response::new(NodeGetReply {
                node: Some(node.to_proto()),
                index: state.index(),
            })),
            None => Err(Status::not_found(format!(
                "node_id: no node {id:?} is registered"
            ))),
        }
    }

    async fn list(&self, req: Request<NodeListRequest>) -> Reply<NodeListReply> {
        let parker = parker_of(&req);
        let req = req.into_inner();
        let (nodes, index) = self
            .query(
                &parker,
                req.query.as_ref(),
                WatchKey::Nodes,
                |s| s.indexes().nodes.max(1),
                |s| s.nodes().map(|n| n.to_proto()).collect(),
            )
            .await?;
        Ok(Response::new(NodeListReply { nodes, index }))
    }

    async fn update_status(
        &self,
        req: Request<NodeUpdateStatusRequest>,
    ) -> Reply<NodeUpdateStatusReply> {
        let fwd = is_forwarded(&req);
        Ok(Response::new(
            self.calls.update_status(req.into_inner(), fwd).await?,
        ))
    }

    async fn get_client_allocs(
        &self,
        req: Request<NodeClientAllocsRequest>,
    ) -> Reply<NodeClientAllocsReply> {
        let api = Arc::new(self.clone());
        Ok(Response::new(api.client_allocs(req.into_inner()).await?))
    }

    async fn get_allocs(&self, req: Request<AllocsGetRequest>) -> Reply<AllocationsReply> {
        Ok(Response::new(self.allocs(req.into_inner()).await?))
    }

    async fn update_alloc(&self, req: Request<NodeUpdateAllocRequest>) -> Reply<WriteReply> {
        let fwd = is_forwarded(&req);
        let index = self.calls.update_alloc(req.into_inner(), fwd).await?;
        Ok(Response::new(WriteReply { index }))
    }

    type CallStreamStream = Answers<NodeCall>;

    /// Each call is started as soon as it is read and served as the call of
    /// its own would be; a refused one is answered and the stream goes on.
    async fn call_stream(&self, req: Request<Streaming<NodeCall>>) -> Reply<Answers<NodeCall>> {
        // One shared handle for the stream's calls: a call clones a count,
        // not every handle the service holds.
        let api = Arc::new(self.clone());
        Ok(Response::new(Answers::new(
            req.into_inner(),
            NODE_STREAM_CALLS,
            move |request| api.node_call(request),
        )))
    }
}

/// Most calls of one node call stream in progress at once. Every node keeps
/// a blocking query in flight, so this is a fleet's worth of nodes on one
/// stream (nodesim spreads its nodes over a few streams per server).
const NODE_STREAM_CALLS: usize = 65_536;

impl Ticketed for NodeCall {
    type Ask = Option<node_call::Request>;
    type Reply = node_answer::Reply;
    type Answer = NodeAnswer;
    const STREAM: &'static str = "a call stream";

    fn split(self) -> (u64, Self::Ask) {
        (self.ticket, self.request)
    }

    fn answer(ticket: u64, outcome: Result<node_answer::Reply, Status>) -> NodeAnswer {
        let reply =
            outcome.unwrap_or_else(|status| node_answer::Reply::Refused(Refusal::from(&status)));
        NodeAnswer {
            ticket,
            reply: Some(reply),
        }
    }
}

/// One node call in progress, boxed on its own: each kind of call is a
/// box of its own size. Every node keeps an allocation query parked, so
/// that query's box is what the fleet multiplies; one future type for every
/// call would be the size of the largest, and an `async` block around a
/// call would keep the call's request a second time.
type NodeCallFuture = Pin<Box<dyn Future<Output = Result<node_answer::Reply, Status>> + Send>>;

impl Api {
    /// A node's call on a call stream, served as the call of its own is.
    fn node_call(self: &Arc<Self>, request: Option<node_call::Request>) -> NodeCallFuture {
        use node_answer::Reply as R;
        use node_call::Request as Q;
        let api = self.clone();
        match request {
            Some(Q::Register(req)) => {
                Box::pin(async move { Ok::<_, Status>(R::Written(api.register_node(req).await?)) })
            }
            Some(Q::UpdateStatus(req)) => Box::pin(async move {
                Ok::<_, Status>(R::UpdateStatus(api.calls.update_status(req, false).await?))
            }),
            Some(Q::GetClientAllocs(req)) => {
                Box::pin(api.client_allocs(req).map_ok(R::GetClientAllocs))
            }
            Some(Q::GetAllocs(req)) => {
                Box::pin(async move { Ok::<_, Status>(R::GetAllocs(api.allocs(req).await?)) })
            }
            Some(Q::UpdateAlloc(req)) => Box::pin(async move {
                let index = api.calls.update_alloc(req, false).await?;
                Ok::<_, Status>(R::Written(WriteReply { index }))
            }),
            None => Box::pin(std::future::ready(Err(Status::invalid_argument(
                "request: is required",
            )))),
        }
    }

    async fn register_node(&self, req: NodeRegisterRequest) -> Result<WriteReply, Status> {
        let written = self.write(ClientWrite::NodeRegister(req)).await?;
        Ok(WriteReply {
            index: written.index,
        })
    }

    /// `GetClientAllocs`: a blocking query on one node's allocations. The
    /// checks run at once, and the query keeps only what it answers from:
    /// the node's id (inside the `Id`) and the query's options, not the
    /// request with its secret.
    fn client_allocs(
        self: Arc<Self>,
        req: NodeClientAllocsRequest,
    ) -> impl Future<Output = Result<NodeClientAllocsReply, Status>> + Send + 'static {
        let checked = self.check_node_caller(&req.node_id, &req.secret_id);
        let node = Id::from(req.node_id.as_str());
        let (query, with_changed) = (req.query, req.with_changed);
        let changed_only = with_changed && req.changed_only;
        async move {
            checked.map_err(|refused| *refused)?;
            // Changed since what the client has seen; nothing if it asks not to.
            let since = match &query {
                Some(q) if with_changed => q.min_index,
                None if with_changed => 0,
                _ => u64::MAX,
            };
            // The query keeps the node's allocations it answers from (a copy
            // costs a count, and shares nothing the other nodes' writes touch),
            // and the answer is built from them once: a query parked and woken
            // looks at the state two or three times.
            let (mine, index) = self
                .blocking
                .query_for(
                    &Parker::Node(node.clone()),
                    Look::Locked,
                    query.as_ref(),
                    WatchKey::NodeAllocs(node.to_string()),
                    |s| s.node_alloc_index(&node).max(1),
                    |s| s.node_alloc_map(&node),
                )
                .await?;
            let allocs = mine
                .values()
                .filter(|a| !changed_only || a.alloc_modify_index > since)
                .map(|a| (a.id.clone(), a.alloc_modify_index))
                .collect();
            let changed = mine
                .values()
                .filter(|a| a.alloc_modify_index > since)
                .map(|a| Allocation::clone(a))
                .collect();
            Ok(NodeClientAllocsReply {
                allocs,
                index,
                changed,
                total: mine.len() as u64,
            })
        }
    }

    /// Whether the caller of a node's allocation query is that node: it
    /// is registered here, and the secret is the one it registered with.
    /// The refusal is boxed: the query's future keeps the outcome.
    fn check_node_caller(&self, node_id: &str, secret_id: &str) -> Result<(), Box<Status>> {
        let refused = |status: Status| Box::new(status);
        validate::id("node_id", node_id).map_err(|e| refused(e.into()))?;
        identity::secret_field("secret_id", secret_id).map_err(|e| refused(e.into()))?;
        // Only the node itself may ask: its allocations are its work.
        let given = stampede_proto::node_secret::hash(secret_id);
        let known = self.store.read(|s| {
            s.node_registration(node_id)
                .map(|stored| identity::check_hash(stored, node_id, &given))
        });
        let Some(own) = known else {
            return Err(refused(Status::not_found(format!(
                "node_id: no node {} is registered",
                quote(node_id)
            ))));
        };
        own.map_err(|e| refused(e.into()))
    }

    /// `GetAllocs`: allocations by id, once this server has caught up with
    /// the index the caller saw.
    async fn allocs(&self, req: AllocsGetRequest) -> Result<AllocationsReply, Status> {
        for (i, id) in req.alloc_ids.iter().enumerate() {
            validate::id(&format!("alloc_ids[{i}]"), id)?;
        }
        if let Some(q) = req.query.as_ref().filter(|q| q.min_index > 0) {
            let wait = blocking::wait_of(q);
            if !self.store.wait_for_index(q.min_index, wait).await {
                return Err(Status::unavailable(format!(
                    "this server has not reached index {} within {wait:?}; ask another",
                    q.min_index
                )));
            }
        }
        let state = self.store.snapshot();
        let allocs = req
            .alloc_ids
            .iter()
            .filter_map(|id| state.alloc(id))
            .map(|a| Allocation::clone(&a))
            .collect();
        Ok(AllocationsReply {
            allocs,
            index: state.indexes().allocs,
        })
    }
}

/// `NotFound`, as `JobService.Get` answers, for a job not registered on
/// this server: a query on what a job owns needs the job.
fn job_exists(state: &State, job_id: &str) -> Result<(), Refused> {
    match state.job(job_id) {
        Some(_) => Ok(()),
        None => Err(Refused::NotFound(format!(
            "job_id: no job {} is registered",
            quote(job_id)
        ))),
    }
}

impl Api {
    /// A blocking query on one job's allocations, as `JobService.Allocations`
    /// and `Summary` answer it: the id checked, `NotFound` for a job not
    /// registered here, then `view` of the state for the job, with the index
    /// its allocations last changed at.
    async fn job_allocs_query<T>(
        &self,
        parker: &Parker,
        job_id: &str,
        query: Option<&QueryOptions>,
        view: impl Fn(&State, &str) -> T,
    ) -> Result<(T, u64), Status> {
        validate::id("job_id", job_id)?;
        job_exists(&self.store.snapshot(), job_id)?;
        let answer = self
            .query(
                parker,
                query,
                WatchKey::JobAllocs(job_id.to_string()),
                |s| s.job_alloc_index(job_id).max(1),
                |s| view(s, job_id),
            )
            .await?;
        Ok(answer)
    }
}

#[tonic::async_trait]
impl JobService for Api {
    async fn register(&self, req: Request<JobRegisterRequest>) -> Reply<JobRegisterReply> {
        let start = std::time::Instant::now();
        let req = req.into_inner();
        let job_id = req.job.as_ref().map(|j| j.id.clone()).unwrap_or_default();
        let written = self.write(ClientWrite::JobRegister(req)).await?;
        // Unchanged by a registration that changed nothing.
        let job_modify_index = self
            .store
            .snapshot()
            .job(&job_id)
            .map_or(written.index, |j| j.job_modify_index);
        self.blocking
            .metrics
            .stages
            .observe(JobStage::Register, start.elapsed().as_secs_f64());
        Ok(Response::new(JobRegisterReply {
            eval_id: written.eval_id,
            index: written.index,
            job_modify_index,
        }))
    }

    async fn deregister(&self, req: Request<JobDeregisterRequest>) -> Reply<JobRegisterReply> {
        let written = self
            .write(ClientWrite::JobDeregister(req.into_inner()))
            .await?;
        Ok(Response::new(JobRegisterReply {
            eval_id: written.eval_id,
            index: written.index,
            job_modify_index: written.index,
        }))
    }

    async fn get(&self, req: Request<JobGetRequest>) -> Reply<JobGetReply> {
        let parker = parker_of(&req);
        let req = req.into_inner();
        validate::id("job_id", &req.job_id)?;
        let id = req.job_id.clone();
        let (job, index) = self
            .query(
                &parker,
                req.query.as_ref(),
                WatchKey::Job(id.clone()),
                |s| match s.job(&id) {
                    Some(j) => j.modify_index,
                    None => s.indexes().jobs.max(1),
                },
                |s| s.job(&id).map(|j| Job::clone(&j)),
            )
            .await?;
        match job {
            Some(job) => Ok(Response::new(JobGetReply {
                job: Some(job),
                index,
            })),
            None => Err(Status::not_found(format!(
                "job_id: no job {id:?} is registered"
            ))),
        }
    }

    async fn list(&self, req: Request<JobListRequest>) -> Reply<JobListReply> {
        let parker = parker_of(&req);
        let req = req.into_inner();
        let (jobs, index) = self
            .query(
                &parker,
                req.query.as_ref(),
                WatchKey::Jobs,
                |s| s.indexes().jobs.max(1),
                |s| s.jobs().map(|j| Job::clone(j)).collect(),
            )
            .await?;
        Ok(Response::new(JobListReply { jobs, index }))
    }

    async fn allocations(&self, req: Request<JobAllocationsRequest>) -> Reply<AllocationsReply> {
        let parker = parker_of(&req);
        let req = req.into_inner();
        let (allocs, index) = self
            .job_allocs_query(&parker, &req.job_id, req.query.as_ref(), |s, id| {
                s.job_allocs(id)
                    .iter()
                    .map(|a| Allocation::clone(a))
                    .collect()
            })
            .await?;
        Ok(Response::new(AllocationsReply { allocs, index }))
    }

    async fn summary(&self, req: Request<JobSummaryRequest>) -> Reply<JobSummaryReply> {
        let parker = parker_of(&req);
        let req = req.into_inner();
        let (counts, index) = self
            .job_allocs_query(&parker, &req.job_id, req.query.as_ref(), |s, id| {
                s.job_summary(id)
                    .iter()
                    .map(|(&(job_version, desired_status, client_status), &count)| {
                        AllocStateCount {
                            job_version,
                            desired_status,
                            client_status,
                            count,
                        }
                    })
                    .collect()
            })
            .await?;
        Ok(Response::new(JobSummaryReply { counts, index }))
    }

    async fn trace(&self, req: Request<JobTraceRequest>) -> Reply<JobTraceReply> {
        let req = req.into_inner();
        validate::trace_request(&req.job_ids)?;
        let traces = req
            .job_ids
            .iter()
            .map(|id| self.store.job_trace(id))
            .collect();
        Ok(Response::new(JobTraceReply { traces }))
    }

    async fn evaluations(&self, req: Request<JobEvaluationsRequest>) -> Reply<EvaluationsReply> {
        let parker = parker_of(&req);
        let req = req.into_inner();
        validate::id("job_id", &req.job_id)?;
        job_exists(&self.store.snapshot(), &req.job_id)?;
        let id = req.job_id.clone();
        let (evals, index) = self
            .query(
                &parker,
                req.query.as_ref(),
                WatchKey::JobEvals(id.clone()),
                |s| {
                    let evals = s.job_evals(&id);
                    evals.iter().map(|e| e.modify_index).max().unwrap_or(1)
                },
                |s| {
                    s.job_evals(&id)
                        .iter()
                        .map(|e| Evaluation::clone(e))
                        .collect()
                },
            )
            .await?;
        Ok(Response::new(EvaluationsReply { evals, index }))
    }
}

#[tonic::async_trait]
impl DeploymentService for Api {
    async fn get(&self, req: Request<DeploymentGetRequest>) -> Reply<DeploymentGetReply> {
        let parker = parker_of(&req);
        let req = req.into_inner();
        validate::id("deployment_id", &req.deployment_id)?;
        let id = req.deployment_id.clone();
        let (d, index) = self
            .query(
                &parker,
                req.query.as_ref(),
                WatchKey::Deployment(id.clone()),
                |s| match s.deployment(&id) {
                    Some(d) => d.modify_index,
                    None => s.indexes().deployments.max(1),
                },
                |s| s.deployment(&id).map(|d| Deployment::clone(&d)),
            )
            .await?;
        match d {
            Some(d) => Ok(Response::new(DeploymentGetReply {
                deployment: Some(d),
                index,
            })),
            None => Err(Status::not_found(format!(
                "deployment_id: no deployment {id:?}"
            ))),
        }
    }

    async fn for_job(&self, req: Request<JobDeploymentsRequest>) -> Reply<DeploymentsReply> {
        let parker = parker_of(&req);
        let req = req.into_inner();
        validate::id("job_id", &req.job_id)?;
        job_exists(&self.store.snapshot(), &req.job_id)?;
        let id = req.job_id.clone();
        let (deployments, index) = self
            .query(
                &parker,
                req.query.as_ref(),
                WatchKey::JobDeployments(id.clone()),
                |s| {
                    let ds = s.job_deployments(&id);
                    ds.iter().map(|d| d.modify_index).max().unwrap_or(1)
                },
                |s| {
                    s.job_deployments(&id)
                        .iter()
                        .map(|d| Deployment::clone(d))
                        .collect()
                },
            )
            .await?;
        Ok(Response::new(DeploymentsReply { deployments, index }))
    }
}
