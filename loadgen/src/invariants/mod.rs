//! The invariant audit: after a run's drain, with the cluster at rest,
//! every server read on its own and checked against the scheduler's
//! promises and the stream's record (issue 48).
//!
//! - [`record`]: what the stream wrote and what each write was answered,
//!   and every allocation status seen over the run.
//! - [`sample`]: reads allocation statuses from the servers while the
//!   stream runs, into the record.
//! - [`read`]: waits until the cluster is at rest (every server at one
//!   applied index, the broker and the plan queue empty), then reads each
//!   server's jobs, allocations, nodes, deployments and evaluations.
//! - [`state`]: one server's state as read, and the scheduler's predicates
//!   over it.
//! - [`checks`]: the checks, pure functions of states and the record, one
//!   [`Invariant`] each.

pub mod checks;
pub mod read;
pub mod record;
pub mod sample;
pub mod state;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

pub use read::{audit, AuditConfig};
pub use record::{Outcome, Sightings, Write, WriteKind};
pub use state::ServerState;

pub const CAPACITY: &str = "capacity";
pub const DUPLICATES: &str = "duplicates";
pub const ACKED_WRITES: &str = "acked_writes";
pub const CONVERGENCE: &str = "convergence";
pub const LIVENESS: &str = "liveness";
pub const DEPLOYMENTS: &str = "deployments";
pub const TERMINAL_STAYS_TERMINAL: &str = "terminal_stays_terminal";
pub const DEFINITE_ERRORS: &str = "definite_errors";

/// Every invariant, in the order the summary lists them.
pub const NAMES: [&str; 8] = [
    CAPACITY,
    DUPLICATES,
    ACKED_WRITES,
    CONVERGENCE,
    LIVENESS,
    DEPLOYMENTS,
    TERMINAL_STAYS_TERMINAL,
    DEFINITE_ERRORS,
];

/// How many violations an invariant's detail names.
const NAMED: usize = 5;

/// One invariant as checked: `summary.json`'s `invariants[]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Invariant {
    pub name: String,
    pub ok: bool,
    /// How many violations were found.
    pub violations: u64,
    /// The first violations with their ids, or what was checked.
    pub detail: String,
}

impl Invariant {
    /// An invariant from its violations (each naming its ids) and, for
    /// when there are none, what was checked.
    pub fn new(name: &str, violations: Vec<String>, checked: String) -> Self {
        let detail = match violations.len() {
            0 => checked,
            n => {
                let first = violations[..n.min(NAMED)].join("; ");
                let more = n.saturating_sub(NAMED);
                match more {
                    0 => first,
                    _ => format!("{first}; and {more} more"),
                }
            }
        };
        Self {
            name: name.into(),
            ok: violations.is_empty(),
            violations: violations.len() as u64,
            detail,
        }
    }

    /// An invariant the audit could not check: it fails.
    pub fn unchecked(name: &str, why: &str) -> Self {
        Self {
            name: name.into(),
            ok: false,
            violations: 0,
            detail: format!("not checked: {why}"),
        }
    }
}

/// Every check over the servers' states (all read at one applied index)
/// and the stream's record. Safety checks run on every server; liveness
/// and deployments on the first (the others hold the same, or
/// convergence says not).
pub fn check_all(servers: &[ServerState], writes: &[Write], seen: &Sightings) -> Vec<Invariant> {
    let none = ServerState::default();
    let first = servers.first().unwrap_or(&none);
    vec![
        checks::capacity(servers),
        checks::duplicates(servers),
        checks::acked_writes(servers, writes, seen),
        checks::convergence(servers),
        checks::liveness(first),
        checks::deployments(first),
        checks::terminal_stays_terminal(seen),
        checks::definite_errors(servers, writes),
    ]
}

/// The failed invariants in words (`None` when all held): which, and their details.
pub fn failure(invariants: &[Invariant]) -> Option<String> {
    let failed: Vec<String> = invariants
        .iter()
        .filter(|i| !i.ok)
        .map(|i| format!("{} ({} violations: {})", i.name, i.violations, i.detail))
        .collect();
    (!failed.is_empty()).then(|| format!("invariant(s) violated: {}", failed.join(" | ")))
}

/// The run's invariants from its variants': one per name, ok only if ok in
/// every variant, violations summed, details named by variant.
pub fn across(variants: &[(&str, &[Invariant])]) -> Vec<Invariant> {
    let mut out: Vec<Invariant> = Vec::new();
    for name in NAMES {
        let ours: Vec<(&str, &Invariant)> = variants
            .iter()
            .filter_map(|(v, is)| Some((*v, is.iter().find(|i| i.name == name)?)))
            .collect();
        if ours.is_empty() {
            continue;
        }
        let detail = match ours.len() {
            1 => ours[0].1.detail.clone(),
            _ => ours
                .iter()
                .map(|(v, i)| format!("{v}: {}", i.detail))
                .collect::<Vec<_>>()
                .join(" / "),
        };
        out.push(Invariant {
            name: name.into(),
            ok: ours.iter().all(|(_, i)| i.ok),
            violations: ours.iter().map(|(_, i)| i.violations).sum(),
            detail,
        });
    }
    out
}
