//! Elections only when the leader is gone: every campaign asks first.
//!
//! openraft 0.9 campaigns as soon as a follower's election timer runs out,
//! and a campaign raises the term, which deposes the leader as soon as it
//! hears of it. A follower that was only slow (stopped, starved of a core,
//! installing a snapshot, just restarted) thus cost a healthy cluster its
//! leader. etcd, hashicorp/raft and CockroachDB ask first (PreVote, the Raft
//! thesis, 9.6), and so do we: a server campaigns only once a quorum,
//! itself included, says that it has not heard from a leader within the
//! lease either and that the candidate's log is as up to date as its own.
//! Nothing is stored or raised by asking, so a server that is refused
//! leaves no trace on the others.
//!
//! openraft's own election timer is switched off (`enable_elect: false` in
//! `server::config`) and [`drive`] takes its place, on raft's threads, with
//! the same timing: a follower that heard from a leader campaigns a lease
//! plus a random election timeout after its last word, one that did not
//! (a candidate, or a server just started) a random election timeout after
//! its last vote. Votes themselves are openraft's, unchanged.
//!
//! A server's silence is measured from what it could have heard: a server
//! that was itself not running (stopped, starved of its core, blocked in a
//! slow fsync) heard nothing because it did not listen, not because the
//! leader is gone. So a look that comes more than a quarter of the lease
//! after the one before (less the server's own wait in a pre-vote round,
//! for a voter that does not answer) marks the server as just woken, and
//! a woken server counts its silence from then: it campaigns no sooner
//! than a lease and a timeout after, and grants no pre-vote for two
//! heartbeats, time for a live leader's next message to reach it.
//!
//! Each election a server starts is counted, and its term kept in a gauge
//! (`stampede_raft_election_started_term`), so a run can say who started
//! each one; the log line says why.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use openraft::ServerState;
use rand::Rng;
use serde::{Deserialize, Serialize};
use stampede_proto::RaftPayload;
use tokio::sync::watch;
use tokio::time::Instant;

use super::metrics::Metrics;
use super::wire::network::PeerChannels;
use super::{LogId, NodeId, Raft};

/// The timing of elections, from the server's flags.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// Shortest election timeout; each campaign draws its own between this
    /// and `timeout_max`.
    pub timeout_min: Duration,
    pub timeout_max: Duration,
    /// How long a leader's last word keeps it alive to a follower: while it
    /// runs, the follower neither campaigns nor grants a pre-vote.
    /// openraft's own leader lease, the longest election timeout.
    pub lease: Duration,
    /// How long a server that did not run (stopped, starved, just started)
    /// refuses pre-votes after it runs again: time for a live leader's next
    /// message to reach it (two heartbeats), short enough that a server
    /// woken when the leader is really gone soon helps elect another.
    pub wake_grace: Duration,
}

impl Timing {
    /// How often the driver looks at raft: often enough that a campaign
    /// starts within a tenth of the shortest timeout of being due.
    fn tick(&self) -> Duration {
        (self.timeout_min / 10).max(Duration::from_millis(5))
    }

    /// A fresh random election timeout.
    fn draw(&self) -> Duration {
        if self.timeout_max <= self.timeout_min {
            return self.timeout_min;
        }
        rand::thread_rng().gen_range(self.timeout_min..self.timeout_max)
    }

    /// How long a pre-vote waits for its answers: the shortest timeout, so
    /// a round never runs into the next one.
    fn ask_for(&self) -> Duration {
        self.timeout_min
    }

    /// How old the driver's last look may be for a pre-vote to be answered
    /// from it. An older one may miss that this server has since become
    /// leader or voted (its driver waits on its own pre-vote, or was not
    /// scheduled), so raft's core is asked afresh.
    fn look_fresh_for(&self) -> Duration {
        self.tick() * 2
    }
}

/// A pre-vote: would the receiver vote for `candidate` in `term`?
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreVoteRequest {
    pub candidate: NodeId,
    /// The term the candidate would campaign for (its own plus one).
    pub term: u64,
    pub last_log_id: Option<LogId>,
}

/// The answer: granted, or why not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreVoteResponse {
    pub granted: bool,
    /// The receiver's own term.
    pub term: u64,
    /// Why it was refused; `None` when granted.
    pub refused: Option<Refusal>,
}

/// Why a pre-vote was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Refusal {
    #[error("the receiver leads")]
    Leading,
    #[error("the receiver heard from its leader {ago_ms} ms ago, within the lease")]
    LeaderHeard { ago_ms: u64 },
    #[error("the candidate's log is behind the receiver's")]
    LogBehind,
    #[error("the receiver itself did not run until {ago_ms} ms ago, too recently to have heard from a leader")]
    Woken { ago_ms: u64 },
    /// Its raft core did not answer in time, so it cannot say whether it
    /// leads or has heard from a leader: it grants nothing it cannot check.
    #[error("the receiver's raft core did not answer within {waited_ms} ms")]
    Busy { waited_ms: u64 },
}

impl Refusal {
    /// The `reason` label of `stampede_raft_prevotes_refused_total`, one of
    /// [`PREVOTE_REFUSALS`](super::metrics::PREVOTE_REFUSALS).
    pub fn label(&self) -> &'static str {
        match self {
            Self::Leading => "leading",
            Self::LeaderHeard { .. } => "leader_heard",
            Self::LogBehind => "log_behind",
            Self::Woken { .. } => "woken",
            Self::Busy { .. } => "busy",
        }
    }
}

/// What this server's raft shows, as far as elections go.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    pub leading: bool,
    pub term: u64,
    /// Whether its vote is for an elected leader (not a candidate's).
    pub committed: bool,
    /// The leader it knows, when its vote is committed.
    pub leader: Option<NodeId>,
    /// Since its vote last changed or was confirmed by a leader's message;
    /// `None` when it has not been since this server started.
    pub heard_ago: Option<Duration>,
    pub last_log_id: Option<LogId>,
    pub voters: BTreeSet<NodeId>,
    /// Since this server last woke from not running (see the module's
    /// documentation); `None` when it has not.
    pub woken_ago: Option<Duration>,
    /// Since a message from a leader of this server's term or a later one
    /// last arrived, whatever raft's core has made of it yet: a candidate
    /// whose rival won hears of it here first.
    pub leader_word_ago: Option<Duration>,
}

impl View {
    /// The view `elapsed` later, nothing else having changed.
    fn aged(&self, elapsed: Duration) -> Self {
        Self {
            heard_ago: self.heard_ago.map(|d| d + elapsed),
            woken_ago: self.woken_ago.map(|d| d + elapsed),
            leader_word_ago: self.leader_word_ago.map(|d| d + elapsed),
            ..self.clone()
        }
    }
}

/// The driver's latest look at raft, which the pre-vote answers from: a
/// peer's question costs no trip through raft's core, and is answered at
/// once even while the core is busy. With it, when a message from a leader
/// last arrived: raft's core marks its leader heard only once it handles
/// the message, and a core held up (a follower's append waiting for a slow
/// fsync, on a disk every server shares) handles the leader's next
/// messages late though they came on time.
#[derive(Debug, Default)]
pub struct Latest {
    look: std::sync::Mutex<Option<(View, Instant)>>,
    leader_word: std::sync::Mutex<Option<Instant>>,
}

impl Latest {
    fn set(&self, view: View) {
        *stampede_proto::lock(&self.look) = Some((view, Instant::now()));
    }

    /// A message from the leader of the receiver's term (or a later one)
    /// arrived, before raft's core handled it.
    pub fn leader_word_arrived(&self) {
        *stampede_proto::lock(&self.leader_word) = Some(Instant::now());
    }

    /// The latest view, aged to now, its leader heard as recently as a
    /// message from it arrived; `None` before the first look.
    fn get(&self) -> Option<View> {
        self.get_with_age().map(|(view, _)| view)
    }

    /// [`Latest::get`], and how long ago the look was.
    fn get_with_age(&self) -> Option<(View, Duration)> {
        let (view, at) = stampede_proto::lock(&self.look).clone()?;
        let age = at.elapsed();
        Some((self.with_arrivals(view.aged(age)), age))
    }

    /// `fresh`, a look just taken outside the driver, with what only the
    /// driver knows (when this server last woke) from its latest look.
    fn with_driver_view(&self, fresh: View) -> View {
        let woken_ago = self.get().and_then(|v| v.woken_ago);
        self.with_arrivals(View { woken_ago, ..fresh })
    }

    /// `view` with its leader heard as recently as a message from it arrived.
    fn with_arrivals(&self, mut view: View) -> View {
        let arrived = *stampede_proto::lock(&self.leader_word);
        if let Some(at) = arrived {
            let ago = at.elapsed();
            view.leader_word_ago = Some(ago);
            if view.committed {
                view.heard_ago = Some(view.heard_ago.map_or(ago, |h| h.min(ago)));
            }
        }
        view
    }
}

/// Reads the view from raft's core.
async fn look(raft: &Raft) -> Option<View> {
    raft.with_raft_state(|s| {
        let now = Instant::now();
        let vote = s.vote_ref();
        View {
            leading: s.server_state == ServerState::Leader,
            term: vote.leader_id().get_term(),
            committed: vote.is_committed(),
            leader: vote
                .is_committed()
                .then(|| vote.leader_id().voted_for())
                .flatten(),
            heard_ago: s
                .vote_last_modified()
                .map(|at| now.saturating_duration_since(at)),
            last_log_id: s.last_log().copied(),
            voters: s.membership_state.effective().voter_ids().collect(),
            woken_ago: None,
            leader_word_ago: None,
        }
    })
    .await
    .ok()
}

/// Whether a server whose raft shows `me` grants `req`.
pub fn judge(req: &PreVoteRequest, me: &View, timing: &Timing) -> Result<(), Refusal> {
    let lease = timing.lease;
    if me.leading {
        return Err(Refusal::Leading);
    }
    let heard = [
        me.committed.then_some(me.heard_ago).flatten(),
        me.leader_word_ago,
    ];
    if let Some(ago) = heard
        .into_iter()
        .flatten()
        .min()
        .filter(|ago| *ago <= lease)
    {
        return Err(Refusal::LeaderHeard {
            ago_ms: ago.as_millis() as u64,
        });
    }
    if let Some(ago) = me.woken_ago.filter(|ago| *ago <= timing.wake_grace) {
        return Err(Refusal::Woken {
            ago_ms: ago.as_millis() as u64,
        });
    }
    // The candidate's term is not compared: one behind learns the term in
    // its real campaign (openraft takes a higher vote from the answers) and
    // wins the next, while refusing it here could leave two servers each
    // refusing the other for ever (one for its log, one for its term).
    if req.last_log_id < me.last_log_id {
        return Err(Refusal::LogBehind);
    }
    Ok(())
}

/// The receiver's side: this server's answer to a peer's pre-vote, from
/// the driver's latest look while it is fresh, else from raft's core;
/// `None` before the driver's first look, or once raft has shut down.
pub async fn answer(
    raft: &Raft,
    latest: &Latest,
    timing: &Timing,
    metrics: &Metrics,
    req: &PreVoteRequest,
) -> Option<PreVoteResponse> {
    let (me, age) = latest.get_with_age()?;
    let me = if age <= timing.look_fresh_for() {
        Ok(me)
    } else {
        let wait = timing.ask_for() / 2;
        match tokio::time::timeout(wait, look(raft)).await {
            Ok(fresh) => Ok(latest.with_driver_view(fresh?)),
            Err(_) => Err(Refusal::Busy {
                waited_ms: wait.as_millis() as u64,
            }),
        }
    };
    let verdict = me
        .as_ref()
        .map_err(|r| *r)
        .and_then(|me| judge(req, me, timing));
    let term = me
        .as_ref()
        .map_or_else(|_| latest.get().map_or(0, |v| v.term), |me| me.term);
    if let Err(refused) = &verdict {
        metrics
            .elections
            .prevotes_refused
            .with_label_values(&[refused.label()])
            .inc();
    }
    Some(PreVoteResponse {
        granted: verdict.is_ok(),
        term,
        refused: verdict.err(),
    })
}

/// When a server that shows `me` is due to campaign, given the timeout it
/// drew and how long it has run (for a server that heard from no one).
fn due(me: &View, drawn: Duration, timing: &Timing, running_for: Duration) -> bool {
    let quiet_for = me.heard_ago.unwrap_or(running_for);
    // Silence counts only from when this server last ran.
    let quiet_for = me.woken_ago.map_or(quiet_for, |w| quiet_for.min(w));
    let wait = if me.committed {
        timing.lease + drawn
    } else {
        drawn
    };
    // A candidate (or a server that voted for one) that hears from a
    // leader has a leader, whatever raft's core has made of it yet.
    let leader_alive = me
        .leader_word_ago
        .is_some_and(|ago| ago < timing.lease + drawn);
    quiet_for >= wait && !leader_alive
}

/// Runs this server's elections until `stop` turns true: every tick, looks
/// at raft; when a campaign is due, asks the other voters, and starts it
/// only if a quorum grants.
pub async fn drive(
    raft: Raft,
    channels: PeerChannels,
    timing: Timing,
    latest: Arc<Latest>,
    metrics: Arc<Metrics>,
    mut stop: watch::Receiver<bool>,
) {
    let started = Instant::now();
    let mut drawn = timing.draw();
    // After a refused pre-vote: not before a fresh timeout has passed.
    let mut not_before = started;
    let mut waking = Waking::new(started);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(timing.tick()) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
        let Some(mut me) = look(&raft).await else {
            return; // raft has shut down
        };
        let now = Instant::now();
        // A look long after the last: this server (or its raft core) did
        // not run meanwhile, and heard nothing for that reason.
        waking.look_at(now, timing.tick() + timing.lease / 4, &metrics);
        me.woken_ago = waking.woken_ago(now);
        latest.set(me.clone());
        let me = latest.with_arrivals(me);
        if me.leading || !me.voters.contains(&raft_id(&raft)) || now < not_before {
            continue;
        }
        if !due(&me, drawn, &timing, now - started) {
            continue;
        }
        let req = PreVoteRequest {
            candidate: raft_id(&raft),
            term: me.term + 1,
            last_log_id: me.last_log_id,
        };
        let granted_by = ask(&raft, &channels, &timing, &me, &req).await;
        // The round waits up to `ask_for` for a voter that does not answer
        // (paused, or cut off): that wait is this server's own, not a
        // stall, and counting it as one would put this server's next
        // campaign a lease further off each round, while the hold on its
        // callers runs out. Only a round longer than its bound allows is.
        let allowed = timing.ask_for() + timing.tick() + timing.lease / 4;
        waking.look_at(Instant::now(), allowed, &metrics);
        // The round took time (a voter that is down is waited for), and a
        // rival may have won meanwhile: its term or its leader's word ends
        // this campaign, which would otherwise depose the new leader.
        let Some(after) = look(&raft).await else {
            return;
        };
        let after = latest.with_driver_view(after);
        let overtaken = after.term != me.term
            || after.leading
            || !due(&after, drawn, &timing, Instant::now() - started);
        if conclude(&me, &after, overtaken, &req, &granted_by, &metrics) {
            if raft.trigger().elect().await.is_err() {
                return;
            }
            metrics.elections.started.inc();
            metrics.elections.started_term.set(req.term as i64);
        }
        drawn = timing.draw();
        not_before = Instant::now() + drawn;
    }
}

/// When the driver last looked, and when it last found that it had not run
/// for a while before a look.
struct Waking {
    last_look: Instant,
    woke_at: Option<Instant>,
}

impl Waking {
    /// A server just started heard nothing because it was not running: it
    /// counts as woken at its start.
    fn new(started: Instant) -> Self {
        Self {
            last_look: started,
            woke_at: Some(started),
        }
    }

    /// A look at `now`, which should come at most `allowed` after the last.
    fn look_at(&mut self, now: Instant, allowed: Duration, metrics: &Metrics) {
        if stalled(self.last_look, now, allowed) {
            self.woke_at = Some(now);
            metrics.elections.stalls.inc();
        }
        self.last_look = now;
    }

    fn woken_ago(&self, now: Instant) -> Option<Duration> {
        self.woke_at.map(|w| now.saturating_duration_since(w))
    }
}

/// Whether a pre-vote round that `granted_by` answered starts the campaign;
/// counts and logs why not, or why.
fn conclude(
    me: &View,
    after: &View,
    overtaken: bool,
    req: &PreVoteRequest,
    granted_by: &[NodeId],
    metrics: &Metrics,
) -> bool {
    // The candidate grants itself.
    let quorum = me.voters.len() / 2 + 1;
    if overtaken {
        tracing::info!(
            term = req.term,
            now_term = after.term,
            leader = ?after.leader,
            "not campaigning: a leader was elected or heard from during the pre-vote"
        );
    } else if granted_by.len() + 1 >= quorum {
        tracing::warn!(
            term = req.term,
            previous_leader = ?me.leader,
            quiet_ms = me.heard_ago.map(|d| d.as_millis() as u64),
            granted_by = ?granted_by,
            "starting an election: no word from a leader within the election timeout, and a quorum agrees"
        );
        return true;
    } else {
        tracing::info!(
            term = req.term,
            known_leader = ?me.leader,
            granted_by = ?granted_by,
            "not campaigning: the pre-vote found no quorum (a leader is alive, or this log is behind)"
        );
    }
    metrics.elections.campaigns_stopped.inc();
    false
}

/// Whether the gap from `before` to `now` is longer than `allowed`: this
/// server (or its raft core) did not run meanwhile, and heard nothing for
/// that reason, so its silence counts from `now`.
fn stalled(before: Instant, now: Instant, allowed: Duration) -> bool {
    let gap = now.saturating_duration_since(before);
    if gap <= allowed {
        return false;
    }
    tracing::info!(
        stalled_ms = gap.as_millis() as u64,
        "raft did not run for a while: its silence counts from now"
    );
    true
}

fn raft_id(raft: &Raft) -> NodeId {
    raft.metrics().borrow().id
}

/// Sends `req` to every other voter at once and returns who granted it
/// within [`Timing::ask_for`]. A peer that cannot be reached, answers late
/// or sends what does not decode counts as a refusal.
async fn ask(
    raft: &Raft,
    channels: &PeerChannels,
    timing: &Timing,
    me: &View,
    req: &PreVoteRequest,
) -> Vec<NodeId> {
    let Ok(data) = bincode::serialize(req) else {
        return Vec::new();
    };
    let membership = raft.metrics().borrow().membership_config.clone();
    let asks = me
        .voters
        .iter()
        .filter(|id| **id != req.candidate)
        .filter_map(|id| {
            let node = membership.membership().get_node(id)?;
            let mut client = channels.raft_client(*id, &node.addr);
            let payload = RaftPayload { data: data.clone() };
            let id = *id;
            Some(async move {
                let reply = tokio::time::timeout(timing.ask_for(), client.pre_vote(payload)).await;
                let granted = match reply {
                    Ok(Ok(reply)) => {
                        bincode::deserialize::<PreVoteResponse>(&reply.into_inner().data)
                            .is_ok_and(|r| r.granted)
                    }
                    _ => false,
                };
                granted.then_some(id)
            })
        });
    // Done at a quorum: waiting for a voter that is down would only widen
    // the window in which a rival wins unseen.
    let needed = (me.voters.len() / 2 + 1).saturating_sub(1);
    let mut asks: futures::stream::FuturesUnordered<_> = asks.collect();
    let mut granted = Vec::new();
    while granted.len() < needed {
        match asks.next().await {
            Some(Some(id)) => granted.push(id),
            Some(None) => {}
            None => break,
        }
    }
    granted
}

#[cfg(test)]
mod tests {
    use super::super::metrics::PREVOTE_REFUSALS;
    use super::*;
    use openraft::CommittedLeaderId;

    fn log_id(term: u64, index: u64) -> Option<LogId> {
        Some(LogId::new(CommittedLeaderId::new(term, 1), index))
    }

    fn follower(heard_ago_ms: Option<u64>, last: Option<LogId>) -> View {
        View {
            leading: false,
            term: 3,
            committed: true,
            leader: Some(1),
            heard_ago: heard_ago_ms.map(Duration::from_millis),
            last_log_id: last,
            voters: [1, 2, 3].into(),
            woken_ago: None,
            leader_word_ago: None,
        }
    }

    fn req(last: Option<LogId>) -> PreVoteRequest {
        PreVoteRequest {
            candidate: 2,
            term: 4,
            last_log_id: last,
        }
    }

    const LEASE: Duration = Duration::from_millis(500);
    const TIMING: Timing = Timing {
        timeout_min: Duration::from_millis(250),
        timeout_max: Duration::from_millis(500),
        lease: LEASE,
        wake_grace: Duration::from_millis(400),
    };

    #[test]
    fn a_follower_that_heard_its_leader_within_the_lease_refuses() {
        let me = follower(Some(120), log_id(3, 10));
        assert_eq!(
            judge(&req(log_id(3, 10)), &me, &TIMING),
            Err(Refusal::LeaderHeard { ago_ms: 120 })
        );
        // Past the lease, the same follower grants.
        let me = follower(Some(501), log_id(3, 10));
        assert_eq!(judge(&req(log_id(3, 10)), &me, &TIMING), Ok(()));
        // A follower that heard no one since it started grants.
        let me = follower(None, log_id(3, 10));
        assert_eq!(judge(&req(log_id(3, 10)), &me, &TIMING), Ok(()));
    }

    #[test]
    fn a_leader_refuses_always() {
        let me = View {
            leading: true,
            heard_ago: Some(Duration::from_secs(60)),
            ..follower(None, log_id(3, 10))
        };
        assert_eq!(
            judge(&req(log_id(9, 99)), &me, &TIMING),
            Err(Refusal::Leading)
        );
    }

    #[test]
    fn a_candidate_whose_log_is_behind_is_refused_by_term_then_index() {
        let me = follower(None, log_id(3, 10));
        assert_eq!(
            judge(&req(log_id(3, 9)), &me, &TIMING),
            Err(Refusal::LogBehind)
        );
        assert_eq!(
            judge(&req(log_id(2, 50)), &me, &TIMING),
            Err(Refusal::LogBehind)
        );
        assert_eq!(judge(&req(None), &me, &TIMING), Err(Refusal::LogBehind));
        assert_eq!(judge(&req(log_id(4, 1)), &me, &TIMING), Ok(()));
    }

    #[test]
    fn a_server_whose_vote_is_not_committed_ignores_the_lease() {
        // It voted for a candidate (or is one): no leader to protect.
        let me = View {
            committed: false,
            leader: None,
            ..follower(Some(10), log_id(3, 10))
        };
        assert_eq!(judge(&req(log_id(3, 10)), &me, &TIMING), Ok(()));
    }

    #[test]
    fn a_campaign_is_due_a_lease_plus_a_timeout_after_a_leaders_last_word() {
        let timing = TIMING;
        let drawn = Duration::from_millis(300);
        let long = Duration::from_secs(10);
        assert!(!due(&follower(Some(799), None), drawn, &timing, long));
        assert!(due(&follower(Some(800), None), drawn, &timing, long));
        // A candidate waits only its timeout.
        let candidate = View {
            committed: false,
            ..follower(Some(300), None)
        };
        assert!(due(&candidate, drawn, &timing, long));
        // Heard from no one since start: counted from the start.
        assert!(!due(
            &follower(None, None),
            drawn,
            &timing,
            Duration::from_millis(700)
        ));
        assert!(due(
            &follower(None, None),
            drawn,
            &timing,
            Duration::from_millis(800)
        ));
        for _ in 0..100 {
            let d = timing.draw();
            assert!(d >= timing.timeout_min && d < timing.timeout_max);
        }
    }

    #[test]
    fn only_a_look_later_than_allowed_is_a_stall_and_silence_counts_from_it() {
        let metrics = Metrics::new();
        let start = Instant::now();
        let mut waking = Waking::new(start);
        let allowed = Duration::from_millis(100);
        waking.look_at(start + Duration::from_millis(100), allowed, &metrics);
        waking.look_at(start + Duration::from_millis(200), allowed, &metrics);
        assert_eq!(metrics.elections.stalls.get(), 0);
        // Still woken at its start, as a server just started is.
        let at = start + Duration::from_millis(250);
        assert_eq!(waking.woken_ago(at), Some(Duration::from_millis(250)));
        waking.look_at(start + Duration::from_millis(301), allowed, &metrics);
        assert_eq!(metrics.elections.stalls.get(), 1);
        assert_eq!(
            waking.woken_ago(at + Duration::from_millis(51)),
            Some(Duration::ZERO)
        );
        // A round's own wait is allowed for by the caller: no stall.
        let round = Duration::from_millis(1_100);
        waking.look_at(start + Duration::from_millis(1_401), round, &metrics);
        assert_eq!(metrics.elections.stalls.get(), 1);
    }

    #[test]
    fn a_server_that_just_woke_neither_grants_nor_campaigns_within_a_lease() {
        // It heard nothing for 3 s because it did not run: stopped, or its
        // raft thread blocked.
        let woken = |ms| View {
            woken_ago: Some(Duration::from_millis(ms)),
            ..follower(Some(3_000), log_id(3, 10))
        };
        assert_eq!(
            judge(&req(log_id(3, 10)), &woken(100), &TIMING),
            Err(Refusal::Woken { ago_ms: 100 })
        );
        assert_eq!(judge(&req(log_id(3, 10)), &woken(600), &TIMING), Ok(()));
        let timing = TIMING;
        let drawn = Duration::from_millis(300);
        let long = Duration::from_secs(10);
        assert!(!due(&woken(799), drawn, &timing, long));
        assert!(due(&woken(800), drawn, &timing, long));
    }

    #[test]
    fn a_leaders_message_that_arrived_counts_as_heard_before_the_core_handles_it() {
        let latest = Latest::default();
        latest.set(follower(Some(3_000), log_id(3, 10)));
        assert!(latest.get().unwrap().heard_ago.unwrap() >= Duration::from_secs(3));
        latest.leader_word_arrived();
        let seen = latest.get().unwrap();
        assert!(seen.heard_ago.unwrap() < Duration::from_secs(1));
        assert!(matches!(
            judge(&req(log_id(3, 10)), &seen, &TIMING),
            Err(Refusal::LeaderHeard { .. })
        ));
        // A candidate's view (no committed vote) names no leader, but a
        // leader's message that arrived says its rival won: it neither
        // grants nor campaigns, though its core has not caught up.
        let candidate = View {
            committed: false,
            leader: None,
            ..follower(Some(3_000), log_id(3, 10))
        };
        latest.set(candidate.clone());
        let seen = latest.get().unwrap();
        assert!(seen.heard_ago.unwrap() >= Duration::from_secs(3));
        assert!(matches!(
            judge(&req(log_id(3, 10)), &seen, &TIMING),
            Err(Refusal::LeaderHeard { .. })
        ));
        let drawn = Duration::from_millis(300);
        assert!(!due(&seen, drawn, &TIMING, Duration::from_secs(10)));
        // Without that word, the same candidate would campaign and grant.
        assert!(due(&candidate, drawn, &TIMING, Duration::from_secs(10)));
        assert_eq!(judge(&req(log_id(3, 10)), &candidate, &TIMING), Ok(()));
    }

    #[test]
    fn the_latest_look_ages_until_the_next() {
        let latest = Latest::default();
        assert_eq!(latest.get(), None);
        latest.set(follower(Some(100), log_id(3, 10)));
        let seen = latest.get().unwrap();
        assert!(seen.heard_ago.unwrap() >= Duration::from_millis(100));
        assert_eq!(seen.woken_ago, None);
    }

    #[test]
    fn every_refusal_has_its_label_on_the_metric() {
        for r in [
            Refusal::Leading,
            Refusal::LeaderHeard { ago_ms: 1 },
            Refusal::LogBehind,
            Refusal::Woken { ago_ms: 1 },
            Refusal::Busy { waited_ms: 1 },
        ] {
            assert!(PREVOTE_REFUSALS.contains(&r.label()), "{r:?}");
        }
    }

    #[test]
    fn the_answer_round_trips_with_its_reason() {
        let r = PreVoteResponse {
            granted: false,
            term: 7,
            refused: Some(Refusal::LeaderHeard { ago_ms: 42 }),
        };
        let bytes = bincode::serialize(&r).unwrap();
        assert_eq!(bincode::deserialize::<PreVoteResponse>(&bytes).unwrap(), r);
        assert_eq!(
            r.refused.unwrap().to_string(),
            "the receiver heard from its leader 42 ms ago, within the lease"
        );
    }
}
