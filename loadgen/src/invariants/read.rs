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

use super::record::{Indexes, Sightings};
use super::state::{Alloc, AllocId, Allocs, Names, ServerState};
use super::{AuditCost, Checking, Invariant, Write, CONVERGENCE, NAMES};
use crate::sampler;
use crate::server_status::StatusReader;

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
/// allocations read to `seen`, and checks every invariant; and what that
/// cost loadgen. `job_ids`: every
/// job the stream wrote, so purged jobs' allocations are read too.
pub async fn audit(
    cluster: &LocalCluster,
    writes: &[Write],
    job_ids: &BTreeSet<String>,
    mut seen: Sightings,
    cfg: &AuditConfig,
) -> (Vec<Invariant>, AuditCost) {
    let started = Instant::now();
    let peak_before = peak_rss_mib();
    let cost = |reading: Duration| AuditCost {
        duration_s: started.elapsed().as_secs_f64(),
        reading_s: reading.as_secs_f64(),
        loadgen_peak_rss_mib_before: peak_before,
        loadgen_peak_rss_mib_after: peak_rss_mib(),
    };
    let unchecked = |why: &str| {
        let all = NAMES.iter().map(|n| Invariant::unchecked(n, why)).collect();
        (all, cost(Duration::ZERO))
    };
    let reader = match Reader::new(cluster, cfg) {
        Ok(r) => r,
        Err(e) => return unchecked(&e.to_string()),
    };
    let deadline = started + cfg.wait;
    let mut last = String::new();
    let mut checked = None;
    // At rest on two looks a poll apart before the servers are read: a
    // moment between two writes is not rest.
    let mut before: Option<u64> = None;
    loop {
        let rest = reader.at_rest().await;
        let steady = rest.as_ref().ok() == before.as_ref();
        before = rest.as_ref().ok().copied();
        match rest {
            Ok(index) if !steady => last = format!("the servers reached index {index}"),
            Ok(index) => match timed(reader.check_all(writes, job_ids, &mut seen)).await {
                Ok(found) => {
                    if reader.at_rest().await.as_ref() == Ok(&index) {
                        checked = Some((found, None));
                        break;
                    }
                    last = format!("the servers moved past index {index} while being read");
                    checked = Some((found, Some(last.clone())));
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
    let ((mut invariants, took), unsettled) = match checked {
        Some(c) => c,
        // Never at rest: read what there is, so the other checks still run.
        None => match timed(reader.check_all(writes, job_ids, &mut seen)).await {
            Ok(found) => (found, Some(last)),
            Err(e) => return unchecked(&format!("{e} (after waiting {wait} for rest: {last})")),
        },
    };
    // What the audit cost loadgen: its time, and its memory's high-water
    // mark before and after (the audit's own peak when it moved).
    let cost = cost(took);
    let mib = |m: Option<u64>| m.map_or_else(|| "?".to_string(), |m| m.to_string());
    eprintln!(
        "loadgen: the invariant audit took {:.1} s ({:.1} s reading and checking the servers); \
         loadgen's peak resident memory {} MiB before it, {} MiB after",
        cost.duration_s,
        cost.reading_s,
        mib(cost.loadgen_peak_rss_mib_before),
        mib(cost.loadgen_peak_rss_mib_after),
    );
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
    eprintln!("loadgen: {}", verdict(&invariants));
    (invariants, cost)
}

/// One line for the run's log: how many invariants held and which failed,
/// so each repetition's verdict is on record (the summary merges them).
pub(super) fn verdict(invariants: &[Invariant]) -> String {
    let failed: Vec<String> = invariants
        .iter()
        .filter(|i| !i.ok)
        .map(|i| format!("{} ({} violations)", i.name, i.violations))
        .collect();
    let held = invariants.len() - failed.len();
    match failed.is_empty() {
        true => format!("invariants: all {held} held"),
        false => format!(
            "invariants: {held} of {} held; failed: {}",
            invariants.len(),
            failed.join(", ")
        ),
    }
}

/// A read's result with how long it took.
async fn timed<T, E>(
    read: impl std::future::Future<Output = Result<T, E>>,
) -> Result<(T, Duration), E> {
    let start = Instant::now();
    let out = read.await?;
    Ok((out, start.elapsed()))
}

/// This process's peak resident memory so far (`VmHWM`), MiB.
fn peak_rss_mib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

/// Every server of the cluster, for status, metrics and gRPC reads.
struct Reader {
    probe: StatusReader,
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
            probe: StatusReader::new(cluster, cfg.status_timeout).map_err(|e| setup(&e))?,
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

    /// Reads the servers one after another, each checked as it is read
    /// and dropped before the next ([`Checking`]), and every invariant; the
    /// allocations read are added to `seen`.
    async fn check_all(
        &self,
        writes: &[Write],
        job_ids: &BTreeSet<String>,
        seen: &mut Sightings,
    ) -> Result<Vec<Invariant>, ReadError> {
        let mut names = Names::default();
        let mut checking = Checking::new(writes);
        let mut first_by_id = BTreeMap::new();
        for (i, (id, client)) in self.clients.iter().enumerate() {
            let (state, by_id) = read_server(*id, client, job_ids, seen, &mut names).await?;
            for (aid, a) in state.allocs.iter() {
                let at = Indexes {
                    modify: a.modify_index,
                    create: a.create_index,
                };
                seen.see_read(aid, at, a.client_status);
            }
            checking.check(&state);
            if i == 0 {
                first_by_id = by_id;
                continue;
            }
            let differing = checking.differing(&state);
            let first_allocs = match differing.is_empty() {
                true => Allocs::default(),
                false => {
                    let (first, client) = &self.clients[0];
                    read_again(*first, client, &differing, &first_by_id, &mut names).await?
                }
            };
            checking.converge(&state, &differing, &first_allocs);
        }
        Ok(checking.finish(seen))
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

/// The allocations of a server read by id, by job.
type ById = BTreeMap<String, Vec<AllocId>>;

/// Reads one server's state: its nodes and jobs, each job's allocations,
/// evaluations and deployments (also of jobs it no longer has, which are
/// not found), and every allocation seen while the stream ran that is not
/// among them (a purged job's), which it also returns by job. Each reply
/// is kept as the checks read it ([`ServerState::insert`]) and dropped.
async fn read_server(
    server: NodeId,
    client: &ClusterClient,
    job_ids: &BTreeSet<String>,
    seen: &Sightings,
    names: &mut Names,
) -> Result<(ServerState, ById), ReadError> {
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
        for a in &allocs {
            state.push(a, names);
        }
        state
            .evals
            .extend(evals.into_iter().map(|e| (e.id.clone(), e)));
        state
            .deployments
            .extend(deployments.into_iter().map(|d| (d.id.clone(), d)));
    }
    drop(reads);
    state.allocs.finish();
    let mut missing: Vec<AllocId> = seen
        .ids()
        .filter(|id| !state.allocs.contains_key(id))
        .cloned()
        .collect();
    missing.sort_unstable();
    let mut by_id = ById::new();
    for chunk in missing.chunks(500) {
        let allocs = get_allocs(client, chunk)
            .await
            .map_err(fail("reading allocations by id"))?;
        for a in &allocs {
            by_id
                .entry(a.job_id.clone())
                .or_default()
                .push(AllocId::new(&a.id));
            state.push(a, names);
        }
    }
    state.allocs.finish();
    Ok((state, by_id))
}

/// The allocations of `ids` that a server has.
async fn get_allocs(
    client: &ClusterClient,
    ids: &[AllocId],
) -> Result<Vec<stampede_proto::Allocation>, ClientError> {
    let alloc_ids: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
    client
        .retrying(|c| {
            let req = AllocsGetRequest {
                alloc_ids: alloc_ids.clone(),
                query: None,
            };
            async move { Ok(c.nodes().get_allocs(req).await?.into_inner().allocs) }
        })
        .await
}

/// The allocations of the `jobs` on the first server, read again as
/// [`read_server`] read them (`by_id`: those it read by id), for
/// convergence to name what differs.
async fn read_again(
    server: NodeId,
    client: &ClusterClient,
    jobs: &BTreeSet<String>,
    by_id: &ById,
    names: &mut Names,
) -> Result<Allocs, ReadError> {
    let fail = |source| ReadError::Call {
        server,
        what: "reading a job's allocations again",
        source,
    };
    let mut out = Allocs::default();
    let mut reads = futures::stream::iter(jobs)
        .map(|id| async move { job_allocs(client, id).await })
        .buffer_unordered(8);
    while let Some(read) = reads.next().await {
        for a in &read.map_err(fail)? {
            let (id, kept) = Alloc::of(a, names);
            out.push(id, kept);
        }
    }
    drop(reads);
    let ids: Vec<AllocId> = jobs
        .iter()
        .filter_map(|j| by_id.get(j))
        .flatten()
        .cloned()
        .collect();
    for chunk in ids.chunks(500) {
        for a in &get_allocs(client, chunk).await.map_err(fail)? {
            let (id, kept) = Alloc::of(a, names);
            out.push(id, kept);
        }
    }
    out.finish();
    Ok(out)
}

/// A job's allocations on one server; none for a job it does not have.
async fn job_allocs(
    client: &ClusterClient,
    job_id: &str,
) -> Result<Vec<stampede_proto::Allocation>, ClientError> {
    let allocs = client
        .retrying(|c| async move {
            let req = JobAllocationsRequest {
                job_id: job_id.to_string(),
                query: None,
            };
            Ok(c.jobs().allocations(req).await?.into_inner().allocs)
        })
        .await;
    or_none(allocs)
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
