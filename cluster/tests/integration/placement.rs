//! Placement on a real 3-process cluster: a service job's allocations are
//! placed by the scheduler workers through the leader's broker and plan
//! applier, within each node's resources, and stopped when it deregisters.

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use common::{heartbeat, live, register_nodes, wait_live};
use stampede_launch::testing::{eventually, register_job, service_job, Harness, CATCH_UP};
use stampede_proto::{
    AllocDesiredStatus, EvalGetRequest, EvalStatus, JobDeregisterRequest, JobSummaryRequest,
    QueryOptions,
};

#[tokio::test(flavor = "multi_thread")]
async fn a_service_job_is_placed_within_node_resources_and_deregistering_stops_it() {
    let (c, _) = Harness::with_leader(3, &[]).await;
    let client = c.client();
    // 20 nodes with room for 3 allocations each: 60 slots for 50.
    let nodes = register_nodes(&client, "n", 20, 300, 1024).await;
    let _hb = heartbeat(&client, nodes, Duration::from_secs(1));

    let reply = register_job(&client, service_job("web", 50, 100, 64)).await;
    assert!(!reply.eval_id.is_empty() && reply.index > 0);
    let placed = wait_live(&client, "web", 50).await;

    let mut per_node: HashMap<&str, u64> = HashMap::new();
    for a in live(&placed) {
        *per_node.entry(&a.node_id).or_default() += a.resources.unwrap().cpu_mhz;
    }
    assert!(
        per_node.values().all(|cpu| *cpu <= 300),
        "a node is over capacity: {per_node:?}"
    );
    // The job's summary counts what the allocations list shows. It comes
    // from the next server in turn, which may be a follower not yet caught
    // up: ask for at least the index the allocations were read at.
    let latest = placed.iter().map(|a| a.modify_index).max().unwrap();
    let summary = client
        .jobs()
        .summary(JobSummaryRequest {
            job_id: "web".into(),
            query: Some(QueryOptions {
                min_index: latest - 1,
                max_wait_ms: 10_000,
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner();
    let mut counted: HashMap<(i32, i32), u64> = HashMap::new();
    for c in &summary.counts {
        assert_eq!(c.job_version, 0, "{summary:?}");
        *counted
            .entry((c.desired_status, c.client_status))
            .or_default() += c.count;
    }
    let mut listed: HashMap<(i32, i32), u64> = HashMap::new();
    for a in &placed {
        *listed
            .entry((a.desired_status, a.client_status))
            .or_default() += 1;
    }
    assert!(summary.index > 0);
    assert_eq!(counted.values().sum::<u64>(), 50, "{summary:?}");
    if summary.index == latest {
        assert_eq!(counted, listed);
    }
    let unknown = client
        .jobs()
        .summary(JobSummaryRequest {
            job_id: "ghost".into(),
            query: None,
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound, "{unknown:?}");
    assert!(unknown.message().contains("ghost"), "{unknown:?}");

    let mut indexes: Vec<u32> = live(&placed).iter().map(|a| a.index).collect();
    indexes.sort();
    assert_eq!(indexes, (0..50).collect::<Vec<_>>());

    // The worker records the evaluation's outcome right after its plan.
    eventually("the evaluation is complete", CATCH_UP, || async {
        let req = EvalGetRequest {
            eval_id: reply.eval_id.clone(),
            query: None,
        };
        let eval = client
            .evals()
            .get(req)
            .await
            .unwrap()
            .into_inner()
            .eval
            .unwrap();
        eval.status == EvalStatus::Complete as i32
    })
    .await;
    let plans = c
        .leader_metric("stampede_raft_entries_total{type=\"plan_apply\"}")
        .await
        .unwrap();
    assert!(plans >= 1.0);
    assert_eq!(
        c.leader_metric("stampede_nodes{status=\"ready\"}")
            .await
            .unwrap(),
        20.0
    );

    client
        .jobs()
        .deregister(JobDeregisterRequest {
            job_id: "web".into(),
            purge: false,
        })
        .await
        .unwrap();
    let all = wait_live(&client, "web", 0).await;
    assert!(all
        .iter()
        .all(|a| a.desired_status == AllocDesiredStatus::Stop as i32));
}
