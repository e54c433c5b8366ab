//! A variant's paths summed up: each stage's p50 and p99 over every traced
//! job, its share of the slowest 1%'s time, the medians per stage, the
//! bottleneck in one sentence; and the slowest jobs' paths one by one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{JobPath, N_STAGES, ROLLOUT, STAGES};
use crate::scenario::{JobKind, Kind};
use crate::stream::Percentiles;

/// One stage over a variant's traced jobs.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct StageFigure {
    pub stage: String,
    /// Where the stage runs: leader, worker, nodesim or loadgen.
    pub process: String,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Of the slowest 1% of jobs by time to running (at least one), the
    /// share of their time spent in this stage; the shares add up to 1.
    pub share_of_p99: f64,
}

/// The median time per stage, in path order: over every traced job, and
/// over the slowest 1%.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct StageMedians {
    pub all: Vec<f64>,
    pub slowest: Vec<f64>,
}

/// What set the p99, and which process was closest to a full core.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Bottleneck {
    /// The stage with the largest share of the slowest jobs' time.
    pub stage: String,
    pub share_of_p99: f64,
    /// The process (as `cpu_cores` names it) that used the most cores on
    /// average over the run; the stage's own process when none was sampled.
    pub process: String,
    pub cores: Option<f64>,
    pub text: String,
}

/// How the traces were read, and the check that the stages add up.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct TraceCheck {
    /// Jobs with a whole path (the figures are theirs).
    pub traced: u64,
    /// Jobs that ran without one: a boundary unknown, the job unknown to
    /// every server, or an earlier run of a job updated since.
    pub untraced: u64,
    /// The jobs the shares are of: the slowest 1% (at least one).
    pub slowest_jobs: u64,
    /// Boundaries read before the one they follow and moved up to it, and
    /// by how much in all.
    pub clamps: u64,
    pub clamped_ms: f64,
    /// Apply boundaries (registered, plan committed, running committed)
    /// read after the step that follows them, because the server that
    /// applied the entry first lost its record (a leader killed and
    /// restarted) and a follower's later apply was left: moved back to that
    /// step, and by how much in all.
    pub applies_bounded: u64,
    pub applies_bounded_ms: f64,
    /// The medians of the stages added up, against the median time to
    /// running of the traced jobs (they differ: medians do not add).
    pub sum_of_stage_medians_ms: f64,
    pub median_time_to_running_ms: f64,
}

/// A variant's critical path in `summary.json` (flattened into the variant).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct CriticalPath {
    /// Every stage in path order; empty when no job was traced.
    pub stages: Vec<StageFigure>,
    pub bottleneck: Option<Bottleneck>,
    pub stages_median_ms: StageMedians,
    pub trace_check: TraceCheck,
}

/// One stage of one job, in ms from its submission.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Span {
    pub stage: String,
    pub start_ms: f64,
    pub end_ms: f64,
    pub process: String,
    pub job_id: String,
    pub variant: String,
    /// The faults whose window (from the injection until the control plane
    /// was back) the stage's interval overlaps, as `ACTION@ATs` (the step's
    /// scheduled time), comma-separated; omitted when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spans_fault: Option<String>,
}

/// A fault's window on the wall clock, for marking the stages it overlaps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultWindow {
    /// How a span names it: `kill_leader@15s`.
    pub label: String,
    /// The injection and the end of its window (the control plane back, or
    /// the fault undone when that is unknown), in Unix microseconds.
    pub from_us: u64,
    pub to_us: u64,
}

impl FaultWindow {
    /// `ACTION@ATs`, the step's scheduled time in seconds (one decimal when
    /// it is not whole).
    pub fn label(action: &str, at_s: f64) -> String {
        if (at_s - at_s.round()).abs() < 1e-9 {
            format!("{action}@{}s", at_s.round() as i64)
        } else {
            format!("{action}@{at_s:.1}s")
        }
    }
}

/// The faults among `faults` whose window the interval `[from, to]` (Unix
/// µs) overlaps, joined; `None` for none.
pub fn overlapping(faults: &[FaultWindow], from_us: u64, to_us: u64) -> Option<String> {
    let hit: Vec<&str> = faults
        .iter()
        .filter(|f| from_us <= f.to_us && to_us >= f.from_us)
        .map(|f| f.label.as_str())
        .collect();
    (!hit.is_empty()).then(|| hit.join(", "))
}

/// A slow job's path, stage by stage: an element of `traces.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct TracedJob {
    pub time_to_running_ms: f64,
    pub spans: Vec<Span>,
}

/// The figures of `paths` (and `untraced` jobs without one). `cpu_cores`
/// is each process's average cores over the run; `jobs_per_s` the rate the
/// bottleneck's sentence is at.
pub fn figures(
    paths: &[JobPath],
    untraced: u64,
    cpu_cores: &BTreeMap<String, f64>,
    jobs_per_s: f64,
) -> CriticalPath {
    figures_with_faults(paths, untraced, cpu_cores, jobs_per_s, &[], &[])
}

/// [`figures`], for a run with faults: when most of the slowest jobs spent
/// the bottleneck stage across one fault's window, the sentence names that
/// fault and what a failover does to the stage. `job_mix` is the
/// scenario's: when the rollout sets the p99, the sentence names the update
/// blocks that set its pace, the settings a user can change.
pub fn figures_with_faults(
    paths: &[JobPath],
    untraced: u64,
    cpu_cores: &BTreeMap<String, f64>,
    jobs_per_s: f64,
    faults: &[FaultWindow],
    job_mix: &[JobKind],
) -> CriticalPath {
    let slow = slowest_share(paths);
    let mut check = TraceCheck {
        traced: paths.len() as u64,
        untraced,
        slowest_jobs: slow.len() as u64,
        clamps: paths.iter().map(|p| p.clamps as u64).sum(),
        clamped_ms: paths.iter().map(|p| p.clamped_us).sum::<u64>() as f64 / 1000.0,
        applies_bounded: paths.iter().map(|p| p.bounded as u64).sum(),
        applies_bounded_ms: paths.iter().map(|p| p.bounded_us).sum::<u64>() as f64 / 1000.0,
        ..TraceCheck::default()
    };
    if paths.is_empty() {
        return CriticalPath {
            trace_check: check,
            ..CriticalPath::default()
        };
    }
    let all: Vec<[f64; N_STAGES]> = paths.iter().map(JobPath::stages_ms).collect();
    let slow_stages: Vec<[f64; N_STAGES]> = slow.iter().map(|p| p.stages_ms()).collect();
    let slow_total: f64 = slow.iter().map(|p| p.time_to_running_ms()).sum();
    let stages: Vec<StageFigure> = STAGES
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let of = Percentiles::of(&column(&all, i));
            let spent: f64 = slow_stages.iter().map(|st| st[i]).sum();
            StageFigure {
                stage: s.name.into(),
                process: s.process.into(),
                p50_ms: of.p50,
                p99_ms: of.p99,
                share_of_p99: if slow_total > 0.0 {
                    spent / slow_total
                } else {
                    0.0
                },
            }
        })
        .collect();
    let medians = StageMedians {
        all: (0..N_STAGES).map(|i| median(&column(&all, i))).collect(),
        slowest: (0..N_STAGES)
            .map(|i| median(&column(&slow_stages, i)))
            .collect(),
    };
    check.sum_of_stage_medians_ms = medians.all.iter().sum();
    let ttr: Vec<f64> = paths.iter().map(JobPath::time_to_running_ms).collect();
    check.median_time_to_running_ms = median(&ttr);
    let mut bottleneck = bottleneck(&stages, cpu_cores, jobs_per_s, job_mix);
    if let Some(b) = bottleneck.as_mut() {
        if let Some(i) = STAGES.iter().position(|s| s.name == b.stage) {
            if let Some(note) = across_a_fault(&slow, i, faults) {
                b.text.push_str(&note);
            }
        }
    }
    CriticalPath {
        bottleneck,
        stages,
        stages_median_ms: medians,
        trace_check: check,
    }
}

/// When more than half of the `slow` jobs spent stage `i` across the same
/// fault's window, the clause that says so: the fault, how many, and what
/// a failover does to that stage.
fn across_a_fault(slow: &[&JobPath], i: usize, faults: &[FaultWindow]) -> Option<String> {
    let mut by_fault: BTreeMap<&str, usize> = BTreeMap::new();
    for p in slow {
        let (from, to) = (p.boundaries[i], p.boundaries[i + 1]);
        // The fault the stage overlaps first: one stage, one fault.
        if let Some(f) = faults.iter().find(|f| from <= f.to_us && to >= f.from_us) {
            *by_fault.entry(f.label.as_str()).or_default() += 1;
        }
    }
    let (fault, n) = by_fault
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(a.0)))?;
    (2 * n > slow.len()).then(|| {
        format!(
            "; {n} of the {} slowest jobs spent it across {fault}: {}",
            slow.len(),
            STAGES[i].across_a_failover
        )
    })
}

/// The slowest 1% of `paths` by time to running (at least one), slowest first.
fn slowest_share(paths: &[JobPath]) -> Vec<&JobPath> {
    let n = paths.len().div_ceil(100).max(1).min(paths.len());
    by_time_desc(paths).into_iter().take(n).collect()
}

fn by_time_desc(paths: &[JobPath]) -> Vec<&JobPath> {
    let mut v: Vec<&JobPath> = paths.iter().collect();
    v.sort_by(|a, b| b.time_to_running_ms().total_cmp(&a.time_to_running_ms()));
    v
}

/// The `k` slowest jobs' paths, slowest first, in ms from each one's submission.
pub fn slowest(paths: &[JobPath], k: usize, variant: &str) -> Vec<TracedJob> {
    slowest_marked(paths, k, variant, &[])
}

/// [`slowest`], each stage marked with the `faults` whose window it overlaps.
pub fn slowest_marked(
    paths: &[JobPath],
    k: usize,
    variant: &str,
    faults: &[FaultWindow],
) -> Vec<TracedJob> {
    by_time_desc(paths)
        .into_iter()
        .take(k)
        .map(|p| {
            let at = |b: usize| (p.boundaries[b] - p.boundaries[0]) as f64 / 1000.0;
            let spans = STAGES
                .iter()
                .enumerate()
                .map(|(i, s)| Span {
                    stage: s.name.into(),
                    start_ms: at(i),
                    end_ms: at(i + 1),
                    process: s.process.into(),
                    job_id: p.job_id.clone(),
                    variant: variant.into(),
                    spans_fault: overlapping(faults, p.boundaries[i], p.boundaries[i + 1]),
                })
                .collect();
            TracedJob {
                time_to_running_ms: p.time_to_running_ms(),
                spans,
            }
        })
        .collect()
}

fn column(rows: &[[f64; N_STAGES]], i: usize) -> Vec<f64> {
    rows.iter().map(|r| r[i]).collect()
}

/// The nearest-rank median, as `Percentiles` takes it.
fn median(v: &[f64]) -> f64 {
    Percentiles::of(v).p50
}

/// The stage with the largest share, the busiest process, and the sentence.
fn bottleneck(
    stages: &[StageFigure],
    cpu_cores: &BTreeMap<String, f64>,
    jobs_per_s: f64,
    job_mix: &[JobKind],
) -> Option<Bottleneck> {
    // The first of equal shares: the earliest stage on the path.
    let i = (0..stages.len()).reduce(|best, i| {
        match stages[i].share_of_p99 > stages[best].share_of_p99 {
            true => i,
            false => best,
        }
    })?;
    let top = &stages[i];
    let busiest = cpu_cores
        .iter()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(name, cores)| (name.clone(), *cores));
    let mut what = STAGES[i].what.to_string();
    if top.stage == ROLLOUT {
        if let Some(pace) = rollout_pace(job_mix) {
            what.push_str(&format!(" ({pace})"));
        }
    }
    let mut text = format!(
        "at {} jobs/s the p99 is set by {what} ({}, {:.0}%)",
        rate(jobs_per_s),
        top.stage,
        top.share_of_p99 * 100.0
    );
    if let Some((name, cores)) = &busiest {
        text.push_str(&format!("; {name} used {cores:.2} of its core"));
    }
    Some(Bottleneck {
        stage: top.stage.clone(),
        share_of_p99: top.share_of_p99,
        process: busiest
            .as_ref()
            .map_or(top.process.clone(), |b| b.0.clone()),
        cores: busiest.map(|b| b.1),
        text,
    })
}

/// The update blocks of `job_mix` that roll out in steps (a service whose
/// `max_parallel` is below its `count`), as a scenario spells them:
/// `web: max_parallel 2 of count 5, min_healthy_time_ms 500`.
fn rollout_pace(job_mix: &[JobKind]) -> Option<String> {
    let blocks: Vec<String> = job_mix
        .iter()
        .filter(|j| j.kind == Kind::Service && j.max_parallel > 0 && j.max_parallel < j.count)
        .map(|j| {
            format!(
                "{}: max_parallel {} of count {}, min_healthy_time_ms {}",
                j.name, j.max_parallel, j.count, j.min_healthy_time_ms
            )
        })
        .collect();
    (!blocks.is_empty()).then(|| blocks.join("; "))
}

/// A rate as the sentence says it: whole and with thousands separated
/// from 10/s up, one decimal below.
pub(super) fn rate(per_s: f64) -> String {
    if per_s < 10.0 {
        return format!("{per_s:.1}");
    }
    let digits = format!("{per_s:.0}");
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}
