//! Reading the cluster at rest for the invariant audit: wait until every
//! server has applied one index and the leader has nothing queued, read
//! each server on its own, and read the statuses again to be sure nothing
//! moved meanwhile.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::StreamExt;
use stampede_launch::{LocalCluster, NodeId};
use stampede_proto::client::{ClientError, ClusterClient};
use stampede_proto::metric_names;
use stampede_proto::security::Role;
use stampede_proto::{
    AllocsGetRequest, JobAllocationsRequest, JobDeploymentsRequest, JobEvaluationsRequest,
    JobListRequest, NodeListRequest,
};
use tokio::time::Instant;

use super::record::Sightings;
use super::state::{audited, ServerState};
use super::{check_all, Invariant, Write, CONVERGENCE, NAMES};
use crate::sampler;
use crate::server_status::Probe;

/// How long the audit may wait for the cluster to come to rest, and how
/// often it looks.
#[derive(Debug, Clone)]
pub struct AuditConfig {
    pub wait: Duration,
    pub poll: Duration,
    pub status_timeout: Duration,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            wait: Duration::from_secs(120),
            poll: Duration::from_millis(500),
            status_timeout: Duration::from_secs(2),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("setting up the audit's clients: {0}")]
    Setup(String),
    #[error("server {server}: {what}: {source}")]
    Call {
        server: NodeId,
        what: &'static str,
        #[source]
        source: ClientError,
    },
}

/// The leader's queues that must be empty at rest: evaluations ready,
/// delivered but not acknowledged, waiting behind their job's or out on a
/// nack delay, and plans waiting to be applied.
const QUEUES: [&str; 5] = [
    metric_names::BROKER_READY,
    metric_names::BROKER_UNACKED,
    metric_names::BROKER_WAITING_ON_JOB,
    metric_names::BROKER_DELAYED,
    metric_names::PLAN_QUEUE_DEPTH,
];

/// The invariant audit of a local cluster after the drain: waits (up to
/// `cfg.wait`) until the cluster is at rest, reads every server, adds the
/// allocations read to `seen`, and checks every invariant. `job_ids`: every
/// job the stream wrote, so purged jobs' allocations are read too.
pub async fn audit(
    cluster: &LocalCluster,
    writes: &[Write],
    job_ids: &BTreeSet<String>,
    mut seen: Sightings,
    cfg: &AuditConfig,
) -> Vec<Invariant> {
    let unchecked = |why: &str| NAMES.iter().map(|n| Invariant::unchecked(n, why)).collect();
    let reader = match Reader::new(cluster, cfg) {
        Ok(r) => r,
        Err(e) => return unchecked(&e.to_string()),
    };
    let deadline = Instant::now() + cfg.wait;
    let mut last = String::new();
    let mut states = None;
    // At rest on two looks a poll apart before the servers are read: a
    // moment between two writes is not rest.
    let mut before: Option<u64> = None;
    loop {
        let rest = reader.at_rest().await;
        let steady = rest.as_ref().ok() == before.as_ref();
        before = rest.as_ref().ok().copied();
        match rest {
            Ok(index) if !steady => last = format!("the servers reached index {index}"),
            Ok(index) => match reader.read_all(job_ids, &seen).await {
                Ok(read) => {
                    if reader.at_rest().await.as_ref() == Ok(&index) {
                        states = Some((read, None));
                        break;
                    }
                    last = format!("the servers moved past index {index} while being read");
                    states = Some((read, Some(last.clone())));
                }
                Err(e) => last = e.to_string(),
            },
            Err(e) => last = e,
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(cfg.poll).await;
    }
    let wait = humantime::format_duration(cfg.wait);
    let (states, unsettled) = match states {
        Some(s) => s,
        // Never at rest: read what there is, so the other checks still run.
        None => match reader.read_all(job_ids, &seen).await {
            Ok(read) => (read, Some(last)),
            Err(e) => return unchecked(&format!("{e} (after waiting {wait} for rest: {last})")),
        },
    };
    for s in &states {
        for a in s.allocs.values() {
            seen.see(a);
        }
    }
    let mut invariants = check_all(&states, writes, &seen);
    if let Some(why) = unsettled {
        // States read at different indexes do not compare.
        if let Some(c) = invariants.iter_mut().find(|i| i.name == CONVERGENCE) {
            *c = Invariant::new(
                CONVERGENCE,
                vec![format!(
                    "the servers did not rest at one index within {wait}: {why}"
                )],
                String::new(),
            );
        }
    }
    invariants
}

/// Every server of the cluster, for status, metrics and gRPC reads.
struct Reader {
    probe: Probe,
    http: reqwest::Client,
    metrics: Vec<String>,
    clients: Vec<(NodeId, ClusterClient)>,
}

impl Reader {
    fn new(cluster: &LocalCluster, cfg: &AuditConfig) -> Result<Self, ReadError> {
        let setup = |e: &dyn std::fmt::Display| ReadError::Setup(e.to_string());
        let security = cluster.security(Role::Operator).map_err(|e| setup(&e))?;
        let clients = cluster
            .servers()
            .iter()
            .map(|s| {
                // A client of this one server: its reads are of its own state.
                let c = ClusterClient::new(&[s.rpc.to_string()], &security)
                    .map_err(|e| setup(&e))?
                    .with_retry_for(Duration::from_secs(5))
                    .with_attempt_timeout(Duration::from_secs(10));
                Ok((s.id, c))
            })
            .collect::<Result<_, ReadError>>()?;
        Ok(Self {
            probe: Probe::new(cluster, cfg.status_timeout).map_err(|e| setup(&e))?,
            http: stampede_launch::http_client(&security, cfg.status_timeout)
                .map_err(|e| setup(&e))?,
            metrics: cluster
                .servers()
                .iter()
                .map(|s| format!("{}://{}/metrics", cluster.scheme(), s.http))
                .collect(),
            clients,
        })
    }

    /// The index every server has applied, if the cluster is at rest;
    /// else what it is doing, in words.
    async fn at_rest(&self) -> Result<u64, String> {
        let statuses = self.probe.statuses(&[]).await;
        let mut indexes = BTreeSet::new();
        for (id, s) in &statuses {
            match s {
                Some(s) => indexes.insert(s.applied_index),
                None => return Err(format!("server {id} does not answer")),
            };
        }
        if indexes.len() != 1 {
            return Err(format!(
                "the servers have applied different indexes: {indexes:?}"
            ));
        }
        let mut queued = 0.0;
        for url in &self.metrics {
            let text = async {
                self.http
                    .get(url)
                    .send()
                    .await?
                    .error_for_status()?
                    .text()
                    .await
            };
            let text = text.await.map_err(|e| format!("reading {url}: {e}"))?;
            queued += queued_in(&sampler::parse(&text));
        }
        if queued > 0.0 {
            return Err(format!("{queued} evaluations or plans still queued"));
        }
        Ok(indexes.into_iter().next().unwrap_or(0))
    }

    async fn read_all(
        &self,
        job_ids: &BTreeSet<String>,
        seen: &Sightings,
    ) -> Result<Vec<ServerState>, ReadError> {
        let mut out = Vec::new();
        for (id, client) in &self.clients {
            out.push(read_server(*id, client, job_ids, seen).await?);
        }
        Ok(out)
    }
}

/// What the queues of [`QUEUES`] hold in one server's metrics.
fn queued_in(metrics: &BTreeMap<String, f64>) -> f64 {
    metrics
        .iter()
        .filter(|(k, _)| {
            QUEUES.iter().any(|q| {
                k.strip_prefix(q)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('{'))
            })
        })
        .map(|(_, v)| v)
        .sum()
}

/// Reads one server's state: its nodes and jobs, each job's allocations,
/// evaluations and deployments (also of jobs it no longer has, which are
/// not found), and every allocation seen before that is not among them
/// (a purged job's).
async fn read_server(
    server: NodeId,
    client: &ClusterClient,
    job_ids: &BTreeSet<String>,
    seen: &Sightings,
) -> Result<ServerState, ReadError> {
    let fail = |what| {
        move |source| ReadError::Call {
            server,
            what,
            source,
        }
    };
    let nodes = client
        .retrying(|c| async move {
            let req = NodeListRequest { query: None };
            Ok(c.nodes().list(req).await?.into_inner().nodes)
        })
        .await
        .map_err(fail("listing nodes"))?;
    let jobs = client
        .retrying(|c| async move {
            let req = JobListRequest { query: None };
            Ok(c.jobs().list(req).await?.into_inner().jobs)
        })
        .await
        .map_err(fail("listing jobs"))?;
    let mut state = ServerState {
        server,
        nodes: nodes.into_iter().map(|n| (n.id.clone(), n)).collect(),
        jobs: jobs.into_iter().map(|j| (j.id.clone(), j)).collect(),
        ..Default::default()
    };
    let ids: BTreeSet<String> = state.jobs.keys().chain(job_ids).cloned().collect();
    let mut reads = futures::stream::iter(ids)
        .map(|id| async move { read_job(client, id).await })
        .buffer_unordered(8);
    while let Some(read) = reads.next().await {
        let (allocs, evals, deployments) = read.map_err(fail("reading a job"))?;
        state
            .allocs
            .extend(allocs.into_iter().map(|a| (a.id.clone(), audited(a))));
        state
            .evals
            .extend(evals.into_iter().map(|e| (e.id.clone(), e)));
        state
            .deployments
            .extend(deployments.into_iter().map(|d| (d.id.clone(), d)));
    }
    let missing: Vec<String> = seen
        .ids()
        .filter(|id| !state.allocs.contains_key(*id))
        .cloned()
        .collect();
    for chunk in missing.chunks(500) {
        let allocs = client
            .retrying(|c| {
                let req = AllocsGetRequest {
                    alloc_ids: chunk.to_vec(),
                    query: None,
                };
                async move { Ok(c.nodes().get_allocs(req).await?.into_inner().allocs) }
            })
            .await
            .map_err(fail("reading allocations by id"))?;
        state
            .allocs
            .extend(allocs.into_iter().map(|a| (a.id.clone(), audited(a))));
    }
    Ok(state)
}

type JobRead = (
    Vec<stampede_proto::Allocation>,
    Vec<stampede_proto::Evaluation>,
    Vec<stampede_proto::Deployment>,
);

/// A job's allocations, evaluations and deployments on one server; nothing
/// for a job that server does not have.
pub(super) async fn read_job(
    client: &ClusterClient,
    job_id: String,
) -> Result<JobRead, ClientError> {
    let absent = |e: &ClientError| e.code() == Some(tonic::Code::NotFound);
    let id = &job_id;
    let allocs = client
        .retrying(|c| async move {
            let req = JobAllocationsRequest {
                job_id: id.clone(),
                query: None,
            };
            Ok(c.jobs().allocations(req).await?.into_inner().allocs)
        })
        .await;
    let allocs = match allocs {
        Err(e) if absent(&e) => return Ok(Default::default()),
        a => a?,
    };
    let evals = client
        .retrying(|c| async move {
            let req = JobEvaluationsRequest {
                job_id: id.clone(),
                query: None,
            };
            Ok(c.jobs().evaluations(req).await?.into_inner().evals)
        })
        .await;
    let deployments = client
        .retrying(|c| async move {
            let req = JobDeploymentsRequest {
                job_id: id.clone(),
                query: None,
            };
            Ok(c.deployments().for_job(req).await?.into_inner().deployments)
        })
        .await;
    Ok((allocs, or_none(evals)?, or_none(deployments)?))
}

/// Nothing for a job purged between one read and the next.
fn or_none<T>(r: Result<Vec<T>, ClientError>) -> Result<Vec<T>, ClientError> {
    match r {
        Err(e) if e.code() == Some(tonic::Code::NotFound) => Ok(Vec::new()),
        r => r,
    }
}
