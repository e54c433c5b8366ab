//! Applying committed entries to the tables: nodes, jobs, evaluations and
//! deployments here, allocations in `allocs`.

use std::sync::Arc;

use imbl::OrdMap;
use stampede_proto::node_secret::SecretHash;
use stampede_proto::{
    log_entry::Msg, AllocClientStatus, Allocation, Deployment, DeploymentStatus, EvalStatus,
    Evaluation, Job, JobStatus, JobType, LogEntry, NodeStatus, PlanApplyEntry,
};

use super::{
    same_group, same_spec, AllocKey, Changes, Id, NodeRow, NodeTable, State, WatchKey, ANY_CLASS,
};
use crate::model::{alloc_terminal, applied_eval, class_key, deployment_done, deployment_running};

/// Changes `key`'s row in `map` with `change`, or adds the row `new`
/// makes: a key is allocated only for a new row (looking one up costs less
/// than allocating it).
pub(super) fn change_or_insert<V>(
    map: &mut impl IdTable<V>,
    key: &str,
    change: impl FnOnce(&mut V),
    new: impl FnOnce() -> V,
) {
    match map.row_mut(key) {
        Some(v) => change(v),
        None => map.add(Id::from(key), new()),
    }
}

/// Sets `key`'s value in `map`.
pub(super) fn set_or_insert(map: &mut impl IdTable<u64>, key: &str, value: u64) {
    change_or_insert(map, key, |v| *v = value, || value);
}

/// A table keyed by [`Id`], ordered or hashed.
pub(super) trait IdTable<V> {
    fn row_mut(&mut self, key: &str) -> Option<&mut V>;
    fn add(&mut self, key: Id, value: V);
}

impl<V: Clone> IdTable<V> for OrdMap<Id, V> {
    fn row_mut(&mut self, key: &str) -> Option<&mut V> {
        self.get_mut(key)
    }

    fn add(&mut self, key: Id, value: V) {
        self.insert(key, value);
    }
}

impl<V: Clone> IdTable<V> for NodeTable<V> {
    fn row_mut(&mut self, key: &str) -> Option<&mut V> {
        self.get_mut(key)
    }

    fn add(&mut self, key: Id, value: V) {
        self.insert(key, value);
    }
}

impl State {
    /// Applies one command at raft index `index`. Commands were validated before
    /// they were proposed, so applying never fails: every server reaches the
    /// same state from the same log.
    pub fn apply(&mut self, index: u64, entry: &LogEntry, changes: &mut Changes) {
        self.index = index;
        changes.index = index;
        for command in entry.commands() {
            self.apply_command(index, command, changes);
        }
        changes.objects = Some(self.objects());
    }

    /// Applies a plan's entry at `index`: what the log does, and what the
    /// plan applier does to its copy to check the next plans against.
    pub fn apply_plan(&mut self, index: u64, e: &PlanApplyEntry, changes: &mut Changes) {
        self.index = index;
        for alloc in &e.allocs {
            self.upsert_alloc_from_plan(index, alloc, changes);
        }
        if let Some(d) = &e.deployment {
            self.upsert_deployment(index, d.clone(), changes);
        }
        self.upsert_evals(index, &e.evals, changes);
    }

    /// Applies one command (never a batch) at `index`.
    fn apply_command(&mut self, index: u64, entry: &LogEntry, changes: &mut Changes) {
        match &entry.msg {
            Some(Msg::NodeRegister(e)) => {
                if let Some(node) = &e.node {
                    let Some(secret) = self.node_secret_kept(&node.id, &e.secret_hash) else {
                        return;
                    };
                    self.upsert_node(index, NodeRow::new(node, secret), changes);
                }
                self.upsert_evals(index, &e.evals, changes);
                // A node registering as down takes no work.
                if let Some(node) = e
                    .node
                    .as_ref()
                    .filter(|n| n.status != NodeStatus::Down as i32)
                {
                    let evals = self.system_evals(index, &node.id, &e.evals);
                    self.upsert_evals(index, &evals, changes);
                }
            }
            Some(Msg::NodeStatus(e)) => {
                let lost = self.set_node_status(index, &e.node_id, e.status, changes);
                self.upsert_evals(index, &e.evals, changes);
                let mut evals = self.lost_evals(index, &e.node_id, &lost, &e.evals);
                if e.status == NodeStatus::Ready as i32
                    && self.nodes.contains_key(e.node_id.as_str())
                {
                    evals.extend(self.system_evals(index, &e.node_id, &e.evals));
                }
                self.upsert_evals(index, &evals, changes);
            }
            Some(Msg::JobRegister(e)) => {
                if let Some(job) = &e.job {
                    self.upsert_job(index, job.clone(), changes);
                }
                self.upsert_evals(index, e.eval.as_slice(), changes);
            }
            Some(Msg::JobDeregister(e)) => {
                self.deregister_job(index, &e.job_id, e.purge, changes);
                self.upsert_evals(index, e.eval.as_slice(), changes);
            }
            Some(Msg::EvalUpdate(e)) => self.upsert_evals(index, &e.evals, changes),
            Some(Msg::PlanApply(e)) => self.apply_plan(index, e, changes),
            Some(Msg::AllocClientUpdate(e)) => {
                for alloc in &e.allocs {
                    self.update_alloc_from_client(index, alloc, e.updated_at_ms, changes);
                }
                self.upsert_evals(index, &e.evals, changes);
            }
            Some(Msg::DeploymentUpdate(e)) => {
                if let Some(d) = &e.deployment {
                    self.upsert_deployment(index, d.clone(), changes);
                }
                self.upsert_evals(index, &e.evals, changes);
            }
            Some(Msg::GcEvals(e)) => self.gc_evals(index, e, changes),
            Some(Msg::GcJobs(e)) => self.gc_jobs(index, e, changes),
            Some(Msg::GcDeployments(e)) => self.gc_deployments(index, e, changes),
            Some(Msg::GcNodes(e)) => self.gc_nodes(index, e, changes),
            Some(Msg::Batch(_)) | None => {}
        }
    }

    /// The class of a node, for a capacity change there.
    pub(super) fn class_of(&self, node_id: &str) -> String {
        self.nodes.get(node_id).map_or_else(
            || ANY_CLASS.to_string(),
            |n| class_key(&n.datacenter, &n.node_class),
        )
    }

    /// The secret hash node `node_id` keeps after a registration with
    /// `hash`: the one it has, or else this one; `None` (the registration
    /// is not applied) when the node already has another one. The leader
    /// refuses such a registration before proposing it, but two
    /// registrations of one new node may both pass that check before either
    /// applies: the first to apply keeps the node, everywhere alike. A hash
    /// that is not 32 bytes (an entry from before node identity) leaves what
    /// is kept as it is.
    fn node_secret_kept(&self, node_id: &str, hash: &[u8]) -> Option<Option<SecretHash>> {
        let kept = self.nodes.get(node_id).and_then(|n| n.secret);
        match (kept, SecretHash::try_from(hash).ok()) {
            (Some(kept), Some(hash)) if kept != hash => None,
            (kept, hash) => Some(kept.or(hash)),
        }
    }

    fn upsert_node(&mut self, index: u64, mut node: NodeRow, changes: &mut Changes) {
        let old = self.nodes.get(node.id.as_str()).cloned();
        node.create_index = old.as_ref().map_or(index, |o| o.create_index);
        node.modify_index = index;
        if node.status == NodeStatus::Unspecified as i32 {
            node.status = NodeStatus::Ready as i32;
        }
        let ready = node.status == NodeStatus::Ready as i32;
        if ready && old.is_none_or(|o| o.status != NodeStatus::Ready as i32) {
            changes.capacity(class_key(&node.datacenter, &node.node_class));
        }
        let node = Arc::new(node);
        changes.keys.push(WatchKey::Nodes);
        changes.nodes.push(node.clone());
        self.nodes.insert(node.id.clone(), node);
        self.indexes.nodes = index;
    }

    /// Sets a node's status; returns the jobs whose allocations it lost
    /// (when it went down), sorted, each once.
    fn set_node_status(
        &mut self,
        index: u64,
        node_id: &str,
        status: i32,
        changes: &mut Changes,
    ) -> Vec<Id> {
        let Some(old) = self.nodes.get(node_id).cloned() else {
            return Vec::new();
        };
        let node = Arc::new(NodeRow {
            status,
            modify_index: index,
            ..NodeRow::clone(&old)
        });
        changes.keys.push(WatchKey::Nodes);
        changes.nodes.push(node.clone());
        self.nodes.insert(Id::from(node_id), node);
        self.indexes.nodes = index;
        if status == NodeStatus::Ready as i32 && old.status != status {
            changes.capacity(class_key(&old.datacenter, &old.node_class));
        }
        if status == NodeStatus::Down as i32 {
            // Everything still running there is lost.
            let lost: Vec<(AllocKey, Arc<Allocation>)> = self
                .allocs_by_node
                .get(node_id)
                .into_iter()
                .flat_map(|on_node| on_node.iter())
                .filter(|(_, a)| !alloc_terminal(a))
                .map(|(id, a)| (id.clone(), a.clone()))
                .collect();
            let mut jobs: Vec<Id> = lost
                .iter()
                .map(|(_, a)| Id::from(a.job_id.as_str()))
                .collect();
            for (id, a) in lost {
                let updated = Allocation {
                    client_status: AllocClientStatus::Lost as i32,
                    client_description: "node is down".into(),
                    alloc_modify_index: index,
                    ..Allocation::clone(&a)
                };
                self.put_alloc(index, updated, Some((id, a)), changes);
            }
            jobs.sort();
            jobs.dedup();
            return jobs;
        }
        Vec::new()
    }

    /// An evaluation for each job in `jobs` that lost allocations when node
    /// `node_id` went down at `index`, unless the entry brought one
    /// (`brought`). Made here, not by the leader that wrote the entry: a
    /// plan that placed on the node after the leader looked, but applied
    /// before the entry, lost its allocation too, and its job would
    /// otherwise never be evaluated again.
    fn lost_evals(
        &self,
        index: u64,
        node_id: &str,
        jobs: &[Id],
        brought: &[Evaluation],
    ) -> Vec<Evaluation> {
        jobs.iter()
            .filter(|j| !brought.iter().any(|e| e.job_id == j.as_str()))
            .filter_map(|j| self.jobs.get(j))
            .map(|job| applied_eval(job, "node_update", node_id, index))
            .collect()
    }

    /// An evaluation for each live system job, which node `node_id`, ready
    /// at `index`, may take, unless the entry brought one (`brought`).
    /// Made here for the same reason as [`Self::lost_evals`]: a system job
    /// registered after the leader looked, but evaluated on a state
    /// without the node, would never reach it.
    fn system_evals(&self, index: u64, node_id: &str, brought: &[Evaluation]) -> Vec<Evaluation> {
        (self.system_jobs.iter())
            .filter_map(|id| self.jobs.get(id))
            .filter(|job| !job.stop && !brought.iter().any(|e| e.job_id == job.id))
            .map(|job| applied_eval(job, "node_update", node_id, index))
            .collect()
    }

    /// Puts `job` in the jobs table, and its id among the system jobs' or not.
    pub(super) fn put_job(&mut self, job: Arc<Job>) {
        let id = Id::from(job.id.as_str());
        match job.r#type == JobType::System as i32 {
            true => self.system_jobs.insert(id.clone()),
            false => self.system_jobs.remove(&id),
        };
        self.jobs.insert(id, job);
    }

    /// Takes job `job_id` out of the jobs table and the system jobs' ids.
    pub(super) fn drop_job(&mut self, job_id: &str) {
        self.jobs.remove(job_id);
        self.system_jobs.remove(job_id);
    }

    fn upsert_job(&mut self, index: u64, mut job: Job, changes: &mut Changes) {
        let old = self.jobs.get(job.id.as_str()).cloned();
        match &old {
            Some(o) if !o.stop && same_spec(o, &job) => {
                job.version = o.version;
                job.job_modify_index = o.job_modify_index;
                job.status = o.status;
            }
            Some(o) => {
                job.version = o.version + 1;
                job.job_modify_index = index;
                job.status = JobStatus::Pending as i32;
            }
            None => {
                job.version = 0;
                job.job_modify_index = index;
                job.status = JobStatus::Pending as i32;
            }
        }
        for tg in &mut job.task_groups {
            let before = old
                .as_ref()
                .and_then(|o| o.task_groups.iter().find(|g| g.name == tg.name));
            tg.spec_version = match before {
                Some(b) if same_group(b, tg, false) => b.spec_version,
                _ => job.version,
            };
        }
        job.stop = false;
        job.create_index = old.as_ref().map_or(index, |o| o.create_index);
        job.modify_index = index;
        changes.keys.push(WatchKey::Jobs);
        changes.keys.push(WatchKey::Job(job.id.clone()));
        self.put_job(Arc::new(job));
        self.indexes.jobs = index;
    }

    fn deregister_job(&mut self, index: u64, job_id: &str, purge: bool, changes: &mut Changes) {
        let Some(old) = self.jobs.get(job_id).cloned() else {
            return;
        };
        if purge {
            self.drop_job(job_id);
        } else {
            let job = Job {
                stop: true,
                status: JobStatus::Dead as i32,
                modify_index: index,
                job_modify_index: index,
                ..Job::clone(&old)
            };
            self.put_job(Arc::new(job));
        }
        changes.keys.push(WatchKey::Jobs);
        changes.keys.push(WatchKey::Job(job_id.to_string()));
        self.indexes.jobs = index;
    }

    fn upsert_evals(&mut self, index: u64, evals: &[Evaluation], changes: &mut Changes) {
        for e in evals {
            let mut eval = e.clone();
            eval.create_index = self
                .evals
                .get(eval.id.as_str())
                .map_or(index, |o| o.create_index);
            eval.modify_index = index;
            let eval = Arc::new(eval);
            if eval.status == EvalStatus::Pending as i32
                || eval.status == EvalStatus::Blocked as i32
            {
                changes.evals.push(eval.clone());
            }
            changes.keys.push(WatchKey::Eval(eval.id.clone()));
            changes.keys.push(WatchKey::JobEvals(eval.job_id.clone()));
            let id = Id::from(eval.id.as_str());
            self.evals_by_job
                .entry(Id::from(eval.job_id.as_str()))
                .or_default()
                .insert(id.clone());
            self.evals.insert(id, eval);
            self.indexes.evals = index;
        }
    }

    fn upsert_deployment(&mut self, index: u64, mut d: Deployment, changes: &mut Changes) {
        let old = self.deployments.get(d.id.as_str()).cloned();
        if old.as_ref().is_some_and(|o| deployment_done(o)) {
            // A finished deployment stays finished: a late write (a plan
            // built before it ended) does not bring it back.
            return;
        }
        d.create_index = old.map_or(index, |o| o.create_index);
        if d.create_index == index && deployment_running(&d) {
            // A new version's deployment supersedes the job's older ones.
            let older: Vec<Arc<Deployment>> = self
                .job_deployments(&d.job_id)
                .into_iter()
                .filter(|o| o.id != d.id && deployment_running(o) && o.job_version < d.job_version)
                .collect();
            for o in older {
                let cancelled = Deployment {
                    status: DeploymentStatus::Cancelled as i32,
                    status_description: format!("superseded by job version {}", d.job_version),
                    ..Deployment::clone(&o)
                };
                self.put_deployment(index, cancelled, changes);
            }
        }
        self.put_deployment(index, d, changes);
    }

    fn put_deployment(&mut self, index: u64, mut d: Deployment, changes: &mut Changes) {
        d.modify_index = index;
        changes.keys.push(WatchKey::Deployments);
        changes.keys.push(WatchKey::Deployment(d.id.clone()));
        changes
            .keys
            .push(WatchKey::JobDeployments(d.job_id.clone()));
        let id = Id::from(d.id.as_str());
        self.deployments_by_job
            .entry(Id::from(d.job_id.as_str()))
            .or_default()
            .insert(id.clone());
        self.deployments.insert(id, Arc::new(d));
        self.indexes.deployments = index;
    }

    /// Records that raft entries up to `index` are applied (openraft's own
    /// blank and membership entries change no table).
    pub fn set_index(&mut self, index: u64) {
        self.index = index;
    }
}
