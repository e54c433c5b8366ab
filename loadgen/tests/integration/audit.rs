//! The invariant audit end to end: a short churn of registrations, updates,
//! scales, stops and purges through random servers on a small fleet of
//! small nodes, a leader kill and a fleet pause, then every server read at
//! rest and checked. Every invariant must be present and hold.

use crate::common;

use common::{capacity, json, schema_errors, succeeded};

/// Small nodes that fill up, a short heartbeat TTL so the fleet pause
/// marks them down, and a stream of every kind of write.
const AUDIT: &str = include_str!("../common/audit-ci.toml");

const NAMES: [&str; 8] = [
    "capacity",
    "duplicates",
    "acked_writes",
    "convergence",
    "liveness",
    "deployments",
    "terminal_stays_terminal",
    "definite_errors",
];

/// Fails naming every invariant that does not hold, with the run's output.
fn assert_all_hold(invariants: &[serde_json::Value], stderr: &str) {
    let failed: Vec<String> = invariants
        .iter()
        .filter(|i| i["ok"] != true)
        .map(|i| {
            format!(
                "{}: {} violations: {}",
                i["name"], i["violations"], i["detail"]
            )
        })
        .collect();
    assert!(
        failed.is_empty(),
        "violated:\n{}\n{stderr}",
        failed.join("\n")
    );
}

#[test]
fn a_short_audit_run_checks_every_invariant_and_all_hold() {
    let (_dir, out, mut cmd) = capacity(AUDIT, "audit-ci");
    let run = cmd.arg("--no-prometheus").output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);

    let summary = json(&out.join("summary.json"));
    let errors = schema_errors(&summary);
    assert!(errors.is_empty(), "{errors:?}");
    let invariants = summary["invariants"].as_array().expect("invariants");
    let names: Vec<&str> = invariants
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, NAMES, "{summary}");
    let v = &summary["variants"][0];
    assert_eq!(v["invariants"].as_array().unwrap().len(), 8, "{v}");
    // What the audit cost loadgen is told beside them.
    let cost = &v["invariants_audit"];
    assert!(cost["duration_s"].as_f64().unwrap() > 0.0, "{cost}");
    assert!(cost["reading_s"].as_f64().unwrap() > 0.0, "{cost}");
    let peak = cost["loadgen_peak_rss_mib_after"].as_u64().unwrap();
    assert!(
        peak >= cost["loadgen_peak_rss_mib_before"].as_u64().unwrap(),
        "{cost}"
    );
    for name in NAMES {
        assert!(
            stdout.contains(&format!("invariant {name}")),
            "the table shows {name}: {stdout}"
        );
    }
    assert_all_hold(invariants, &stderr);
    succeeded(&run, &out);

    // The stream did what the audit is for: every kind of write, and the
    // fleet pause happened.
    let stream = &v["stream"];
    for field in ["updates", "scales", "stops", "purges"] {
        assert!(stream[field].as_u64().unwrap() > 0, "{field}: {stream}");
    }
    let actions: Vec<&str> = v["faults"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["kill_leader", "pause_fleet"]);
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains("terminal_stays_terminal"),
        "the report shows the invariants"
    );
}

/// Half the fleet paused (one of two nodesim processes) while the other
/// half goes on: the paused nodes are marked down and their allocations
/// lost and replaced while the cluster keeps placing and the live half
/// keeps reporting, then they wake and report what they last ran. Every
/// invariant holds, a lost allocation staying lost among them.
#[test]
fn half_the_fleet_paused_while_the_rest_goes_on_keeps_every_invariant() {
    let scenario = AUDIT
        .replace("name = \"audit-ci\"", "name = \"audit-half-ci\"")
        .replace("nodes = 30", "nodes = 30\nfleet_processes = 2")
        .replace(
            "action = \"pause_fleet\"",
            "action = \"pause_fleet\"\nshare = 0.5",
        );
    let (_dir, out, mut cmd) = capacity(&scenario, "audit-half-ci");
    let run = cmd.arg("--no-prometheus").output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    let summary = json(&out.join("summary.json"));
    let v = &summary["variants"][0];
    assert_all_hold(v["invariants"].as_array().expect("invariants"), &stderr);
    succeeded(&run, &out);
    // Two nodesim processes, sampled each under its own name.
    let rss = v["rss_mib"].as_object().expect("rss_mib");
    assert!(
        rss.contains_key("nodesim-0")
            && rss.contains_key("nodesim-1")
            && !rss.contains_key("nodesim"),
        "{rss:?}"
    );
    // Only the first was paused: its nodes sent far fewer heartbeats.
    let heartbeats = |k: u32| -> u64 {
        let log = std::fs::read_to_string(out.join(format!("audit-half-ci/nodesim-{k}.log")))
            .unwrap_or_default();
        log.lines()
            .filter_map(|l| l.trim().strip_prefix("heartbeats"))
            .filter_map(|n| n.trim().parse().ok())
            .next_back()
            .unwrap_or_else(|| panic!("nodesim-{k} printed no heartbeat count:\n{log}"))
    };
    let (paused, went_on) = (heartbeats(0), heartbeats(1));
    assert!(
        paused * 10 < went_on * 9,
        "nodesim-0 (paused) sent {paused} heartbeats, nodesim-1 {went_on}"
    );
}
