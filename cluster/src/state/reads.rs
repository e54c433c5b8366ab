//! Reading the tables.

use std::collections::BTreeMap;
use std::sync::Arc;

use imbl::{OrdMap, OrdSet};
use stampede_proto::node_secret::SecretHash;
use stampede_proto::{Allocation, Deployment, Evaluation, Job, Resources, TableIndexes};

use super::{AllocCounts, AllocKey, Id, NodeRow, Objects, State};

impl State {
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

    // ----- reads -----

    /// The raft index of the last entry applied to this state.
    pub fn index(&self) -> u64 {
        self.index
    }

    pub fn indexes(&self) -> &TableIndexes {
        &self.indexes
    }

    pub fn node(&self, id: &str) -> Option<Arc<NodeRow>> {
        self.nodes.get(id).cloned()
    }

    /// Whether node `id` is registered (checked at each node's query).
    pub fn has_node(&self, id: &str) -> bool {
        self.nodes.contains_key(id)
    }

    /// The SHA-256 of the secret node `id` registered with; `None` for a
    /// node not registered, or registered before node identity.
    pub fn node_secret(&self, id: &str) -> Option<&SecretHash> {
        self.nodes.get(id)?.secret.as_ref()
    }

    /// Node `id`'s registration in one lookup: `None` if it is not
    /// registered, else its secret's hash (`None` inside: registered
    /// before node identity). Each client report checks its node's secret,
    /// and a lookup among ten thousand ids is most of the check.
    pub fn node_registration(&self, id: &str) -> Option<Option<&SecretHash>> {
        self.nodes.get(id).map(|n| n.secret.as_ref())
    }

    /// Every node, in id order.
    pub fn nodes(&self) -> impl Iterator<Item = &Arc<NodeRow>> {
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

    /// The node allocation `id` was placed on, without touching the
    /// allocation's count: every client report is checked against it.
    pub fn alloc_node(&self, id: &str) -> Option<&str> {
        self.allocs
            .get(&AllocKey::new(id))
            .map(|a| a.node_id.as_str())
    }

    /// Every allocation, in no particular order.
    pub fn allocs(&self) -> impl Iterator<Item = &Arc<Allocation>> {
        self.allocs.values()
    }

    /// Every allocation in id order, as a snapshot lists them (the table
    /// itself is in hash order).
    pub(super) fn allocs_by_id(&self) -> impl Iterator<Item = &Arc<Allocation>> {
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
        self.node_used.get(node_id).copied().unwrap_or_default()
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
}
