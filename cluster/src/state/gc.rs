//! Garbage collection over the state, as Nomad's core scheduler does it:
//! what each kind of collection may remove, and the removals themselves.
//!
//! Two questions with two answers. *Which objects are old enough and done*
//! is asked by a worker running a core evaluation, on its snapshot, with an
//! index cutoff per kind that it derived from its thresholds (see
//! [`super::TimeTable`]). *Is it still removable* is asked again when the
//! `gc_*` entry is applied: only from the state, never the clock, so every
//! server removes the same rows, and an entry that arrives after the object
//! came back to life (a stopped job registered again) removes nothing live.

use std::borrow::Borrow;
use std::sync::Arc;

use stampede_proto::{
    Allocation, GcDeploymentsEntry, GcEvalsEntry, GcJobsEntry, GcNodesEntry, Job, JobType,
    NodeStatus,
};

pub use super::changes::KINDS;
use super::{AllocKey, Changes, Id, State, WatchKey};
use crate::model::{alloc_collectable, alloc_terminal, deployment_done, eval_terminal, is_core};

/// Raft index cutoffs, one per kind of collection: an object last changed
/// at or before its kind's cutoff is old enough to collect.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cutoffs {
    pub evals: u64,
    /// Evaluations of batch jobs (Nomad keeps these longer).
    pub batch_evals: u64,
    pub jobs: u64,
    pub deployments: u64,
    pub nodes: u64,
}

impl Cutoffs {
    /// Everything done up to `index` is old enough: a forced collection.
    pub fn all(index: u64) -> Self {
        Self {
            evals: index,
            batch_evals: index,
            jobs: index,
            deployments: index,
            nodes: index,
        }
    }
}

impl State {
    /// A job nothing will run again: stopped, or a batch job whose work is
    /// all done; and in either case with every evaluation, allocation and
    /// deployment of it settled.
    fn job_finished(&self, job: &Job) -> bool {
        let done = job.stop || job.r#type == JobType::Batch as i32;
        done && self
            .job_allocs(&job.id)
            .iter()
            .all(|a| alloc_collectable(a))
            && self.job_evals(&job.id).iter().all(|e| eval_terminal(e))
            && self
                .job_deployments(&job.id)
                .iter()
                .all(|d| deployment_done(d))
    }

    /// The last index at which anything of the job changed.
    fn job_last_change(&self, job: &Job) -> u64 {
        let evals = self
            .job_evals(&job.id)
            .iter()
            .map(|e| e.modify_index)
            .max()
            .unwrap_or(0);
        job.modify_index
            .max(self.job_alloc_index(&job.id))
            .max(evals)
    }

    /// A batch job still running: its finished allocations count towards
    /// its work, so neither they nor their evaluations may go before it does.
    fn batch_job_live(&self, job_id: &str) -> bool {
        self.jobs
            .get(job_id)
            .is_some_and(|j| j.r#type == JobType::Batch as i32 && !j.stop)
    }

    /// Eval GC: terminal evaluations whose allocations are all collectable,
    /// with those allocations, and the collectable allocations of
    /// evaluations that must stay (Nomad's `gcEval`). Batch jobs' are left
    /// to job GC while the job lives.
    pub fn collectable_evals(&self, cutoffs: &Cutoffs) -> GcEvalsEntry {
        let mut out = GcEvalsEntry::default();
        for (job_id, eval_ids) in self.evals_by_job.iter() {
            if self.batch_job_live(job_id) {
                continue;
            }
            let batch = self
                .jobs
                .get(job_id)
                .is_some_and(|j| j.r#type == JobType::Batch as i32);
            let cutoff = if batch {
                cutoffs.batch_evals
            } else {
                cutoffs.evals
            };
            let allocs = self.job_allocs(job_id);
            for eval in eval_ids.iter().filter_map(|id| self.evals.get(id)) {
                if !eval_terminal(eval) || eval.modify_index > cutoff {
                    continue;
                }
                let mut all = true;
                for a in allocs.iter().filter(|a| a.eval_id == eval.id) {
                    if alloc_collectable(a) && a.modify_index <= cutoff {
                        out.alloc_ids.push(a.id.clone());
                    } else {
                        all = false;
                    }
                }
                if all {
                    out.eval_ids.push(eval.id.clone());
                }
            }
        }
        out
    }

    /// Job GC: finished jobs unchanged since the cutoff, to be removed with
    /// everything of theirs.
    pub fn collectable_jobs(&self, cutoff: u64) -> GcJobsEntry {
        GcJobsEntry {
            job_ids: self
                .jobs
                .values()
                .filter(|j| self.job_last_change(j) <= cutoff && self.job_finished(j))
                .map(|j| j.id.clone())
                .collect(),
        }
    }

    /// Deployment GC: finished deployments no allocation refers to.
    pub fn collectable_deployments(&self, cutoff: u64) -> GcDeploymentsEntry {
        GcDeploymentsEntry {
            deployment_ids: self
                .deployments
                .values()
                .filter(|d| d.modify_index <= cutoff && self.deployment_collectable(&d.id))
                .map(|d| d.id.clone())
                .collect(),
        }
    }

    fn deployment_collectable(&self, id: &str) -> bool {
        self.deployments.get(id).is_some_and(|d| {
            deployment_done(d)
                && !self
                    .job_allocs(&d.job_id)
                    .iter()
                    .any(|a| a.deployment_id == d.id)
        })
    }

    /// Node GC: nodes down since the cutoff with nothing live on them.
    pub fn collectable_nodes(&self, cutoff: u64) -> GcNodesEntry {
        GcNodesEntry {
            node_ids: self
                .nodes
                .values()
                .filter(|n| n.modify_index <= cutoff && self.node_collectable(&n.id))
                .map(|n| n.id.to_string())
                .collect(),
        }
    }

    fn node_collectable(&self, id: &str) -> bool {
        self.nodes.get(id).is_some_and(|n| {
            n.status == NodeStatus::Down as i32
                && self.node_allocs(id).iter().all(|a| alloc_terminal(a))
        })
    }

    // ----- applying `gc_*` entries -----

    pub(super) fn gc_evals(&mut self, index: u64, e: &GcEvalsEntry, changes: &mut Changes) {
        for id in &e.eval_ids {
            if self
                .evals
                .get(id.as_str())
                .is_some_and(|e| eval_terminal(e) && !is_core(e))
            {
                self.remove_eval(index, id, changes);
            }
        }
        for id in &e.alloc_ids {
            let removable = self
                .allocs
                .get(&AllocKey::new(id))
                .is_some_and(|a| alloc_collectable(a) && !self.batch_job_live(&a.job_id));
            if removable {
                self.remove_alloc(index, id, changes);
            }
        }
    }

    pub(super) fn gc_jobs(&mut self, index: u64, e: &GcJobsEntry, changes: &mut Changes) {
        for id in &e.job_ids {
            let Some(job) = self.jobs.get(id.as_str()).cloned() else {
                continue;
            };
            if !self.job_finished(&job) {
                continue;
            }
            for a in self.job_allocs(id) {
                self.remove_alloc(index, &a.id, changes);
            }
            for ev in self.job_evals(id) {
                self.remove_eval(index, &ev.id, changes);
            }
            for d in self.job_deployments(id) {
                self.remove_deployment(index, &d.id, changes);
            }
            self.drop_job(id.as_str());
            self.job_alloc_index.remove(id.as_str());
            self.indexes.jobs = index;
            changes.collected.jobs += 1;
            changes.keys.push(WatchKey::Jobs);
            changes.keys.push(WatchKey::Job(id.clone()));
        }
    }

    pub(super) fn gc_deployments(
        &mut self,
        index: u64,
        e: &GcDeploymentsEntry,
        changes: &mut Changes,
    ) {
        for id in &e.deployment_ids {
            if self.deployment_collectable(id) {
                self.remove_deployment(index, id, changes);
            }
        }
    }

    pub(super) fn gc_nodes(&mut self, index: u64, e: &GcNodesEntry, changes: &mut Changes) {
        for id in &e.node_ids {
            if self.node_collectable(id) {
                self.nodes.remove(id.as_str());
                if !self.allocs_by_node.contains_key(id.as_str()) {
                    self.node_alloc_index.remove(id.as_str());
                }
                self.indexes.nodes = index;
                changes.collected.nodes += 1;
                changes.keys.push(WatchKey::Nodes);
            }
        }
    }

    fn remove_eval(&mut self, index: u64, id: &str, changes: &mut Changes) {
        let Some(eval) = self.evals.remove(id) else {
            return;
        };
        remove_from(&mut self.evals_by_job, &eval.job_id, id);
        self.indexes.evals = index;
        changes.collected.evals += 1;
        changes.keys.push(WatchKey::Eval(id.to_string()));
        changes.keys.push(WatchKey::JobEvals(eval.job_id.clone()));
    }

    /// Removes an allocation; its node's and job's allocation indexes move,
    /// so the node's blocking query wakes and its client forgets it.
    fn remove_alloc(&mut self, index: u64, id: &str, changes: &mut Changes) {
        let id = &AllocKey::new(id);
        let Some(alloc) = self.allocs.remove(id) else {
            return;
        };
        self.uncount(&alloc);
        if !alloc_terminal(&alloc) {
            self.hold(&alloc, false);
        }
        let Allocation {
            node_id, job_id, ..
        } = Arc::unwrap_or_clone(alloc);
        if let Some(on_node) = self.allocs_by_node.get_mut(node_id.as_str()) {
            on_node.remove(id);
            if on_node.is_empty() {
                self.allocs_by_node.remove(node_id.as_str());
                self.node_used.remove(node_id.as_str());
            }
        }
        remove_from(&mut self.allocs_by_job, &job_id, id);
        // The indexes move so that blocking queries see the change; they
        // go only with the node or job itself.
        if self.nodes.contains_key(node_id.as_str())
            || self.allocs_by_node.contains_key(node_id.as_str())
        {
            self.node_alloc_index
                .insert(Id::from(node_id.as_str()), index);
        } else {
            self.node_alloc_index.remove(node_id.as_str());
        }
        if self.jobs.contains_key(job_id.as_str())
            || self.allocs_by_job.contains_key(job_id.as_str())
        {
            self.job_alloc_index
                .insert(Id::from(job_id.as_str()), index);
        } else {
            self.job_alloc_index.remove(job_id.as_str());
        }
        self.indexes.allocs = index;
        changes.collected.allocs += 1;
        changes.keys.push(WatchKey::NodeAllocs(node_id));
        changes.keys.push(WatchKey::JobAllocs(job_id));
    }

    fn remove_deployment(&mut self, index: u64, id: &str, changes: &mut Changes) {
        let Some(d) = self.deployments.remove(id) else {
            return;
        };
        remove_from(&mut self.deployments_by_job, &d.job_id, id);
        self.indexes.deployments = index;
        changes.collected.deployments += 1;
        changes.keys.push(WatchKey::Deployments);
        changes.keys.push(WatchKey::Deployment(id.to_string()));
        changes
            .keys
            .push(WatchKey::JobDeployments(d.job_id.clone()));
    }
}

/// Drops `id` from the secondary index set of `key`, and the set once empty,
/// so collected jobs and nodes leave nothing behind.
fn remove_from<K: Ord + Clone + Borrow<Q>, Q: Ord + ?Sized>(
    index: &mut imbl::OrdMap<Id, imbl::OrdSet<K>>,
    key: &str,
    id: &Q,
) {
    if let Some(set) = index.get_mut(key) {
        set.remove(id);
        if set.is_empty() {
            index.remove(key);
        }
    }
}

/// Which raft index this server had applied at which time, so that a
/// threshold in time ("terminal for an hour") becomes an index cutoff, as
/// Nomad's time table does. One mark a second at most, the oldest dropped
/// past [`TimeTable::CAPACITY`]; a server starts with none, so after a
/// restart nothing is old enough until the thresholds have passed again.
#[derive(Debug, Default)]
pub struct TimeTable {
    /// `(unix ms, index)`, both increasing.
    marks: std::collections::VecDeque<(u64, u64)>,
}

impl TimeTable {
    /// Marks kept: a bit over a day at one a second.
    pub const CAPACITY: usize = 100_000;
    const GRANULARITY_MS: u64 = 1_000;

    /// Notes that `index` was applied at `at_ms`.
    pub fn witness(&mut self, index: u64, at_ms: u64) {
        match self.marks.back_mut() {
            Some((t, i)) if at_ms < *t + Self::GRANULARITY_MS => *i = (*i).max(index),
            _ => {
                self.marks.push_back((at_ms, index));
                if self.marks.len() > Self::CAPACITY {
                    self.marks.pop_front();
                }
            }
        }
    }

    /// The newest index applied at or before `at_ms`; 0 if none is known.
    pub fn index_at(&self, at_ms: u64) -> u64 {
        let n = self.marks.partition_point(|(t, _)| *t <= at_ms);
        n.checked_sub(1).map_or(0, |i| self.marks[i].1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stampede_proto::log_entry::Msg;
    use stampede_proto::{
        AllocClientStatus, AllocDesiredStatus, Deployment, DeploymentStatus, EvalStatus,
        EvalUpdateEntry, Evaluation, JobDeregisterEntry, JobRegisterEntry, LogEntry, Node,
        NodeRegisterEntry, NodeStatusEntry, PlanApplyEntry, TaskGroup,
    };

    /// A state built entry by entry, with the next raft index at hand.
    struct Log {
        s: State,
        index: u64,
    }

    impl Log {
        fn new() -> Self {
            let mut log = Log {
                s: State::default(),
                index: 0,
            };
            for n in ["n1", "n2"] {
                log.apply(Msg::NodeRegister(NodeRegisterEntry {
                    ticket: 0,
                    node: Some(Node {
                        id: n.into(),
                        datacenter: "dc1".into(),
                        ..Default::default()
                    }),
                    evals: vec![],
                    secret_hash: stampede_proto::node_secret::hash(n).to_vec(),
                }));
            }
            log
        }

        fn apply(&mut self, msg: Msg) -> Changes {
            self.index += 1;
            let mut c = Changes::default();
            self.s
                .apply(self.index, &LogEntry { msg: Some(msg) }, &mut c);
            c
        }

        fn job(&mut self, id: &str, kind: JobType) {
            self.apply(Msg::JobRegister(JobRegisterEntry {
                ticket: 0,
                job: Some(Job {
                    id: id.into(),
                    r#type: kind as i32,
                    task_groups: vec![TaskGroup {
                        name: "g".into(),
                        count: Some(1),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                eval: Some(eval(&format!("{id}-e1"), id, EvalStatus::Pending)),
            }));
        }

        fn eval(&mut self, id: &str, job: &str, status: EvalStatus) {
            self.apply(Msg::EvalUpdate(EvalUpdateEntry {
                evals: vec![eval(id, job, status)],
            }));
        }

        fn alloc(&mut self, a: Allocation) {
            self.apply(Msg::PlanApply(PlanApplyEntry {
                allocs: vec![a],
                ..Default::default()
            }));
        }

        /// The client reports a new status for an allocation.
        fn client(&mut self, id: &str, status: AllocClientStatus) {
            self.apply(Msg::AllocClientUpdate(
                stampede_proto::AllocClientUpdateEntry {
                    allocs: vec![Allocation {
                        id: id.into(),
                        client_status: status as i32,
                        ..Default::default()
                    }],
                    evals: vec![],
                    updated_at_ms: 0,
                },
            ));
        }

        fn collect(&self, kind: fn(&State, &Cutoffs) -> Vec<String>) -> Vec<String> {
            kind(&self.s, &Cutoffs::all(self.index))
        }
    }

    fn eval(id: &str, job: &str, status: EvalStatus) -> Evaluation {
        Evaluation {
            id: id.into(),
            job_id: job.into(),
            status: status as i32,
            ..Default::default()
        }
    }

    fn alloc(id: &str, job: &str, eval: &str, client: AllocClientStatus) -> Allocation {
        Allocation {
            id: id.into(),
            job_id: job.into(),
            eval_id: eval.into(),
            node_id: "n1".into(),
            desired_status: AllocDesiredStatus::Run as i32,
            client_status: client as i32,
            ..Default::default()
        }
    }

    fn evals(s: &State, c: &Cutoffs) -> Vec<String> {
        s.collectable_evals(c).eval_ids
    }
    fn allocs(s: &State, c: &Cutoffs) -> Vec<String> {
        s.collectable_evals(c).alloc_ids
    }
    fn jobs(s: &State, c: &Cutoffs) -> Vec<String> {
        s.collectable_jobs(c.jobs).job_ids
    }
    fn deployments(s: &State, c: &Cutoffs) -> Vec<String> {
        s.collectable_deployments(c.deployments).deployment_ids
    }
    fn nodes(s: &State, c: &Cutoffs) -> Vec<String> {
        s.collectable_nodes(c.nodes).node_ids
    }

    #[test]
    fn eval_gc_takes_terminal_evaluations_with_their_finished_allocations_only() {
        let mut log = Log::new();
        log.job("web", JobType::Service);
        log.eval("web-e1", "web", EvalStatus::Complete);
        log.alloc(alloc(
            "running",
            "web",
            "web-e1",
            AllocClientStatus::Running,
        ));
        log.eval("web-e2", "web", EvalStatus::Complete);
        let mut stopped = alloc("stopped", "web", "web-e2", AllocClientStatus::Complete);
        stopped.desired_status = AllocDesiredStatus::Stop as i32;
        log.alloc(stopped);
        log.eval("web-e3", "web", EvalStatus::Pending);
        assert_eq!(
            log.collect(evals),
            ["web-e2"],
            "e1 has a running allocation, e3 is pending"
        );
        assert_eq!(log.collect(allocs), ["stopped"]);

        // Not old enough: nothing.
        let young = Cutoffs::all(3);
        assert!(log.s.collectable_evals(&young).eval_ids.is_empty());

        let found = log.s.collectable_evals(&Cutoffs::all(log.index));
        let c = log.apply(Msg::GcEvals(found));
        assert_eq!((c.collected.evals, c.collected.allocs), (1, 1));
        assert!(log.s.eval("web-e2").is_none() && log.s.alloc("stopped").is_none());
        assert!(log.s.alloc("running").is_some() && log.s.eval("web-e1").is_some());
        assert!(
            c.keys.contains(&WatchKey::NodeAllocs("n1".into())),
            "the node's query wakes to forget it"
        );
        assert_eq!(log.s.node_alloc_index("n1"), log.index);
        let on_n1: Vec<String> = log
            .s
            .node_allocs("n1")
            .iter()
            .map(|a| a.id.clone())
            .collect();
        assert_eq!(on_n1, ["running"], "the node no longer lists it");
    }

    #[test]
    fn a_live_batch_jobs_finished_work_stays_until_the_job_is_done() {
        let mut log = Log::new();
        log.job("etl", JobType::Batch);
        log.eval("etl-e1", "etl", EvalStatus::Complete);
        log.alloc(alloc("a1", "etl", "etl-e1", AllocClientStatus::Complete));
        log.alloc(alloc("a2", "etl", "etl-e1", AllocClientStatus::Running));
        assert!(log.collect(evals).is_empty() && log.collect(allocs).is_empty());
        assert!(log.collect(jobs).is_empty(), "a2 still runs");
        // Even a forged entry leaves the live batch job's finished allocation.
        log.apply(Msg::GcEvals(GcEvalsEntry {
            eval_ids: vec![],
            alloc_ids: vec!["a1".into()],
        }));
        assert!(log.s.alloc("a1").is_some());

        log.client("a2", AllocClientStatus::Complete);
        assert_eq!(log.collect(jobs), ["etl"], "all its work is done");
        let c = log.apply(Msg::GcJobs(GcJobsEntry {
            job_ids: vec!["etl".into()],
        }));
        assert_eq!(
            (c.collected.jobs, c.collected.evals, c.collected.allocs),
            (1, 1, 2)
        );
        assert!(log.s.job("etl").is_none() && log.s.job_allocs("etl").is_empty());
        assert_eq!(log.s.objects().evals, 0);
        assert!(
            !log.s.allocs_by_job.contains_key("etl")
                && !log.s.evals_by_job.contains_key("etl")
                && !log.s.job_summaries.contains_key("etl"),
            "no index keeps a collected job's id"
        );
    }

    #[test]
    fn job_gc_takes_stopped_jobs_once_their_allocations_stopped_on_the_client() {
        let mut log = Log::new();
        log.job("web", JobType::Service);
        log.eval("web-e1", "web", EvalStatus::Complete);
        log.alloc(alloc("a1", "web", "web-e1", AllocClientStatus::Running));
        assert!(log.collect(jobs).is_empty(), "a running service job");
        log.apply(Msg::JobDeregister(JobDeregisterEntry {
            ticket: 0,
            job_id: "web".into(),
            purge: false,
            eval: Some(eval("web-e2", "web", EvalStatus::Complete)),
        }));
        let mut stop = alloc("a1", "web", "web-e1", AllocClientStatus::Running);
        stop.desired_status = AllocDesiredStatus::Stop as i32;
        log.alloc(stop);
        assert!(log.collect(jobs).is_empty(), "still running on its client");

        // Registered again before the collection is applied: nothing goes.
        let found = log.s.collectable_jobs(u64::MAX);
        assert!(found.job_ids.is_empty());
        let forged = GcJobsEntry {
            job_ids: vec!["web".into()],
        };
        log.apply(Msg::GcJobs(forged.clone()));
        assert!(log.s.job("web").is_some());

        log.client("a1", AllocClientStatus::Complete);
        assert_eq!(log.collect(jobs), ["web"]);
        log.job("web", JobType::Service);
        log.apply(Msg::GcJobs(forged));
        assert!(
            log.s.job("web").is_some(),
            "a job registered again is live again"
        );
    }

    #[test]
    fn deployment_gc_waits_for_every_allocation_that_names_the_deployment() {
        let mut log = Log::new();
        log.job("web", JobType::Service);
        let d = |status: DeploymentStatus| Deployment {
            id: "d1".into(),
            job_id: "web".into(),
            status: status as i32,
            ..Default::default()
        };
        log.apply(Msg::PlanApply(PlanApplyEntry {
            allocs: vec![Allocation {
                deployment_id: "d1".into(),
                ..alloc("a1", "web", "web-e1", AllocClientStatus::Running)
            }],
            deployment: Some(d(DeploymentStatus::Running)),
            eval_id: "web-e1".into(),
            evals: vec![],
        }));
        assert!(log.collect(deployments).is_empty(), "running");
        log.apply(Msg::DeploymentUpdate(
            stampede_proto::DeploymentUpdateEntry {
                deployment: Some(d(DeploymentStatus::Successful)),
                evals: vec![],
            },
        ));
        assert!(log.collect(deployments).is_empty(), "a1 names it");
        log.eval("web-e1", "web", EvalStatus::Complete);
        log.alloc(Allocation {
            deployment_id: "d1".into(),
            desired_status: AllocDesiredStatus::Stop as i32,
            ..alloc("a1", "web", "web-e1", AllocClientStatus::Running)
        });
        assert!(log.collect(allocs).is_empty(), "stopping, still running");
        log.client("a1", AllocClientStatus::Complete);
        let found = log.s.collectable_evals(&Cutoffs::all(log.index));
        log.apply(Msg::GcEvals(found));
        assert_eq!(log.collect(deployments), ["d1"]);
        let c = log.apply(Msg::GcDeployments(GcDeploymentsEntry {
            deployment_ids: vec!["d1".into()],
        }));
        assert_eq!(c.collected.deployments, 1);
        assert!(log.s.deployment("d1").is_none() && log.s.job_deployments("web").is_empty());
    }

    #[test]
    fn node_gc_takes_down_nodes_with_nothing_live() {
        let mut log = Log::new();
        log.job("web", JobType::Service);
        log.alloc(alloc("a1", "web", "web-e1", AllocClientStatus::Running));
        assert!(log.collect(nodes).is_empty(), "both ready");
        for n in ["n1", "n2"] {
            log.apply(Msg::NodeStatus(NodeStatusEntry {
                node_id: n.into(),
                status: NodeStatus::Down as i32,
                ..Default::default()
            }));
        }
        // n1's allocation is lost (terminal) with it.
        assert_eq!(log.collect(nodes), ["n1", "n2"]);
        assert_eq!(
            log.s.collectable_nodes(log.index - 2).node_ids,
            Vec::<String>::new(),
            "down since after the cutoff"
        );
        let c = log.apply(Msg::GcNodes(GcNodesEntry {
            node_ids: vec!["n1".into(), "n2".into(), "nope".into()],
        }));
        assert_eq!(c.collected.nodes, 2);
        assert_eq!(log.s.node_count(), 0);
        assert_eq!(log.s.node_secret("n1"), None, "a new n1 may register");
        assert_eq!(c.objects.unwrap().nodes, 0);
    }

    #[test]
    fn the_time_table_turns_an_age_into_the_index_applied_by_then() {
        let mut t = TimeTable::default();
        assert_eq!(t.index_at(5_000), 0, "nothing witnessed");
        t.witness(10, 1_000);
        t.witness(12, 1_500); // same second: folded into the first mark
        t.witness(20, 2_000);
        t.witness(30, 4_000);
        assert_eq!(t.index_at(999), 0);
        assert_eq!(t.index_at(1_000), 12);
        assert_eq!(t.index_at(3_999), 20);
        assert_eq!(t.index_at(10_000), 30);
        for i in 0..TimeTable::CAPACITY as u64 + 10 {
            t.witness(100 + i, 10_000 + i * 1_000);
        }
        assert_eq!(t.marks.len(), TimeTable::CAPACITY);
    }
}
