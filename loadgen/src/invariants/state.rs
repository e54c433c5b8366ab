//! What one server held when the audit read it: the input of the checks.

use std::collections::BTreeMap;

use stampede_proto::{
    AllocDesiredStatus, Allocation, ConstraintOperand, ConstraintTarget, Deployment, Evaluation,
    Job, Node, NodeStatus, Resources, TaskGroup,
};

use super::record::client_terminal;

/// One server's state, read from that server alone.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerState {
    pub server: u64,
    pub jobs: BTreeMap<String, Job>,
    pub allocs: BTreeMap<String, Allocation>,
    pub nodes: BTreeMap<String, Node>,
    pub deployments: BTreeMap<String, Deployment>,
    pub evals: BTreeMap<String, Evaluation>,
}

/// An allocation as the audit keeps it: what no check reads (its
/// evaluation, descriptions, task states and client times) dropped as it is
/// read. The audit holds every allocation of every server at once, six
/// million after `c2m`, and those fields were most of their bytes.
pub fn audited(a: Allocation) -> Allocation {
    Allocation {
        eval_id: String::new(),
        desired_description: String::new(),
        client_description: String::new(),
        task_states: Vec::new(),
        deployment_id: String::new(),
        client_times: None,
        ..a
    }
}

/// Whether an allocation holds resources on its node: neither stopped by
/// the scheduler nor complete, failed or lost on its client (the cluster's
/// own `alloc_terminal`, negated).
pub fn live(a: &Allocation) -> bool {
    a.desired_status != AllocDesiredStatus::Stop as i32 && !client_terminal(a.client_status)
}

impl ServerState {
    /// The live allocations of job `job_id`.
    pub fn live_allocs<'a>(&'a self, job_id: &'a str) -> impl Iterator<Item = &'a Allocation> {
        self.allocs
            .values()
            .filter(move |a| a.job_id == job_id && live(a))
    }

    /// What the live allocations on each node use.
    pub fn used(&self) -> BTreeMap<&str, Resources> {
        let mut used: BTreeMap<&str, Resources> = BTreeMap::new();
        for a in self.allocs.values().filter(|a| live(a)) {
            let r = a.resources.unwrap_or_default();
            let u = used.entry(a.node_id.as_str()).or_default();
            u.cpu_mhz += r.cpu_mhz;
            u.memory_mb += r.memory_mb;
        }
        used
    }
}

/// Whether the scheduler may place the group on `node` at all, room aside:
/// ready, eligible, and allowed by the job's datacenters and the group's
/// constraints (the scheduler's `feasible`).
pub fn feasible(node: &Node, job: &Job, tg: &TaskGroup) -> bool {
    node.status == NodeStatus::Ready as i32
        && !node.ineligible
        && (job.datacenters.is_empty() || job.datacenters.contains(&node.datacenter))
        && tg.constraints.iter().all(|c| {
            let actual = match ConstraintTarget::try_from(c.target) {
                Ok(ConstraintTarget::Datacenter) => &node.datacenter,
                Ok(ConstraintTarget::NodeClass) => &node.node_class,
                _ => return false,
            };
            match ConstraintOperand::try_from(c.operand) {
                Ok(ConstraintOperand::Equal) => *actual == c.value,
                Ok(ConstraintOperand::NotEqual) => *actual != c.value,
                _ => false,
            }
        })
}

/// Whether `ask` fits on `node` beside what is `used` there.
pub fn room(node: &Node, used: Resources, ask: Resources) -> bool {
    let cap = node.resources.unwrap_or_default();
    used.cpu_mhz + ask.cpu_mhz <= cap.cpu_mhz && used.memory_mb + ask.memory_mb <= cap.memory_mb
}
