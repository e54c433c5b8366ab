//! Node heartbeats on a real 3-process cluster: a node that stops
//! heartbeating is marked down by the leader and its allocations are
//! replaced on other nodes.

use crate::common;

use std::time::Duration;

use common::{heartbeat, live, register_nodes, wait_live};
use stampede_launch::testing::{
    allocs, eventually, eventually_ok, node_secrets, register_job, service_job, Harness, CATCH_UP,
};
use stampede_proto::client::ClusterClient;
use stampede_proto::{
    AllocClientStatus, Allocation, NodeGetRequest, NodeStatus, NodeUpdateAllocRequest,
};
use tokio::sync::watch;

/// Node `victim-0` heartbeating alone while job `web` (two allocations)
/// lands on it, then three more nodes heartbeating: the victim's heartbeat
/// switch, the others', and the two allocations.
async fn victim_with_web(
    client: &ClusterClient,
) -> (watch::Sender<bool>, watch::Sender<bool>, Vec<Allocation>) {
    let victim = register_nodes(client, "victim", 1, 1000, 4096).await;
    let victim_hb = heartbeat(client, victim, Duration::from_millis(200));
    register_job(client, service_job("web", 2, 500, 64)).await;
    let placed = wait_live(client, "web", 2).await;
    assert!(placed.iter().all(|a| a.node_id == "victim-0"));
    let others = register_nodes(client, "n", 3, 1000, 4096).await;
    let others_hb = heartbeat(client, others, Duration::from_millis(200));
    (victim_hb, others_hb, placed)
}

/// victim-0's report that `allocs` run.
fn victim_reports_running(allocs: &[Allocation]) -> NodeUpdateAllocRequest {
    NodeUpdateAllocRequest {
        allocs: allocs
            .iter()
            .map(|a| Allocation {
                id: a.id.clone(),
                client_status: AllocClientStatus::Running as i32,
                ..Default::default()
            })
            .collect(),
        secrets: node_secrets(["victim-0"]),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_that_stops_heartbeating_goes_down_and_its_allocations_are_replaced() {
    let (c, leader) =
        Harness::with_leader(3, &["--heartbeat-min-ttl", "1s", "--heartbeat-grace", "0s"]).await;
    let client = c.client();
    let (victim_hb, _hb, _placed) = victim_with_web(&client).await;
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
        .update_alloc(victim_reports_running(&lost))
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

/// A report the leader holds in its batch while the node's lost mark is
/// applied is refused where the batch's entry is applied: "a terminal
/// allocation stays terminal" is decided on the state the entry meets, not
/// on the state the report met when it came in (nor on a follower's, nor
/// before a change of leader). Every server drops it and counts it.
#[tokio::test(flavor = "multi_thread")]
async fn a_report_batched_before_the_lost_mark_is_refused_where_it_is_applied() {
    // The batch window is far longer than the node's TTL: the report
    // waits in it past the moment the leader marks the node down.
    let (c, leader) = Harness::with_leader(
        3,
        &[
            "--heartbeat-min-ttl",
            "1s",
            "--heartbeat-grace",
            "0s",
            "--alloc-update-window",
            "10s",
        ],
    )
    .await;
    let client = c.client();
    let (victim_hb, _hb, placed) = victim_with_web(&client).await;

    // The victim's last word as it falls silent: both allocations running.
    victim_hb.send(true).unwrap();
    let on_leader = c.client_of(&[leader]);
    let report = victim_reports_running(&placed);
    let reporter = on_leader.clone();
    let report = tokio::spawn(async move { reporter.nodes().update_alloc(report).await });

    let lost_at = eventually_ok("both allocations are lost", CATCH_UP, || async {
        let all = allocs(&on_leader, "web").await.map_err(|e| e.to_string())?;
        let lost: Vec<u64> = all
            .iter()
            .filter(|a| a.node_id == "victim-0")
            .filter(|a| a.client_status == AllocClientStatus::Lost as i32)
            .map(|a| a.modify_index)
            .collect();
        match lost.len() {
            2 => Ok(lost.into_iter().max().unwrap()),
            n => Err(format!("{n} of 2 lost")),
        }
    })
    .await;
    let applied_at = report
        .await
        .unwrap()
        .expect("the report is taken as a call")
        .into_inner()
        .index;
    // The interleaving this test is for: the report's entry after the mark.
    assert!(
        applied_at > lost_at,
        "the report was applied at {applied_at}, before the lost mark at {lost_at}: the batch did not hold it"
    );
    for id in c.ids() {
        eventually(
            &format!("server {id} applies the report's entry"),
            CATCH_UP,
            || async {
                c.status(id)
                    .await
                    .is_ok_and(|s| s.applied_index >= applied_at)
            },
        )
        .await;
        let now = allocs(&c.client_of(&[id]), "web").await.unwrap();
        for a in &placed {
            let a = now.iter().find(|x| x.id == a.id).unwrap();
            assert_eq!(
                (a.client_status, a.running_index),
                (AllocClientStatus::Lost as i32, 0),
                "server {id}: a lost allocation came back to life: {a:?}"
            );
        }
        let refused = "stampede_client_reports_refused_total{reason=\"terminal\"}";
        assert_eq!(c.metric(id, refused).await.ok(), Some(2.0), "server {id}");
    }
}
