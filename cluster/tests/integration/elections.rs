//! An election only when the leader is gone, on a real 3-process cluster
//! under writes: a follower that was stopped (SIGSTOP) or restarted wakes
//! with its election timer long past, and asks before it campaigns; the
//! others heard from their leader within the lease, so it raises no term
//! and the leader keeps leading. A leader that is really gone is still
//! replaced, and the server that started that election says so.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use stampede_launch::testing::{eventually, node, register_node, Harness, CATCH_UP};
use stampede_launch::NodeId;
use stampede_proto::client::ClusterClient;
use tokio::task::JoinHandle;

const ELECTIONS_STARTED: &str = "stampede_raft_elections_started_total";
const ELECTION_STARTED_TERM: &str = "stampede_raft_election_started_term";
const CAMPAIGNS_STOPPED: &str = "stampede_raft_campaigns_stopped_total";
const STALLS: &str = "stampede_raft_stalls_total";

/// Writers that register nodes until told to stop; each counts its
/// acknowledged writes.
struct Load {
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicU64>,
    tasks: Vec<JoinHandle<Result<(), String>>>,
}

impl Load {
    fn start(client: &ClusterClient, writers: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicU64::new(0));
        let tasks = (0..writers)
            .map(|w| {
                let (client, stop, acked) = (client.clone(), stop.clone(), acked.clone());
                tokio::spawn(async move {
                    let mut i = 0;
                    while !stop.load(Ordering::Relaxed) {
                        register_node(&client, node(&format!("w{w}-{i}")))
                            .await
                            .map_err(|e| format!("writer {w}, write {i}: {e}"))?;
                        acked.fetch_add(1, Ordering::Relaxed);
                        i += 1;
                    }
                    Ok(())
                })
            })
            .collect();
        Self { stop, acked, tasks }
    }

    /// Waits until `more` writes past what was acknowledged so far are.
    async fn goes_on_for(&self, more: u64) {
        let from = self.acked.load(Ordering::Relaxed);
        eventually("writes go on", CATCH_UP, || async {
            self.acked.load(Ordering::Relaxed) >= from + more
        })
        .await;
    }

    async fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap().unwrap();
        }
        self.acked.load(Ordering::Relaxed)
    }
}

/// Every server's term, read from its status.
async fn terms(c: &Harness) -> Vec<(NodeId, u64)> {
    let mut terms = Vec::new();
    for id in c.ids() {
        terms.push((id, c.status(id).await.unwrap().term));
    }
    terms
}

/// The elections each server started so far.
async fn started(c: &Harness) -> std::collections::BTreeMap<NodeId, f64> {
    let mut started = std::collections::BTreeMap::new();
    for id in c.ids() {
        started.insert(id, c.metric(id, ELECTIONS_STARTED).await.unwrap());
    }
    started
}

/// Waits until `id` has applied every entry the leader had when asked.
async fn caught_up(c: &Harness, leader: NodeId, id: NodeId) {
    let target = c.status(leader).await.unwrap().last_log_index;
    eventually(&format!("server {id} catches up"), CATCH_UP, || async {
        c.status(id).await.is_ok_and(|s| s.applied_index >= target)
    })
    .await;
}

/// Asserts that after a follower's fault no server started an election and
/// every term and the leader are as before. The woken follower campaigns,
/// if it does, at its first look after it runs again, before it has caught
/// up; a term it raised reaches the leader in its next answer. So two more
/// rounds of entries from the leader applied on every server (each one an
/// answer from each follower) are enough to see any election.
async fn assert_no_election(
    c: &Harness,
    leader: NodeId,
    before: &[(NodeId, u64)],
    started: &std::collections::BTreeMap<NodeId, f64>,
) {
    for _ in 0..2 {
        for id in c.ids_except(leader) {
            caught_up(c, leader, id).await;
        }
    }
    assert_eq!(
        terms(c).await,
        before,
        "a term changed: an election happened"
    );
    // Forming the cluster may have taken an election or two: none since.
    for id in c.ids() {
        let since = c.metric(id, ELECTIONS_STARTED).await.unwrap();
        let formed = started[&id];
        assert!(
            since <= formed,
            "server {id} started an election: {since} started, {formed} before the fault"
        );
    }
    // A server whose raft did not run for a second on this busy machine
    // names no leader until the leader's next message: not an election.
    eventually("every server names the leader", CATCH_UP, || async {
        for id in c.ids() {
            if c.status(id).await.map(|s| s.leader_id).ok() != Some(Some(leader)) {
                return false;
            }
        }
        true
    })
    .await;
}

/// A cluster under writes, with a leader, the follower a test strikes, and
/// every server's term and elections started before it does.
struct Steady {
    c: Harness,
    leader: NodeId,
    follower: NodeId,
    load: Load,
    before: Vec<(NodeId, u64)>,
    formed: std::collections::BTreeMap<NodeId, f64>,
}

impl Steady {
    async fn start() -> Self {
        let (c, leader) = Harness::with_leader(3, &[]).await;
        let client = c.client().with_retry_for(Duration::from_secs(30));
        let load = Load::start(&client, 4);
        load.goes_on_for(100).await;
        let (before, formed) = (terms(&c).await, started(&c).await);
        let follower = c.ids_except(leader)[0];
        Self {
            c,
            leader,
            follower,
            load,
            before,
            formed,
        }
    }

    /// Once the struck follower caught up: see [`assert_no_election`].
    async fn assert_no_election(&self) {
        caught_up(&self.c, self.leader, self.follower).await;
        assert_no_election(&self.c, self.leader, &self.before, &self.formed).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_follower_stopped_for_3_s_under_writes_does_not_depose_the_leader() {
    let mut s = Steady::start().await;
    s.c.pause(s.follower).unwrap();
    // The fault itself: three times the longest election timeout and lease.
    tokio::time::sleep(Duration::from_secs(3)).await;
    s.load.goes_on_for(100).await;
    s.c.resume(s.follower).unwrap();

    s.assert_no_election().await;
    let stopped = s.c.metric(s.follower, CAMPAIGNS_STOPPED).await.unwrap();
    eprintln!("the stopped follower's campaigns stopped by its pre-vote: {stopped}");
    assert!(s.load.stop().await > 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_follower_restarted_under_writes_does_not_depose_the_leader() {
    let mut s = Steady::start().await;
    s.c.kill(s.follower).unwrap();
    s.load.goes_on_for(300).await;
    s.c.spawn(s.follower).unwrap();

    s.assert_no_election().await;
    assert!(s.load.stop().await > 400);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_leader_is_replaced_and_its_successor_says_it_started_the_election() {
    let (mut c, leader) = Harness::with_leader(3, &[]).await;
    let term = c.status(leader).await.unwrap().term;
    c.kill(leader).unwrap();
    let successor = c.leader().await;
    assert_ne!(successor, leader);
    let new_term = c.status(successor).await.unwrap().term;
    assert!(new_term > term);
    // The successor won the election it started; a server that started
    // one names its term, and only the two that were left started any.
    assert_eq!(
        c.metric(successor, ELECTION_STARTED_TERM).await.unwrap() as u64,
        new_term
    );
    assert!(c.metric(successor, ELECTIONS_STARTED).await.unwrap() >= 1.0);
}

/// A server whose pre-vote waits on a voter that does not answer (paused:
/// its socket is open, its process stopped) spent that wait itself; it did
/// not stop running. Counting the wait as a stall put its next campaign a
/// lease further off after every round, so once the paused voter ran again
/// the cluster stayed without a leader longer than a node's held call
/// waits. The paused voter, which really did not run, counts its stall.
#[tokio::test(flavor = "multi_thread")]
async fn a_pre_vote_round_waiting_on_a_paused_voter_is_not_a_stall() {
    // Timeouts of 1 s: each round waits 1 s on the paused voter, and only
    // a gap of 0.6 s between looks counts as a stall, well above what a
    // busy test machine starves a process for.
    let (mut c, leader) = Harness::with_leader(3, &["--election-timeout-ms", "1000"]).await;
    let others = c.ids_except(leader);
    let (asking, paused) = (others[0], others[1]);
    let stalls_before = c.metric(asking, STALLS).await.unwrap();
    let paused_stalls_before = c.metric(paused, STALLS).await.unwrap();
    let stopped_before = c.metric(asking, CAMPAIGNS_STOPPED).await.unwrap();
    c.kill(leader).unwrap();
    c.pause(paused).unwrap();
    // Three rounds, each waiting on the paused voter for its answer.
    eventually("three pre-vote rounds find no quorum", CATCH_UP, || async {
        c.metric(asking, CAMPAIGNS_STOPPED).await.unwrap_or(0.0) >= stopped_before + 3.0
    })
    .await;
    assert_eq!(
        c.metric(asking, STALLS).await.unwrap(),
        stalls_before,
        "server {asking} took its own pre-vote rounds for stalls"
    );
    c.resume(paused).unwrap();
    let successor = c.leader().await;
    assert_ne!(successor, leader);
    assert!(
        c.metric(paused, STALLS).await.unwrap() > paused_stalls_before,
        "server {paused} was stopped and did not count it"
    );
}
