//! The record of the stream that the invariants are checked against: every
//! write with what the cluster answered, and every allocation status seen
//! over the run.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use stampede_proto::client::ClientError;
use stampede_proto::{AllocClientStatus, Allocation};
use tonic::Code;

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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seen {
    pub terminal: Option<(u64, i32)>,
    pub last_terminal: Option<(u64, i32)>,
    pub live: Option<(u64, i32)>,
}

/// Every allocation seen over the run, by id, and the jobs seen dead.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sightings {
    pub allocs: BTreeMap<String, Seen>,
    pub dead_jobs: BTreeSet<String>,
}

impl Sightings {
    pub fn see(&mut self, a: &Allocation) {
        let status = a.client_status;
        let seen = self.allocs.entry(a.id.clone()).or_default();
        let at = (a.modify_index, status);
        if client_terminal(status) {
            if seen.terminal.is_none_or(|(i, _)| a.modify_index < i) {
                seen.terminal = Some(at);
            }
            if seen.last_terminal.is_none_or(|(i, _)| a.modify_index > i) {
                seen.last_terminal = Some(at);
            }
        } else if client_live(status) && seen.live.is_none_or(|(i, _)| a.modify_index > i) {
            seen.live = Some(at);
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

    pub fn ids(&self) -> impl Iterator<Item = &String> {
        self.allocs.keys()
    }
}

/// Complete, failed or lost on its client.
pub fn client_terminal(status: i32) -> bool {
    matches!(
        AllocClientStatus::try_from(status),
        Ok(AllocClientStatus::Complete | AllocClientStatus::Failed | AllocClientStatus::Lost)
    )
}

/// Pending or running on its client.
pub fn client_live(status: i32) -> bool {
    matches!(
        AllocClientStatus::try_from(status),
        Ok(AllocClientStatus::Pending | AllocClientStatus::Running)
    )
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
