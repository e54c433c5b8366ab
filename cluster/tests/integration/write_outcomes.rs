//! What a write's answer promises, on a real 3-process cluster: a definite
//! refusal means the write did not happen, and a refusal that depends on
//! the state (no such job) is decided where the state is current, never
//! by a server that is behind: a follower whose applies lag, or a leader
//! that was paused and does not yet know it was replaced.

use std::time::Duration;

use stampede_launch::testing::{
    eventually, eventually_ok, register_job, service_job, Harness, CATCH_UP,
};
use stampede_launch::NodeId;
use stampede_proto::client::ClusterClient;
use stampede_proto::{JobDeregisterRequest, JobGetRequest};
use tonic::Code;

fn purge(job_id: &str) -> JobDeregisterRequest {
    JobDeregisterRequest {
        job_id: job_id.into(),
        purge: true,
    }
}

/// Whether server `id` (through `client`, a client of it alone) has job
/// `job_id` in its own state.
async fn has_job(client: &ClusterClient, job_id: &str) -> Result<bool, tonic::Status> {
    let req = JobGetRequest {
        job_id: job_id.into(),
        query: None,
    };
    match client.jobs().get(req).await {
        Ok(_) => Ok(true),
        Err(s) if s.code() == Code::NotFound => Ok(false),
        Err(s) => Err(s),
    }
}

/// Waits until every server but `except` names one leader, other than
/// `except`, in a term past `term`; returns it.
async fn new_leader(c: &Harness, except: NodeId, term: u64) -> NodeId {
    eventually_ok("the others elect a new leader", CATCH_UP, || async {
        let mut named = Vec::new();
        for id in c.ids_except(except) {
            let s = c.status(id).await.map_err(|e| e.to_string())?;
            named.push((s.term > term).then_some(s.leader_id).flatten());
        }
        match named[..] {
            [Some(a), Some(b)] if a == b && a != except => Ok(a),
            _ => Err(format!("leaders named in a new term: {named:?}")),
        }
    })
    .await
}

/// Waits until every server but `except` names one leader, other than
/// `except`, that says it leads; returns it. A leader restarted at once
/// may lead again in its own term, so no new term is asked for.
async fn settled_leader(c: &Harness, except: NodeId) -> NodeId {
    eventually_ok("the servers settle on a leader", CATCH_UP, || async {
        let mut named = Vec::new();
        for id in c.ids_except(except) {
            named.push(c.status(id).await.map_err(|e| e.to_string())?.leader_id);
        }
        let [Some(a), Some(b)] = named[..] else {
            return Err(format!("leaders named: {named:?}"));
        };
        let leads = c.status(a).await.map_err(|e| e.to_string())?.state == "Leader";
        match a == b && a != except && leads {
            true => Ok(a),
            false => Err(format!("leaders named: {named:?}")),
        }
    })
    .await
}

/// What each server says of itself (role, term, leader, log and applied
/// indexes), for a wait's failure message: a stall shows where it is.
async fn cluster_view(c: &Harness) -> String {
    let mut seen = Vec::new();
    for id in c.ids() {
        seen.push(match c.status(id).await {
            Ok(s) => format!(
                "{id}: {} term {} leader {:?} log {} applied {}",
                s.state, s.term, s.leader_id, s.last_log_index, s.applied_index
            ),
            Err(e) => format!("{id}: {e}"),
        });
    }
    seen.join("; ")
}

/// The local TCP sockets (IPv4) as `/proc/net/tcp` lists them: local
/// port, remote port, bytes waiting unread, inode.
fn tcp_sockets() -> Vec<(u16, u16, u64, u64)> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let hex_after_colon = |s: &str| {
        s.rsplit(':')
            .next()
            .and_then(|h| u64::from_str_radix(h, 16).ok())
    };
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            Some((
                hex_after_colon(cols.get(1)?)? as u16,
                hex_after_colon(cols.get(2)?)? as u16,
                hex_after_colon(cols.get(4)?)?,
                cols.get(9)?.parse().ok()?,
            ))
        })
        .collect()
}

/// Whether bytes this process sent to local TCP port `port` wait unread in
/// the receiving socket: a request has reached a server that is paused.
/// Only this process's connections count, not the other servers' raft
/// messages to it.
fn our_bytes_waiting_at(port: u16) -> bool {
    let ours: std::collections::HashSet<u64> = std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            l.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect();
    let sockets = tcp_sockets();
    let our_ports: Vec<u16> = sockets
        .iter()
        .filter(|(_, remote, _, inode)| *remote == port && ours.contains(inode))
        .map(|(local, ..)| *local)
        .collect();
    sockets.iter().any(|(local, remote, waiting, _)| {
        *local == port && our_ports.contains(remote) && *waiting > 0
    })
}

/// A purge through a follower that has not applied the job's registration
/// yet is the leader's to decide: the follower sends it on instead of
/// answering `NotFound` from its own state. A purge of a job that exists
/// nowhere is still `NotFound`, from the leader.
#[tokio::test(flavor = "multi_thread")]
async fn a_purge_through_a_follower_that_is_behind_is_decided_by_the_leader() {
    let (mut c, leader) = Harness::with_leader(3, &["--heartbeat-min-ttl", "600s"]).await;
    let lagging = c.ids_except(leader)[0];
    c.kill(lagging).unwrap();
    c.spawn_with(lagging, &["--apply-delay", "3s"]).unwrap();
    let ahead = c.client_of(&[leader]);
    let behind = c.client_of(&[lagging]);
    eventually(
        "the lagging follower knows the leader",
        CATCH_UP,
        || async {
            c.status(lagging)
                .await
                .is_ok_and(|s| s.leader_id == Some(leader))
        },
    )
    .await;
    let registered = register_job(&ahead, service_job("web", 1, 100, 64)).await;
    let status = c.status(lagging).await.unwrap();
    assert!(
        status.applied_index < registered.index,
        "the follower lags: applied {} < {}",
        status.applied_index,
        registered.index
    );
    behind
        .jobs()
        .deregister(purge("web"))
        .await
        .expect("the leader, which has the job, purges it");
    assert!(!has_job(&ahead, "web").await.unwrap(), "the job is purged");
    let missing = behind
        .jobs()
        .deregister(purge("no-such-job"))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound, "{missing:?}");
    assert!(missing.message().contains("no-such-job"), "{missing:?}");
}

/// A leader that was paused wakes believing it still leads, on state from
/// before the pause. A purge of a job registered through its successor
/// meanwhile, sent to it while it slept, is not refused from that state:
/// the refusal would be checked with a quorum first, which tells the old
/// leader it was replaced, and the write goes to the new one.
#[tokio::test(flavor = "multi_thread")]
async fn a_leader_woken_from_a_pause_does_not_refuse_a_write_from_its_old_state() {
    let (mut c, old) = Harness::with_leader(3, &["--heartbeat-min-ttl", "600s"]).await;
    let to_old = c.client_of(&[old]);
    // The connection is open before the pause, so the call's bytes reach
    // the sleeping server's socket.
    assert!(!has_job(&to_old, "web").await.unwrap());
    let term = c.status(old).await.unwrap().term;
    c.pause(old).unwrap();
    let new = new_leader(&c, old, term).await;
    let to_new = c.client_of(&[new]);
    register_job(&to_new, service_job("web", 1, 100, 64)).await;
    let call = {
        let to_old = to_old.clone();
        tokio::spawn(async move { to_old.jobs().deregister(purge("web")).await })
    };
    let port = c.server(old).unwrap().rpc.port();
    eventually(
        "the purge waits in the paused server's socket",
        CATCH_UP,
        || async { our_bytes_waiting_at(port) },
    )
    .await;
    c.resume(old).unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .expect("the woken server answers")
        .unwrap();
    if let Err(s) = &answer {
        panic!("the purge was refused by a server that was behind: {s:?}");
    }
    assert!(!has_job(&to_new, "web").await.unwrap(), "the job is purged");
}

/// A follower sends a purge on to the leader, which commits it and is
/// paused before it answers. The follower tries again through the new
/// leader, which has applied the purge and finds no job: that `NotFound`
/// is the first attempt's own effect, so the answer is `Unavailable` (the
/// outcome is unknown), never a definite error for a write that took
/// effect.
///
/// The roles are set up with the servers' flags, each follower restarted
/// with its own while the first leader leads: the leader-to-be and the
/// follower the purge goes through apply slowly (so neither answers before
/// the pause), and that follower campaigns late. The first leader is then
/// stopped, so the slow-applying one is elected, and comes back fast: once
/// the slow leader is paused, it is the one elected.
#[tokio::test(flavor = "multi_thread")]
async fn a_forwarded_write_resent_across_a_leader_change_is_never_refused_for_its_own_effect() {
    const SLOW: &[&str] = &["--heartbeat-min-ttl", "600s", "--apply-delay", "2s"];
    const VIA: &[&str] = &[
        "--heartbeat-min-ttl",
        "600s",
        "--apply-delay",
        "8s",
        "--election-timeout-ms",
        "1500",
    ];
    let (mut c, fast) = Harness::with_leader(3, &[]).await;
    let [via, first] = c.ids_except(fast)[..] else {
        panic!("three servers");
    };
    for (id, flags) in [(via, VIA), (first, SLOW)] {
        c.kill(id).unwrap();
        c.spawn_with(id, flags).unwrap();
        eventually(
            "the restarted follower knows the leader",
            CATCH_UP,
            || async { c.status(id).await.is_ok_and(|s| s.leader_id == Some(fast)) },
        )
        .await;
    }
    c.kill(fast).unwrap();
    eventually("the slow server leads", CATCH_UP, || async {
        c.status(first).await.is_ok_and(|s| s.state == "Leader")
    })
    .await;
    c.spawn_with(fast, &["--heartbeat-min-ttl", "600s"])
        .unwrap();
    assert_eq!(
        settled_leader(&c, via).await,
        first,
        "the slow server leads"
    );
    let to_fast = c.client_of(&[fast]);
    register_job(&c.client_of(&[first]), service_job("web", 1, 100, 64)).await;
    eventually("the fast server has the job", CATCH_UP, || async {
        has_job(&to_fast, "web").await.unwrap_or(false)
    })
    .await;

    let call = {
        let to_via = c.client_of(&[via]);
        tokio::spawn(async move { to_via.jobs().deregister(purge("web")).await })
    };
    eventually_ok("the fast server applied the purge", CATCH_UP, || async {
        match has_job(&to_fast, "web").await {
            Ok(false) => Ok(()),
            _ => Err(cluster_view(&c).await),
        }
    })
    .await;
    c.pause(first).unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .expect("the follower answers")
        .unwrap();
    c.resume(first).unwrap();
    eprintln!("the purge's answer: {answer:?}");
    match answer {
        // Its own apply found the ticket first: the write is done.
        Ok(_) => {}
        Err(s) => {
            assert_eq!(
                s.code(),
                Code::Unavailable,
                "a definite error for a purge that took effect: {s:?}"
            );
            assert!(s.message().contains("may have taken effect"), "{s:?}");
        }
    }
    assert!(!has_job(&to_fast, "web").await.unwrap());
}
