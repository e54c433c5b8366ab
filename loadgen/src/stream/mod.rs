//! The job stream: open-loop submissions on the scenario's schedule, each
//! followed to its placement and to its allocations running.
//!
//! Open loop: every submission starts at its scheduled time whatever the
//! cluster is doing, and its latencies count from that time, so a slow
//! cluster cannot hide behind a slow client (no coordinated omission). A
//! submission that starts late, or is dropped because too many are still in
//! flight, is counted.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use rand::distributions::{Distribution, WeightedIndex};
use rand::{Rng, SeedableRng};
use stampede_proto::client::ClusterClient;
use stampede_proto::{
    AllocClientStatus, AllocDesiredStatus, Constraint, ConstraintOperand, ConstraintTarget,
    EvalGetRequest, EvalStatus, Job, JobDeregisterRequest, JobSummaryRequest, JobType,
    QueryOptions, Resources, TaskGroup, UpdateStrategy,
};
use tokio::time::Instant;

use crate::invariants::{Outcome, Write, WriteKind};
use crate::metrics::LoadMetrics;
use crate::scenario::{JobKind, Kind, Scenario};

mod report;

use report::{percentiles_ms, quantiles_ms, windows};
pub use report::{
    sketch_quantiles, Ack, JobTimes, Journal, LatencyQuantiles, Percentiles, RanJob, StreamReport,
    Window,
};

/// Submissions in flight at most; more are dropped (and counted).
pub const MAX_IN_FLIGHT: usize = 10_000;
/// A submission that starts this much after its schedule counts as late.
pub const LATE_AFTER: Duration = Duration::from_millis(100);
/// Every stream draws its arrivals, job kinds and updates from this seed, so
/// the variants of a scenario compare on the very same workload.
pub const SEED: u64 = 42;
/// How long a blocking query of the follower waits.
const FOLLOW_WAIT: Duration = Duration::from_secs(30);

/// The stream's `Instant`s on the wall clock: `SystemTime` read once next
/// to an `Instant`, and elapsed durations added to it, so that a job's
/// times line up with the servers' and nodesim's Unix microseconds.
#[derive(Debug, Clone, Copy)]
struct WallClock {
    at: Instant,
    unix_us: u64,
}

impl WallClock {
    fn now() -> Self {
        let at = Instant::now();
        let unix_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        Self { at, unix_us }
    }

    /// `t` in Unix microseconds.
    fn unix_us(&self, t: Instant) -> u64 {
        let after = t.saturating_duration_since(self.at).as_micros() as u64;
        let before = self.at.saturating_duration_since(t).as_micros() as u64;
        (self.unix_us + after).saturating_sub(before)
    }
}

impl Default for WallClock {
    fn default() -> Self {
        Self::now()
    }
}

#[derive(Default)]
struct Tally {
    clock: WallClock,
    report: StreamReport,
    journal: Journal,
    placement: Option<Histogram<u64>>,
    running: Option<Histogram<u64>>,
    last_placement: Option<Instant>,
    /// Jobs followed to running: the ones a stop may pick.
    settled: HashSet<String>,
}

impl Tally {
    /// Records the time since `since` in the run's histogram and in the live metric.
    fn record(h: &mut Option<Histogram<u64>>, live: &prometheus::Histogram, since: Instant) {
        let h = h.get_or_insert_with(|| {
            // Microseconds up to an hour; saturating_record does not grow a histogram.
            Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds")
        });
        let took = since.elapsed();
        h.saturating_record(took.as_micros() as u64);
        live.observe(took.as_secs_f64());
    }
}

/// The id of the `n`th job of kind `k`.
fn job_id(prefix: &str, k: &JobKind, n: u64) -> String {
    format!("{prefix}-{}-{n}", k.name)
}

/// Stops a job the stream registered earlier (kept for history, as
/// `nomad job stop` does), or purges it; counts and records what came of it.
async fn deregister(
    client: ClusterClient,
    job_id: String,
    purge: bool,
    start: Instant,
    tally: Arc<Mutex<Tally>>,
) {
    let sent_s = start.elapsed().as_secs_f64();
    let result = client
        .writing(|c| {
            let req = JobDeregisterRequest {
                job_id: job_id.clone(),
                purge,
            };
            async move { c.jobs().deregister(req).await }
        })
        .await;
    let mut t = tally.lock().unwrap();
    let outcome = Outcome::of(&result);
    if matches!(outcome, Outcome::Indefinite { .. }) {
        // It may have taken effect (a purge whose first attempt got no
        // answer, whose retry found the job gone): the job's absence is no
        // loss.
        t.journal.stopped.insert(job_id.clone());
    }
    t.journal.writes.push(Write {
        job_id: job_id.clone(),
        kind: if purge {
            WriteKind::Purge
        } else {
            WriteKind::Stop
        },
        sent_s,
        answered_s: start.elapsed().as_secs_f64(),
        outcome,
    });
    match (result, purge) {
        (Ok(_), false) => {
            t.report.stops += 1;
            t.journal.stopped.insert(job_id);
        }
        (Ok(_), true) => {
            t.report.purges += 1;
            t.journal.stopped.insert(job_id);
        }
        (Err(e), false) => {
            tracing::warn!(job = job_id, "stopping the job failed: {e}");
            t.report.stops_failed += 1;
        }
        (Err(e), true) => {
            tracing::warn!(job = job_id, "purging the job failed: {e}");
            t.report.purges_failed += 1;
        }
    }
}

/// The job a submission registers: kind `k`, numbered `n`, at spec
/// `version`, with `count` allocations (a scale changes only that).
fn build_job(prefix: &str, k: &JobKind, n: u64, version: u64, count: u32) -> Job {
    let update = (k.max_parallel > 0).then_some(UpdateStrategy {
        max_parallel: k.max_parallel,
        min_healthy_time_ms: k.min_healthy_time_ms,
        progress_deadline_ms: 600_000,
        ..Default::default()
    });
    Job {
        id: job_id(prefix, k, n),
        r#type: match k.kind {
            Kind::Service => JobType::Service,
            Kind::Batch => JobType::Batch,
            Kind::System => JobType::System,
        } as i32,
        task_groups: vec![TaskGroup {
            name: k.name.clone(),
            count: Some(count),
            resources: Some(Resources {
                cpu_mhz: k.cpu_mhz,
                memory_mb: k.memory_mb,
            }),
            update,
            meta: [("spec".to_string(), version.to_string())].into(),
            constraints: k
                .node_class
                .iter()
                .map(|class| Constraint {
                    target: ConstraintTarget::NodeClass as i32,
                    operand: ConstraintOperand::Equal as i32,
                    value: class.clone(),
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// Runs the scenario's stream against `client` and follows every job until
/// `drain` after the last submission. `prefix` keeps job ids of variants apart;
/// `metrics` shows the stream live. The schedule counts from `start` (now,
/// or a moment ago); the [`Journal`] records every job id submitted and
/// acknowledged.
pub async fn run(
    client: ClusterClient,
    scenario: &Scenario,
    prefix: &str,
    metrics: &LoadMetrics,
    start: Instant,
) -> (StreamReport, Journal) {
    let tally = Arc::new(Mutex::new(Tally::default()));
    {
        let mut t = tally.lock().unwrap();
        t.report.jobs.start_us = t.clock.unix_us(start);
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(SEED);
    let weights = WeightedIndex::new(scenario.job_mix.iter().map(|j| j.weight))
        .expect("the scenario check keeps weights above 0");
    let total = scenario.duration.as_secs_f64();
    let mut t = 0.0;
    let mut tasks = tokio::task::JoinSet::new();
    // Jobs registered so far, by kind, with their spec version and count:
    // updates and scales pick one.
    let mut registered: Vec<(usize, u64, u64, u32)> = Vec::new();
    // Which server each write goes to first: drawn apart from the workload.
    let mut first_server = rand::rngs::StdRng::seed_from_u64(SEED + 1);
    let mut counts: HashMap<usize, u64> = HashMap::new();
    let is_batch = |kind: usize| scenario.job_mix[kind].kind == Kind::Batch;
    // Whether the stream has followed job `n` of a kind to its end.
    let settled = |t: &Tally, kind: usize, n: u64| {
        t.settled
            .contains(&job_id(prefix, &scenario.job_mix[kind], n))
    };
    loop {
        let rate = scenario.arrival.rate_at(t, total).max(1e-3);
        let gap = match scenario.arrival {
            crate::scenario::Arrival::Poisson { .. } => {
                let u: f64 = rng.gen_range(f64::EPSILON..1.0);
                -u.ln() / rate
            }
            _ => 1.0 / rate,
        };
        t += gap;
        if t >= total {
            break;
        }
        let at = start + Duration::from_secs_f64(t);
        if scenario.stop_share > 0.0 {
            // A stream that stops jobs is one meant to run long: batch work
            // that has run is done with, not updated again, so the mix of
            // live jobs an update picks from stays the same all through.
            let t = tally.lock().unwrap();
            registered.retain(|&(kind, n, _, _)| !(is_batch(kind) && settled(&t, kind, n)));
        }
        let update = !registered.is_empty() && rng.gen_bool(scenario.update_share);
        // Drawn only when stops are asked for, so the workload of a scenario
        // without them stays as it always was.
        let stop = !update
            && scenario.stop_share > 0.0
            && rng.gen_bool((scenario.stop_share / (1.0 - scenario.update_share)).min(1.0));
        // Scales and purges are drawn likewise, each from what is left.
        let mut rest = 1.0 - scenario.update_share - scenario.stop_share;
        let mut draw = |share: f64, rng: &mut rand::rngs::StdRng, before: bool| {
            let p = if rest > 0.0 {
                (share / rest).min(1.0)
            } else {
                1.0
            };
            rest -= share;
            !before && share > 0.0 && rng.gen_bool(p)
        };
        let scale = draw(scenario.scale_share, &mut rng, update || stop);
        let purge = draw(scenario.purge_share, &mut rng, update || stop || scale);
        let writer = client.starting_at(first_server.gen_range(0..client.channel_count()));
        if stop || purge {
            let settled = {
                let t = tally.lock().unwrap();
                registered
                    .iter()
                    .enumerate()
                    .filter(|(_, &(kind, n, _, _))| !is_batch(kind) && settled(&t, kind, n))
                    .map(|(i, _)| i)
                    .collect::<Vec<_>>()
            };
            if !settled.is_empty() {
                let i = settled[rng.gen_range(0..settled.len())];
                let (kind, n, _, _) = registered.swap_remove(i);
                let id = job_id(prefix, &scenario.job_mix[kind], n);
                tokio::time::sleep_until(at).await;
                let tally = tally.clone();
                tasks.spawn(async move { deregister(writer, id, purge, start, tally).await });
                continue;
            }
        }
        // A scale picks a service job: the same spec with another count.
        let scalable: Vec<usize> = match scale {
            true => (0..registered.len())
                .filter(|&i| scenario.job_mix[registered[i].0].kind == Kind::Service)
                .collect(),
            false => Vec::new(),
        };
        let (kind, n, version, count) = if !scalable.is_empty() {
            let i = scalable[rng.gen_range(0..scalable.len())];
            let k = &scenario.job_mix[registered[i].0];
            // 1 to twice the kind's count, never the job's present count.
            let mut count = rng.gen_range(1..=(2 * k.count).max(2) - 1);
            if count >= registered[i].3 {
                count += 1;
            }
            registered[i].3 = count;
            registered[i]
        } else if update {
            let i = rng.gen_range(0..registered.len());
            registered[i].2 += 1;
            registered[i]
        } else {
            let kind = weights.sample(&mut rng);
            let n = counts.entry(kind).or_default();
            *n += 1;
            let k = &scenario.job_mix[kind];
            let count = if k.kind == Kind::System { 1 } else { k.count };
            registered.push((kind, *n, 0, count));
            (kind, *n, 0, count)
        };
        let scaled = !scalable.is_empty();
        let job = build_job(prefix, &scenario.job_mix[kind], n, version, count);
        tally.lock().unwrap().report.scheduled += 1;
        tokio::time::sleep_until(at).await;
        while tasks.try_join_next().is_some() {}
        if tasks.len() >= MAX_IN_FLIGHT {
            tally.lock().unwrap().report.dropped += 1;
            metrics.submitted(crate::metrics::Outcome::Dropped);
            continue;
        }
        if at.elapsed() > LATE_AFTER {
            tally.lock().unwrap().report.late += 1;
            metrics.late.inc();
        }
        tally
            .lock()
            .unwrap()
            .journal
            .submitted
            .insert(job.id.clone());
        let (tally, metrics) = (tally.clone(), metrics.clone());
        let (update, version) = (update && !scaled, (version, scaled));
        tasks.spawn(submit_and_follow(
            writer, job, update, version, start, at, tally, metrics,
        ));
    }
    let _ = tokio::time::timeout(scenario.drain, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    // Followers still waiting when the drain ends are given up on (they show
    // as submitted but not placed or not running).
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    let mut tally = std::mem::take(&mut *tally.lock().unwrap());
    tally.report.placement_ms = tally
        .placement
        .as_ref()
        .map(percentiles_ms)
        .unwrap_or_default();
    tally.report.time_to_running_ms = tally
        .running
        .as_ref()
        .map(percentiles_ms)
        .unwrap_or_default();
    tally.report.running_windows = windows(&tally.report.jobs.ran, total);
    let q = sketch_quantiles();
    tally.report.latency_quantiles = LatencyQuantiles {
        placement_ms: quantiles_ms(tally.placement.as_ref(), &q),
        time_to_running_ms: quantiles_ms(tally.running.as_ref(), &q),
        q,
    };
    if let Some(last) = tally.last_placement {
        let secs = (last - start).as_secs_f64().max(1e-3);
        tally.report.placements_per_second = tally.report.allocations_placed as f64 / secs;
    }
    tally
        .journal
        .acks
        .sort_by(|a, b| a.acked_s.total_cmp(&b.acked_s));
    (tally.report, tally.journal)
}

/// Registers `job` (an update when `update`; `(version, scaled)`: its spec
/// version, and whether it scales an earlier job), records the write, and
/// follows the job to placement and to running.
#[allow(clippy::too_many_arguments)]
async fn submit_and_follow(
    client: ClusterClient,
    job: Job,
    update: bool,
    (version, scaled): (u64, bool),
    start: Instant,
    scheduled: Instant,
    tally: Arc<Mutex<Tally>>,
    metrics: LoadMetrics,
) {
    let sent_s = start.elapsed().as_secs_f64();
    let reply = client.register_job(job.clone()).await;
    tally.lock().unwrap().journal.writes.push(Write {
        job_id: job.id.clone(),
        kind: WriteKind::Register {
            version,
            count: job.task_groups[0].count(),
        },
        sent_s,
        answered_s: start.elapsed().as_secs_f64(),
        outcome: Outcome::of(&reply),
    });
    let reply = match reply {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(job = job.id, "submission failed: {e}");
            tally.lock().unwrap().report.failed += 1;
            metrics.submitted(crate::metrics::Outcome::Failed);
            return;
        }
    };
    let acked_s = start.elapsed().as_secs_f64();
    metrics.submitted(crate::metrics::Outcome::Accepted);
    let _following = Following::start(&metrics.following);
    {
        let mut t = tally.lock().unwrap();
        t.report.submitted += 1;
        t.report.updates += update as u64;
        t.report.scales += scaled as u64;
        t.journal.acked.insert(job.id.clone());
        t.journal.acks.push(Ack {
            scheduled_s: (scheduled - start).as_secs_f64(),
            acked_s,
        });
    }
    // Placed: the evaluation the submission created has completed.
    let mut index = 1;
    loop {
        let eval_id = &reply.eval_id;
        let Some(got) = read(&client, &tally, &job.id, |c| async move {
            let req = EvalGetRequest {
                eval_id: eval_id.clone(),
                query: Some(query(index)),
            };
            Ok(c.evals().get(req).await?.into_inner())
        })
        .await
        else {
            return;
        };
        index = got.index;
        let status = got.eval.map_or(0, |e| e.status);
        if status == EvalStatus::Complete as i32 || status == EvalStatus::Blocked as i32 {
            break;
        }
        if status == EvalStatus::Failed as i32 || status == EvalStatus::Canceled as i32 {
            // A newer evaluation of the job took over: the job is followed below.
            break;
        }
    }
    {
        let mut t = tally.lock().unwrap();
        Tally::record(&mut t.placement, &metrics.placement, scheduled);
        let at = (scheduled - start).as_secs_f64();
        let ms = scheduled.elapsed().as_secs_f64() * 1000.0;
        t.report.jobs.placed.push((at, ms));
        if update {
            t.report.jobs.rollouts.push(at);
        }
        t.report.placed += 1;
        t.last_placement = Some(Instant::now());
    }
    // Running: every allocation of this spec runs (or, for batch work, ran).
    let want = job.task_groups[0].count() as usize;
    let system = job.r#type == JobType::System as i32;
    let mut index = 1;
    loop {
        let job_id = &job.id;
        let Some(got) = read(&client, &tally, &job.id, |c| async move {
            let req = JobSummaryRequest {
                job_id: job_id.clone(),
                query: Some(query(index)),
            };
            Ok(c.jobs().summary(req).await?.into_inner())
        })
        .await
        else {
            return;
        };
        index = got.index;
        // The newest version placed is this submission's (or a later one's).
        let newest = got.counts.iter().map(|c| c.job_version).max().unwrap_or(0);
        let current: Vec<_> = got
            .counts
            .iter()
            .filter(|c| c.desired_status == AllocDesiredStatus::Run as i32)
            .filter(|c| c.job_version == newest)
            .collect();
        let total: u64 = current.iter().map(|c| c.count).sum();
        let up = current
            .iter()
            .filter(|c| {
                c.client_status == AllocClientStatus::Running as i32
                    || c.client_status == AllocClientStatus::Complete as i32
            })
            .map(|c| c.count)
            .sum::<u64>() as usize;
        let enough = if system {
            up > 0 && up as u64 == total
        } else {
            up >= want
        };
        if enough {
            let now = Instant::now();
            let mut t = tally.lock().unwrap();
            Tally::record(&mut t.running, &metrics.time_to_running, scheduled);
            t.report.jobs.ran.push((
                (scheduled - start).as_secs_f64(),
                (now - scheduled).as_secs_f64() * 1000.0,
                up as u64,
            ));
            let ran = RanJob {
                job_id: job.id.clone(),
                scheduled_us: t.clock.unix_us(scheduled),
                running_us: t.clock.unix_us(now),
            };
            t.report.jobs.ran_jobs.push(ran);
            t.settled.insert(job.id.clone());
            t.report.running += 1;
            t.report.allocations_placed += up as u64;
            return;
        }
    }
}

/// Counts a job as followed until the follower ends, however it ends
/// (done, lost, or aborted when the drain runs out).
struct Following(prometheus::IntGauge);

impl Following {
    fn start(gauge: &prometheus::IntGauge) -> Self {
        gauge.inc();
        Self(gauge.clone())
    }
}

impl Drop for Following {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// One read while following a job: retried on other servers while the
/// cluster is unavailable, and after a pause while the answering server does
/// not know the object yet (it is a little behind the one that took the
/// write). `None`, counted as failed, when following is hopeless.
async fn read<T, F, Fut>(
    client: &ClusterClient,
    tally: &Mutex<Tally>,
    job_id: &str,
    call: F,
) -> Option<T>
where
    F: Fn(ClusterClient) -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    // A blocking read waits up to FOLLOW_WAIT on the server before it answers.
    let client = client
        .clone()
        .with_attempt_timeout(FOLLOW_WAIT + stampede_proto::client::DEFAULT_ATTEMPT_TIMEOUT);
    loop {
        match client.retrying(&call).await {
            Ok(v) => return Some(v),
            Err(e) if e.code() == Some(tonic::Code::NotFound) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => {
                lost(tally, job_id, e);
                return None;
            }
        }
    }
}

/// A job that could no longer be followed counts as failed.
fn lost(tally: &Mutex<Tally>, job_id: &str, e: stampede_proto::client::ClientError) {
    tracing::warn!(job = job_id, "following the job failed: {e}");
    tally.lock().unwrap().report.failed += 1;
}

fn query(min_index: u64) -> QueryOptions {
    QueryOptions {
        min_index,
        max_wait_ms: FOLLOW_WAIT.as_millis() as u64,
        source: stampede_proto::QuerySource::Loadgen.label().into(),
    }
}
