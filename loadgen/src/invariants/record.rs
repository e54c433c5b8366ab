//! The record of the stream that the invariants are checked against: every
//! write with what the cluster answered, and every allocation status seen
//! over the run.

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;
use stampede_proto::client::ClientError;
use stampede_proto::{AllocClientStatus, Allocation};
use tonic::Code;

use super::alloc_id::AllocId;

/// What a write asked of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum WriteKind {
    /// A registration (new, an update or a scale) of the job at spec
    /// `version` (its group's `meta.spec`) with `count` allocations.
    Register { version: u64, count: u32 },
    /// Deregistered, kept for history.
    Stop,
    /// Deregistered and purged.
    Purge,
}

/// What the cluster answered a write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Outcome {
    Acked,
    /// An answer that says the write was refused, so did not take effect
    /// (NOT_FOUND, INVALID_ARGUMENT, ...).
    Definite {
        code: String,
        message: String,
    },
    /// No answer that says either way (UNAVAILABLE, DEADLINE_EXCEEDED, an
    /// internal error, a torn connection): the write may or may not have
    /// taken effect, at any time.
    Indefinite {
        message: String,
    },
}

impl Outcome {
    /// The outcome of a write's result.
    pub fn of<T>(result: &Result<T, ClientError>) -> Self {
        match result {
            Ok(_) => Outcome::Acked,
            Err(ClientError::Status(s)) if definite(s) => Outcome::Definite {
                code: format!("{:?}", s.code()),
                message: s.message().to_string(),
            },
            Err(e) => Outcome::Indefinite {
                message: e.to_string(),
            },
        }
    }
}

/// Whether a server's answer says the write did not happen. Retryable
/// statuses and internal errors (a proposal that failed in raft may still
/// have been committed) say nothing either way.
pub fn definite(s: &tonic::Status) -> bool {
    !stampede_proto::client::retryable(s)
        && matches!(
            s.code(),
            Code::InvalidArgument
                | Code::NotFound
                | Code::AlreadyExists
                | Code::PermissionDenied
                | Code::Unauthenticated
                | Code::FailedPrecondition
                | Code::OutOfRange
                | Code::ResourceExhausted
                | Code::Unimplemented
        )
}

/// One write of the stream. Times are seconds from the start of the stream.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Write {
    pub job_id: String,
    pub kind: WriteKind,
    pub sent_s: f64,
    pub answered_s: f64,
    pub outcome: Outcome,
}

/// One allocation's statuses as seen: the lowest raft index (its
/// `modify_index`) at which it was seen terminal on its client, the highest
/// at which it was seen terminal, and the highest at which it was seen
/// live. Indexes order the sightings whichever server answered and however
/// late: a live sighting at an index above a terminal one is a terminal
/// allocation that came back, and a terminal status that changed later (a
/// lost allocation later complete) took a report it must not have: a
/// terminal status is final, so one revived and stopped again between two
/// samples still shows.
///
/// Each sighting is one word (index and status), since a run follows
/// millions of allocations: see [`Seen::terminal`] and the others.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seen {
    terminal: Spot,
    last_terminal: Spot,
    live: Spot,
    /// The lowest and highest index it was seen created at (0: none yet).
    /// They differ for an allocation stored again after garbage collection
    /// removed it (which it does only to a terminal one): brought back.
    created: (u64, u64),
    /// Seen while the stream ran (not only by the audit's own reads).
    sampled: bool,
}

/// An index and a status in one word: the index above the low byte, the
/// status plus one in it; 0 is no sighting. (Raft indexes stay far below
/// 2^56, and the statuses kept are the enum's few values.)
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Spot(u64);

impl Spot {
    fn new(index: u64, status: i32) -> Self {
        debug_assert!(index < 1 << 56 && (0..255).contains(&status));
        Spot(index << 8 | (status as u64 + 1))
    }

    fn get(self) -> Option<(u64, i32)> {
        (self.0 != 0).then(|| (self.0 >> 8, (self.0 & 0xff) as i32 - 1))
    }
}

impl Seen {
    /// The first terminal sighting: (index, status).
    pub fn terminal(&self) -> Option<(u64, i32)> {
        self.terminal.get()
    }

    /// The latest terminal sighting.
    pub fn last_terminal(&self) -> Option<(u64, i32)> {
        self.last_terminal.get()
    }

    /// The latest live sighting.
    pub fn live(&self) -> Option<(u64, i32)> {
        self.live.get()
    }

    /// The indexes it was seen created at, lowest and highest, if it was
    /// seen created at two (see [`Seen::created`]).
    pub fn created_twice(&self) -> Option<(u64, u64)> {
        let (low, high) = self.created;
        (low != high).then_some((low, high))
    }

    fn see(&mut self, index: u64, status: i32, create_index: u64) {
        if create_index != 0 {
            self.created = match self.created {
                (0, _) => (create_index, create_index),
                (low, high) => (low.min(create_index), high.max(create_index)),
            };
        }
        // Only the enum's terminal and live statuses are kept.
        let at = || Spot::new(index, status);
        if AllocClientStatus::is_terminal(status) {
            if self.terminal().is_none_or(|(i, _)| index < i) {
                self.terminal = at();
            }
            if self.last_terminal().is_none_or(|(i, _)| index > i) {
                self.last_terminal = at();
            }
        } else if AllocClientStatus::is_live(status) && self.live().is_none_or(|(i, _)| index > i) {
            self.live = at();
        }
    }
}

/// An allocation's raft indexes as a read saw them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Indexes {
    /// Its last change.
    pub modify: u64,
    /// Where it was stored first (for this life of it).
    pub create: u64,
}

/// Every allocation seen over the run, by id, and the jobs seen dead.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sightings {
    pub allocs: HashMap<AllocId, Seen>,
    pub dead_jobs: BTreeSet<String>,
}

impl Sightings {
    /// A sighting while the stream ran.
    pub fn see(&mut self, a: &Allocation) {
        let seen = self.allocs.entry(AllocId::new(&a.id)).or_default();
        seen.sampled = true;
        seen.see(a.modify_index, a.client_status, a.create_index);
    }

    /// A sighting by the audit's own reads at the end: followed as the
    /// others, but not among [`Sightings::ids`].
    pub fn see_read(&mut self, id: &AllocId, at: Indexes, client_status: i32) {
        match self.allocs.get_mut(id) {
            Some(seen) => seen.see(at.modify, client_status, at.create),
            None => {
                let mut seen = Seen::default();
                seen.see(at.modify, client_status, at.create);
                self.allocs.insert(id.clone(), seen);
            }
        }
    }

    /// Notes that job `id` was seen dead (a batch job whose work is done,
    /// a stopped job with nothing left): garbage collection may remove it,
    /// so its absence at the end is no lost write.
    pub fn see_dead(&mut self, id: &str) {
        self.dead_jobs.insert(id.to_string());
    }

    /// Whether job `id` was seen dead during the run.
    pub fn seen_dead(&self, id: &str) -> bool {
        self.dead_jobs.contains(id)
    }

    /// The allocations seen while the stream ran.
    pub fn ids(&self) -> impl Iterator<Item = &AllocId> {
        self.allocs
            .iter()
            .filter(|(_, s)| s.sampled)
            .map(|(id, _)| id)
    }
}

/// A client status's name, for details.
pub fn client_status_name(status: i32) -> &'static str {
    match AllocClientStatus::try_from(status) {
        Ok(AllocClientStatus::Pending) => "pending",
        Ok(AllocClientStatus::Running) => "running",
        Ok(AllocClientStatus::Complete) => "complete",
        Ok(AllocClientStatus::Failed) => "failed",
        Ok(AllocClientStatus::Lost) => "lost",
        _ => "unknown",
    }
}
