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

use crate::model::{add_resources, statuses_terminal, sub_resources};
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
    /// checked stops or replaces there). It starts from the state's sum and
    /// takes out only what is accepted over it or gone, so its cost follows
    /// the plan and what is in flight, not every allocation the node runs:
    /// hashing each of those ids (200 a node in `c2m`) was a third of the
    /// leader's CPU late in that run.
    pub fn usage(&self, state: &State, node_id: &str, gone: &[&str]) -> Resources {
        let mine = self.on_node.get(node_id);
        let live = state.node_alloc_map(node_id);
        let mut used = state.node_usage(node_id);
        let mut replaced: Vec<&str> = gone.to_vec();
        replaced.extend(mine.into_iter().flat_map(|m| m.keys().map(String::as_str)));
        replaced.sort_unstable();
        replaced.dedup();
        for id in replaced {
            if let Some(a) = live.get(&AllocKey::new(id)) {
                if !statuses_terminal(a.desired_status, a.client_status) {
                    sub_resources(&mut used, a.resources.as_ref());
                }
            }
        }
        for (id, a) in mine.into_iter().flatten() {
            // A stored allocation keeps the status its client reported.
            let client_status = live
                .get(&AllocKey::new(id))
                .map_or(a.client_status, |stored| stored.client_status);
            if !gone.contains(&id.as_str()) && !statuses_terminal(a.desired_status, client_status) {
                add_resources(&mut used, a.resources.as_ref());
            }
        }
        used
    }
}

/// The placements of `placed` that count on their node.
pub fn add_placed(total: &mut Resources, placed: &[Allocation]) {
    for a in placed {
        if !statuses_terminal(a.desired_status, a.client_status) {
            add_resources(total, a.resources.as_ref());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Changes;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use stampede_proto::{log_entry::Msg, AllocClientStatus, LogEntry};

    /// The usage as it was first written: every live allocation of the
    /// node visited, each id looked up among the accepted ones.
    fn every_allocation(u: &Unapplied, state: &State, node_id: &str, gone: &[&str]) -> Resources {
        let mine = u.on_node.get(node_id);
        let live = state.node_alloc_map(node_id);
        let mut used = Resources::default();
        for a in live.values() {
            let superseded = mine.is_some_and(|m| m.contains_key(&a.id));
            if !superseded
                && !gone.contains(&a.id.as_str())
                && !statuses_terminal(a.desired_status, a.client_status)
            {
                add_resources(&mut used, a.resources.as_ref());
            }
        }
        for (id, a) in mine.into_iter().flatten() {
            let client_status = live
                .get(&AllocKey::new(id))
                .map_or(a.client_status, |stored| stored.client_status);
            if !gone.contains(&id.as_str()) && !statuses_terminal(a.desired_status, client_status) {
                add_resources(&mut used, a.resources.as_ref());
            }
        }
        used
    }

    fn random_alloc(rng: &mut StdRng, id: &str) -> Allocation {
        let desired = [AllocDesiredStatus::Run, AllocDesiredStatus::Stop];
        let client = [
            AllocClientStatus::Pending,
            AllocClientStatus::Running,
            AllocClientStatus::Complete,
            AllocClientStatus::Failed,
        ];
        Allocation {
            id: id.into(),
            node_id: "n1".into(),
            job_id: "web".into(),
            task_group: "web".into(),
            desired_status: desired[rng.gen_range(0..desired.len())] as i32,
            client_status: client[rng.gen_range(0..client.len())] as i32,
            resources: Some(Resources {
                cpu_mhz: rng.gen_range(1..500),
                memory_mb: rng.gen_range(1..500),
            }),
            ..Default::default()
        }
    }

    /// Starting from the state's sum and taking out what is accepted over
    /// it or gone gives what visiting every allocation gave, whatever the
    /// statuses, overlaps and ids named gone.
    #[test]
    fn usage_from_the_state_sum_is_usage_from_every_allocation() {
        let mut rng = StdRng::seed_from_u64(52);
        for round in 0..300 {
            let ids: Vec<String> = (0..12).map(|i| format!("a{i}")).collect();
            let mut state = State::default();
            let pick = |share: f64, rng: &mut StdRng| -> Vec<Allocation> {
                let chosen: Vec<&String> = ids.iter().filter(|_| rng.gen_bool(share)).collect();
                chosen.into_iter().map(|id| random_alloc(rng, id)).collect()
            };
            let stored = pick(0.6, &mut rng);
            let entry = PlanApplyEntry {
                allocs: stored,
                ..Default::default()
            };
            let entry = LogEntry {
                msg: Some(Msg::PlanApply(entry)),
            };
            state.apply(1, &entry, &mut Changes::default());
            let mut u = Unapplied::default();
            for batch in 1..=2 {
                let allocs = pick(0.3, &mut rng);
                u.add(
                    batch,
                    &PlanApplyEntry {
                        allocs,
                        ..Default::default()
                    },
                );
            }
            let mut gone: Vec<&str> = ids
                .iter()
                .map(String::as_str)
                .filter(|_| rng.gen_bool(0.2))
                .collect();
            if rng.gen_bool(0.5) {
                gone.push("elsewhere");
            }
            assert_eq!(
                u.usage(&state, "n1", &gone),
                every_allocation(&u, &state, "n1", &gone),
                "round {round}: gone {gone:?}"
            );
        }
    }
}
