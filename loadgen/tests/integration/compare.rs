//! `loadgen compare A B` as a user runs it: two run directories in, a table,
//! `compare.json` and `compare.html` out, and the exit code: 0 when no gated
//! measure is worse, 1 when one is, 2 when the runs cannot be compared.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use common::{json, LOADGEN};
use serde_json::{json, Value};

/// A run directory holding a summary whose one variant had these
/// placements/s and p99 times to running in its repetitions.
fn run_dir(
    root: &Path,
    name: &str,
    scenario: &str,
    rates: &[f64],
    p99s: &[f64],
) -> std::path::PathBuf {
    let reps: Vec<Value> = rates
        .iter()
        .zip(p99s)
        .map(|(r, p)| json!({"placements_per_s": r, "p99_time_to_running_ms": p, "valid": true}))
        .collect();
    let summary = json!({
        "schema_version": 1,
        "scenario": serde_json::to_value(loadgen::Scenario::load(scenario).unwrap()).unwrap(),
        "variants": [{
            "name": "only",
            "stream": {"placements_per_second": rates[0], "time_to_running_ms": {"p99": p99s[0]},
                       "latency_quantiles": {"q": [0.0, 0.5, 1.0], "placement_ms": [1.0, 2.0, 3.0],
                                             "time_to_running_ms": [10.0, 20.0, 30.0]}},
            "repetitions": reps,
        }],
    });
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("summary.json"), summary.to_string()).unwrap();
    dir
}

/// Records in `dir`'s summary that its run's cluster was built from
/// `commit` with uncommitted changes.
fn with_build(dir: &Path, commit: &str) {
    let path = dir.join("summary.json");
    let mut summary = json(&path);
    let build = json!({"commit": commit, "dirty": true, "version": "0.1.0"});
    summary["build"] = json!({"cluster": build, "nodesim": build, "loadgen": null});
    std::fs::write(&path, summary.to_string()).unwrap();
}

fn compare(a: &Path, b: &Path, extra: &[&str]) -> Output {
    Command::new(LOADGEN)
        .env(common::HISTORY_ENV, a.with_file_name("history.sqlite"))
        .arg("compare")
        .arg(a)
        .arg(b)
        .args(extra)
        .output()
        .unwrap()
}

const STEADY: [f64; 5] = [100.0, 104.0, 97.0, 101.0, 99.0];
const P99: [f64; 5] = [900.0, 950.0, 870.0, 910.0, 990.0];

#[test]
fn the_same_figures_again_are_inconclusive_and_exit_zero() {
    let root = tempfile::tempdir().unwrap();
    let a = run_dir(root.path(), "a", "default", &STEADY, &P99);
    let b = run_dir(
        root.path(),
        "b",
        "default",
        &[102.0, 98.0, 100.0, 103.0, 96.0],
        &[920.0, 880.0, 960.0, 900.0, 940.0],
    );
    with_build(&a, "0123456789abcdef0123");
    let out = compare(&a, &b, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("no gated measure is worse"), "{stdout}");
    // What each side ran: A's builds, and B's summary (as an earlier
    // loadgen wrote it) recorded none.
    assert!(
        stdout.contains(
            "A ran cluster 0123456789ab+dirty, nodesim 0123456789ab+dirty, loadgen unknown"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("B ran no recorded build"), "{stdout}");
    let c = json(&b.join("compare.json"));
    assert_eq!(c["build_a"]["cluster"]["commit"], "0123456789abcdef0123");
    assert_eq!(c["build_b"]["cluster"], Value::Null);
    let m = &c["variants"][0]["measures"][0];
    assert_eq!(
        (m["measure"].as_str(), m["verdict"].as_str()),
        (Some("placements_per_s"), Some("inconclusive"))
    );
    for field in ["a", "b", "ratio", "lo", "hi"] {
        assert!(m[field].is_number(), "{field}: {m}");
    }
    let html = std::fs::read_to_string(b.join("compare.html")).unwrap();
    assert!(
        html.contains("No gated measure is worse") && html.contains("<svg"),
        "{html}"
    );
}

#[test]
fn a_slower_run_is_worse_and_exits_one_unless_the_measure_is_not_gated() {
    let root = tempfile::tempdir().unwrap();
    let a = run_dir(root.path(), "a", "default", &STEADY, &P99);
    let b = run_dir(
        root.path(),
        "b",
        "default",
        &[70.0, 72.0, 69.0, 74.0, 71.0],
        &P99,
    );
    let out_dir = root.path().join("cmp");
    let out = compare(&a, &b, &["--out", out_dir.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("worse than A: only: placements_per_s"),
        "{stderr}"
    );
    let c = json(&out_dir.join("compare.json"));
    let m = &c["variants"][0]["measures"][0];
    assert_eq!(m["verdict"], "worse");
    assert!(
        m["hi"].as_f64().unwrap() < 1.0,
        "the interval excludes no change: {m}"
    );
    // Gated only on time to running, which did not change: exit 0.
    let out = compare(
        &a,
        &b,
        &[
            "--gate",
            "p99_time_to_running_ms",
            "--out",
            out_dir.to_str().unwrap(),
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn runs_that_cannot_be_compared_exit_two_saying_why() {
    let root = tempfile::tempdir().unwrap();
    let a = run_dir(root.path(), "a", "default", &STEADY, &P99);
    let other = run_dir(root.path(), "c", "c2m-mini", &STEADY, &P99);
    let why = |out: Output| {
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = why(compare(&a, &other, &[]));
    assert!(
        e.contains("different scenarios: A ran \"default\", B ran \"c2m-mini\""),
        "{e}"
    );
    let e = why(compare(&a, &root.path().join("missing"), &[]));
    assert!(
        e.contains("missing/summary.json") || e.contains("missing"),
        "{e}"
    );
    std::fs::write(root.path().join("junk.json"), "not json").unwrap();
    let e = why(compare(&a, &root.path().join("junk.json"), &[]));
    assert!(e.contains("not a loadgen summary.json"), "{e}");
    let e = why(compare(&a, &a, &["--gate", "speed"]));
    assert!(e.contains("--gate speed: no such measure"), "{e}");
}
