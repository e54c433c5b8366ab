//! Runs into the history: a run directory or its `summary.json`, read and
//! turned into rows ([`super::record`]), to be recorded (`Store::insert`,
//! which adds only the runs it does not hold: importing again adds nothing).

use std::path::{Path, PathBuf};

use super::error::HistoryError;
use super::record::{rows, RunRow};

/// The rows of a run directory (its `summary.json`) or of a summary file.
pub fn read_run(path: &Path) -> Result<Vec<RunRow>, HistoryError> {
    let file = match path.is_dir() {
        true => path.join("summary.json"),
        false => path.to_path_buf(),
    };
    if path.is_dir() && !file.exists() {
        return Err(HistoryError::NoSummary {
            path: path.to_path_buf(),
        });
    }
    let text = std::fs::read_to_string(&file).map_err(|source| HistoryError::Read {
        path: file.clone(),
        source,
    })?;
    let summary = crate::summary::parse_summary(&text).map_err(|e| HistoryError::NotASummary {
        path: file.clone(),
        why: e.to_string(),
    })?;
    rows(&summary, &file)
}

/// The rows of every path, all read and checked before any is recorded,
/// so that one bad path among many stores nothing.
pub fn read_runs(paths: &[PathBuf]) -> Result<Vec<RunRow>, HistoryError> {
    let mut all = Vec::new();
    for p in paths {
        all.extend(read_run(p)?);
    }
    Ok(all)
}
