//! A real cluster: `cluster serve` processes on 127.0.0.1, RocksDB on disk.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stampede_launch::testing::{
    cluster_bin, eventually_ok, node, register_node, secret_of, Harness, CATCH_UP,
};
use stampede_launch::NodeId;
use stampede_proto::{Node, NodeGetRequest, NodeListRequest, NodeRegisterRequest};
use tokio::sync::watch;
use tonic::Code;

/// The node ids server `id` has, once it has applied at least `index`.
async fn nodes_on(c: &Harness, id: NodeId, index: u64) -> BTreeSet<String> {
    c.wait_for_status(
        id,
        &format!("applied index reaches {index}"),
        CATCH_UP,
        |s| s.applied_index >= index,
    )
    .await
    .unwrap();
    let reply = c
        .client_of(&[id])
        .nodes()
        .list(NodeListRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(reply.index >= index);
    reply.nodes.into_iter().map(|n| n.id).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn three_servers_elect_a_leader_and_take_writes_through_any_server() {
    let (c, leader) = Harness::with_leader(3, &[]).await;

    let mut want = BTreeSet::new();
    let mut max_index = 0;
    for server in c.ids() {
        let client = c.client_of(&[server]);
        for j in 0..10 {
            let id = format!("via-{server}-{j}");
            max_index = max_index.max(register_node(&client, node(&id)).await.unwrap());
            want.insert(id);
        }
    }
    for id in c.ids() {
        assert_eq!(nodes_on(&c, id, max_index).await, want, "server {id}");
        let applied = c
            .metric(id, "stampede_raft_entries_total{type=\"node_register\"}")
            .await
            .unwrap();
        assert_eq!(applied, 30.0, "server {id} applied each registration once");
        let forwarded = c
            .metric(id, "stampede_raft_writes_forwarded_total")
            .await
            .unwrap();
        // Each forwarded write was done once: by the follower's own apply
        // of its entry (its ticket) or by the leader's answer.
        let mut done = 0.0;
        for first in ["apply", "answer"] {
            let name = format!("stampede_raft_writes_forwarded_done_total{{first=\"{first}\"}}");
            done += c.metric(id, &name).await.unwrap();
        }
        if id == leader {
            assert_eq!((forwarded, done), (0.0, 0.0));
        } else {
            assert_eq!(forwarded, 10.0, "follower {id} forwarded its writes");
            assert_eq!(done, 10.0, "follower {id}: each forwarded write done once");
        }
    }
    // A job registered through a follower can be read there at once, with
    // the evaluation its answer names.
    let follower = c.ids().into_iter().find(|&id| id != leader).unwrap();
    let client = c.client_of(&[follower]);
    for j in 0..5 {
        let job = stampede_launch::testing::service_job(&format!("ryw-{j}"), 1, 100, 64);
        let reply = client.register_job(job).await.unwrap();
        assert!(!reply.eval_id.is_empty());
        let got = client
            .jobs()
            .get(stampede_proto::JobGetRequest {
                job_id: format!("ryw-{j}"),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(got.job.map(|j| j.id), Some(format!("ryw-{j}")));
        let eval = client
            .evals()
            .get(stampede_proto::EvalGetRequest {
                eval_id: reply.eval_id.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(eval.eval.map(|e| e.id), Some(reply.eval_id));
    }
    let leader_status = c.status(leader).await.unwrap();
    assert_eq!(leader_status.members.len(), 3);
    assert!(leader_status.term >= 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_of_the_leader_loses_no_acknowledged_write() {
    let (mut c, leader) = Harness::with_leader(3, &[]).await;
    let client = c.client().with_retry_for(Duration::from_secs(30));

    let acked: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut writers = Vec::new();
    for w in 0..4 {
        let (client, acked, stop) = (client.clone(), acked.clone(), stop_rx.clone());
        writers.push(tokio::spawn(async move {
            for k in 0.. {
                if *stop.borrow() {
                    break;
                }
                let id = format!("w{w}-{k}");
                let index = register_node(&client, node(&id))
                    .await
                    .expect("write acknowledged");
                acked.lock().unwrap().push((id, index));
            }
        }));
    }
    let acked_count = || acked.lock().unwrap().len();
    let wait_acked = |n: usize| async move {
        let what = format!("{n} writes are acknowledged");
        eventually_ok(&what, CATCH_UP, || async {
            match acked_count() {
                done if done >= n => Ok(()),
                stalled => Err(format!("writes stalled at {stalled}")),
            }
        })
        .await
    };
    wait_acked(100).await;
    c.kill(leader).unwrap();
    let at_kill = acked_count();
    wait_acked(at_kill + 100).await;
    stop_tx.send(true).unwrap();
    for w in writers {
        w.await.unwrap();
    }

    let new_leader = c.leader().await;
    assert_ne!(new_leader, leader);
    let acked = acked.lock().unwrap().clone();
    let max_index = acked.iter().map(|(_, i)| *i).max().unwrap();
    let want: BTreeSet<String> = acked.into_iter().map(|(id, _)| id).collect();
    for id in c.ids_except(leader) {
        let have = nodes_on(&c, id, max_index).await;
        let missing: Vec<_> = want.difference(&have).collect();
        assert!(
            missing.is_empty(),
            "server {id} lost acknowledged writes: {missing:?}"
        );
    }

    c.spawn(leader).unwrap();
    let have = nodes_on(&c, leader, max_index).await;
    let missing: Vec<_> = want.difference(&have).collect();
    assert!(
        missing.is_empty(),
        "restarted server {leader} is missing {missing:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_left_behind_a_snapshot_catches_up_by_installing_it() {
    let (mut c, leader) =
        Harness::with_leader(3, &["--snapshot-entries", "50", "--keep-entries", "10"]).await;
    let behind = c.ids_except(leader)[0];
    let behind_at = c.status(behind).await.unwrap().last_log_index;
    c.kill(behind).unwrap();

    let client = c.client_of(&c.ids_except(behind));
    let mut max_index = 0;
    let mut want = BTreeSet::new();
    for k in 0..300 {
        let id = format!("snap-{k}");
        max_index = max_index.max(register_node(&client, node(&id)).await.unwrap());
        want.insert(id);
    }
    // The log the stopped server would need is gone from the leader.
    c.wait_for_status(
        leader,
        "its log is purged past the stopped server",
        CATCH_UP,
        |s| s.purged_index.is_some_and(|p| p > behind_at),
    )
    .await
    .unwrap();
    assert!(
        c.metric(leader, "stampede_raft_snapshots_built_total")
            .await
            .unwrap()
            >= 1.0
    );

    c.spawn(behind).unwrap();
    assert_eq!(nodes_on(&c, behind, max_index).await, want);
    let installed = c
        .metric(behind, "stampede_raft_snapshots_installed_total")
        .await
        .unwrap();
    assert!(
        installed >= 1.0,
        "server {behind} caught up without a snapshot"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_get_invalid_argument_naming_the_field() {
    let (c, _) = Harness::with_leader(1, &[]).await;
    let client = c.client();
    let register_with = |n: Node, secret_id: &str| {
        let client = client.clone();
        let req = NodeRegisterRequest {
            node: Some(n),
            secret_id: secret_id.into(),
        };
        async move { client.nodes().register(req).await.unwrap_err() }
    };
    let register = |n: Node| {
        let secret = secret_of(&n.id);
        register_with(n, &secret)
    };

    let err = register(node("")).await;
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().starts_with("node.id: must not be empty"),
        "{}",
        err.message()
    );

    let err = register(Node {
        resources: None,
        ..node("n1")
    })
    .await;
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().starts_with("node.resources"),
        "{}",
        err.message()
    );

    let err = client
        .nodes()
        .register(NodeRegisterRequest {
            node: None,
            secret_id: secret_of("n1"),
        })
        .await
        .unwrap_err();
    assert_eq!(
        (err.code(), err.message()),
        (Code::InvalidArgument, "node: is required")
    );

    // A node's secret: required, 16 to 128 bytes of printable ASCII.
    for (secret, reason) in [
        ("", "secret_id: is required"),
        ("too-short", "secret_id: is 9 bytes long"),
        (&"s".repeat(129), "secret_id: is 129 bytes long"),
        ("a secret\twith a tab", "secret_id: holds a byte"),
    ] {
        let err = register_with(node("n1"), secret).await;
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(err.message().starts_with(reason), "{}", err.message());
    }

    let err = client
        .nodes()
        .get(NodeGetRequest {
            node_id: "nobody".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(err.message().contains("node_id"), "{}", err.message());

    // Nothing invalid reached the log.
    let applied = c
        .metric(1, "stampede_raft_entries_total{type=\"node_register\"}")
        .await
        .unwrap();
    assert_eq!(applied, 0.0);
}

/// Runs `cluster serve` on `data_dir` and returns its stderr, expecting it to fail fast.
fn serve_expecting_failure(data_dir: &Path, id: u64, peers: &str, rpc: &str) -> String {
    let mut child = Command::new(cluster_bin())
        .args([
            "serve",
            "--id",
            &id.to_string(),
            "--rpc",
            rpc,
            "--http",
            "127.0.0.1:0",
            "--insecure",
        ])
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--peers", peers])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("server started on a data dir it should refuse");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success());
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

#[tokio::test(flavor = "multi_thread")]
async fn a_corrupt_or_foreign_data_dir_is_refused_with_a_clear_error() {
    let (mut c, _) = Harness::with_leader(1, &["--snapshot-entries", "5"]).await;
    let client = c.client();
    for k in 0..10 {
        register_node(&client, node(&format!("n{k}")))
            .await
            .unwrap();
    }
    c.wait_for_status(1, "a snapshot is built", CATCH_UP, |s| {
        s.snapshot_index.is_some()
    })
    .await
    .unwrap();
    c.stop(1).unwrap();
    let server = c.server(1).unwrap();
    let (dir, rpc) = (server.data_dir.clone(), server.rpc.to_string());
    let own_peers = format!("1={rpc}");

    // Another server's data dir.
    let err = serve_expecting_failure(&dir, 2, &format!("1=127.0.0.1:1,2={rpc}"), &rpc);
    assert!(err.contains("belongs to server 1, not server 2"), "{err}");

    // The same server, but a different cluster.
    let err = serve_expecting_failure(&dir, 1, &format!("{own_peers},2=127.0.0.1:1"), &rpc);
    assert!(err.contains("belongs to a cluster of servers [1]"), "{err}");

    // A damaged snapshot.
    let snap = dir.join("snapshots/snapshot.bin");
    let mut bytes = std::fs::read(&snap).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    std::fs::write(&snap, &bytes).unwrap();
    let err = serve_expecting_failure(&dir, 1, &own_peers, &rpc);
    assert!(
        err.contains("corrupt snapshot") && err.contains("checksum"),
        "{err}"
    );
    std::fs::remove_file(&snap).unwrap();

    // A damaged RocksDB.
    std::fs::write(dir.join("raft/CURRENT"), b"not a manifest name").unwrap();
    let err = serve_expecting_failure(&dir, 1, &own_peers, &rpc);
    assert!(err.contains("cannot open the raft store"), "{err}");
}

#[test]
fn bad_flags_are_named() {
    let out = Command::new(cluster_bin())
        .args([
            "serve",
            "--id",
            "4",
            "--data-dir",
            "/tmp/x",
            "--peers",
            "1=127.0.0.1:4647",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--id 4 is not among --peers (1)"), "{err}");

    let out = Command::new(cluster_bin())
        .args([
            "serve",
            "--id",
            "1",
            "--data-dir",
            "/tmp/x",
            "--peers",
            "1=nowhere",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"nowhere\" is not HOST:PORT (an IP address or a DNS name, and a port) in \"1=nowhere\""),
        "{err}"
    );
}

#[test]
fn dev_starts_a_cluster_shows_its_status_and_stops() {
    let out = Command::new(cluster_bin())
        .args(["dev", "--servers", "3", "--duration", "1s"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("every server has applied index"),
        "{stdout}"
    );
    assert_eq!(stdout.matches(" Leader ").count(), 1, "{stdout}");
    assert_eq!(stdout.matches(" Follower ").count(), 2, "{stdout}");
    assert!(stdout.contains("stopped"), "{stdout}");
}
