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
}

/// Accepted allocations not yet applied here, by node and id; the latest
/// batch's version of each.
#[derive(Default)]
pub struct Unapplied {
    on_node: HashMap<String, HashMap<String, Accepted>>,
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
                },
            );
        }
    }

    /// Forgets batch `batch`, which the state holds now. An allocation a
    /// later batch changed again stays, as that batch has it.
    pub fn applied(&mut self, batch: u64) {
        self.on_node.retain(|_, allocs| {
            allocs.retain(|_, a| a.batch != batch);
            !allocs.is_empty()
        });
    }

    /// Forgets everything: nothing accepted is in flight any more.
    pub fn clear(&mut self) {
        self.on_node.clear();
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
