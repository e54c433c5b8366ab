//! What each fault cost, from the stream's acknowledgements around it (not
//! from the servers): pure, on values alone.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Injected;
use crate::critical_path::FaultWindow;
use crate::scenario::FaultAction;
use crate::stream::{JobTimes, Journal, Percentiles};

/// One fault as it was injected and what it cost. Times are seconds; `_s`
/// times without "time" in the name count from the start of the job stream.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct FaultReport {
    pub action: FaultAction,
    /// When the fault was injected. It is the step's `at` unless the cluster
    /// had no leader then (a previous fault still settling): then it waited.
    pub at_s: f64,
    /// The step's `at`.
    pub scheduled_at_s: f64,
    /// How long the pause or partition lasted, or the killed servers stayed down.
    pub duration_s: f64,
    /// The servers it struck.
    pub servers: Vec<u64>,
    /// The leader when it was injected.
    pub leader_before: Option<u64>,
    /// From the injection until a live server other than the struck ones
    /// named a leader other than the struck ones (or, once the fault was
    /// over, any leader); null if none did within the wait.
    pub time_to_leader_s: Option<f64>,
    /// The leader named then.
    pub leader_after: Option<u64>,
    /// From the injection to the first acknowledgement of a registration
    /// submitted at or after it; null if none was submitted after it.
    pub unavailable_s: Option<f64>,
    /// Raft elections it caused. Only a fault that struck the leader
    /// causes any, and only those that deposed the server it struck (the
    /// summary books them from the servers' samples:
    /// its election detail, `summary/elections.rs`; without those, the growth of the
    /// highest term the servers reported while it settled); a fault that
    /// spared the leader causes none, and an election during it is outside
    /// the faults.
    pub elections: Option<u64>,
    /// When the fault was over (servers back, links healed) and a leader known.
    pub recovered_s: Option<f64>,
    /// Registrations acknowledged per second in the 10 s before the
    /// injection (from the previous fault's recovery, if that is later);
    /// null when that leaves less than a second.
    pub throughput_before: Option<f64>,
    /// The same in the 10 s after recovery, up to the next fault or the end
    /// of the stream.
    pub throughput_after: Option<f64>,
    /// From the injection until the control plane was back: the last job
    /// the fault held up was placed and running (not raft's election: see
    /// [`control_plane_recovery`]). 0 when no job was held up; null when it
    /// cannot be measured (no job in the baseline window before the fault
    /// nor before an earlier one, or none in flight at it or submitted
    /// after it). Distinct from `recovered_s` (when the fault was over).
    pub control_plane_recovery_s: Option<f64>,
    /// From the fault's end until every struck server had applied what the
    /// servers not struck had applied at that moment (a killed server's
    /// start included); null when no server or every server was struck, or
    /// not within the wait.
    pub catch_up_time_s: Option<f64>,
    /// Snapshots the struck servers installed from a leader by then: a
    /// server the leader's log had moved past catches up through one.
    /// Null when a struck server's count could not be read.
    pub snapshots_installed: Option<u64>,
}

/// A job is held up by a fault when its latency exceeds the baseline's p99
/// by this factor...
pub const HELD_UP_FACTOR: f64 = 1.5;
/// ...and by at least this much (ms): over a client-update batch tick
/// (200 ms), so a job that missed one tick is not counted as held up.
pub const HELD_UP_MARGIN_MS: f64 = 250.0;

/// The latency (ms) above which a job counts as held up, from the
/// baseline's p99: `max(1.5 × p99, p99 + 250 ms)`.
pub fn held_up_bound_ms(baseline_p99_ms: f64) -> f64 {
    (HELD_UP_FACTOR * baseline_p99_ms).max(baseline_p99_ms + HELD_UP_MARGIN_MS)
}

/// Where one fault's control-plane recovery is looked for, in seconds from
/// the start of the stream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecoveryWindow {
    /// The injection.
    pub at_s: f64,
    /// The baseline's jobs were submitted in `[baseline_from_s, at_s)`.
    pub baseline_from_s: f64,
    /// When the fault was undone (the struck server back, links healed;
    /// `at_s` if unknown): a job submitted until then was submitted under
    /// the fault.
    pub undone_s: f64,
    /// The next fault's injection (or the end of the stream): jobs submitted
    /// from then on are that fault's.
    pub until_s: f64,
}

/// The bounds (ms) above which a job counts as held up, from a fault's
/// baseline; `None` for a measure without a baseline job.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Bounds {
    pub placement_ms: Option<f64>,
    pub running_ms: Option<f64>,
}

impl Bounds {
    /// The bounds of the jobs submitted in `[baseline_from_s, at_s)` of any
    /// of `windows` and done (placed, or running) before that window's
    /// injection: [`held_up_bound_ms`] of their p99, the baseline jobs of a
    /// run's quiet stretches so far together. Jobs as `(submitted s,
    /// latency ms)`. One window holds few rolling updates (about five in
    /// 10 s of the `faults` stream), and the p99 of five is their slowest:
    /// a baseline of rollouts that happened to be quick made every rollout
    /// after a fault read as held up, one after the other, for 15 s.
    pub fn pooled(
        windows: &[RecoveryWindow],
        placed: &[(f64, f64)],
        running: &[(f64, f64)],
    ) -> Self {
        let bound = |jobs: &[(f64, f64)]| {
            let baseline: Vec<f64> = jobs
                .iter()
                .filter(|j| {
                    windows
                        .iter()
                        .any(|w| j.0 >= w.baseline_from_s && j.0 < w.at_s && done(j) < w.at_s)
                })
                .map(|j| j.1)
                .collect();
            (!baseline.is_empty()).then(|| held_up_bound_ms(Percentiles::of(&baseline).p99))
        };
        Bounds {
            placement_ms: bound(placed),
            running_ms: bound(running),
        }
    }
}

/// When a job `(submitted s, latency ms)` was done.
fn done(&(s, ms): &(f64, f64)) -> f64 {
    s + ms / 1000.0
}

/// Seconds from the injection until the control plane was back to its
/// baseline, from the stream's placements and time to running (jobs as
/// `(submitted s, latency ms)`, one list per measure) and the baseline's
/// [`Bounds`]:
///
/// 1. Candidates: jobs in flight at the injection (submitted before it, done
///    after it) or submitted at or after it and before `until_s`.
/// 2. A candidate is held up when its latency exceeds the bound and it was
///    submitted while the control plane was still disturbed: before the
///    fault was undone, or before an earlier held-up job was done (a
///    backlog still draining). A slow job submitted after everything had
///    settled is not the fault's.
/// 3. The recovery: the latest instant a held-up job was done, less the
///    injection; 0 when none was held up. A recovery that runs past the
///    next fault's injection (`until_s`) is cut there: the control plane
///    was not back before the next fault, whose effects cannot be told
///    apart from this one's after it.
///
/// Each measure is read on its own and the later recovery kept; `None`
/// when neither has both a bound and a candidate.
pub fn control_plane_recovery(
    w: RecoveryWindow,
    bounds: Bounds,
    placed: &[(f64, f64)],
    running: &[(f64, f64)],
) -> Option<f64> {
    let one = |jobs: &[(f64, f64)], bound: Option<f64>| -> Option<f64> {
        let bound = bound?;
        let mut candidates: Vec<(f64, f64)> = jobs
            .iter()
            .filter(|j| (j.0 < w.at_s && done(j) >= w.at_s) || (j.0 >= w.at_s && j.0 < w.until_s))
            .copied()
            .collect();
        if candidates.is_empty() {
            return None;
        }
        candidates.sort_by(|a, b| a.0.total_cmp(&b.0));
        // Disturbed until the fault was undone, and until the last held-up
        // job submitted while disturbed was done.
        let mut disturbed_until = w.undone_s.max(w.at_s);
        let mut back = w.at_s;
        for j in candidates.iter().filter(|j| j.1 > bound) {
            if j.0 > disturbed_until {
                continue;
            }
            disturbed_until = disturbed_until.max(done(j));
            back = back.max(done(j));
        }
        // Not back when the next fault struck: what came after is that
        // one's too, and this recovery reads as the time until it.
        Some(back.min(w.until_s) - w.at_s)
    };
    match (
        one(placed, bounds.placement_ms),
        one(running, bounds.running_ms),
    ) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// Acknowledgements per second of those acknowledged in `[from, to)`; `None`
/// for a window shorter than a second.
fn ack_rate(journal: &Journal, from: f64, to: f64) -> Option<f64> {
    let from = from.max(0.0);
    if to - from < 1.0 {
        return None;
    }
    let n = journal
        .acks
        .iter()
        .filter(|a| a.acked_s >= from && a.acked_s < to)
        .count();
    Some(n as f64 / (to - from))
}

/// Jobs as `(submitted s, latency ms)`.
type Latencies = Vec<(f64, f64)>;

/// Jobs' times to placement and to running, fresh registrations and
/// rolling updates apart: an update runs at its rollout's pace (seconds, by
/// design), and measured against a baseline of registrations every update
/// after a fault would read as held up by it.
fn latencies_by_kind(jobs: &JobTimes) -> Vec<(Latencies, Latencies)> {
    let keys =
        |at: &[f64]| -> std::collections::HashSet<u64> { at.iter().map(|s| s.to_bits()).collect() };
    let rollouts = keys(&jobs.rollouts);
    // A submission that ran only as a later one of its job is not this
    // fault's to measure: its time to running is the later one's rollout,
    // measured on its own.
    let superseded = keys(&jobs.superseded);
    let rollout = |j: &(f64, f64)| rollouts.contains(&j.0.to_bits());
    [false, true]
        .into_iter()
        .map(|want| {
            let placed = jobs.placed.iter().copied();
            let running = jobs.ran.iter().map(|r| (r.0, r.1));
            (
                placed.filter(|j| rollout(j) == want).collect(),
                running
                    .filter(|j| rollout(j) == want && !superseded.contains(&j.0.to_bits()))
                    .collect(),
            )
        })
        .collect()
}

/// What each injected fault cost, from the stream's acknowledgements.
/// `stream_s` is how long submissions went on (the scenario's duration).
pub fn measure(
    injected: &[Injected],
    journal: &Journal,
    jobs: &JobTimes,
    stream_s: f64,
    window: Duration,
) -> Vec<FaultReport> {
    let window = window.as_secs_f64();
    let recovered = |f: &Injected| f.leader_s.map(|l| l.max(f.undone_s));
    let kinds = latencies_by_kind(jobs);
    // When the previous fault's control plane was back: the next baseline
    // starts after it.
    let mut previous_back: Option<f64> = None;
    let mut quiet: Vec<RecoveryWindow> = Vec::new();
    injected
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let unavailable_s = journal
                .acks
                .iter()
                .filter(|a| a.scheduled_s >= f.at_s)
                .map(|a| a.acked_s - f.at_s)
                .min_by(f64::total_cmp);
            let recovered_s = recovered(f);
            // Each window stays clear of the faults next to it: from the
            // previous one's recovery, up to the next one's injection.
            let since_previous = match i.checked_sub(1).map(|p| &injected[p]) {
                Some(p) => recovered(p).unwrap_or(p.at_s),
                None => 0.0,
            };
            let until_next = injected
                .get(i + 1)
                .map_or(stream_s, |n| n.at_s.min(stream_s));
            let baseline_from = (f.at_s - window)
                .max(since_previous)
                .max(previous_back.unwrap_or(0.0))
                .min(f.at_s);
            let recovery_window = RecoveryWindow {
                at_s: f.at_s,
                baseline_from_s: baseline_from,
                undone_s: f.undone_s,
                // Jobs submitted after the stream still count: a fault near
                // its end holds up the last submissions too.
                until_s: injected.get(i + 1).map_or(f64::INFINITY, |n| n.at_s),
            };
            // Each fault is measured against the quiet stretches before it,
            // its own and the earlier faults' (a fault too close to the one
            // before has none of its own). Each kind of job against its own
            // kind; the later recovery is kept.
            quiet.push(recovery_window);
            let mut control_plane_recovery_s: Option<f64> = None;
            for (placed, running) in &kinds {
                let bounds = Bounds::pooled(&quiet, placed, running);
                let r = control_plane_recovery(recovery_window, bounds, placed, running);
                control_plane_recovery_s = match (control_plane_recovery_s, r) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
            }
            previous_back = control_plane_recovery_s.map(|r| f.at_s + r);
            FaultReport {
                action: f.step.action,
                at_s: f.at_s,
                scheduled_at_s: f.step.at.as_secs_f64(),
                duration_s: f.step.duration.as_secs_f64(),
                servers: f.servers.clone(),
                leader_before: Some(f.leader_before),
                time_to_leader_s: f.leader_s.map(|l| l - f.at_s),
                leader_after: f.leader_after,
                unavailable_s,
                elections: match f.step.action.hits_leader() {
                    true => f.term_after.map(|t| t.saturating_sub(f.term_before)),
                    false => Some(0),
                },
                recovered_s,
                throughput_before: ack_rate(journal, (f.at_s - window).max(since_previous), f.at_s),
                throughput_after: recovered_s
                    .and_then(|r| ack_rate(journal, r, (r + window).min(until_next))),
                control_plane_recovery_s,
                catch_up_time_s: f.caught_up_s.map(|c| c - f.undone_s),
                snapshots_installed: f.snapshots_installed,
            }
        })
        .collect()
}

/// Acknowledgements in each second of the stream, up to `until_s`: what the
/// report plots under the fault marks.
pub fn acks_per_second(journal: &Journal, until_s: f64) -> Vec<(f64, f64)> {
    let bins = until_s.ceil().max(0.0) as usize;
    let mut counts = vec![0.0; bins];
    for a in &journal.acks {
        if let Some(c) = counts.get_mut(a.acked_s as usize) {
            *c += 1.0;
        }
    }
    counts
        .into_iter()
        .enumerate()
        .map(|(i, c)| (i as f64 + 1.0, c))
        .collect()
}

/// Each fault's window on the wall clock (the stream started at
/// `start_us`): from the injection until the control plane was back, or,
/// when that was not measured, until the fault was over (or its injection).
pub fn windows(faults: &[FaultReport], start_us: u64) -> Vec<FaultWindow> {
    let us = |s: f64| start_us + (s.max(0.0) * 1e6).round() as u64;
    faults
        .iter()
        .map(|f| {
            let end_s = match f.control_plane_recovery_s {
                Some(r) => f.at_s + r,
                None => f.recovered_s.unwrap_or(f.at_s).max(f.at_s),
            };
            FaultWindow {
                label: FaultWindow::label(f.action.name(), f.scheduled_at_s),
                from_us: us(f.at_s),
                to_us: us(end_s),
            }
        })
        .collect()
}
