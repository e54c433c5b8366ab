//! The operator commands against a real cluster, as a user runs them.

use std::process::Command;

use stampede_launch::testing::{
    cluster_bin, eventually, node_with, register_node, Harness, CATCH_UP,
};
use stampede_proto::security::Role;

/// Runs `cluster ARGS` as an operator of `c` (its certificate and token in
/// the environment, as `cluster dev` tells users to set them).
fn cluster_cmd(c: &Harness, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(cluster_bin())
        .envs(c.client_env(Role::Operator).unwrap())
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn job_run_status_stop_and_node_status() {
    let (c, _) = Harness::with_leader(3, &["--heartbeat-min-ttl", "600s"]).await;
    let addrs = c.rpc_addrs().join(",");
    let client = c.client();
    for i in 0..2 {
        register_node(&client, node_with(&format!("n{i}"), 4000, 8192))
            .await
            .unwrap();
    }
    // Read at run time: the binary may come from another checkout's build.
    let package = std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo test");
    let web = format!("{package}/../examples/web.json");
    let web = web.as_str();

    let (ok, out, err) = cluster_cmd(&c, &["job", "run", "--address", &addrs, web]);
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("raft index") && out.contains("Evaluation"),
        "{out}"
    );

    eventually(
        "all 50 allocations of the contract job are placed",
        CATCH_UP,
        || async {
            let (ok, out, _) =
                cluster_cmd(&c, &["job", "status", "--address", &addrs, "--json", "web"]);
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&out) else {
                return false;
            };
            ok && v["allocations"].as_array().is_some_and(|a| {
                a.len() == 50
                    && a.iter()
                        .all(|x| x["client_status"] == "pending" && x["desired_status"] == "run")
            })
        },
    )
    .await;

    let (ok, out, err) = cluster_cmd(&c, &["node", "status", "--address", &addrs, "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["nodes"].as_array().unwrap().len(), 2);

    let (ok, out, err) = cluster_cmd(&c, &["job", "stop", "--address", &addrs, "web"]);
    assert!(ok, "{out}{err}");
    eventually("every allocation is stopped", CATCH_UP, || async {
        let (_, out, _) = cluster_cmd(&c, &["job", "status", "--address", &addrs, "--json", "web"]);
        serde_json::from_str::<serde_json::Value>(&out).is_ok_and(|v| {
            v["allocations"]
                .as_array()
                .is_some_and(|a| a.iter().all(|x| x["desired_status"] == "stop"))
        })
    })
    .await;

    // A broken file names the line; an unknown job is a clear error.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\n  \"id\": \"x\",\n  \"typo\": 1\n}\n").unwrap();
    let (ok, _, err) = cluster_cmd(
        &c,
        &["job", "run", "--address", &addrs, bad.to_str().unwrap()],
    );
    assert!(!ok);
    assert!(
        err.contains("unknown field `typo`") && err.contains("line 3"),
        "{err}"
    );
    let (ok, _, err) = cluster_cmd(&c, &["job", "status", "--address", &addrs, "nope"]);
    assert!(!ok);
    assert!(err.contains("no job \"nope\""), "{err}");
    assert!(!err.contains("panicked"));
}

/// An error is its chain of messages, never a stack backtrace, even with
/// RUST_BACKTRACE set (as it often is in a developer's shell).
#[test]
fn errors_print_the_message_chain_without_a_backtrace() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\n  \"id\": \"x\",\n  \"typo\": 1\n}\n").unwrap();
    for backtrace in ["1", "full"] {
        let out = Command::new(cluster_bin())
            .args(["job", "run", "--address", "127.0.0.1:1"])
            .arg(&bad)
            .env("RUST_BACKTRACE", backtrace)
            .env("RUST_LIB_BACKTRACE", backtrace)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(err.starts_with("error: "), "{err}");
        assert!(err.contains("unknown field `typo`"), "{err}");
        assert!(
            !err.contains("backtrace") && !err.contains("Backtrace"),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "one line, the chain: {err}");
    }
}

/// An address that is not HOST:PORT, typed or exported, is refused before
/// any call, naming both places it may have come from.
#[test]
fn a_bad_address_is_refused_naming_the_flag_and_the_variable() {
    let env = stampede_proto::address::ADDRESS_ENV;
    let from_env = Command::new(cluster_bin())
        .args(["node", "status"])
        .env(env, "127.0.0.1:1,no-port")
        .output()
        .unwrap();
    let typed = Command::new(cluster_bin())
        .args(["node", "status", "--address", "no-port"])
        .env_remove(env)
        .output()
        .unwrap();
    for out in [from_env, typed] {
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("no-port") && err.contains("--address") && err.contains(env),
            "{err}"
        );
    }
}

/// Servers that know each other only by DNS name (as a StatefulSet's pods
/// do) form a cluster, and `cluster health` reports it: not ready before a
/// leader, then ready on every server.
#[tokio::test(flavor = "multi_thread")]
async fn peers_named_by_dns_form_a_cluster_that_cluster_health_reports() {
    let ports: Vec<u16> = (0..6)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect::<Vec<_>>()
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let peers = (0..3)
        .map(|i| format!("{}=localhost:{}", i + 1, ports[i]))
        .collect::<Vec<_>>()
        .join(",");
    let health = |http: u16, leader: bool| {
        let mut cmd = Command::new(cluster_bin());
        cmd.args(["health", "--http", &format!("127.0.0.1:{http}")]);
        if leader {
            cmd.arg("--leader");
        }
        let out = cmd.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    // Nothing listens yet: unhealthy, and it says where it looked.
    let (ok, out) = health(ports[3], false);
    assert!(!ok && out.contains("/v1/status"), "{out}");
    let mut servers: Vec<_> = (0..3)
        .map(|i| {
            Command::new(cluster_bin())
                .args(["serve", "--insecure", "--id", &(i + 1).to_string()])
                .args(["--rpc", &format!("127.0.0.1:{}", ports[i])])
                .args(["--http", &format!("127.0.0.1:{}", ports[i + 3])])
                .args(["--peers", &peers])
                .arg("--data-dir")
                .arg(dir.path().join(i.to_string()))
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    for i in 0..3 {
        loop {
            let (ok, out) = health(ports[i + 3], true);
            if ok {
                assert!(out.contains("leader"), "{out}");
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "server {} has no leader: {out}",
                i + 1
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
    for s in &mut servers {
        let _ = s.kill();
        let _ = s.wait();
    }
}
