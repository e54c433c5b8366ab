//! What the loadgen tests share: a `loadgen capacity` command for a scenario
//! written to a fresh directory, reading the JSON a run writes, and checking
//! a summary against its schema.

#![allow(dead_code)] // each test file uses its own part

pub mod browser;

use std::path::{Path, PathBuf};
use std::process::Command;

pub const LOADGEN: &str = env!("CARGO_BIN_EXE_loadgen");

/// A capacity run of `scenario` (TOML, saved as `NAME.toml`) into `RUN/run`:
/// the directory (deleted on drop), the run directory, and the command.
pub fn capacity(scenario: &str, name: &str) -> (tempfile::TempDir, PathBuf, Command) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(format!("{name}.toml"));
    std::fs::write(&file, scenario).unwrap();
    let out = dir.path().join("run");
    let mut cmd = Command::new(LOADGEN);
    cmd.args(["capacity", "--scenario"])
        .arg(&file)
        .arg("--out")
        .arg(&out);
    (dir, out, cmd)
}

/// This package's directory, read when the test runs: a test binary may be
/// reused from a build of another checkout of the same commit (the target
/// directory is shared), where a path fixed at compile time would point.
pub fn package_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

pub fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// What `summary.schema.json` says is wrong with `summary`; empty when it conforms.
pub fn schema_errors(summary: &serde_json::Value) -> Vec<String> {
    let schema = json(&package_dir().join("summary.schema.json"));
    let validator = jsonschema::validator_for(&schema).unwrap();
    validator
        .iter_errors(summary)
        .map(|e| e.to_string())
        .collect()
}
