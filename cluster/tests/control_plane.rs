//! The control plane on a real 3-process cluster: jobs placed by the
//! scheduler workers through the leader's broker and plan applier, nodes
//! heartbeating, blocking queries.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{eventually, node_with, Harness, CATCH_UP, ELECTION};
use stampede_proto::client::ClusterClient;
use stampede_proto::*;
use tokio::sync::watch;
use tonic::Code;

/// Keeps nodes alive: heartbeats each of them every `every` until stopped.
fn heartbeat(client: &ClusterClient, ids: Vec<String>, every: Duration) -> watch::Sender<bool> {
    let (stop, rx) = watch::channel(false);
    let client = client.clone();
    tokio::spawn(async move {
        while !*rx.borrow() {
            for id in &ids {
                let req = NodeUpdateStatusRequest {
                    node_id: id.clone(),
                    status: NodeStatus::Ready as i32,
                };
                let _ = client.nodes().update_status(req).await;
            }
            tokio::time::sleep(every).await;
        }
    });
    stop
}

async fn register_nodes(
    client: &ClusterClient,
    prefix: &str,
    n: usize,
    cpu: u64,
    mem: u64,
) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let id = format!("{prefix}-{i}");
        client
            .register_node(node_with(&id, cpu, mem))
            .await
            .unwrap();
        ids.push(id);
    }
    ids
}

fn service_job(id: &str, count: u32, cpu: u64, mem: u64) -> Job {
    Job {
        id: id.into(),
        r#type: JobType::Service as i32,
        task_groups: vec![TaskGroup {
            name: "web".into(),
            count,
            resources: Some(Resources {
                cpu_mhz: cpu,
                memory_mb: mem,
            }),
            ..Default::default()
        }],
        ..Default::default()
    }
}

async fn register_job(client: &ClusterClient, job: Job) -> JobRegisterReply {
    client
        .retrying(|c| {
            let job = job.clone();
            async move {
                Ok(c.jobs()
                    .register(JobRegisterRequest { job: Some(job) })
                    .await?
                    .into_inner())
            }
        })
        .await
        .unwrap()
}

async fn allocs(client: &ClusterClient, job: &str) -> Vec<Allocation> {
    client
        .retrying(|c| {
            let job_id = job.to_string();
            async move {
                let req = JobAllocationsRequest {
                    job_id,
                    query: None,
                };
                Ok(c.jobs().allocations(req).await?.into_inner().allocs)
            }
        })
        .await
        .unwrap()
}

fn live(allocs: &[Allocation]) -> Vec<&Allocation> {
    allocs
        .iter()
        .filter(|a| {
            a.desired_status == AllocDesiredStatus::Run as i32
                && matches!(
                    AllocClientStatus::try_from(a.client_status),
                    Ok(AllocClientStatus::Pending | AllocClientStatus::Running)
                )
        })
        .collect()
}

/// Waits until `job` has exactly `n` live allocations.
async fn wait_live(client: &ClusterClient, job: &str, n: usize) -> Vec<Allocation> {
    let deadline = std::time::Instant::now() + CATCH_UP;
    loop {
        let all = allocs(client, job).await;
        if live(&all).len() == n {
            return all;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job {job}: {} live allocations, want {n}; last: {:?}",
            live(&all).len(),
            all.iter()
                .map(|a| (&a.node_id, a.desired_status, a.client_status))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn leader_metric(c: &Harness, series: &str) -> f64 {
    for id in c.ids() {
        if c.status(id).await.is_ok_and(|s| s.state == "Leader") {
            return c.metric(id, series).await.unwrap();
        }
    }
    panic!("no leader to read {series} from");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_service_job_is_placed_within_node_resources_and_deregistering_stops_it() {
    let mut c = Harness::start(3, &[]);
    c.wait_for_leader(ELECTION).await.unwrap();
    let client = ClusterClient::new(&c.rpc_addrs()).unwrap();
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
    assert!(leader_metric(&c, "stampede_raft_entries_total{type=\"plan_apply\"}").await >= 1.0);
    assert_eq!(
        leader_metric(&c, "stampede_nodes{status=\"ready\"}").await,
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

#[tokio::test(flavor = "multi_thread")]
async fn a_job_too_big_to_fit_blocks_and_is_placed_when_a_node_joins() {
    let mut c = Harness::start(3, &[]);
    c.wait_for_leader(ELECTION).await.unwrap();
    let client = ClusterClient::new(&c.rpc_addrs()).unwrap();
    let mut nodes = register_nodes(&client, "small", 2, 1000, 4096).await;
    let hb = heartbeat(&client, nodes.clone(), Duration::from_secs(1));

    register_job(&client, service_job("big", 5, 500, 64)).await;
    wait_live(&client, "big", 4).await;
    eventually(
        "the leader holds one blocked evaluation",
        CATCH_UP,
        || async { leader_metric(&c, "stampede_blocked_evals").await == 1.0 },
    )
    .await;

    nodes.extend(register_nodes(&client, "extra", 1, 1000, 4096).await);
    drop(hb);
    let _hb = heartbeat(&client, nodes, Duration::from_secs(1));
    let placed = wait_live(&client, "big", 5).await;
    assert!(live(&placed).iter().any(|a| a.node_id == "extra-0"));
    eventually("the blocked evaluation is done", CATCH_UP, || async {
        leader_metric(&c, "stampede_blocked_evals").await == 0.0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_that_stops_heartbeating_goes_down_and_its_allocations_are_replaced() {
    let mut c = Harness::start(3, &["--heartbeat-min-ttl", "1s", "--heartbeat-grace", "0s"]);
    c.wait_for_leader(ELECTION).await.unwrap();
    let client = ClusterClient::new(&c.rpc_addrs()).unwrap();
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
            let all = allocs(&client, "web").await;
            let lost = all
                .iter()
                .filter(|a| a.client_status == AllocClientStatus::Lost as i32)
                .count();
            let live = live(&all);
            lost == 2 && live.len() == 2 && live.iter().all(|a| a.node_id != "victim-0")
        },
    )
    .await;
    assert!(leader_metric(&c, "stampede_heartbeats_missed_total").await >= 1.0);
    assert!(leader_metric(&c, "stampede_raft_entries_total{type=\"node_status\"}").await >= 1.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_blocking_query_wakes_for_its_own_node_only() {
    let mut c = Harness::start(3, &["--heartbeat-min-ttl", "600s"]);
    c.wait_for_leader(ELECTION).await.unwrap();
    let addr = c.rpc_addrs()[0].clone();
    let client = ClusterClient::new(&[addr]).unwrap();
    let mut a = node_with("node-a", 1000, 4096);
    a.node_class = "a".into();
    let mut b = node_with("node-b", 1000, 4096);
    b.node_class = "b".into();
    client.register_node(a).await.unwrap();
    client.register_node(b).await.unwrap();

    let park = |node: &str, min_index: u64| {
        let client = client.clone();
        let node_id = node.to_string();
        tokio::spawn(async move {
            let req = NodeClientAllocsRequest {
                node_id,
                query: Some(QueryOptions {
                    min_index,
                    max_wait_ms: 120_000,
                    source: "client_allocs".into(),
                }),
            };
            client
                .nodes()
                .get_client_allocs(req)
                .await
                .unwrap()
                .into_inner()
        })
    };
    let first = |node: &str| {
        let client = client.clone();
        let node_id = node.to_string();
        async move {
            let req = NodeClientAllocsRequest {
                node_id,
                query: None,
            };
            client
                .nodes()
                .get_client_allocs(req)
                .await
                .unwrap()
                .into_inner()
                .index
        }
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
async fn pausing_all_workers_stops_placement_and_resuming_resumes_it() {
    let mut c = Harness::start(3, &["--heartbeat-min-ttl", "600s"]);
    let leader = c.wait_for_leader(ELECTION).await.unwrap();
    let client = ClusterClient::new(&c.rpc_addrs()).unwrap();
    register_nodes(&client, "n", 3, 1000, 4096).await;
    for id in c.ids() {
        c.request(id, reqwest::Method::POST, "/v1/workers/pause")
            .await
            .unwrap();
    }
    for id in c.ids() {
        eventually("every worker is paused", CATCH_UP, || async {
            let r: serde_json::Value = c
                .request(id, reqwest::Method::GET, "/v1/workers")
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            r["workers"]
                .as_array()
                .unwrap()
                .iter()
                .all(|w| w["state"] == "paused")
        })
        .await;
        // The dashboards' workers panel reads the same states from /metrics.
        let workers = c
            .request(id, reqwest::Method::GET, "/v1/workers")
            .await
            .unwrap()
            .json::<serde_json::Value>()
            .await
            .unwrap()["workers"]
            .as_array()
            .unwrap()
            .len();
        assert!(workers > 0);
        let paused = c
            .metric(id, "stampede_workers{state=\"paused\"}")
            .await
            .unwrap();
        let dequeuing = c
            .metric(id, "stampede_workers{state=\"dequeuing\"}")
            .await
            .unwrap();
        assert_eq!((paused, dequeuing), (workers as f64, 0.0));
    }
    register_job(&client, service_job("web", 3, 100, 64)).await;
    eventually("the evaluation waits in the broker", CATCH_UP, || async {
        c.metric(leader, "stampede_broker_ready").await.unwrap() == 1.0
    })
    .await;
    assert!(
        allocs(&client, "web").await.is_empty(),
        "nothing placed while paused"
    );

    for id in c.ids() {
        c.request(id, reqwest::Method::POST, "/v1/workers/resume")
            .await
            .unwrap();
    }
    wait_live(&client, "web", 3).await;

    // Changing the number of workers at runtime.
    let r: serde_json::Value = c
        .request(leader, reqwest::Method::PUT, "/v1/workers?count=5")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["count"], 5);
    eventually("five workers on the metric", CATCH_UP, || async {
        let mut sum = 0.0;
        for state in ["starting", "dequeuing", "working", "backing_off", "paused"] {
            let series = format!("stampede_workers{{state=\"{state}\"}}");
            sum += c.metric(leader, &series).await.unwrap();
        }
        sum == 5.0
    })
    .await;
    let err = c
        .request(leader, reqwest::Method::PUT, "/v1/workers?count=many")
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("count: \"many\" is not a whole number"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_of_the_leader_mid_placement_loses_no_acknowledged_job() {
    let mut c = Harness::start(3, &["--heartbeat-min-ttl", "600s"]);
    let leader = c.wait_for_leader(ELECTION).await.unwrap();
    let client = ClusterClient::new(&c.rpc_addrs())
        .unwrap()
        .with_retry_for(Duration::from_secs(30));
    register_nodes(&client, "n", 10, 4000, 16384).await;
    let mut jobs = Vec::new();
    for j in 0..10 {
        let id = format!("job-{j}");
        register_job(&client, service_job(&id, 20, 100, 64)).await;
        jobs.push(id);
    }
    c.kill(leader).unwrap();
    let new_leader = c.wait_for_leader(ELECTION).await.unwrap();
    assert_ne!(new_leader, leader);
    for id in &jobs {
        let job = client
            .retrying(|cl| {
                let job_id = id.clone();
                async move {
                    Ok(cl
                        .jobs()
                        .get(JobGetRequest {
                            job_id,
                            query: None,
                        })
                        .await?
                        .into_inner())
                }
            })
            .await
            .unwrap();
        assert!(job.job.is_some(), "acknowledged job {id} was lost");
        wait_live(&client, id, 20).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_gets_clear_errors() {
    let mut c = Harness::start(1, &["--heartbeat-min-ttl", "600s"]);
    c.wait_for_leader(ELECTION).await.unwrap();
    let client = ClusterClient::new(&c.rpc_addrs()).unwrap();
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

    let err = client
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

#[tokio::test(flavor = "multi_thread")]
async fn client_updates_are_batched_and_a_failed_allocation_is_replaced() {
    // A long window so that concurrent calls from all servers meet in one batch.
    let mut c = Harness::start(
        3,
        &[
            "--heartbeat-min-ttl",
            "600s",
            "--alloc-update-window",
            "500ms",
        ],
    );
    let leader = c.wait_for_leader(ELECTION).await.unwrap();
    let client = ClusterClient::new(&c.rpc_addrs()).unwrap();
    register_nodes(&client, "n", 4, 1000, 4096).await;
    register_job(&client, service_job("web", 8, 100, 64)).await;
    let placed = wait_live(&client, "web", 8).await;

    // Every allocation reports running, one call each, through every server at once.
    let calls = placed.iter().enumerate().map(|(i, a)| {
        let c = ClusterClient::new(&[server_addr(&c, i)]).unwrap();
        let update = Allocation {
            id: a.id.clone(),
            client_status: AllocClientStatus::Running as i32,
            ..Default::default()
        };
        async move {
            c.nodes()
                .update_alloc(NodeUpdateAllocRequest {
                    allocs: vec![update],
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
        let all = allocs(&client, "web").await;
        all.iter()
            .all(|a| a.client_status == AllocClientStatus::Running as i32)
    })
    .await;
    let all = allocs(&client, "web").await;

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
        })
        .await
        .unwrap();
    // The failed allocation stays, as history, beside its replacement.
    eventually("the failed allocation is replaced", CATCH_UP, || async {
        let after = allocs(&client, "web").await;
        after.len() == 9 && live(&after).len() == 8 && live(&after).iter().all(|a| a.id != failed)
    })
    .await;
}

/// Server `i % 3`'s address, so calls spread over every server.
fn server_addr(c: &Harness, i: usize) -> String {
    let addrs = c.rpc_addrs();
    addrs[i % addrs.len()].clone()
}

/// One job registered `1 + changes` times (each with new `meta`, so each
/// makes an evaluation) while no worker runs, then workers started; returns
/// once the broker is empty and no evaluation of the job is pending.
async fn drain_a_burst_of_evaluations(
    cancelation: &str,
    changes: usize,
) -> (Harness, Vec<Evaluation>) {
    let mut c = Harness::start(
        1,
        &[
            "--heartbeat-min-ttl",
            "600s",
            "--workers",
            "0",
            "--eval-cancelation",
            cancelation,
        ],
    );
    let leader = c.wait_for_leader(ELECTION).await.unwrap();
    let client = ClusterClient::new(&c.rpc_addrs()).unwrap();
    register_nodes(&client, "n", 2, 4000, 16384).await;
    for rev in 0..=changes {
        let mut job = service_job("web", 1, 100, 64);
        job.task_groups[0]
            .meta
            .insert("rev".into(), rev.to_string());
        register_job(&client, job).await;
    }
    eventually("every evaluation waits in the broker", CATCH_UP, || async {
        c.metric(leader, "stampede_broker_ready").await.unwrap() == 1.0
            && c.metric(leader, "stampede_broker_waiting_on_job")
                .await
                .unwrap()
                == changes as f64
    })
    .await;

    for id in c.ids() {
        c.request(id, reqwest::Method::PUT, "/v1/workers?count=2")
            .await
            .unwrap();
    }
    let evals = || async {
        let req = JobEvaluationsRequest {
            job_id: "web".into(),
            query: None,
        };
        client
            .jobs()
            .evaluations(req)
            .await
            .unwrap()
            .into_inner()
            .evals
    };
    eventually(
        "the broker is empty and nothing is pending",
        CATCH_UP,
        || async {
            let mut empty = true;
            for series in [
                "stampede_broker_ready",
                "stampede_broker_unacked",
                "stampede_broker_waiting_on_job",
                "stampede_broker_cancelable",
            ] {
                empty &= c.metric(leader, series).await.unwrap() == 0.0;
            }
            empty
                && evals()
                    .await
                    .iter()
                    .all(|e| e.status != EvalStatus::Pending as i32)
        },
    )
    .await;
    let all = evals().await;
    assert_eq!(all.len(), changes + 1);
    (c, all)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ack_cancels_older_waiting_evaluations_in_few_batches_unless_switched_off() {
    const CHANGES: usize = 30;
    let count = |evals: &[Evaluation], status: EvalStatus| {
        evals.iter().filter(|e| e.status == status as i32).count()
    };

    let (on, evals) = drain_a_burst_of_evaluations("on", CHANGES).await;
    let canceled = count(&evals, EvalStatus::Canceled);
    assert!(
        canceled >= 20,
        "only {canceled} of {} canceled",
        evals.len()
    );
    assert_eq!(count(&evals, EvalStatus::Complete) + canceled, CHANGES + 1);
    assert!(evals
        .iter()
        .filter(|e| e.status == EvalStatus::Canceled as i32)
        .all(|e| e.status_description.contains("newer evaluation")));
    let metric = |series: &'static str| on.metric(1, series);
    assert_eq!(
        metric("stampede_evals_cancelled_total").await.unwrap(),
        canceled as f64
    );
    let batches = metric("stampede_eval_cancel_batches_total").await.unwrap();
    assert!((1.0..=3.0).contains(&batches), "{batches} cancel batches");
    assert!(
        metric("stampede_raft_entries_total{type=\"eval_update\"}")
            .await
            .unwrap()
            >= batches
    );
    drop(on);

    let (off, evals) = drain_a_burst_of_evaluations("off", CHANGES).await;
    assert_eq!(count(&evals, EvalStatus::Canceled), 0);
    assert_eq!(count(&evals, EvalStatus::Complete), CHANGES + 1);
    let metric = |series: &'static str| off.metric(1, series);
    assert_eq!(metric("stampede_evals_cancelled_total").await.unwrap(), 0.0);
    assert_eq!(
        metric("stampede_eval_cancel_batches_total").await.unwrap(),
        0.0
    );
    assert!(
        metric("stampede_worker_evals_processed_total")
            .await
            .unwrap()
            >= (CHANGES + 1) as f64
    );
}
