//! One run of a variant, on whichever cluster: the job stream while every
//! process is sampled (and, on a local cluster, the scenario's faults
//! injected meanwhile and the audits after). This only gathers what the run
//! measured; [`summary::assemble`](crate::summary::assemble) sums it up.

use std::path::Path;
use std::time::Duration;

use stampede_launch::LocalCluster;
use stampede_proto::client::{ClientError, ClusterClient};
use stampede_proto::security::Security;
use stampede_proto::JobTrace;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::ctx::{id_safe, Ctx};
use super::error::CapacityError;
use super::output::{write_last_metrics, write_traces};
use crate::critical_path::{self, fetch, JobPath};
use crate::faults::{self, Audit, FaultsConfig, Injected};
use crate::invariants::{self, AuditCost, Invariant, Sightings};
use crate::progress::Progress;
use crate::report::VariantData;
use crate::sampler::{self, Target};
use crate::scenario::{Scenario, Variant};
use crate::stream::{self, Journal, RanJob, StreamReport};
use crate::summary::{self, Faulted, VariantInputs, VariantSummary};

/// How a variant reaches its cluster: the gRPC client, one client per
/// server (for the traces, which each server answers from its own record),
/// an HTTP client for `/metrics` (with the cluster's certificate when it
/// has TLS), what to sample.
pub(super) struct Driving {
    pub(super) client: ClusterClient,
    pub(super) servers: Vec<ClusterClient>,
    pub(super) http: reqwest::Client,
    pub(super) targets: Vec<Target>,
    pub(super) tls: bool,
    /// The nodesim processes loadgen started (for `pause_fleet`).
    pub(super) fleet: Vec<u32>,
}

/// How often the invariant audit reads allocation statuses during the stream.
const SAMPLE_ALLOCS_EVERY: Duration = Duration::from_secs(3);

/// What happened before the stream: problems met, how long the fleet took
/// to be ready, and the cluster's term when it first had a leader.
#[derive(Debug, Default)]
pub(super) struct BeforeStream {
    pub(super) problems: Vec<String>,
    pub(super) ready_s: Option<f64>,
    pub(super) term_at_start: Option<u64>,
}

/// One run of a variant: its summary, and what only the report draws of it.
pub(super) struct Done {
    pub(super) summary: VariantSummary,
    pub(super) data: VariantData,
}

/// What the stream did, with the faults injected meanwhile and the
/// problems injecting them met.
struct Streamed {
    report: StreamReport,
    journal: Journal,
    injected: Vec<Injected>,
    problems: Vec<String>,
}

/// Runs the stream while sampling (and, given the local `cluster`, injects
/// the scenario's faults meanwhile and audits after), keeps each process's
/// last `/metrics` in `dir/metrics/` and the slowest jobs' paths in
/// `dir/traces.json`, and sums up.
pub(super) async fn drive(
    scenario: &Scenario,
    v: &Variant,
    driving: Driving,
    dir: &Path,
    ctx: &Ctx<'_>,
    before: BeforeStream,
    mut cluster: Option<&mut LocalCluster>,
) -> Result<Done, CapacityError> {
    let start = Instant::now();
    let started_unix = unix_now();
    let Driving {
        client,
        servers,
        http,
        targets,
        tls,
        fleet,
    } = driving;
    let (stop, stopped) = watch::channel(false);
    let every = ctx.opts.sample_every;
    let sampling = tokio::spawn(sampler::run(http, targets, every, start, stopped));
    let fault_cfg = FaultsConfig {
        leader_wait: ctx.opts.fault_leader_wait,
        audit_wait: ctx.opts.audit_wait,
        ..FaultsConfig::default()
    };
    // The invariant audit's record of allocation statuses during the stream.
    let auditing = cluster.is_some() && (ctx.opts.audit || !scenario.faults.is_empty());
    let statuses = auditing.then(|| StatusSampling::start(&servers));
    let local = cluster.as_deref_mut();
    let mut ran =
        stream_with_faults(scenario, v, client, ctx, start, local, &fleet, &fault_cfg).await;
    if let Some(p) = ctx.prometheus {
        p.settle(ctx.opts.sample_every).await;
    }
    let _ = stop.send(true);
    let series = sampling.await.unwrap_or_default();
    write_last_metrics(dir, &series)?;
    let seconds = start.elapsed().as_secs_f64();
    let ended_unix = unix_now();
    let kept: Vec<JobTrace> = ran
        .injected
        .iter_mut()
        .flat_map(|i| std::mem::take(&mut i.traces_before))
        .collect();
    let (paths, untraced) = trace(&servers, &ran.journal.jobs.ran_jobs, &kept, dir).await?;
    // What the sampler saw: allocation statuses, and the jobs seen dead
    // (garbage collection may have removed them since).
    let seen = match statuses {
        Some(s) => Some(s.stop().await),
        None => None,
    };
    let (audit, invariants, audit_cost) = match cluster.as_deref() {
        Some(cluster) => audits(cluster, scenario, &ran.journal, seen, &fault_cfg, ctx).await,
        None => (None, Vec::new(), None),
    };
    let faulted = (cluster.is_some() && !scenario.faults.is_empty()).then(|| Faulted {
        injected: std::mem::take(&mut ran.injected),
        throughput_window: fault_cfg.throughput_window,
    });
    let was_faulted = faulted.is_some();
    let mut problems = before.problems;
    problems.extend(ran.problems);
    let summary = summary::assemble(VariantInputs {
        scenario,
        variant: v,
        stream: ran.report,
        journal: &ran.journal,
        series: &series,
        seconds,
        started_unix,
        ended_unix,
        problems,
        tls,
        binaries: cluster.as_ref().and(ctx.binaries.get(&v.name).cloned()),
        local: cluster.is_some(),
        cores: crate::validity::usable_cores(),
        paths: &paths,
        untraced,
        faulted,
        audit,
        invariants,
        invariants_audit: audit_cost,
        ready_s: before.ready_s,
        term_at_start: before.term_at_start,
        loadgen: stampede_proto::this_build!().into(),
    });
    let slowest = scenario.trace_slowest as usize;
    let data = VariantData::new(&summary, series, &ran.journal, &paths, slowest, was_faulted);
    write_traces(dir, &data.slowest_paths)?;
    Ok(Done { summary, data })
}

/// The job stream, with the scenario's faults injected meanwhile when
/// there is a local `cluster` to inject them into.
#[allow(clippy::too_many_arguments)]
async fn stream_with_faults(
    scenario: &Scenario,
    v: &Variant,
    client: ClusterClient,
    ctx: &Ctx<'_>,
    start: Instant,
    cluster: Option<&mut LocalCluster>,
    fleet: &[u32],
    fault_cfg: &FaultsConfig,
) -> Streamed {
    let prefix = id_safe(&format!("{}-{}", scenario.name, v.name));
    let progress = Progress::start(scenario, ctx.metrics);
    let stream = stream::run(client, scenario, &prefix, ctx.metrics, start);
    let ((report, journal), injected, problems) = match cluster {
        Some(cluster) if !scenario.faults.is_empty() => {
            let injecting = faults::inject(cluster, fleet, &scenario.faults, start, fault_cfg);
            let (stream, (injected, problems)) = tokio::join!(stream, injecting);
            (stream, injected, problems)
        }
        _ => (stream.await, Vec::new(), Vec::new()),
    };
    progress.finish();
    Streamed {
        report,
        journal,
        injected,
        problems,
    }
}

/// The invariant audit's sampling of allocation statuses during the stream.
struct StatusSampling {
    stop: watch::Sender<bool>,
    task: JoinHandle<Sightings>,
}

impl StatusSampling {
    fn start(servers: &[ClusterClient]) -> Self {
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(invariants::sample::run(
            servers.to_vec(),
            SAMPLE_ALLOCS_EVERY,
            stopped,
        ));
        StatusSampling { stop, task }
    }

    async fn stop(self) -> Sightings {
        let _ = self.stop.send(true);
        self.task.await.unwrap_or_default()
    }
}

/// The audits of a local cluster after the stream: every acknowledged job
/// on every server (with faults), and the invariants (when statuses were
/// `seen` during the stream).
async fn audits(
    cluster: &LocalCluster,
    scenario: &Scenario,
    journal: &Journal,
    seen: Option<Sightings>,
    fault_cfg: &FaultsConfig,
    ctx: &Ctx<'_>,
) -> (Option<Audit>, Vec<Invariant>, Option<AuditCost>) {
    let mut audit = None;
    if !scenario.faults.is_empty() {
        eprintln!(
            "loadgen: auditing {} acknowledged jobs on every server",
            journal.acked.len()
        );
        let dead = seen
            .as_ref()
            .map(|s| s.dead_jobs.clone())
            .unwrap_or_default();
        audit = Some(faults::audit(cluster, journal, &dead, fault_cfg).await);
    }
    let Some(seen) = seen else {
        return (audit, Vec::new(), None);
    };
    eprintln!("loadgen: checking the invariants on every server");
    let cfg = invariants::AuditConfig {
        wait: ctx.opts.audit_wait,
        ..Default::default()
    };
    let job_ids = journal.writes.iter().map(|w| w.job_id.clone()).collect();
    let (found, cost) = invariants::audit(cluster, &journal.writes, &job_ids, seen, &cfg).await;
    (audit, found, Some(cost))
}

/// One client for each of `addrs`, for reads that each server answers from
/// its own record: a server that does not answer is given up on soon.
pub(super) fn per_server(
    addrs: &[String],
    security: &Security,
) -> Result<Vec<ClusterClient>, ClientError> {
    addrs
        .iter()
        .map(|a| {
            Ok(ClusterClient::new(std::slice::from_ref(a), security)?
                .with_retry_for(Duration::from_secs(3))
                .with_attempt_timeout(Duration::from_secs(10)))
        })
        .collect()
}

/// The critical paths of the jobs that ran, from every server's traces,
/// and how many ran without one. Traces no server answered are told. With
/// `LOADGEN_TRACE_DUMP` set, every server's raw traces go to
/// `dir/trace_dump.jsonl` too.
async fn trace(
    servers: &[ClusterClient],
    ran: &[RanJob],
    kept: &[JobTrace],
    dir: &Path,
) -> Result<(Vec<JobPath>, u64), CapacityError> {
    let ids = critical_path::traced_ids(ran);
    let (traces, errors) = fetch::fetch(servers, &ids, kept).await;
    for e in errors {
        eprintln!("loadgen: where the time went: {e}");
    }
    if std::env::var_os("LOADGEN_TRACE_DUMP").is_some() {
        let runs = critical_path::last_runs(ran);
        let body = fetch::dump(servers, &runs).await;
        super::output::write(dir.join("trace_dump.jsonl"), body)?;
    }
    Ok(critical_path::paths(ran, &traces))
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
