//! One run against another, measure by measure: the ratio B/A of each
//! measure's samples with its 95% interval ([`crate::stats`]) and a verdict,
//! `better`, `worse` or `inconclusive`. `loadgen compare` prints and writes
//! it; `--baseline` judges a run against an earlier one with it.
//!
//! A side's samples for a measure are its repetitions (`--repeat N`), or,
//! for a run of one repetition, the batch means of its own time windows
//! (which show how steady that run was, not how a rerun lands: the result
//! says which). A verdict needs the interval to reach at least
//! [`MIN_CONFIDENCE`] and to lie wholly beyond the measure's noise floor:
//! then the change is larger than the noise with that confidence. With ten
//! measures compared at 95% each, a verdict on an interval that merely
//! excluded 1 would call some change in most comparisons of a build with
//! itself.

use serde::Serialize;
use serde_json::Value;

use super::measures::{self, by_name, Measure, MEASURES};
use crate::stats::{median, ratio_interval, CONFIDENCE};

/// Below this confidence (too few samples on a side: three against three
/// reach 90%) no verdict is given.
pub const MIN_CONFIDENCE: f64 = 0.90;

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
    Inconclusive,
}

/// Where a side's samples came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Samples {
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
}

#[derive(Debug, Clone, Serialize)]
pub struct VariantComparison {
    pub name: String,
    pub measures: Vec<MeasureComparison>,
}

/// What `compare.json` holds.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub a: String,
    pub b: String,
    pub scenario: String,
    pub variants: Vec<VariantComparison>,
    /// Gated measures judged `worse`, as "variant: measure".
    pub worse: Vec<String>,
}

/// Compares two summaries. `gates` names the gated measures (empty: each
/// measure's default).
pub fn compare(
    a: &Value,
    b: &Value,
    gates: &[String],
    names: (&str, &str),
) -> Result<Comparison, Mismatch> {
    for g in gates {
        by_name(g).ok_or_else(|| Mismatch::UnknownGate(g.clone()))?;
    }
    let scenario = |v: &Value| {
        v.pointer("/scenario/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (sa, sb) = (scenario(a), scenario(b));
    if sa != sb {
        return Err(Mismatch::Scenarios { a: sa, b: sb });
    }
    let variant_names = |v: &Value| -> Vec<String> {
        let list = v["variants"].as_array().into_iter().flatten();
        list.map(|x| x["name"].as_str().unwrap_or("").to_string())
            .collect()
    };
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
    let mut out = Comparison {
        a: names.0.into(),
        b: names.1.into(),
        scenario: sa,
        variants: Vec::new(),
        worse: Vec::new(),
    };
    for (i, name) in va.iter().enumerate() {
        let measures = compare_variant(&a["variants"][i], &b["variants"][i], &gated);
        for m in measures
            .iter()
            .filter(|m| m.gated && m.verdict == Verdict::Worse)
        {
            out.worse.push(format!("{name}: {}", m.measure));
        }
        out.variants.push(VariantComparison {
            name: name.clone(),
            measures,
        });
    }
    Ok(out)
}

/// Every measure of variant `a` against variant `b`; `gated` says which gate.
pub fn compare_variant(
    a: &Value,
    b: &Value,
    gated: &dyn Fn(&Measure) -> bool,
) -> Vec<MeasureComparison> {
    MEASURES
        .iter()
        .filter_map(|m| measure(m, a, b, gated(m)))
        .collect()
}

/// One measure compared; `None` when a side lacks it or it is not positive.
fn measure(m: &'static Measure, a: &Value, b: &Value, gated: bool) -> Option<MeasureComparison> {
    let (xa, ka) = samples(m, a);
    let (xb, kb) = samples(m, b);
    let r = ratio_interval(&xa, &xb, CONFIDENCE)?;
    let kind = [ka, kb]
        .into_iter()
        .max_by_key(|k| *k as u8)
        .unwrap_or(Samples::Single);
    let (verdict, why) = verdict(m, r.lo, r.hi, r.confidence);
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
    })
}

/// A variant's samples of `m`: its repetitions, else its windows, else its one figure.
fn samples(m: &Measure, v: &Value) -> (Vec<f64>, Samples) {
    if let Some(reps) = v["repetitions"].as_array().filter(|r| r.len() >= 2) {
        let xs: Vec<f64> = reps.iter().filter_map(|r| r[m.name].as_f64()).collect();
        if xs.len() >= 2 {
            return (xs, Samples::Repetitions);
        }
    }
    let interval = &v["intervals"][m.name];
    if interval["method"] == "batch-means" {
        let xs: Vec<f64> = interval["samples"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_f64)
            .collect();
        if xs.len() >= 2 {
            return (xs, Samples::Windows);
        }
    }
    ((m.read)(v).into_iter().collect(), Samples::Single)
}

/// The verdict on an interval of B/A, and why none when none.
pub fn verdict(m: &Measure, lo: f64, hi: f64, confidence: f64) -> (Verdict, Option<String>) {
    if confidence < MIN_CONFIDENCE {
        let why = format!(
            "too few samples: the interval reaches {:.0}% confidence",
            confidence * 100.0
        );
        return (Verdict::Inconclusive, Some(why));
    }
    if lo <= 1.0 && hi >= 1.0 {
        return (
            Verdict::Inconclusive,
            Some("the interval includes no change".into()),
        );
    }
    // A verdict says the change is larger than the noise floor with the
    // interval's confidence: the whole interval lies beyond it.
    let floor = m.noise_floor;
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
