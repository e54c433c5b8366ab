//! The scheduler: turns an evaluation into a plan.
//!
//! Pure functions over one consistent copy of the state: a worker snapshots its
//! state store, calls [`schedule`] and submits the plan it returns. Nothing here
//! writes state or does I/O, so workers, tests and benches run the same code.
//!
//! Two schedulers, as in Nomad. The generic one (service and batch jobs) keeps
//! `count` allocations per task group, one per index, and places the missing ones
//! by bin-packing over a couple of random candidates. The system one runs one
//! allocation of each group on every feasible node.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use rand::seq::SliceRandom;
use rand::Rng;
use stampede_proto::{
    AllocClientStatus, AllocDesiredStatus, Allocation, ConstraintOperand, ConstraintTarget,
    Deployment, DeploymentGroupState, DeploymentStatus, Evaluation, Job, JobType, Node, NodeStatus,
    Plan, Resources, TaskGroup, UpdateStrategy,
};

use crate::state::{alloc_terminal, State};

/// How many nodes with room a service or batch placement compares: Nomad's
/// "power of two choices" gets most of the packing of a full scan at a tiny
/// fraction of its cost, and spreads concurrent workers over different nodes.
const CANDIDATES: usize = 2;

/// What the scheduler decided for one evaluation.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// The plan to submit: eval_id, job_id, priority, snapshot_index (= state.index()),
    /// node_allocation (new allocations by node id) and node_update (allocations to stop, by node id).
    pub plan: Plan,
    /// Placements that found no node with room, by task group name.
    pub failed: BTreeMap<String, u32>,
}

/// Runs the scheduler for `eval` (eval.type: service, batch or system) on `state`.
pub fn schedule(state: &State, eval: &Evaluation, rng: &mut impl Rng) -> Outcome {
    let job = state.job(&eval.job_id);
    let mut planner = Planner::new(state, eval, job.as_deref());
    match job.as_deref() {
        Some(job) if !job.stop => {
            // The evaluation names its scheduler; an old or hand-made one may not.
            let kind = if eval.r#type == JobType::Unspecified as i32 {
                job.r#type
            } else {
                eval.r#type
            };
            if kind == JobType::System as i32 {
                planner.system(job);
            } else {
                planner.generic(job, kind == JobType::Batch as i32, rng);
            }
        }
        _ => planner.stop_all(),
    }
    Outcome {
        plan: planner.plan,
        failed: planner.failed,
    }
}

/// Whether a plan changes nothing (no allocations placed or stopped, no deployment).
pub fn plan_is_empty(plan: &Plan) -> bool {
    plan.deployment.is_none()
        && plan.node_allocation.values().all(|l| l.allocs.is_empty())
        && plan.node_update.values().all(|l| l.allocs.is_empty())
}

/// Whether `node` may run allocations of this job's task group at all: status READY, not `ineligible`,
/// datacenter in job.datacenters (any when that list is empty), and every constraint of the group
/// (target DATACENTER or NODE_CLASS, operand EQUAL / NOT_EQUAL against `value`) holds.
pub fn feasible(node: &Node, job: &Job, tg: &TaskGroup) -> bool {
    node.status == NodeStatus::Ready as i32
        && !node.ineligible
        && (job.datacenters.is_empty() || job.datacenters.contains(&node.datacenter))
        && tg.constraints.iter().all(|c| {
            let actual = match ConstraintTarget::try_from(c.target) {
                Ok(ConstraintTarget::Datacenter) => &node.datacenter,
                Ok(ConstraintTarget::NodeClass) => &node.node_class,
                // A constraint we cannot check must not place work where it may not belong.
                _ => return false,
            };
            match ConstraintOperand::try_from(c.operand) {
                Ok(ConstraintOperand::Equal) => *actual == c.value,
                Ok(ConstraintOperand::NotEqual) => *actual != c.value,
                _ => false,
            }
        })
}

/// Whether an allocation was placed for an older spec of its group than the
/// current one (a change of count alone leaves allocations current).
fn outdated(a: &Allocation, tg: &TaskGroup) -> bool {
    a.job_version < tg.spec_version
}

/// Whether `ask` fits on `node` given `used` (both cpu_mhz and memory_mb).
pub fn fits(node: &Node, used: &Resources, ask: &Resources) -> bool {
    let cap = node.resources.unwrap_or_default();
    used.cpu_mhz.saturating_add(ask.cpu_mhz) <= cap.cpu_mhz
        && used.memory_mb.saturating_add(ask.memory_mb) <= cap.memory_mb
}

/// Bin-packing score: how full the node would be after placing `ask`, summed
/// over cpu and memory. Higher is better, so work is packed onto busy nodes and
/// empty nodes stay free for large asks.
fn score(node: &Node, used: &Resources, ask: &Resources) -> f64 {
    let cap = node.resources.unwrap_or_default();
    let ratio = |used: u64, ask: u64, cap: u64| {
        if cap == 0 {
            0.0
        } else {
            (used + ask) as f64 / cap as f64
        }
    };
    ratio(used.cpu_mhz, ask.cpu_mhz, cap.cpu_mhz)
        + ratio(used.memory_mb, ask.memory_mb, cap.memory_mb)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The plan being built for one evaluation, and what it has done to node usage.
struct Planner<'a> {
    state: &'a State,
    eval: &'a Evaluation,
    plan: Plan,
    failed: BTreeMap<String, u32>,
    /// Usage of each node looked at so far, with this plan's stops and
    /// placements applied. Computed once per node: `State::node_usage` walks
    /// all of a node's allocations, too slow to repeat for every placement.
    usage: HashMap<String, Resources>,
    now_ms: u64,
    /// The deployment new allocations belong to (empty for none).
    deployment_id: String,
}

impl<'a> Planner<'a> {
    fn new(state: &'a State, eval: &'a Evaluation, job: Option<&Job>) -> Self {
        let plan = Plan {
            eval_id: eval.id.clone(),
            job_id: eval.job_id.clone(),
            priority: job.map_or(eval.priority, |j| j.priority),
            snapshot_index: state.index(),
            ..Default::default()
        };
        Planner {
            state,
            eval,
            plan,
            failed: BTreeMap::new(),
            usage: HashMap::new(),
            now_ms: now_ms(),
            deployment_id: String::new(),
        }
    }

    /// A deregistered or purged job: stop everything it still runs.
    fn stop_all(&mut self) {
        for a in self.state.job_allocs(&self.eval.job_id) {
            if !alloc_terminal(&a) {
                self.stop(&a, "job deregistered".into());
            }
        }
    }

    /// Service and batch jobs: reconcile each group's indexes, then place what is missing.
    fn generic(&mut self, job: &Job, batch: bool, rng: &mut impl Rng) {
        let allocs = self.state.job_allocs(&job.id);
        self.stop_removed_groups(job, &allocs);
        let deployment = if batch {
            None
        } else {
            self.deployment(job, &allocs)
        };
        // All stops come before any placement, so the room they free is
        // usable, and usage only grows while placing (see `pick`).
        let mut missing = Vec::new();
        for tg in &job.task_groups {
            let group: Vec<&Allocation> = allocs
                .iter()
                .filter(|a| a.task_group == tg.name)
                .map(|a| a.as_ref())
                .collect();
            let rollout = deployment
                .as_ref()
                .and_then(|d| d.task_groups.get(&tg.name).map(|g| (d, g)));
            let placements = match (rollout, tg.update.filter(|u| u.max_parallel > 0)) {
                (Some((d, g)), Some(u)) => self.reconcile_rollout(job, tg, &group, d, g, &u),
                _ => self
                    .reconcile(job, tg, &group, batch)
                    .into_iter()
                    .map(|i| (i, false))
                    .collect(),
            };
            missing.push((tg, placements));
        }
        self.deployment_id = deployment.map(|d| d.id.clone()).unwrap_or_default();
        for (tg, placements) in missing {
            if placements.is_empty() {
                continue;
            }
            let mut nodes: Vec<Arc<Node>> = self
                .state
                .nodes()
                .filter(|n| feasible(n, job, tg))
                .cloned()
                .collect();
            nodes.shuffle(rng);
            let ask = tg.resources.unwrap_or_default();
            let mut cursor = 0;
            for (index, canary) in placements {
                match self.pick(&mut nodes, &mut cursor, &ask) {
                    Some(node_id) => self.place(job, tg, index, &node_id, canary),
                    None => *self.failed.entry(tg.name.clone()).or_default() += 1,
                }
            }
        }
    }

    /// The deployment of the job's current version: the existing one, or a
    /// new one (put in the plan) when a group with an `update` block has
    /// work to do. `None` when no group rolls out.
    fn deployment(&mut self, job: &Job, allocs: &[Arc<Allocation>]) -> Option<Arc<Deployment>> {
        let rolling: Vec<&TaskGroup> = job
            .task_groups
            .iter()
            .filter(|tg| tg.update.is_some_and(|u| u.max_parallel > 0))
            .collect();
        if rolling.is_empty() || job.r#type != JobType::Service as i32 {
            return None;
        }
        if let Some(d) = self
            .state
            .job_deployments(&job.id)
            .into_iter()
            .filter(|d| d.job_version == job.version)
            .max_by_key(|d| d.create_index)
        {
            return Some(d);
        }
        let mut groups = HashMap::new();
        let mut work = false;
        for tg in rolling {
            let u = tg.update.unwrap_or_default();
            let live: Vec<&Arc<Allocation>> = allocs
                .iter()
                .filter(|a| a.task_group == tg.name && !alloc_terminal(a))
                .collect();
            let replacing = live.iter().any(|a| outdated(a, tg));
            let current = live.iter().filter(|a| !outdated(a, tg)).count();
            work |= replacing || current < tg.count as usize;
            groups.insert(
                tg.name.clone(),
                DeploymentGroupState {
                    desired_total: tg.count,
                    // Canaries only make sense when there is an older version to compare with.
                    desired_canaries: if replacing { u.canary } else { 0 },
                    auto_promote: u.auto_promote,
                    progress_deadline_ms: u.progress_deadline_ms,
                    require_progress_by_ms: if u.progress_deadline_ms > 0 {
                        self.now_ms + u.progress_deadline_ms
                    } else {
                        0
                    },
                    ..Default::default()
                },
            );
        }
        if !work {
            return None;
        }
        let d = Arc::new(Deployment {
            id: uuid::Uuid::new_v4().to_string(),
            job_id: job.id.clone(),
            job_version: job.version,
            status: DeploymentStatus::Running as i32,
            status_description: "deployment is running".into(),
            task_groups: groups,
            ..Default::default()
        });
        self.plan.deployment = Some(Deployment::clone(&d));
        Some(d)
    }

    /// A group that rolls out under deployment `d`: stops what is scaled
    /// down or duplicated, then, per index, replaces outdated allocations at
    /// most `max_parallel` at a time (counting new ones not yet healthy),
    /// after canaries are placed and promoted. Missing indexes are placed at
    /// once. Returns the (index, canary) placements to make.
    fn reconcile_rollout(
        &mut self,
        job: &Job,
        tg: &TaskGroup,
        allocs: &[&Allocation],
        d: &Deployment,
        g: &DeploymentGroupState,
        u: &UpdateStrategy,
    ) -> Vec<(u32, bool)> {
        let count = tg.count as usize;
        let mut live: Vec<&Allocation> = allocs
            .iter()
            .copied()
            .filter(|a| !alloc_terminal(a))
            .collect();
        live.sort_by_key(|a| (a.index, outdated(a, tg), a.create_index));
        let mut current: Vec<Option<&Allocation>> = vec![None; count];
        let mut old: Vec<Vec<&Allocation>> = vec![Vec::new(); count];
        for a in live {
            let i = a.index as usize;
            if i >= count {
                self.stop(a, "scaled down".into());
            } else if outdated(a, tg) {
                old[i].push(a);
            } else if current[i].is_some() {
                self.stop(a, format!("duplicate of index {i}"));
            } else {
                current[i] = Some(a);
            }
        }
        let ours = |a: &&Allocation| a.deployment_id == d.id;
        let running = d.status == DeploymentStatus::Running as i32;
        let mut placements = Vec::new();
        let canarying = g.desired_canaries > 0 && !g.promoted;
        if canarying {
            let canaries = current
                .iter()
                .flatten()
                .filter(|a| a.canary && ours(a))
                .count();
            let mut need = if running {
                (g.desired_canaries as usize).saturating_sub(canaries)
            } else {
                0
            };
            for i in 0..count {
                if current[i].is_none() && old[i].is_empty() {
                    placements.push((i as u32, false));
                } else if current[i].is_none() && need > 0 {
                    placements.push((i as u32, true));
                    need -= 1;
                }
            }
            return placements;
        }
        let in_flight = current
            .iter()
            .flatten()
            .filter(|a| ours(a) && a.healthy != Some(true))
            .count();
        let mut budget = if running {
            (u.max_parallel as usize).saturating_sub(in_flight)
        } else {
            // A failed or cancelled rollout replaces nothing more.
            0
        };
        for i in 0..count {
            if current[i].is_some() {
                for a in &old[i] {
                    self.stop(a, format!("replaced by job version {}", job.version));
                }
            } else if !old[i].is_empty() {
                if budget > 0 {
                    budget -= 1;
                    for a in &old[i] {
                        self.stop(a, format!("replaced by job version {}", job.version));
                    }
                    placements.push((i as u32, false));
                }
            } else {
                placements.push((i as u32, false));
            }
        }
        placements
    }

    /// Stops the allocations of one group that should not run and returns the
    /// indexes in 0..count that need a new allocation.
    fn reconcile(
        &mut self,
        job: &Job,
        tg: &TaskGroup,
        allocs: &[&Allocation],
        batch: bool,
    ) -> Vec<u32> {
        let mut live: Vec<&Allocation> = allocs
            .iter()
            .copied()
            .filter(|a| !alloc_terminal(a))
            .collect();
        // Per index, the current version first and then the oldest, so that of
        // duplicates the established allocation is the one kept.
        live.sort_by_key(|a| (a.index, outdated(a, tg), a.create_index));
        let count = tg.count as usize;
        let mut covered = vec![false; count];
        for a in live {
            let i = a.index as usize;
            if i >= count {
                self.stop(a, "scaled down".into());
            } else if outdated(a, tg) {
                self.stop(a, format!("replaced by job version {}", job.version));
            } else if covered[i] {
                self.stop(a, format!("duplicate of index {i}"));
            } else {
                covered[i] = true;
            }
        }
        if batch {
            // Finished work of this version is done; it is not run again.
            for a in allocs {
                if a.client_status == AllocClientStatus::Complete as i32
                    && a.desired_status == AllocDesiredStatus::Run as i32
                    && !outdated(a, tg)
                    && (a.index as usize) < count
                {
                    covered[a.index as usize] = true;
                }
            }
        }
        (0..tg.count).filter(|&i| !covered[i as usize]).collect()
    }

    /// Walks `nodes` from `cursor` (wrapping, at most once around), takes the
    /// first [`CANDIDATES`] nodes with room for `ask` and returns the best packed.
    /// Continuing from where the last placement stopped spreads a job's
    /// allocations instead of piling them on the first nodes of the list.
    ///
    /// A node without room now has none for the rest of this evaluation
    /// (placing only adds usage), so it is dropped from `nodes`: a nearly full
    /// cluster is not scanned again for every placement, and once a scan finds
    /// nothing the list is empty and later placements fail at once.
    fn pick(
        &mut self,
        nodes: &mut Vec<Arc<Node>>,
        cursor: &mut usize,
        ask: &Resources,
    ) -> Option<String> {
        let mut best: Option<(f64, String)> = None;
        let mut found = 0;
        let mut left = nodes.len();
        while found < CANDIDATES && left > 0 {
            left -= 1;
            if *cursor >= nodes.len() {
                *cursor = 0;
            }
            let node = &nodes[*cursor];
            let used = self.used(&node.id);
            if fits(node, &used, ask) {
                let s = score(node, &used, ask);
                if best.as_ref().is_none_or(|(b, _)| s > *b) {
                    best = Some((s, node.id.clone()));
                }
                found += 1;
                *cursor += 1;
            } else {
                nodes.remove(*cursor);
            }
        }
        best.map(|(_, id)| id)
    }

    /// System jobs: one allocation of each group on every feasible node.
    fn system(&mut self, job: &Job) {
        let allocs = self.state.job_allocs(&job.id);
        self.stop_removed_groups(job, &allocs);
        let mut targets = Vec::new();
        for tg in &job.task_groups {
            let mut live: Vec<&Allocation> = allocs
                .iter()
                .filter(|a| a.task_group == tg.name && !alloc_terminal(a))
                .map(|a| a.as_ref())
                .collect();
            live.sort_by_key(|a| (outdated(a, tg), a.create_index));
            let mut covered: HashSet<&str> = HashSet::new();
            for a in live {
                let ok = self
                    .state
                    .node(&a.node_id)
                    .is_some_and(|n| feasible(&n, job, tg));
                if !ok {
                    self.stop(a, "node no longer feasible".into());
                } else if outdated(a, tg) {
                    // Replaced on the same node below, in the room this frees.
                    self.stop(a, format!("replaced by job version {}", job.version));
                } else if !covered.insert(&a.node_id) {
                    self.stop(a, "duplicate on node".into());
                }
            }
            let nodes: Vec<Arc<Node>> = self
                .state
                .nodes()
                .filter(|n| !covered.contains(n.id.as_str()) && feasible(n, job, tg))
                .cloned()
                .collect();
            targets.push((tg, nodes));
        }
        for (tg, nodes) in targets {
            let ask = tg.resources.unwrap_or_default();
            for node in nodes {
                if fits(&node, &self.used(&node.id), &ask) {
                    self.place(job, tg, 0, &node.id, false);
                } else {
                    *self.failed.entry(tg.name.clone()).or_default() += 1;
                }
            }
        }
    }

    /// Stops live allocations of groups that the job no longer has.
    fn stop_removed_groups(&mut self, job: &Job, allocs: &[Arc<Allocation>]) {
        for a in allocs {
            if !alloc_terminal(a) && !job.task_groups.iter().any(|tg| tg.name == a.task_group) {
                self.stop(a, "task group removed from job".into());
            }
        }
    }

    /// The node's usage as this plan leaves it.
    fn used(&mut self, node_id: &str) -> Resources {
        if let Some(u) = self.usage.get(node_id) {
            return *u;
        }
        let u = self.state.node_usage(node_id);
        self.usage.insert(node_id.to_string(), u);
        u
    }

    fn stop(&mut self, alloc: &Allocation, why: String) {
        let r = alloc.resources.unwrap_or_default();
        let mut used = self.used(&alloc.node_id);
        used.cpu_mhz = used.cpu_mhz.saturating_sub(r.cpu_mhz);
        used.memory_mb = used.memory_mb.saturating_sub(r.memory_mb);
        self.usage.insert(alloc.node_id.clone(), used);
        let stopped = Allocation {
            desired_status: AllocDesiredStatus::Stop as i32,
            desired_description: why,
            modify_time_ms: self.now_ms,
            ..alloc.clone()
        };
        self.plan
            .node_update
            .entry(alloc.node_id.clone())
            .or_default()
            .allocs
            .push(stopped);
    }

    fn place(&mut self, job: &Job, tg: &TaskGroup, index: u32, node_id: &str, canary: bool) {
        let ask = tg.resources.unwrap_or_default();
        let mut used = self.used(node_id);
        used.cpu_mhz += ask.cpu_mhz;
        used.memory_mb += ask.memory_mb;
        self.usage.insert(node_id.to_string(), used);
        let alloc = Allocation {
            id: uuid::Uuid::new_v4().to_string(),
            eval_id: self.eval.id.clone(),
            job_id: job.id.clone(),
            task_group: tg.name.clone(),
            node_id: node_id.to_string(),
            name: format!("{}.{}[{}]", job.id, tg.name, index),
            index,
            resources: Some(ask),
            desired_status: AllocDesiredStatus::Run as i32,
            client_status: AllocClientStatus::Pending as i32,
            job_type: job.r#type,
            job_version: job.version,
            deployment_id: self.deployment_id.clone(),
            canary,
            min_healthy_time_ms: tg.update.map_or(0, |u| u.min_healthy_time_ms),
            create_time_ms: self.now_ms,
            modify_time_ms: self.now_ms,
            ..Default::default()
        };
        self.plan
            .node_allocation
            .entry(node_id.to_string())
            .or_default()
            .allocs
            .push(alloc);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Changes;
    use rand::rngs::StdRng;
    use rand::SeedableRng;
    use stampede_proto::{
        log_entry::Msg, AllocClientUpdateEntry, Constraint, JobDeregisterEntry, JobRegisterEntry,
        LogEntry, NodeRegisterEntry, NodeStatusEntry, PlanApplyEntry,
    };

    /// A state built the way servers build it: by applying log entries.
    #[derive(Default)]
    struct Cluster {
        state: State,
        index: u64,
    }

    impl Cluster {
        fn apply(&mut self, msg: Msg) {
            self.index += 1;
            let entry = LogEntry { msg: Some(msg) };
            self.state
                .apply(self.index, &entry, &mut Changes::default());
        }

        fn add_node(&mut self, node: Node) {
            self.apply(Msg::NodeRegister(NodeRegisterEntry {
                node: Some(node),
                evals: vec![],
            }));
        }

        /// `n` ready nodes in dc1, each with `cpu` MHz and `mem` MB.
        fn add_nodes(&mut self, n: usize, cpu: u64, mem: u64) {
            for i in 0..n {
                self.add_node(node(&format!("n{i:05}"), "dc1", "", cpu, mem));
            }
        }

        fn set_status(&mut self, node_id: &str, status: NodeStatus) {
            self.apply(Msg::NodeStatus(NodeStatusEntry {
                node_id: node_id.into(),
                status: status as i32,
                ..Default::default()
            }));
        }

        fn register(&mut self, job: Job) {
            self.apply(Msg::JobRegister(JobRegisterEntry {
                job: Some(job),
                eval: None,
            }));
        }

        fn deregister(&mut self, job_id: &str, purge: bool) {
            self.apply(Msg::JobDeregister(JobDeregisterEntry {
                job_id: job_id.into(),
                purge,
                eval: None,
            }));
        }

        /// Commits a plan as the plan applier would: all its allocations in one entry.
        fn commit(&mut self, plan: &Plan) {
            let allocs = plan
                .node_update
                .values()
                .chain(plan.node_allocation.values())
                .flat_map(|l| l.allocs.iter().cloned())
                .collect();
            self.apply(Msg::PlanApply(PlanApplyEntry {
                allocs,
                deployment: plan.deployment.clone(),
                eval_id: plan.eval_id.clone(),
            }));
        }

        /// The client reports the allocation running and healthy.
        fn healthy(&mut self, alloc_id: &str) {
            self.apply(Msg::AllocClientUpdate(AllocClientUpdateEntry {
                allocs: vec![Allocation {
                    id: alloc_id.into(),
                    client_status: AllocClientStatus::Running as i32,
                    healthy: Some(true),
                    ..Default::default()
                }],
                ..Default::default()
            }));
        }

        /// What the deployment watcher would write now; returns whether it
        /// asked for an evaluation.
        fn watch(&mut self, deployment_id: &str) -> bool {
            let d = self.state.deployment(deployment_id).unwrap();
            let (next, wants_eval) = crate::deployment_watcher::assess(&self.state, &d, 0);
            self.apply(Msg::DeploymentUpdate(
                stampede_proto::DeploymentUpdateEntry {
                    deployment: Some(next),
                    evals: vec![],
                },
            ));
            wants_eval
        }

        fn client_status(&mut self, alloc_id: &str, status: AllocClientStatus) {
            self.apply(Msg::AllocClientUpdate(AllocClientUpdateEntry {
                allocs: vec![Allocation {
                    id: alloc_id.into(),
                    client_status: status as i32,
                    ..Default::default()
                }],
                ..Default::default()
            }));
        }

        fn schedule_seeded(&self, job_id: &str, seed: u64) -> Outcome {
            let r#type = self
                .state
                .job(job_id)
                .map_or(JobType::Service as i32, |j| j.r#type);
            let eval = Evaluation {
                id: format!("eval-{}", self.index),
                job_id: job_id.into(),
                r#type,
                priority: 50,
                ..Default::default()
            };
            schedule(&self.state, &eval, &mut StdRng::seed_from_u64(seed))
        }

        fn schedule(&self, job_id: &str) -> Outcome {
            self.schedule_seeded(job_id, 7)
        }

        /// Schedules and commits; returns what was scheduled.
        fn run(&mut self, job_id: &str) -> Outcome {
            let out = self.schedule(job_id);
            self.commit(&out.plan);
            out
        }

        fn live(&self, job_id: &str) -> Vec<Arc<Allocation>> {
            let mut live: Vec<_> = self
                .state
                .job_allocs(job_id)
                .into_iter()
                .filter(|a| !alloc_terminal(a))
                .collect();
            live.sort_by_key(|a| (a.task_group.clone(), a.index));
            live
        }

        /// No node holds more than it has.
        fn assert_within_capacity(&self) {
            for n in self.state.nodes() {
                let used = self.state.node_usage(&n.id);
                let cap = n.resources.unwrap();
                assert!(
                    used.cpu_mhz <= cap.cpu_mhz && used.memory_mb <= cap.memory_mb,
                    "{} holds {used:?} of {cap:?}",
                    n.id
                );
            }
        }
    }

    fn node(id: &str, dc: &str, class: &str, cpu: u64, mem: u64) -> Node {
        Node {
            id: id.into(),
            datacenter: dc.into(),
            node_class: class.into(),
            resources: Some(Resources {
                cpu_mhz: cpu,
                memory_mb: mem,
            }),
            ..Default::default()
        }
    }

    fn group(name: &str, count: u32, cpu: u64, mem: u64) -> TaskGroup {
        TaskGroup {
            name: name.into(),
            count,
            resources: Some(Resources {
                cpu_mhz: cpu,
                memory_mb: mem,
            }),
            ..Default::default()
        }
    }

    fn job(id: &str, r#type: JobType, groups: Vec<TaskGroup>) -> Job {
        Job {
            id: id.into(),
            r#type: r#type as i32,
            priority: 60,
            task_groups: groups,
            ..Default::default()
        }
    }

    fn placed(plan: &Plan) -> Vec<&Allocation> {
        let mut v: Vec<_> = plan
            .node_allocation
            .values()
            .flat_map(|l| &l.allocs)
            .collect();
        v.sort_by_key(|a| (a.task_group.clone(), a.index));
        v
    }

    fn stopped(plan: &Plan) -> Vec<&Allocation> {
        let mut v: Vec<_> = plan.node_update.values().flat_map(|l| &l.allocs).collect();
        v.sort_by_key(|a| (a.task_group.clone(), a.index));
        v
    }

    fn indexes<'a>(allocs: impl IntoIterator<Item = &'a Allocation>) -> Vec<u32> {
        let mut v: Vec<u32> = allocs.into_iter().map(|a| a.index).collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn places_every_index_without_overfilling_a_node() {
        let mut c = Cluster::default();
        // 20 nodes with room for 3 each: 50 allocations need real packing.
        c.add_nodes(20, 1000, 1000);
        c.register(job(
            "web",
            JobType::Service,
            vec![group("app", 50, 300, 250)],
        ));
        let out = c.schedule("web");

        let plan = &out.plan;
        assert!(out.failed.is_empty(), "{:?}", out.failed);
        assert_eq!(plan.job_id, "web");
        assert_eq!(plan.priority, 60);
        assert_eq!(plan.snapshot_index, c.state.index());
        assert!(plan.eval_token.is_empty() && plan.deployment.is_none());
        assert!(stopped(plan).is_empty());
        let allocs = placed(plan);
        assert_eq!(indexes(allocs.iter().copied()), (0..50).collect::<Vec<_>>());
        for (node_id, list) in &plan.node_allocation {
            for a in &list.allocs {
                assert_eq!(&a.node_id, node_id);
                assert_eq!(a.name, format!("web.app[{}]", a.index));
                assert_eq!(a.eval_id, plan.eval_id);
                assert_eq!(a.desired_status, AllocDesiredStatus::Run as i32);
                assert_eq!(a.client_status, AllocClientStatus::Pending as i32);
                assert_eq!(a.resources, group("app", 0, 300, 250).resources);
                assert!(uuid::Uuid::parse_str(&a.id).is_ok());
                assert!(a.create_time_ms > 0);
            }
        }

        c.commit(plan);
        assert_eq!(c.live("web").len(), 50);
        c.assert_within_capacity();
        // Nothing left to do: scheduling again changes nothing.
        let again = c.schedule("web");
        assert!(plan_is_empty(&again.plan) && again.failed.is_empty());
    }

    #[test]
    fn a_job_too_big_places_what_fits_and_counts_the_rest() {
        let mut c = Cluster::default();
        c.add_nodes(4, 1000, 1000);
        // Room for 3 per node by cpu: 12 of 20 fit.
        c.register(job(
            "big",
            JobType::Service,
            vec![group("app", 20, 300, 100)],
        ));
        let out = c.run("big");
        assert_eq!(placed(&out.plan).len(), 12);
        assert_eq!(out.failed, BTreeMap::from([("app".to_string(), 8)]));
        c.assert_within_capacity();

        // The next evaluation places nothing more and still reports the 8.
        let again = c.schedule("big");
        assert!(plan_is_empty(&again.plan));
        assert_eq!(again.failed["app"], 8);
    }

    #[test]
    fn scale_down_stops_the_highest_indexes() {
        let mut c = Cluster::default();
        c.add_nodes(3, 4000, 4000);
        c.register(job(
            "web",
            JobType::Service,
            vec![group("app", 5, 100, 100)],
        ));
        c.run("web");
        c.register(job(
            "web",
            JobType::Service,
            vec![group("app", 3, 100, 100)],
        ));
        let out = c.run("web");

        let scaled: Vec<&Allocation> = stopped(&out.plan)
            .into_iter()
            .filter(|a| a.desired_description == "scaled down")
            .collect();
        assert_eq!(indexes(scaled), vec![3, 4]);
        // A count change is a new job version but not a new group spec: the
        // kept allocations keep running, nothing is placed.
        assert_eq!(stopped(&out.plan).len(), 2);
        assert!(placed(&out.plan).is_empty());
        let live = c.live("web");
        assert_eq!(indexes(live.iter().map(|a| a.as_ref())), vec![0, 1, 2]);
        assert!(live.iter().all(|a| a.job_version == 0));
    }

    #[test]
    fn a_deregistered_job_stops_everything() {
        for purge in [false, true] {
            let mut c = Cluster::default();
            c.add_nodes(3, 4000, 4000);
            c.register(job(
                "web",
                JobType::Service,
                vec![group("a", 4, 100, 100), group("b", 2, 100, 100)],
            ));
            c.run("web");
            c.deregister("web", purge);
            let out = c.run("web");

            assert!(placed(&out.plan).is_empty());
            let stops = stopped(&out.plan);
            assert_eq!(stops.len(), 6);
            assert!(stops
                .iter()
                .all(|a| a.desired_status == AllocDesiredStatus::Stop as i32
                    && a.desired_description == "job deregistered"));
            // A purged job is gone: the plan takes the evaluation's priority.
            assert_eq!(out.plan.priority, if purge { 50 } else { 60 });
            assert!(c.live("web").is_empty());
            assert!(plan_is_empty(&c.schedule("web").plan));
        }
    }

    #[test]
    fn a_new_version_replaces_each_allocation_at_its_index() {
        let mut c = Cluster::default();
        c.add_nodes(4, 4000, 4000);
        c.register(job(
            "web",
            JobType::Service,
            vec![group("app", 4, 100, 100)],
        ));
        c.run("web");
        let old: Vec<String> = c.live("web").iter().map(|a| a.id.clone()).collect();
        c.register(job(
            "web",
            JobType::Service,
            vec![group("app", 4, 200, 100)],
        ));
        let out = c.run("web");

        let stops = stopped(&out.plan);
        assert_eq!(indexes(stops.iter().copied()), vec![0, 1, 2, 3]);
        assert!(stops
            .iter()
            .all(|a| a.desired_description == "replaced by job version 1"));
        let new = placed(&out.plan);
        assert_eq!(indexes(new.iter().copied()), vec![0, 1, 2, 3]);
        assert!(new
            .iter()
            .all(|a| a.job_version == 1 && a.resources.unwrap().cpu_mhz == 200));
        let live = c.live("web");
        assert_eq!(live.len(), 4);
        assert!(live
            .iter()
            .all(|a| a.job_version == 1 && !old.contains(&a.id)));
    }

    fn rolling(count: u32, max_parallel: u32, canary: u32, cpu: u64) -> Job {
        let mut g = group("app", count, cpu, 100);
        g.update = Some(UpdateStrategy {
            max_parallel,
            canary,
            auto_promote: true,
            ..Default::default()
        });
        job("web", JobType::Service, vec![g])
    }

    #[test]
    fn a_rolling_update_replaces_max_parallel_per_round() {
        let mut c = Cluster::default();
        c.add_nodes(10, 8000, 8000);
        c.register(rolling(20, 5, 0, 100));
        let first = c.run("web");
        let d0 = first
            .plan
            .deployment
            .clone()
            .expect("a first version deploys too");
        assert_eq!(placed(&first.plan).len(), 20, "new work is placed at once");
        for a in c.live("web") {
            c.healthy(&a.id);
        }
        c.watch(&d0.id);
        assert_eq!(
            c.state.deployment(&d0.id).unwrap().status,
            DeploymentStatus::Successful as i32
        );

        c.register(rolling(20, 5, 0, 200));
        let mut rounds = Vec::new();
        let mut d1 = None;
        for _ in 0..10 {
            let out = c.run("web");
            if let Some(d) = &out.plan.deployment {
                d1 = Some(d.id.clone());
            }
            let d1 = d1.clone().expect("the new version has a deployment");
            assert!(placed(&out.plan).iter().all(|a| a.deployment_id == d1));
            assert_eq!(placed(&out.plan).len(), stopped(&out.plan).len());
            if placed(&out.plan).is_empty() {
                break;
            }
            rounds.push(placed(&out.plan).len());
            assert!(
                c.run("web").plan.node_allocation.is_empty(),
                "nothing more until healthy"
            );
            for a in placed(&out.plan) {
                c.healthy(&a.id);
            }
            let status = c.state.deployment(&d1).unwrap().status;
            assert_eq!(status, DeploymentStatus::Running as i32);
            c.watch(&d1);
        }
        assert_eq!(rounds, vec![5, 5, 5, 5]);
        let d1 = c.state.deployment(&d1.unwrap()).unwrap();
        assert_eq!(d1.status, DeploymentStatus::Successful as i32);
        assert_eq!(d1.task_groups["app"].healthy, 20);
        assert!(c.live("web").iter().all(|a| a.job_version == 1));
    }

    #[test]
    fn a_deployment_fails_on_an_unhealthy_allocation_or_a_missed_deadline() {
        let mut c = Cluster::default();
        c.add_nodes(4, 8000, 8000);
        let mut j = rolling(2, 1, 0, 100);
        j.task_groups[0]
            .update
            .as_mut()
            .unwrap()
            .progress_deadline_ms = 60_000;
        c.register(j.clone());
        let d = c.run("web").plan.deployment.unwrap();
        let assess = |c: &Cluster, at: u64| {
            let d = c.state.deployment(&d.id).unwrap();
            crate::deployment_watcher::assess(&c.state, &d, at).0
        };
        let now = now_ms();
        assert_eq!(assess(&c, now).status, DeploymentStatus::Running as i32);
        let late = assess(&c, now + 61_000);
        assert_eq!(late.status, DeploymentStatus::Failed as i32);
        assert_eq!(late.status_description, "progress deadline reached");

        let a = c.live("web")[0].id.clone();
        c.apply(Msg::AllocClientUpdate(AllocClientUpdateEntry {
            allocs: vec![Allocation {
                id: a,
                client_status: AllocClientStatus::Running as i32,
                healthy: Some(false),
                ..Default::default()
            }],
            ..Default::default()
        }));
        let unhealthy = assess(&c, now);
        assert_eq!(unhealthy.status, DeploymentStatus::Failed as i32);
        assert_eq!(unhealthy.task_groups["app"].unhealthy, 1);
    }

    #[test]
    fn canaries_run_beside_the_old_version_until_promoted() {
        let mut c = Cluster::default();
        c.add_nodes(4, 8000, 8000);
        c.register(rolling(4, 2, 1, 100));
        let d0 = c.run("web").plan.deployment.unwrap();
        for a in c.live("web") {
            c.healthy(&a.id);
        }
        c.watch(&d0.id);

        c.register(rolling(4, 2, 1, 200));
        let out = c.run("web");
        let d1 = out.plan.deployment.clone().unwrap();
        let canaries = placed(&out.plan);
        assert_eq!(canaries.len(), 1);
        assert!(canaries[0].canary && stopped(&out.plan).is_empty());
        assert_eq!(c.live("web").len(), 5, "the canary runs beside all four");
        let canary = canaries[0].id.clone();
        assert!(c.run("web").plan.node_allocation.is_empty());
        assert!(
            !c.watch(&d1.id),
            "nothing to do before the canary is healthy"
        );

        c.healthy(&canary);
        assert!(c.watch(&d1.id), "a healthy canary is promoted");
        assert!(c.state.deployment(&d1.id).unwrap().task_groups["app"].promoted);
        let out = c.run("web");
        // The canary's index is taken over, two more are replaced.
        assert_eq!(stopped(&out.plan).len(), 3);
        assert_eq!(placed(&out.plan).len(), 2);
    }

    #[test]
    fn lost_allocations_are_replaced_on_other_nodes() {
        let mut c = Cluster::default();
        c.add_nodes(3, 4000, 4000);
        c.register(job(
            "web",
            JobType::Service,
            vec![group("app", 9, 100, 100)],
        ));
        c.run("web");
        let on_n0 = indexes(
            c.live("web")
                .iter()
                .filter(|a| a.node_id == "n00000")
                .map(|a| a.as_ref()),
        );
        assert!(
            !on_n0.is_empty(),
            "the test needs allocations on the node that goes down"
        );
        c.set_status("n00000", NodeStatus::Down);
        let out = c.run("web");

        assert!(
            stopped(&out.plan).is_empty(),
            "lost allocations are already terminal"
        );
        let new = placed(&out.plan);
        assert_eq!(indexes(new.iter().copied()), on_n0);
        assert!(new.iter().all(|a| a.node_id != "n00000"));
        assert_eq!(
            indexes(c.live("web").iter().map(|a| a.as_ref())),
            (0..9).collect::<Vec<_>>()
        );
    }

    #[test]
    fn datacenter_and_node_class_constraints_are_honoured() {
        let mut c = Cluster::default();
        for (id, dc, class) in [
            ("a", "dc1", "gpu"),
            ("b", "dc1", "cpu"),
            ("c", "dc2", "gpu"),
            ("d", "dc3", "gpu"),
            ("e", "dc1", ""),
        ] {
            c.add_node(node(id, dc, class, 4000, 4000));
        }
        let mut gpu = group("gpu", 6, 100, 100);
        gpu.constraints = vec![Constraint {
            target: ConstraintTarget::NodeClass as i32,
            operand: ConstraintOperand::Equal as i32,
            value: "gpu".into(),
        }];
        let mut not_dc1 = group("elsewhere", 6, 100, 100);
        not_dc1.constraints = vec![Constraint {
            target: ConstraintTarget::Datacenter as i32,
            operand: ConstraintOperand::NotEqual as i32,
            value: "dc1".into(),
        }];
        let mut j = job("web", JobType::Service, vec![gpu, not_dc1]);
        j.datacenters = vec!["dc1".into(), "dc2".into()];
        c.register(j);
        let out = c.schedule("web");

        for a in placed(&out.plan) {
            let want: &[&str] = if a.task_group == "gpu" {
                &["a", "c"]
            } else {
                &["c"]
            };
            assert!(
                want.contains(&a.node_id.as_str()),
                "{} placed on {}",
                a.name,
                a.node_id
            );
        }
        assert_eq!(placed(&out.plan).len(), 12);

        // A group whose constraints match no node cannot be placed at all.
        let mut none = group("none", 2, 100, 100);
        none.constraints = vec![Constraint {
            target: ConstraintTarget::NodeClass as i32,
            operand: ConstraintOperand::Equal as i32,
            value: "tpu".into(),
        }];
        c.register(job("tpu", JobType::Service, vec![none]));
        let out = c.schedule("tpu");
        assert!(placed(&out.plan).is_empty());
        assert_eq!(out.failed["none"], 2);
    }

    #[test]
    fn feasibility_rules() {
        let n = node("a", "dc1", "gpu", 1, 1);
        let mut j = job("j", JobType::Service, vec![]);
        let tg = group("g", 1, 1, 1);
        assert!(feasible(
            &Node {
                status: NodeStatus::Ready as i32,
                ..n.clone()
            },
            &j,
            &tg
        ));
        for bad in [
            NodeStatus::Down,
            NodeStatus::Initializing,
            NodeStatus::Unspecified,
        ] {
            assert!(!feasible(
                &Node {
                    status: bad as i32,
                    ..n.clone()
                },
                &j,
                &tg
            ));
        }
        let ready = Node {
            status: NodeStatus::Ready as i32,
            ..n
        };
        assert!(!feasible(
            &Node {
                ineligible: true,
                ..ready.clone()
            },
            &j,
            &tg
        ));
        j.datacenters = vec!["dc2".into()];
        assert!(!feasible(&ready, &j, &tg));
        j.datacenters.push("dc1".into());
        assert!(feasible(&ready, &j, &tg));
        let unknown = TaskGroup {
            constraints: vec![Constraint::default()],
            ..tg
        };
        assert!(
            !feasible(&ready, &j, &unknown),
            "an unknown constraint does not hold"
        );
    }

    #[test]
    fn ineligible_and_down_nodes_get_nothing() {
        let mut c = Cluster::default();
        c.add_node(node("ok", "dc1", "", 4000, 4000));
        c.add_node(Node {
            ineligible: true,
            ..node("ineligible", "dc1", "", 4000, 4000)
        });
        c.add_node(node("down", "dc1", "", 4000, 4000));
        c.set_status("down", NodeStatus::Down);
        c.register(job(
            "web",
            JobType::Service,
            vec![group("app", 10, 100, 100)],
        ));
        let out = c.schedule("web");
        assert_eq!(placed(&out.plan).len(), 10);
        assert!(placed(&out.plan).iter().all(|a| a.node_id == "ok"));

        c.register(job(
            "sys",
            JobType::System,
            vec![group("agent", 1, 100, 100)],
        ));
        let out = c.schedule("sys");
        assert_eq!(
            out.plan.node_allocation.keys().collect::<Vec<_>>(),
            vec!["ok"]
        );
    }

    #[test]
    fn fits_checks_cpu_and_memory() {
        let n = node("a", "dc1", "", 1000, 500);
        let used = Resources {
            cpu_mhz: 600,
            memory_mb: 100,
        };
        assert!(fits(
            &n,
            &used,
            &Resources {
                cpu_mhz: 400,
                memory_mb: 400
            }
        ));
        assert!(!fits(
            &n,
            &used,
            &Resources {
                cpu_mhz: 401,
                memory_mb: 1
            }
        ));
        assert!(!fits(
            &n,
            &used,
            &Resources {
                cpu_mhz: 1,
                memory_mb: 401
            }
        ));
    }

    #[test]
    fn system_job_runs_once_per_feasible_node() {
        let mut c = Cluster::default();
        c.add_nodes(4, 1000, 1000);
        c.add_node(node("other-dc", "dc2", "", 1000, 1000));
        let mut j = job(
            "agent",
            JobType::System,
            vec![group("a", 0, 100, 100), group("b", 7, 100, 100)],
        );
        j.datacenters = vec!["dc1".into()];
        c.register(j);
        let out = c.run("agent");
        assert_eq!(
            placed(&out.plan).len(),
            8,
            "count is ignored: one per group per node"
        );
        assert!(!out.plan.node_allocation.contains_key("other-dc"));
        for n in ["n00000", "n00001", "n00002", "n00003"] {
            let mut groups: Vec<String> = c
                .state
                .node_allocs(n)
                .iter()
                .map(|a| a.task_group.clone())
                .collect();
            groups.sort();
            assert_eq!(groups, ["a", "b"], "{n}");
        }
        // Re-running on the applied state places nothing twice.
        assert!(plan_is_empty(&c.schedule("agent").plan));

        // A new node gets its own; a node made ineligible loses them.
        c.add_node(node("n00004", "dc1", "", 1000, 1000));
        let mut n1 = Node::clone(&c.state.node("n00001").unwrap());
        n1.ineligible = true;
        c.add_node(n1);
        let out = c.run("agent");
        let new = placed(&out.plan);
        assert_eq!(new.len(), 2);
        assert!(new.iter().all(|a| a.node_id == "n00004"));
        let stops = stopped(&out.plan);
        assert_eq!(stops.len(), 2);
        assert!(stops.iter().all(|a| a.node_id == "n00001"));
        assert_eq!(c.live("agent").len(), 8);
        assert!(plan_is_empty(&c.schedule("agent").plan));
    }

    #[test]
    fn system_job_counts_nodes_without_room_as_failed() {
        let mut c = Cluster::default();
        c.add_node(node("small", "dc1", "", 50, 1000));
        c.add_node(node("big", "dc1", "", 1000, 1000));
        c.register(job("agent", JobType::System, vec![group("a", 1, 100, 100)]));
        let out = c.schedule("agent");
        assert_eq!(
            out.plan.node_allocation.keys().collect::<Vec<_>>(),
            vec!["big"]
        );
        assert_eq!(out.failed["a"], 1);
    }

    #[test]
    fn batch_does_not_rerun_completed_work() {
        let mut c = Cluster::default();
        c.add_nodes(2, 4000, 4000);
        c.register(job("etl", JobType::Batch, vec![group("step", 3, 100, 100)]));
        c.run("etl");
        let live = c.live("etl");
        c.client_status(&live[0].id, AllocClientStatus::Complete);
        c.client_status(&live[1].id, AllocClientStatus::Failed);
        let out = c.schedule("etl");
        assert!(stopped(&out.plan).is_empty());
        assert_eq!(
            indexes(placed(&out.plan)),
            vec![1],
            "only the failed index runs again"
        );

        // A service job's completed allocation is replaced: services run forever.
        c.register(job(
            "svc",
            JobType::Service,
            vec![group("app", 1, 100, 100)],
        ));
        c.run("svc");
        let id = c.live("svc")[0].id.clone();
        c.client_status(&id, AllocClientStatus::Complete);
        assert_eq!(indexes(placed(&c.schedule("svc").plan)), vec![0]);
    }

    #[test]
    fn removed_groups_and_duplicates_are_stopped() {
        let mut c = Cluster::default();
        c.add_nodes(2, 4000, 4000);
        c.register(job(
            "web",
            JobType::Service,
            vec![group("a", 2, 100, 100), group("b", 1, 100, 100)],
        ));
        c.run("web");
        // A second copy of index 0, as a stale plan could have left.
        let dup = Allocation {
            id: "dup".into(),
            ..Allocation::clone(&c.live("web")[0])
        };
        c.apply(Msg::PlanApply(PlanApplyEntry {
            allocs: vec![dup],
            ..Default::default()
        }));
        assert_eq!(c.live("web").len(), 4);
        // Same version: only the duplicate goes, and the older copy stays.
        let out = c.schedule("web");
        let stops = stopped(&out.plan);
        assert_eq!(stops.len(), 1);
        assert_eq!(stops[0].id, "dup");
        assert!(placed(&out.plan).is_empty());

        // Dropping group b stops its allocation.
        c.register(job("web", JobType::Service, vec![group("a", 2, 100, 100)]));
        let out = c.schedule("web");
        assert!(
            stopped(&out.plan)
                .iter()
                .any(|a| a.task_group == "b"
                    && a.desired_description == "task group removed from job")
        );
        assert!(placed(&out.plan).iter().all(|a| a.task_group == "a"));
    }

    #[test]
    fn bin_packing_prefers_the_fuller_candidate() {
        let mut c = Cluster::default();
        c.add_nodes(2, 1000, 1000);
        c.register(job(
            "other",
            JobType::Service,
            vec![group("x", 1, 500, 500)],
        ));
        let busy = c
            .run("other")
            .plan
            .node_allocation
            .keys()
            .next()
            .unwrap()
            .clone();
        // With two nodes both are candidates whatever the shuffle.
        for seed in 0..10 {
            c.register(job(
                "web",
                JobType::Service,
                vec![group("app", 1, 100, 100)],
            ));
            let out = c.schedule_seeded("web", seed);
            assert_eq!(
                out.plan.node_allocation.keys().collect::<Vec<_>>(),
                vec![&busy]
            );
        }
    }

    #[test]
    fn two_choices_spread_a_job_when_there_is_room() {
        let mut c = Cluster::default();
        c.add_nodes(40, 100_000, 100_000);
        c.register(job(
            "web",
            JobType::Service,
            vec![group("app", 40, 100, 100)],
        ));
        let out = c.schedule("web");
        let used = out.plan.node_allocation.len();
        assert!(used > 10, "40 allocations on only {used} of 40 nodes");
    }

    #[test]
    fn a_seeded_rng_gives_the_same_placements() {
        let mut c = Cluster::default();
        c.add_nodes(30, 1000, 1000);
        c.register(job(
            "web",
            JobType::Service,
            vec![group("app", 50, 100, 300)],
        ));
        let layout = |seed| {
            let out = c.schedule_seeded("web", seed);
            placed(&out.plan)
                .iter()
                .map(|a| (a.index, a.node_id.clone()))
                .collect::<BTreeMap<_, _>>()
        };
        assert_eq!(layout(42), layout(42));
        assert_eq!(layout(42).len(), 50);
    }

    #[test]
    fn ten_thousand_allocations_on_ten_thousand_nodes() {
        let mut c = Cluster::default();
        c.add_nodes(10_000, 1000, 1000);
        // Two fit per node: half the cluster's room.
        c.register(job(
            "huge",
            JobType::Service,
            vec![group("app", 10_000, 400, 400)],
        ));
        let out = c.run("huge");
        assert!(out.failed.is_empty());
        assert_eq!(c.live("huge").len(), 10_000);
        c.assert_within_capacity();
    }
}
