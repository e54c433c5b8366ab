//! The invariant audit: after a run's drain, with the cluster at rest,
//! every server read on its own and checked against the scheduler's
//! promises and the stream's record (issue 48).
//!
//! - [`alloc_id`]: an allocation's id as its 128 bits, the key of both
//!   the record and a server's state.
//! - [`record`]: what the stream wrote and what each write was answered,
//!   and every allocation status seen over the run.
//! - [`sample`]: reads allocation statuses from the servers while the
//!   stream runs, into the record.
//! - [`read`]: waits until the cluster is at rest (every server at one
//!   applied index, the broker and the plan queue empty), then reads each
//!   server's jobs, allocations, nodes, deployments and evaluations, one
//!   server at a time, each checked ([`Checking`]) and dropped before the
//!   next.
//! - [`state`]: one server's state as read (each allocation kept as the
//!   few fields the checks read), and the scheduler's predicates over it.
//! - [`checks`]: the checks, pure functions of states and the record, one
//!   [`Invariant`] each; `convergence` compares the other servers with the
//!   first by a digest of each job's allocations.

pub mod alloc_id;
pub mod checks;
pub mod read;
pub mod record;
pub mod sample;
pub mod state;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;

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

/// What the invariant audit cost loadgen: `summary.json`'s
/// `invariants_audit`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct AuditCost {
    /// From the end of the drain to the invariants checked, waiting for
    /// the cluster to come to rest included.
    pub duration_s: f64,
    /// Of which reading and checking the servers (the last time, when the
    /// cluster moved while being read).
    pub reading_s: f64,
    /// loadgen's peak resident memory (its high-water mark, `VmHWM`)
    /// before the audit and after it, MiB: the audit's own peak when the
    /// two differ.
    pub loadgen_peak_rss_mib_before: Option<u64>,
    pub loadgen_peak_rss_mib_after: Option<u64>,
}

/// One invariant as checked: `summary.json`'s `invariants[]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Invariant {
    pub name: String,
    pub ok: bool,
    /// How many violations were found.
    pub violations: u64,
    /// The first violations with their ids, or what was checked.
    pub detail: String,
}

/// Violations as they are found: how many, and the first few (the ones
/// an invariant's detail names), so that a server that differs
/// everywhere costs no more than one that differs once.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Found {
    pub count: u64,
    pub first: Vec<String>,
}

impl Found {
    pub fn push(&mut self, violation: String) {
        self.count += 1;
        if self.first.len() < NAMED {
            self.first.push(violation);
        }
    }

    /// `other`'s violations after these.
    pub fn extend(&mut self, other: Found) {
        self.count += other.count;
        let room = NAMED.saturating_sub(self.first.len());
        self.first.extend(other.first.into_iter().take(room));
    }
}

impl From<Vec<String>> for Found {
    fn from(violations: Vec<String>) -> Self {
        let mut found = Found::default();
        for v in violations {
            found.push(v);
        }
        found
    }
}

impl Invariant {
    /// An invariant from its violations (each naming its ids) and, for
    /// when there are none, what was checked.
    pub fn new(name: &str, violations: impl Into<Found>, checked: String) -> Self {
        let found = violations.into();
        let detail = match found.count {
            0 => checked,
            n => {
                let first = found.first.join("; ");
                match n.saturating_sub(NAMED as u64) {
                    0 => first,
                    more => format!("{first}; and {more} more"),
                }
            }
        };
        Self {
            name: name.into(),
            ok: found.count == 0,
            violations: found.count,
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

// The whole servers at once, for the tests; the audit checks them as it
// reads them (`read`).
#[cfg(test)]
/// Every check over the servers' states (all read at one applied index)
/// and the stream's record. Safety checks run on every server; liveness
/// and deployments on the first (the others hold the same, or
/// convergence says not).
pub fn check_all(servers: &[ServerState], writes: &[Write], seen: &Sightings) -> Vec<Invariant> {
    let mut checking = Checking::new(writes);
    for (i, s) in servers.iter().enumerate() {
        checking.check(s);
        if i > 0 {
            let differing = checking.differing(s);
            checking.converge(s, &differing, &servers[0].allocs);
        }
    }
    checking.finish(seen)
}

/// The checks as the servers are read one at a time: each server's state
/// is [`Checking::check`]ed, then, for every server after the first,
/// compared with the first by digest ([`Checking::differing`]) and, where
/// a job's allocations differ, row by row ([`Checking::converge`], handed
/// the first server's allocations of those jobs again); then the state can
/// be dropped. What is kept between servers is small: the violations
/// found, each server's jobs with their live counts, and the first
/// server's [`checks::Baseline`].
pub struct Checking<'a> {
    writes: &'a [Write],
    servers: usize,
    nodes: usize,
    capacity: Found,
    duplicates: Found,
    convergence: Found,
    /// The first server's liveness, deployments and baseline.
    first: Option<(Invariant, Invariant, checks::Baseline)>,
    views: Vec<state::JobsView>,
}

impl<'a> Checking<'a> {
    pub fn new(writes: &'a [Write]) -> Self {
        Self {
            writes,
            servers: 0,
            nodes: 0,
            capacity: Found::default(),
            duplicates: Found::default(),
            convergence: Found::default(),
            first: None,
            views: Vec::new(),
        }
    }

    /// The checks of one server, in the order the servers are read.
    pub fn check(&mut self, s: &ServerState) {
        self.servers += 1;
        self.nodes += checks::capacity_on(s, &mut self.capacity);
        checks::duplicates_on(s, &mut self.duplicates);
        self.views.push(state::JobsView::of(s));
        if self.first.is_none() {
            self.first = Some((
                checks::liveness(s),
                checks::deployments(s),
                checks::Baseline::of(s),
            ));
        }
    }

    /// The jobs whose allocations on `s` differ from the first server's,
    /// by digest (none for the first server itself).
    pub fn differing(&self, s: &ServerState) -> BTreeSet<String> {
        match &self.first {
            Some((_, _, base)) if self.servers > 1 => base.differing(s),
            _ => BTreeSet::new(),
        }
    }

    /// Names what differs on `s` from the first server, row by row:
    /// `first_allocs` holds the first server's allocations of at least the
    /// `differing` jobs. Also compares the jobs and deployments, so it
    /// must be called for every server after the first, even with no
    /// job differing.
    pub fn converge(
        &mut self,
        s: &ServerState,
        differing: &BTreeSet<String>,
        first_allocs: &state::Allocs,
    ) {
        if let Some((_, _, base)) = &self.first {
            base.compare(s, differing, first_allocs, &mut self.convergence);
        }
    }

    /// Every invariant, in the order of [`NAMES`], once every server was
    /// checked; `seen`: the record with the servers' reads added.
    pub fn finish(self, seen: &Sightings) -> Vec<Invariant> {
        let views = &self.views;
        let (liveness, deployments, convergence) = match self.first {
            Some((l, d, base)) => (
                l,
                d,
                Invariant::new(CONVERGENCE, self.convergence, base.checked(self.servers)),
            ),
            None => {
                let none = ServerState::default();
                (
                    checks::liveness(&none),
                    checks::deployments(&none),
                    Invariant::new(CONVERGENCE, Found::default(), "no server read".into()),
                )
            }
        };
        vec![
            Invariant::new(
                CAPACITY,
                self.capacity,
                format!(
                    "{} nodes checked across {} servers",
                    self.nodes, self.servers
                ),
            ),
            Invariant::new(DUPLICATES, self.duplicates, String::new()),
            checks::acked_writes_in(views, self.writes, seen),
            convergence,
            liveness,
            deployments,
            checks::terminal_stays_terminal(seen),
            checks::definite_errors_in(views, self.writes),
        ]
    }
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
