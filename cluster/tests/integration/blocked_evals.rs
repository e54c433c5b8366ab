//! Blocked evaluations on a real 3-process cluster: a job that does not fit
//! waits, blocked, on the leader until capacity joins, then is placed.

use crate::common;

use std::time::Duration;

use common::{heartbeat, live, register_nodes, wait_live};
use stampede_launch::testing::{
    allocs, eventually, node_with, register_job, register_node, service_job, Harness, CATCH_UP,
};
use stampede_proto::{
    AllocDesiredStatus, Constraint, ConstraintOperand, ConstraintTarget, JobDeregisterRequest,
};

#[tokio::test(flavor = "multi_thread")]
async fn a_job_too_big_to_fit_blocks_and_is_placed_when_a_node_joins() {
    let (c, _) = Harness::with_leader(3, &[]).await;
    let client = c.client();
    let mut nodes = register_nodes(&client, "small", 2, 1000, 4096).await;
    let hb = heartbeat(&client, nodes.clone(), Duration::from_secs(1));

    register_job(&client, service_job("big", 5, 500, 64)).await;
    wait_live(&client, "big", 4).await;
    eventually(
        "the leader holds one blocked evaluation",
        CATCH_UP,
        || async { c.leader_metric("stampede_blocked_evals").await.unwrap() == 1.0 },
    )
    .await;

    nodes.extend(register_nodes(&client, "extra", 1, 1000, 4096).await);
    drop(hb);
    let _hb = heartbeat(&client, nodes, Duration::from_secs(1));
    let placed = wait_live(&client, "big", 5).await;
    assert!(live(&placed).iter().any(|a| a.node_id == "extra-0"));
    eventually("the blocked evaluation is done", CATCH_UP, || async {
        c.leader_metric("stampede_blocked_evals").await.unwrap() == 0.0
    })
    .await;
}

/// A job that may run only on class `gpu`, where there is no room, stays
/// blocked while capacity comes and goes in class `general` (with
/// `--unblock-by-class on`; with `off` every such change sends it back to
/// a worker, which blocks it again), and is placed once a `gpu` node joins.
async fn gpu_job_through_general_churn(by_class: &str) -> f64 {
    let (c, leader) = Harness::with_leader(3, &["--unblock-by-class", by_class]).await;
    let client = c.client();
    let mut nodes = register_nodes(&client, "general", 1, 1000, 4096).await;
    let hb = heartbeat(&client, nodes.clone(), Duration::from_secs(1));

    let mut gpu = service_job("train", 1, 100, 64);
    gpu.task_groups[0].constraints = vec![Constraint {
        target: ConstraintTarget::NodeClass as i32,
        operand: ConstraintOperand::Equal as i32,
        value: "gpu".into(),
    }];
    register_job(&client, gpu).await;
    eventually("train is blocked", CATCH_UP, || async {
        c.leader_metric("stampede_blocked_evals")
            .await
            .unwrap_or(0.0)
            == 1.0
    })
    .await;
    const UNBLOCKED: &str = "stampede_blocked_evals_unblocked_total";
    let before = c.metric(leader, UNBLOCKED).await.unwrap();

    // Capacity churns in class general: a job placed and stopped there.
    register_job(&client, service_job("filler", 1, 100, 64)).await;
    let placed = wait_live(&client, "filler", 1).await;
    client
        .jobs()
        .deregister(JobDeregisterRequest {
            job_id: "filler".into(),
            purge: false,
        })
        .await
        .unwrap();
    // Once the leader has applied the stop, its blocked set has reacted.
    let on_leader = c.client_of(&[leader]);
    eventually("the leader applied filler's stop", CATCH_UP, || async {
        allocs(&on_leader, "filler").await.is_ok_and(|all| {
            all.iter().any(|a| {
                a.id == placed[0].id && a.desired_status == AllocDesiredStatus::Stop as i32
            })
        })
    })
    .await;
    let woken = c.metric(leader, UNBLOCKED).await.unwrap() - before;

    // Room in class gpu: placed.
    let mut node = node_with("gpu-0", 1000, 4096);
    node.node_class = "gpu".into();
    register_node(&client, node).await.unwrap();
    nodes.push("gpu-0".into());
    drop(hb);
    let _hb = heartbeat(&client, nodes, Duration::from_secs(1));
    let placed = wait_live(&client, "train", 1).await;
    assert_eq!(live(&placed)[0].node_id, "gpu-0");
    woken
}

#[tokio::test(flavor = "multi_thread")]
async fn capacity_in_a_class_a_blocked_job_cannot_use_wakes_it_only_without_by_class() {
    assert_eq!(
        gpu_job_through_general_churn("on").await,
        0.0,
        "by class: general capacity does not wake a gpu job"
    );
    assert!(
        gpu_job_through_general_churn("off").await >= 1.0,
        "without: every capacity change unblocks everything"
    );
}
