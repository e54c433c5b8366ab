//! `loadgen capacity --repeat 2` end to end: each variant twice, each time
//! on a fresh cluster, in rounds of a random order drawn from a recorded
//! seed; the summary keeps both repetitions' measures with an interval over
//! them and says whether the run was valid; and `loadgen compare` reads it
//! back. Then `--until-conclusive` with one variant on another build's
//! binaries (`--variant-bin`).

use crate::common;

use common::{capacity, json, schema_errors, succeeded, LOADGEN};

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
    succeeded(&run, &out);

    // Rounds: every variant once in each, in the order summary.json
    // records, the second round after the first.
    let summary = json(&out.join("summary.json"));
    assert!(summary["seed"].is_u64(), "{}", summary["seed"]);
    let rounds = summary["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 2, "{rounds:?}");
    let mut at = Vec::new();
    for (i, r) in rounds.iter().enumerate() {
        assert_eq!(r["round"], i + 1);
        let mut order: Vec<&str> = (r["order"].as_array().unwrap().iter())
            .map(|n| n.as_str().unwrap())
            .collect();
        for name in &order {
            let needle = format!("{name} (20 nodes, 5s of jobs, round {}/2)", i + 1);
            at.push(
                stderr
                    .find(&needle)
                    .unwrap_or_else(|| panic!("{needle}: {stderr}")),
            );
        }
        order.sort();
        assert_eq!(order, ["legacy", "prioritized"], "{r}");
    }
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{stderr}");

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
        assert_eq!(
            (reps[0]["round"].as_u64(), reps[1]["round"].as_u64()),
            (Some(1), Some(2))
        );
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
        .env(common::HISTORY_ENV, out.with_file_name("history.sqlite"))
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

#[test]
fn until_conclusive_adds_rounds_of_two_builds_and_compare_pairs_them_round_by_round() {
    // The second variant runs the binaries of "another build": a directory
    // holding its own cluster and nodesim (here, copies of this build's).
    let (dir, out, mut cmd) = capacity(TWO, "two");
    let here = std::path::Path::new(LOADGEN).parent().unwrap();
    let other = dir.path().join("other-build");
    std::fs::create_dir_all(&other).unwrap();
    for name in ["cluster", "nodesim"] {
        std::fs::copy(here.join(name), other.join(name)).unwrap();
    }
    let run = cmd
        .args([
            "--until-conclusive",
            "--max-repeat",
            "3",
            "--seed",
            "42",
            "--no-prometheus",
        ])
        .arg(format!("--variant-bin=prioritized={}", other.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let summary = json(&out.join("summary.json"));
    let errors = schema_errors(&summary);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(summary["seed"], 42);
    let seq = &summary["sequential"];
    // Three rounds at most, first looked at after the third: it stopped
    // there, decided or not, at the level of one look.
    assert_eq!(
        (
            seq["first_look"].as_u64(),
            seq["max_rounds"].as_u64(),
            seq["rounds_run"].as_u64()
        ),
        (Some(3), Some(3), Some(3)),
        "{seq}"
    );
    assert!(
        ["decided", "max-repeat"].contains(&seq["stopped"].as_str().unwrap()),
        "{seq}"
    );
    assert!(
        (seq["level"].as_f64().unwrap() - 0.95).abs() < 1e-9,
        "{seq}"
    );
    assert_eq!(summary["rounds"].as_array().unwrap().len(), 3);
    assert!(stderr.contains("after round 3:"), "{stderr}");
    let variants = summary["variants"].as_array().unwrap();
    let canonical = std::fs::canonicalize(&other).unwrap();
    assert_eq!(
        variants[1]["binaries"]["dir"],
        canonical.display().to_string().as_str()
    );
    assert!(variants[0].get("binaries").is_none(), "{}", variants[0]);
    // Three rounds: each variant stores its own floors with the run.
    for v in variants {
        let floor = v["noise_floors"]["placements_per_s"].as_f64();
        assert!(floor.is_some_and(|f| f >= 0.01), "{v}");
    }
    // Each variant's nodesim ran from where it was told to.
    let log =
        std::fs::read_to_string(out.join("prioritized/rep-1/nodesim.log")).unwrap_or_default();
    assert!(!log.is_empty());

    // compare pairs the two variants of the run round by round, against a
    // floor calibrated from their own rounds.
    let c = std::process::Command::new(LOADGEN)
        .env(common::HISTORY_ENV, out.with_file_name("history.sqlite"))
        .arg("compare")
        .arg(&out)
        .arg(&out)
        .args(["--variant-a", "legacy", "--variant-b", "prioritized"])
        .output()
        .unwrap();
    assert!(
        c.status.code().is_some_and(|c| c <= 1),
        "{}",
        String::from_utf8_lossy(&c.stderr)
    );
    let c = json(&out.join("compare.json"));
    let rows = c["variants"][0]["measures"].as_array().unwrap();
    let rate = rows
        .iter()
        .find(|m| m["measure"] == "placements_per_s")
        .unwrap();
    assert_eq!(rate["samples"], "rounds", "{rate}");
    assert_eq!(rate["floor_source"], "calibrated", "{rate}");
    assert!(rate["floor"].as_f64().unwrap() >= 0.01, "{rate}");
    for m in rows {
        assert!(
            m["floor"].is_number() && m["floor_source"].is_string(),
            "{m}"
        );
    }

    // A variant-bin naming no variant, or a directory without the binaries,
    // stops the run before anything starts.
    let (_d, _o, mut bad) = capacity(TWO, "two");
    let r = bad
        .args(["--no-prometheus", "--variant-bin", "nope=/tmp"])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&r.stderr);
    assert!(
        !r.status.success() && e.contains("nope") && e.contains("no such variant"),
        "{e}"
    );
    let (_d, _o, mut bad) = capacity(TWO, "two");
    let r = bad
        .args(["--no-prometheus", "--variant-bin", "legacy=/tmp"])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && e.contains("no cluster in it"), "{e}");
}
