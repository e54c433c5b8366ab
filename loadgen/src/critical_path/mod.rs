//! Where a job's time went: its critical path from loadgen's submission to
//! loadgen seeing it running, cut into eleven stages at twelve boundaries.
//!
//! The servers record the middle ten boundaries (`JobService.Trace`, Unix
//! microseconds, on the leader, a worker and nodesim); loadgen adds the
//! first (the submission's scheduled instant) and the last (when it saw the
//! job running), so a job's stages add up to its time to running as loadgen
//! measured it. The processes share the machine's wall clock but read it at
//! different moments, so a boundary may come out a little before the one
//! it follows: it is clamped to that one, and the clamps are counted.
//!
//! - this file: the stages, and one job's path from its trace ([`path`]);
//! - [`figures`]: a variant's paths summed up (percentiles per stage, each
//!   stage's share of the slowest jobs' time, the bottleneck) and its
//!   slowest jobs' paths (`traces.json`, the report's waterfall);
//! - [`fetch`]: asking the servers for the traces after the drain.
//!
//! Pure but for [`fetch`].

pub mod fetch;
mod figures;
#[cfg(test)]
mod tests;

use stampede_proto::{JobStage, JobTrace};

use crate::stream::RanJob;

pub use figures::{
    figures, figures_with_faults, slowest, slowest_marked, CriticalPath, FaultWindow, Span,
    TracedJob,
};

/// One stage of the path: its name and the process whose clock ends it
/// (a contract: `summary.json` and `traces.json` carry both; they, and the
/// stages' order, are `stampede_proto::JobStage`'s), and what it is in words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stage {
    pub stage: JobStage,
    pub name: &'static str,
    pub process: &'static str,
    pub what: &'static str,
    /// What a failover does to this stage, for the sentence of a run
    /// whose slowest jobs spent it across a fault.
    pub across_a_failover: &'static str,
}

const fn stage(stage: JobStage, what: &'static str, across_a_failover: &'static str) -> Stage {
    Stage {
        stage,
        name: stage.label(),
        process: stage.traced_by().label(),
        what,
        across_a_failover,
    }
}

/// How many stages a path has.
pub const N_STAGES: usize = JobStage::ALL.len();

/// The stages in path order (`JobStage::ALL`'s); stage `i` runs from
/// boundary `i` to `i + 1`.
pub const STAGES: [Stage; N_STAGES] = [
    stage(
        JobStage::Register,
        "the registration's commit",
        "the registration waited for a leader that answers (a write to a server that stopped answering waits for the caller's attempt timeout)",
    ),
    // From the registration's commit to the creation of the evaluation that
    // placed the last allocation: 0 but for a rolling update, whose later
    // steps each wait for the previous one's allocations to be healthy.
    stage(
        JobStage::Rollout,
        "the rolling update's pace: each step waited for the previous one's health",
        "a rolling update's next step waited for a new leader's deployment watcher",
    ),
    stage(
        JobStage::Enqueue,
        "enqueueing the evaluation",
        "the evaluation waited for the new leader to restore its broker",
    ),
    stage(
        JobStage::BrokerWait,
        "the broker's queue",
        "the evaluation waited in the new leader's broker until a worker reached it",
    ),
    stage(
        JobStage::CatchUp,
        "a worker catching up",
        "a worker's state caught up with the new leader's",
    ),
    stage(
        JobStage::Schedule,
        "scheduling",
        "the scheduler ran on a worker whose leader changed",
    ),
    stage(
        JobStage::PlanCommit,
        "the plan's commit",
        "the plan waited for a leader that could commit it",
    ),
    stage(
        JobStage::Deliver,
        "delivery to the node",
        "the node's allocation query was parked on a server that stopped answering, until the node found it gone and asked another",
    ),
    stage(
        JobStage::RunnerStart,
        "the runner's start",
        "the runner started while the cluster failed over (the runner does not wait on it)",
    ),
    stage(
        JobStage::ReportRunning,
        "client-update batching",
        "the node's running report went to a server that stopped answering, and waited for the node's retry",
    ),
    stage(
        JobStage::Observe,
        "loadgen's observation",
        "loadgen's own query was parked on a server that stopped answering",
    ),
];

// The words above follow the stages' one order.
const _: () = {
    let mut i = 0;
    while i < N_STAGES {
        assert!(STAGES[i].stage as usize == JobStage::ALL[i] as usize);
        i += 1;
    }
};

/// The stage a rolling update's later steps are in; its sentence names
/// the update blocks that set its pace.
pub const ROLLOUT: &str = JobStage::Rollout.label();

/// One job's path: its twelve boundaries in Unix microseconds, in order
/// (each at or after the one before), and what clamping them cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPath {
    pub job_id: String,
    pub boundaries: [u64; N_STAGES + 1],
    /// Boundaries read before the one they follow, moved up to it.
    pub clamps: u32,
    /// How far they were moved, in all.
    pub clamped_us: u64,
    /// Apply boundaries read after the step that followed the entry's apply
    /// on the leader, moved back to that step (see [`APPLIED`]), and by how
    /// much in all: not clamps, the step after is a true bound.
    pub bounded: u32,
    pub bounded_us: u64,
}

/// The boundaries read from an entry's apply (`registered`,
/// `eval_created`, `plan_committed`, `running_committed`: the earliest apply
/// any server still knows, see [`fetch`]), each followed by a step taken
/// only once the entry had applied somewhere: the leader creates a rolling
/// update's next evaluation after the registration applied (the
/// registration's own evaluation is the same entry), its broker enqueues an
/// evaluation after its apply, a node's blocking query returns an allocation after its
/// server applied the plan, and loadgen sees a job running after the server
/// it reads applied the report. So the next boundary bounds the true apply
/// from above. When the server that applied an entry first has lost its
/// record (the leader, killed and restarted: its apply times are in memory,
/// and on restart it marks the entries it replays), the earliest left is a
/// follower's, later than the leader's; read past the next step it is moved
/// back to it instead of that step and every one after being clamped up to
/// it.
pub const APPLIED: [usize; 4] = [1, 2, 7, 10];

impl JobPath {
    /// Each stage's time, in milliseconds, in path order.
    pub fn stages_ms(&self) -> [f64; N_STAGES] {
        std::array::from_fn(|i| us_to_ms(self.boundaries[i + 1] - self.boundaries[i]))
    }

    /// From the submission to loadgen seeing the job running, in milliseconds.
    pub fn time_to_running_ms(&self) -> f64 {
        us_to_ms(self.boundaries[N_STAGES] - self.boundaries[0])
    }
}

fn us_to_ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// Why a job that ran has no path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Untraced {
    #[error("no server knows the job")]
    NotFound,
    #[error("boundary {0} is unknown")]
    Missing(usize),
    /// The trace is of a later submission of the job (an update registered
    /// after the stream saw this one running).
    #[error("the trace is of a later submission")]
    Superseded,
}

/// The path of `run` from the servers' `trace` of its job: the boundaries
/// in path order, each apply boundary bounded by the step after it
/// ([`APPLIED`]), then each clamped to the one before when it was read
/// earlier.
pub fn path(run: &RanJob, trace: &JobTrace) -> Result<JobPath, Untraced> {
    if !trace.found {
        return Err(Untraced::NotFound);
    }
    // A server older than the `rollout` stage sends no registration time:
    // the evaluation's creation stands in, and the rollout is in `register`.
    let registered_us = match trace.registered_us {
        0 => trace.eval_created_us,
        at => at,
    };
    let raw = [
        run.scheduled_us,
        registered_us,
        trace.eval_created_us,
        trace.enqueued_us,
        trace.dequeued_us,
        trace.caught_up_us,
        trace.plan_submitted_us,
        trace.plan_committed_us,
        trace.delivered_us,
        trace.started_us,
        trace.running_committed_us,
        run.running_us,
    ];
    if let Some(i) = raw.iter().position(|&b| b == 0) {
        return Err(Untraced::Missing(i));
    }
    let mut boundaries = raw;
    // An apply boundary is the earliest apply any server still knows; the
    // step after it was taken on the leader's apply or later. Past that
    // step, the leader's own record was lost (a killed leader restarts
    // with no apply times and replays its log, so only a follower's later
    // apply is left): the step after is the nearest known bound.
    // Last first: the registration is bounded by the evaluation's creation
    // once that is bounded by its enqueue.
    let (mut bounded, mut bounded_us) = (0, 0);
    for i in APPLIED.into_iter().rev() {
        if boundaries[i] > boundaries[i + 1] {
            bounded += 1;
            bounded_us += boundaries[i] - boundaries[i + 1];
            boundaries[i] = boundaries[i + 1];
        }
    }
    // A trace whose evaluation was created after loadgen saw this run
    // running is not this run's path: a later submission's, or a rolling
    // update's step that came after the stream took the update for running
    // (on the old version's allocations, before the new one was placed).
    // (Read after the bound: an apply every server replayed after a restart
    // is not a later one.)
    if boundaries[2] > run.running_us {
        return Err(Untraced::Superseded);
    }
    let (mut clamps, mut clamped_us) = (0, 0);
    for i in 1..boundaries.len() {
        if boundaries[i] < boundaries[i - 1] {
            clamps += 1;
            clamped_us += boundaries[i - 1] - boundaries[i];
            boundaries[i] = boundaries[i - 1];
        }
    }
    Ok(JobPath {
        job_id: run.job_id.clone(),
        boundaries,
        clamps,
        clamped_us,
        bounded,
        bounded_us,
    })
}

/// The paths of the jobs that ran, from their traces: the last run of each
/// job id is traced (the servers keep the path of a job's newest version);
/// its earlier runs, and runs whose trace lacks a boundary, count as
/// untraced. `traces` answers `traced_ids(runs)`, in that order.
pub fn paths(runs: &[RanJob], traces: &[JobTrace]) -> (Vec<JobPath>, u64) {
    let last = last_runs(runs);
    let mut untraced = (runs.len() - last.len()) as u64;
    let mut out = Vec::with_capacity(last.len());
    for (run, trace) in last.iter().zip(traces) {
        match path(run, trace) {
            Ok(p) => out.push(p),
            Err(_) => untraced += 1,
        }
    }
    untraced += last.len().saturating_sub(traces.len()) as u64;
    (out, untraced)
}

/// The job ids to trace: each job's id once, in the order of its last run.
pub fn traced_ids(runs: &[RanJob]) -> Vec<String> {
    last_runs(runs)
        .into_iter()
        .map(|r| r.job_id.clone())
        .collect()
}

/// Each job's last run (the latest scheduled), in the order runs came.
pub(crate) fn last_runs(runs: &[RanJob]) -> Vec<&RanJob> {
    let mut latest: std::collections::HashMap<&str, usize> = Default::default();
    for (i, r) in runs.iter().enumerate() {
        let e = latest.entry(r.job_id.as_str()).or_insert(i);
        if runs[*e].scheduled_us <= r.scheduled_us {
            *e = i;
        }
    }
    let mut keep: Vec<usize> = latest.into_values().collect();
    keep.sort_unstable();
    keep.into_iter().map(|i| &runs[i]).collect()
}
