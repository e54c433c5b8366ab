//! The core scheduler: garbage collection as Nomad runs it, through the
//! broker and the workers like any other evaluation.
//!
//! The leader enqueues a core evaluation per kind of collection on a timer
//! (and a forced one on request); they exist only in the broker, never in
//! the state. A worker that dequeues one asks its state snapshot what is old
//! enough and done ([`collect`]) and sends the leader one `gc_*` write per
//! batch of ids. Those writes are raft entries like any other, so
//! `stampede_raft_entries_total{type=~"gc_.*"}` shows what collection costs.

use std::time::Duration;

use stampede_proto::eval_reap_request::Collect;
use stampede_proto::{
    EvalStatus, Evaluation, GcDeploymentsEntry, GcEvalsEntry, GcJobsEntry, GcNodesEntry, JobType,
};

use crate::state::gc::Cutoffs;
use crate::state::{State, StateStore};

/// Core evaluations go before any job's (whose priorities are 1 to 100),
/// as Nomad's `CoreJobPriority`.
pub const CORE_PRIORITY: u32 = 200;

/// Most ids one `gc_*` entry carries; a collection of more writes several.
pub const GC_BATCH: usize = 4096;

/// Nomad's core jobs, by Nomad's names for them.
#[allow(clippy::enum_variant_names)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CoreJob {
    EvalGc,
    JobGc,
    DeploymentGc,
    NodeGc,
    /// Every kind at once, with no age threshold (`POST /v1/system/gc`).
    ForceGc,
}

impl CoreJob {
    /// The core jobs the leader's timer runs.
    pub const PERIODIC: [CoreJob; 4] = [
        CoreJob::EvalGc,
        CoreJob::JobGc,
        CoreJob::DeploymentGc,
        CoreJob::NodeGc,
    ];

    /// The evaluation's `job_id`: a `/` no job id may hold, so a core job
    /// never waits behind a user's job in the broker.
    pub fn job_id(self) -> &'static str {
        match self {
            CoreJob::EvalGc => "core/eval-gc",
            CoreJob::JobGc => "core/job-gc",
            CoreJob::DeploymentGc => "core/deployment-gc",
            CoreJob::NodeGc => "core/node-gc",
            CoreJob::ForceGc => "core/force-gc",
        }
    }

    /// The core job an evaluation runs, if it is a core evaluation.
    pub fn of(eval: &Evaluation) -> Option<CoreJob> {
        if eval.r#type != JobType::Core as i32 {
            return None;
        }
        [CoreJob::ForceGc]
            .into_iter()
            .chain(Self::PERIODIC)
            .find(|j| j.job_id() == eval.job_id)
    }

    /// A core evaluation of this job, made when the state was at `index`
    /// (the worker waits for its own state to get there first).
    pub fn eval(self, index: u64) -> Evaluation {
        Evaluation {
            id: uuid::Uuid::new_v4().to_string(),
            job_id: self.job_id().into(),
            r#type: JobType::Core as i32,
            priority: CORE_PRIORITY,
            triggered_by: if self == CoreJob::ForceGc {
                "forced"
            } else {
                "scheduled"
            }
            .into(),
            status: EvalStatus::Pending as i32,
            create_index: index,
            modify_index: index,
            ..Default::default()
        }
    }
}

/// How old each kind of object must be before it is collected; the
/// defaults are Nomad's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcThresholds {
    pub eval: Duration,
    pub batch_eval: Duration,
    pub job: Duration,
    pub deployment: Duration,
    pub node: Duration,
}

impl Default for GcThresholds {
    fn default() -> Self {
        Self {
            eval: Duration::from_secs(3600),
            batch_eval: Duration::from_secs(24 * 3600),
            job: Duration::from_secs(4 * 3600),
            deployment: Duration::from_secs(3600),
            node: Duration::from_secs(24 * 3600),
        }
    }
}

impl GcThresholds {
    /// The index cutoffs these thresholds mean on this server now.
    pub fn cutoffs(&self, store: &StateStore) -> Cutoffs {
        Cutoffs {
            evals: store.index_as_of(self.eval),
            batch_evals: store.index_as_of(self.batch_eval),
            jobs: store.index_as_of(self.job),
            deployments: store.index_as_of(self.deployment),
            nodes: store.index_as_of(self.node),
        }
    }
}

/// What `job` collects on `state`, as writes of at most [`GC_BATCH`] ids
/// each; empty when there is nothing to collect. A forced collection runs
/// every kind, jobs first (a job takes its evaluations with it).
pub fn collect(state: &State, job: CoreJob, cutoffs: &Cutoffs) -> Vec<Collect> {
    let mut out = Vec::new();
    if matches!(job, CoreJob::JobGc | CoreJob::ForceGc) {
        for ids in state
            .collectable_jobs(cutoffs.jobs)
            .job_ids
            .chunks(GC_BATCH)
        {
            out.push(Collect::Jobs(GcJobsEntry {
                job_ids: ids.to_vec(),
            }));
        }
    }
    if matches!(job, CoreJob::EvalGc | CoreJob::ForceGc) {
        let found = state.collectable_evals(cutoffs);
        for ids in found.eval_ids.chunks(GC_BATCH) {
            out.push(Collect::Evals(GcEvalsEntry {
                eval_ids: ids.to_vec(),
                alloc_ids: vec![],
            }));
        }
        for ids in found.alloc_ids.chunks(GC_BATCH) {
            out.push(Collect::Evals(GcEvalsEntry {
                eval_ids: vec![],
                alloc_ids: ids.to_vec(),
            }));
        }
    }
    if matches!(job, CoreJob::DeploymentGc | CoreJob::ForceGc) {
        let found = state.collectable_deployments(cutoffs.deployments);
        for ids in found.deployment_ids.chunks(GC_BATCH) {
            out.push(Collect::Deployments(GcDeploymentsEntry {
                deployment_ids: ids.to_vec(),
            }));
        }
    }
    if matches!(job, CoreJob::NodeGc | CoreJob::ForceGc) {
        for ids in state
            .collectable_nodes(cutoffs.nodes)
            .node_ids
            .chunks(GC_BATCH)
        {
            out.push(Collect::Nodes(GcNodesEntry {
                node_ids: ids.to_vec(),
            }));
        }
    }
    out
}
