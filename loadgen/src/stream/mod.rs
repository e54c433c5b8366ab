//! The job stream: open-loop submissions on the scenario's schedule, each
//! followed to its placement and to its allocations running.
//!
//! Open loop: every submission starts at its scheduled time whatever the
//! cluster is doing, and its latencies count from that time, so a slow
//! cluster cannot hide behind a slow client (no coordinated omission). A
//! submission that starts late, or is dropped because too many are still in
//! flight, is counted.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use stampede_proto::client::ClusterClient;
use stampede_proto::JobDeregisterRequest;
use tokio::time::Instant;

use crate::invariants::{Outcome, Write, WriteKind};
use crate::metrics::LoadMetrics;
use crate::scenario::{JobKind, Scenario};

mod draw;
mod follow;
mod report;

use draw::{Draw, Planner};
use follow::{submit_and_follow, Submission};
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
    /// Registrations sent so far, per job: a submission followed to
    /// running after a later one of its job was sent waited for that one.
    sent: std::collections::HashMap<String, u32>,
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
        t.journal.jobs.start_us = t.clock.unix_us(start);
    }
    let mut planner = Planner::new(scenario, prefix);
    // Which server each write goes to first: drawn apart from the workload.
    let mut first_server = rand::rngs::StdRng::seed_from_u64(SEED + 1);
    let total = scenario.duration.as_secs_f64();
    let mut t = 0.0;
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        t += planner.gap(t, total);
        if t >= total {
            break;
        }
        let at = start + Duration::from_secs_f64(t);
        let draw = planner.draw(&tally);
        let writer = client.starting_at(first_server.gen_range(0..client.channel_count()));
        match draw {
            Draw::Deregister { id, purge } => {
                tokio::time::sleep_until(at).await;
                let tally = tally.clone();
                tasks.spawn(async move { deregister(writer, id, purge, start, tally).await });
            }
            Draw::Register {
                job,
                update,
                version,
                scaled,
            } => {
                tally.lock().unwrap().report.scheduled += 1;
                tokio::time::sleep_until(at).await;
                while tasks.try_join_next().is_some() {}
                if !admitted(&tally, metrics, tasks.len(), at, &job.id) {
                    continue;
                }
                let submission = Submission {
                    job,
                    update,
                    version,
                    scaled,
                    start,
                    scheduled: at,
                };
                let (tally, metrics) = (tally.clone(), metrics.clone());
                tasks.spawn(submit_and_follow(writer, submission, tally, metrics));
            }
        }
    }
    let _ = tokio::time::timeout(scenario.drain, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    // Followers still waiting when the drain ends are given up on (they show
    // as submitted but not placed or not running).
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    let tally = std::mem::take(&mut *tally.lock().unwrap());
    finish(tally, start, total)
}

/// Whether a submission due `at` goes out, with `in_flight` still followed:
/// dropped (and counted) past [`MAX_IN_FLIGHT`], counted late past
/// [`LATE_AFTER`], and recorded as submitted.
fn admitted(
    tally: &Mutex<Tally>,
    metrics: &LoadMetrics,
    in_flight: usize,
    at: Instant,
    job_id: &str,
) -> bool {
    let mut t = tally.lock().unwrap();
    if in_flight >= MAX_IN_FLIGHT {
        t.report.dropped += 1;
        metrics.submitted(crate::metrics::Outcome::Dropped);
        return false;
    }
    if at.elapsed() > LATE_AFTER {
        t.report.late += 1;
        metrics.late.inc();
    }
    t.journal.submitted.insert(job_id.to_string());
    true
}

/// The stream's report and journal from its tally, once every follower ended.
fn finish(mut tally: Tally, start: Instant, total: f64) -> (StreamReport, Journal) {
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
    tally.report.running_windows = windows(&tally.journal.jobs.ran, total);
    let q = sketch_quantiles();
    tally.report.latency_quantiles = LatencyQuantiles {
        placement_ms: quantiles_ms(tally.placement.as_ref(), &q),
        time_to_running_ms: quantiles_ms(tally.running.as_ref(), &q),
        q,
    };
    tally.report.makespan_s = report::makespan_s(&tally.journal.jobs.ran, tally.report.scheduled);
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
