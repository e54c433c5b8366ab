//! One run of a variant, on whichever cluster: the job stream while every
//! process is sampled (and, on a local cluster, the scenario's faults
//! injected meanwhile and the audit after), summed up by
//! [`summarize`](crate::summary::summarize).

use std::path::Path;
use std::time::Duration;

use stampede_launch::LocalCluster;
use stampede_proto::client::{ClientError, ClusterClient};
use stampede_proto::metric_names;
use stampede_proto::security::Security;
use tokio::sync::watch;
use tokio::time::Instant;

use super::ctx::{id_safe, Ctx};
use super::error::CapacityError;
use super::output::{write_last_metrics, write_traces};
use crate::critical_path::{self, fetch, JobPath};
use crate::faults::{self, FaultsConfig};
use crate::invariants;
use crate::progress::Progress;
use crate::sampler::{self, Series, Target};
use crate::scenario::{Scenario, Variant};
use crate::stream::{self, RanJob};
use crate::summary::fleet::{self, FleetInput};
use crate::summary::{summarize, window_figures, VariantSummary};
use crate::validity::{self, Budget, Schedule};

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

/// Runs the stream while sampling (and, given the local `cluster`, injects
/// the scenario's faults meanwhile and audits after), keeps each process's
/// last `/metrics` in `dir/metrics/`, and sums up.
pub(super) async fn drive(
    scenario: &Scenario,
    v: &Variant,
    driving: Driving,
    dir: &Path,
    ctx: &Ctx<'_>,
    before: BeforeStream,
    mut cluster: Option<&mut LocalCluster>,
) -> Result<VariantSummary, CapacityError> {
    let mut problems = before.problems;
    let start = Instant::now();
    let started_unix = unix_now();
    let (stop, stopped) = watch::channel(false);
    let Driving {
        client,
        servers,
        http,
        targets,
        tls,
        fleet,
    } = driving;
    let sampling = tokio::spawn(sampler::run(
        http,
        targets,
        ctx.opts.sample_every,
        start,
        stopped,
    ));
    let prefix = id_safe(&format!("{}-{}", scenario.name, v.name));
    let progress = Progress::start(scenario, ctx.metrics);
    let fault_cfg = FaultsConfig {
        leader_wait: ctx.opts.fault_leader_wait,
        audit_wait: ctx.opts.audit_wait,
        ..FaultsConfig::default()
    };
    // The invariant audit's record of allocation statuses during the stream.
    let auditing = cluster.is_some() && (ctx.opts.audit || !scenario.faults.is_empty());
    let (stop_sampling, sampling_stopped) = watch::channel(false);
    let statuses = auditing.then(|| {
        tokio::spawn(invariants::sample::run(
            servers.clone(),
            SAMPLE_ALLOCS_EVERY,
            sampling_stopped,
        ))
    });
    let stream = stream::run(client, scenario, &prefix, ctx.metrics, start);
    let ((report, journal), injected) = match cluster.as_deref_mut() {
        Some(cluster) if !scenario.faults.is_empty() => {
            let injecting = faults::inject(cluster, &fleet, &scenario.faults, start, &fault_cfg);
            let (stream, (injected, fault_problems)) = tokio::join!(stream, injecting);
            problems.extend(fault_problems);
            (stream, injected)
        }
        _ => (stream.await, Vec::new()),
    };
    progress.finish();
    if let Some(p) = ctx.prometheus {
        p.settle(ctx.opts.sample_every).await;
    }
    let _ = stop.send(true);
    let series = sampling.await.unwrap_or_default();
    write_last_metrics(dir, &series)?;
    let seconds = start.elapsed().as_secs_f64();
    let ended_unix = unix_now();
    let (paths, untraced) = trace(&servers, &report.jobs.ran_jobs).await;
    if std::env::var_os("LOADGEN_TRACE_DUMP").is_some() {
        let runs = critical_path::last_runs(&report.jobs.ran_jobs);
        let body = fetch::dump(&servers, &runs).await;
        super::output::write(dir.join("trace_dump.jsonl"), body)?;
    }
    // Seconds from the stream's start, as the samples count.
    let first_submit_s = report.jobs.placed.iter().map(|p| p.0).reduce(f64::min);
    let mut summary = summarize(v, report, series, seconds, problems);
    summary.tls = tls;
    summary.window_figures = window_figures(v, &summary, scenario.duration.as_secs_f64());
    let nodesim_args: Vec<String> = scenario
        .nodesim_args
        .iter()
        .chain(&v.nodesim_args)
        .cloned()
        .collect();
    let budget = Budget::new(&summary.series, &nodesim_args, cluster.is_some());
    let schedule = Schedule {
        scheduled: summary.stream.scheduled,
        late: summary.stream.late,
        dropped: summary.stream.dropped,
    };
    summary.validity = validity::judge(schedule, &summary.series, &budget);
    let jobs_per_s = summary.stream.submitted as f64 / scenario.duration.as_secs_f64();
    if cluster.is_some() && !scenario.faults.is_empty() {
        let stream_s = scenario.duration.as_secs_f64();
        summary.faults = faults::measure(
            &injected,
            &journal,
            &summary.stream.jobs,
            stream_s,
            fault_cfg.throughput_window,
        );
    }
    let windows = faults::windows(&summary.faults, summary.stream.jobs.start_us);
    summary.critical_path = critical_path::figures_with_faults(
        &paths,
        untraced,
        &summary.cpu_cores,
        jobs_per_s,
        &windows,
        &scenario.job_mix,
    );
    let k = scenario.trace_slowest as usize;
    summary.slowest_paths = critical_path::slowest_marked(&paths, k, &v.name, &windows);
    write_traces(dir, &summary.slowest_paths)?;
    summary.started_unix = started_unix;
    summary.ended_unix = ended_unix;
    // What the sampler saw: allocation statuses, and the jobs seen dead
    // (garbage collection may have removed them since).
    let seen = match statuses {
        Some(statuses) => {
            let _ = stop_sampling.send(true);
            Some(statuses.await.unwrap_or_default())
        }
        None => None,
    };
    if let Some(cluster) = cluster.as_deref().filter(|_| !scenario.faults.is_empty()) {
        summary.acks_per_second = faults::acks_per_second(&journal, seconds);
        eprintln!(
            "loadgen: auditing {} acknowledged jobs on every server",
            journal.acked.len()
        );
        let dead = seen
            .as_ref()
            .map(|s| s.dead_jobs.clone())
            .unwrap_or_default();
        summary.audit = Some(faults::audit(cluster, &journal, &dead, &fault_cfg).await);
    }
    if let (Some(cluster), Some(seen)) = (cluster.as_deref(), seen) {
        eprintln!("loadgen: checking the invariants on every server");
        let cfg = invariants::AuditConfig {
            wait: ctx.opts.audit_wait,
            ..Default::default()
        };
        let job_ids = journal.writes.iter().map(|w| w.job_id.clone()).collect();
        summary.invariants =
            invariants::audit(cluster, &journal.writes, &job_ids, seen, &cfg).await;
    }
    let times = (before.ready_s, before.term_at_start, first_submit_s);
    add_fleet(&mut summary, scenario.nodes, times);
    Ok(summary)
}

/// The run's elections and its fleet's figures, from the samples.
/// `times`: when the fleet was ready, the term at the start, and when the
/// first job was submitted.
fn add_fleet(
    summary: &mut VariantSummary,
    nodes: u64,
    (ready_s, term_at_start, first_submit_s): (Option<f64>, Option<u64>, Option<f64>),
) {
    let is_server = |s: &&Series| !s.names_of(metric_names::RAFT_TERM).is_empty();
    let servers: Vec<&Series> = summary.series.iter().filter(is_server).collect();
    let nodesims: Vec<&Series> = summary
        .series
        .iter()
        .filter(|s| !s.names_of(metric_names::NODESIM_NODES).is_empty())
        .collect();
    let elections = fleet::elections(&servers, term_at_start);
    let ran = summary.stream.time_to_running_ms.count > 0;
    let f = fleet::fleet(&FleetInput {
        nodes,
        ready_s,
        first_submit_s,
        servers: &servers,
        nodesims: &nodesims,
        faults: &summary.faults,
        elections,
        slowest_running_ms: ran.then_some(summary.stream.time_to_running_ms.max),
    });
    summary.elections = elections;
    summary.fleet = f;
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
/// and how many ran without one. Traces no server answered are told.
async fn trace(servers: &[ClusterClient], ran: &[RanJob]) -> (Vec<JobPath>, u64) {
    let ids = critical_path::traced_ids(ran);
    let (traces, errors) = fetch::fetch(servers, &ids).await;
    for e in errors {
        eprintln!("loadgen: where the time went: {e}");
    }
    critical_path::paths(ran, &traces)
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
