//! Faults under load: a capacity scenario's `[[faults]]` steps injected into
//! the local cluster while the job stream runs, what each cost, and the audit
//! of every acknowledged job on every server at the end.
//!
//! - [`inject`] drives the steps: at each step's time it waits until the
//!   cluster has settled (every server answers and names the same leader),
//!   picks the leader or a follower, strikes (kill -9, SIGSTOP, or cuts its
//!   peer links), and after the step's duration undoes it (starts the server
//!   again on its own data dir, SIGCONT, heals). Meanwhile it polls every
//!   server's `/v1/status` for the time to a new leader.
//! - [`measure`] turns what was injected and the stream's [`Journal`](crate::stream::Journal) into
//!   the summary's [`FaultReport`]s: unavailability and throughput come from
//!   the acknowledgements the stream saw, not from the servers.
//! - [`audit`] waits until every server has applied what any server had
//!   applied, then lists the jobs of each server on its own (reads are served
//!   locally) and compares them with what the stream submitted and what was
//!   acknowledged.

mod audit;
mod inject;
mod measure;
#[cfg(test)]
mod tests;

use std::time::Duration;

use stampede_launch::NodeId;
use stampede_proto::JobTrace;

use crate::scenario::FaultStep;
pub use audit::{audit, Audit};
pub use inject::inject;
pub use measure::{acks_per_second, measure, windows, FaultReport};

/// How long each wait of a fault run may take: deadlines for failing, not
/// measures (the measures are in the report).
#[derive(Debug, Clone)]
pub struct FaultsConfig {
    /// How often the servers' status is read around a fault.
    pub poll: Duration,
    /// How long one status read may take (a paused server never answers).
    pub status_timeout: Duration,
    /// Before a step: how long the cluster may take to settle (every server
    /// answering and naming the same leader); the step is skipped after it.
    pub settle_wait: Duration,
    /// After a step: how long, past the injection or the end of the fault
    /// (whichever is later), a leader may take to appear.
    pub leader_wait: Duration,
    /// The audit: how long the servers may take to answer and apply the same index.
    pub audit_wait: Duration,
    /// After a fault is undone: how long the struck servers may take to
    /// apply what the others had applied then (a restarted server left
    /// behind the leader's log installs a snapshot first).
    pub catch_up_wait: Duration,
    /// The windows before a fault and after its recovery whose
    /// acknowledgements per second are its throughput before and after.
    pub throughput_window: Duration,
}

impl Default for FaultsConfig {
    fn default() -> Self {
        Self {
            poll: Duration::from_millis(50),
            status_timeout: Duration::from_millis(500),
            settle_wait: Duration::from_secs(60),
            leader_wait: Duration::from_secs(60),
            audit_wait: Duration::from_secs(120),
            catch_up_wait: Duration::from_secs(120),
            throughput_window: Duration::from_secs(10),
        }
    }
}

/// A step as it was injected: what the driver saw, before the stream's
/// acknowledgements are matched against it ([`measure`]). Times are seconds
/// from the start of the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Injected {
    pub step: FaultStep,
    pub at_s: f64,
    pub servers: Vec<NodeId>,
    pub leader_before: NodeId,
    pub term_before: u64,
    /// When a leader was named ([`FaultReport::time_to_leader_s`]).
    pub leader_s: Option<f64>,
    pub leader_after: Option<NodeId>,
    /// When the fault was undone.
    pub undone_s: f64,
    /// The highest term once the cluster settled again after it.
    pub term_after: Option<u64>,
    /// When every struck server had applied what the others had applied
    /// when the fault was undone ([`FaultReport::catch_up_time_s`]).
    pub caught_up_s: Option<f64>,
    /// [`FaultReport::snapshots_installed`].
    pub snapshots_installed: Option<u64>,
    /// For a kill: every trace the struck servers held just before it
    /// ([`crate::critical_path::fetch::all_held`]), since their record of
    /// when they applied each entry dies with them.
    pub traces_before: Vec<JobTrace>,
}
