//! What the stream measured: its report (counts, latency percentiles and
//! sketches, windows) and its journal of every job, and the pure functions
//! that turn histograms and per-job timings into them.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::time::Duration;

/// What the stream did, latencies in milliseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct StreamReport {
    pub scheduled: u64,
    pub submitted: u64,
    pub updates: u64,
    pub late: u64,
    pub dropped: u64,
    pub failed: u64,
    /// Followed until placed / running before the drain ran out.
    pub placed: u64,
    pub running: u64,
    pub placement_ms: Percentiles,
    pub time_to_running_ms: Percentiles,
    pub allocations_placed: u64,
    /// Allocations placed per second, from the first submission to the last placement.
    pub placements_per_second: f64,
    /// Seconds from the first submission's scheduled time to the moment the
    /// stream saw the last job's allocations all running (its blocking
    /// query on the job's summary answered with every one up): how long
    /// the whole workload took to run, queueing and all. Null unless every
    /// scheduled submission was acknowledged and followed to running (a
    /// job dropped, refused, lost or still pending when the drain ended
    /// leaves no last allocation to count to). See [`makespan_s`].
    pub makespan_s: Option<f64>,
    /// Jobs the stream stopped (`stop_share`), and stops the cluster refused.
    pub stops: u64,
    pub stops_failed: u64,
    /// Jobs the stream scaled (`scale_share`: registered again with another
    /// count); counted in `submitted` too.
    pub scales: u64,
    /// Jobs the stream purged (`purge_share`), and purges the cluster refused.
    pub purges: u64,
    pub purges_failed: u64,
    /// p99 time to running of the jobs scheduled in each window of the
    /// stream, in order: whether the end of a long run is as fast as its start.
    pub running_windows: Vec<Window>,
    /// The whole latency distributions, not only their percentiles: what
    /// the report plots as CDFs.
    pub latency_quantiles: LatencyQuantiles,
}

/// Job by job, in seconds from the start of the stream and milliseconds:
/// the journal's, never the summary's (the figures of a slice of the
/// stream, a fault's recovery and the jobs' critical paths are read from
/// them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobTimes {
    /// When each placed job was scheduled, and how long it took to be placed.
    pub placed: Vec<(f64, f64)>,
    /// When each job that ran was scheduled, how long it took to run, and
    /// the allocations up then (the placements it counts).
    pub ran: Vec<(f64, f64, u64)>,
    /// Every job that ran, on the wall clock: what its critical path is
    /// traced against (a job updated and run again appears once per run).
    pub ran_jobs: Vec<RanJob>,
    /// The start of the stream (second 0 of the times above) on the same
    /// wall clock, in Unix microseconds.
    pub start_us: u64,
    /// When each submission that updated a job was scheduled (as in
    /// `placed`): its placement and time to running go at its rolling
    /// update's pace, so a fault's recovery compares it with other updates.
    pub rollouts: Vec<f64>,
    /// When each submission that ran only as a later submission of its job
    /// (an update sent before it ran) was scheduled: its time to running
    /// includes that update's rollout, so a fault's recovery leaves it out
    /// (the update is measured on its own).
    pub superseded: Vec<f64>,
}

/// A job that ran: its id, when its submission was scheduled and when the
/// stream saw it running, in Unix microseconds (loadgen's `Instant`s put on
/// the wall clock that every process of a local run shares).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RanJob {
    pub job_id: String,
    pub scheduled_us: u64,
    pub running_us: u64,
}

impl Percentiles {
    /// Nearest-rank percentiles of `ms` (any order).
    pub fn of(ms: &[f64]) -> Self {
        let mut v = ms.to_vec();
        v.sort_by(f64::total_cmp);
        let at = |q: f64| match v.len() {
            0 => 0.0,
            n => v[((n as f64 * q).ceil() as usize).clamp(1, n) - 1],
        };
        Percentiles {
            count: v.len() as u64,
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            max: at(1.0),
        }
    }
}

impl JobTimes {
    /// What the stream measured of the jobs in `[from, to)` seconds: the
    /// latencies of those scheduled in it, and the placements (allocations
    /// up) of those that ran in it.
    pub fn slice(&self, from: f64, to: f64) -> StreamReport {
        let within = |t: f64| t >= from && t < to;
        let placed: Vec<f64> = self
            .placed
            .iter()
            .filter(|j| within(j.0))
            .map(|j| j.1)
            .collect();
        let ran: Vec<f64> = self
            .ran
            .iter()
            .filter(|j| within(j.0))
            .map(|j| j.1)
            .collect();
        let allocations: u64 = (self.ran.iter())
            .filter(|(at, ms, _)| within(at + ms / 1000.0))
            .map(|j| j.2)
            .sum();
        StreamReport {
            placed: placed.len() as u64,
            running: ran.len() as u64,
            placement_ms: Percentiles::of(&placed),
            time_to_running_ms: Percentiles::of(&ran),
            allocations_placed: allocations,
            placements_per_second: allocations as f64 / (to - from).max(1e-9),
            ..StreamReport::default()
        }
    }
}

/// The stream's makespan (`StreamReport::makespan_s`): from the earliest
/// scheduled submission among `ran` (each job that ran: when it was
/// scheduled, seconds from the stream's start, and how long it took to
/// run, ms) to the latest moment one of them was seen running, seconds.
/// `None` when nothing ran, or when fewer ran than the `scheduled`
/// submissions (some never did, so the last allocation running is unknown).
pub fn makespan_s(ran: &[(f64, f64, u64)], scheduled: u64) -> Option<f64> {
    if ran.is_empty() || (ran.len() as u64) < scheduled {
        return None;
    }
    let first = ran.iter().map(|j| j.0).reduce(f64::min)?;
    let last = ran.iter().map(|j| j.0 + j.1 / 1000.0).reduce(f64::max)?;
    Some((last - first).max(0.0))
}

/// A sorted quantile sketch of the placement and time-to-running
/// latencies: the latency in ms at each quantile of `q` (empty when no job
/// got that far). About a hundred points keep summary.json small and still
/// draw a smooth CDF, with the tail (p99.5, p99.9) kept.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct LatencyQuantiles {
    pub q: Vec<f64>,
    pub placement_ms: Vec<f64>,
    pub time_to_running_ms: Vec<f64>,
}

/// The quantiles the sketch keeps: 0 (the fastest), every percent, the
/// far tail, and 1 (the slowest).
pub fn sketch_quantiles() -> Vec<f64> {
    let mut q: Vec<f64> = (0..100).map(|i| i as f64 / 100.0).collect();
    q.extend([0.995, 0.999, 1.0]);
    q
}

/// One window of the stream.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Window {
    pub from_s: f64,
    pub to_s: f64,
    /// Jobs scheduled in it that ran.
    pub jobs: u64,
    /// Null when none did.
    pub time_to_running_p99_ms: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Percentiles {
    pub count: u64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// What the stream did job by job: what an audit checks the cluster
/// against, and what the measures around a fault are read from.
#[derive(Debug, Clone, Default)]
pub struct Journal {
    /// Every job id the stream sent a registration (or an update) for,
    /// acknowledged or not.
    pub submitted: HashSet<String>,
    /// Every job id whose registration (or update) the cluster acknowledged.
    pub acked: HashSet<String>,
    /// Every acknowledgement: when its submission was scheduled and when it
    /// was acknowledged, in seconds from the start of the stream.
    pub acks: Vec<Ack>,
    /// Every job id the stream stopped, or asked to stop or purge with no
    /// answer either way: garbage collection, or the purge, may have
    /// removed them.
    pub stopped: HashSet<String>,
    /// Every write (registration, update, scale, stop, purge) with its
    /// answer, for the invariant audit.
    pub writes: Vec<crate::invariants::Write>,
    /// Every job placed and every job that ran, with their times.
    pub jobs: JobTimes,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ack {
    pub scheduled_s: f64,
    pub acked_s: f64,
}

/// The percentiles, in milliseconds, of a histogram of microseconds.
pub(super) fn percentiles_ms(h: &Histogram<u64>) -> Percentiles {
    if h.is_empty() {
        return Percentiles::default();
    }
    let ms = |v: u64| v as f64 / 1000.0;
    Percentiles {
        count: h.len(),
        p50: ms(h.value_at_quantile(0.5)),
        p90: ms(h.value_at_quantile(0.9)),
        p99: ms(h.value_at_quantile(0.99)),
        max: ms(h.max()),
    }
}

/// The latency in ms, of a histogram of microseconds, at each quantile of `q`.
pub(super) fn quantiles_ms(h: Option<&Histogram<u64>>, q: &[f64]) -> Vec<f64> {
    match h {
        Some(h) if !h.is_empty() => q
            .iter()
            .map(|&q| h.value_at_quantile(q) as f64 / 1000.0)
            .collect(),
        _ => Vec::new(),
    }
}

/// The longest window of [`windows`].
pub const WINDOW: Duration = Duration::from_secs(300);

/// Time to running window by window over a stream of `total` seconds, by
/// when each job was scheduled: 5-minute windows, or six equal ones for a
/// stream shorter than 30 minutes. What shows whether a long run stays as
/// fast at its end as at its start.
pub(super) fn windows(runs: &[(f64, f64, u64)], total: f64) -> Vec<Window> {
    let width = (total / 6.0).clamp(1.0, WINDOW.as_secs_f64());
    let n = (total / width).ceil().max(1.0) as usize;
    (0..n)
        .map(|i| {
            let (from, to) = (i as f64 * width, ((i + 1) as f64 * width).min(total));
            let ms: Vec<f64> = runs
                .iter()
                .filter(|(at, _, _)| *at >= from && (*at < to || i == n - 1))
                .map(|(_, ms, _)| *ms)
                .collect();
            let p99 = (!ms.is_empty()).then(|| Percentiles::of(&ms).p99);
            Window {
                from_s: from,
                to_s: to,
                jobs: ms.len() as u64,
                time_to_running_p99_ms: p99,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_makespan_runs_from_the_first_submission_to_the_last_running() {
        // c2m-mini's shape: a job every 1/6 s from 1/6 s on, each taking
        // longer to run as a backlog builds; the last scheduled is not the
        // last to run (a slow one scheduled earlier ran after it).
        let mut ran: Vec<(f64, f64, u64)> = (1..=100)
            .map(|i| (i as f64 / 6.0, 1500.0 + 40.0 * i as f64, 1000))
            .collect();
        ran[90].1 = 9_000.0;
        // In the order they ran, not the order they were scheduled.
        ran.sort_by(|a, b| (a.0 + a.1 / 1000.0).total_cmp(&(b.0 + b.1 / 1000.0)));
        let m = makespan_s(&ran, 100).unwrap();
        // First submission at 1/6 s; job 91, scheduled at 15.17 s, ran
        // 9 s later, after job 100 (16.67 s + 5.5 s).
        let want = 91.0 / 6.0 + 9.0 - 1.0 / 6.0;
        assert!((m - want).abs() < 1e-9, "{m} {want}");
        // One of the 100 never ran: no makespan to speak of.
        assert_eq!(makespan_s(&ran[1..], 100), None);
        assert_eq!(makespan_s(&[], 0), None);
    }

    #[test]
    fn the_quantile_sketch_rises_from_the_fastest_to_the_slowest_job() {
        let mut h = Histogram::new_with_bounds(1, 3_600_000_000, 3).unwrap();
        for ms in 1..=1000u64 {
            h.record(ms * 1000).unwrap();
        }
        let q = sketch_quantiles();
        let ms = quantiles_ms(Some(&h), &q);
        assert_eq!(ms.len(), q.len());
        assert!(ms.windows(2).all(|w| w[0] <= w[1]), "sorted");
        assert!((ms[0] - 1.0).abs() < 0.01, "the fastest: {}", ms[0]);
        assert!((ms[50] - 500.0).abs() < 1.0, "the median: {}", ms[50]);
        assert!((ms[q.len() - 1] - 1000.0).abs() < 1.0, "the slowest");
        assert!(quantiles_ms(None, &q).is_empty(), "no jobs, no sketch");
    }
}
