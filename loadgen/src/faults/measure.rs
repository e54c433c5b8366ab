//! What each fault cost, from the stream's acknowledgements around it (not
//! from the servers): pure, on values alone.

use std::time::Duration;

use serde::Serialize;

use super::Injected;
use crate::scenario::FaultAction;
use crate::stream::Journal;

/// One fault as it was injected and what it cost. Times are seconds; `_s`
/// times without "time" in the name count from the start of the job stream.
#[derive(Debug, Clone, Serialize, PartialEq)]
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
    /// Raft elections it caused: the growth of the highest term the servers reported.
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

/// What each injected fault cost, from the stream's acknowledgements.
/// `stream_s` is how long submissions went on (the scenario's duration).
pub fn measure(
    injected: &[Injected],
    journal: &Journal,
    stream_s: f64,
    window: Duration,
) -> Vec<FaultReport> {
    let window = window.as_secs_f64();
    let recovered = |f: &Injected| f.leader_s.map(|l| l.max(f.undone_s));
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
                elections: f.term_after.map(|t| t.saturating_sub(f.term_before)),
                recovered_s,
                throughput_before: ack_rate(journal, (f.at_s - window).max(since_previous), f.at_s),
                throughput_after: recovered_s
                    .and_then(|r| ack_rate(journal, r, (r + window).min(until_next))),
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
