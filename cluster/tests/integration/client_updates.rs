//! Client updates on a real 3-process cluster: allocation status reports
//! arriving at every server at once are batched into one raft entry, and a
//! failed allocation is replaced; a follower sends its clients' updates on
//! to the leader together.

use crate::common;

use common::{live, register_nodes, wait_live};
use stampede_launch::testing::{
    allocs, eventually, eventually_ok, node_secrets, register_job, service_job, Harness, CATCH_UP,
};
use stampede_proto::{AllocClientStatus, Allocation, NodeUpdateAllocRequest};

#[tokio::test(flavor = "multi_thread")]
async fn client_updates_are_batched_and_a_failed_allocation_is_replaced() {
    // A long window so that concurrent calls from all servers meet in one batch.
    let (c, leader) = Harness::with_leader(
        3,
        &[
            "--heartbeat-min-ttl",
            "600s",
            "--alloc-update-window",
            "500ms",
        ],
    )
    .await;
    let client = c.client();
    register_nodes(&client, "n", 4, 1000, 4096).await;
    register_job(&client, service_job("web", 8, 100, 64)).await;
    let placed = wait_live(&client, "web", 8).await;

    // Every allocation reports running, one call each, through every server
    // at once: allocation `i` through server `i % 3`.
    let ids = c.ids();
    let calls = placed.iter().enumerate().map(|(i, a)| {
        let c = c.client_of(&[ids[i % ids.len()]]);
        let update = Allocation {
            id: a.id.clone(),
            client_status: AllocClientStatus::Running as i32,
            ..Default::default()
        };
        let secrets = node_secrets([a.node_id.as_str()]);
        async move {
            c.nodes()
                .update_alloc(NodeUpdateAllocRequest {
                    allocs: vec![update],
                    secrets,
                })
                .await
                .unwrap()
                .into_inner()
                .index
        }
    });
    let indexes = futures::future::join_all(calls).await;
    assert!(
        indexes.iter().all(|i| *i == indexes[0]),
        "one raft entry for the batch: {indexes:?}"
    );
    let entries = c
        .metric(
            leader,
            "stampede_raft_entries_total{type=\"alloc_client_update\"}",
        )
        .await
        .unwrap();
    assert_eq!(entries, 1.0);
    eventually("every allocation reads as running", CATCH_UP, || async {
        let all = allocs(&client, "web").await.unwrap();
        all.iter()
            .all(|a| a.client_status == AllocClientStatus::Running as i32)
    })
    .await;
    let all = allocs(&client, "web").await.unwrap();

    // One fails: its job is evaluated and the allocation replaced.
    let failed = all[0].id.clone();
    client
        .nodes()
        .update_alloc(NodeUpdateAllocRequest {
            allocs: vec![Allocation {
                id: failed.clone(),
                client_status: AllocClientStatus::Failed as i32,
                client_description: "exit code 1".into(),
                ..Default::default()
            }],
            secrets: node_secrets([all[0].node_id.as_str()]),
        })
        .await
        .unwrap();
    // The failed allocation stays, as history, beside its replacement.
    eventually("the failed allocation is replaced", CATCH_UP, || async {
        let after = allocs(&client, "web").await.unwrap();
        after.len() == 9 && live(&after).len() == 8 && live(&after).iter().all(|a| a.id != failed)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_follower_sends_its_clients_updates_on_to_the_leader_together() {
    let (c, leader) = Harness::with_leader(3, &["--heartbeat-min-ttl", "600s"]).await;
    let client = c.client();
    register_nodes(&client, "n", 10, 4000, 8192).await;
    register_job(&client, service_job("web", 40, 100, 64)).await;
    let placed = wait_live(&client, "web", 40).await;
    let follower = *c.ids().iter().find(|id| **id != leader).unwrap();
    let calls_metric = "stampede_alloc_update_calls_total";
    let before = c.metric(leader, calls_metric).await.unwrap();

    // A hundred reports at once, each a call of its own, all through the
    // same follower (two or three for each of the forty allocations).
    let through = c.client_of(&[follower]);
    let calls = placed.iter().cycle().take(100).map(|a| {
        let through = through.clone();
        let update = Allocation {
            id: a.id.clone(),
            client_status: AllocClientStatus::Running as i32,
            ..Default::default()
        };
        let secrets = node_secrets([a.node_id.as_str()]);
        async move {
            through
                .nodes()
                .update_alloc(NodeUpdateAllocRequest {
                    allocs: vec![update],
                    secrets,
                })
                .await
                .map(|r| r.into_inner().index)
        }
    });
    let indexes = futures::future::join_all(calls).await;
    for (a, i) in placed.iter().cycle().zip(&indexes) {
        let i = i.as_ref().unwrap_or_else(|s| panic!("{}: {s}", a.id));
        assert!(*i > 0, "{}: index {i}", a.id);
    }
    // The leader took them in a few calls, not a hundred.
    let taken = c.metric(leader, calls_metric).await.unwrap() - before;
    assert!(
        (1.0..=20.0).contains(&taken),
        "the leader took {taken} calls for 100 reports"
    );
    // And nothing was lost on the way.
    eventually("every allocation reads as running", CATCH_UP, || async {
        let all = allocs(&client, "web").await.unwrap();
        all.len() == 40
            && all
                .iter()
                .all(|a| a.client_status == AllocClientStatus::Running as i32)
    })
    .await;
}

/// A node may learn of its allocation from a server further ahead than the
/// one it reports through: a follower that has not applied the allocation
/// yet sends the report on to the leader, which checks it and takes it,
/// rather than answering `NotFound`. A report of an allocation that exists
/// nowhere is still `NotFound`, from the leader.
#[tokio::test(flavor = "multi_thread")]
async fn a_lagging_follower_sends_on_a_report_of_an_allocation_it_has_not_applied() {
    let (mut c, leader) = Harness::with_leader(3, &["--heartbeat-min-ttl", "600s"]).await;
    let lagging = c.ids_except(leader)[0];
    c.kill(lagging).unwrap();
    c.spawn_with(lagging, &["--apply-delay", "3s"]).unwrap();
    let ahead = c.client_of(&[leader]);
    register_nodes(&ahead, "n", 1, 1000, 4096).await;
    register_job(&ahead, service_job("web", 1, 100, 64)).await;
    let placed = wait_live(&ahead, "web", 1).await;
    let a = &placed[0];
    let behind = c.client_of(&[lagging]);
    let report = |id: &str| NodeUpdateAllocRequest {
        allocs: vec![Allocation {
            id: id.to_string(),
            client_status: AllocClientStatus::Running as i32,
            ..Default::default()
        }],
        secrets: node_secrets([a.node_id.as_str()]),
    };
    // Started again a moment ago: on a busy machine it may not answer yet.
    let status = eventually_ok(
        "the lagging server answers its status",
        CATCH_UP,
        || async { c.status(lagging).await.map_err(|e| e.to_string()) },
    )
    .await;
    assert!(
        status.applied_index < a.create_index,
        "the follower lags: applied {} < {}",
        status.applied_index,
        a.create_index
    );
    behind
        .nodes()
        .update_alloc(report(&a.id))
        .await
        .expect("the report is sent on to the leader and taken");
    eventually("the leader has it running", CATCH_UP, || async {
        allocs(&ahead, "web").await.is_ok_and(|all| {
            all.iter()
                .any(|x| x.id == a.id && x.client_status == AllocClientStatus::Running as i32)
        })
    })
    .await;
    let missing = behind
        .nodes()
        .update_alloc(report("no-such-alloc"))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound, "{missing:?}");
    assert!(missing.message().contains("allocs[0].id"), "{missing:?}");
}
