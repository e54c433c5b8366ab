//! What the loadgen tests share: a `loadgen capacity` command for a scenario
//! written to a fresh directory, reading the JSON a run writes, and checking
//! a summary against its schema.

#![allow(dead_code)] // each test file uses its own part

pub mod browser;

use std::path::{Path, PathBuf};
use std::process::Command;

pub const LOADGEN: &str = env!("CARGO_BIN_EXE_loadgen");

/// Where loadgen finds the run history when no --history is given.
pub const HISTORY_ENV: &str = "STAMPEDE_HISTORY";

/// A capacity run of `scenario` (TOML, saved as `NAME.toml`) into `RUN/run`:
/// the directory (deleted on drop), the run directory, and the command.
pub fn capacity(scenario: &str, name: &str) -> (tempfile::TempDir, PathBuf, Command) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(format!("{name}.toml"));
    std::fs::write(&file, scenario).unwrap();
    let out = dir.path().join("run");
    let mut cmd = Command::new(LOADGEN);
    // An address exported in the shell that runs the tests would make the
    // run drive that cluster instead of starting its own.
    cmd.env_remove(stampede_proto::address::ADDRESS_ENV);
    // The run is recorded in a history of its own, not in the checkout's.
    cmd.env(HISTORY_ENV, dir.path().join("history.sqlite"));
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

/// Panics unless `run` (a `loadgen capacity` into `out`) succeeded, with
/// what says why first: loadgen's stderr, the summary's problems, and the
/// last lines of every log in the run directory. The stdout's tables come
/// last, their padding trimmed, since a report cuts a long message short.
pub fn succeeded(run: &std::process::Output, out: &Path) {
    if run.status.success() {
        return;
    }
    let mut why = format!("{}\n{}", run.status, String::from_utf8_lossy(&run.stderr));
    let problems = std::fs::read_to_string(out.join("summary.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .map(|s| {
            s["variants"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|v| v["problems"].as_array().cloned().unwrap_or_default())
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    why.push_str(&format!("\nproblems: {problems:?}\n"));
    for log in logs(out) {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(15)..].join("\n");
        why.push_str(&format!("--- {} (last lines)\n{tail}\n", log.display()));
    }
    let stdout = String::from_utf8_lossy(&run.stdout);
    let trimmed: Vec<&str> = stdout.lines().map(str::trim_end).collect();
    panic!("{why}--- stdout\n{}", trimmed.join("\n"));
}

/// Every `*.log` under `dir`, at any depth.
fn logs(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            found.extend(logs(&p));
        } else if p.extension().is_some_and(|x| x == "log") {
            found.push(p);
        }
    }
    found.sort();
    found
}
