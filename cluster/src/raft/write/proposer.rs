//! Writes: propose a command to raft on the leader, or send a client's
//! write on to the leader from a follower, so a client may write through
//! any server. What a follower sends on is the client's request itself
//! ([`ClientWrite`]): the leader validates it and makes its entry (see
//! [`crate::raft::write::client_write`]).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::error::{CheckIsLeaderError, RaftError};
use stampede_proto::{ForwardRequest, LogEntry};
use tonic::Status;

use crate::raft::metrics::Metrics;
use crate::raft::wire::network::PeerChannels;
use crate::raft::write::batcher::{Batcher, Failed};
use crate::raft::write::client_write::{prepare, ClientWrite, Quotas, Refused, Written};
use crate::raft::write::forwarder::Forwarder;
use crate::raft::write::tickets::Tickets;
use crate::raft::{leader_replaced, leader_view, LeaderView, NodeId, Raft};
use crate::state::contact::Contact;
use crate::state::{State, StateStore};

/// Pause between attempts while leadership moves.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

#[derive(Debug, Clone, thiserror::Error)]
pub enum ProposeError {
    #[error("no raft leader is elected yet; retry shortly")]
    NoLeader,
    #[error("this server is not the leader; the leader is server {id} at {addr}")]
    NotLeader { id: NodeId, addr: String },
    #[error("the leader, server {id} at {addr}, did not take the write: {detail}")]
    LeaderUnreachable {
        id: NodeId,
        addr: String,
        detail: String,
    },
    /// The write was proposed here but not committed in time: this server
    /// may have lost its quorum (paused, cut off). It may still commit, so a
    /// caller that retries may write twice; every command we forward is one
    /// that may be applied twice.
    #[error("this server could not commit the write within {0:?}; it may have lost touch with the other servers")]
    NotCommitted(Duration),
    #[error("the server is shutting down")]
    ShuttingDown,
    /// This server leads, or thinks it does, but is out of touch with the
    /// cluster (`state::contact`): a write here may never commit, and one
    /// held when touch was lost may have.
    #[error("{0}; try another server")]
    OutOfTouch(String),
    /// The leader answered the forwarded write with this status.
    #[error("{}", .0.message())]
    Rejected(Box<Status>),
    /// Raft refused a membership change (not a caller's mistake).
    #[error("raft refused the write: {0}")]
    Raft(String),
    /// The client's write is invalid, or names what does not exist.
    #[error(transparent)]
    Refused(#[from] Refused),
    /// A retry was refused, but an earlier attempt may have committed the
    /// write: the refusal may be that write's own effect, so it is not
    /// definite (`Unavailable`).
    #[error("the write may have taken effect: an earlier attempt was cut off ({earlier}), and a retry was refused ({refusal}); read the state before writing again")]
    InDoubt { earlier: String, refusal: String },
}

impl ProposeError {
    /// Whether this is a refusal that says the write did not happen,
    /// rather than that its outcome is unknown. A malformed request is
    /// refused whatever the state, so its refusal stays definite after any
    /// earlier attempt (which was refused too).
    fn is_definite_refusal(&self) -> bool {
        match self {
            ProposeError::Refused(r) => r.depends_on_state(),
            ProposeError::Rejected(status) => {
                status.code() != tonic::Code::InvalidArgument
                    && !stampede_proto::client::retryable(status)
            }
            _ => false,
        }
    }
}

/// A failed attempt at a client's write, and whether the write may have
/// been committed all the same (it reached raft or the leader, and the
/// answer was lost).
struct Attempt {
    error: ProposeError,
    may_have_committed: bool,
}

impl Attempt {
    fn sent(error: ProposeError) -> Self {
        Self {
            error,
            may_have_committed: true,
        }
    }

    fn not_sent(error: ProposeError) -> Self {
        Self {
            error,
            may_have_committed: false,
        }
    }
}

/// The checks of `write` that need no state: what a follower refuses
/// itself before it sends the write on. Whether a job exists, a node's
/// secret and the quotas are the leader's to decide.
fn check_request(write: &ClientWrite) -> Result<(), ProposeError> {
    match prepare(write, 0, &State::default(), &Quotas::NONE) {
        Err(refused) if !refused.depends_on_state() => Err(refused.into()),
        _ => Ok(()),
    }
}

/// Writes through whichever server leads. Cheap to clone: every part that
/// writes holds its own.
#[derive(Clone)]
pub struct Proposer {
    raft: Raft,
    /// Where this server's own proposals go: gathered into shared entries
    /// under load (`--raft-batching`).
    batcher: Batcher,
    /// The state client writes are validated against and made entries on.
    store: Arc<StateStore>,
    /// Sends a client's write on to the leader.
    forwarder: Forwarder,
    /// The writes this server forwarded, done when it applies them.
    tickets: Arc<Tickets>,
    metrics: Arc<Metrics>,
    /// How long a write may wait for a leader before it is refused.
    leader_wait: Duration,
    /// What a client's write may not take the state past.
    quotas: Quotas,
    /// Whether this server is in touch with the cluster: a leader out of
    /// touch takes no write.
    contact: Contact,
    /// How long a client's write waits for this server to be in touch
    /// again before it is refused: a leader woken from a pause hears of its
    /// successor within a heartbeat, and then sends the write on to it.
    /// Counted from the loss (as the first write saw it), not per write: a
    /// leader cut off for 10 s held each write sent its way for the whole
    /// wait, though it could no longer be regained in it.
    touch_wait: Duration,
    /// When a write first found this server out of touch since it last
    /// lost touch (the contact's changes say when that was).
    lost_seen: Arc<std::sync::Mutex<LostSeen>>,
}

/// See [`Proposer::lost_seen`].
struct LostSeen {
    changes: tokio::sync::watch::Receiver<crate::state::contact::Touch>,
    since: Option<Instant>,
}

impl LostSeen {
    /// Following `contact`, with no loss seen yet.
    fn of(contact: &Contact) -> Arc<std::sync::Mutex<Self>> {
        Arc::new(std::sync::Mutex::new(Self {
            changes: contact.changes(),
            since: None,
        }))
    }
}

impl Proposer {
    pub fn new(
        raft: Raft,
        store: Arc<StateStore>,
        channels: PeerChannels,
        tickets: Arc<Tickets>,
        metrics: Arc<Metrics>,
        leader_wait: Duration,
        batching: bool,
    ) -> Self {
        Self {
            batcher: Batcher::start(raft.clone(), batching),
            raft,
            store,
            forwarder: Forwarder::new(channels),
            tickets,
            metrics,
            leader_wait,
            quotas: Quotas::NONE,
            contact: Contact::always(),
            touch_wait: Duration::ZERO,
            lost_seen: LostSeen::of(&Contact::always()),
        }
    }

    /// This proposer, taking no write here while `contact` is lost; a
    /// client's write waits up to `touch_wait` for it to be regained.
    pub fn with_contact(mut self, contact: Contact, touch_wait: Duration) -> Self {
        self.lost_seen = LostSeen::of(&contact);
        self.contact = contact;
        self.touch_wait = touch_wait;
        self
    }

    /// When this server's present loss of touch was first seen by a write.
    fn loss_began(&self) -> Instant {
        let mut seen = stampede_proto::lock(&self.lost_seen);
        if seen.changes.has_changed().unwrap_or(false) {
            seen.changes.borrow_and_update();
            seen.since = None;
        }
        *seen.since.get_or_insert_with(Instant::now)
    }

    /// This proposer, refusing client writes past `quotas`.
    pub fn with_quotas(mut self, quotas: Quotas) -> Self {
        self.quotas = quotas;
        self
    }

    /// Commits a client's write through whichever server leads, waiting
    /// out an election and following the leadership when it moves, and
    /// returns the raft index at which it was applied. The request's own
    /// checks run here first, so a malformed write is refused without a
    /// round trip; what depends on the state (whether a job exists, a
    /// node's secret, the quotas) is decided by the leader on current state.
    ///
    /// A definite refusal means the write did not happen. So once an
    /// attempt may have committed without this server hearing of it (the
    /// leader died or moved while it held the write), a later attempt's
    /// refusal that depends on the state may be that attempt's own effect
    /// (a purge that finds its job gone), and is answered `InDoubt` instead.
    pub async fn write(&self, write: ClientWrite) -> Result<Written, ProposeError> {
        let deadline = Instant::now() + self.leader_wait;
        // Why an earlier attempt may have taken effect, once one may have.
        let mut in_doubt: Option<String> = None;
        loop {
            let err = match self.attempt(&write, deadline, &mut in_doubt).await? {
                Ok(written) => return Ok(written),
                Err(Attempt {
                    error,
                    may_have_committed,
                }) => {
                    if let Some(earlier) = &in_doubt {
                        if error.is_definite_refusal() {
                            return Err(ProposeError::InDoubt {
                                earlier: earlier.clone(),
                                refusal: error.to_string(),
                            });
                        }
                    }
                    if may_have_committed {
                        in_doubt.get_or_insert_with(|| error.to_string());
                    }
                    error
                }
            };
            if matches!(err, ProposeError::OutOfTouch(_)) {
                // Cut off, or just woken from a pause: a woken leader hears
                // of its successor within a heartbeat and then sends the
                // write on to it. Still out of touch, the caller goes to
                // another server; a server cut off sends it there at once,
                // as no heartbeat can reach it (a write held when a leader
                // was cut off waited out the touch wait for nothing).
                if self.contact.cut_off() {
                    return Err(err);
                }
                let wait = (self.loss_began() + self.touch_wait)
                    .min(deadline)
                    .saturating_duration_since(Instant::now());
                match tokio::time::timeout(wait, self.contact.until_in_touch()).await {
                    Ok(()) => continue,
                    Err(_) => return Err(err),
                }
            }
            let retry = matches!(
                err,
                ProposeError::NoLeader
                    | ProposeError::LeaderUnreachable { .. }
                    | ProposeError::NotLeader { .. }
            );
            let now = Instant::now();
            if !retry || now >= deadline {
                return Err(err);
            }
            if matches!(err, ProposeError::NoLeader) {
                // Wake as soon as a leader is known rather than polling.
                let _ = self
                    .raft
                    .wait(Some(deadline - now))
                    .metrics(|m| m.current_leader.is_some(), "a leader is elected")
                    .await;
            } else {
                tokio::time::sleep(RETRY_PAUSE.min(deadline - now)).await;
            }
        }
    }

    /// One attempt at `write`: on to the leader when another server leads,
    /// else here, and on to the new leader when this server loses the
    /// leadership meanwhile (noting in `in_doubt` that the write may have
    /// committed here). `Err` only for a request that fails its own checks.
    async fn attempt(
        &self,
        write: &ClientWrite,
        deadline: Instant,
        in_doubt: &mut Option<String>,
    ) -> Result<Result<Written, Attempt>, ProposeError> {
        Ok(match leader_view(&self.raft) {
            // Straight to the leader: trying raft here first would only
            // cost a round through this server's raft core to learn the same.
            LeaderView::Elsewhere { id, addr } => {
                check_request(write)?;
                self.forward(id, &addr, write.clone(), deadline)
                    .await
                    .map_err(Attempt::sent)
            }
            _ => match self.write_here_until(write, 0, deadline).await {
                Err(Attempt {
                    error: ProposeError::NotLeader { id, addr },
                    may_have_committed,
                }) => {
                    if may_have_committed {
                        in_doubt.get_or_insert_with(|| {
                            format!("this server lost the leadership to server {id} while it held the write")
                        });
                    }
                    self.forward(id, &addr, write.clone(), deadline)
                        .await
                        .map_err(Attempt::sent)
                }
                other => other,
            },
        })
    }

    /// A client's write that a follower sent on: validated and proposed
    /// here only, exactly as if the client had called this server, with the
    /// sender's `ticket` in its entry. A server that no longer leads answers
    /// `NotLeader`, and the sender tries again.
    pub async fn write_forwarded(
        &self,
        write: ClientWrite,
        ticket: u64,
    ) -> Result<Written, ProposeError> {
        self.write_here_until(&write, ticket, Instant::now() + self.leader_wait)
            .await
            .map_err(|a| a.error)
    }

    /// Validates `write` on this server's state, makes its entry and
    /// proposes it here. A refusal that depends on the state is given only
    /// after a read barrier: a leader that was paused still believes it
    /// leads, on state that may be behind the cluster's.
    async fn write_here_until(
        &self,
        write: &ClientWrite,
        ticket: u64,
        deadline: Instant,
    ) -> Result<Written, Attempt> {
        if let Some(why) = self.contact.lost() {
            return Err(Attempt::not_sent(ProposeError::OutOfTouch(why)));
        }
        let prepared = match prepare(write, ticket, &self.store.snapshot(), &self.quotas) {
            Ok(prepared) => prepared,
            Err(refused) if refused.depends_on_state() => {
                self.read_barrier(deadline)
                    .await
                    .map_err(Attempt::not_sent)?;
                prepare(write, ticket, &self.store.snapshot(), &self.quotas)
                    .map_err(|r| Attempt::not_sent(r.into()))?
            }
            Err(refused) => return Err(Attempt::not_sent(refused.into())),
        };
        let index = self
            .write_local_until(prepared.entry, deadline)
            .await
            .map_err(Attempt::sent)?;
        Ok(Written {
            index,
            eval_id: prepared.eval_id,
        })
    }

    /// Returns once this server has confirmed with a quorum that it leads
    /// and has applied everything committed before: its state is then
    /// current. Fails as a write does where it does not lead.
    pub async fn read_barrier(&self, deadline: Instant) -> Result<(), ProposeError> {
        let wait = deadline.saturating_duration_since(Instant::now());
        let barrier = tokio::time::timeout(wait, self.raft.ensure_linearizable());
        let barrier = tokio::select! {
            passed = barrier => passed,
            why = self.contact.until_lost() => return Err(ProposeError::OutOfTouch(why)),
        };
        match barrier {
            Err(_) => Err(ProposeError::NotCommitted(wait)),
            Ok(Ok(_)) => Ok(()),
            Ok(Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f)))) => {
                match (f.leader_id, f.leader_node) {
                    (Some(id), Some(node)) => Err(ProposeError::NotLeader {
                        id,
                        addr: node.addr,
                    }),
                    _ => Err(ProposeError::NoLeader),
                }
            }
            Ok(Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(_)))) => {
                Err(ProposeError::NoLeader)
            }
            Ok(Err(RaftError::Fatal(_))) => Err(ProposeError::ShuttingDown),
        }
    }

    /// Proposes on this server; fails with `NotLeader` on a follower, and
    /// with `NotCommitted` when it cannot commit within the leader wait.
    pub async fn write_local(&self, entry: LogEntry) -> Result<u64, ProposeError> {
        self.write_local_until(entry, Instant::now() + self.leader_wait)
            .await
    }

    async fn write_local_until(
        &self,
        entry: LogEntry,
        deadline: Instant,
    ) -> Result<u64, ProposeError> {
        self.submit_local_until(entry, deadline).await
    }

    /// Hands `entry` to this server's raft now, so entries submitted one
    /// after another are logged in that order, and returns a future for
    /// its index; errors as [`Proposer::write_local`].
    fn submit_local_until(
        &self,
        entry: LogEntry,
        deadline: Instant,
    ) -> impl Future<Output = Result<u64, ProposeError>> + Send + 'static {
        let start = Instant::now();
        let wait = deadline.saturating_duration_since(start);
        let written = tokio::time::timeout(wait, self.batcher.submit(entry));
        let metrics = self.metrics.clone();
        let contact = self.contact.clone();
        async move {
            // A leader that loses touch while it holds the write answers at
            // once: the others are electing a successor, and the write may
            // never commit here (or may have, which the caller must know).
            let written = tokio::select! {
                written = written => written,
                why = contact.until_lost() => return Err(ProposeError::OutOfTouch(why)),
            };
            match written {
                Err(_) => Err(ProposeError::NotCommitted(wait)),
                Ok(outcome) => settled(outcome, start, &metrics),
            }
        }
    }

    /// Hands `entry` to this server's raft now and returns a future for
    /// its fate, however long that takes: its index once committed and
    /// applied here, or an error once it never will be (this server does
    /// not lead, or lost the lead and the entry was replaced in its log).
    /// Never in doubt, unlike [`Proposer::write_local`], which gives up at
    /// a deadline or a loss of touch while the entry may still commit: the
    /// plan applier checks its next plans on what its last entry did.
    fn submit_settled(
        &self,
        entry: LogEntry,
    ) -> impl Future<Output = Result<u64, ProposeError>> + Send + 'static {
        let start = Instant::now();
        let written = self.batcher.submit(entry);
        let metrics = self.metrics.clone();
        async move { settled(written.await, start, &metrics) }
    }

    /// Whether this server gathers concurrent writes into shared entries.
    pub fn batching(&self) -> bool {
        self.batcher.batching()
    }

    /// Sends the client's write on to server `id`, which leads as far as
    /// this server knows. The write is done when this server applies its
    /// entry, found by its ticket ([`crate::raft::write::tickets`]), or when the
    /// leader answers, whichever comes first; the leader's answer is what
    /// tells of a refusal. Gives up (and lets `write` ask again where the
    /// leader is) when the deadline passes or this server learns that
    /// leadership moved: a leader that was paused or cut off never answers,
    /// and waiting on it would hold the write past the election of its
    /// successor.
    async fn forward(
        &self,
        id: NodeId,
        addr: &str,
        write: ClientWrite,
        deadline: Instant,
    ) -> Result<Written, ProposeError> {
        self.metrics.writes_forwarded.inc();
        let unreachable = |detail: String| ProposeError::LeaderUnreachable {
            id,
            addr: addr.to_string(),
            detail,
        };
        let mut ticket = self.tickets.issue();
        let request = ForwardRequest {
            write: Some(write),
            ticket: ticket.id(),
        };
        let wait = deadline.saturating_duration_since(Instant::now());
        let call = tokio::time::timeout(wait, self.forwarder.send(id, addr, request));
        let moved = leader_replaced(&self.raft, id);
        tokio::select! {
            biased;
            written = ticket.applied() => {
                self.metrics.writes_forwarded_done.with_label_values(&["apply"]).inc();
                Ok(written)
            }
            answer = call => match answer {
                Err(_) => Err(unreachable(format!("no answer within {wait:?}"))),
                Ok(Ok(reply)) => {
                    self.metrics.writes_forwarded_done.with_label_values(&["answer"]).inc();
                    Ok(Written { index: reply.index, eval_id: reply.eval_id })
                }
                Ok(Err(status)) if stampede_proto::client::retryable(&status) => {
                    Err(unreachable(status.message().to_string()))
                }
                Ok(Err(status)) => Err(ProposeError::Rejected(Box::new(status))),
            },
            _ = moved => Err(unreachable("leadership moved while the write waited".into())),
        }
    }
}

/// What a write handed to raft at `start` came to.
fn settled(
    outcome: Result<u64, Failed>,
    start: Instant,
    metrics: &Metrics,
) -> Result<u64, ProposeError> {
    match outcome {
        Ok(index) => {
            metrics
                .raft_apply_seconds
                .observe(start.elapsed().as_secs_f64());
            Ok(index)
        }
        Err(Failed::NotLeader(Some((id, addr)))) => Err(ProposeError::NotLeader { id, addr }),
        Err(Failed::NotLeader(None)) => Err(ProposeError::NoLeader),
        Err(Failed::Raft(e)) => Err(ProposeError::Raft(e)),
        Err(Failed::ShuttingDown) => Err(ProposeError::ShuttingDown),
    }
}

/// A proposer that writes only on this server and never forwards: what the
/// leader-only mechanisms get, because what they write (broker deliveries,
/// plan results, heartbeat expiries) belongs to this server's term; on
/// another server it would be wrong.
#[derive(Clone)]
pub struct LocalProposer(Proposer);

impl LocalProposer {
    pub fn new(proposer: Proposer) -> Self {
        Self(proposer)
    }

    /// Proposes on this server; fails with `NotLeader` once it no longer leads.
    pub async fn write(&self, entry: LogEntry) -> Result<u64, ProposeError> {
        self.0.write_local(entry).await
    }

    /// As [`LocalProposer::write`], but hands the entry to raft now and
    /// returns a future for its index: what a caller uses to keep several
    /// writes on their way in the order it made them.
    pub fn submit(
        &self,
        entry: LogEntry,
    ) -> impl Future<Output = Result<u64, ProposeError>> + Send + 'static {
        self.0
            .submit_local_until(entry, Instant::now() + self.0.leader_wait)
    }

    /// Proposes on this server and waits for the entry's fate: its index
    /// once committed, or an error once it never will be. No deadline and
    /// no loss of touch ends the wait, since the entry may commit after
    /// either (see [`Proposer::submit_settled`]).
    pub async fn write_settled(&self, entry: LogEntry) -> Result<u64, ProposeError> {
        self.0.submit_settled(entry).await
    }

    /// Whether this server gathers concurrent writes into shared entries.
    pub fn batching(&self) -> bool {
        self.0.batching()
    }

    /// Returns once this server has confirmed with a quorum that it leads
    /// and has applied everything committed before: what a refusal that
    /// depends on the state waits for, since a leader woken from a pause
    /// still believes it leads, on state that may be behind.
    pub async fn read_barrier(&self) -> Result<(), ProposeError> {
        self.0
            .read_barrier(Instant::now() + self.0.leader_wait)
            .await
    }
}
