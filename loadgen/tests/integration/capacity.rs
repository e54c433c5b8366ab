//! `loadgen capacity` end to end: real cluster and nodesim processes, a small
//! scenario with two variants, and the run directory it writes.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::{browser, capacity, json, schema_errors, succeeded};
use stampede_launch::metric_value;
use stampede_launch::testing::eventually_ok;
use stampede_proto::security::Role;

const TINY: &str = r#"
name = "tiny"
description = "two variants of a small stream"
nodes = 40
duration = "6s"
drain = "30s"
arrival = { process = "constant", rate = 2.0 }
update_share = 0.3
# A snapshot every 25 raft entries, so that a run this small builds some
# and per_allocation's snapshot figures have builds to read.
server_args = ["--snapshot-entries", "25"]

[[jobs]]
name = "web"
type = "service"
count = 3
cpu_mhz = 100
max_parallel = 1
min_healthy_time_ms = 200

[[variants]]
name = "legacy"
nodesim_args = ["--update-mode", "legacy"]

[[variants]]
name = "prioritized"
nodesim_args = ["--update-mode", "prioritized"]
"#;

#[test]
fn a_capacity_run_writes_a_summary_the_schema_accepts_and_a_report_with_plots() {
    let (dir, out, mut cmd) = capacity(TINY, "tiny");
    let run = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    succeeded(&run, &out);
    assert!(
        stdout.contains("placement p50 / p99 ms") && stdout.contains("prioritized"),
        "{stdout}"
    );
    // The table ends with the answer: each variant's bottleneck and stages.
    let (_, answer) = stdout
        .rsplit_once("where the time went:")
        .unwrap_or_else(|| panic!("no answer: {stdout}"));
    for v in ["legacy", "prioritized"] {
        assert!(answer.contains(&format!("\n{v}: at ")), "{v}: {answer}");
    }
    assert!(
        answer.matches("stage p50 / p99 ms: ").count() == 2,
        "{answer}"
    );

    let summary = json(&out.join("summary.json"));
    let errors = schema_errors(&summary);
    assert!(errors.is_empty(), "{errors:?}");
    recorded_in_the_history(&dir.path().join("history.sqlite"), &out, &stdout);

    // The run directory is made to be shared: its TLS folder keeps the
    // certificates, not the CA's key or the management token.
    let mut tls: Vec<String> = std::fs::read_dir(out.join("tls"))
        .unwrap()
        .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    tls.sort();
    assert!(tls.iter().any(|f| f == "ca.pem"), "{tls:?}");
    assert!(
        !tls.iter().any(|f| f == "ca.key" || f == "token"),
        "secrets left in the run directory: {tls:?}"
    );

    assert_eq!(summary["complete"], true);
    let variants = summary["variants"].as_array().unwrap();
    // The builds that ran, as each process served them: each the build its
    // binary says it is (`--version`), stamped when that binary was built.
    let loadgen_dir = std::path::Path::new(common::LOADGEN).parent().unwrap();
    for binary in ["cluster", "nodesim", "loadgen"] {
        let b = &summary["build"][binary];
        let version = Command::new(loadgen_dir.join(binary))
            .arg("--version")
            .output()
            .unwrap();
        let version = String::from_utf8_lossy(&version.stdout);
        let said = format!(
            "(commit {}, dirty: {})",
            b["commit"].as_str().unwrap_or("?"),
            b["dirty"].as_bool().map_or("?".into(), |d| d.to_string())
        );
        assert!(
            version.contains(&said),
            "{binary}: {b} but --version: {version}"
        );
        assert_eq!(variants[1]["build"][binary], *b, "{binary}");
    }
    let names: Vec<&str> = variants
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["legacy", "prioritized"]);
    for v in variants {
        let entries = &v["raft_entries_by_type"];
        let stream = &v["stream"];
        assert_eq!(
            entries["job_register"], stream["submitted"],
            "one entry per submission"
        );
        assert!(stream["submitted"].as_u64().unwrap() >= 10, "{stream}");
        assert!(entries["plan_apply"].as_u64().unwrap() > 0, "{entries}");
        assert!(
            entries["alloc_client_update"].as_u64().unwrap() > 0,
            "{entries}"
        );
        assert!(
            v["blocking_queries_by_source"]["client_allocs"]
                .as_u64()
                .unwrap()
                > 0
        );
        assert!(v["blocking_queries_by_source"]["loadgen"].as_u64().unwrap() > 0);
        assert_eq!(stream["submitted"], stream["scheduled"], "{stream}");
        assert_eq!(
            stream["running"], stream["submitted"],
            "every job ran: {stream}"
        );
        assert!(
            stream["placement_ms"]["p50"].as_f64().unwrap() > 0.0,
            "{stream}"
        );
        // The distributions behind the percentiles: the sketch's median is p50.
        let sketch = &stream["latency_quantiles"];
        for field in ["placement_ms", "time_to_running_ms"] {
            let ms: Vec<f64> = serde_json::from_value(sketch[field].clone()).unwrap();
            assert_eq!(ms.len(), sketch["q"].as_array().unwrap().len(), "{sketch}");
            assert!(ms.windows(2).all(|w| w[0] <= w[1]), "{field}: {ms:?}");
            assert_eq!(sketch["q"][50], 0.5);
            assert_eq!(ms[50], stream[field]["p50"].as_f64().unwrap(), "{field}");
        }
    }
    // What the run cost per placement, from every process's own CPU
    // counter: present and plausible. The stream places about 30
    // allocations in all, and five processes of a debug build tick over
    // meanwhile: some tens of CPU-s per 1,000 (about 70 here). Far above
    // 200 would be a unit wrong (clock ticks, not seconds), below 1 a
    // process or the factor of 1,000 missing.
    for v in variants {
        let cores = v["cpu_cores"].as_object().unwrap();
        for process in ["server-1", "server-2", "server-3", "nodesim", "loadgen"] {
            let c = cores.get(process).and_then(|c| c.as_f64());
            assert!(c.is_some_and(|c| c > 0.0), "{process}: {cores:?}");
        }
        let placed = v["stream"]["allocations_placed"].as_u64().unwrap();
        assert!(placed > 0, "{}", v["stream"]);
        let cpu = v["cpu_seconds_per_1000_placements"]
            .as_f64()
            .unwrap_or_else(|| panic!("a number when something was placed: {v}"));
        assert!(cpu > 1.0 && cpu < 200.0, "{cpu} CPU-s per 1000 placements");
        // It is the processes' CPU-seconds over the placements: the cores
        // over the stream's length give the same figure, within sampling.
        let seconds: f64 = cores.values().map(|c| c.as_f64().unwrap()).sum::<f64>()
            * v["seconds"].as_f64().unwrap();
        let expected = seconds * 1000.0 / placed as f64;
        assert!(
            (cpu / expected - 1.0).abs() < 0.25,
            "{cpu} against {expected} from cpu_cores"
        );
    }
    assert!(
        stdout.contains("CPU-s per 1000 placements"),
        "the table shows it: {stdout}"
    );
    for v in variants {
        makespan_and_per_allocation(v);
    }
    for row in ["makespan s", "per allocation: server / nodesim RSS bytes"] {
        assert!(stdout.contains(row), "the table shows {row}: {stdout}");
    }
    // Variants compare on the very same stream.
    for field in ["scheduled", "updates"] {
        assert_eq!(
            variants[0]["stream"][field], variants[1]["stream"][field],
            "{field} differs between variants"
        );
    }
    assert!(variants[0]["stream"]["updates"].as_u64().unwrap() > 0);
    let rpcs = |i: usize| -> u64 {
        variants[i]["client_update_rpcs"]
            .as_object()
            .unwrap()
            .values()
            .map(|n| n.as_u64().unwrap())
            .sum()
    };
    assert!(
        rpcs(1) < rpcs(0),
        "prioritized sent {} update RPCs, legacy {}",
        rpcs(1),
        rpcs(0)
    );
    // The top level carries the first variant's totals.
    assert_eq!(
        summary["raft_entries_by_type"],
        variants[0]["raft_entries_by_type"]
    );

    where_the_time_went(&out, variants);

    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains("Raft entries by type") && html.contains("<table class=\"data summary\">")
    );
    for class in [
        "id=\"where-the-time-went\"",
        "class=\"bottleneck\"",
        "class=\"stage-bars\"",
        "class=\"stage-legend\"",
        "class=\"data stages\"",
        "class=\"waterfall\"",
    ] {
        assert!(html.contains(class), "the report has {class}");
    }
    assert!(!html.contains("id=\"partial\""));
    assert!(html.contains("CPU-s per 1000 placements"));
    // The browser draws them all: two latency CDFs and at least seven time
    // charts per variant, each showing its series.
    let drawn = browser::drawn(&out.join("report.html"), "#cursor=0.5");
    assert!(drawn.places >= 2 + 2 * 7, "{drawn:?}");
    assert_eq!(drawn.charts, drawn.places, "{drawn:?}");
    assert_eq!(drawn.drawn, drawn.charts, "{drawn:?}");
    assert_eq!(drawn.legends_filled, drawn.charts, "{drawn:?}");
}

/// The run was recorded in its history (the one `common::capacity` names)
/// as it ended, one row per variant, on this machine; importing its run
/// directory again adds nothing.
fn recorded_in_the_history(history: &std::path::Path, out: &std::path::Path, stdout: &str) {
    assert!(stdout.contains("history: 2 runs recorded in"), "{stdout}");
    let loadgen = |args: &[&str]| {
        let o = Command::new(common::LOADGEN)
            .arg("history")
            .args(args)
            .arg("--history")
            .arg(history)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let list = loadgen(&["list"]);
    let machine = &json(&out.join("summary.json"))["machine"];
    for v in ["legacy", "prioritized"] {
        let heading = format!(
            "tiny / {v} (machine {}",
            machine["fingerprint"].as_str().unwrap()
        );
        assert!(list.contains(&heading), "{list}");
    }
    let again = loadgen(&["import", out.to_str().unwrap()]);
    assert!(again.contains("imported 0 runs"), "{again}");
}

const STAGES: [&str; 11] = [
    "register",
    "rollout",
    "enqueue",
    "broker_wait",
    "catch_up",
    "schedule",
    "plan_commit",
    "deliver",
    "runner_start",
    "report_running",
    "observe",
];

/// The stream's makespan and what an allocation cost, present and sane:
/// each per-allocation figure is its absolute measure (the summary's own
/// peak memory, raft bytes) over the allocations the run placed.
fn makespan_and_per_allocation(v: &serde_json::Value) {
    const MIB: f64 = 1048576.0;
    let stream = &v["stream"];
    // Every job ran: jobs scheduled from 0.5 s to 5.5 s, the last running
    // after its own time to running.
    let makespan = stream["makespan_s"]
        .as_f64()
        .unwrap_or_else(|| panic!("a makespan when every job ran: {stream}"));
    let slowest_s = stream["time_to_running_ms"]["max"].as_f64().unwrap() / 1000.0;
    assert!(
        makespan >= 5.0 && makespan >= slowest_s,
        "{makespan} {stream}"
    );
    assert!(makespan <= v["seconds"].as_f64().unwrap(), "{makespan}");
    let p = &v["per_allocation"];
    let allocations = p["allocations"].as_f64().unwrap();
    assert_eq!(p["allocations"], stream["allocations_placed"], "{p}");
    let per = |field: &str| {
        p[field]
            .as_f64()
            .unwrap_or_else(|| panic!("{field} known: {p}"))
    };
    let rss = v["rss_mib"].as_object().unwrap();
    let mib = |name: &str| rss[name].as_f64().unwrap();
    let fullest = ["server-1", "server-2", "server-3"].map(mib);
    let fullest = fullest.into_iter().reduce(f64::max).unwrap();
    let close = |a: f64, b: f64| (a / b - 1.0).abs() < 1e-9;
    assert!(
        close(per("server_rss_bytes") * allocations, fullest * MIB),
        "{p}"
    );
    assert!(
        close(per("nodesim_rss_bytes") * allocations, mib("nodesim") * MIB),
        "{p}"
    );
    let raft_bytes: u64 = (v["raft_bytes_by_type"].as_object().unwrap().values())
        .map(|b| b.as_u64().unwrap())
        .sum();
    assert!(
        close(per("raft_log_bytes") * allocations, raft_bytes as f64),
        "{p}"
    );
    // Snapshots every 25 entries: some built, each in well under 10 s,
    // each held some of the run's allocations.
    let snaps = &v["snapshots"];
    assert!(snaps["built"].as_u64().unwrap() > 0, "{snaps}");
    let slowest = snaps["slowest_build_s"].as_f64().unwrap();
    assert!(slowest > 0.0 && slowest < 10.0, "{snaps}");
    let held = snaps["largest_allocations"].as_f64().unwrap();
    assert!(held >= 1.0 && held <= allocations, "{snaps}");
    let bytes = snaps["largest_bytes"].as_f64().unwrap();
    assert!(close(per("snapshot_bytes") * held, bytes), "{p} {snaps}");
    let held = snaps["slowest_build_allocations"].as_f64().unwrap();
    assert!(
        per("snapshot_seconds") * held <= slowest * (1.0 + 1e-9),
        "{p} {snaps}"
    );
    assert!(per("snapshot_seconds") > 0.0, "{p}");
}

/// Each variant's critical path in summary.json, and traces.json in the
/// run directory and each variant's: every slow job's stages contiguous
/// from 0 to its time to running, within what the stream measured.
fn where_the_time_went(out: &std::path::Path, variants: &[serde_json::Value]) {
    let mut slowest_of_variants: f64 = 0.0;
    for v in variants {
        let stages: Vec<&str> = v["stages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["stage"].as_str().unwrap())
            .collect();
        assert_eq!(stages, STAGES, "{}", v["stages"]);
        let shares: f64 = v["stages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["share_of_p99"].as_f64().unwrap())
            .sum();
        assert!((shares - 1.0).abs() < 1e-6, "{shares}");
        let bottleneck = &v["bottleneck"];
        assert!(STAGES.contains(&bottleneck["stage"].as_str().unwrap()));
        assert!(!bottleneck["text"].as_str().unwrap().is_empty());
        let check = &v["trace_check"];
        assert!(check["traced"].as_u64().unwrap() > 0, "{check}");
        let ran = v["stream"]["running"].as_u64().unwrap();
        let counted = check["traced"].as_u64().unwrap() + check["untraced"].as_u64().unwrap();
        assert_eq!(
            counted, ran,
            "every job that ran is traced or counted: {check}"
        );
        let traces = json(&out.join(v["name"].as_str().unwrap()).join("traces.json"));
        let traces = traces.as_array().unwrap();
        assert_eq!(
            traces.len() as u64,
            check["traced"].as_u64().unwrap().min(20)
        );
        let ttr = &v["stream"]["time_to_running_ms"];
        let fastest = v["stream"]["latency_quantiles"]["time_to_running_ms"][0]
            .as_f64()
            .unwrap();
        let slowest = ttr["max"].as_f64().unwrap();
        let ends = contiguous(traces);
        for end in &ends {
            assert!(
                *end >= fastest * 0.95 && *end <= slowest * 1.05,
                "{end} ms outside the stream's {fastest}..{slowest} ms"
            );
        }
        assert!(
            ends.windows(2).all(|w| w[0] >= w[1]),
            "slowest first: {ends:?}"
        );
        slowest_of_variants = slowest_of_variants.max(ends[0]);
    }
    let all = json(&out.join("traces.json"));
    let ends = contiguous(all.as_array().unwrap());
    assert_eq!(
        ends[0], slowest_of_variants,
        "the run's slowest of all variants"
    );
}

/// Each trace's stages in path order, from 0, each starting where the one
/// before ended; their ends.
fn contiguous(traces: &[serde_json::Value]) -> Vec<f64> {
    traces
        .iter()
        .map(|t| {
            let spans = t.as_array().unwrap();
            let names: Vec<&str> = spans.iter().map(|s| s["stage"].as_str().unwrap()).collect();
            assert_eq!(names, STAGES);
            assert_eq!(spans[0]["start_ms"].as_f64(), Some(0.0), "{t}");
            for w in spans.windows(2) {
                assert_eq!(w[0]["end_ms"], w[1]["start_ms"], "{t}");
                assert!(w[0]["end_ms"].as_f64() >= w[0]["start_ms"].as_f64(), "{t}");
            }
            spans[spans.len() - 1]["end_ms"].as_f64().unwrap()
        })
        .collect()
}

#[test]
fn a_bad_scenario_file_is_refused_with_its_field_and_line() {
    let bad = TINY.replace("count = 3", "count = \"three\"");
    let (_dir, _out, mut cmd) = capacity(&bad, "bad");
    let run = cmd.output().unwrap();
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    let line = TINY.lines().position(|l| l == "count = 3").unwrap() + 1;
    assert!(
        err.contains("bad.toml") && err.contains(&format!("line {line}")) && err.contains("count"),
        "{err}"
    );
}

#[test]
fn a_sampling_interval_out_of_range_is_refused_before_anything_starts() {
    let (_dir, out, mut cmd) = capacity(TINY, "tiny");
    let run = cmd.args(["--sample-every", "10ms"]).output().unwrap();
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("--sample-every must be at least 100ms"),
        "{err}"
    );
    assert!(!out.exists(), "nothing was written");
}

/// Pids of processes whose command line mentions `needle`.
fn pids_mentioning(needle: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(needle))
                .unwrap_or(false)
        })
        .collect()
}

/// The argument after `flag` on process `pid`'s command line.
fn arg_after(pid: i32, flag: &str) -> Option<String> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let mut args = cmdline.split(|b| *b == 0);
    args.find(|a| *a == flag.as_bytes())?;
    Some(String::from_utf8_lossy(args.next()?).into_owned())
}

/// How many job registrations the server `pid` (a `cluster serve` process)
/// has applied, read from its `/metrics` with the run's operator
/// certificate (in `tls`); 0 while it does not answer.
async fn job_registrations(pid: i32, tls: &std::path::Path) -> f64 {
    let Some(http) = arg_after(pid, "--http") else {
        return 0.0;
    };
    let Ok(security) = stampede_launch::security_in(Some(tls), Role::Operator) else {
        return 0.0;
    };
    let client = stampede_launch::http_client(&security, Duration::from_secs(5)).unwrap();
    let Ok(r) = client.get(format!("https://{http}/metrics")).send().await else {
        return 0.0;
    };
    let text = r.text().await.unwrap_or_default();
    metric_value(&text, "stampede_raft_entries_total{type=\"job_register\"}").unwrap_or(0.0)
}

/// `cmd` started with its output captured.
fn spawn_piped(cmd: &mut Command) -> std::process::Child {
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until the run in `out` has jobs flowing: the processes `pids`
/// finds are as many as `enough` asks, and one of them, a server, has
/// applied a job registration. Those processes.
async fn once_jobs_flow(
    what: &str,
    pids: impl Fn() -> Vec<i32>,
    enough: impl Fn(usize) -> bool,
    out: &std::path::Path,
) -> Vec<i32> {
    eventually_ok(what, Duration::from_secs(120), || async {
        let pids = pids();
        if !enough(pids.len()) {
            return Err(format!("{} processes of the run", pids.len()));
        }
        for pid in &pids {
            if job_registrations(*pid, &out.join("tls")).await > 0.0 {
                return Ok(pids);
            }
        }
        Err("no job registered yet".into())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_cluster_dies_writes_a_partial_report_that_says_so() {
    let longer = TINY.replace("duration = \"6s\"", "duration = \"20s\"");
    let (_dir, out, mut cmd) = capacity(&longer, "dies");
    let run = spawn_piped(&mut cmd);
    // Once jobs are flowing (the first variant's servers have applied some
    // registrations), kill every server of the run.
    let data = out.join("legacy").join("cluster");
    let needle = data.to_string_lossy().to_string();
    let servers = once_jobs_flow(
        "the run's three servers have applied a job registration",
        || pids_mentioning(&needle),
        |n| n == 3,
        &out,
    )
    .await;
    for pid in servers {
        // SAFETY: kill(2) on a pid read from /proc a moment ago.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let result = run.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(
        !result.status.success(),
        "a run that lost its cluster fails: {stderr}"
    );
    assert!(stderr.contains("did not complete"), "{stderr}");

    let summary = json(&out.join("summary.json"));
    assert_eq!(summary["complete"], false);
    let variants = summary["variants"].as_array().unwrap();
    let legacy = variants.iter().find(|v| v["name"] == "legacy").unwrap();
    let problems = legacy["problems"].as_array().unwrap();
    assert!(
        problems
            .iter()
            .any(|p| p.as_str().unwrap().contains("stopped answering")),
        "{problems:?}"
    );
    // The round's order was drawn at random: the variants that ran are
    // those before `legacy` in it, and `legacy`; none after it.
    let order: Vec<&str> = (summary["rounds"][0]["order"].as_array().unwrap().iter())
        .map(|n| n.as_str().unwrap())
        .collect();
    let at = order.iter().position(|n| *n == "legacy").unwrap();
    let mut ran: Vec<&str> = variants
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    let mut expected = order[..=at].to_vec();
    ran.sort();
    expected.sort();
    assert_eq!(
        ran, expected,
        "later variants are not run (order {order:?})"
    );
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("id=\"partial\"") && html.contains("stopped answering"));
}

/// SIGTERM (or Ctrl-C) to `loadgen capacity` stops the run and the servers
/// and fleet it started: none outlives it (they did, when loadgen had no
/// handler and died at once, its `Drop`s never run), and the run says it
/// was interrupted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_stopped_by_sigterm_stops_its_servers_and_fleet() {
    let longer = TINY.replace("duration = \"6s\"", "duration = \"60s\"");
    let (_dir, out, mut cmd) = capacity(&longer, "stopped");
    let run = spawn_piped(&mut cmd);
    let needle = out.to_string_lossy().to_string();
    let started = once_jobs_flow(
        "the run's three servers and its nodesim are up and a job registered",
        || {
            let mut pids = pids_mentioning(&needle);
            pids.retain(|p| *p != run.id() as i32);
            pids
        },
        // Three servers and nodesim (and Prometheus, where installed).
        |n| n >= 4,
        &out,
    )
    .await;
    // SAFETY: kill(2) on the loadgen we spawned and have not reaped.
    unsafe { libc::kill(run.id() as i32, libc::SIGTERM) };
    let result = run.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&result.stderr);
    let left: Vec<i32> = started
        .iter()
        .copied()
        .filter(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
        .collect();
    for pid in &left {
        // SAFETY: kill(2) on a pid of this run read from /proc: the test
        // leaves nothing behind even when it fails.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    assert!(
        left.is_empty(),
        "processes of the run still there after loadgen exited: {left:?}"
    );
    assert!(!result.status.success(), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
}

/// A stream whose highest rate is searched: each job is 20 allocations,
/// and placement must stay under a second at p99. Short probes (3 s of
/// stream, at most 10 s of drain) from 32 jobs/s: a release build on two
/// cores passes 512 jobs/s and fails 1,024, so the search takes a dozen.
const SEARCHED: &str = r#"
name = "searched"
description = "a stream whose rate is searched"
nodes = 40
duration = "3s"
drain = "10s"
arrival = { process = "constant", rate = 32.0 }

[[jobs]]
name = "batch"
type = "batch"
count = 20
cpu_mhz = 10
memory_mb = 8

[slo]
p99_placement_ms = 1000
"#;

/// The search is honest on a busy machine too: it brackets the highest rate
/// that met the SLO within 10% against what bounded it from above, a rate
/// that failed or the rate at which the harness itself saturated (probes
/// judged invalid, which count as unknown and are named), or it says the
/// budget ran out. On a quiet machine the bound is a failing rate; with a
/// neighbour on the other core it may be the harness's limit.
#[test]
fn find_max_rate_brackets_the_rate_that_meets_the_slo_within_ten_percent() {
    let (_dir, out, mut cmd) = capacity(SEARCHED, "searched");
    let run = cmd
        .args(["--find-max-rate", "--budget", "12m", "--no-prometheus"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let summary = json(&out.join("summary.json"));
    let errors = schema_errors(&summary);
    assert!(errors.is_empty(), "{errors:?}");
    let search = &summary["search"];
    let confidence = search["confidence"].as_str().unwrap();
    let lo = search["max_passing"]
        .as_f64()
        .unwrap_or_else(|| panic!("{search}\n{stderr}"));
    let probes = search["probes"].as_array().unwrap();
    let at = |v: f64| {
        probes
            .iter()
            .filter(move |p| p["value"].as_f64() == Some(v))
    };
    // Every probe at the passing rate was valid and met the SLO.
    assert!(
        at(lo).all(|p| p["passed"] == true && p["valid"] == true),
        "{search}"
    );
    let failing = search["min_failing"].as_f64();
    let limit = search["harness_limit"].as_f64();
    let bound = match (failing, limit) {
        (Some(f), Some(h)) => f.min(h),
        (f, h) => f
            .or(h)
            .unwrap_or_else(|| panic!("nothing bounds {lo}: {search}")),
    };
    assert!(lo < bound, "{search}");
    if Some(bound) == failing {
        assert!(
            at(bound).any(|p| p["passed"] == false && p["valid"] == true),
            "{search}"
        );
    } else {
        // The harness's limit: its probes were invalid, and the answer says so.
        assert!(at(bound).all(|p| p["valid"] == false), "{search}");
        assert!(confidence.contains("invalid"), "{confidence}");
    }
    if !confidence.contains("the time budget ran out") {
        assert!(bound / lo <= 1.10 + 1e-9, "{lo}..{bound}: {search}");
    }
    assert_eq!(probes.len(), summary["variants"].as_array().unwrap().len());
    assert!(search["spent_seconds"].as_f64().unwrap() <= 12.0 * 60.0);
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(report.contains("id=\"search\""));
    assert!(report.contains("p99 latency against the rate, with the SLOs"));
    let drawn = browser::drawn(&out.join("report.html"), "");
    assert_eq!(drawn.charts, drawn.places, "{drawn:?}");
    assert_eq!(drawn.drawn, drawn.charts, "{drawn:?}");
    assert!(
        stderr.contains("search probe 1:"),
        "progress is told: {stderr}"
    );
}
