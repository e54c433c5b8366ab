//! Where loadgen finds the servers: `--address`, or STAMPEDE_ADDRESS as
//! `cluster`'s commands and nodesim read it, and `--servers`, the flag's
//! old name, still taken; and what an exported address does to a capacity
//! run (it drives that cluster, and says so when it cannot).

use crate::common;

use std::process::Command;

use common::{capacity, LOADGEN};
use stampede_launch::testing::Harness;
use stampede_proto::address::ADDRESS_ENV;
use stampede_proto::security::Role;

/// `loadgen writes` for a second, as a node client (each write registers
/// a node), with no address of any kind.
fn writes(h: &Harness) -> Command {
    let mut cmd = Command::new(LOADGEN);
    cmd.env_remove(ADDRESS_ENV)
        .envs(h.client_env(Role::Client).unwrap())
        .args(["writes", "--json", "--duration", "1s", "--warmup", "0s"]);
    cmd
}

fn writes_made(out: &std::process::Output) -> u64 {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["errors"], 0, "{report}");
    report["writes"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_find_the_servers_in_the_variable_or_under_either_flag_name() {
    let (h, _) = Harness::with_leader(1, &[]).await;
    let addrs = h.rpc_addrs().join(",");
    let from_env = writes(&h).env(ADDRESS_ENV, &addrs).output().unwrap();
    assert!(writes_made(&from_env) > 0);
    for flag in ["--address", "--servers"] {
        // The flag wins over a variable that points nowhere.
        let out = writes(&h)
            .env(ADDRESS_ENV, "127.0.0.1:1")
            .args([flag, &addrs])
            .output()
            .unwrap();
        assert!(writes_made(&out) > 0, "{flag}");
    }
}

#[test]
fn a_bad_address_is_refused_naming_the_flag_and_the_variable() {
    for (env, flag) in [(Some("no-port"), None), (None, Some("no-port"))] {
        let mut cmd = Command::new(LOADGEN);
        cmd.env_remove(ADDRESS_ENV).args(["place", "--nodes", "1"]);
        if let Some(v) = env {
            cmd.env(ADDRESS_ENV, v);
        }
        if let Some(v) = flag {
            cmd.args(["--servers", v]);
        }
        let out = cmd.output().unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("no-port") && err.contains("--address") && err.contains(ADDRESS_ENV),
            "{err}"
        );
    }
}

/// A capacity run in a shell that exported a cluster's address drives
/// that cluster, so a plain run (which would start its own) is refused
/// before anything starts, naming the variable to unset; so is a run that
/// needs servers of its own.
#[test]
fn an_exported_address_does_not_silently_change_a_capacity_run() {
    for extra in [&[][..], &["--audit"][..]] {
        let (_dir, out, mut cmd) = capacity("", "exported");
        let run = cmd
            .env(ADDRESS_ENV, "127.0.0.1:1")
            .args(extra)
            .output()
            .unwrap();
        assert!(!run.status.success(), "{extra:?}");
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(
            err.contains(&format!("{ADDRESS_ENV} names a cluster to drive"))
                && err.contains("unset it"),
            "{extra:?}: {err}"
        );
        assert!(!out.exists(), "{extra:?}: nothing was started or written");
    }
}
