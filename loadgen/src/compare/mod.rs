//! `loadgen compare A B`: how run B compares with run A, measure by
//! measure, with a 95% interval for each ratio B/A and a verdict —
//! `better`, `worse` or `inconclusive` — instead of one noisy run against
//! another under a flat threshold.
//!
//! A side's samples for a measure are its repetitions (`--repeat N`), or,
//! for a run of one repetition, the batch means of its own time windows
//! (which show how steady that run was, not how a rerun lands: the table
//! says which). The ratio and its interval come from [`crate::stats`]. A
//! verdict needs the interval to exclude no change, to reach at least
//! [`MIN_CONFIDENCE`], and to leave the measure's noise floor.
//!
//! The model here is pure (JSON values in, a [`Comparison`] out); `run`
//! reads the files and writes `compare.json` and `compare.html`.

mod measures;
mod page;

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::stats::{ratio_interval, CONFIDENCE};
pub use measures::{by_name, figures, Measure, MEASURES};

/// Below this confidence (too few samples on a side: three against three
/// reach 90%) no verdict is given.
pub const MIN_CONFIDENCE: f64 = 0.90;

/// `loadgen compare`'s options.
#[derive(Debug, clap::Args)]
pub struct CompareOpts {
    /// The earlier run: a run directory or its summary.json.
    #[arg(value_name = "A")]
    pub a: PathBuf,
    /// The later run, compared with A.
    #[arg(value_name = "B")]
    pub b: PathBuf,
    /// A measure whose `worse` verdict fails the comparison (exit 1); may be
    /// repeated. Default: placements_per_s, p99_placement_ms,
    /// p99_time_to_running_ms, cpu_seconds_per_1000_placements,
    /// server_rss_mib, raft_bytes_per_placement.
    #[arg(long = "gate", value_name = "MEASURE")]
    pub gates: Vec<String>,
    /// Where to write compare.json and compare.html (default: B's run
    /// directory, or the current directory when B is a file elsewhere).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Why two runs cannot be compared (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a loadgen summary.json: {why}")]
    NotASummary { path: PathBuf, why: String },
    #[error("different scenarios: A ran {a:?}, B ran {b:?}")]
    Scenarios { a: String, b: String },
    #[error("different variants: A has [{a}], B has [{b}]")]
    Variants { a: String, b: String },
    #[error("--gate {0}: no such measure (one of: {names})", names = measures::names())]
    UnknownGate(String),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
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
) -> Result<Comparison, CompareError> {
    for g in gates {
        by_name(g).ok_or_else(|| CompareError::UnknownGate(g.clone()))?;
    }
    let scenario = |v: &Value| {
        v.pointer("/scenario/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (sa, sb) = (scenario(a), scenario(b));
    if sa != sb {
        return Err(CompareError::Scenarios { a: sa, b: sb });
    }
    let variant_names = |v: &Value| -> Vec<String> {
        let list = v["variants"].as_array().into_iter().flatten();
        list.map(|x| x["name"].as_str().unwrap_or("").to_string())
            .collect()
    };
    let (va, vb) = (variant_names(a), variant_names(b));
    if va != vb {
        return Err(CompareError::Variants {
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
        let (x, y) = (&a["variants"][i], &b["variants"][i]);
        let measures: Vec<MeasureComparison> = MEASURES
            .iter()
            .filter_map(|m| measure(m, x, y, gated(m)))
            .collect();
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
        a: crate::stats::median(&xa)?,
        b: crate::stats::median(&xb)?,
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
    let floor = m.noise_floor;
    if lo >= 1.0 / (1.0 + floor) && hi <= 1.0 + floor {
        let why = format!(
            "the interval lies within the noise floor (±{:.0}%)",
            floor * 100.0
        );
        return (Verdict::Inconclusive, Some(why));
    }
    let rose = lo > 1.0;
    match rose == m.higher_is_better {
        true => (Verdict::Better, None),
        false => (Verdict::Worse, None),
    }
}

/// Reads a run directory's `summary.json` (or the file itself) as JSON.
pub fn load(path: &Path) -> Result<Value, CompareError> {
    let file = if path.is_dir() {
        path.join("summary.json")
    } else {
        path.to_path_buf()
    };
    let text = std::fs::read_to_string(&file).map_err(|source| CompareError::Read {
        path: file.clone(),
        source,
    })?;
    let not = |why: String| CompareError::NotASummary {
        path: file.clone(),
        why,
    };
    let v: Value = serde_json::from_str(&text).map_err(|e| not(e.to_string()))?;
    match v.get("schema_version").and_then(Value::as_u64) {
        Some(n) if n == crate::summary::SCHEMA_VERSION as u64 && v["variants"].is_array() => Ok(v),
        Some(n) => Err(not(format!(
            "schema_version {n}, this loadgen reads {}",
            crate::summary::SCHEMA_VERSION
        ))),
        None => Err(not("no schema_version".into())),
    }
}

/// `loadgen compare`: prints the table, writes `compare.json` and
/// `compare.html`, and returns the comparison (its `worse` list decides the
/// exit code).
pub fn run(opts: &CompareOpts) -> Result<Comparison, CompareError> {
    let (a, b) = (load(&opts.a)?, load(&opts.b)?);
    let names = (opts.a.display().to_string(), opts.b.display().to_string());
    let comparison = compare(&a, &b, &opts.gates, (&names.0, &names.1))?;
    let out = match &opts.out {
        Some(dir) => dir.clone(),
        None if opts.b.is_dir() => opts.b.clone(),
        None => PathBuf::from("."),
    };
    let write = |name: &str, text: String| {
        let path = out.join(name);
        std::fs::create_dir_all(&out)
            .and_then(|_| std::fs::write(&path, text))
            .map_err(|source| CompareError::Write { path, source })
    };
    write(
        "compare.json",
        serde_json::to_string_pretty(&comparison).expect("serializes") + "\n",
    )?;
    write("compare.html", page::html(&comparison, &a, &b))?;
    print!("{}", page::table(&comparison));
    println!("wrote {}", out.join("compare.json").display());
    Ok(comparison)
}

#[cfg(test)]
mod tests;
