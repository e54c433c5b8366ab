//! Blocked evaluations on a real 3-process cluster: a job that does not fit
//! waits, blocked, on the leader until capacity joins, then is placed.

mod common;

use std::time::Duration;

use common::{heartbeat, live, register_nodes, wait_live};
use stampede_launch::testing::{eventually, register_job, service_job, Harness, CATCH_UP};

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
