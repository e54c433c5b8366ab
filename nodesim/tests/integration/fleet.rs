//! nodesim against a real three-server cluster of `cluster serve` processes.

use crate::common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use common::{fleet, job, opts, ready_nodes, running};
use nodesim::runner::{AllocReport, AllocRunner, AllocRunnerFactory, Reporter};
use nodesim::{Fleet, Summary};
use stampede_launch::testing::{allocs, eventually, register_job, Harness, CATCH_UP};
use stampede_proto::{AllocClientStatus, Allocation, AllocsGetRequest, JobDeregisterRequest};

/// The minimum runner a user writes: it comes up at once, healthy, and
/// records which allocations it ran.
struct Recording {
    alloc_id: String,
    reporter: Reporter,
    ran: Arc<Mutex<HashSet<String>>>,
}

impl AllocRunner for Recording {
    fn run(&mut self) {
        self.ran.lock().unwrap().insert(self.alloc_id.clone());
        self.reporter.report(AllocReport {
            client_status: AllocClientStatus::Running,
            description: "up".into(),
            task_state: "running".into(),
            healthy: Some(true),
        });
    }
    fn update(&mut self, _: &Allocation) {}
    fn destroy(&mut self) {
        self.reporter.report(AllocReport {
            client_status: AllocClientStatus::Complete,
            description: "stopped".into(),
            task_state: "dead".into(),
            healthy: None,
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_runner_runs_what_the_cluster_places() {
    let (h, _) = Harness::with_leader(3, &[]).await;
    let client = h.client();
    let ran = Arc::new(Mutex::new(HashSet::new()));
    let factory: AllocRunnerFactory = {
        let ran = ran.clone();
        Arc::new(move |alloc, reporter| {
            Box::new(Recording {
                alloc_id: alloc.id.clone(),
                reporter,
                ran: ran.clone(),
            })
        })
    };
    let fleet = Fleet::start(opts(&h, &["--nodes", "10"]), factory)
        .await
        .unwrap();
    ready_nodes(&h, 10.0).await;

    register_job(&client, job("api", 25, "dc1")).await;
    let placed = running(&client, "api", 25).await;
    let placed: HashSet<String> = placed.into_iter().map(|a| a.id).collect();
    assert_eq!(
        *ran.lock().unwrap(),
        placed,
        "the factory built a runner for each placement, and only those"
    );

    let summary = fleet.shutdown().await;
    assert_eq!(summary.runners_started, 25);
    assert_eq!(summary.ready, 10);
    assert_eq!(summary.allocs_with("running"), 25);
}

/// Runs the same job on a fleet of its own and returns its summary once every
/// allocation is healthy on the servers and nothing is left to send. A node
/// has room for one allocation only, so each node reports one allocation's
/// life, whichever way the scheduler packs.
async fn one_workload(h: &Harness, mode: &str) -> Summary {
    let fleet = fleet(
        h,
        &[
            "--nodes",
            "10",
            "--cpu-mhz",
            "150",
            "--update-mode",
            mode,
            "--datacenters",
            mode,
            "--id-prefix",
            mode,
        ],
    )
    .await;
    let client = h.client();
    register_job(&client, job(mode, 10, mode)).await;
    running(&client, mode, 10).await;
    fleet.shutdown().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prioritized_updates_send_fewer_rpcs_than_legacy() {
    let (h, _) = Harness::with_leader(3, &[]).await;
    let legacy = one_workload(&h, "legacy").await;
    let prioritized = one_workload(&h, "prioritized").await;
    eprintln!("{legacy}\n{prioritized}");
    for s in [&legacy, &prioritized] {
        assert_eq!(s.runners_started, 10);
        assert_eq!(s.errors.iter().map(|(_, n)| n).sum::<u64>(), 0);
    }
    // Each allocation reports received, three task events, running and
    // healthy: legacy sends most of them on their own tick; prioritized holds
    // all but the status change for the 5th tick.
    assert!(
        prioritized.update_rpcs_total() < legacy.update_rpcs_total(),
        "prioritized sent {} update RPCs, legacy {}",
        prioritized.update_rpcs_total(),
        legacy.update_rpcs_total()
    );
    // Updates held back are merged: fewer of them reach the servers too.
    assert!(
        prioritized.alloc_updates_sent < legacy.alloc_updates_sent,
        "prioritized sent {} allocation updates, legacy {}",
        prioritized.alloc_updates_sent,
        legacy.alloc_updates_sent
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_survives_a_leader_kill_and_restart() {
    let (mut h, _) = Harness::with_leader(3, &[]).await;
    let client = h.client();
    let fleet = fleet(&h, &["--nodes", "30"]).await;
    register_job(&client, job("before", 30, "dc1")).await;
    running(&client, "before", 30).await;

    let leader = h.leader().await;
    h.kill(leader).unwrap();
    let new_leader = h.leader().await;
    assert_ne!(new_leader, leader);
    register_job(&client, job("during", 30, "dc1")).await;
    running(&client, "during", 30).await;

    h.spawn(leader).unwrap();
    register_job(&client, job("after", 30, "dc1")).await;
    running(&client, "after", 30).await;
    ready_nodes(&h, 30.0).await;
    // A node whose last heartbeat failed (to the restarted server, say)
    // shows as disconnected until its retry gets through.
    eventually(
        "every simulated node's last heartbeat succeeded",
        CATCH_UP,
        || async { fleet.summary().ready == 30 },
    )
    .await;

    let summary = fleet.shutdown().await;
    eprintln!("{summary}");
    assert_eq!(summary.ready, 30, "every node heartbeats again");
    assert_eq!(summary.runners_started, 90);
    assert_eq!(summary.allocs_with("running"), 90);
}

/// A node is sent only what changed on it; a removal is no change, and the
/// node learns of it from the count of its allocations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocations_the_servers_collect_are_forgotten_by_their_nodes() {
    let (h, _) = Harness::with_leader(3, &[]).await;
    let fleet = fleet(&h, &["--nodes", "3"]).await;
    ready_nodes(&h, 3.0).await;
    let client = h.client();
    register_job(&client, job("kept", 3, "dc1")).await;
    register_job(&client, job("gone", 4, "dc1")).await;
    running(&client, "kept", 3).await;
    let gone: Vec<String> = running(&client, "gone", 4)
        .await
        .into_iter()
        .map(|a| a.id)
        .collect();
    eventually("nodesim runs all seven", CATCH_UP, || async {
        fleet.summary().allocs_with("running") == 7
    })
    .await;

    client
        .jobs()
        .deregister(JobDeregisterRequest {
            job_id: "gone".into(),
            purge: false,
        })
        .await
        .unwrap();
    eventually(
        "the servers see the stopped four complete",
        CATCH_UP,
        || async {
            let complete = AllocClientStatus::Complete as i32;
            allocs(&client, "gone")
                .await
                .is_ok_and(|a| a.iter().filter(|a| a.client_status == complete).count() == 4)
        },
    )
    .await;
    let s = fleet.summary();
    assert_eq!(
        (s.allocs_with("complete"), s.allocs_with("running")),
        (4, 3)
    );
    h.request(h.ids()[0], reqwest::Method::PUT, "/v1/system/gc")
        .await
        .unwrap();
    eventually("the servers collect the four", CATCH_UP, || async {
        let req = AllocsGetRequest {
            alloc_ids: gone.clone(),
            query: None,
        };
        let left = client.nodes().get_allocs(req).await;
        left.is_ok_and(|r| r.into_inner().allocs.is_empty())
    })
    .await;
    eventually(
        "the collected four are forgotten, the three running kept",
        CATCH_UP,
        || async {
            let s = fleet.summary();
            s.allocs_with("complete") == 0 && s.allocs_with("running") == 3
        },
    )
    .await;
    fleet.shutdown().await;
}
