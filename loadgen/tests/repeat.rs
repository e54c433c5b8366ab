//! `loadgen capacity --repeat 2` end to end: each variant twice, each time
//! on a fresh cluster, interleaved; the summary keeps both repetitions'
//! measures with an interval over them and says whether the run was valid;
//! and `loadgen compare` reads it back.

mod common;

use common::{capacity, json, schema_errors, LOADGEN};

const TWO: &str = r#"
name = "two"
description = "two variants, twice each"
nodes = 20
duration = "5s"
drain = "30s"
arrival = { process = "constant", rate = 2.0 }

[[jobs]]
name = "web"
type = "service"
count = 2
cpu_mhz = 100

[[variants]]
name = "legacy"
nodesim_args = ["--update-mode", "legacy"]

[[variants]]
name = "prioritized"
nodesim_args = ["--update-mode", "prioritized"]
"#;

#[test]
fn each_variant_runs_n_times_interleaved_with_an_interval_over_its_repetitions() {
    let (_dir, out, mut cmd) = capacity(TWO, "two");
    let run = cmd
        .args(["--repeat", "2", "--no-prometheus"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stdout}\n{stderr}");

    // A B A B: each variant's second repetition after the other's first.
    let at = |needle: &str| {
        stderr
            .find(needle)
            .unwrap_or_else(|| panic!("{needle}: {stderr}"))
    };
    let order = [
        at("legacy (20 nodes, 5s of jobs, repetition 1/2)"),
        at("prioritized (20 nodes, 5s of jobs, repetition 1/2)"),
        at("legacy (20 nodes, 5s of jobs, repetition 2/2)"),
        at("prioritized (20 nodes, 5s of jobs, repetition 2/2)"),
    ];
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{stderr}");

    let summary = json(&out.join("summary.json"));
    let errors = schema_errors(&summary);
    assert!(errors.is_empty(), "{errors:?}");
    for v in summary["variants"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        for rep in ["rep-1", "rep-2"] {
            assert!(
                out.join(name).join(rep).join("metrics").is_dir(),
                "{name}/{rep}"
            );
        }
        let reps = v["repetitions"].as_array().unwrap();
        assert_eq!(reps.len(), 2, "{v}");
        let rates: Vec<f64> = reps
            .iter()
            .map(|r| r["placements_per_s"].as_f64().unwrap())
            .collect();
        assert!(rates.iter().all(|r| *r > 0.0), "{rates:?}");
        let i = &v["intervals"]["placements_per_s"];
        assert_eq!(i["method"], "order-statistics", "{i}");
        let (lo, median, hi) = (
            i["lo"].as_f64().unwrap(),
            i["median"].as_f64().unwrap(),
            i["hi"].as_f64().unwrap(),
        );
        assert_eq!(
            (lo, hi),
            (rates[0].min(rates[1]), rates[0].max(rates[1])),
            "{i}"
        );
        assert!(lo <= median && median <= hi, "{i}");
        // Two repetitions reach 50%: the interval says so.
        assert!(
            (i["confidence"].as_f64().unwrap() - 0.5).abs() < 1e-9,
            "{i}"
        );
        assert!(v["validity"]["valid"].is_boolean(), "{v}");
        assert!(
            v["memory"]["leak_check"]["why"]
                .as_str()
                .is_some_and(|w| !w.is_empty()),
            "{v}"
        );
    }
    assert!(
        stdout.contains("validity") && stdout.contains("placements/s: median [95% interval]"),
        "{stdout}"
    );

    // The run compared with itself: nothing is worse.
    let same = std::process::Command::new(LOADGEN)
        .arg("compare")
        .arg(&out)
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(
        same.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&same.stderr)
    );
    let c = json(&out.join("compare.json"));
    assert_eq!(c["variants"].as_array().unwrap().len(), 2);
    assert!(c["worse"].as_array().unwrap().is_empty(), "{c}");
}
