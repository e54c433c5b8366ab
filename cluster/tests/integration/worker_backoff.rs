//! Seed 004 on a real cluster: a follower whose state lags far behind the
//! leader nacks the evaluations its workers dequeue (`raft_sync_timeout`).
//! With `--worker-raft-backoff on` its workers then wait for their state to
//! catch up instead of taking evaluations again at once, so they give back
//! far fewer; the other servers' workers place every job either way.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::worker_states;
use stampede_launch::testing::{
    allocs, eventually, node, register_job, register_node, service_job, Harness, CATCH_UP, ELECTION,
};
use stampede_proto::client::ClusterClient;
use stampede_proto::AllocDesiredStatus;

const NODES: usize = 10;
/// Enough that, without backoff, the lagging follower's nacks stay well
/// above the floor the comparison needs: their count varies with which
/// worker asks first (17 to 31 in four runs at 60 jobs, and once 7).
const JOBS: usize = 90;
/// The lagging follower applies each batch of entries this late: far more
/// than the raft sync limit below.
const APPLY_DELAY: &str = "1s";
const SYNC_TIMEOUT_NACKS: &str = "stampede_worker_nacks_total{reason=\"raft_sync_timeout\"}";
const BACKOFF_SECONDS: &str = "stampede_worker_raft_backoff_seconds_total";

/// What the lagging follower's workers did during one run.
#[derive(Debug)]
struct Lagging {
    nacks: f64,
    backoffs: f64,
    backoff_seconds: f64,
    /// Whether `/v1/workers` ever showed a worker `backing_off`.
    seen_backing_off: bool,
}

async fn placed(client: &ClusterClient, job: &str) -> bool {
    allocs(client, job).await.is_ok_and(|allocs| {
        allocs
            .iter()
            .any(|a| a.desired_status == AllocDesiredStatus::Run as i32)
    })
}

/// Polls `/v1/workers` at `url` until `done`; true if a worker was backing off.
async fn watch_for_backing_off(http: reqwest::Client, url: String, done: Arc<AtomicBool>) -> bool {
    while !done.load(Ordering::Relaxed) {
        if let Ok(states) = worker_states(&http, &url).await {
            if states.iter().any(|s| s == "backing_off") {
                return true;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    false
}

/// Runs the workload on a fresh cluster with `--worker-raft-backoff backoff`
/// and one follower restarted with `--apply-delay`.
async fn run(backoff: &str) -> Lagging {
    let (mut c, leader) = Harness::with_leader(
        3,
        &[
            "--raft-sync-limit",
            "200ms",
            "--worker-raft-backoff",
            backoff,
            "--workers",
            "2",
            "--heartbeat-min-ttl",
            "600s",
            // Without backoff the lagging follower gives each evaluation
            // back many times; keep them from failing at the default limit.
            "--delivery-limit",
            "100",
            // The seed's mechanism alone: nacked evaluations come back at
            // once, as they did before nack delays (which would otherwise
            // hold an evaluation nacked n times for 20 s × (n-1)).
            "--eval-nack-initial-delay",
            "0s",
            "--eval-nack-subsequent-delay",
            "0s",
        ],
    )
    .await;
    let lagging = c.ids_except(leader)[0];
    c.kill(lagging).unwrap();
    c.spawn_with(lagging, &["--apply-delay", APPLY_DELAY])
        .unwrap();
    c.wait_for_status(lagging, "it follows the leader", ELECTION, |s| {
        s.leader_id == Some(leader)
    })
    .await
    .unwrap();

    // Clients talk to the healthy servers only, so reads are not stale.
    let client = c.client_of(&c.ids_except(lagging));
    for i in 0..NODES {
        register_node(&client, node(&format!("n-{i}")))
            .await
            .unwrap();
    }

    let done = Arc::new(AtomicBool::new(false));
    let watcher = tokio::spawn(watch_for_backing_off(
        c.http_client().clone(),
        c.url(lagging, "/v1/workers").unwrap(),
        done.clone(),
    ));
    // One job at a time, each placed before the next is registered: every
    // evaluation waits in the broker for whichever worker asks first, so
    // the counts follow the number of jobs rather than how fast this
    // machine is.
    for i in 0..JOBS {
        let id = format!("job-{i}");
        register_job(&client, service_job(&id, 1, 100, 64)).await;
        eventually(&format!("{id} is placed"), CATCH_UP, || {
            placed(&client, &id)
        })
        .await;
    }
    done.store(true, Ordering::Relaxed);
    let seen_backing_off = watcher.await.unwrap();
    if backoff == "on" {
        // A backoff adds its time in steps while it lasts.
        eventually("backoff time is counted", CATCH_UP, || async {
            c.metric(lagging, BACKOFF_SECONDS).await.unwrap() > 0.0
        })
        .await;
    }

    // Every evaluation is done, so the lagging follower's workers hold none
    // (they count a nack before giving the evaluation back): final counts.
    assert_ne!(
        c.status(lagging).await.unwrap().state,
        "Leader",
        "the lagging server must stay a follower for the counts to mean anything"
    );
    Lagging {
        nacks: c.metric(lagging, SYNC_TIMEOUT_NACKS).await.unwrap(),
        backoffs: c
            .metric(lagging, "stampede_worker_raft_backoffs_total")
            .await
            .unwrap(),
        backoff_seconds: c.metric(lagging, BACKOFF_SECONDS).await.unwrap(),
        seen_backing_off,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lagging_follower_backs_off_instead_of_nacking_again_and_again() {
    let on = run("on").await;
    let off = run("off").await;
    eprintln!("lagging follower with backoff on: {on:?}; off: {off:?}");

    assert!(on.nacks >= 1.0, "the follower lagged: {on:?}");
    assert!(on.backoffs >= 1.0 && on.backoff_seconds > 0.0, "{on:?}");
    assert!(on.seen_backing_off, "{on:?}");
    assert_eq!((off.backoffs, off.backoff_seconds), (0.0, 0.0), "{off:?}");
    assert!(!off.seen_backing_off, "{off:?}");
    assert!(off.nacks >= 10.0, "too few nacks to compare: {off:?}");
    assert!(
        on.nacks * 3.0 < off.nacks,
        "backoff on: {} nacks, off: {}",
        on.nacks,
        off.nacks
    );
}
