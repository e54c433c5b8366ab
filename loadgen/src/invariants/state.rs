//! What one server held when the audit read it: the input of the checks.
//!
//! The audit reads millions of allocations (two million on each server
//! after `c2m`), so it keeps each as an [`Alloc`]: the fields some check
//! reads, with the strings shared between allocations ([`Names`]) and the
//! id as its UUID's 128 bits ([`AllocId`]); the rest of the message is
//! dropped as it is read. Only one server's state is held at a time
//! (`read`).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use stampede_proto::{
    AllocClientStatus, AllocDesiredStatus, Allocation, ConstraintOperand, ConstraintTarget,
    Deployment, Evaluation, Job, Node, NodeStatus, Resources, TaskGroup,
};

pub use super::alloc_id::AllocId;

/// The strings allocations share (job ids, group and node names), each
/// held once for the whole audit.
#[derive(Debug, Default)]
pub struct Names(HashSet<Arc<str>>);

impl Names {
    pub fn get(&mut self, s: &str) -> Arc<str> {
        if let Some(n) = self.0.get(s) {
            return n.clone();
        }
        let n: Arc<str> = s.into();
        self.0.insert(n.clone());
        n
    }
}

/// An allocation as the audit keeps it: what the checks read (its id is
/// its key in [`ServerState::allocs`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Alloc {
    pub job_id: Arc<str>,
    pub task_group: Arc<str>,
    pub node_id: Arc<str>,
    /// Its name when that is not `job.group[index]`, as the scheduler names one.
    pub other_name: Option<Box<str>>,
    pub index: u32,
    pub resources: Resources,
    pub desired_status: i32,
    pub client_status: i32,
    pub job_type: i32,
    pub healthy: Option<bool>,
    pub canary: bool,
    pub job_version: u64,
    pub modify_index: u64,
    pub create_index: u64,
}

impl Alloc {
    /// What the audit keeps of `a`, and its id.
    pub fn of(a: &Allocation, names: &mut Names) -> (AllocId, Alloc) {
        let canonical = a.name == format!("{}.{}[{}]", a.job_id, a.task_group, a.index);
        let kept = Alloc {
            job_id: names.get(&a.job_id),
            task_group: names.get(&a.task_group),
            node_id: names.get(&a.node_id),
            other_name: (!canonical).then(|| a.name.as_str().into()),
            index: a.index,
            resources: a.resources.unwrap_or_default(),
            desired_status: a.desired_status,
            client_status: a.client_status,
            job_type: a.job_type,
            healthy: a.healthy,
            canary: a.canary,
            job_version: a.job_version,
            modify_index: a.modify_index,
            create_index: a.create_index,
        };
        (AllocId::new(&a.id), kept)
    }

    /// Its name: `job.group[index]`, or the one it was given.
    pub fn name(&self) -> Cow<'_, str> {
        match &self.other_name {
            Some(n) => Cow::Borrowed(n),
            None => Cow::Owned(format!(
                "{}.{}[{}]",
                self.job_id, self.task_group, self.index
            )),
        }
    }
}

/// Allocations by id, in one vector ordered by id: a hash map of two
/// million is twice the bytes. Pushed in any order as they are read, then
/// ordered once ([`Allocs::finish`]); [`Allocs::insert`] keeps the order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Allocs {
    rows: Vec<(AllocId, Alloc)>,
    /// Pushed since the last `finish`.
    unordered: bool,
}

impl Allocs {
    /// Adds an allocation read, out of order until [`Allocs::finish`].
    pub fn push(&mut self, id: AllocId, a: Alloc) {
        self.unordered = true;
        self.rows.push((id, a));
    }

    /// Orders what was pushed by id, and keeps one allocation of each id.
    pub fn finish(&mut self) {
        if self.unordered {
            self.rows.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            self.rows.dedup_by(|a, b| a.0 == b.0);
            self.rows.shrink_to_fit();
            self.unordered = false;
        }
    }

    fn find(&self, id: &AllocId) -> Result<usize, usize> {
        debug_assert!(!self.unordered, "Allocs::finish before a lookup");
        self.rows.binary_search_by(|(i, _)| i.cmp(id))
    }

    /// Adds or replaces an allocation, in order.
    #[cfg(test)]
    pub fn insert(&mut self, id: AllocId, a: Alloc) {
        match self.find(&id) {
            Ok(i) => self.rows[i].1 = a,
            Err(i) => self.rows.insert(i, (id, a)),
        }
    }

    #[cfg(test)]
    pub fn get_mut(&mut self, id: &AllocId) -> Option<&mut Alloc> {
        self.find(id).ok().map(|i| &mut self.rows[i].1)
    }

    #[cfg(test)]
    pub fn remove(&mut self, id: &AllocId) -> Option<Alloc> {
        self.find(id).ok().map(|i| self.rows.remove(i).1)
    }

    pub fn contains_key(&self, id: &AllocId) -> bool {
        self.find(id).is_ok()
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Every allocation with its id, by id.
    pub fn iter(&self) -> impl Iterator<Item = (&AllocId, &Alloc)> {
        self.rows.iter().map(|(id, a)| (id, a))
    }

    pub fn values(&self) -> impl Iterator<Item = &Alloc> {
        self.rows.iter().map(|(_, a)| a)
    }

    #[cfg(test)]
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Alloc> {
        self.rows.iter_mut().map(|(_, a)| a)
    }
}

impl FromIterator<(AllocId, Alloc)> for Allocs {
    fn from_iter<T: IntoIterator<Item = (AllocId, Alloc)>>(iter: T) -> Self {
        let mut out = Allocs::default();
        for (id, a) in iter {
            out.push(id, a);
        }
        out.finish();
        out
    }
}

/// One server's state, read from that server alone.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerState {
    pub server: u64,
    pub jobs: BTreeMap<String, Job>,
    pub allocs: Allocs,
    pub nodes: BTreeMap<String, Node>,
    pub deployments: BTreeMap<String, Deployment>,
    pub evals: BTreeMap<String, Evaluation>,
}

/// Whether an allocation holds resources on its node: neither stopped by
/// the scheduler nor complete, failed or lost on its client (the cluster's
/// own `alloc_terminal`, negated).
pub fn live(a: &Alloc) -> bool {
    a.desired_status != AllocDesiredStatus::Stop as i32
        && !AllocClientStatus::is_terminal(a.client_status)
}

/// A job's allocations, ordered by id.
pub type JobAllocs<'a> = Vec<(&'a AllocId, &'a Alloc)>;

impl ServerState {
    /// Keeps what the checks read of `a`; [`Allocs::finish`] before the
    /// checks.
    pub fn push(&mut self, a: &Allocation, names: &mut Names) {
        let (id, kept) = Alloc::of(a, names);
        self.allocs.push(id, kept);
    }

    /// Every job's allocations (also of jobs it does not have), by job id,
    /// each job's ordered by id.
    pub fn by_job(&self) -> BTreeMap<&str, JobAllocs<'_>> {
        let mut out: BTreeMap<&str, JobAllocs<'_>> = BTreeMap::new();
        // In order of id, so each job's are too.
        for (id, a) in self.allocs.iter() {
            out.entry(&a.job_id).or_default().push((id, a));
        }
        out
    }

    /// What the live allocations on each node use.
    pub fn used(&self) -> HashMap<&str, Resources> {
        let mut used: HashMap<&str, Resources> = HashMap::new();
        for a in self.allocs.values().filter(|a| live(a)) {
            let u = used.entry(&a.node_id).or_default();
            u.cpu_mhz += a.resources.cpu_mhz;
            u.memory_mb += a.resources.memory_mb;
        }
        used
    }

    /// How many live allocations each job has.
    pub fn live_counts(&self) -> HashMap<&str, usize> {
        let mut out: HashMap<&str, usize> = HashMap::new();
        for a in self.allocs.values().filter(|a| live(a)) {
            *out.entry(&a.job_id).or_default() += 1;
        }
        out
    }
}

/// What `acked_writes` and `definite_errors` read of one server: its jobs
/// and how many live allocations each job has. Kept for every server
/// until the end, which the allocations are not.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobsView {
    pub server: u64,
    pub jobs: BTreeMap<String, Job>,
    pub live: HashMap<String, usize>,
}

impl JobsView {
    pub fn of(s: &ServerState) -> Self {
        Self {
            server: s.server,
            jobs: s.jobs.clone(),
            live: s
                .live_counts()
                .into_iter()
                .map(|(j, n)| (j.to_string(), n))
                .collect(),
        }
    }

    /// How many live allocations job `job_id` has.
    pub fn live_of(&self, job_id: &str) -> usize {
        self.live.get(job_id).copied().unwrap_or(0)
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
