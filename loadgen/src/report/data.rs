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
        let windows = faults::windows(&summary.faults, summary.stream.jobs.start_us);
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
