//! A fleet run at a small scale, end to end: real servers and nodesim, a
//! system job placed as several plans by a small plan budget, a leader
//! kill, and `summary.fleet` checked against what the run must show.

use crate::common;

use common::{capacity, json, schema_errors, succeeded};

const NODES: u64 = 3000;
const PLAN_MAX_ALLOCS: u64 = 400;

/// 3,000 nodes register, idle ten seconds, take one system job at 10 s
/// (3,000 allocations in plans of at most 400), and the leader is killed
/// at 15 s. A TTL of 10 s (the servers take up to 1,000 heartbeats a
/// second) makes nodes heartbeat while the fleet idles.
const FLEET: &str = r#"
name = "fleet-ci"
description = "a small fleet: registration, a system job in pieces, a leader kill"
nodes = 3000
duration = "19s"
drain = "60s"
arrival = { process = "constant", rate = 0.1 }
server_args = ["--plan-max-allocs", "400", "--max-heartbeats-per-second", "1000"]
nodesim_args = ["--ramp-rate", "3000"]

[[jobs]]
name = "agent"
type = "system"
cpu_mhz = 10
memory_mb = 16

[[faults]]
at = "15s"
action = "kill_leader"
duration = "2s"
"#;

#[test]
fn a_fleet_run_reports_registration_memory_heartbeats_and_failover() {
    let (_dir, out, mut cmd) = capacity(FLEET, "fleet-ci");
    let run = cmd.arg("--no-prometheus").output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    succeeded(&run, &out);
    assert!(
        stdout.contains("fleet: nodes / ready s / registrations/s"),
        "{stdout}"
    );

    let summary = json(&out.join("summary.json"));
    let errors = schema_errors(&summary);
    assert!(errors.is_empty(), "{errors:?}");
    let v = &summary["variants"][0];
    assert_eq!(v["problems"], serde_json::json!([]), "{v}");
    let f = &v["fleet"];
    let num = |field: &str| {
        f[field]
            .as_f64()
            .unwrap_or_else(|| panic!("fleet.{field}: {f}"))
    };

    assert_eq!(f["nodes"], NODES);
    let ready = num("ready_s");
    assert!(ready > 0.0, "{f}");
    let rate = num("registrations_per_second");
    assert!((rate * ready - NODES as f64).abs() < 1.0, "{f}");
    assert!(num("server_rss_bytes_per_node") > 0.0, "{f}");
    assert!(num("nodesim_rss_bytes_per_node") > 0.0, "{f}");

    // Every node parks one query for its allocations, on one server.
    let parked: u64 = f["parked_node_queries_by_server"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(parked, NODES, "{f}");
    assert_eq!(
        f["parked_node_queries_by_server"].as_array().unwrap().len(),
        3
    );

    // Nodes heartbeat between half and three quarters of their TTL: above
    // the formula's rate, below twice it.
    assert_eq!(num("ttl_s"), 10.0, "{f}");
    let formula = num("heartbeats_per_second_by_formula");
    assert_eq!(formula, NODES as f64 / 10.0);
    let heartbeats = num("heartbeats_per_second");
    assert!(
        heartbeats > 0.8 * formula && heartbeats < 2.0 * formula,
        "{f}"
    );

    // The kill cost one election (or a few, on a slow machine); nothing
    // else did, and no node was wrongly marked down.
    let faults = v["faults"].as_array().unwrap();
    assert_eq!(faults.len(), 1);
    let fault_elections = faults[0]["elections"].as_u64().unwrap();
    assert!(fault_elections >= 1, "{}", faults[0]);
    assert_eq!(f["elections_outside_faults"], 0, "{v}");
    assert_eq!(v["elections"].as_u64(), Some(fault_elections), "{v}");
    assert_eq!(f["wrongly_down_after_failover"], 0, "{f}");

    // The system job ran on every node, placed as several plans.
    assert_eq!(v["stream"]["submitted"], 1, "{}", v["stream"]);
    assert_eq!(v["stream"]["allocations_placed"], NODES, "{}", v["stream"]);
    assert_eq!(v["stream"]["time_to_running_ms"]["count"], 1);
    assert!(num("all_running_s") > 0.0, "{f}");
    let plans = v["raft_entries_by_type"]["plan_apply"].as_u64().unwrap();
    assert!(plans >= NODES / PLAN_MAX_ALLOCS, "{plans} plan entries");
    assert_eq!(v["state_objects"]["allocs"], NODES, "{v}");
}
