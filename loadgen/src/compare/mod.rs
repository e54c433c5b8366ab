//! `loadgen compare A B`: how run B compares with run A, measure by
//! measure, with a 95% interval for each ratio B/A and a verdict —
//! `better`, `worse` or `inconclusive` — instead of one noisy run against
//! another under a flat threshold. The comparison itself is
//! `summary::comparison` (pure); here the files are read and written.
//!
//! `run` reads the two summaries and writes `compare.json` and `compare.html`.

mod page;

use std::path::{Path, PathBuf};

use crate::summary::RunSummary;

pub use crate::summary::comparison::{
    compare, Comparison, FloorSource, MeasureComparison, Mismatch, Samples, Verdict,
};

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
    /// p99_time_to_running_ms, p50_time_to_running_ms,
    /// cpu_seconds_per_1000_placements, server_rss_mib,
    /// raft_bytes_per_placement.
    #[arg(long = "gate", value_name = "MEASURE")]
    pub gates: Vec<String>,
    /// Where to write compare.json and compare.html (default: B's run
    /// directory, or the current directory when B is a file elsewhere).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Compare only this variant of A (with --variant-b: against another
    /// variant, of B or of the same run: `loadgen compare RUN RUN
    /// --variant-a untimed --variant-b timed`).
    #[arg(long, value_name = "NAME")]
    pub variant_a: Option<String>,
    /// Compare only this variant of B, as if it were A's variant.
    #[arg(long, value_name = "NAME", requires = "variant_a")]
    pub variant_b: Option<String>,
    /// The run history both runs are recorded in (`loadgen history`).
    #[command(flatten)]
    pub history: crate::history::HistoryArg,
    /// Record the runs in no history (wins over --history and STAMPEDE_HISTORY).
    #[arg(long)]
    pub no_history: bool,
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
    #[error(transparent)]
    Mismatch(#[from] Mismatch),
    #[error("{path}: no variant {name:?} (it has {have})")]
    NoVariant {
        path: PathBuf,
        name: String,
        have: String,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    History(#[from] crate::history::HistoryError),
}

/// Reads a run directory's `summary.json` (or the file itself), typed; a
/// file that is not one is refused naming the file and what is wrong.
pub fn load(path: &Path) -> Result<RunSummary, CompareError> {
    let file = match path.is_dir() {
        true => path.join("summary.json"),
        false => path.to_path_buf(),
    };
    let text = std::fs::read_to_string(&file).map_err(|source| CompareError::Read {
        path: file.clone(),
        source,
    })?;
    crate::summary::parse_summary(&text).map_err(|e| CompareError::NotASummary {
        path: file,
        why: e.to_string(),
    })
}

/// `loadgen compare`: records both runs in the history, prints the table,
/// writes `compare.json` and `compare.html`, and returns the comparison
/// (its `worse` list decides the exit code). Blocking (the history may be
/// a PostgreSQL database).
pub fn run(opts: &CompareOpts) -> Result<Comparison, CompareError> {
    let (mut a, mut b) = (load(&opts.a)?, load(&opts.b)?);
    if !opts.no_history {
        record(opts)?;
    }
    let mut names = (opts.a.display().to_string(), opts.b.display().to_string());
    if let Some(va) = &opts.variant_a {
        let vb = opts.variant_b.as_deref().unwrap_or(va);
        pick(&mut a, &opts.a, va, va)?;
        pick(&mut b, &opts.b, vb, va)?;
        names = (format!("{}:{va}", names.0), format!("{}:{vb}", names.1));
    }
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
    crate::say(page::table(&comparison).trim_end());
    crate::say(format!("wrote {}", out.join("compare.json").display()));
    Ok(comparison)
}

/// Records A and B in the history. A history that cannot be opened is an
/// error; a run it cannot hold (a summary without a build stamp or a start
/// time, as made by hand) is left out with a note, and still compared.
fn record(opts: &CompareOpts) -> Result<(), CompareError> {
    use crate::history::{self, HistoryError};
    let mut store = history::Store::open(&opts.history.location())?;
    for path in [&opts.a, &opts.b] {
        match history::read_run(path) {
            Ok(rows) => {
                store.insert(&rows)?;
            }
            Err(e @ HistoryError::Unrecordable { .. }) => {
                eprintln!("loadgen compare: not recorded in the history: {e}")
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Keeps only variant `name` of `summary`, named `as_name` (so that two
/// variants, even of one run, are compared as one); the summary's build
/// becomes that variant's.
fn pick(
    summary: &mut RunSummary,
    path: &Path,
    name: &str,
    as_name: &str,
) -> Result<(), CompareError> {
    let Some(mut chosen) = summary.variants.iter().find(|v| v.name == name).cloned() else {
        let have: Vec<&str> = summary.variants.iter().map(|v| v.name.as_str()).collect();
        return Err(CompareError::NoVariant {
            path: path.to_path_buf(),
            name: name.into(),
            have: have.join(", "),
        });
    };
    chosen.name = as_name.into();
    summary.build = chosen.build.clone();
    summary.variants = vec![chosen];
    Ok(())
}

#[cfg(test)]
mod tests;
