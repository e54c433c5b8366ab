//! Node heartbeats on a real 3-process cluster: a node that stops
//! heartbeating is marked down by the leader and its allocations are
//! replaced on other nodes.

mod common;

use std::time::Duration;

use common::{heartbeat, live, register_nodes, wait_live};
use stampede_launch::testing::{
    allocs, eventually, node_secrets, register_job, service_job, Harness, CATCH_UP,
};
use stampede_proto::{
    AllocClientStatus, Allocation, NodeGetRequest, NodeStatus, NodeUpdateAllocRequest,
};

#[tokio::test(flavor = "multi_thread")]
async fn a_node_that_stops_heartbeating_goes_down_and_its_allocations_are_replaced() {
    let (c, leader) =
        Harness::with_leader(3, &["--heartbeat-min-ttl", "1s", "--heartbeat-grace", "0s"]).await;
    let client = c.client();
    // With one node in the cluster, both allocations land on it.
    let victim = register_nodes(&client, "victim", 1, 1000, 4096).await;
    let victim_hb = heartbeat(&client, victim, Duration::from_millis(200));
    register_job(&client, service_job("web", 2, 500, 64)).await;
    let placed = wait_live(&client, "web", 2).await;
    assert!(placed.iter().all(|a| a.node_id == "victim-0"));

    let others = register_nodes(&client, "n", 3, 1000, 4096).await;
    let _hb = heartbeat(&client, others, Duration::from_millis(200));
    victim_hb.send(true).unwrap();
    eventually("victim-0 is marked down", CATCH_UP, || async {
        let n = client
            .nodes()
            .get(NodeGetRequest {
                node_id: "victim-0".into(),
            })
            .await;
        n.is_ok_and(|n| n.into_inner().node.unwrap().status == NodeStatus::Down as i32)
    })
    .await;
    eventually(
        "both allocations are lost and replaced elsewhere",
        CATCH_UP,
        || async {
            let all = allocs(&client, "web").await.unwrap();
            let lost = all
                .iter()
                .filter(|a| a.client_status == AllocClientStatus::Lost as i32)
                .count();
            let live = live(&all);
            lost == 2 && live.len() == 2 && live.iter().all(|a| a.node_id != "victim-0")
        },
    )
    .await;
    // The victim wakes and reports both allocations running, as it last
    // saw them: a lost allocation stays lost, beside its replacement, and
    // the job's summary does not count it.
    let lost: Vec<Allocation> = allocs(&client, "web")
        .await
        .unwrap()
        .into_iter()
        .filter(|a| a.node_id == "victim-0")
        .collect();
    let on_leader = c.client_of(&[leader]);
    on_leader
        .nodes()
        .update_alloc(NodeUpdateAllocRequest {
            allocs: lost
                .iter()
                .map(|a| Allocation {
                    id: a.id.clone(),
                    client_status: AllocClientStatus::Running as i32,
                    ..Default::default()
                })
                .collect(),
            secrets: node_secrets(["victim-0"]),
        })
        .await
        .expect("the stale report is taken as a call");
    let after = allocs(&on_leader, "web").await.unwrap();
    for a in lost {
        let now = after.iter().find(|x| x.id == a.id).unwrap();
        assert_eq!(
            now.client_status,
            AllocClientStatus::Lost as i32,
            "a lost allocation came back to life: {now:?}"
        );
    }
    assert_eq!(live(&after).len(), 2, "{after:?}");
    // The leader counted the missed heartbeat and wrote the node's new status.
    for series in [
        "stampede_heartbeats_missed_total",
        "stampede_raft_entries_total{type=\"node_status\"}",
    ] {
        let n = c.leader_metric(series).await.unwrap();
        assert!(n >= 1.0, "{series} is {n}");
    }
}
