//! `scripts/multihost.sh` end to end: three servers, two nodesim shards and
//! loadgen in network namespaces of their own, with link latency, and a
//! short capacity run in remote mode (`--inventory`). It needs root (ip
//! netns); run as anyone else it says so and passes without running.

use std::path::Path;
use std::process::Command;

use stampede_launch::sibling_bin;

const SHORT: &str = r#"
name = "multihost-short"
description = "a short mixed stream across namespaces"
nodes = 60
duration = "8s"
drain = "30s"
arrival = { process = "constant", rate = 2.0 }
update_share = 0.2

[[jobs]]
name = "web"
type = "service"
weight = 2
count = 3
cpu_mhz = 100
max_parallel = 1
min_healthy_time_ms = 200

[[jobs]]
name = "etl"
type = "batch"
weight = 1
count = 2
cpu_mhz = 100

[slo]
p99_placement_ms = 10000
"#;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn a_run_across_namespaces_with_link_delay_passes_and_writes_its_summary() {
    if !is_root() {
        eprintln!("skipped: scripts/multihost.sh needs root to create network namespaces");
        return;
    }
    if Command::new("ip").arg("-V").output().is_err() {
        eprintln!("skipped: no `ip` (iproute2) on this machine");
        return;
    }
    let cluster = sibling_bin("cluster").expect("the cluster binary");
    let bin = cluster.parent().unwrap();
    for b in ["nodesim", "loadgen"] {
        assert!(
            bin.join(b).is_file(),
            "{b} is not built beside {}",
            cluster.display()
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("short.toml");
    std::fs::write(&scenario, SHORT).unwrap();
    let out = dir.path().join("run");
    // Read at run time: the binary may come from another checkout's build.
    let package = std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo test");
    let root = Path::new(&package).parent().unwrap();
    let status = Command::new("bash")
        .arg(root.join("scripts/multihost.sh"))
        .arg("--scenario")
        .arg(&scenario)
        .arg("--out")
        .arg(&out)
        // A subnet of its own, apart from the script's default, so that a
        // run by hand at the same time does not clash.
        .args(["--subnet", "10.231.78"])
        .env("STAMPEDE_BIN", bin)
        .status()
        .expect("bash runs scripts/multihost.sh");
    let logs = out.join("logs");
    let tail = |name: &str| {
        let text = std::fs::read_to_string(logs.join(name)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    };
    assert!(
        status.success(),
        "multihost.sh failed ({status}); loadgen:\n{}\nserver 1:\n{}\nnodesim 0:\n{}",
        tail("loadgen.log"),
        tail("server-1.log"),
        tail("nodesim-0.log")
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["complete"], true, "{summary:#}");
    assert!(out.join("report.html").is_file());
    let variant = &summary["variants"][0];
    assert!(
        variant["stream"]["submitted"].as_u64().unwrap_or(0) > 0,
        "{variant:#}"
    );
    // The namespaces are gone.
    let left = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let left = String::from_utf8_lossy(&left.stdout);
    assert!(
        !left
            .lines()
            .any(|l| l.contains("-br") && l.starts_with("st")),
        "namespaces left behind: {left}"
    );
}
