//! A soak in miniature, end to end: a stream that registers, updates and
//! stops services and runs batch work, on a cluster that collects garbage
//! on short thresholds. The summary shows the collection (its own raft
//! entry types, rows removed), state that levels off below what the run
//! created, the stops, and time to running window by window.

use crate::common;

use common::{capacity, json, schema_errors, succeeded};

const MINI_SOAK: &str = r#"
name = "mini-soak"
description = "services updated and stopped, batch work finishing, GC on"
nodes = 100
duration = "40s"
drain = "20s"
arrival = { process = "poisson", rate = 4.0 }
update_share = 0.2
stop_share = 0.3
server_args = [
  "--gc-interval", "2s",
  "--eval-gc-threshold", "3s",
  "--batch-eval-gc-threshold", "3s",
  "--job-gc-threshold", "3s",
  "--deployment-gc-threshold", "3s",
]
nodesim_args = ["--batch-duration", "3s"]

[[jobs]]
name = "web"
type = "service"
weight = 6
count = 2
cpu_mhz = 100
max_parallel = 1
min_healthy_time_ms = 200

[[jobs]]
name = "etl"
type = "batch"
weight = 4
count = 3
cpu_mhz = 100
"#;

#[test]
fn a_short_soak_collects_garbage_and_reports_state_and_windows() {
    let (_dir, out, mut cmd) = capacity(MINI_SOAK, "mini-soak");
    let run = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    succeeded(&run, &out);
    let summary = json(&out.join("summary.json"));
    let errors = schema_errors(&summary);
    assert!(errors.is_empty(), "{errors:?}");
    let v = &summary["variants"][0];

    let stream = &v["stream"];
    let stops = stream["stops"].as_u64().unwrap();
    assert!(stops > 0, "the stream stopped services: {stream}");
    assert_eq!(stream["stops_failed"], 0);

    let entries = &v["raft_entries_by_type"];
    for t in ["gc_jobs", "gc_evals"] {
        assert!(entries[t].as_u64().unwrap() > 0, "{t}: {entries}");
    }
    let collected = &v["gc_collected"];
    assert!(
        collected["jobs"].as_u64().unwrap() > 0,
        "stopped and finished jobs collected: {collected}"
    );
    assert!(collected["allocs"].as_u64().unwrap() > 0, "{collected}");

    // Fewer jobs are left than the run registered: the rest were collected.
    let registered = stream["submitted"].as_u64().unwrap() - stream["updates"].as_u64().unwrap();
    let left = v["state_objects"]["jobs"].as_u64().unwrap();
    assert!(left < registered, "{left} jobs left of {registered}");
    assert!(v["state_objects_peak"]["allocs"].as_u64().unwrap() > 0);
    assert!(v["server_rss_slope_mib_per_min"].is_number());
    assert!(v["server_rss_growth_after_10m"].is_null(), "a 40 s run");
    // The memory per row, and a leak check that says what it judged: with
    // the rows moving (growing, or falling as GC collects), it says so.
    let memory = &v["memory"];
    assert!(
        memory["server_rss_bytes_per_row"].as_f64().unwrap() > 0.0,
        "{memory}"
    );
    let growth = memory["state_growth_2nd_half"].as_f64().unwrap();
    let verdict = memory["leak_check"]["verdict"].as_str().unwrap();
    match growth.abs() > 0.05 {
        true => assert_eq!(verdict, "not_judged", "{memory}"),
        false => assert!(verdict == "flat" || verdict == "grows", "{memory}"),
    }

    // Six windows over the stream, each with jobs that ran.
    let windows = stream["running_windows"].as_array().unwrap();
    assert_eq!(windows.len(), 6, "{windows:?}");
    assert!(windows
        .iter()
        .all(|w| w["jobs"].as_u64().unwrap() > 0 && w["time_to_running_p99_ms"].is_number()));
    assert_eq!(windows[5]["to_s"].as_f64().unwrap(), 40.0);

    // The terminal table and the report show growth and collection.
    for row in [
        "state rows: jobs, end (peak)",
        "garbage collected: evals",
        "server memory, 2nd half",
        "server RSS per state row",
    ] {
        assert!(stdout.contains(row), "no {row:?} row in:\n{stdout}");
    }
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    for chart in ["State rows by table", "Garbage collected by kind"] {
        assert!(report.contains(chart), "report.html has no {chart:?} chart");
    }
}
