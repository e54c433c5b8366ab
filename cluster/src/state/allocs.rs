//! Allocation writes, from plans and from clients' reports, with the tables
//! kept beside `allocs` and each job's summary of its allocations.

use std::sync::Arc;

use imbl::{OrdMap, OrdSet};
use stampede_proto::{AllocClientStatus, Allocation, Job, JobStatus, Resources};

use super::apply::{change_or_insert, set_or_insert};
use super::{AllocCounts, AllocKey, Changes, State, WatchKey};
use crate::model::planted::planted;
use crate::model::{add_resources, alloc_terminal, sub_resources};

pub(super) fn summary_key(a: &Allocation) -> (u64, i32, i32) {
    (a.job_version, a.desired_status, a.client_status)
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
    if let Some(t) = &update.client_times {
        // A time after the allocation's creation, as nodes send them, or
        // one since 1970; 0: not known.
        let created_us = alloc.create_time_ms as i64 * 1000;
        let at = |since_1970: u64, after_create: i64| match (since_1970, after_create) {
            (0, 0) => 0,
            (0, after) => created_us.saturating_add(after).max(0) as u64,
            (at, _) => at,
        };
        let delivered = at(t.delivered_us, t.delivered_after_create_us);
        let started = at(t.started_us, t.started_after_create_us);
        let times = alloc.client_times.get_or_insert_default();
        if delivered != 0 {
            times.delivered_us = delivered;
        }
        if started != 0 {
            times.started_us = started;
        }
    }
    if alloc.running_index == 0 && update.client_status == AllocClientStatus::Running as i32 {
        alloc.running_index = index;
    }
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
        client_times,
        running_index,
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
        client_times: *client_times,
        running_index: *running_index,
    };
    take_report(&mut new, update, at_ms, index);
    new
}

impl State {
    /// Server-side fields come from the plan; client-side fields stay as the
    /// client last reported them.
    pub(super) fn upsert_alloc_from_plan(
        &mut self,
        index: u64,
        alloc: &Allocation,
        changes: &mut Changes,
    ) {
        let old = self.alloc_with_key(&alloc.id);
        // A plan's update or stop of an allocation the state no longer
        // holds (collected since its scheduler read it: it carries the
        // index it was created at) does not bring it back, with the client
        // status the scheduler last saw (running, where it was lost).
        if old.is_none() && alloc.create_index != 0 {
            changes.refused.plan_collected += 1;
            return;
        }
        let mut new = alloc.clone();
        new.alloc_modify_index = index;
        new.client_status = planned_client_status(alloc, old.as_ref().map(|(_, o)| &**o));
        if let Some((_, old)) = &old {
            new.create_index = old.create_index;
            new.create_time_ms = old.create_time_ms;
            new.client_description = old.client_description.clone();
            new.task_states = old.task_states.clone();
            new.healthy = old.healthy;
            new.client_times = old.client_times;
            new.running_index = old.running_index;
            if !alloc_terminal(old) && alloc_terminal(&new) {
                changes.capacity(self.class_of(&new.node_id));
            }
        } else {
            new.create_index = index;
            new.client_times = None;
            new.running_index = 0;
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

    pub(super) fn update_alloc_from_client(
        &mut self,
        index: u64,
        update: &Allocation,
        at_ms: u64,
        changes: &mut Changes,
    ) {
        // Found and replaced in one walk down the table: most writes are
        // clients' reports.
        let Some((id, slot)) = self.allocs.get_key_value_mut(&AllocKey::new(&update.id)) else {
            changes.refused.unknown += 1;
            return;
        };
        // A terminal allocation stays terminal: a report from a client that
        // has not yet heard (a node that was down, its allocations lost and
        // replaced, reporting `running` as it wakes) would make it live
        // beside its replacement, on resources the scheduler counted free.
        // The client learns of the terminal status from its allocation
        // query, and stops the allocation.
        if AllocClientStatus::is_terminal(slot.client_status) && !planted("accept_terminal_report")
        {
            changes.refused.terminal += 1;
            return;
        }
        // Nor does a running allocation go back to pending. A node's call
        // goes out at once and its timeout only stops the wait, so a
        // `pending` report that timed out at the node can still reach the
        // leader after the `running` report the node sent in its place: it
        // would undo it, and the node, which holds `running` delivered,
        // never says it again (allocations left pending for good around a
        // failover under load).
        if slot.client_status == AllocClientStatus::Running as i32
            && update.client_status == AllocClientStatus::Pending as i32
        {
            changes.refused.back_to_pending += 1;
            return;
        }
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
        // A report changes neither the node nor the resources: only
        // whether they are held.
        if was_terminal != alloc_terminal(&new) {
            self.hold(&new, was_terminal);
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
    pub(super) fn put_alloc(
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
        if let Some(o) = old.filter(|o| !alloc_terminal(o)) {
            self.hold(o, false);
        }
        if !alloc_terminal(alloc) {
            self.hold(alloc, true);
        }
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

    /// Adds `alloc`'s resources to its node's usage (`held`), or takes
    /// them out: called as it turns live or terminal, is stored or removed.
    pub(super) fn hold(&mut self, alloc: &Allocation, held: bool) {
        let r = alloc.resources.as_ref();
        let change = |used: &mut Resources| match held {
            true => add_resources(used, r),
            false => sub_resources(used, r),
        };
        change_or_insert(&mut self.node_used, &alloc.node_id, change, || {
            let mut used = Resources::default();
            change(&mut used);
            used
        });
    }

    /// Counts `alloc` in its job's summary.
    pub(super) fn count(&mut self, alloc: &Allocation) {
        let key = summary_key(alloc);
        change_or_insert(
            &mut self.job_summaries,
            &alloc.job_id,
            |counts| *Arc::make_mut(counts).entry(key).or_default() += 1,
            || Arc::new(AllocCounts::from([(key, 1)])),
        );
    }

    /// Takes `alloc` out of its job's summary.
    pub(super) fn uncount(&mut self, alloc: &Allocation) {
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
}
