//! Failover of the control plane on a real 3-process cluster: `kill -9` of
//! the leader while it places jobs loses none it acknowledged, and the new
//! leader finishes placing them; a leader survives its followers dying
//! and coming back under writes; and a leader cut off from the others sends
//! its callers elsewhere once its lease is past.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{eventually_has_node, register_nodes, wait_live};
use stampede_launch::testing::{
    eventually, register_job, secret_of, service_job, Harness, CATCH_UP, POLL,
};
use stampede_proto::client::ClusterClient;
use stampede_proto::{
    JobGetRequest, JobRegisterRequest, NodeClientAllocsReply, NodeClientAllocsRequest, QueryOptions,
};
use tonic::Code;

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

/// A node's allocation query on `client`'s server, parked past `min_index`
/// for up to two minutes (0: a plain read).
async fn client_allocs(
    client: ClusterClient,
    node_id: &str,
    min_index: u64,
) -> Result<NodeClientAllocsReply, tonic::Status> {
    let req = NodeClientAllocsRequest {
        secret_id: secret_of(node_id),
        node_id: node_id.into(),
        query: (min_index > 0).then(|| QueryOptions {
            min_index,
            max_wait_ms: 120_000,
            source: "client_allocs".into(),
        }),
        with_changed: true,
        changed_only: false,
    };
    Ok(client.nodes().get_client_allocs(req).await?.into_inner())
}

/// A leader cut off from the others (its peer links cut both ways) still
/// believes it leads: openraft steps down only on hearing a higher term.
/// Once its lease is past it stops acting the leader: a node's query parked
/// on it ends `Unavailable` (so the node asks a server whose state moves),
/// and a write sent to it is answered `Unavailable`, never a definite error,
/// instead of waiting for a commit that cannot come. The others elect a
/// successor that takes writes; healed, the old leader serves again.
#[tokio::test(flavor = "multi_thread")]
async fn a_leader_cut_off_from_the_others_sends_its_callers_elsewhere() {
    let mut c = Harness::start_with_links(3, &["--heartbeat-min-ttl", "600s"]);
    let old = c.leader().await;
    let client = c.client();
    register_nodes(&client, "n", 1, 1000, 4096).await;
    let on_old = c.client_of(&[old]);
    eventually_has_node(&on_old, "n-0").await;
    let index = client_allocs(on_old.clone(), "n-0", 0)
        .await
        .expect("a plain read")
        .index;
    let parked = tokio::spawn(client_allocs(on_old.clone(), "n-0", index));
    let inflight = "stampede_blocking_queries_inflight{source=\"client_allocs\"}";
    eventually(
        "the node's query is parked on the leader",
        CATCH_UP,
        || async { c.metric(old, inflight).await.unwrap_or(0.0) == 1.0 },
    )
    .await;

    c.partition(old).unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(60), parked)
        .await
        .expect("the parked query ends long before its two-minute wait")
        .unwrap();
    let status = ended.expect_err("the cut-off leader answers no allocations");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("no quorum has acknowledged it")
            && status.message().contains("ask another server"),
        "{}",
        status.message()
    );
    let write = on_old
        .jobs()
        .register(JobRegisterRequest {
            job: Some(service_job("sent-to-the-cut-off-leader", 1, 100, 64)),
        })
        .await
        .expect_err("a cut-off leader takes no write");
    assert_eq!(write.code(), Code::Unavailable, "{write:?}");
    assert!(
        write.message().contains("try another server"),
        "{}",
        write.message()
    );

    // The others elect a successor, which takes writes.
    let others = c.client_of(&c.ids_except(old));
    register_job(&others, service_job("after-the-cut", 1, 100, 64)).await;

    // Healed, the old leader follows the new one and serves queries again.
    c.heal(old).unwrap();
    eventually(
        "the old leader serves a node's query again",
        CATCH_UP,
        || {
            let on_old = on_old.clone();
            async move {
                let Ok(read) = client_allocs(on_old.clone(), "n-0", 0).await else {
                    return false;
                };
                // Parked past what it has: answered by the wait, not refused.
                let query = QueryOptions {
                    min_index: read.index,
                    max_wait_ms: 100,
                    source: "client_allocs".into(),
                };
                let req = NodeClientAllocsRequest {
                    secret_id: secret_of("n-0"),
                    node_id: "n-0".into(),
                    query: Some(query),
                    with_changed: true,
                    changed_only: false,
                };
                on_old.nodes().get_client_allocs(req).await.is_ok()
            }
        },
    )
    .await;
}

/// A follower that knows no leader yet, in an election, holds a node's
/// heartbeat until there is one to send it to, as Nomad's servers hold an
/// RPC, instead of refusing it (the node would come back only after its
/// backoff). The leader is killed and one follower paused, so the other
/// campaigns and can win only once the paused one is resumed; a heartbeat
/// sent to it meanwhile is answered once the election is won. (Election
/// timeouts of 2 s make the lease, and the hold, 8 s: time for the test to
/// see the call held and resume the other follower, and for the election,
/// on a machine busy with other tests. With 1 s, a held call once ran out
/// at 4.3 s: the asked server, starved for a moment, took itself for
/// woken and campaigned 3 s after the resume.)
#[tokio::test(flavor = "multi_thread")]
async fn a_follower_in_an_election_holds_a_nodes_heartbeat_until_a_leader_is_elected() {
    // No scheduler workers: their dequeues would be held too.
    let args = [
        "--election-timeout-ms",
        "2000",
        "--heartbeat-min-ttl",
        "600s",
        "--workers",
        "0",
    ];
    let (mut c, leader) = Harness::with_leader(3, &args).await;
    register_nodes(&c.client(), "n", 1, 1000, 4096).await;
    let others = c.ids_except(leader);
    let (asked, paused) = (others[0], others[1]);
    eventually_has_node(&c.client_of(&[asked]), "n-0").await;
    c.kill(leader).unwrap();
    c.pause(paused).unwrap();
    c.wait_for_status(asked, "campaigns, knowing no leader", CATCH_UP, |s| {
        s.leader_id.is_none()
    })
    .await
    .unwrap();
    let heartbeat = tokio::spawn({
        let on_asked = c.client_of(&[asked]);
        async move {
            let req = stampede_proto::NodeUpdateStatusRequest {
                node_id: "n-0".into(),
                status: stampede_proto::NodeStatus::Ready as i32,
                secret_id: secret_of("n-0"),
            };
            on_asked.nodes().update_status(req).await
        }
    });
    // Held, not refused, while no leader can be elected.
    eventually(
        "the heartbeat is held on the follower",
        CATCH_UP,
        || async {
            c.metric(asked, "stampede_leader_calls_held")
                .await
                .unwrap_or(0.0)
                == 1.0
        },
    )
    .await;
    assert!(!heartbeat.is_finished(), "answered without a leader");
    c.resume(paused).unwrap();
    let answer = heartbeat.await.unwrap();
    let reply = answer.expect("the heartbeat reaches the new leader");
    assert!(reply.get_ref().heartbeat_ttl_ms > 0, "{reply:?}");
}

/// A server paused (SIGSTOP) answers nothing while its sockets stay open.
/// A caller that watches the servers' liveness echo gives up on a call
/// parked there once the echo stops, with a status that says so, and its
/// silent hooks run; without the echo the call would wait for the
/// connection's HTTP/2 ping to fail (1-1.5 s), after raft's new leader.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_parked_on_a_paused_server_fails_when_its_liveness_echo_stops() {
    let (mut c, leader) = Harness::with_leader(3, &["--heartbeat-min-ttl", "600s"]).await;
    register_nodes(&c.client(), "n", 1, 1000, 4096).await;
    let paused = c.ids_except(leader)[0];
    eventually_has_node(&c.client_of(&[paused]), "n-0").await;
    // Only this server, one attempt: the call's status is its own.
    let on_paused = c
        .client_of(&[paused])
        .with_retry_for(Duration::ZERO)
        .with_attempt_timeout(Duration::from_secs(60))
        .with_liveness();
    let hooked = Arc::new(AtomicU64::new(0));
    on_paused.on_silent({
        let hooked = hooked.clone();
        move |channel| {
            assert_eq!(channel, 0);
            hooked.fetch_add(1, Ordering::Relaxed);
        }
    });
    eventually("the paused server's echo is heard", CATCH_UP, || async {
        on_paused.watches(0)
    })
    .await;
    let index = client_allocs(c.client_of(&[paused]), "n-0", 0)
        .await
        .unwrap()
        .index;
    let parked = tokio::spawn({
        let on_paused = on_paused.clone();
        async move {
            on_paused
                .retrying(|one| client_allocs(one, "n-0", index + 1_000_000))
                .await
        }
    });
    eventually("the query is parked", CATCH_UP, || async {
        let inflight = "stampede_blocking_queries_inflight{source=\"client_allocs\"}";
        c.metric(paused, inflight).await.unwrap_or(0.0) >= 1.0
    })
    .await;
    c.pause(paused).unwrap();
    let failed = parked
        .await
        .unwrap()
        .expect_err("a paused server answers nothing");
    c.resume(paused).unwrap();
    assert_eq!(failed.code(), Some(Code::Unavailable), "{failed:?}");
    assert!(
        failed.to_string().contains("liveness echo"),
        "given up at the echo's silence, not at the ping's: {failed}"
    );
    assert_eq!(hooked.load(Ordering::Relaxed), 1, "the hook ran once");
}
