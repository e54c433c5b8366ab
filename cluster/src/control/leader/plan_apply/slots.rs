//! No place in a job held twice: the plan applier's check that a new
//! allocation does not take an index of its group (a node, for a system
//! job) that a live allocation of the job already holds.
//!
//! A worker schedules on its own copy of the state, which may miss an
//! earlier plan of the same job: one whose entry was still in raft when
//! its evaluation was handed out again (its first worker told the plan
//! failed, or gone). The scheduler then places the job's indexes again,
//! and the node checks pass, since the room is there. Here, on the latest
//! state with what is accepted on top, the second placement is refused,
//! and its worker plans again on a state that holds the first.
//!
//! A canary shares its index with the allocation it may replace, so a
//! canary clashes only with a canary of its own job version.

use std::collections::{HashMap, HashSet};

use stampede_proto::{Allocation, JobType};

use super::super::unapplied::{JobAlloc, Unapplied};
use crate::model::statuses_terminal;
use crate::state::State;

/// A job's place: its group's index, or for a system job its group on one node.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Place {
    Index(String, u32),
    Node(String, String),
}

/// A live allocation holding a place.
#[derive(Debug, Clone)]
struct Holder {
    id: String,
    canary: bool,
    job_version: u64,
}

impl Holder {
    fn of(a: &Allocation) -> Self {
        Self {
            id: a.id.clone(),
            canary: a.canary,
            job_version: a.job_version,
        }
    }
}

/// The places of one plan's job, as the latest state with what is accepted
/// on top holds them, leaving out what the plan stops.
pub struct Places<'a> {
    state: &'a State,
    unapplied: &'a Unapplied,
    job_id: &'a str,
    system: bool,
    stopped: &'a HashSet<&'a str>,
    held: HashMap<Place, Vec<Holder>>,
    /// For a system job, the nodes read so far; otherwise whether the job was read.
    read: HashSet<String>,
}

impl<'a> Places<'a> {
    pub fn new(
        state: &'a State,
        unapplied: &'a Unapplied,
        job_id: &'a str,
        stopped: &'a HashSet<&'a str>,
    ) -> Self {
        let system = state
            .job(job_id)
            .is_some_and(|j| j.r#type == JobType::System as i32);
        Self {
            state,
            unapplied,
            job_id,
            system,
            stopped,
            held: HashMap::new(),
            read: HashSet::new(),
        }
    }

    /// Takes the places of `new`, the placements on node `node_id`, all
    /// or none: `Err` names a place already held and its holder.
    pub fn take(&mut self, node_id: &str, new: &[&Allocation]) -> Result<(), String> {
        if crate::scheduler::place_every_index() {
            return Ok(());
        }
        self.read(node_id);
        let mut taken: Vec<(Place, Holder)> = Vec::new();
        for a in new {
            let place = self.place(node_id, &a.task_group, a.index);
            let holders = self
                .held
                .get(&place)
                .into_iter()
                .flatten()
                .chain(taken.iter().filter(|(p, _)| *p == place).map(|(_, h)| h));
            if let Some(h) = holders.into_iter().find(|h| clashes(a, h)) {
                return Err(format!(
                    "{} {} is held by live allocation {}",
                    self.job_id,
                    describe(&place),
                    h.id
                ));
            }
            taken.push((place, Holder::of(a)));
        }
        for (place, h) in taken {
            self.held.entry(place).or_default().push(h);
        }
        Ok(())
    }

    fn place(&self, node_id: &str, group: &str, index: u32) -> Place {
        match self.system {
            true => Place::Node(group.to_string(), node_id.to_string()),
            false => Place::Index(group.to_string(), index),
        }
    }

    /// Reads the live allocations that may hold a place of the node's
    /// placements: the job's, once; for a system job, the node's.
    fn read(&mut self, node_id: &str) {
        let key = if self.system { node_id } else { "" };
        if !self.read.insert(key.to_string()) {
            return;
        }
        let (state, unapplied, job_id) = (self.state, self.unapplied, self.job_id);
        let stored: Vec<_> = match self.system {
            true => state
                .node_alloc_map(node_id)
                .values()
                .filter(|a| a.job_id == job_id)
                .cloned()
                .collect(),
            false => state.job_allocs(job_id),
        };
        for a in &stored {
            // What an accepted plan made of it since, if anything.
            let desired = unapplied
                .get(&a.node_id, &a.id)
                .map_or(a.desired_status, |u| u.desired_status);
            if !self.stopped.contains(a.id.as_str()) && !statuses_terminal(desired, a.client_status)
            {
                self.hold(&a.node_id, &a.task_group, a.index, Holder::of(a));
            }
        }
        let accepted: Vec<JobAlloc> = match self.system {
            true => unapplied
                .of_node(node_id)
                .filter(|u| u.slot.job_id == job_id)
                .collect(),
            false => unapplied.of_job(job_id).collect(),
        };
        for u in accepted {
            let new = !state.has_alloc(u.id);
            if new
                && !self.stopped.contains(u.id)
                && !statuses_terminal(u.desired_status, u.client_status)
            {
                let holder = Holder {
                    id: u.id.to_string(),
                    canary: u.slot.canary,
                    job_version: u.slot.job_version,
                };
                self.hold(u.node_id, &u.slot.task_group, u.slot.index, holder);
            }
        }
    }

    fn hold(&mut self, node_id: &str, group: &str, index: u32, holder: Holder) {
        let place = self.place(node_id, group, index);
        self.held.entry(place).or_default().push(holder);
    }
}

/// Whether placing `new` where `held` lives would hold its place twice.
fn clashes(new: &Allocation, held: &Holder) -> bool {
    held.id != new.id && (!new.canary || (held.canary && held.job_version == new.job_version))
}

fn describe(place: &Place) -> String {
    match place {
        Place::Index(group, index) => format!("{group}[{index}]"),
        Place::Node(group, node) => format!("{group} on node {node}"),
    }
}
