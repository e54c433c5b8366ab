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
//!
//! - `deployment`: how a deployment stands, shared with the deployment
//!   watcher.
//! - `core`: the core scheduler (Nomad's GC core jobs: which `gc_*` writes
//!   a core evaluation makes).
//!
//! A plan too large for one raft entry is cut into pieces by the worker
//! that submits it (`control::plan_split`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use rand::seq::SliceRandom;
use rand::Rng;
use stampede_proto::{
    AllocClientStatus, AllocDesiredStatus, Allocation, ConstraintOperand, ConstraintTarget,
    Deployment, DeploymentGroupState, DeploymentStatus, Evaluation, Job, JobType, NodeStatus, Plan,
    Resources, TaskGroup, UpdateStrategy,
};

pub(crate) mod core;
pub(crate) mod deployment;

use crate::model::{alloc_terminal, now_ms, sub_resources};
use crate::state::{NodeRow, State};

/// How many nodes with room a service or batch placement compares: Nomad's
/// "power of two choices" gets most of the packing of a full scan at a tiny
/// fraction of its cost, and spreads concurrent workers over different nodes.
const CANDIDATES: usize = 2;

/// What the scheduler decided for one evaluation.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// The plan to submit: eval_id, job_id, priority, snapshot_index (= state.index()),
    /// node_allocation (new allocations, and kept ones updated in place, by node id) and
    /// node_update (allocations to stop, by node id).
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
/// and its class allowed by the job ([`class_allows`]).
pub fn feasible(node: &NodeRow, job: &Job, tg: &TaskGroup) -> bool {
    node.status == NodeStatus::Ready as i32
        && !node.ineligible
        && class_allows(&node.datacenter, &node.node_class, job, tg)
}

/// Whether a node of this datacenter and class may run the group: the datacenter in
/// job.datacenters (any when that list is empty), and every constraint of the group (target
/// DATACENTER or NODE_CLASS, operand EQUAL / NOT_EQUAL against `value`) holds.
pub fn class_allows(datacenter: &str, node_class: &str, job: &Job, tg: &TaskGroup) -> bool {
    (job.datacenters.is_empty() || job.datacenters.iter().any(|d| d == datacenter))
        && tg.constraints.iter().all(|c| {
            let actual = match ConstraintTarget::try_from(c.target) {
                Ok(ConstraintTarget::Datacenter) => datacenter,
                Ok(ConstraintTarget::NodeClass) => node_class,
                // A constraint we cannot check must not place work where it may not belong.
                _ => return false,
            };
            match ConstraintOperand::try_from(c.operand) {
                Ok(ConstraintOperand::Equal) => actual == c.value,
                Ok(ConstraintOperand::NotEqual) => actual != c.value,
                _ => false,
            }
        })
}

/// For a blocked evaluation: every node class of the state
/// ([`crate::model::class_key`]) and whether any of the `groups` that
/// failed to place may run there, room aside. Capacity appearing in a class
/// marked false cannot help it.
pub fn class_eligibility<'a>(
    state: &State,
    job: &Job,
    groups: impl Iterator<Item = &'a str> + Clone,
) -> BTreeMap<String, bool> {
    let mut out = BTreeMap::new();
    for node in state.nodes() {
        let key = crate::model::class_key(&node.datacenter, &node.node_class);
        if out.contains_key(&key) {
            continue;
        }
        let allowed = groups.clone().any(|g| {
            job.task_groups
                .iter()
                .find(|tg| tg.name == g)
                .is_some_and(|tg| class_allows(&node.datacenter, &node.node_class, job, tg))
        });
        out.insert(key, allowed);
    }
    out
}

/// Whether an allocation was placed for an older spec of its group than the
/// current one (a change of count alone leaves allocations current).
fn outdated(a: &Allocation, tg: &TaskGroup) -> bool {
    a.job_version < tg.spec_version
}

/// Whether a rollout moves the allocations it keeps (current, but of an
/// older job version or another deployment) onto the job's version and
/// deployment in place, as Nomad does, so the deployment counts them. Off
/// only with the planted bug `deployment_ignores_kept` (debug builds).
fn moves_kept() -> bool {
    !crate::model::planted::planted("deployment_ignores_kept")
}

/// With the planted bug `place_every_index` (debug builds), a group
/// without a rollout places every index at each evaluation, beside what
/// already runs, and the plan applier does not look at what holds an index.
pub fn place_every_index() -> bool {
    crate::model::planted::planted("place_every_index")
}

/// Whether `ask` fits on `node` given `used` (both cpu_mhz and memory_mb).
/// Always yes with the planted bug `skip_fit_check` (debug builds), which
/// both the scheduler and the plan applier then believe.
pub fn fits(node: &NodeRow, used: &Resources, ask: &Resources) -> bool {
    if crate::model::planted::planted("skip_fit_check") {
        return true;
    }
    let cap = node.resources.unwrap_or_default();
    used.cpu_mhz.saturating_add(ask.cpu_mhz) <= cap.cpu_mhz
        && used.memory_mb.saturating_add(ask.memory_mb) <= cap.memory_mb
}

/// Bin-packing score: how full the node would be after placing `ask`, summed
/// over cpu and memory. Higher is better, so work is packed onto busy nodes and
/// empty nodes stay free for large asks.
fn score(node: &NodeRow, used: &Resources, ask: &Resources) -> f64 {
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
            let mut nodes: Vec<Arc<NodeRow>> = self
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
        let mut groups = BTreeMap::new();
        let mut work = false;
        for tg in rolling {
            let u = tg.update.unwrap_or_default();
            let live: Vec<&Arc<Allocation>> = allocs
                .iter()
                .filter(|a| a.task_group == tg.name && !alloc_terminal(a))
                .collect();
            let replacing = live.iter().any(|a| outdated(a, tg));
            let current = live.iter().filter(|a| !outdated(a, tg)).count();
            // A new version that changes only the count (either way) still
            // deploys: the kept allocations move onto it in place.
            let kept = moves_kept()
                && live.iter().any(|a| {
                    !outdated(a, tg) && a.index < tg.count() && a.job_version != job.version
                });
            work |= replacing || kept || current < tg.count() as usize;
            groups.insert(
                tg.name.clone(),
                DeploymentGroupState {
                    desired_total: tg.count(),
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
    /// down or duplicated, moves the current allocations it keeps onto `d`
    /// in place, then, per index, replaces outdated allocations at most
    /// `max_parallel` at a time (counting new ones not yet healthy), after
    /// canaries are placed and promoted. Missing indexes are placed at once.
    /// Returns the (index, canary) placements to make.
    fn reconcile_rollout(
        &mut self,
        job: &Job,
        tg: &TaskGroup,
        allocs: &[&Allocation],
        d: &Deployment,
        g: &DeploymentGroupState,
        u: &UpdateStrategy,
    ) -> Vec<(u32, bool)> {
        let count = tg.count() as usize;
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
        let moved = moves_kept();
        if moved {
            for a in current.iter().flatten() {
                if a.job_version != job.version || a.deployment_id != d.id {
                    self.update_in_place(job, tg, a, &d.id);
                }
            }
        }
        // Every kept allocation is the deployment's once this plan commits.
        let ours = |a: &&Allocation| moved || a.deployment_id == d.id;
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
        if place_every_index() {
            return (0..tg.count()).collect();
        }
        let mut live: Vec<&Allocation> = allocs
            .iter()
            .copied()
            .filter(|a| !alloc_terminal(a))
            .collect();
        // Per index, the current version first and then the oldest, so that of
        // duplicates the established allocation is the one kept.
        live.sort_by_key(|a| (a.index, outdated(a, tg), a.create_index));
        let count = tg.count() as usize;
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
        (0..tg.count()).filter(|&i| !covered[i as usize]).collect()
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
        nodes: &mut Vec<Arc<NodeRow>>,
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
                    best = Some((s, node.id.to_string()));
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
            let nodes: Vec<Arc<NodeRow>> = self
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
        let mut used = self.used(&alloc.node_id);
        sub_resources(&mut used, alloc.resources.as_ref());
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

    /// Moves a kept allocation onto the job's version and deployment
    /// `deployment_id` where it runs: a change of the server's fields only,
    /// carried with the placements of its node. Its spec is the same (the
    /// version changed nothing that needs a new allocation), so it holds
    /// the same resources, and the client keeps running it. The state keeps
    /// what the client reported of it, its health too: a kept allocation
    /// that was healthy counts as healthy for the new deployment at once,
    /// and one not yet healthy is awaited as a new one is.
    fn update_in_place(
        &mut self,
        job: &Job,
        tg: &TaskGroup,
        alloc: &Allocation,
        deployment_id: &str,
    ) {
        let updated = Allocation {
            eval_id: self.eval.id.clone(),
            job_version: job.version,
            deployment_id: deployment_id.to_string(),
            min_healthy_time_ms: tg.update.map_or(0, |u| u.min_healthy_time_ms),
            modify_time_ms: self.now_ms,
            // The stored allocation's are kept when the plan applies: not
            // carried through raft for nothing.
            client_description: String::new(),
            task_states: Vec::new(),
            ..alloc.clone()
        };
        self.plan
            .node_allocation
            .entry(alloc.node_id.clone())
            .or_default()
            .allocs
            .push(updated);
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
mod tests;
