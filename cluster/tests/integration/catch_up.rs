//! A follower that fell behind the leader's log catches up through a
//! snapshot sent and installed while the leader goes on writing, and no one
//! holds an election over it (`raft::catch_up` keeps the entries after the
//! snapshot being sent; the snapshot is built, sent and installed off raft's
//! threads).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use stampede_launch::testing::{eventually_ok, node, register_node, Harness, CATCH_UP};

const INSTALLED: &str = "stampede_raft_snapshots_installed_total";
const WINDOW: &str = "stampede_raft_catch_up_window_entries";

/// Writers registering nodes through `client` until `stop`; counts the
/// acknowledged ones in `acked`.
fn writers(
    client: &stampede_proto::client::ClusterClient,
    stop: &Arc<AtomicBool>,
    acked: &Arc<AtomicU64>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..4)
        .map(|w| {
            let (client, stop, acked) = (client.clone(), stop.clone(), acked.clone());
            tokio::spawn(async move {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    if register_node(&client, node(&format!("w{w}-{n}")))
                        .await
                        .is_ok()
                    {
                        acked.fetch_add(1, Ordering::Relaxed);
                    }
                    n += 1;
                }
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_follower_killed_while_the_leader_writes_past_its_log_catches_up_through_a_snapshot() {
    // A snapshot every 40 entries, 10 kept behind it: a follower away for a
    // few hundred writes finds its place purged.
    let args = ["--snapshot-entries", "40", "--keep-entries", "10"];
    let (mut c, leader) = Harness::with_leader(3, &args).await;
    let term = c.status(leader).await.unwrap().term;
    let client = c.client_of(&[leader]);
    let (stop, acked) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let writing = writers(&client, &stop, &acked);

    let follower = c.ids_except(leader)[0];
    let away = c.status(follower).await.unwrap().last_log_index;
    c.kill(follower).unwrap();
    // The leader writes on, builds snapshots and purges its log well past
    // where the follower stopped.
    eventually_ok(
        "the leader purges its log past the killed follower",
        CATCH_UP,
        || async {
            let s = c.status(leader).await.map_err(|e| e.to_string())?;
            match s.purged_index {
                Some(p) if p > away + 100 => Ok(()),
                _ => Err(format!("{s:?} (the follower stopped at {away})")),
            }
        },
    )
    .await;
    let window = c.metric(leader, WINDOW).await.unwrap();
    assert!(
        window >= 10.0,
        "the window keeps --keep-entries at least: {window}"
    );

    // Back on its own data dir, with the writes still coming.
    c.spawn(follower).unwrap();
    let target = c.status(leader).await.unwrap().last_log_index;
    c.wait_for_status(follower, "caught up with the leader", CATCH_UP, |s| {
        s.applied_index >= target
    })
    .await
    .unwrap();
    let installed = c.metric(follower, INSTALLED).await.unwrap();
    assert!(
        installed >= 1.0,
        "the follower caught up through a snapshot"
    );
    let timed = c
        .metric(follower, "stampede_raft_snapshot_install_seconds_count")
        .await
        .unwrap();
    assert_eq!(timed, installed, "each install is timed");

    stop.store(true, Ordering::Relaxed);
    for w in writing {
        w.await.unwrap();
    }
    assert!(acked.load(Ordering::Relaxed) > 0);
    // Nobody campaigned: the leader and its term are the ones it started with.
    for id in c.ids() {
        let s = c.status(id).await.unwrap();
        assert_eq!(
            (s.term, s.leader_id),
            (term, Some(leader)),
            "server {id}: {s:?}"
        );
    }
    // And the follower holds every write the leader acknowledged.
    let last = c.status(leader).await.unwrap().last_log_index;
    c.wait_for_status(follower, "applied every write", CATCH_UP, |s| {
        s.applied_index >= last
    })
    .await
    .unwrap();
    let count = |id| {
        let client = c.client_of(&[id]);
        async move {
            client
                .nodes()
                .list(stampede_proto::NodeListRequest::default())
                .await
                .unwrap()
                .into_inner()
                .nodes
                .len()
        }
    };
    assert_eq!(count(follower).await, count(leader).await);
}
