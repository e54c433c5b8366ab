//! What the plan applier has accepted and this server's state does not
//! hold yet: the allocations of the entry in flight and of the plans
//! checked while it commits, by node. The next plans are checked against
//! the committed state with these on top, as Nomad checks them on its
//! snapshot with the pending plan's results applied.
//!
//! No copy of the state is kept for it. A copy that is alive while entries
//! apply makes each apply copy every tree node it touches, and the
//! applier's copy used to live through every commit.

use std::collections::HashMap;

use stampede_proto::{AllocDesiredStatus, Allocation, PlanApplyEntry, Resources};

use crate::model::statuses_terminal;
use crate::state::{AllocKey, State};

/// What a node's usage needs of one accepted allocation.
struct Accepted {
    /// The batch of plans whose entry writes it.
    batch: u64,
    desired_status: i32,
    /// The status the plan gives; a stored allocation keeps its own.
    client_status: i32,
    resources: Option<Resources>,
    /// Where it stands in its job, for the check that no place of a job is
    /// held twice (`plan_apply::slots`).
    slot: Slot,
}

/// An allocation's place in its job: its group and index, and whether it
/// is a canary of its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    pub job_id: String,
    pub task_group: String,
    pub index: u32,
    pub canary: bool,
    pub job_version: u64,
}

impl Slot {
    pub fn of(a: &Allocation) -> Self {
        Self {
            job_id: a.job_id.clone(),
            task_group: a.task_group.clone(),
            index: a.index,
            canary: a.canary,
            job_version: a.job_version,
        }
    }
}

/// An accepted allocation of a job, as [`Unapplied::of_job`] gives it.
pub struct JobAlloc<'a> {
    pub id: &'a str,
    pub node_id: &'a str,
    pub desired_status: i32,
    pub client_status: i32,
    pub slot: &'a Slot,
}

/// Accepted allocations not yet applied here, by node and id; the latest
/// batch's version of each.
#[derive(Default)]
pub struct Unapplied {
    on_node: HashMap<String, HashMap<String, Accepted>>,
    /// Each job's accepted allocations: id to node.
    by_job: HashMap<String, HashMap<String, String>>,
}

impl Unapplied {
    /// Adds what `entry`, written in batch `batch`, places and stops.
    pub fn add(&mut self, batch: u64, entry: &PlanApplyEntry) {
        for a in &entry.allocs {
            self.on_node.entry(a.node_id.clone()).or_default().insert(
                a.id.clone(),
                Accepted {
                    batch,
                    desired_status: a.desired_status,
                    client_status: a.client_status,
                    resources: a.resources,
                    slot: Slot::of(a),
                },
            );
            self.by_job
                .entry(a.job_id.clone())
                .or_default()
                .insert(a.id.clone(), a.node_id.clone());
        }
    }

    /// Forgets batch `batch`, which the state holds now. An allocation a
    /// later batch changed again stays, as that batch has it.
    pub fn applied(&mut self, batch: u64) {
        self.on_node.retain(|_, allocs| {
            allocs.retain(|_, a| a.batch != batch);
            !allocs.is_empty()
        });
        let on_node = &self.on_node;
        self.by_job.retain(|_, allocs| {
            allocs.retain(|id, node| on_node.get(node).is_some_and(|m| m.contains_key(id)));
            !allocs.is_empty()
        });
    }

    /// Forgets everything: nothing accepted is in flight any more.
    pub fn clear(&mut self) {
        self.on_node.clear();
        self.by_job.clear();
    }

    /// The accepted allocations of job `job_id` not yet applied here.
    pub fn of_job<'a>(&'a self, job_id: &str) -> impl Iterator<Item = JobAlloc<'a>> + 'a {
        self.by_job
            .get(job_id)
            .into_iter()
            .flatten()
            .filter_map(|(id, node)| self.get(node, id))
    }

    /// The accepted allocations on node `node_id` not yet applied here.
    pub fn of_node<'a>(&'a self, node_id: &str) -> impl Iterator<Item = JobAlloc<'a>> + 'a {
        self.on_node
            .get_key_value(node_id)
            .into_iter()
            .flat_map(|(node, allocs)| allocs.keys().filter_map(|id| self.get(node, id)))
    }

    /// The accepted allocation `id` on node `node_id`, if there is one.
    pub fn get<'a>(&'a self, node_id: &'a str, id: &'a str) -> Option<JobAlloc<'a>> {
        let a = self.on_node.get(node_id)?.get(id)?;
        Some(JobAlloc {
            id,
            node_id,
            desired_status: a.desired_status,
            client_status: a.client_status,
            slot: &a.slot,
        })
    }

    /// Whether an accepted plan not yet applied here stops allocation `id`
    /// on node `node_id`.
    pub fn stops(&self, node_id: &str, id: &str) -> bool {
        self.on_node
            .get(node_id)
            .and_then(|allocs| allocs.get(id))
            .is_some_and(|a| a.desired_status == AllocDesiredStatus::Stop as i32)
    }

    /// What node `node_id` holds on `state` with everything accepted on
    /// top, leaving out the allocations `gone` names (those a plan being
    /// checked stops or replaces).
    pub fn usage(&self, state: &State, node_id: &str, gone: impl Fn(&str) -> bool) -> Resources {
        let mine = self.on_node.get(node_id);
        let live = state.node_alloc_map(node_id);
        let mut used = Resources::default();
        for a in live.values() {
            let superseded = mine.is_some_and(|m| m.contains_key(&a.id));
            if !superseded && !gone(&a.id) && !statuses_terminal(a.desired_status, a.client_status)
            {
                add(&mut used, a.resources.as_ref());
            }
        }
        for (id, a) in mine.into_iter().flatten() {
            // A stored allocation keeps the status its client reported.
            let client_status = live
                .get(&AllocKey::new(id))
                .map_or(a.client_status, |stored| stored.client_status);
            if !gone(id) && !statuses_terminal(a.desired_status, client_status) {
                add(&mut used, a.resources.as_ref());
            }
        }
        used
    }
}

/// Adds `r` to `total`.
pub fn add(total: &mut Resources, r: Option<&Resources>) {
    if let Some(r) = r {
        total.cpu_mhz += r.cpu_mhz;
        total.memory_mb += r.memory_mb;
    }
}

/// The placements of `placed` that count on their node.
pub fn add_placed(total: &mut Resources, placed: &[Allocation]) {
    for a in placed {
        if !statuses_terminal(a.desired_status, a.client_status) {
            add(total, a.resources.as_ref());
        }
    }
}
