//! Bad input to the control plane's API: each gets a clear gRPC status
//! naming what is wrong (InvalidArgument, NotFound, FailedPrecondition),
//! never a panic.

mod common;

use common::register_nodes;
use stampede_launch::testing::{service_job, Harness};
use stampede_proto::{
    AllocClientStatus, Allocation, EvalAckRequest, Job, JobDeregisterRequest, JobRegisterRequest,
    NodeClientAllocsRequest, NodeStatus, NodeUpdateAllocRequest, NodeUpdateStatusRequest,
};
use tonic::Code;

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_gets_clear_errors() {
    let (c, _) = Harness::with_leader(1, &["--heartbeat-min-ttl", "600s"]).await;
    let client = c.client();
    register_nodes(&client, "n", 1, 1000, 4096).await;

    let register = |job: Job| {
        let client = client.clone();
        async move {
            client
                .jobs()
                .register(JobRegisterRequest { job: Some(job) })
                .await
                .unwrap_err()
        }
    };
    let cases = [
        (service_job("", 1, 100, 64), "job.id"),
        (
            service_job("web", 1_000_000, 100, 64),
            "job.task_groups[0].count",
        ),
        (
            service_job("web", 1, 0, 64),
            "job.task_groups[0].resources.cpu_mhz",
        ),
        (
            Job {
                r#type: 0,
                ..service_job("web", 1, 100, 64)
            },
            "job.type",
        ),
    ];
    for (job, field) in cases {
        let err = register(job).await;
        assert_eq!(err.code(), Code::InvalidArgument, "{}", err.message());
        assert!(
            err.message().starts_with(field),
            "{:?} should name {field}",
            err.message()
        );
    }

    let err = client
        .nodes()
        .update_status(NodeUpdateStatusRequest {
            node_id: "ghost".into(),
            status: NodeStatus::Ready as i32,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(err.message().contains("ghost"), "{}", err.message());

    let err = client
        .nodes()
        .get_client_allocs(NodeClientAllocsRequest {
            node_id: "ghost".into(),
            query: None,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);

    let err = client
        .nodes()
        .update_alloc(NodeUpdateAllocRequest {
            allocs: vec![Allocation {
                id: "no-such-alloc".into(),
                client_status: AllocClientStatus::Running as i32,
                ..Default::default()
            }],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(
        err.message().starts_with("allocs[0].id"),
        "{}",
        err.message()
    );

    // The broker's calls are the servers' own (a node client is refused
    // them): asked as a server, a stale ack is named.
    let err = c
        .client_as(stampede_proto::security::Role::Server)
        .evals()
        .ack(EvalAckRequest {
            eval_id: "e-1".into(),
            token: "stale".into(),
            reason: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().contains("not outstanding"),
        "{}",
        err.message()
    );

    let err = client
        .jobs()
        .deregister(JobDeregisterRequest {
            job_id: "never".into(),
            purge: false,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
}
