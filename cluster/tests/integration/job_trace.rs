//! `JobService.Trace`, a job's critical path, against a real 3-server
//! cluster with this test as the node: every step from the registration to
//! the running report is stamped, in path order on the one clock the
//! processes share, and the servers' stage histograms count what they end.
//! Bad requests get `InvalidArgument` naming the field.

use crate::common;

use std::time::Duration;

use common::{heartbeat, register_nodes, wait_live};
use stampede_launch::testing::{eventually_ok, node_secrets, register_job, service_job, Harness};
use stampede_proto::{
    unix_us, AllocClientStatus, AllocClientTimes, Allocation, JobTrace, JobTraceRequest,
    NodeUpdateAllocRequest,
};
use tonic::Code;

/// `a` reported running, with the node's times since 1970.
fn running(a: &Allocation, delivered_us: u64, started_us: u64) -> Allocation {
    Allocation {
        id: a.id.clone(),
        client_status: AllocClientStatus::Running as i32,
        client_times: Some(AllocClientTimes {
            delivered_us,
            started_us,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `a` reported running as nodesim reports it: its times after the
/// allocation's creation.
fn running_after_create(a: &Allocation, delivered_us: u64, started_us: u64) -> Allocation {
    let created_us = a.create_time_ms as i64 * 1000;
    Allocation {
        client_times: Some(AllocClientTimes {
            delivered_after_create_us: delivered_us as i64 - created_us,
            started_after_create_us: started_us as i64 - created_us,
            ..Default::default()
        }),
        ..running(a, 0, 0)
    }
}

/// The trace's steps in path order, named.
fn steps(t: &JobTrace) -> [(&'static str, u64); 10] {
    [
        ("registered", t.registered_us),
        ("eval_created", t.eval_created_us),
        ("enqueued", t.enqueued_us),
        ("dequeued", t.dequeued_us),
        ("caught_up", t.caught_up_us),
        ("plan_submitted", t.plan_submitted_us),
        ("plan_committed", t.plan_committed_us),
        ("delivered", t.delivered_us),
        ("started", t.started_us),
        ("running_committed", t.running_committed_us),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_jobs_path_is_stamped_step_by_step_in_order() {
    let (c, leader) = Harness::with_leader(3, &[]).await;
    let client = c.client();
    let nodes = register_nodes(&client, "trace", 2, 4000, 8192).await;
    let _beat = heartbeat(&client, nodes, Duration::from_millis(500));

    let submitted = unix_us();
    register_job(&client, service_job("traced", 2, 100, 64)).await;
    let allocs = wait_live(&client, "traced", 2).await;
    let delivered = unix_us();
    // The second one runs last: it is the job's critical path, and it
    // reports its times as nodesim does, after the allocation's creation.
    for a in &allocs {
        let started = unix_us();
        client
            .nodes()
            .update_alloc(NodeUpdateAllocRequest {
                allocs: vec![running_after_create(a, delivered, started)],
                secrets: node_secrets([a.node_id.as_str()]),
            })
            .await
            .expect("a running report");
    }
    let last = allocs.last().unwrap().id.clone();

    let at_leader = c.client_of(&[leader]);
    let ids = vec!["traced".to_string(), "never-registered".to_string()];
    let trace = eventually_ok(
        "the leader traces the job to running",
        Duration::from_secs(10),
        || {
            let (at_leader, ids) = (at_leader.clone(), ids.clone());
            async move {
                let reply = at_leader
                    .jobs()
                    .trace(JobTraceRequest { job_ids: ids })
                    .await
                    .map_err(|e| e.to_string())?
                    .into_inner();
                assert_eq!(reply.traces.len(), 2, "one per id, in order");
                assert!(!reply.traces[1].found, "an unknown job is not found");
                assert_eq!(reply.traces[1].job_id, "never-registered");
                let trace = reply.traces[0].clone();
                match trace.running_committed_us {
                    0 => Err(format!("not yet running: {trace:?}")),
                    _ => Ok(trace),
                }
            }
        },
    )
    .await;
    assert!(trace.found);
    assert_eq!(trace.alloc_id, last, "the allocation that ran last");
    assert!(!trace.eval_id.is_empty() && !trace.node_id.is_empty());
    let mut before = ("submitted", submitted);
    for (name, at) in steps(&trace) {
        assert!(at != 0, "{name} is stamped: {trace:?}");
        assert!(
            at >= before.1,
            "{name} ({at}) before {} ({}): {trace:?}",
            before.0,
            before.1
        );
        before = (name, at);
    }
    assert!(before.1 <= unix_us());
    // A first registration's evaluation is its own entry: no rollout.
    assert_eq!(trace.registered_us, trace.eval_created_us);

    // Each stage a server ends is counted where it ends: the registration
    // on the server that took the call, the broker's two on the leader.
    for stage in ["register", "enqueue", "broker_wait"] {
        let series = format!("stampede_job_stage_seconds_count{{stage=\"{stage}\"}}");
        let mut n = 0.0;
        for id in c.ids() {
            n += c.metric(id, &series).await.unwrap_or(0.0);
        }
        assert!(n >= 1.0, "{series} = {n} over the servers");
    }
    let leader_only = "stampede_job_stage_seconds_count{stage=\"broker_wait\"}";
    assert!(c.metric(leader, leader_only).await.unwrap() >= 1.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_trace_requests_and_client_times_are_invalid_arguments_naming_the_field() {
    let (c, _) = Harness::with_leader(3, &[]).await;
    let client = c.client();
    let asks: [(Vec<String>, &str); 3] = [
        (vec![], "job_ids"),
        (vec!["j".to_string(); 1001], "at most 1000"),
        (vec!["bad id with spaces".to_string()], "job_ids[0]"),
    ];
    for (job_ids, names) in asks {
        let err = client
            .jobs()
            .trace(JobTraceRequest { job_ids })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains(names), "{names}: {err:?}");
    }

    let nodes = register_nodes(&client, "clock", 1, 4000, 8192).await;
    let _beat = heartbeat(&client, nodes, Duration::from_millis(500));
    register_job(&client, service_job("clocked", 1, 100, 64)).await;
    let allocs = wait_live(&client, "clocked", 1).await;
    // Seconds where microseconds belong.
    let err = client
        .nodes()
        .update_alloc(NodeUpdateAllocRequest {
            allocs: vec![running(&allocs[0], unix_us() / 1_000_000, 0)],
            secrets: node_secrets([allocs[0].node_id.as_str()]),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message()
            .contains("allocs[0].client_times.delivered_us"),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_job_times_off_nothing_is_stamped() {
    let (c, leader) = Harness::with_leader(3, &["--job-times", "off"]).await;
    let client = c.client();
    let nodes = register_nodes(&client, "off", 1, 4000, 8192).await;
    let _beat = heartbeat(&client, nodes, Duration::from_millis(500));
    register_job(&client, service_job("untimed", 1, 100, 64)).await;
    wait_live(&client, "untimed", 1).await;
    let reply = c
        .client_of(&[leader])
        .jobs()
        .trace(JobTraceRequest {
            job_ids: vec!["untimed".into()],
        })
        .await
        .unwrap()
        .into_inner();
    let t = &reply.traces[0];
    assert!(t.found && !t.alloc_id.is_empty(), "{t:?}");
    assert_eq!(steps(t).map(|(_, at)| at), [0; 10], "{t:?}");
    let counted = "stampede_job_stage_seconds_count{stage=\"broker_wait\"}";
    assert_eq!(c.metric(leader, counted).await.unwrap(), 0.0);
}
