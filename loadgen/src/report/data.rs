//! What the report draws that `summary.json` does not hold: a variant's
//! samples of every process, its registrations acknowledged per second
//! under faults, and its slowest jobs' paths. `capacity` keeps them beside
//! the summary (never in it) and writes them to `samples.json` and
//! `traces.json`; a variant without any draws no time charts and no
//! waterfall.

use std::collections::BTreeMap;

use crate::critical_path::{self, JobPath, TracedJob};
use crate::faults;
use crate::sampler::Series;
use crate::stream::Journal;
use crate::summary::VariantSummary;

/// One run of a variant, as the report draws it (a variant of several
/// repetitions is drawn from its median one, whose details its summary
/// holds).
#[derive(Debug, Clone, Default)]
pub struct VariantData {
    /// Every process's samples over the run.
    pub series: Vec<Series>,
    /// Job registrations acknowledged per second over the stream
    /// (one-second bins, seconds from its start), when faults were injected.
    pub acks_per_second: Vec<(f64, f64)>,
    /// The slowest jobs' paths, slowest first, each stage marked with the
    /// faults it spans.
    pub slowest_paths: Vec<TracedJob>,
}

/// Every variant's data, by the variant's name.
pub type RunData<'a> = BTreeMap<&'a str, &'a VariantData>;

/// What a variant without data draws from.
static NONE: VariantData = VariantData {
    series: Vec::new(),
    acks_per_second: Vec::new(),
    slowest_paths: Vec::new(),
};

impl VariantData {
    /// A run's data: its samples, its acknowledgements per second from its
    /// journal when `faulted`, and its `slowest` traced paths marked with
    /// the faults of its `summary`.
    pub fn new(
        summary: &VariantSummary,
        series: Vec<Series>,
        journal: &Journal,
        paths: &[JobPath],
        slowest: usize,
        faulted: bool,
    ) -> Self {
        let windows = faults::windows(&summary.faults, journal.jobs.start_us);
        VariantData {
            series,
            acks_per_second: match faulted {
                true => faults::acks_per_second(journal, summary.seconds),
                false => Vec::new(),
            },
            slowest_paths: critical_path::slowest_marked(paths, slowest, &summary.name, &windows),
        }
    }

    /// The data of the variant named `name` in `data`, or none.
    pub fn of<'a>(data: &RunData<'a>, name: &str) -> &'a VariantData {
        data.get(name).copied().unwrap_or(&NONE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::critical_path::N_STAGES;
    use crate::faults::FaultReport;
    use crate::scenario::FaultAction;
    use crate::stream::Ack;

    /// Job `i`: `i + 1` seconds to running from 10 s into the stream, its
    /// stages an even share each.
    fn path(i: u64, start_us: u64) -> JobPath {
        let scheduled = start_us + 10_000_000;
        let step = (i + 1) * 1_000_000 / N_STAGES as u64;
        let mut boundaries = [scheduled; N_STAGES + 1];
        for (k, b) in boundaries.iter_mut().enumerate() {
            *b = scheduled + step * k as u64;
        }
        JobPath {
            job_id: format!("job-{i}"),
            boundaries,
            clamps: 0,
            clamped_us: 0,
            bounded: 0,
            bounded_us: 0,
        }
    }

    #[test]
    fn a_runs_data_holds_its_samples_its_acks_when_faulted_and_its_slowest_paths_marked() {
        let start_us = 1_760_000_000_000_000;
        let mut summary = VariantSummary {
            name: "v".into(),
            seconds: 3.0,
            faults: vec![FaultReport {
                action: FaultAction::KillLeader,
                at_s: 10.0,
                scheduled_at_s: 10.0,
                duration_s: 1.0,
                servers: vec![1],
                leader_before: Some(1),
                time_to_leader_s: None,
                leader_after: None,
                unavailable_s: None,
                elections: None,
                recovered_s: None,
                throughput_before: None,
                throughput_after: None,
                control_plane_recovery_s: Some(0.5),
                catch_up_time_s: None,
                snapshots_installed: None,
            }],
            ..Default::default()
        };
        let paths: Vec<JobPath> = (0..5).map(|i| path(i, start_us)).collect();
        let mut journal = Journal::default();
        journal.jobs.start_us = start_us;
        for acked_s in [0.2, 1.5, 1.7] {
            journal.acks.push(Ack {
                scheduled_s: 0.0,
                acked_s,
            });
        }
        let data = VariantData::new(&summary, Vec::new(), &journal, &paths, 3, true);
        assert_eq!(data.acks_per_second, [(1.0, 1.0), (2.0, 2.0), (3.0, 0.0)]);
        let slowest: Vec<&str> = (data.slowest_paths.iter())
            .map(|j| j.spans[0].job_id.as_str())
            .collect();
        assert_eq!(slowest, ["job-4", "job-3", "job-2"]);
        // The kill at 10 s is in the first stage of every path.
        let first = &data.slowest_paths[0].spans[0];
        assert_eq!(first.spans_fault.as_deref(), Some("kill_leader@10s"));
        // Without faults, no acknowledgements are plotted.
        summary.faults.clear();
        let data = VariantData::new(&summary, Vec::new(), &journal, &paths, 3, false);
        assert!(data.acks_per_second.is_empty());
        assert_eq!(data.slowest_paths[0].spans[0].spans_fault, None);
    }
}
