//! The run directory's files: `summary.json`, `samples.json`,
//! `traces.json` and `report.html` (rewritten after every variant, so a later failure leaves
//! what ran), each process's last `/metrics`, loadgen's own, and the
//! `--baseline` read back.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::error::CapacityError;
use crate::critical_path::{Span, TracedJob};
use crate::report::{self, RunData};
use crate::sampler::Series;
use crate::summary::{self, RunSummary};

/// Writes summary.json, and from `data` samples.json and traces.json, and
/// report.html, for what has run so far.
pub(super) fn write_run(
    out: &Path,
    summary: &RunSummary,
    data: &RunData,
) -> Result<(), CapacityError> {
    write(
        out.join("summary.json"),
        serde_json::to_string_pretty(summary).expect("the summary serializes"),
    )?;
    let samples: BTreeMap<&str, &Vec<Series>> =
        data.iter().map(|(name, d)| (*name, &d.series)).collect();
    write(
        out.join("samples.json"),
        serde_json::to_string(&samples).expect("samples serialize"),
    )?;
    let mut slowest: Vec<&TracedJob> = data.values().flat_map(|d| &d.slowest_paths).collect();
    slowest.sort_by(|a, b| b.time_to_running_ms.total_cmp(&a.time_to_running_ms));
    slowest.truncate(summary.scenario.trace_slowest as usize);
    write_traces(out, slowest)?;
    write(out.join("report.html"), report::html(summary, data))
}

/// `dir/traces.json`: the slow jobs' paths, slowest first, each an array
/// of its stages in path order (`{stage, start_ms, end_ms, ...}`).
pub(super) fn write_traces<'a>(
    dir: &Path,
    jobs: impl IntoIterator<Item = &'a TracedJob>,
) -> Result<(), CapacityError> {
    let spans: Vec<&Vec<Span>> = jobs.into_iter().map(|j| &j.spans).collect();
    write(
        dir.join("traces.json"),
        serde_json::to_string_pretty(&spans).expect("traces serialize"),
    )
}

/// Each process's last `/metrics`, as it served it, in `dir/metrics/NAME.prom`.
pub(super) fn write_last_metrics(dir: &Path, series: &[Series]) -> Result<(), CapacityError> {
    let metrics_dir = dir.join("metrics");
    std::fs::create_dir_all(&metrics_dir)
        .map_err(|e| CapacityError::Write(metrics_dir.clone(), e))?;
    for s in series {
        if let Some(text) = &s.last_text {
            write(metrics_dir.join(format!("{}.prom", s.target.name)), text)?;
        }
    }
    Ok(())
}

/// Writes `body` to `path`, saying which file could not be written.
pub(super) fn write(path: PathBuf, body: impl AsRef<[u8]>) -> Result<(), CapacityError> {
    std::fs::write(&path, body).map_err(|e| CapacityError::Write(path, e))
}

/// Reads `--baseline`: an earlier run's summary.json (see `summary::parse_summary`).
pub(super) fn load_baseline(path: &Path) -> Result<RunSummary, CapacityError> {
    let bad = |m: String| CapacityError::Baseline(path.to_path_buf(), m);
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    summary::parse_summary(&text).map_err(|e| bad(e.to_string()))
}
