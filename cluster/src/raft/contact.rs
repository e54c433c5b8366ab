//! Keeps this server's [`Contact`] from raft's metrics: whether it is in
//! touch with the cluster (see `state::contact` for what reads it and why).
//!
//! - A leader is in touch while a quorum has acknowledged it within the
//!   lease. openraft 0.9 keeps a leader that lost its quorum leading (it
//!   steps down only on hearing a higher term), so a leader cut off from
//!   the others would otherwise take writes it cannot commit and answer
//!   queries from a state that no longer moves, until the partition heals.
//! - A follower is in touch while it knows a leader, or has known one
//!   within the lease: an election takes well under it.
//! - A single voter is always in touch.
//!
//! The lease is longer than the longest election timeout, so a healthy
//! leader's quorum acknowledges it several times in each (every heartbeat
//! is acknowledged), and the others have elected a successor by the time a
//! cut-off leader gives up.

use std::time::Duration;

use openraft::ServerState;
use tokio::sync::watch;
use tokio::time::Instant;

use super::{NodeId, Raft};
use crate::state::contact::{Loss, Touch};

/// How often raft's metrics are looked at: a tenth of the lease.
fn poll_every(lease: Duration) -> Duration {
    (lease / 10).max(Duration::from_millis(10))
}

/// What raft showed at one look.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Seen {
    pub state: ServerState,
    pub leader: Option<NodeId>,
    pub voters: usize,
    /// For a leader: since a quorum last acknowledged it.
    pub since_quorum_ack: Option<Duration>,
}

/// Judges one look, given when this server last led or knew a leader.
#[derive(Debug)]
pub(crate) struct Judge {
    id: NodeId,
    lease: Duration,
    /// When this server last knew a leader (itself included), or started.
    leader_known_at: Instant,
    /// When this server became leader, while it leads.
    leading_since: Option<Instant>,
    /// The last look, and the last look that came more than a lease after
    /// the one before: the server had not run (paused, or starved).
    last_look: Option<Instant>,
    woke_at: Option<Instant>,
}

impl Judge {
    pub fn new(id: NodeId, lease: Duration, now: Instant) -> Self {
        Self {
            id,
            lease,
            leader_known_at: now,
            leading_since: None,
            last_look: None,
            woke_at: None,
        }
    }

    /// Where this server stands at `now`. A loss found within a lease of
    /// waking is marked so: the server's view is old, not cut off, and it
    /// hears of the cluster within a heartbeat.
    pub fn judge(&mut self, seen: Seen, now: Instant) -> Touch {
        if self
            .last_look
            .is_some_and(|l| now.saturating_duration_since(l) > self.lease)
        {
            self.woke_at = Some(now);
        }
        self.last_look = Some(now);
        let woken = self
            .woke_at
            .is_some_and(|w| now.saturating_duration_since(w) <= self.lease);
        match self.standing(seen, now) {
            Some(why) => Touch::Lost(Loss { why, woken }),
            None => Touch::InTouch,
        }
    }

    /// Why this server is out of touch, if it is.
    fn standing(&mut self, seen: Seen, now: Instant) -> Option<String> {
        let leads = seen.state == ServerState::Leader;
        if !leads {
            self.leading_since = None;
        }
        if seen.leader.is_some() {
            self.leader_known_at = now;
        }
        if seen.voters <= 1 {
            return None;
        }
        let lease_ms = self.lease.as_millis();
        if leads {
            let since = *self.leading_since.get_or_insert(now);
            let silent = seen
                .since_quorum_ack
                .unwrap_or_else(|| now.saturating_duration_since(since));
            if silent > self.lease {
                return Some(format!(
                    "server {} leads but no quorum has acknowledged it for {} ms (its lease is {lease_ms} ms): it may be cut off from the others, who elect another",
                    self.id,
                    silent.as_millis()
                ));
            }
            return None;
        }
        let unknown = now.saturating_duration_since(self.leader_known_at);
        if unknown > self.lease {
            return Some(format!(
                "server {} has known no leader for {} ms (longer than an election takes, {lease_ms} ms): it may be cut off from the others",
                self.id,
                unknown.as_millis()
            ));
        }
        None
    }
}

/// Looks at raft's metrics every tenth of `lease` and sends where this
/// server stands whenever it changes, until `stop`.
pub async fn follow(
    raft: Raft,
    lease: Duration,
    tx: watch::Sender<Touch>,
    mut stop: watch::Receiver<bool>,
) {
    let metrics = raft.metrics();
    let id = metrics.borrow().id;
    let mut judge = Judge::new(id, lease, Instant::now());
    let mut every = tokio::time::interval(poll_every(lease));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let seen = {
            let m = metrics.borrow();
            Seen {
                state: m.state,
                leader: m.current_leader,
                voters: m.membership_config.membership().voter_ids().count(),
                since_quorum_ack: m.millis_since_quorum_ack.map(Duration::from_millis),
            }
        };
        let touch = judge.judge(seen, Instant::now());
        // Sent on a change of standing only: the reason's figures grow
        // while it is out of touch, and the first reason is the one to keep.
        tx.send_if_modified(|t| {
            if std::mem::discriminant(t) == std::mem::discriminant(&touch) {
                return false;
            }
            match &touch {
                Touch::Lost(loss) => {
                    tracing::warn!(woken = loss.woken, "out of touch: {}", loss.why)
                }
                Touch::InTouch => tracing::info!("in touch with the cluster again"),
            }
            *t = touch;
            true
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(1);

    fn leader(ack: Option<u64>) -> Seen {
        Seen {
            state: ServerState::Leader,
            leader: Some(1),
            voters: 3,
            since_quorum_ack: ack.map(Duration::from_millis),
        }
    }

    fn follower(leader: Option<NodeId>) -> Seen {
        Seen {
            state: ServerState::Follower,
            leader,
            voters: 3,
            since_quorum_ack: None,
        }
    }

    fn lost(t: &Touch) -> bool {
        matches!(t, Touch::Lost(_))
    }

    #[test]
    fn a_leader_is_out_of_touch_once_its_quorum_is_silent_past_the_lease() {
        let t0 = Instant::now();
        let mut j = Judge::new(1, LEASE, t0);
        assert_eq!(j.judge(leader(Some(150)), t0), Touch::InTouch);
        assert_eq!(j.judge(leader(Some(1000)), t0), Touch::InTouch);
        let t = j.judge(leader(Some(1001)), t0);
        assert!(lost(&t), "{t:?}");
        let Touch::Lost(loss) = t else { unreachable!() };
        assert!(
            loss.why.contains("server 1 leads") && loss.why.contains("1001 ms"),
            "{loss}"
        );
        assert!(!loss.woken, "looked at all along: cut off");
        // Acknowledged again (the partition healed and it still leads).
        assert_eq!(j.judge(leader(Some(20)), t0), Touch::InTouch);
    }

    #[test]
    fn a_new_leader_not_yet_acknowledged_has_the_lease_from_its_election() {
        let t0 = Instant::now();
        let mut j = Judge::new(1, LEASE, t0);
        assert_eq!(j.judge(leader(None), t0), Touch::InTouch);
        assert_eq!(j.judge(leader(None), t0 + LEASE), Touch::InTouch);
        assert!(lost(&j.judge(leader(None), t0 + LEASE * 2)));
    }

    #[test]
    fn a_follower_is_out_of_touch_only_when_no_leader_is_known_past_the_lease() {
        let t0 = Instant::now();
        let mut j = Judge::new(2, LEASE, t0);
        assert_eq!(j.judge(follower(Some(1)), t0), Touch::InTouch);
        // An election: no leader for a while, less than the lease.
        let election = t0 + Duration::from_millis(900);
        assert_eq!(j.judge(follower(None), election), Touch::InTouch);
        assert_eq!(j.judge(follower(Some(3)), election), Touch::InTouch);
        // Cut off: campaigning alone, no leader for longer than the lease.
        assert_eq!(j.judge(follower(None), election + LEASE), Touch::InTouch);
        let t = j.judge(follower(None), election + LEASE + Duration::from_millis(1));
        assert!(lost(&t), "{t:?}");
    }

    #[test]
    fn a_loss_found_on_waking_from_a_pause_is_marked_woken() {
        let t0 = Instant::now();
        let mut j = Judge::new(1, LEASE, t0);
        assert_eq!(j.judge(leader(Some(100)), t0), Touch::InTouch);
        // Ten seconds without a look: the process did not run.
        let woke = t0 + Duration::from_secs(10);
        // raft's own figure may not show the silence at the first look.
        assert_eq!(j.judge(leader(Some(100)), woke), Touch::InTouch);
        let t = j.judge(leader(Some(10_000)), woke + LEASE / 10);
        assert!(matches!(&t, Touch::Lost(l) if l.woken), "{t:?}");
        // A loss found a lease after waking is a cut off server's.
        let later = woke + LEASE + Duration::from_millis(200);
        let mut looks = woke + LEASE / 10;
        while looks < later {
            looks += LEASE / 10;
            j.judge(leader(Some(10_000)), looks);
        }
        let t = j.judge(leader(Some(11_000)), later);
        assert!(matches!(&t, Touch::Lost(l) if !l.woken), "{t:?}");
    }

    #[test]
    fn a_single_voter_is_always_in_touch() {
        let t0 = Instant::now();
        let mut j = Judge::new(1, LEASE, t0);
        let alone = Seen {
            voters: 1,
            ..leader(None)
        };
        assert_eq!(j.judge(alone, t0 + LEASE * 10), Touch::InTouch);
    }
}
