//! Blocking queries on a real 3-process cluster: a node's parked query for
//! its allocations wakes when the server changes them, and only then, and
//! brings the allocations that changed.

use crate::common;

use common::flood;
use stampede_launch::testing::{
    eventually, node_secrets, node_with, register_job, register_node, secret_of, service_job,
    Harness, CATCH_UP,
};
use stampede_proto::client::ClusterClient;
use stampede_proto::{
    AllocClientStatus, Allocation, Constraint, ConstraintOperand, ConstraintTarget,
    NodeClientAllocsReply, NodeClientAllocsRequest, NodeUpdateAllocRequest, QueryOptions,
};

/// A node's allocations as its client reads them, blocking if `query` says so.
async fn client_allocs(
    client: ClusterClient,
    node_id: String,
    query: Option<QueryOptions>,
) -> NodeClientAllocsReply {
    let req = NodeClientAllocsRequest {
        secret_id: secret_of(&node_id),
        node_id,
        query,
        with_changed: true,
        changed_only: false,
    };
    client
        .nodes()
        .get_client_allocs(req)
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_blocking_query_wakes_for_its_own_node_only() {
    let (c, _) = Harness::with_leader(3, &["--heartbeat-min-ttl", "600s"]).await;
    // Every call goes to server 1, whose metrics the test reads.
    let client = c.client_of(&[1]);
    let mut a = node_with("node-a", 1000, 4096);
    a.node_class = "a".into();
    let mut b = node_with("node-b", 1000, 4096);
    b.node_class = "b".into();
    register_node(&client, a).await.unwrap();
    register_node(&client, b).await.unwrap();

    // A node's first read answers at once; a parked one waits for a change
    // past the index that read returned.
    let first = |node: &str| {
        let read = client_allocs(client.clone(), node.to_string(), None);
        async move { read.await.index }
    };
    let park = |node: &str, min_index: u64| {
        let query = QueryOptions {
            min_index,
            max_wait_ms: 120_000,
            source: "client_allocs".into(),
        };
        tokio::spawn(client_allocs(client.clone(), node.to_string(), Some(query)))
    };
    let (ia, ib) = (first("node-a").await, first("node-b").await);
    let wait_a = park("node-a", ia);
    let wait_b = park("node-b", ib);
    eventually("both queries are parked", CATCH_UP, || async {
        c.metric(
            1,
            "stampede_blocking_queries_inflight{source=\"client_allocs\"}",
        )
        .await
        .unwrap()
            == 2.0
    })
    .await;

    // Only node-b fits this job.
    let mut job = service_job("on-b", 3, 100, 64);
    job.task_groups[0].constraints = vec![Constraint {
        target: ConstraintTarget::NodeClass as i32,
        operand: ConstraintOperand::Equal as i32,
        value: "b".into(),
    }];
    register_job(&client, job).await;
    let b_reply = wait_b.await.unwrap();
    assert_eq!(b_reply.allocs.len(), 3);
    assert!(b_reply.index > ib);

    let wakeups = c
        .metric(
            1,
            "stampede_blocking_query_wakeups_total{source=\"client_allocs\"}",
        )
        .await
        .unwrap();
    assert!(wakeups >= 1.0);
    // node-a's query was never woken and is still parked.
    assert!(!wait_a.is_finished());
    assert_eq!(
        c.metric(
            1,
            "stampede_blocking_queries_inflight{source=\"client_allocs\"}"
        )
        .await
        .unwrap(),
        1.0
    );
    assert_eq!(
        c.metric(
            1,
            "stampede_blocking_queries_started_total{source=\"client_allocs\"}"
        )
        .await
        .unwrap(),
        2.0
    );
    wait_a.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_nodes_query_brings_what_changed_and_ignores_its_own_reports() {
    let (c, _) = Harness::with_leader(3, &["--heartbeat-min-ttl", "600s"]).await;
    let client = c.client_of(&[1]);
    register_node(&client, node_with("node-a", 4000, 8192))
        .await
        .unwrap();
    let park = |min_index: u64| {
        let query = QueryOptions {
            min_index,
            max_wait_ms: 120_000,
            source: "client_allocs".into(),
        };
        tokio::spawn(client_allocs(client.clone(), "node-a".into(), Some(query)))
    };
    let first = client_allocs(client.clone(), "node-a".into(), None).await;
    assert!(first.allocs.is_empty() && first.changed.is_empty());

    // Placed allocations come whole with the answer.
    let parked = park(first.index);
    register_job(&client, service_job("one", 3, 100, 64)).await;
    let placed = parked.await.unwrap();
    assert_eq!(placed.allocs.len(), 3);
    let mut ids: Vec<&String> = placed.changed.iter().map(|a| &a.id).collect();
    ids.sort();
    let mut listed: Vec<&String> = placed.allocs.keys().collect();
    listed.sort();
    assert_eq!(ids, listed);
    assert!(placed.changed.iter().all(|a| a.job_id == "one"));

    // The node reports them running: the answer would not change, so the
    // query stays parked through it and wakes for the next placement only.
    let parked = park(placed.index);
    let reports = placed
        .changed
        .iter()
        .map(|a| Allocation {
            id: a.id.clone(),
            client_status: AllocClientStatus::Running as i32,
            ..Default::default()
        })
        .collect();
    let reported = client
        .nodes()
        .update_alloc(NodeUpdateAllocRequest {
            allocs: reports,
            secrets: node_secrets(placed.changed.iter().map(|a| a.node_id.as_str())),
        })
        .await
        .unwrap()
        .into_inner()
        .index;
    register_job(&client, service_job("two", 2, 100, 64)).await;
    let next = parked.await.unwrap();
    assert!(
        next.index > reported,
        "woke at {} for the node's own report at {reported}",
        next.index
    );
    assert_eq!(next.allocs.len(), 5);
    assert_eq!(
        next.changed.len(),
        2,
        "only what changed since the last answer"
    );
    assert!(next.changed.iter().all(|a| a.job_id == "two"));
    assert_eq!(next.total, 5);

    // Asked for the changes only, the node is not sent the ids of the three
    // it has: the count tells it that none was removed.
    let req = NodeClientAllocsRequest {
        secret_id: secret_of("node-a"),
        node_id: "node-a".into(),
        query: Some(QueryOptions {
            min_index: placed.index,
            max_wait_ms: 1_000,
            source: "client_allocs".into(),
        }),
        with_changed: true,
        changed_only: true,
    };
    let only = client.nodes().get_client_allocs(req).await.unwrap();
    let only = only.into_inner();
    let mut listed: Vec<&String> = only.allocs.keys().collect();
    listed.sort();
    let mut ids: Vec<&String> = next.changed.iter().map(|a| &a.id).collect();
    ids.sort();
    assert_eq!(listed, ids, "only the changed ones are listed");
    assert_eq!((only.changed.len(), only.total), (2, 5));
}

async fn refusals(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<tonic::Status>,
    n: usize,
) -> Vec<tonic::Status> {
    let mut got = Vec::new();
    while got.len() < n {
        let next = tokio::time::timeout(CATCH_UP, rx.recv()).await;
        got.push(next.expect("refused in time").expect("a refusal"));
    }
    got
}

#[tokio::test(flavor = "multi_thread")]
async fn parked_queries_past_their_bounds_are_refused_and_the_server_serves_on() {
    let args = [
        "--max-parked-per-connection",
        "50",
        "--max-parked-queries",
        "80",
    ];
    let (c, _) = Harness::with_leader(3, &args).await;
    // Two connections to server 1.
    let (a, b) = (c.client_of(&[1]), c.client_of(&[1]));
    let (mut parked, mut refused) = flood(&a, 60);
    for status in refusals(&mut refused, 10).await {
        assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
        assert!(
            status
                .message()
                .contains("at most 50 per connection (--max-parked-per-connection)"),
            "{status:?}"
        );
    }
    let (more, mut refused_b) = flood(&b, 40);
    parked.extend(more);
    for status in refusals(&mut refused_b, 10).await {
        assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
        assert!(
            status
                .message()
                .contains("at most 80 (--max-parked-queries)"),
            "{status:?}"
        );
    }
    let inflight = "stampede_blocking_queries_inflight{source=\"other\"}";
    eventually("exactly the bounds park", CATCH_UP, || async {
        c.metric(1, inflight).await.unwrap_or(-1.0) == 80.0
    })
    .await;

    // Writes and a node's own query go on; a node's query is bounded by
    // node, not by the connections' total.
    let client = c.client_of(&[1]);
    register_node(&client, node_with("n1", 1000, 4096))
        .await
        .unwrap();
    register_job(&client, service_job("after-flood", 1, 100, 64)).await;
    let first = client_allocs(client.clone(), "n1".into(), None).await.index;
    let query = QueryOptions {
        min_index: first,
        max_wait_ms: 100,
        source: "client_allocs".into(),
    };
    client_allocs(client.clone(), "n1".into(), Some(query)).await;

    // Callers that go away give their places back.
    for p in parked {
        p.abort();
    }
    eventually("the flood's places are given back", CATCH_UP, || async {
        c.metric(1, inflight).await.unwrap_or(-1.0) == 0.0
    })
    .await;
    let (again, mut refused) = flood(&a, 50);
    eventually(
        "50 park again on the first connection",
        CATCH_UP,
        || async { c.metric(1, inflight).await.unwrap_or(-1.0) == 50.0 },
    )
    .await;
    assert!(refused.try_recv().is_err(), "none refused");
    again.into_iter().for_each(|p| p.abort());
}
