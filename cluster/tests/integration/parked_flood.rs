//! Issue 41's parked-query flood, in a file of its own so that nothing else
//! runs beside it while it times registrations: thousands of queries parked
//! above the index on a follower must not slow the writes through it.

use crate::common;

use common::flood;
use stampede_launch::testing::{eventually, register_job, service_job, Harness, CATCH_UP};
use stampede_proto::client::ClusterClient;

/// The p99 of job registrations through `client`, submitted open-loop at
/// 20 a second (each on its own task, so a slow one does not delay the
/// next), as the probe did.
async fn registration_p99(client: &ClusterClient, prefix: &str, n: usize) -> std::time::Duration {
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(50));
    let mut calls = Vec::with_capacity(n);
    for i in 0..n {
        tick.tick().await;
        let client = client.clone();
        let job = service_job(&format!("{prefix}-{i}"), 1, 10, 16);
        calls.push(tokio::spawn(async move {
            let start = std::time::Instant::now();
            register_job(&client, job).await;
            start.elapsed()
        }));
    }
    let mut took = Vec::with_capacity(n);
    for call in calls {
        took.push(call.await.unwrap());
    }
    took.sort();
    took[(n * 99).div_ceil(100) - 1]
}

/// Issue 41's probe: thousands of job-list queries parked on a follower,
/// far above the index, while jobs register through that follower. No
/// registration wakes them (each is below the index they wait to pass), so
/// registration's p99 stays within twice its value without the flood (with
/// 25 ms of slack for one core's scheduling on a small p99).
#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_parked_list_queries_leaves_registration_latency_alone() {
    const PARKED: usize = 5_000;
    let (c, leader) = Harness::with_leader(3, &[]).await;
    let follower = c.ids_except(leader)[0];
    let client = c.client_of(&[follower]);
    // A table worth copying: every wake used to copy all of it.
    for i in 0..300 {
        register_job(&client, service_job(&format!("before-{i}"), 1, 10, 16)).await;
    }
    let quiet = registration_p99(&client, "quiet", 200).await;

    // 5 connections, each under its bound of parked queries and streams.
    let conns: Vec<ClusterClient> = (0..5).map(|_| c.client_of(&[follower])).collect();
    let mut parked = Vec::new();
    let mut refusals = Vec::new();
    for conn in &conns {
        let (p, r) = flood(conn, PARKED / conns.len());
        parked.extend(p);
        refusals.push(r);
    }
    let inflight = "stampede_blocking_queries_inflight{source=\"other\"}";
    eventually("the flood is parked", CATCH_UP, || async {
        c.metric(follower, inflight).await.unwrap_or(-1.0) == PARKED as f64
    })
    .await;
    let wakeups = "stampede_blocking_query_wakeups_total{source=\"other\"}";
    let woken_before = c.metric(follower, wakeups).await.unwrap();

    let flooded = registration_p99(&client, "flooded", 200).await;
    let woken = c.metric(follower, wakeups).await.unwrap() - woken_before;
    assert_eq!(woken, 0.0, "no write below their index woke them");
    for r in &mut refusals {
        assert!(r.try_recv().is_err(), "no parked query was refused");
    }
    assert_eq!(
        c.metric(follower, inflight).await.unwrap(),
        PARKED as f64,
        "the flood is still parked: none of it answered"
    );
    let bound = (quiet * 2).max(quiet + std::time::Duration::from_millis(25));
    assert!(
        flooded <= bound,
        "registration p99 {flooded:?} with {PARKED} parked queries, {quiet:?} without"
    );
    eprintln!("registration p99: {quiet:?} quiet, {flooded:?} with {PARKED} parked");
    parked.into_iter().for_each(|p| p.abort());
}
