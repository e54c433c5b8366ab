//! Faults under load, end to end: real server processes killed, paused and
//! partitioned (through the peer-link proxy) while a job stream runs, and
//! the audit of every acknowledged job on every server that ends the run.

use crate::common;

use std::time::Duration;

use common::{browser, capacity, json, schema_errors, succeeded};
use stampede_launch::testing::{eventually_ok, register_job, service_job, Harness, CATCH_UP};
use stampede_launch::NodeId;
use stampede_proto::JobListRequest;

/// Five leader kills, a pause and a partition of the leader, and all three
/// servers killed at once, on a small fleet. A step waits until the cluster
/// has settled from the previous one, so a slower cluster runs them later,
/// not on top of each other.
const FAULTS: &str = r#"
name = "faults-ci"
description = "leader kills, a pause, a partition and a full restart under a small stream"
nodes = 20
duration = "50s"
drain = "20s"
arrival = { process = "constant", rate = 4.0 }
update_share = 0.2

[[jobs]]
name = "web"
type = "service"
count = 2
cpu_mhz = 100

[[jobs]]
name = "etl"
type = "batch"
count = 2
cpu_mhz = 100

[[faults]]
at = "3s"
action = "kill_leader"
duration = "2s"

[[faults]]
at = "8s"
action = "kill_leader"
duration = "2s"

[[faults]]
at = "13s"
action = "kill_leader"
duration = "2s"

[[faults]]
at = "18s"
action = "kill_leader"
duration = "2s"

[[faults]]
at = "23s"
action = "kill_leader"
duration = "2s"

[[faults]]
at = "28s"
action = "pause_leader"
duration = "3s"

[[faults]]
at = "34s"
action = "partition_leader"
duration = "3s"

[[faults]]
at = "40s"
action = "kill_all"
duration = "1s"
"#;

#[test]
fn a_run_with_faults_reports_each_fault_and_audits_every_acknowledged_job() {
    let (_dir, out, mut cmd) = capacity(FAULTS, "faults-ci");
    let run = cmd.arg("--no-prometheus").output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    succeeded(&run, &out);
    assert!(
        stdout.contains("audit: acked / lost / phantom") && stdout.contains("fault 1: kill_leader"),
        "{stdout}"
    );

    let summary = json(&out.join("summary.json"));
    let errors = schema_errors(&summary);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(summary["complete"], true, "{summary}");

    let v = &summary["variants"][0];
    let audit = &v["audit"];
    assert!(audit["acked"].as_u64().unwrap() > 0, "{audit}");
    assert_eq!(audit["lost"], 0, "{audit}");
    assert_eq!(audit["phantom"], 0, "{audit}");
    assert_eq!(audit["servers"], 3, "{audit}");

    // Every server was killed at least once, so each one's record of when
    // it applied the entries died with it; the traces read before each kill
    // keep the jobs' paths whole. Only an update's earlier run is left out
    // (the servers trace a job's newest version), and a few jobs more at
    // most (without the traces read before the kills, 40 of 162 jobs).
    let (stream, check) = (&v["stream"], &v["trace_check"]);
    let jobs = stream["running"]
        .as_u64()
        .unwrap()
        .saturating_sub(stream["updates"].as_u64().unwrap());
    let traced = check["traced"].as_u64().unwrap();
    assert!(
        traced * 10 >= jobs * 9,
        "{traced} of {jobs} jobs traced: {check}"
    );

    let faults = v["faults"].as_array().unwrap();
    let actions: Vec<&str> = faults
        .iter()
        .map(|f| f["action"].as_str().unwrap())
        .collect();
    let mut expected = vec!["kill_leader"; 5];
    expected.extend(["pause_leader", "partition_leader", "kill_all"]);
    assert_eq!(actions, expected);
    let mut last_at = 0.0;
    for f in faults {
        for field in ["action", "at_s", "time_to_leader_s", "unavailable_s"] {
            assert!(f.get(field).is_some(), "{field} missing: {f}");
        }
        let at = f["at_s"].as_f64().unwrap();
        assert!(
            at >= f["scheduled_at_s"].as_f64().unwrap() && at > last_at,
            "{f}"
        );
        last_at = at;
        assert!(
            f["time_to_leader_s"].as_f64().is_some(),
            "a leader was found: {f}"
        );
        assert!(
            f.get("throughput_before").is_some() && f["elections"].as_u64().is_some(),
            "{f}"
        );
        // Measured for every fault (a job runs around each one), not judged.
        let back = f["control_plane_recovery_s"].as_f64();
        assert!(
            back.is_some_and(|s| s >= 0.0),
            "control_plane_recovery_s: {f}"
        );
        // The struck server caught up; with every server struck there is
        // nothing to catch up with.
        let caught_up = f["catch_up_time_s"].as_f64();
        if f["action"] == "kill_all" {
            assert!(caught_up.is_none(), "{f}");
        } else {
            assert!(caught_up.is_some_and(|s| s >= 0.0), "{f}");
            assert!(f["snapshots_installed"].as_u64().is_some(), "{f}");
        }
    }
    assert!(
        stdout.contains("control plane back s"),
        "the table shows it: {stdout}"
    );
    // traces.json: a stage that spans a fault names it, as ACTION@ATs.
    let traces = json(&out.join("traces.json"));
    for span in traces
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|j| j.as_array().unwrap())
    {
        if let Some(f) = span.get("spans_fault") {
            let f = f.as_str().unwrap();
            assert!(f.contains('@') && f.ends_with('s'), "{span}");
        }
    }
    // The leader faults struck the leader of the time: one server each.
    for f in &faults[..7] {
        assert_eq!(f["servers"].as_array().unwrap().len(), 1, "{f}");
        assert_eq!(f["servers"][0], f["leader_before"], "{f}");
    }
    assert_eq!(faults[7]["servers"], serde_json::json!([1, 2, 3]));

    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.matches("\"marks\":[").count() >= 8
            && html.contains("{\"x\":")
            && html.contains("\"label\":\"partition_leader\""),
        "the plots mark each fault"
    );
    assert!(html.contains("Job registrations acknowledged") && html.contains("Audit: all"));
    // Servers killed and paused leave gaps in their series; every chart still draws.
    let drawn = browser::drawn(&out.join("report.html"), "#cursor=0.5");
    assert_eq!(drawn.charts, drawn.places, "{drawn:?}");
    assert_eq!(drawn.drawn, drawn.charts, "{drawn:?}");
    assert_eq!(drawn.legends_filled, drawn.charts, "{drawn:?}");
}

/// A follower killed while the stream writes, its log left behind by the
/// leader's: a snapshot every 20 entries, 5 entries kept behind it.
const FOLLOWER_BEHIND: &str = r#"
name = "follower-behind"
description = "a follower killed mid-stream catches up through a snapshot"
nodes = 20
duration = "14s"
drain = "20s"
arrival = { process = "constant", rate = 4.0 }
server_args = ["--snapshot-entries", "20", "--keep-entries", "5"]

[[jobs]]
name = "web"
type = "service"
count = 2
cpu_mhz = 100

[[faults]]
at = "3s"
action = "kill_follower"
duration = "5s"
"#;

#[test]
fn a_follower_killed_mid_stream_catches_up_through_a_snapshot_with_no_election() {
    let (_dir, out, mut cmd) = capacity(FOLLOWER_BEHIND, "follower-behind");
    let run = cmd.arg("--no-prometheus").output().unwrap();
    succeeded(&run, &out);
    let stdout = String::from_utf8_lossy(&run.stdout);
    let summary = json(&out.join("summary.json"));
    let errors = schema_errors(&summary);
    assert!(errors.is_empty(), "{errors:?}");
    let v = &summary["variants"][0];
    let f = &v["faults"][0];
    assert_eq!(f["action"], "kill_follower", "{f}");
    assert_ne!(f["servers"][0], f["leader_before"], "{f}");
    // Twenty jobs written while it was down, each several entries: the
    // leader's log moved past it, so it could only catch up from a snapshot.
    assert!(
        f["snapshots_installed"].as_u64().is_some_and(|n| n >= 1),
        "{f}"
    );
    assert!(
        f["catch_up_time_s"].as_f64().is_some_and(|s| s >= 0.0),
        "{f}"
    );
    assert_eq!(f["elections"], 0, "a follower's kill causes none: {f}");
    // Nor did any election happen outside it: the others kept their leader.
    assert_eq!(
        v["elections_detail"],
        serde_json::json!([]),
        "the others kept their leader: {}",
        v["validity"]
    );
    assert_eq!(v["audit"]["lost"], 0, "{}", v["audit"]);
    assert!(
        stdout.contains("caught up s / snapshots installed"),
        "the table shows it: {stdout}"
    );
}

#[test]
fn faults_are_refused_for_a_cluster_loadgen_did_not_start() {
    let (_dir, out, mut cmd) = capacity(FAULTS, "faults-ci");
    // `--servers`: the flag's old name, still taken.
    let run = cmd
        .args([
            "--servers",
            "127.0.0.1:1",
            "--metrics",
            "http://127.0.0.1:1/metrics",
        ])
        .output()
        .unwrap();
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("[[faults]]") && err.contains("without --address"),
        "{err}"
    );
    assert!(!out.exists(), "nothing was started or written");
}

/// The job ids server `id` holds, read from that server alone.
async fn jobs_on(h: &Harness, id: NodeId) -> Result<Vec<String>, String> {
    let client = h.client_of(&[id]).with_retry_for(Duration::from_secs(1));
    client
        .retrying(|c| async move {
            let jobs = c.jobs().list(JobListRequest { query: None }).await?;
            Ok(jobs.into_inner().jobs)
        })
        .await
        .map(|jobs| jobs.into_iter().map(|j| j.id).collect())
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_is_replaced_and_catches_up_once_healed() {
    let mut h = Harness::start_with_links(3, &[]);
    let old = h.leader().await;
    let others = h.ids_except(old);
    h.partition(old).unwrap();
    assert!(h.is_partitioned(old) && !h.is_partitioned(others[0]));
    assert!(h.links().unwrap().link(others[0], old).unwrap().is_cut());
    assert!(!h
        .links()
        .unwrap()
        .link(others[0], others[1])
        .unwrap()
        .is_cut());

    // The others elect one of themselves; the old leader hears nothing of it.
    let new = eventually_ok("the others elect a new leader", CATCH_UP, || async {
        let s = h.status(others[0]).await.map_err(|e| e.to_string())?;
        match s.leader_id {
            Some(l) if l != old => Ok(l),
            other => Err(format!("server {} names {other:?}", others[0])),
        }
    })
    .await;
    assert!(others.contains(&new));
    // Written through the new leader itself: the other follower may still
    // name the old one for a moment.
    let written = register_job(
        &h.client_of(&[new]),
        service_job("during-partition", 1, 100, 64),
    )
    .await;
    let cut_off = h.status(old).await.unwrap();
    assert!(
        cut_off.applied_index < written.index,
        "the partitioned server applied {} though the write is at {}",
        cut_off.applied_index,
        written.index
    );

    h.heal(old).unwrap();
    eventually_ok(
        "the old leader follows and has the job written while it was cut off",
        CATCH_UP,
        || async {
            let s = h.status(old).await.map_err(|e| e.to_string())?;
            if s.leader_id == Some(old) || s.applied_index < written.index {
                return Err(format!("{s:?}"));
            }
            let jobs = jobs_on(&h, old).await?;
            jobs.contains(&"during-partition".to_string())
                .then_some(())
                .ok_or(format!("jobs: {jobs:?}"))
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_follower_misses_writes_and_applies_them_once_resumed() {
    let (mut h, leader) = Harness::with_leader(3, &[]).await;
    let follower = h.ids_except(leader)[0];
    h.pause(follower).unwrap();
    assert!(h.is_paused(follower));
    let written = register_job(
        &h.client_of(&[leader]),
        service_job("while-paused", 1, 100, 64),
    )
    .await;
    h.resume(follower).unwrap();
    assert!(!h.is_paused(follower));
    eventually_ok("the resumed follower has the job", CATCH_UP, || async {
        let s = h.status(follower).await.map_err(|e| e.to_string())?;
        if s.applied_index < written.index {
            return Err(format!("applied {}", s.applied_index));
        }
        let jobs = jobs_on(&h, follower).await?;
        jobs.contains(&"while-paused".to_string())
            .then_some(())
            .ok_or(format!("jobs: {jobs:?}"))
    })
    .await;
}
