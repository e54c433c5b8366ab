//! A variant's figures as samples, and their intervals: every repetition
//! of a variant (`--repeat N`) is one sample of each measure; a single run
//! is cut into its own windows (batch means), which show how steady it was.
//! [`combine`] folds a variant's repetitions ([`Ran`]) into the one
//! summary `summary.json` holds: the details of its median repetition,
//! every repetition's measures, each measure's median with its 95%
//! interval, and its validity.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::measures::figures;
use super::{summarize, VariantSummary};
use crate::sampler::Series;
use crate::scenario::Variant;
use crate::stats::{median_interval, Interval, Method, CONFIDENCE};
use crate::stream::StreamReport;
use crate::validity::Validity;

/// A single run's batch means: windows this long, after the first (which
/// holds the stream's ramp-up).
pub const WINDOW_S: f64 = 10.0;

/// One repetition's measures, by name (`summary::measures`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Repetition {
    /// The round it ran in (1 for the first): `compare` pairs two variants
    /// of one run round by round.
    pub round: u32,
    #[serde(flatten)]
    pub measures: BTreeMap<String, f64>,
    /// Whether this repetition measured the cluster, not the harness.
    pub valid: bool,
}

/// One run of a variant as `assemble` sums it up: its
/// summary, and its windows' figures, from which a single run's intervals
/// are drawn (batch means); `summary.json` holds those intervals, not the
/// windows.
#[derive(Debug, Clone)]
pub struct Ran {
    pub summary: VariantSummary,
    pub windows: Vec<BTreeMap<String, f64>>,
}

/// The figures of each full [`WINDOW_S`] window of a run's stream after
/// the first: the run's samples and stream cut to the window and summed up
/// as a run of their own.
pub fn window_figures(
    v: &Variant,
    series: &[Series],
    stream: &StreamReport,
    stream_s: f64,
) -> Vec<BTreeMap<String, f64>> {
    let mut out = Vec::new();
    let mut from = WINDOW_S;
    while from + WINDOW_S <= stream_s + 1e-9 {
        let to = from + WINDOW_S;
        let series: Vec<Series> = series.iter().map(|s| slice(s, from, to)).collect();
        let window = summarize(v, stream.slice(from, to), &series, WINDOW_S, Vec::new());
        out.push(figures(&window));
        from = to;
    }
    out
}

/// The samples of `s` from `from` to `to` seconds, both ends included.
fn slice(s: &Series, from: f64, to: f64) -> Series {
    Series {
        target: s.target.clone(),
        points: s
            .points
            .iter()
            .filter(|p| p.t >= from && p.t <= to)
            .cloned()
            .collect(),
        lost_at: None,
        last_text: None,
    }
}

/// Each measure's median and interval over `samples` (one map per sample).
pub fn intervals(samples: &[BTreeMap<String, f64>], method: Method) -> BTreeMap<String, Interval> {
    let mut by: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for sample in samples {
        for (name, x) in sample {
            by.entry(name).or_default().push(*x);
        }
    }
    by.into_iter()
        .filter_map(|(name, xs)| {
            Some((name.to_string(), median_interval(&xs, CONFIDENCE, method)?))
        })
        .collect()
}

/// A variant's repetitions (each with its validity and, for a single one,
/// its window figures) as one summary, and which of them is the median
/// (whose details the summary holds, and whose samples the report draws).
/// `None` for none.
pub fn combine(reps: &[&Ran]) -> Option<(VariantSummary, usize)> {
    let figures: Vec<BTreeMap<String, f64>> = reps.iter().map(|r| figures(&r.summary)).collect();
    let repetitions: Vec<Repetition> = figures
        .iter()
        .zip(reps)
        .enumerate()
        .map(|(i, (f, r))| Repetition {
            round: i as u32 + 1,
            measures: f.clone(),
            valid: r.summary.validity.valid,
        })
        .collect();
    let intervals = match reps.len() {
        0 => return None,
        1 => intervals(&reps[0].windows, Method::BatchMeans),
        _ => intervals(&figures, Method::OrderStatistics),
    };
    let validity = validity(reps);
    let floors = super::comparison::own_floors(&figures);
    let median = median_repetition(&figures);
    let mut v = reps[median].summary.clone();
    v.noise_floors = floors;
    v.repetitions = repetitions;
    v.intervals = intervals;
    v.validity = validity;
    Some((v, median))
}

/// Invalid when any repetition was, with its reasons (named by repetition
/// when there are several).
fn validity(reps: &[&Ran]) -> Validity {
    let several = reps.len() > 1;
    let reasons = reps
        .iter()
        .enumerate()
        .flat_map(|(i, r)| {
            r.summary
                .validity
                .reasons
                .iter()
                .map(move |why| match several {
                    true => format!("repetition {}: {why}", i + 1),
                    false => why.clone(),
                })
        })
        .collect::<Vec<_>>();
    Validity {
        valid: reps.iter().all(|r| r.summary.validity.valid),
        reasons,
    }
}

/// The repetition whose placements/s is the median (the lower middle of an
/// even count): the one whose details the summary shows.
fn median_repetition(figures: &[BTreeMap<String, f64>]) -> usize {
    let rate = |i: usize| figures[i].get("placements_per_s").copied().unwrap_or(0.0);
    let mut order: Vec<usize> = (0..figures.len()).collect();
    order.sort_by(|a, b| rate(*a).total_cmp(&rate(*b)));
    order[(order.len() - 1) / 2]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::{Point, Target};

    fn rep(rate: f64, placed: u64, valid: bool, why: &[&str]) -> Ran {
        let mut v = VariantSummary {
            name: "only".into(),
            ..Default::default()
        };
        v.stream.placements_per_second = rate;
        v.stream.allocations_placed = placed;
        v.validity = Validity {
            valid,
            reasons: why.iter().map(|s| s.to_string()).collect(),
        };
        Ran {
            summary: v,
            windows: Vec::new(),
        }
    }

    /// [`combine`] of these repetitions: the summary alone.
    fn combined(reps: &[Ran]) -> VariantSummary {
        combine(&reps.iter().collect::<Vec<_>>()).unwrap().0
    }

    #[test]
    fn repetitions_give_each_measure_an_interval_and_the_median_repetitions_details() {
        let reps = vec![
            rep(100.0, 1, true, &[]),
            rep(90.0, 2, true, &[]),
            rep(120.0, 3, true, &[]),
        ];
        let (v, median) = combine(&reps.iter().collect::<Vec<_>>()).unwrap();
        assert_eq!(median, 0);
        assert_eq!(
            v.stream.allocations_placed, 1,
            "the details are the median repetition's"
        );
        assert_eq!(v.repetitions.len(), 3);
        assert_eq!(v.repetitions[1].measures["placements_per_s"], 90.0);
        let i = &v.intervals["placements_per_s"];
        assert_eq!(
            (i.median, i.lo, i.hi, i.method),
            (100.0, 90.0, 120.0, Method::OrderStatistics)
        );
        // Its own floor: half the spread of 90, 100, 120 (a MAD of ln 1.11
        // on logs, scaled): about 8%.
        let floor = v.noise_floors["placements_per_s"];
        assert!((0.05..0.10).contains(&floor), "{floor}");
        assert!(v.validity.valid);
    }

    #[test]
    fn one_invalid_repetition_makes_the_variant_invalid_and_says_which() {
        let reps = vec![
            rep(100.0, 1, true, &[]),
            rep(90.0, 2, false, &["nodesim used 0.97"]),
        ];
        let v = combined(&reps);
        assert!(!v.validity.valid);
        assert_eq!(v.validity.reasons, ["repetition 2: nodesim used 0.97"]);
        assert!(!v.repetitions[1].valid);
    }

    #[test]
    fn a_single_run_is_cut_into_windows_after_the_first() {
        // 40 s of stream: a job scheduled every second, placed in 100 ms and
        // running (two allocations) 500 ms later; a server whose CPU counter
        // grows 0.2 s a second and whose RSS is 100 MiB.
        let mut v = rep(0.0, 0, true, &[]).summary;
        for t in 0..40 {
            v.stream.jobs.placed.push((t as f64, 100.0));
            v.stream.jobs.ran.push((t as f64, 600.0, 2));
        }
        let points = (0..=40)
            .map(|t| Point {
                t: t as f64,
                values: [
                    ("process_cpu_seconds_total".to_string(), 0.2 * t as f64),
                    (
                        "process_resident_memory_bytes".to_string(),
                        100.0 * 1048576.0,
                    ),
                ]
                .into(),
            })
            .collect();
        let series = vec![Series {
            target: Target {
                name: "server-1".into(),
                url: String::new(),
                binary: None,
            },
            points,
            lost_at: None,
            last_text: None,
        }];
        let variant = Variant {
            name: "only".into(),
            ..Default::default()
        };
        let windows = window_figures(&variant, &series, &v.stream, 40.0);
        assert_eq!(windows.len(), 3, "10-20, 20-30, 30-40");
        for w in &windows {
            assert!((w["placements_per_s"] - 2.0).abs() < 1e-9, "{w:?}");
            assert!((w["p99_placement_ms"] - 100.0).abs() < 1e-9, "{w:?}");
            assert!((w["p99_time_to_running_ms"] - 600.0).abs() < 1e-9, "{w:?}");
            // 2 CPU-s per 20 placements: 100 per 1,000.
            assert!(
                (w["cpu_seconds_per_1000_placements"] - 100.0).abs() < 1e-6,
                "{w:?}"
            );
            assert!((w["server_rss_mib"] - 100.0).abs() < 1e-9, "{w:?}");
        }
        let one = combined(&[Ran {
            summary: v,
            windows,
        }]);
        let i = &one.intervals["placements_per_s"];
        assert_eq!((i.method, i.samples.len()), (Method::BatchMeans, 3));
    }
}
