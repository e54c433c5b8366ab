//! Failover of the control plane on a real 3-process cluster: `kill -9` of
//! the leader while it places jobs loses none it acknowledged, and the new
//! leader finishes placing them; and a leader survives its followers dying
//! and coming back under writes.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{register_nodes, wait_live};
use stampede_launch::testing::{register_job, service_job, Harness, CATCH_UP, POLL};
use stampede_proto::JobGetRequest;

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_of_the_leader_mid_placement_loses_no_acknowledged_job() {
    let (mut c, leader) = Harness::with_leader(3, &["--heartbeat-min-ttl", "600s"]).await;
    let client = c.client().with_retry_for(Duration::from_secs(30));
    register_nodes(&client, "n", 10, 4000, 16384).await;
    let mut jobs = Vec::new();
    for j in 0..10 {
        let id = format!("job-{j}");
        register_job(&client, service_job(&id, 20, 100, 64)).await;
        jobs.push(id);
    }
    c.kill(leader).unwrap();
    let new_leader = c.leader().await;
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

/// A follower killed with -9 resets its connections while the leader is
/// writing to them. A server that took the default SIGPIPE disposition died
/// of that (hyper writes with `writev`, which raises SIGPIPE on a reset
/// socket); it must see an error on that connection and go on leading.
#[tokio::test(flavor = "multi_thread")]
async fn the_leader_survives_its_followers_killed_and_restarted_under_writes() {
    let (mut c, leader) = Harness::with_leader(3, &[]).await;
    let client = c.client_of(&[leader]);
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (client, stop, acked) = (client.clone(), stop.clone(), acked.clone());
            tokio::spawn(async move {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let job = service_job(&format!("w{w}-{n}"), 1, 10, 16);
                    if client.register_job(job).await.is_ok() {
                        acked.fetch_add(1, Ordering::Relaxed);
                    }
                    n += 1;
                }
            })
        })
        .collect();
    let followers = c.ids_except(leader);
    for round in 0..8 {
        for &f in &followers {
            // Kill the follower while writes stream to it, and wait until the
            // leader has acknowledged more writes with it down.
            let before = acked.load(Ordering::Relaxed);
            c.kill(f).unwrap();
            let deadline = Instant::now() + CATCH_UP;
            while acked.load(Ordering::Relaxed) < before + 20 {
                assert!(
                    c.is_running(leader),
                    "the leader died in round {round} after follower {f} was killed:\n{}",
                    c.log(leader)
                );
                assert!(
                    Instant::now() < deadline,
                    "no writes acknowledged with {f} down"
                );
                tokio::time::sleep(POLL).await;
            }
            // Restart it on its own data dir and wait until it caught up.
            c.spawn(f).unwrap();
            let target = c.status(leader).await.unwrap().last_log_index;
            c.wait_for_status(f, "caught up with the leader", CATCH_UP, |s| {
                s.applied_index >= target
            })
            .await
            .unwrap();
            assert!(
                c.is_running(leader),
                "the leader died in round {round} after follower {f} was killed and restarted:\n{}",
                c.log(leader)
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    assert!(c.is_running(leader), "the leader died:\n{}", c.log(leader));
    assert!(acked.load(Ordering::Relaxed) > 0);
}
