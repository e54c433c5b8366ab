//! The in-memory state store that raft entries are applied to.
//!
//! Tables are persistent maps (`imbl`): a copy of the whole state is an O(1)
//! clone that shares structure with the live one. Snapshot builders, workers
//! and readers take such a copy and never hold the apply path up.
//!
//! Every row keeps the raft index that created it and the one that last
//! changed it; every table, each node's allocations and each job's
//! allocations keep the latest index that touched them, which is what
//! blocking queries compare against.

mod alloc_key;
pub mod blocking;
pub mod gc;

pub use alloc_key::AllocKey;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use imbl::{OrdMap, OrdSet};
use stampede_proto::{
    log_entry::Msg, AllocClientStatus, Allocation, Deployment, DeploymentStatus, EvalStatus,
    Evaluation, Job, JobStatus, LogEntry, Node, NodeStatus, PlanApplyEntry, Resources,
    StateSnapshot, TableIndexes,
};
use tokio::sync::watch;

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
    pub nodes: Vec<Arc<Node>>,
    /// The raft index of the last entry applied in the batch.
    pub index: u64,
    /// Rows garbage collection removed.
    pub collected: gc::Collected,
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
    fn watch_job_allocs(&mut self, job_id: &str) {
        if !self.recently(|k| matches!(k, WatchKey::JobAllocs(j) if j == job_id)) {
            self.keys.push(WatchKey::JobAllocs(job_id.to_string()));
        }
    }

    /// The allocations on node `node_id` changed (kept once for a run of
    /// them, as the job's).
    fn watch_node_allocs(&mut self, node_id: &str) {
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
    fn capacity(&mut self, class: String) {
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
            keys.push(WatchKey::NodeAllocs(n.id.clone()));
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
            collected: gc::Collected::default(),
            objects: Some(state.objects()),
        }
    }
}

use crate::model::{alloc_terminal, class_key, deployment_done, deployment_running};

/// Allocations counted by (job version, desired status, client status).
pub type AllocCounts = BTreeMap<(u64, i32, i32), u64>;

fn summary_key(a: &Allocation) -> (u64, i32, i32) {
    (a.job_version, a.desired_status, a.client_status)
}

/// Changes `key`'s row in `map` with `change`, or adds the row `new`
/// makes: a key is allocated only for a new row (looking one up costs less
/// than allocating it).
fn change_or_insert<V>(
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
fn set_or_insert(map: &mut impl IdTable<u64>, key: &str, value: u64) {
    change_or_insert(map, key, |v| *v = value, || value);
}

/// A table keyed by [`Id`], ordered or hashed.
trait IdTable<V> {
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

/// The client status a planned allocation is stored with: the stored
/// one's, which the client owns, or pending for a new one that gives none.
fn planned_client_status(planned: &Allocation, old: Option<&Allocation>) -> i32 {
    match old {
        Some(old) => old.client_status,
        None if planned.client_status == AllocClientStatus::Unspecified as i32 => {
            AllocClientStatus::Pending as i32
        }
        None => planned.client_status,
    }
}

/// Holds an allocation's place on its node for the moment its report is
/// taken (see [`State::update_alloc_from_client`]); never stored.
static VACANT: std::sync::LazyLock<Arc<Allocation>> = std::sync::LazyLock::new(Default::default);

/// Writes into `alloc` what a client owns of it (statuses, task states,
/// health) from `update`, as reported at `index`.
fn take_report(alloc: &mut Allocation, update: &Allocation, at_ms: u64, index: u64) {
    alloc.client_status = update.client_status;
    alloc
        .client_description
        .clone_from(&update.client_description);
    alloc.task_states.clone_from(&update.task_states);
    alloc.healthy = update.healthy.or(alloc.healthy);
    alloc.modify_index = index;
    alloc.modify_time_ms = at_ms;
}

/// `old` as a client reports it at `index`: what the client owns comes
/// from `update` ([`take_report`]), the rest from `old`. Built field by
/// field so that `old`'s own task states and description, which the
/// report replaces, are never copied; a new field of `Allocation` does not
/// compile here until it is placed.
fn reported(old: &Allocation, update: &Allocation, at_ms: u64, index: u64) -> Allocation {
    let Allocation {
        id,
        eval_id,
        job_id,
        task_group,
        node_id,
        name,
        index: slot,
        resources,
        desired_status,
        desired_description,
        client_status,
        client_description: _,
        task_states: _,
        job_version,
        deployment_id,
        healthy,
        canary,
        create_index,
        modify_index,
        create_time_ms,
        modify_time_ms,
        job_type,
        alloc_modify_index,
        min_healthy_time_ms,
    } = old;
    let mut new = Allocation {
        id: id.clone(),
        eval_id: eval_id.clone(),
        job_id: job_id.clone(),
        task_group: task_group.clone(),
        node_id: node_id.clone(),
        name: name.clone(),
        index: *slot,
        resources: *resources,
        desired_status: *desired_status,
        desired_description: desired_description.clone(),
        client_status: *client_status,
        client_description: String::new(),
        task_states: Default::default(),
        job_version: *job_version,
        deployment_id: deployment_id.clone(),
        healthy: *healthy,
        canary: *canary,
        create_index: *create_index,
        modify_index: *modify_index,
        create_time_ms: *create_time_ms,
        modify_time_ms: *modify_time_ms,
        job_type: *job_type,
        alloc_modify_index: *alloc_modify_index,
        min_healthy_time_ms: *min_healthy_time_ms,
    };
    take_report(&mut new, update, at_ms, index);
    new
}

/// A row's id as the tables key it. Writing a row copies the tree nodes on
/// its path that a snapshot still shares, each with up to 64 keys: with
/// `String` keys every copy allocated and copied each key, and dropping the
/// old copy freed each one (a fifth of a server's CPU under load); an
/// `Arc<str>` is copied and dropped with a count. An id of up to 23 bytes
/// (a node's or a job's, as nodesim and loadgen name them) is kept inside
/// the key itself, so a lookup compares the bytes in the tree node instead
/// of following a pointer to them for each key it passes.
pub type Id = smol_str::SmolStr;

/// Every allocation by id. A hash trie, not a tree like the other tables:
/// under load each client's report looks its allocation up among a hundred
/// thousand, and a tree's walk compared keys spread over several cache lines
/// at each of its levels. Nothing reads it in id order (the tables beside
/// it are trees, ordered, for that).
type AllocTable = imbl::GenericHashMap<
    AllocKey,
    Arc<Allocation>,
    rustc_hash::FxBuildHasher,
    imbl::shared_ptr::DefaultSharedPtr,
>;

/// Rows by node id, for the tables only ever read one node at a time: a
/// hash trie, as [`AllocTable`], since each report, placement and node
/// query looks up its node among ten thousand.
type NodeTable<V> =
    imbl::GenericHashMap<Id, V, rustc_hash::FxBuildHasher, imbl::shared_ptr::DefaultSharedPtr>;

/// One consistent version of every table.
#[derive(Clone, Debug, Default)]
pub struct State {
    nodes: OrdMap<Id, Arc<Node>>,
    jobs: OrdMap<Id, Arc<Job>>,
    evals: OrdMap<Id, Arc<Evaluation>>,
    allocs: AllocTable,
    deployments: OrdMap<Id, Arc<Deployment>>,
    /// Each node's allocations themselves, by id, not only their ids: the
    /// node's query, the scheduler and the plan applier read a node's
    /// allocations all the time, and looking each id up in `allocs` (a
    /// hundred thousand string keys) cost more than the reading itself.
    allocs_by_node: NodeTable<OrdMap<AllocKey, Arc<Allocation>>>,
    allocs_by_job: OrdMap<Id, OrdSet<AllocKey>>,
    evals_by_job: OrdMap<Id, OrdSet<Id>>,
    deployments_by_job: OrdMap<Id, OrdSet<Id>>,
    node_alloc_index: NodeTable<u64>,
    job_alloc_index: OrdMap<Id, u64>,
    /// Each job's allocations counted by version and status, kept as they
    /// change (Nomad's job summaries), so `JobService.Summary` reads a few
    /// counts instead of every allocation of the job.
    job_summaries: OrdMap<Id, Arc<AllocCounts>>,
    indexes: TableIndexes,
    /// The raft index of the last entry applied.
    index: u64,
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
                    self.upsert_node(index, node.clone(), changes);
                }
                self.upsert_evals(index, &e.evals, changes);
            }
            Some(Msg::NodeStatus(e)) => {
                self.set_node_status(index, &e.node_id, e.status, changes);
                self.upsert_evals(index, &e.evals, changes);
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
    fn class_of(&self, node_id: &str) -> String {
        self.nodes
            .get(node_id)
            .map_or_else(|| ANY_CLASS.to_string(), |n| class_key(n))
    }

    /// Rows in each table.
    pub fn objects(&self) -> Objects {
        Objects {
            nodes: self.nodes.len() as u64,
            jobs: self.jobs.len() as u64,
            evals: self.evals.len() as u64,
            allocs: self.allocs.len() as u64,
            deployments: self.deployments.len() as u64,
        }
    }

    fn upsert_node(&mut self, index: u64, mut node: Node, changes: &mut Changes) {
        let old = self.nodes.get(node.id.as_str()).cloned();
        node.create_index = old.as_ref().map_or(index, |o| o.create_index);
        node.modify_index = index;
        if node.status == NodeStatus::Unspecified as i32 {
            node.status = NodeStatus::Ready as i32;
        }
        let ready = node.status == NodeStatus::Ready as i32;
        if ready && old.is_none_or(|o| o.status != NodeStatus::Ready as i32) {
            changes.capacity(class_key(&node));
        }
        let node = Arc::new(node);
        changes.keys.push(WatchKey::Nodes);
        changes.nodes.push(node.clone());
        self.nodes.insert(Id::from(node.id.as_str()), node);
        self.indexes.nodes = index;
    }

    fn set_node_status(&mut self, index: u64, node_id: &str, status: i32, changes: &mut Changes) {
        let Some(old) = self.nodes.get(node_id).cloned() else {
            return;
        };
        let node = Arc::new(Node {
            status,
            modify_index: index,
            ..Node::clone(&old)
        });
        changes.keys.push(WatchKey::Nodes);
        changes.nodes.push(node.clone());
        self.nodes.insert(Id::from(node_id), node);
        self.indexes.nodes = index;
        if status == NodeStatus::Ready as i32 && old.status != status {
            changes.capacity(class_key(&old));
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
            for (id, a) in lost {
                let updated = Allocation {
                    client_status: AllocClientStatus::Lost as i32,
                    client_description: "node is down".into(),
                    alloc_modify_index: index,
                    ..Allocation::clone(&a)
                };
                self.put_alloc(index, updated, Some((id, a)), changes);
            }
        }
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
        self.jobs.insert(Id::from(job.id.as_str()), Arc::new(job));
        self.indexes.jobs = index;
    }

    fn deregister_job(&mut self, index: u64, job_id: &str, purge: bool, changes: &mut Changes) {
        let Some(old) = self.jobs.get(job_id).cloned() else {
            return;
        };
        if purge {
            self.jobs.remove(job_id);
        } else {
            let job = Job {
                stop: true,
                status: JobStatus::Dead as i32,
                modify_index: index,
                job_modify_index: index,
                ..Job::clone(&old)
            };
            self.jobs.insert(Id::from(job_id), Arc::new(job));
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

    /// Server-side fields come from the plan; client-side fields stay as the
    /// client last reported them.
    fn upsert_alloc_from_plan(&mut self, index: u64, alloc: &Allocation, changes: &mut Changes) {
        let mut new = alloc.clone();
        new.alloc_modify_index = index;
        let old = self.alloc_with_key(&alloc.id);
        new.client_status = planned_client_status(alloc, old.as_ref().map(|(_, o)| &**o));
        if let Some((_, old)) = &old {
            new.create_index = old.create_index;
            new.create_time_ms = old.create_time_ms;
            new.client_description = old.client_description.clone();
            new.task_states = old.task_states.clone();
            new.healthy = old.healthy;
            if !alloc_terminal(old) && alloc_terminal(&new) {
                changes.capacity(self.class_of(&new.node_id));
            }
        } else {
            new.create_index = index;
            if let Some((id, job)) = self.jobs.get_key_value(new.job_id.as_str()) {
                if job.status == JobStatus::Pending as i32 {
                    let job = Job {
                        status: JobStatus::Running as i32,
                        ..Job::clone(job)
                    };
                    self.jobs.insert(id.clone(), Arc::new(job));
                    changes.keys.push(WatchKey::Job(new.job_id.clone()));
                }
            }
        }
        self.put_alloc(index, new, old, changes);
    }

    fn update_alloc_from_client(
        &mut self,
        index: u64,
        update: &Allocation,
        at_ms: u64,
        changes: &mut Changes,
    ) {
        // Found and replaced in one walk down the table: most writes are
        // clients' reports.
        let Some((id, slot)) = self.allocs.get_key_value_mut(&AllocKey::new(&update.id)) else {
            return;
        };
        // The node's allocations hold the other reference to it: let go of
        // that one while the report is taken (it is put back below), and
        // unless a reader or a copy of the state holds it too, the
        // allocation is changed where it is, instead of copying its ten
        // strings into a new one and freeing the old. Its place on the node
        // is found once and kept, not removed and inserted again.
        let mut on_node = self
            .allocs_by_node
            .get_mut(slot.node_id.as_str())
            .and_then(|on_node| on_node.get_mut(id));
        if let Some(held) = on_node.as_mut() {
            drop(std::mem::replace(*held, VACANT.clone()));
        }
        let (was_counted, was_terminal) = (summary_key(slot), alloc_terminal(slot));
        match Arc::get_mut(slot) {
            Some(alloc) => take_report(alloc, update, at_ms, index),
            None => *slot = Arc::new(reported(slot, update, at_ms, index)),
        }
        let new = slot.clone();
        match on_node {
            Some(held) => *held = new.clone(),
            None => {
                let id = id.clone();
                self.put_on_node(id, new.clone())
            }
        }
        if !was_terminal && alloc_terminal(&new) {
            changes.capacity(self.class_of(&new.node_id));
        }
        self.index_report(index, &new, was_counted, changes);
    }

    /// Brings the job's tables up to a client's report of `alloc`, just
    /// stored at `index` (and on its node), which was counted under `was`.
    /// A report changes neither the allocation's node, job nor server-side
    /// version, so the node's query is not woken (Nomad's clients wake on
    /// their own reports and find nothing to fetch, one round trip per
    /// update for nothing).
    fn index_report(
        &mut self,
        index: u64,
        alloc: &Allocation,
        was: (u64, i32, i32),
        changes: &mut Changes,
    ) {
        if was != summary_key(alloc) {
            self.uncount_key(&alloc.job_id, was);
            self.count(alloc);
        }
        set_or_insert(&mut self.job_alloc_index, &alloc.job_id, index);
        changes.watch_job_allocs(&alloc.job_id);
        self.indexes.allocs = index;
    }

    /// The stored allocation `id` with the table's key for it, which a
    /// write of the allocation reuses instead of allocating another.
    fn alloc_with_key(&self, id: &str) -> Option<(AllocKey, Arc<Allocation>)> {
        self.allocs
            .get_key_value(&AllocKey::new(id))
            .map(|(id, a)| (id.clone(), a.clone()))
    }

    /// Stores `alloc` at `index` in place of `old`, the version stored now
    /// with its key (which every caller has looked up already).
    fn put_alloc(
        &mut self,
        index: u64,
        mut alloc: Allocation,
        old: Option<(AllocKey, Arc<Allocation>)>,
        changes: &mut Changes,
    ) {
        alloc.modify_index = index;
        let (id, old) = match old {
            Some((id, old)) => (id, Some(old)),
            None => (AllocKey::new(&alloc.id), None),
        };
        let alloc = Arc::new(alloc);
        self.allocs.insert(id.clone(), alloc.clone());
        self.index_alloc(index, id, &alloc, old.as_deref(), changes);
    }

    /// Brings the tables kept beside `allocs` up to `alloc`, just stored
    /// there at `index` in place of `old`. Keys are made only for rows
    /// that are new: looking one up costs less than allocating it.
    fn index_alloc(
        &mut self,
        index: u64,
        id: AllocKey,
        alloc: &Arc<Allocation>,
        old: Option<&Allocation>,
        changes: &mut Changes,
    ) {
        // A plan's change of an allocation already indexed under its node
        // and job leaves the job's id set alone; the node's index holds the
        // allocation, so it takes the new one. (Clients' reports are
        // indexed by `index_report`.)
        let indexed = old.is_some_and(|o| o.node_id == alloc.node_id && o.job_id == alloc.job_id);
        if !indexed {
            change_or_insert(
                &mut self.allocs_by_job,
                &alloc.job_id,
                |ids| {
                    ids.insert(id.clone());
                },
                || OrdSet::unit(id.clone()),
            );
        }
        self.recount(old, alloc);
        // A node's query answers with its allocations' ids and server-side
        // versions only: it wakes for a new allocation or a new version.
        let node_sees =
            !indexed || old.is_some_and(|o| o.alloc_modify_index != alloc.alloc_modify_index);
        if node_sees {
            set_or_insert(&mut self.node_alloc_index, &alloc.node_id, index);
            changes.watch_node_allocs(&alloc.node_id);
        }
        set_or_insert(&mut self.job_alloc_index, &alloc.job_id, index);
        changes.watch_job_allocs(&alloc.job_id);
        self.put_on_node(id, alloc.clone());
        self.indexes.allocs = index;
    }

    /// Stores `alloc` under `id` in its node's allocations.
    fn put_on_node(&mut self, id: AllocKey, alloc: Arc<Allocation>) {
        change_or_insert(
            &mut self.allocs_by_node,
            &alloc.node_id,
            |on_node| {
                on_node.insert(id.clone(), alloc.clone());
            },
            || OrdMap::unit(id.clone(), alloc.clone()),
        );
    }

    /// Moves `new` from where `old` was counted in its job's summary; a
    /// report that changes neither version nor status moves nothing.
    fn recount(&mut self, old: Option<&Allocation>, new: &Allocation) {
        if let Some(o) = old {
            if o.job_id == new.job_id && summary_key(o) == summary_key(new) {
                return;
            }
            self.uncount(o);
        }
        self.count(new);
    }

    /// Counts `alloc` in its job's summary.
    fn count(&mut self, alloc: &Allocation) {
        let key = summary_key(alloc);
        change_or_insert(
            &mut self.job_summaries,
            &alloc.job_id,
            |counts| *Arc::make_mut(counts).entry(key).or_default() += 1,
            || Arc::new(AllocCounts::from([(key, 1)])),
        );
    }

    /// Takes `alloc` out of its job's summary.
    fn uncount(&mut self, alloc: &Allocation) {
        self.uncount_key(&alloc.job_id, summary_key(alloc));
    }

    /// Takes one allocation counted under `key` out of job `job_id`'s summary.
    fn uncount_key(&mut self, job_id: &str, key: (u64, i32, i32)) {
        let Some(counts) = self.job_summaries.get_mut(job_id) else {
            return;
        };
        let counts = Arc::make_mut(counts);
        if let Some(n) = counts.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&key);
            }
        }
        if counts.is_empty() {
            self.job_summaries.remove(job_id);
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

    // ----- reads -----

    /// The raft index of the last entry applied to this state.
    pub fn index(&self) -> u64 {
        self.index
    }

    pub fn indexes(&self) -> &TableIndexes {
        &self.indexes
    }

    pub fn node(&self, id: &str) -> Option<Arc<Node>> {
        self.nodes.get(id).cloned()
    }

    /// Whether node `id` is registered (checked at each node's query).
    pub fn has_node(&self, id: &str) -> bool {
        self.nodes.contains_key(id)
    }

    /// Every node, in id order.
    pub fn nodes(&self) -> impl Iterator<Item = &Arc<Node>> {
        self.nodes.values()
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    pub fn job(&self, id: &str) -> Option<Arc<Job>> {
        self.jobs.get(id).cloned()
    }

    pub fn jobs(&self) -> impl Iterator<Item = &Arc<Job>> {
        self.jobs.values()
    }

    pub fn eval(&self, id: &str) -> Option<Arc<Evaluation>> {
        self.evals.get(id).cloned()
    }

    pub fn evals(&self) -> impl Iterator<Item = &Arc<Evaluation>> {
        self.evals.values()
    }

    pub fn job_evals(&self, job_id: &str) -> Vec<Arc<Evaluation>> {
        Self::lookup(&self.evals_by_job, job_id, |id| self.evals.get(id))
    }

    pub fn alloc(&self, id: &str) -> Option<Arc<Allocation>> {
        self.allocs.get(&AllocKey::new(id)).cloned()
    }

    /// Whether allocation `id` exists: a check of every client's report,
    /// which need not touch the allocation itself (its count).
    pub fn has_alloc(&self, id: &str) -> bool {
        self.allocs.contains_key(&AllocKey::new(id))
    }

    /// Every allocation, in no particular order.
    pub fn allocs(&self) -> impl Iterator<Item = &Arc<Allocation>> {
        self.allocs.values()
    }

    /// Every allocation in id order, as a snapshot lists them (the table
    /// itself is in hash order).
    fn allocs_by_id(&self) -> impl Iterator<Item = &Arc<Allocation>> {
        let mut all: Vec<(&AllocKey, &Arc<Allocation>)> = self.allocs.iter().collect();
        all.sort_unstable_by(|a, b| a.0.cmp(b.0));
        all.into_iter().map(|(_, a)| a)
    }

    /// Node `node_id`'s allocations by id, as the state holds them (a
    /// copy costs a count): what a node's query answers from.
    pub fn node_alloc_map(&self, node_id: &str) -> OrdMap<AllocKey, Arc<Allocation>> {
        self.allocs_by_node
            .get(node_id)
            .cloned()
            .unwrap_or_default()
    }

    pub fn node_allocs(&self, node_id: &str) -> Vec<Arc<Allocation>> {
        self.allocs_by_node
            .get(node_id)
            .map(|on_node| on_node.values().cloned().collect())
            .unwrap_or_default()
    }

    pub fn job_allocs(&self, job_id: &str) -> Vec<Arc<Allocation>> {
        Self::lookup(&self.allocs_by_job, job_id, |id| self.allocs.get(id))
    }

    /// The last index at which the server changed what `node_id`'s query
    /// returns: an allocation placed, changed by the server, or removed.
    pub fn node_alloc_index(&self, node_id: &str) -> u64 {
        self.node_alloc_index.get(node_id).copied().unwrap_or(0)
    }

    /// The last index that changed any allocation of `job_id`.
    pub fn job_alloc_index(&self, job_id: &str) -> u64 {
        self.job_alloc_index.get(job_id).copied().unwrap_or(0)
    }

    /// `job_id`'s allocations counted by (job version, desired status,
    /// client status), in that order.
    pub fn job_summary(&self, job_id: &str) -> Arc<AllocCounts> {
        self.job_summaries.get(job_id).cloned().unwrap_or_default()
    }

    /// Every allocation counted by client status, from the job summaries
    /// (a hundred jobs' counts, not a hundred thousand allocations).
    pub fn alloc_client_statuses(&self) -> BTreeMap<i32, u64> {
        let mut by_status = BTreeMap::new();
        for counts in self.job_summaries.values() {
            for (&(_, _, client_status), n) in counts.iter() {
                *by_status.entry(client_status).or_default() += n;
            }
        }
        by_status
    }

    pub fn deployment(&self, id: &str) -> Option<Arc<Deployment>> {
        self.deployments.get(id).cloned()
    }

    /// Every deployment, in id order.
    pub fn deployments(&self) -> impl Iterator<Item = &Arc<Deployment>> {
        self.deployments.values()
    }

    pub fn job_deployments(&self, job_id: &str) -> Vec<Arc<Deployment>> {
        Self::lookup(&self.deployments_by_job, job_id, |id| {
            self.deployments.get(id)
        })
    }

    /// What the live allocations on a node hold.
    pub fn node_usage(&self, node_id: &str) -> Resources {
        let mut used = Resources::default();
        if let Some(on_node) = self.allocs_by_node.get(node_id) {
            for a in on_node.values() {
                if !alloc_terminal(a) {
                    let r = a.resources.unwrap_or_default();
                    used.cpu_mhz += r.cpu_mhz;
                    used.memory_mb += r.memory_mb;
                }
            }
        }
        used
    }

    /// The rows of `key` in `index`, each found by `get`.
    fn lookup<'a, K: Ord + Clone, T: Clone + 'a>(
        index: &OrdMap<Id, OrdSet<K>>,
        key: &str,
        get: impl Fn(&K) -> Option<&'a T>,
    ) -> Vec<T> {
        index
            .get(key)
            .map(|ids| ids.iter().filter_map(|id| get(id).cloned()).collect())
            .unwrap_or_default()
    }

    pub fn to_snapshot(&self) -> StateSnapshot {
        StateSnapshot {
            nodes: self.nodes.values().map(|n| Node::clone(n)).collect(),
            indexes: Some(self.indexes),
            jobs: self.jobs.values().map(|j| Job::clone(j)).collect(),
            evals: self.evals.values().map(|e| Evaluation::clone(e)).collect(),
            allocs: self.allocs_by_id().map(|a| Allocation::clone(a)).collect(),
            deployments: self
                .deployments
                .values()
                .map(|d| Deployment::clone(d))
                .collect(),
        }
    }

    /// Rebuilds the state, and its secondary indexes, from a snapshot taken at `index`.
    pub fn from_snapshot(snap: StateSnapshot, index: u64) -> Self {
        let mut s = State {
            indexes: snap.indexes.unwrap_or_default(),
            index,
            ..Default::default()
        };
        for n in snap.nodes {
            s.nodes.insert(Id::from(n.id.as_str()), Arc::new(n));
        }
        for j in snap.jobs {
            s.jobs.insert(Id::from(j.id.as_str()), Arc::new(j));
        }
        for e in snap.evals {
            let id = Id::from(e.id.as_str());
            s.evals_by_job
                .entry(Id::from(e.job_id.as_str()))
                .or_default()
                .insert(id.clone());
            s.evals.insert(id, Arc::new(e));
        }
        for a in snap.allocs {
            let (id, node, job) = (
                AllocKey::new(&a.id),
                Id::from(a.node_id.as_str()),
                Id::from(a.job_id.as_str()),
            );
            s.allocs_by_job
                .entry(job.clone())
                .or_default()
                .insert(id.clone());
            let n = s.node_alloc_index.entry(node.clone()).or_insert(0);
            *n = (*n).max(a.alloc_modify_index);
            let j = s.job_alloc_index.entry(job).or_insert(0);
            *j = (*j).max(a.modify_index);
            s.count(&a);
            let a = Arc::new(a);
            s.allocs_by_node
                .entry(node)
                .or_default()
                .insert(id.clone(), a.clone());
            s.allocs.insert(id, a);
        }
        for d in snap.deployments {
            let id = Id::from(d.id.as_str());
            s.deployments_by_job
                .entry(Id::from(d.job_id.as_str()))
                .or_default()
                .insert(id.clone());
            s.deployments.insert(id, Arc::new(d));
        }
        s
    }
}

/// Whether two versions of a job ask for the same thing (indexes, status and
/// version aside). A registration that changes nothing is not a new version.
pub fn same_spec(a: &Job, b: &Job) -> bool {
    a.r#type == b.r#type
        && a.priority == b.priority
        && a.datacenters == b.datacenters
        && a.task_groups.len() == b.task_groups.len()
        && a.task_groups
            .iter()
            .zip(&b.task_groups)
            .all(|(x, y)| same_group(x, y, true))
}

/// Whether two versions of a task group ask for the same thing, with or
/// without comparing their count (a count change alone is no reason to
/// replace running allocations).
pub fn same_group(
    a: &stampede_proto::TaskGroup,
    b: &stampede_proto::TaskGroup,
    with_count: bool,
) -> bool {
    a.name == b.name
        && (!with_count || a.count() == b.count())
        && a.resources == b.resources
        && a.constraints == b.constraints
        && a.update == b.update
        && a.meta == b.meta
}

/// The live state, shared by the state machine (the one writer) and readers.
#[derive(Debug)]
pub struct StateStore {
    state: RwLock<State>,
    applied: watch::Sender<u64>,
    /// When each index was applied here, for garbage collection's thresholds.
    times: std::sync::Mutex<gc::TimeTable>,
}

impl Default for StateStore {
    fn default() -> Self {
        Self {
            state: RwLock::default(),
            applied: watch::channel(0).0,
            times: Default::default(),
        }
    }
}

impl StateStore {
    /// A consistent copy of the current state; cheap, see the module docs.
    pub fn snapshot(&self) -> State {
        stampede_proto::read(&self.state).clone()
    }

    /// Runs `f` on the current state under the read lock, without a copy.
    /// For short reads (a lookup, a node's allocations): a copy of the state
    /// that is alive when an entry applies makes the apply copy every tree
    /// node it touches instead of changing it, and nodes' queries and
    /// reports read all the time.
    pub fn read<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        f(&stampede_proto::read(&self.state))
    }

    /// Runs `f` with the state locked for writing, then publishes the new index.
    pub fn write<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let (out, index) = {
            let mut guard = stampede_proto::write(&self.state);
            let out = f(&mut guard);
            (out, guard.index)
        };
        self.applied.send_if_modified(|i| {
            let moved = *i != index;
            *i = index;
            moved
        });
        stampede_proto::lock(&self.times).witness(index, crate::model::now_ms());
        out
    }

    /// The newest index this server had applied `age` ago (0 if it was not
    /// running then): everything last changed at or before it is that old.
    pub fn index_as_of(&self, age: std::time::Duration) -> u64 {
        let at = crate::model::now_ms().saturating_sub(age.as_millis() as u64);
        stampede_proto::lock(&self.times).index_at(at)
    }

    pub fn replace(&self, state: State) {
        self.write(|s| *s = state);
    }

    /// Waits until the state has applied at least `index`; false on timeout.
    pub async fn wait_for_index(&self, index: u64, timeout: std::time::Duration) -> bool {
        let mut rx = self.applied.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|i| *i >= index))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    pub fn applied_index(&self) -> u64 {
        *self.applied.borrow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stampede_proto::{
        AllocClientUpdateEntry, AllocDesiredStatus, JobRegisterEntry, NamedTaskState,
        NodeRegisterEntry, NodeStatusEntry, PlanApplyEntry,
    };

    fn node_entry(id: &str) -> LogEntry {
        LogEntry {
            msg: Some(Msg::NodeRegister(NodeRegisterEntry {
                ticket: 0,
                node: Some(Node {
                    id: id.into(),
                    datacenter: "dc1".into(),
                    ..Default::default()
                }),
                evals: vec![],
            })),
        }
    }

    fn plan_entry(allocs: Vec<Allocation>) -> LogEntry {
        LogEntry {
            msg: Some(Msg::PlanApply(PlanApplyEntry {
                allocs,
                ..Default::default()
            })),
        }
    }

    fn node_down_entry(id: &str) -> LogEntry {
        LogEntry {
            msg: Some(Msg::NodeStatus(NodeStatusEntry {
                node_id: id.into(),
                status: NodeStatus::Down as i32,
                ..Default::default()
            })),
        }
    }

    fn alloc(id: &str, node: &str, job: &str) -> Allocation {
        Allocation {
            id: id.into(),
            node_id: node.into(),
            job_id: job.into(),
            desired_status: AllocDesiredStatus::Run as i32,
            resources: Some(Resources {
                cpu_mhz: 100,
                memory_mb: 64,
            }),
            ..Default::default()
        }
    }

    /// Clients' reports of only a status each, in one entry.
    fn statuses(reports: &[(&str, AllocClientStatus)]) -> LogEntry {
        let allocs = reports
            .iter()
            .map(|&(id, status)| Allocation {
                id: id.into(),
                client_status: status as i32,
                ..Default::default()
            })
            .collect();
        LogEntry {
            msg: Some(Msg::AllocClientUpdate(AllocClientUpdateEntry {
                allocs,
                ..Default::default()
            })),
        }
    }

    fn apply(s: &mut State, index: u64, e: LogEntry) -> Changes {
        let mut c = Changes::default();
        s.apply(index, &e, &mut c);
        c
    }

    #[test]
    fn ids_kept_in_the_key_and_beside_it_order_and_look_up_as_their_texts() {
        // 23 bytes fit inside an `Id`; longer ones are kept beside it.
        let ids = [
            "sim-0000abcd-10",
            "sim-0000abcd-9",
            "sim-0000abcd-1000000000",  // 23 bytes
            "sim-0000abcd-10000000000", // 24 bytes
            "sim-0000abcd-100000000000000000000",
            "",
            "d41d8cd9-8f00-3204-a980-0998ecf8427e",
            "\u{e9}",
        ];
        let mut s = State::default();
        for (i, id) in ids.iter().enumerate() {
            apply(&mut s, i as u64 + 1, node_entry(id));
        }
        let mut sorted = ids.to_vec();
        sorted.sort();
        let stored: Vec<&str> = s.nodes().map(|n| n.id.as_str()).collect();
        assert_eq!(stored, sorted);
        for id in ids {
            assert_eq!(s.node(id).map(|n| n.id.clone()), Some(id.to_string()));
        }
        assert!(s.node("sim-0000abcd-1000000000x").is_none());
    }

    #[test]
    fn register_keeps_create_index_and_moves_modify_index() {
        let mut s = State::default();
        let c = apply(&mut s, 5, node_entry("a"));
        assert!(c.capacity_changed, "a new ready node is new capacity");
        let c = apply(&mut s, 9, node_entry("a"));
        assert!(!c.capacity_changed);
        let a = s.node("a").unwrap();
        assert_eq!((a.create_index, a.modify_index), (5, 9));
        assert_eq!(a.status, NodeStatus::Ready as i32);
        assert_eq!(s.indexes().nodes, 9);
        assert_eq!(s.index(), 9);
    }

    #[test]
    fn a_batch_applies_its_commands_in_order_at_its_index_and_never_a_nested_one() {
        let mut s = State::default();
        let nested = LogEntry {
            msg: Some(Msg::Batch(stampede_proto::BatchEntry {
                entries: vec![node_entry("hidden")],
            })),
        };
        let batch = LogEntry {
            msg: Some(Msg::Batch(stampede_proto::BatchEntry {
                entries: vec![node_entry("a"), nested, node_entry("b")],
            })),
        };
        let c = apply(&mut s, 7, batch);
        assert_eq!(c.index, 7);
        assert_eq!(c.objects.map(|o| o.nodes), Some(2));
        for id in ["a", "b"] {
            let n = s.node(id).unwrap();
            assert_eq!((n.create_index, n.modify_index), (7, 7));
        }
        assert!(s.node("hidden").is_none(), "a nested batch is not applied");
        assert_eq!(s.index(), 7);
    }

    #[test]
    fn a_plan_wakes_its_job_once_and_each_of_its_nodes() {
        let mut s = State::default();
        for n in ["n1", "n2"] {
            apply(&mut s, 1, node_entry(n));
        }
        let plan = plan_entry(vec![
            alloc("a1", "n1", "web"),
            alloc("a2", "n1", "web"),
            alloc("a3", "n2", "web"),
            alloc("a4", "n2", "db"),
        ]);
        let c = apply(&mut s, 2, plan);
        let count = |k: WatchKey| c.keys.iter().filter(|x| **x == k).count();
        assert_eq!(count(WatchKey::JobAllocs("web".into())), 1);
        assert_eq!(count(WatchKey::JobAllocs("db".into())), 1);
        assert_eq!(count(WatchKey::NodeAllocs("n1".into())), 1);
        assert_eq!(count(WatchKey::NodeAllocs("n2".into())), 1);
        assert_eq!(s.job_allocs("web").len(), 3);
        assert_eq!(s.job_allocs("db").len(), 1);
    }

    #[test]
    fn a_client_report_replaces_what_the_client_owns_and_keeps_the_rest() {
        let mut s = State::default();
        apply(&mut s, 1, node_entry("n1"));
        let placed = Allocation {
            name: "web.web[0]".into(),
            eval_id: "e1".into(),
            deployment_id: "d1".into(),
            client_description: "placed".into(),
            task_states: vec![NamedTaskState::new("old", Default::default())],
            healthy: Some(true),
            job_version: 3,
            ..alloc("a1", "n1", "web")
        };
        apply(&mut s, 2, plan_entry(vec![placed]));
        let before = s.alloc("a1").unwrap();
        let report = Allocation {
            id: "a1".into(),
            client_status: AllocClientStatus::Running as i32,
            client_description: "running".into(),
            task_states: vec![NamedTaskState::new("web", Default::default())],
            healthy: None,
            ..Default::default()
        };
        let update = LogEntry {
            msg: Some(Msg::AllocClientUpdate(AllocClientUpdateEntry {
                allocs: vec![report],
                updated_at_ms: 42,
                ..Default::default()
            })),
        };
        apply(&mut s, 3, update);
        let after = s.alloc("a1").unwrap();
        let expected = Allocation {
            client_status: AllocClientStatus::Running as i32,
            client_description: "running".into(),
            task_states: vec![NamedTaskState::new("web", Default::default())],
            // Health, once known, stays known when a report leaves it out.
            healthy: Some(true),
            modify_index: 3,
            modify_time_ms: 42,
            ..Allocation::clone(&before)
        };
        assert_eq!(*after, expected);
    }

    #[test]
    fn allocations_are_counted_by_client_status_across_jobs() {
        let mut s = State::default();
        apply(&mut s, 1, node_entry("n1"));
        let plan = plan_entry(vec![
            alloc("a1", "n1", "web"),
            alloc("a2", "n1", "web"),
            alloc("a3", "n1", "db"),
        ]);
        apply(&mut s, 2, plan);
        let update = statuses(&[
            ("a1", AllocClientStatus::Running),
            ("a3", AllocClientStatus::Failed),
        ]);
        apply(&mut s, 3, update);
        let counted = s.alloc_client_statuses();
        let expected = BTreeMap::from([
            (AllocClientStatus::Pending as i32, 1),
            (AllocClientStatus::Running as i32, 1),
            (AllocClientStatus::Failed as i32, 1),
        ]);
        assert_eq!(counted, expected);
        // The same as counting every allocation one by one.
        let mut by_one = BTreeMap::new();
        for a in s.allocs() {
            *by_one.entry(a.client_status).or_insert(0u64) += 1;
        }
        assert_eq!(counted, by_one);
    }

    #[test]
    fn a_report_changed_in_place_leaves_every_copy_as_it_was_and_the_tables_as_a_copy_would() {
        // One state reported to while nothing else holds the allocation
        // (changed where it is), one while a copy of the state is alive
        // (copied): both must end the same, and the copy must not move.
        let placed = |s: &mut State| {
            apply(s, 1, node_entry("n1"));
            let plan = plan_entry(vec![alloc("a1", "n1", "web"), alloc("a2", "n1", "web")]);
            apply(s, 2, plan);
        };
        let report = |status: AllocClientStatus, healthy: Option<bool>| LogEntry {
            msg: Some(Msg::AllocClientUpdate(AllocClientUpdateEntry {
                allocs: vec![Allocation {
                    id: "a1".into(),
                    client_status: status as i32,
                    client_description: format!("{status:?}"),
                    task_states: vec![NamedTaskState::new("web", Default::default())],
                    healthy,
                    ..Default::default()
                }],
                updated_at_ms: 42,
                ..Default::default()
            })),
        };
        let mut alone = State::default();
        let mut copied = State::default();
        placed(&mut alone);
        placed(&mut copied);
        let mut copies = Vec::new();
        for (i, (status, healthy)) in [
            (AllocClientStatus::Running, None),
            (AllocClientStatus::Running, Some(true)),
            (AllocClientStatus::Complete, None),
        ]
        .into_iter()
        .enumerate()
        {
            let index = 3 + i as u64;
            copies.push(copied.clone());
            let at = |s: &State| Arc::as_ptr(&s.alloc("a1").unwrap());
            let (alone_at, copied_at) = (at(&alone), at(&copied));
            let c1 = apply(&mut alone, index, report(status, healthy));
            let c2 = apply(&mut copied, index, report(status, healthy));
            assert_eq!(at(&alone), alone_at, "changed where it is");
            assert_ne!(at(&copied), copied_at, "a copy holds it: copied");
            assert_eq!(
                (c1.keys, c1.capacity_changed),
                (c2.keys, c2.capacity_changed)
            );
            let a = alone.alloc("a1").unwrap();
            assert_eq!(a.client_status, status as i32);
            assert_eq!((a.modify_index, a.modify_time_ms), (index, 42));
            assert_eq!(a.create_index, 2, "what the server wrote stays");
        }
        assert_eq!(
            alone.alloc("a1").unwrap().healthy,
            Some(true),
            "health stays known"
        );
        assert_eq!(alone.to_snapshot(), copied.to_snapshot());
        assert_eq!(alone.node_alloc_map("n1"), copied.node_alloc_map("n1"));
        assert_eq!(alone.job_summary("web"), copied.job_summary("web"));
        assert_eq!(alone.job_alloc_index("web"), 5);
        assert_eq!(
            alone.node_alloc_index("n1"),
            2,
            "a report does not wake the node"
        );
        assert_eq!(
            alone.node_usage("n1").cpu_mhz,
            100,
            "the complete one frees its share"
        );
        // Each copy still sees the allocation as it was when it was taken.
        let seen: Vec<i32> = copies
            .iter()
            .map(|c| c.node_alloc_map("n1")[&AllocKey::new("a1")].client_status)
            .collect();
        let expected = [
            AllocClientStatus::Pending,
            AllocClientStatus::Running,
            AllocClientStatus::Running,
        ]
        .map(|s| s as i32);
        assert_eq!(seen, expected);
        assert_eq!(copies[0].alloc("a1").unwrap().modify_index, 2);
    }

    #[test]
    fn a_copy_does_not_see_later_writes() {
        let store = StateStore::default();
        store.write(|s| s.apply(1, &node_entry("a"), &mut Changes::default()));
        let before = store.snapshot();
        store.write(|s| s.apply(2, &node_entry("b"), &mut Changes::default()));
        assert_eq!(before.node_count(), 1);
        assert_eq!(store.snapshot().node_count(), 2);
        assert_eq!(store.applied_index(), 2);
    }

    #[test]
    fn allocation_writes_touch_only_their_node_and_job() {
        let mut s = State::default();
        apply(&mut s, 1, node_entry("n1"));
        apply(&mut s, 2, node_entry("n2"));
        let plan = plan_entry(vec![alloc("a1", "n1", "web")]);
        let c = apply(&mut s, 3, plan);
        assert!(c.keys.contains(&WatchKey::NodeAllocs("n1".into())));
        assert!(!c.keys.contains(&WatchKey::NodeAllocs("n2".into())));
        assert_eq!((s.node_alloc_index("n1"), s.node_alloc_index("n2")), (3, 0));
        assert_eq!(s.node_usage("n1").cpu_mhz, 100);

        let update = LogEntry {
            msg: Some(Msg::AllocClientUpdate(AllocClientUpdateEntry {
                allocs: vec![Allocation {
                    id: "a1".into(),
                    client_status: AllocClientStatus::Complete as i32,
                    ..Default::default()
                }],
                ..Default::default()
            })),
        };
        let c = apply(&mut s, 4, update);
        assert!(
            c.capacity_changed,
            "a finished allocation frees its resources"
        );
        let a1 = s.alloc("a1").unwrap();
        assert_eq!((a1.create_index, a1.modify_index), (3, 4));
        assert_eq!(a1.node_id, "n1", "server-side fields stay");
        assert_eq!(s.node_usage("n1").cpu_mhz, 0);
        // The node sent that report itself: its query has nothing new to
        // say, so it does not wake. The job's followers do.
        assert!(!c.keys.contains(&WatchKey::NodeAllocs("n1".into())));
        assert!(c.keys.contains(&WatchKey::JobAllocs("web".into())));
        assert_eq!(s.node_alloc_index("n1"), 3);

        // A change the server makes (here: the node is down, so a2 is
        // lost) is news to the node.
        apply(&mut s, 5, plan_entry(vec![alloc("a2", "n1", "web")]));
        let c = apply(&mut s, 6, node_down_entry("n1"));
        assert!(c.keys.contains(&WatchKey::NodeAllocs("n1".into())));
        assert_eq!(s.node_alloc_index("n1"), 6);
        assert_eq!(s.alloc("a2").unwrap().alloc_modify_index, 6);
    }

    /// What `job_summary` must equal: the job's allocations counted now.
    fn counted(s: &State, job: &str) -> AllocCounts {
        let mut counts = AllocCounts::new();
        for a in s.job_allocs(job) {
            *counts.entry(summary_key(&a)).or_default() += 1;
        }
        counts
    }

    #[test]
    fn a_jobs_summary_follows_its_allocations_and_is_rebuilt_from_a_snapshot() {
        let mut s = State::default();
        apply(&mut s, 1, node_entry("n1"));
        apply(&mut s, 2, node_entry("n2"));
        let plan = plan_entry(vec![
            alloc("a1", "n1", "web"),
            alloc("a2", "n1", "web"),
            alloc("a3", "n2", "web"),
            alloc("b1", "n2", "batch"),
        ]);
        apply(&mut s, 3, plan);
        let pending = (
            0,
            AllocDesiredStatus::Run as i32,
            AllocClientStatus::Pending as i32,
        );
        assert_eq!(*s.job_summary("web"), AllocCounts::from([(pending, 3)]));
        let before = s.clone();

        let update = statuses(&[
            ("a1", AllocClientStatus::Running),
            ("a2", AllocClientStatus::Running),
            ("a2", AllocClientStatus::Failed),
        ]);
        apply(&mut s, 4, update);
        let down = node_down_entry("n2");
        apply(&mut s, 5, down);
        let run = AllocDesiredStatus::Run as i32;
        assert_eq!(
            *s.job_summary("web"),
            AllocCounts::from([
                ((0, run, AllocClientStatus::Running as i32), 1),
                ((0, run, AllocClientStatus::Failed as i32), 1),
                ((0, run, AllocClientStatus::Lost as i32), 1),
            ])
        );
        let restored = State::from_snapshot(s.to_snapshot(), s.index());
        for job in ["web", "batch", "none"] {
            assert_eq!(*s.job_summary(job), counted(&s, job), "{job}");
            assert_eq!(*restored.job_summary(job), counted(&s, job), "{job}");
        }
        assert_eq!(
            *before.job_summary("web"),
            AllocCounts::from([(pending, 3)]),
            "a copy keeps the counts of its version"
        );
    }

    #[test]
    fn a_node_going_down_loses_its_running_allocations() {
        let mut s = State::default();
        apply(&mut s, 1, node_entry("n1"));
        let plan = plan_entry(vec![alloc("a1", "n1", "web"), alloc("a2", "n1", "web")]);
        apply(&mut s, 2, plan);
        let down = node_down_entry("n1");
        apply(&mut s, 3, down);
        for a in s.job_allocs("web") {
            assert_eq!(a.client_status, AllocClientStatus::Lost as i32);
            assert_eq!(a.modify_index, 3);
        }
        assert_eq!(s.node("n1").unwrap().status, NodeStatus::Down as i32);
    }

    #[test]
    fn re_registering_an_unchanged_job_is_not_a_new_version() {
        let mut s = State::default();
        let job = Job {
            id: "web".into(),
            priority: 50,
            ..Default::default()
        };
        let reg = |job: &Job| LogEntry {
            msg: Some(Msg::JobRegister(JobRegisterEntry {
                ticket: 0,
                job: Some(job.clone()),
                eval: None,
            })),
        };
        apply(&mut s, 1, reg(&job));
        apply(&mut s, 2, reg(&job));
        let j = s.job("web").unwrap();
        assert_eq!((j.version, j.job_modify_index, j.modify_index), (0, 1, 2));
        apply(
            &mut s,
            3,
            reg(&Job {
                priority: 70,
                ..job.clone()
            }),
        );
        let j = s.job("web").unwrap();
        assert_eq!((j.version, j.job_modify_index), (1, 3));
    }

    #[test]
    fn a_count_change_is_a_new_version_but_not_a_new_group_spec() {
        let mut s = State::default();
        let group = |count: u32, v: &str| stampede_proto::TaskGroup {
            name: "web".into(),
            count: Some(count),
            meta: [("v".to_string(), v.to_string())].into(),
            ..Default::default()
        };
        let reg = |tg| LogEntry {
            msg: Some(Msg::JobRegister(JobRegisterEntry {
                ticket: 0,
                job: Some(Job {
                    id: "web".into(),
                    task_groups: vec![tg],
                    ..Default::default()
                }),
                eval: None,
            })),
        };
        apply(&mut s, 1, reg(group(2, "1")));
        apply(&mut s, 2, reg(group(5, "1")));
        let j = s.job("web").unwrap();
        assert_eq!((j.version, j.task_groups[0].spec_version), (1, 0));
        apply(&mut s, 3, reg(group(5, "2")));
        let j = s.job("web").unwrap();
        assert_eq!((j.version, j.task_groups[0].spec_version), (2, 2));
    }

    #[test]
    fn snapshot_round_trip_keeps_rows_indexes_and_lookups() {
        let mut s = State::default();
        apply(&mut s, 1, node_entry("n1"));
        let plan = plan_entry(vec![alloc("a1", "n1", "web")]);
        apply(&mut s, 2, plan);
        let back = State::from_snapshot(s.to_snapshot(), 2);
        assert_eq!(back.node_count(), 1);
        assert_eq!(back.indexes(), s.indexes());
        assert_eq!(back.node_alloc_index("n1"), 2);
        assert_eq!(back.job_allocs("web").len(), 1);
        assert_eq!(back.index(), 2);
    }
}
