//! Garbage collection on a real 3-process cluster: core evaluations on a
//! timer collect stopped and finished jobs, terminal evaluations and
//! allocations of live jobs, and nodes long down, each through its own
//! `gc_*` raft entry on every server, while live work stays; and a forced
//! collection (`PUT /v1/system/gc`) takes what is done at once.

use crate::common;

use std::time::Duration;

use common::{heartbeat, live, register_nodes, wait_live};
use stampede_launch::testing::{
    allocs, eventually, eventually_ok, node_secrets, register_job, service_job, Harness, CATCH_UP,
};
use stampede_proto::client::ClusterClient;
use stampede_proto::{
    AllocClientStatus, AllocDesiredStatus, Allocation, JobDeregisterRequest, JobGetRequest,
    JobType, NodeGetRequest, NodeUpdateAllocRequest,
};
use tonic::Code;

/// Collection every second of whatever has been done for two.
const SHORT_GC: &[&str] = &[
    "--gc-interval",
    "1s",
    "--eval-gc-threshold",
    "2s",
    "--batch-eval-gc-threshold",
    "2s",
    "--job-gc-threshold",
    "2s",
    "--deployment-gc-threshold",
    "2s",
    "--node-gc-threshold",
    "2s",
    "--heartbeat-min-ttl",
    "1s",
    "--heartbeat-grace",
    "1s",
];

/// What a collection takes: allow for the thresholds, the timer and a few
/// round trips on a busy machine.
const COLLECTED: Duration = Duration::from_secs(60);

/// Reports allocations as the client would. The allocations were read from
/// one server and the report may go to another: one that has not applied
/// the plan yet answers NotFound, so that is "not yet"; anything else fails.
async fn report(client: &ClusterClient, placed: &[&Allocation], status: AllocClientStatus) {
    let allocs: Vec<Allocation> = placed
        .iter()
        .map(|a| Allocation {
            id: a.id.clone(),
            client_status: status as i32,
            ..Default::default()
        })
        .collect();
    let secrets = node_secrets(placed.iter().map(|a| a.node_id.as_str()));
    eventually_ok("the allocations' report is taken", CATCH_UP, || async {
        let req = NodeUpdateAllocRequest {
            allocs: allocs.clone(),
            secrets: secrets.clone(),
        };
        match client.nodes().update_alloc(req).await {
            Ok(_) => Ok(()),
            Err(s) if s.code() == Code::NotFound => Err(s.message().to_string()),
            Err(s) => panic!("NodeService.UpdateAlloc: {s:?}"),
        }
    })
    .await
}

async fn job_exists(client: &ClusterClient, id: &str) -> bool {
    match client
        .jobs()
        .get(JobGetRequest {
            job_id: id.into(),
            query: None,
        })
        .await
    {
        Ok(_) => true,
        Err(s) if s.code() == Code::NotFound => false,
        Err(s) => panic!("JobService.Get {id}: {s:?}"),
    }
}

async fn stop_job(client: &ClusterClient, id: &str) {
    client
        .jobs()
        .deregister(JobDeregisterRequest {
            job_id: id.into(),
            purge: false,
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn each_kind_of_garbage_is_collected_after_its_threshold_and_live_work_stays() {
    let (c, _) = Harness::with_leader(3, SHORT_GC).await;
    let client = c.client();
    let nodes = register_nodes(&client, "n", 2, 4000, 8192).await;
    let _hb = heartbeat(&client, nodes, Duration::from_millis(200));
    // Never heartbeats: marked down, then collected.
    register_nodes(&client, "gone", 1, 10, 10).await;

    register_job(&client, service_job("keep", 2, 100, 64)).await;
    wait_live(&client, "keep", 2).await;

    register_job(&client, service_job("stopped", 1, 100, 64)).await;
    let placed = wait_live(&client, "stopped", 1).await;
    stop_job(&client, "stopped").await;
    report(&client, &[&placed[0]], AllocClientStatus::Complete).await;

    let mut etl = service_job("etl", 1, 100, 64);
    etl.r#type = JobType::Batch as i32;
    register_job(&client, etl).await;
    let placed = wait_live(&client, "etl", 1).await;
    report(&client, &[&placed[0]], AllocClientStatus::Complete).await;

    // Scaled down: one of keep's allocations stops and finishes.
    register_job(&client, service_job("keep", 1, 100, 64)).await;
    let all = wait_live(&client, "keep", 1).await;
    let stopped: Vec<&Allocation> = all
        .iter()
        .filter(|a| a.desired_status == AllocDesiredStatus::Stop as i32)
        .collect();
    assert_eq!(stopped.len(), 1, "{all:?}");
    report(&client, &stopped, AllocClientStatus::Complete).await;
    let finished = stopped[0].id.clone();

    eventually(
        "the stopped and the finished job are collected",
        COLLECTED,
        || async { !job_exists(&client, "stopped").await && !job_exists(&client, "etl").await },
    )
    .await;
    eventually(
        "the node that went down is collected",
        COLLECTED,
        || async {
            let r = client
                .nodes()
                .get(NodeGetRequest {
                    node_id: "gone-0".into(),
                })
                .await;
            matches!(r, Err(s) if s.code() == Code::NotFound)
        },
    )
    .await;
    let kept = eventually_ok(
        "keep's finished allocation is collected",
        COLLECTED,
        || async {
            let all = allocs(&client, "keep").await.map_err(|e| e.to_string())?;
            if all.iter().any(|a| a.id == finished) {
                return Err(format!("still there: {all:?}"));
            }
            Ok(all)
        },
    )
    .await;
    assert_eq!(live(&kept).len(), 1, "live work stays: {kept:?}");
    assert!(job_exists(&client, "keep").await);

    // Every server applied the same collections, each as its own entry type.
    for id in c.ids() {
        for (series, at_least) in [
            ("stampede_raft_entries_total{type=\"gc_jobs\"}", 1.0),
            ("stampede_raft_entries_total{type=\"gc_evals\"}", 1.0),
            ("stampede_raft_entries_total{type=\"gc_nodes\"}", 1.0),
            ("stampede_gc_collected_total{kind=\"jobs\"}", 2.0),
            ("stampede_gc_collected_total{kind=\"nodes\"}", 1.0),
            ("stampede_gc_collected_total{kind=\"allocs\"}", 3.0),
        ] {
            let what = format!("server {id}: {series} at least {at_least}");
            eventually(&what, CATCH_UP, || async {
                c.metric(id, series).await.unwrap_or(0.0) >= at_least
            })
            .await;
        }
        let jobs = c
            .metric(id, "stampede_state_objects{table=\"jobs\"}")
            .await
            .unwrap();
        assert_eq!(jobs, 1.0, "server {id} holds only keep");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forced_collection_takes_what_is_done_whatever_its_age() {
    // Nomad's thresholds (an hour and more) and no timer.
    let (c, leader) = Harness::with_leader(3, &["--gc-interval", "0s"]).await;
    let client = c.client();
    let nodes = register_nodes(&client, "n", 1, 4000, 8192).await;
    let _hb = heartbeat(&client, nodes, Duration::from_secs(1));
    register_job(&client, service_job("web", 1, 100, 64)).await;
    let placed = wait_live(&client, "web", 1).await;
    stop_job(&client, "web").await;
    report(&client, &[&placed[0]], AllocClientStatus::Complete).await;
    assert!(job_exists(&client, "web").await);
    assert_eq!(
        c.metric(leader, "stampede_raft_entries_total{type=\"gc_jobs\"}")
            .await
            .unwrap(),
        0.0
    );

    // Asked of a follower, which sends it on to the leader.
    let follower = c.ids_except(leader)[0];
    let reply: serde_json::Value = c
        .request(follower, reqwest::Method::PUT, "/v1/system/gc")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        reply["eval_id"].as_str().is_some_and(|id| !id.is_empty()),
        "{reply}"
    );
    eventually("the stopped job is collected", COLLECTED, || async {
        !job_exists(&client, "web").await
    })
    .await;
}
