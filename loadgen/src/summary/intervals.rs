//! A variant's figures as samples, and their intervals: every repetition
//! of a variant (`--repeat N`) is one sample of each measure; a single run
//! is cut into its own windows (batch means), which show how steady it was.
//! A run's own [`Confidence`] is drawn from its windows
//! ([`Confidence::of_one`]); [`combine`] folds a variant's repetitions into
//! the one summary `summary.json` holds: the details of its median
//! repetition, every repetition's measures, each measure's median with its
//! 95% interval, and its validity.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::measures::{figures, figures_of, Measured};
use super::{sampled, VariantSummary};
use crate::sampler::Series;
use crate::stats::{median_interval, Interval, Method, CONFIDENCE};
use crate::stream::JobTimes;
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

/// Whether to trust a variant's figures, and how far.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(default)]
pub struct Confidence {
    /// Whether the run measured the cluster and not the harness: invalid,
    /// with each reason and its figure, when loadgen fell behind its
    /// schedule or a generator or the machine saturated (`validity`).
    pub validity: Validity,
    /// Each repetition's measures (`--repeat N`: one each; a single run: one).
    pub repetitions: Vec<Repetition>,
    /// Per measure, its median and 95% interval: over the repetitions
    /// (`order-statistics`), or for a single run over its 10 s windows
    /// (`batch-means`: how steady the run was, not how a rerun would land).
    pub intervals: BTreeMap<String, Interval>,
    /// Per measure, the noise floor this variant's own repetitions give
    /// (three or more): half their run-to-run spread, at least 1%
    /// (`comparison::calibrated_floor`); a comparison pools both sides'.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub noise_floors: BTreeMap<String, f64>,
}

impl Confidence {
    /// A single run's: its `validity`, its `measures` as its one
    /// repetition, and each measure's interval over its `windows`' figures
    /// (batch means).
    pub fn of_one(
        validity: Validity,
        measures: BTreeMap<String, f64>,
        windows: &[BTreeMap<String, f64>],
    ) -> Self {
        Confidence {
            noise_floors: super::comparison::own_floors(std::slice::from_ref(&measures)),
            repetitions: vec![Repetition {
                round: 1,
                measures,
                valid: validity.valid,
            }],
            intervals: intervals(windows, Method::BatchMeans),
            validity,
        }
    }
}

/// The figures of each full [`WINDOW_S`] window of a run's stream after
/// the first: the run's samples and stream cut to the window and summed up
/// as a run of their own.
pub fn window_figures(
    series: &[Series],
    jobs: &JobTimes,
    stream_s: f64,
) -> Vec<BTreeMap<String, f64>> {
    let mut out = Vec::new();
    let mut from = WINDOW_S;
    while from + WINDOW_S <= stream_s + 1e-9 {
        let to = from + WINDOW_S;
        let series: Vec<Series> = series.iter().map(|s| slice(s, from, to)).collect();
        let stream = jobs.slice(from, to);
        let window = sampled(&stream, &series);
        out.push(figures_of(Measured {
            stream: &stream,
            traffic: &window.traffic,
            processes: &window.processes,
        }));
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

/// A variant's repetitions as one summary, and which of them is the
/// median (whose details the summary holds, and whose samples the report
/// draws): a single run as it is (its confidence its own), several with
/// each measure's interval over them. `None` for none.
pub fn combine(reps: &[&VariantSummary]) -> Option<(VariantSummary, usize)> {
    match reps {
        [] => return None,
        [one] => return Some(((*one).clone(), 0)),
        _ => {}
    }
    let figures: Vec<BTreeMap<String, f64>> = reps.iter().map(|r| figures(r)).collect();
    let repetitions: Vec<Repetition> = figures
        .iter()
        .zip(reps)
        .enumerate()
        .map(|(i, (f, r))| Repetition {
            round: i as u32 + 1,
            measures: f.clone(),
            valid: r.confidence.validity.valid,
        })
        .collect();
    let median = median_repetition(&figures);
    let confidence = Confidence {
        validity: validity(reps),
        repetitions,
        intervals: intervals(&figures, Method::OrderStatistics),
        noise_floors: super::comparison::own_floors(&figures),
    };
    let v = VariantSummary {
        confidence,
        ..reps[median].clone()
    };
    Some((v, median))
}

/// Invalid when any repetition was, with its reasons (named by repetition
/// when there are several).
fn validity(reps: &[&VariantSummary]) -> Validity {
    let several = reps.len() > 1;
    let reasons = reps
        .iter()
        .enumerate()
        .flat_map(|(i, r)| {
            r.confidence
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
        valid: reps.iter().all(|r| r.confidence.validity.valid),
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

    fn rep(rate: f64, placed: u64, valid: bool, why: &[&str]) -> VariantSummary {
        let mut v = VariantSummary {
            name: "only".into(),
            ..Default::default()
        };
        v.stream.placements_per_second = rate;
        v.stream.allocations_placed = placed;
        v.confidence.validity = Validity {
            valid,
            reasons: why.iter().map(|s| s.to_string()).collect(),
        };
        v
    }

    /// [`combine`] of these repetitions: the summary alone.
    fn combined(reps: &[VariantSummary]) -> VariantSummary {
        combine(&reps.iter().collect::<Vec<_>>()).unwrap().0
    }

    #[test]
    fn repetitions_give_each_measure_an_interval_and_the_median_repetitions_details() {
        let reps = [
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
        let c = &v.confidence;
        assert_eq!(c.repetitions.len(), 3);
        assert_eq!(c.repetitions[1].measures["placements_per_s"], 90.0);
        let i = &c.intervals["placements_per_s"];
        assert_eq!(
            (i.median, i.lo, i.hi, i.method),
            (100.0, 90.0, 120.0, Method::OrderStatistics)
        );
        // Its own floor: half the spread of 90, 100, 120 (a MAD of ln 1.11
        // on logs, scaled): about 8%.
        let floor = c.noise_floors["placements_per_s"];
        assert!((0.05..0.10).contains(&floor), "{floor}");
        assert!(c.validity.valid);
    }

    #[test]
    fn one_invalid_repetition_makes_the_variant_invalid_and_says_which() {
        let reps = vec![
            rep(100.0, 1, true, &[]),
            rep(90.0, 2, false, &["nodesim used 0.97"]),
        ];
        let c = combined(&reps).confidence;
        assert!(!c.validity.valid);
        assert_eq!(c.validity.reasons, ["repetition 2: nodesim used 0.97"]);
        assert!(!c.repetitions[1].valid);
    }

    #[test]
    fn a_single_run_is_cut_into_windows_after_the_first() {
        // 40 s of stream: a job scheduled every second, placed in 100 ms and
        // running (two allocations) 500 ms later; a server whose CPU counter
        // grows 0.2 s a second and whose RSS is 100 MiB.
        let mut v = rep(0.0, 0, true, &[]);
        let mut jobs = JobTimes::default();
        for t in 0..40 {
            jobs.placed.push((t as f64, 100.0));
            jobs.ran.push((t as f64, 600.0, 2));
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
        let windows = window_figures(&series, &jobs, 40.0);
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
        let measures = BTreeMap::from([("placements_per_s".to_string(), 2.0)]);
        v.confidence = Confidence::of_one(v.confidence.validity.clone(), measures, &windows);
        let i = &v.confidence.intervals["placements_per_s"];
        assert_eq!((i.method, i.samples.len()), (Method::BatchMeans, 3));
        assert_eq!(v.confidence.repetitions[0].round, 1);
        // Combined alone, a run is as it was.
        let one = combined(std::slice::from_ref(&v));
        assert_eq!(one.confidence, v.confidence);
    }
}
