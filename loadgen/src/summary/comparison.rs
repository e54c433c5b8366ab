//! One run against another, measure by measure: the ratio B/A of each
//! measure's samples with its 95% interval ([`crate::stats`]) and a verdict,
//! `better`, `worse`, `same` or `inconclusive`. `loadgen compare` prints and
//! writes it; `--baseline` judges a run against an earlier one with it, and
//! `--until-conclusive` decides with it when a run has enough rounds.
//!
//! A side's samples for a measure are its repetitions (`--repeat N`), or,
//! for a run of one repetition, the batch means of its own time windows
//! (which show how steady that run was, not how a rerun lands: the result
//! says which). Two variants of one run ran in the same rounds: they are
//! paired round by round (the ratio within each round), which takes out the
//! machine's drift that a round shares.
//!
//! A verdict needs the interval to reach at least [`MIN_CONFIDENCE`] and to
//! lie wholly beyond the measure's noise floor: then the change is larger
//! than the noise with that confidence; `same` when it lies wholly within
//! it. The floor is measured where it can be: half the run-to-run spread
//! of the measure within each side's own rounds ([`calibrated_floor`]);
//! otherwise (or, for two separate runs, when it is larger) the measure's
//! fixed floor. With ten measures compared at 95% each, a verdict on an
//! interval that merely excluded 1 would call some change in most
//! comparisons of a build with itself.

use serde::Serialize;

use super::measures::{self, by_name, Measure, MEASURES};
use super::{Builds, RunSummary, VariantSummary};
use crate::stats::Method;
use crate::stats::{log_spread, median, paired_ratio_interval, ratio_interval, CONFIDENCE};

/// Below this confidence (too few samples on a side: three against three
/// reach 90%) no verdict is given.
pub const MIN_CONFIDENCE: f64 = 0.90;

/// A calibrated floor is never below this: a change under 1% is not called
/// however steady the runs were.
pub const MIN_FLOOR: f64 = 0.01;

/// Each side needs this many repetitions for its spread to calibrate a floor.
pub const CALIBRATE_FROM: usize = 3;

/// Why two summaries cannot be compared.
#[derive(Debug, thiserror::Error)]
pub enum Mismatch {
    #[error("different scenarios: A ran {a:?}, B ran {b:?}")]
    Scenarios { a: String, b: String },
    #[error("different variants: A has [{a}], B has [{b}]")]
    Variants { a: String, b: String },
    #[error("--gate {0}: no such measure (one of: {names})", names = measures::names())]
    UnknownGate(String),
}

/// A verdict on one measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Better,
    Worse,
    /// The interval lies wholly within the noise floor: no change larger
    /// than the noise (only from repetitions or rounds, not from windows).
    Same,
    Inconclusive,
}

impl Verdict {
    /// Whether more samples could not change what is known: a change, or
    /// none beyond the floor.
    pub fn decided(self) -> bool {
        self != Verdict::Inconclusive
    }
}

/// Where a measure's noise floor came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FloorSource {
    /// From the spread of the two sides' own repetitions.
    Calibrated,
    /// The measure's fixed floor (`summary::measures`).
    Fixed,
}

/// Where a side's samples came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Samples {
    /// Repetitions of two variants of one run, paired round by round.
    Rounds,
    Repetitions,
    /// Batch means of one run's time windows.
    Windows,
    /// One figure: no interval, no verdict.
    Single,
}

/// One measure of one variant, A against B.
#[derive(Debug, Clone, Serialize)]
pub struct MeasureComparison {
    pub measure: &'static str,
    /// The medians of A's and B's samples.
    pub a: f64,
    pub b: f64,
    /// B/A (Hodges–Lehmann) and its interval.
    pub ratio: f64,
    pub lo: f64,
    pub hi: f64,
    pub confidence: f64,
    pub verdict: Verdict,
    /// Why the verdict is `inconclusive`, if it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    pub gated: bool,
    pub samples: Samples,
    pub n_a: usize,
    pub n_b: usize,
    /// The noise floor the verdict was judged against (0.05: ±5%).
    pub floor: f64,
    pub floor_source: FloorSource,
}

#[derive(Debug, Clone, Serialize)]
pub struct VariantComparison {
    pub name: String,
    /// The builds each side's variant ran (they differ between two
    /// variants of one run that ran builds of their own).
    pub build_a: Builds,
    pub build_b: Builds,
    pub measures: Vec<MeasureComparison>,
}

/// What `compare.json` holds.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub a: String,
    pub b: String,
    /// What each side ran: its summary's `build`.
    pub build_a: Builds,
    pub build_b: Builds,
    pub scenario: String,
    pub variants: Vec<VariantComparison>,
    /// Gated measures judged `worse`, as "variant: measure".
    pub worse: Vec<String>,
}

/// Compares two summaries. `gates` names the gated measures (empty: each
/// measure's default).
pub fn compare(
    a: &RunSummary,
    b: &RunSummary,
    gates: &[String],
    names: (&str, &str),
) -> Result<Comparison, Mismatch> {
    for g in gates {
        by_name(g).ok_or_else(|| Mismatch::UnknownGate(g.clone()))?;
    }
    let (sa, sb) = (a.scenario.name.clone(), b.scenario.name.clone());
    if sa != sb {
        return Err(Mismatch::Scenarios { a: sa, b: sb });
    }
    let variant_names =
        |s: &RunSummary| -> Vec<String> { s.variants.iter().map(|v| v.name.clone()).collect() };
    let (va, vb) = (variant_names(a), variant_names(b));
    if va != vb {
        return Err(Mismatch::Variants {
            a: va.join(", "),
            b: vb.join(", "),
        });
    }
    let gated = |m: &Measure| {
        if gates.is_empty() {
            m.gated
        } else {
            gates.iter().any(|g| g == m.name)
        }
    };
    let judging = Judging::of(a, b);
    let mut out = Comparison {
        a: names.0.into(),
        b: names.1.into(),
        build_a: a.build.clone(),
        build_b: b.build.clone(),
        scenario: sa,
        variants: Vec::new(),
        worse: Vec::new(),
    };
    for (name, (x, y)) in va.iter().zip(a.variants.iter().zip(&b.variants)) {
        let measures = judging.variant(x, y, &gated);
        for m in measures
            .iter()
            .filter(|m| m.gated && m.verdict == Verdict::Worse)
        {
            out.worse.push(format!("{name}: {}", m.measure));
        }
        out.variants.push(VariantComparison {
            name: name.clone(),
            build_a: x.build.clone(),
            build_b: y.build.clone(),
            measures,
        });
    }
    Ok(out)
}

/// How two sides are judged: paired round by round (two variants of one
/// run), and at what level.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Judging {
    pub paired: bool,
    /// The level each interval is drawn at: [`CONFIDENCE`], or higher for a
    /// run that looked after every round (`--until-conclusive`).
    pub level: f64,
}

impl Judging {
    /// Two separate runs: unpaired, at [`CONFIDENCE`].
    pub const UNPAIRED: Judging = Judging {
        paired: false,
        level: CONFIDENCE,
    };

    /// The least confidence a verdict needs: [`MIN_CONFIDENCE`] for one
    /// look, or the whole level of a look of a sequential run (its share of
    /// the error is all it may spend).
    pub fn min_confidence(self) -> f64 {
        match self.level > CONFIDENCE + 1e-12 {
            true => self.level,
            false => MIN_CONFIDENCE,
        }
    }

    /// For summaries `a` and `b`: paired when they are one run (the same
    /// seed and rounds), at the level that run's looks were drawn at.
    pub fn of(a: &RunSummary, b: &RunSummary) -> Judging {
        let one_run = !a.rounds.is_empty() && a.rounds == b.rounds && a.seed == b.seed;
        match one_run {
            true => Judging {
                paired: true,
                level: a.sequential.as_ref().map_or(CONFIDENCE, |s| s.level),
            },
            false => Judging::UNPAIRED,
        }
    }

    /// Every measure of variant `a` against variant `b`; `gated` says which gate.
    pub fn variant(
        self,
        a: &VariantSummary,
        b: &VariantSummary,
        gated: &dyn Fn(&Measure) -> bool,
    ) -> Vec<MeasureComparison> {
        MEASURES
            .iter()
            .filter_map(|m| self.measure(m, a, b, gated(m)))
            .collect()
    }

    /// One measure compared; `None` when a side lacks it or it is not positive.
    fn measure(
        self,
        m: &'static Measure,
        a: &VariantSummary,
        b: &VariantSummary,
        gated: bool,
    ) -> Option<MeasureComparison> {
        let (xa, ka) = samples(m, a);
        let (xb, kb) = samples(m, b);
        let pairs = match self.paired {
            true => paired_rounds(m, a, b),
            false => Vec::new(),
        };
        let (r, kind) = match paired_ratio_interval(&pairs, self.level) {
            Some(r) => (r, Samples::Rounds),
            None => {
                let kind = [ka, kb]
                    .into_iter()
                    .max_by_key(|k| *k as u8)
                    .unwrap_or(Samples::Single);
                (ratio_interval(&xa, &xb, self.level)?, kind)
            }
        };
        let reps = ka == Samples::Repetitions && kb == Samples::Repetitions;
        let (floor, floor_source) = match reps.then(|| calibrated_floor(&xa, &xb)).flatten() {
            Some(f) if kind == Samples::Rounds || f > m.noise_floor => (f, FloorSource::Calibrated),
            _ => (m.noise_floor, FloorSource::Fixed),
        };
        let (verdict, why) = verdict(m, &r, floor, reps, self.min_confidence());
        Some(MeasureComparison {
            measure: m.name,
            a: median(&xa)?,
            b: median(&xb)?,
            ratio: r.ratio,
            lo: r.lo,
            hi: r.hi,
            confidence: r.confidence,
            verdict,
            why,
            gated,
            samples: kind,
            n_a: xa.len(),
            n_b: xb.len(),
            floor,
            floor_source,
        })
    }
}

/// Every measure of variant `a` against variant `b` of two separate runs.
pub fn compare_variant(
    a: &VariantSummary,
    b: &VariantSummary,
    gated: &dyn Fn(&Measure) -> bool,
) -> Vec<MeasureComparison> {
    Judging::UNPAIRED.variant(a, b, gated)
}

/// The noise floor from the two sides' own repetitions: half their pooled
/// run-to-run spread ([`log_spread`]), at least [`MIN_FLOOR`]. A change
/// smaller than half of what one run varies from the next is not called:
/// telling it apart would take far more rounds than a comparison runs (at
/// a spread of 10%, about 64 a side), and it is the size of the systematic
/// error that pairing cannot remove. `None` with fewer than
/// [`CALIBRATE_FROM`] repetitions on a side.
pub fn calibrated_floor(a: &[f64], b: &[f64]) -> Option<f64> {
    if a.len() < CALIBRATE_FROM || b.len() < CALIBRATE_FROM {
        return None;
    }
    let (sa, sb) = (log_spread(a)?, log_spread(b)?);
    Some(floor_of_spread(((sa * sa + sb * sb) / 2.0).sqrt()))
}

/// The floor for a run-to-run spread (a standard deviation of logarithms):
/// half of it, as a ratio less one, at least [`MIN_FLOOR`].
pub fn floor_of_spread(spread: f64) -> f64 {
    ((spread / 2.0).exp() - 1.0).max(MIN_FLOOR)
}

/// One variant's own floors, by measure, from its repetitions (at least
/// [`CALIBRATE_FROM`]): what `summary.json` stores with the run.
pub fn own_floors(
    reps: &[std::collections::BTreeMap<String, f64>],
) -> std::collections::BTreeMap<String, f64> {
    if reps.len() < CALIBRATE_FROM {
        return Default::default();
    }
    MEASURES
        .iter()
        .filter_map(|m| {
            let xs: Vec<f64> = reps.iter().filter_map(|r| r.get(m.name).copied()).collect();
            let spread = (xs.len() == reps.len())
                .then(|| log_spread(&xs))
                .flatten()?;
            Some((m.name.to_string(), floor_of_spread(spread)))
        })
        .collect()
}

/// The (A, B) figures of `m` in each round both variants ran, by round.
fn paired_rounds(m: &Measure, a: &VariantSummary, b: &VariantSummary) -> Vec<(f64, f64)> {
    let by_round = |v: &VariantSummary| -> std::collections::BTreeMap<u32, f64> {
        (v.confidence.repetitions.iter())
            .filter_map(|r| Some((r.round, *r.measures.get(m.name)?)))
            .collect()
    };
    let (ra, rb) = (by_round(a), by_round(b));
    ra.iter()
        .filter_map(|(round, x)| Some((*x, *rb.get(round)?)))
        .collect()
}

/// A variant's samples of `m`: its repetitions, else its windows, else its one figure.
fn samples(m: &Measure, v: &VariantSummary) -> (Vec<f64>, Samples) {
    if v.confidence.repetitions.len() >= 2 {
        let xs: Vec<f64> = (v.confidence.repetitions.iter())
            .filter_map(|r| r.measures.get(m.name).copied())
            .collect();
        if xs.len() >= 2 {
            return (xs, Samples::Repetitions);
        }
    }
    let windows = v.confidence.intervals.get(m.name);
    if let Some(interval) = windows.filter(|i| i.method == Method::BatchMeans) {
        if interval.samples.len() >= 2 {
            return (interval.samples.clone(), Samples::Windows);
        }
    }
    (m.of(v).into_iter().collect(), Samples::Single)
}

/// The verdict on an interval of B/A against `floor`, and why none when
/// none: none below `min_confidence`; `same` only when `reps` (the samples
/// are reruns, not windows).
pub fn verdict(
    m: &Measure,
    r: &crate::stats::Ratio,
    floor: f64,
    reps: bool,
    min_confidence: f64,
) -> (Verdict, Option<String>) {
    let (lo, hi) = (r.lo, r.hi);
    if r.confidence < min_confidence - 1e-12 {
        let why = format!(
            "too few samples: the interval reaches {:.0}% confidence",
            r.confidence * 100.0
        );
        return (Verdict::Inconclusive, Some(why));
    }
    if reps && lo >= 1.0 / (1.0 + floor) && hi <= 1.0 + floor {
        return (Verdict::Same, None);
    }
    if lo <= 1.0 && hi >= 1.0 {
        return (
            Verdict::Inconclusive,
            Some("the interval includes no change".into()),
        );
    }
    // A verdict says the change is larger than the noise floor with the
    // interval's confidence: the whole interval lies beyond it.
    let rose = lo > 1.0 + floor;
    if !rose && hi >= 1.0 / (1.0 + floor) {
        let why = format!(
            "the interval reaches into the noise floor (±{:.0}%)",
            floor * 100.0
        );
        return (Verdict::Inconclusive, Some(why));
    }
    match rose == m.higher_is_better {
        true => (Verdict::Better, None),
        false => (Verdict::Worse, None),
    }
}
