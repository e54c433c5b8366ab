//! What one applied batch changed, for blocking queries (the keys they
//! watch) and the leader's parts, and how many rows each table holds.

use std::sync::Arc;

use stampede_proto::Evaluation;

use super::{NodeRow, State};

/// What a blocking query can wait on. Applying an entry wakes only the
/// queries watching what it changed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum WatchKey {
    Nodes,
    Jobs,
    Job(String),
    JobAllocs(String),
    JobEvals(String),
    JobDeployments(String),
    /// Any deployment: what the leader's deployment watcher follows.
    Deployments,
    NodeAllocs(String),
    Eval(String),
    Deployment(String),
}

/// What one applied batch changed, for watchers and for the leader's
/// broker, blocked-evaluation tracker and heartbeat timers.
#[derive(Debug, Default)]
pub struct Changes {
    pub keys: Vec<WatchKey>,
    /// Evaluations written with status pending or blocked.
    pub evals: Vec<Arc<Evaluation>>,
    /// A node became ready, or allocations stopped: blocked work may fit now.
    pub capacity_changed: bool,
    /// The node classes (`datacenter/node_class`, see
    /// [`crate::model::class_key`]) where it did; [`ANY_CLASS`] when unknown.
    pub capacity_classes: std::collections::BTreeSet<String>,
    /// Nodes registered or whose status changed.
    pub nodes: Vec<Arc<NodeRow>>,
    /// The raft index of the last entry applied in the batch.
    pub index: u64,
    /// Rows garbage collection removed.
    pub collected: Collected,
    /// Client reports the apply refused, by reason.
    pub refused: RefusedReports,
    /// Rows in each table after the batch, if it applied any command.
    pub objects: Option<Objects>,
}

/// How many rows each table holds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Objects {
    pub nodes: u64,
    pub jobs: u64,
    pub evals: u64,
    pub allocs: u64,
    pub deployments: u64,
}

impl Objects {
    /// `(table label, rows)`, the `table` label of the state metric.
    pub fn by_table(&self) -> [(&'static str, u64); 5] {
        [
            ("nodes", self.nodes),
            ("jobs", self.jobs),
            ("evals", self.evals),
            ("allocs", self.allocs),
            ("deployments", self.deployments),
        ]
    }
}

/// The labels of [`Objects::by_table`].
pub const TABLES: [&str; 5] = ["nodes", "jobs", "evals", "allocs", "deployments"];

/// A capacity change whose node class is not known: everything blocked may fit.
pub const ANY_CLASS: &str = "*";

impl Changes {
    /// The allocations of job `job_id` changed. A plan's allocations all
    /// belong to one job: its key is kept once, not cloned for each of them
    /// and looked up again for each when the batch wakes its watchers.
    pub(super) fn watch_job_allocs(&mut self, job_id: &str) {
        if !self.recently(|k| matches!(k, WatchKey::JobAllocs(j) if j == job_id)) {
            self.keys.push(WatchKey::JobAllocs(job_id.to_string()));
        }
    }

    /// The allocations on node `node_id` changed (kept once for a run of
    /// them, as the job's).
    pub(super) fn watch_node_allocs(&mut self, node_id: &str) {
        if !self.recently(|k| matches!(k, WatchKey::NodeAllocs(n) if n == node_id)) {
            self.keys.push(WatchKey::NodeAllocs(node_id.to_string()));
        }
    }

    /// Whether one of the last few keys is `is`: each allocation written
    /// pushes its node's and its job's keys in turn, so a look a few keys
    /// back finds the same job's key again without searching them all.
    fn recently(&self, is: impl Fn(&WatchKey) -> bool) -> bool {
        self.keys.iter().rev().take(4).any(is)
    }

    /// Capacity freed up or appeared on a node of `class`.
    pub(super) fn capacity(&mut self, class: String) {
        self.capacity_changed = true;
        self.capacity_classes.insert(class);
    }

    /// What a snapshot install changes: possibly every row.
    pub fn everything(state: &State) -> Self {
        let mut keys = vec![WatchKey::Nodes, WatchKey::Jobs, WatchKey::Deployments];
        for j in state.jobs() {
            keys.push(WatchKey::Job(j.id.clone()));
            keys.push(WatchKey::JobAllocs(j.id.clone()));
            keys.push(WatchKey::JobEvals(j.id.clone()));
            keys.push(WatchKey::JobDeployments(j.id.clone()));
        }
        for n in state.nodes() {
            keys.push(WatchKey::NodeAllocs(n.id.to_string()));
        }
        for e in state.evals() {
            keys.push(WatchKey::Eval(e.id.clone()));
        }
        Changes {
            keys,
            evals: state.evals().cloned().collect(),
            capacity_changed: true,
            capacity_classes: [ANY_CLASS.to_string()].into(),
            nodes: state.nodes().cloned().collect(),
            index: state.index(),
            collected: Collected::default(),
            refused: RefusedReports::default(),
            objects: Some(state.objects()),
        }
    }
}

/// Client reports of allocations that an applied batch dropped, by reason.
/// Each rule is decided where the report is applied, on the state it is
/// applied to, so no report checked earlier against an older state (in a
/// batch on the leader, on a follower, before a leader change) gets past
/// it; the node learns the allocation's status from its next query.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RefusedReports {
    /// The allocation's client status was already final (complete,
    /// failed, or lost): a terminal allocation stays terminal.
    pub terminal: u64,
    /// A `pending` report for an allocation that runs: a late one, which
    /// would undo the `running` the node sent after it.
    pub back_to_pending: u64,
    /// No such allocation (collected since the node heard of it).
    pub unknown: u64,
    /// Not a client's report but a plan's update or stop of an allocation
    /// collected since its scheduler read it: the one other write that
    /// could set a client status (the scheduler's stale copy of it).
    pub plan_collected: u64,
}

impl RefusedReports {
    /// `(reason label, count)`, the `reason` of the refusal metric.
    pub fn by_reason(&self) -> [(&'static str, u64); 4] {
        [
            ("terminal", self.terminal),
            ("back_to_pending", self.back_to_pending),
            ("unknown", self.unknown),
            ("plan_collected", self.plan_collected),
        ]
    }
}

/// The labels of [`RefusedReports::by_reason`].
pub const REFUSAL_REASONS: [&str; 4] = ["terminal", "back_to_pending", "unknown", "plan_collected"];

/// How many rows of each table an applied batch removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Collected {
    pub evals: u64,
    pub allocs: u64,
    pub jobs: u64,
    pub deployments: u64,
    pub nodes: u64,
}

impl Collected {
    /// `(kind label, count)` for each table, the `kind` of the GC metric.
    pub fn by_kind(&self) -> [(&'static str, u64); 5] {
        [
            ("evals", self.evals),
            ("allocs", self.allocs),
            ("jobs", self.jobs),
            ("deployments", self.deployments),
            ("nodes", self.nodes),
        ]
    }
}

/// The labels of [`Collected::by_kind`], for metrics created at zero.
pub const KINDS: [&str; 5] = ["evals", "allocs", "jobs", "deployments", "nodes"];
