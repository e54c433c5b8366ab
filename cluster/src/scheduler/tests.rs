//! The scheduler's cases, each on a small cluster built in memory.
use super::*;
use crate::state::Changes;
use rand::rngs::StdRng;
use rand::SeedableRng;
use stampede_proto::{
    log_entry::Msg, AllocClientUpdateEntry, Constraint, JobDeregisterEntry, JobRegisterEntry,
    LogEntry, Node, NodeRegisterEntry, NodeStatusEntry, PlanApplyEntry,
};

/// A state built the way servers build it: by applying log entries.
#[derive(Default)]
struct Cluster {
    state: State,
    index: u64,
}

impl Cluster {
    fn apply(&mut self, msg: Msg) {
        self.index += 1;
        let entry = LogEntry { msg: Some(msg) };
        self.state
            .apply(self.index, &entry, &mut Changes::default());
    }

    fn add_node(&mut self, node: Node) {
        self.apply(Msg::NodeRegister(NodeRegisterEntry {
            ticket: 0,
            node: Some(node),
            evals: vec![],
            secret_hash: Vec::new(),
        }));
    }

    /// `n` ready nodes in dc1, each with `cpu` MHz and `mem` MB.
    fn add_nodes(&mut self, n: usize, cpu: u64, mem: u64) {
        for i in 0..n {
            self.add_node(node(&format!("n{i:05}"), "dc1", "", cpu, mem));
        }
    }

    fn set_status(&mut self, node_id: &str, status: NodeStatus) {
        self.apply(Msg::NodeStatus(NodeStatusEntry {
            node_id: node_id.into(),
            status: status as i32,
            ..Default::default()
        }));
    }

    fn register(&mut self, job: Job) {
        self.apply(Msg::JobRegister(JobRegisterEntry {
            ticket: 0,
            job: Some(job),
            eval: None,
        }));
    }

    fn deregister(&mut self, job_id: &str, purge: bool) {
        self.apply(Msg::JobDeregister(JobDeregisterEntry {
            ticket: 0,
            job_id: job_id.into(),
            purge,
            eval: None,
        }));
    }

    /// Commits a plan as the plan applier would: all its allocations in one entry.
    fn commit(&mut self, plan: &Plan) {
        let allocs = plan
            .node_update
            .values()
            .chain(plan.node_allocation.values())
            .flat_map(|l| l.allocs.iter().cloned())
            .collect();
        self.apply(Msg::PlanApply(PlanApplyEntry {
            allocs,
            deployment: plan.deployment.clone(),
            eval_id: plan.eval_id.clone(),
            evals: vec![],
        }));
    }

    /// The client reports the allocation running and healthy.
    fn healthy(&mut self, alloc_id: &str) {
        self.apply(Msg::AllocClientUpdate(AllocClientUpdateEntry {
            allocs: vec![Allocation {
                id: alloc_id.into(),
                client_status: AllocClientStatus::Running as i32,
                healthy: Some(true),
                ..Default::default()
            }],
            ..Default::default()
        }));
    }

    /// What the deployment watcher would write now; returns whether it
    /// asked for an evaluation.
    fn watch(&mut self, deployment_id: &str) -> bool {
        let d = self.state.deployment(deployment_id).unwrap();
        let (next, wants_eval) = super::deployment::assess(&self.state, &d, 0);
        self.apply(Msg::DeploymentUpdate(
            stampede_proto::DeploymentUpdateEntry {
                deployment: Some(next),
                evals: vec![],
            },
        ));
        wants_eval
    }

    fn client_status(&mut self, alloc_id: &str, status: AllocClientStatus) {
        self.apply(Msg::AllocClientUpdate(AllocClientUpdateEntry {
            allocs: vec![Allocation {
                id: alloc_id.into(),
                client_status: status as i32,
                ..Default::default()
            }],
            ..Default::default()
        }));
    }

    fn schedule_seeded(&self, job_id: &str, seed: u64) -> Outcome {
        let r#type = self
            .state
            .job(job_id)
            .map_or(JobType::Service as i32, |j| j.r#type);
        let eval = Evaluation {
            id: format!("eval-{}", self.index),
            job_id: job_id.into(),
            r#type,
            priority: 50,
            ..Default::default()
        };
        schedule(&self.state, &eval, &mut StdRng::seed_from_u64(seed))
    }

    fn schedule(&self, job_id: &str) -> Outcome {
        self.schedule_seeded(job_id, 7)
    }

    /// Schedules and commits; returns what was scheduled.
    fn run(&mut self, job_id: &str) -> Outcome {
        let out = self.schedule(job_id);
        self.commit(&out.plan);
        out
    }

    fn live(&self, job_id: &str) -> Vec<Arc<Allocation>> {
        let mut live: Vec<_> = self
            .state
            .job_allocs(job_id)
            .into_iter()
            .filter(|a| !alloc_terminal(a))
            .collect();
        live.sort_by_key(|a| (a.task_group.clone(), a.index));
        live
    }

    /// No node holds more than it has.
    fn assert_within_capacity(&self) {
        for n in self.state.nodes() {
            let used = self.state.node_usage(&n.id);
            let cap = n.resources.unwrap();
            assert!(
                used.cpu_mhz <= cap.cpu_mhz && used.memory_mb <= cap.memory_mb,
                "{} holds {used:?} of {cap:?}",
                n.id
            );
        }
    }
}

fn node(id: &str, dc: &str, class: &str, cpu: u64, mem: u64) -> Node {
    Node {
        id: id.into(),
        datacenter: dc.into(),
        node_class: class.into(),
        resources: Some(Resources {
            cpu_mhz: cpu,
            memory_mb: mem,
        }),
        ..Default::default()
    }
}

fn group(name: &str, count: u32, cpu: u64, mem: u64) -> TaskGroup {
    TaskGroup {
        name: name.into(),
        count: Some(count),
        resources: Some(Resources {
            cpu_mhz: cpu,
            memory_mb: mem,
        }),
        ..Default::default()
    }
}

fn job(id: &str, r#type: JobType, groups: Vec<TaskGroup>) -> Job {
    Job {
        id: id.into(),
        r#type: r#type as i32,
        priority: 60,
        task_groups: groups,
        ..Default::default()
    }
}

fn placed(plan: &Plan) -> Vec<&Allocation> {
    let mut v: Vec<_> = plan
        .node_allocation
        .values()
        .flat_map(|l| &l.allocs)
        .collect();
    v.sort_by_key(|a| (a.task_group.clone(), a.index));
    v
}

fn stopped(plan: &Plan) -> Vec<&Allocation> {
    let mut v: Vec<_> = plan.node_update.values().flat_map(|l| &l.allocs).collect();
    v.sort_by_key(|a| (a.task_group.clone(), a.index));
    v
}

fn indexes<'a>(allocs: impl IntoIterator<Item = &'a Allocation>) -> Vec<u32> {
    let mut v: Vec<u32> = allocs.into_iter().map(|a| a.index).collect();
    v.sort_unstable();
    v
}

#[test]
fn places_every_index_without_overfilling_a_node() {
    let mut c = Cluster::default();
    // 20 nodes with room for 3 each: 50 allocations need real packing.
    c.add_nodes(20, 1000, 1000);
    c.register(job(
        "web",
        JobType::Service,
        vec![group("app", 50, 300, 250)],
    ));
    let out = c.schedule("web");

    let plan = &out.plan;
    assert!(out.failed.is_empty(), "{:?}", out.failed);
    assert_eq!(plan.job_id, "web");
    assert_eq!(plan.priority, 60);
    assert_eq!(plan.snapshot_index, c.state.index());
    assert!(plan.eval_token.is_empty() && plan.deployment.is_none());
    assert!(stopped(plan).is_empty());
    let allocs = placed(plan);
    assert_eq!(indexes(allocs.iter().copied()), (0..50).collect::<Vec<_>>());
    for (node_id, list) in &plan.node_allocation {
        for a in &list.allocs {
            assert_eq!(&a.node_id, node_id);
            assert_eq!(a.name, format!("web.app[{}]", a.index));
            assert_eq!(a.eval_id, plan.eval_id);
            assert_eq!(a.desired_status, AllocDesiredStatus::Run as i32);
            assert_eq!(a.client_status, AllocClientStatus::Pending as i32);
            assert_eq!(a.resources, group("app", 0, 300, 250).resources);
            assert!(uuid::Uuid::parse_str(&a.id).is_ok());
            assert!(a.create_time_ms > 0);
        }
    }

    c.commit(plan);
    assert_eq!(c.live("web").len(), 50);
    c.assert_within_capacity();
    // Nothing left to do: scheduling again changes nothing.
    let again = c.schedule("web");
    assert!(plan_is_empty(&again.plan) && again.failed.is_empty());
}

#[test]
fn a_job_too_big_places_what_fits_and_counts_the_rest() {
    let mut c = Cluster::default();
    c.add_nodes(4, 1000, 1000);
    // Room for 3 per node by cpu: 12 of 20 fit.
    c.register(job(
        "big",
        JobType::Service,
        vec![group("app", 20, 300, 100)],
    ));
    let out = c.run("big");
    assert_eq!(placed(&out.plan).len(), 12);
    assert_eq!(out.failed, BTreeMap::from([("app".to_string(), 8)]));
    c.assert_within_capacity();

    // The next evaluation places nothing more and still reports the 8.
    let again = c.schedule("big");
    assert!(plan_is_empty(&again.plan));
    assert_eq!(again.failed["app"], 8);
}

#[test]
fn a_group_registered_without_a_count_runs_one_allocation() {
    use crate::raft::client_write::{prepare, ClientWrite, Quotas};
    use stampede_proto::JobRegisterRequest;
    let mut c = Cluster::default();
    c.add_nodes(2, 1000, 1000);
    let mut unset = group("app", 0, 100, 100);
    unset.count = None;
    let mut zero = group("idle", 0, 100, 100);
    zero.count = Some(0);
    let write = ClientWrite::JobRegister(JobRegisterRequest {
        job: Some(job("web", JobType::Service, vec![unset.clone(), zero])),
    });
    let prepared = prepare(&write, 0, &c.state, &Quotas::NONE).unwrap();
    c.apply(prepared.entry.msg.unwrap());
    let out = c.schedule("web");
    let groups: Vec<&str> = placed(&out.plan)
        .iter()
        .map(|a| a.task_group.as_str())
        .collect();
    assert_eq!(
        groups,
        ["app"],
        "one of app, none of the group scaled to zero"
    );

    // An entry written before `count` had presence stored a count of 0 as
    // an absent field: replayed, it still means 0.
    c.register(job("old", JobType::Service, vec![unset]));
    assert!(placed(&c.schedule("old").plan).is_empty());
}

#[test]
fn scale_down_stops_the_highest_indexes() {
    let mut c = Cluster::default();
    c.add_nodes(3, 4000, 4000);
    c.register(job(
        "web",
        JobType::Service,
        vec![group("app", 5, 100, 100)],
    ));
    c.run("web");
    c.register(job(
        "web",
        JobType::Service,
        vec![group("app", 3, 100, 100)],
    ));
    let out = c.run("web");

    let scaled: Vec<&Allocation> = stopped(&out.plan)
        .into_iter()
        .filter(|a| a.desired_description == "scaled down")
        .collect();
    assert_eq!(indexes(scaled), vec![3, 4]);
    // A count change is a new job version but not a new group spec: the
    // kept allocations keep running, nothing is placed.
    assert_eq!(stopped(&out.plan).len(), 2);
    assert!(placed(&out.plan).is_empty());
    let live = c.live("web");
    assert_eq!(indexes(live.iter().map(|a| a.as_ref())), vec![0, 1, 2]);
    assert!(live.iter().all(|a| a.job_version == 0));
}

#[test]
fn a_deregistered_job_stops_everything() {
    for purge in [false, true] {
        let mut c = Cluster::default();
        c.add_nodes(3, 4000, 4000);
        c.register(job(
            "web",
            JobType::Service,
            vec![group("a", 4, 100, 100), group("b", 2, 100, 100)],
        ));
        c.run("web");
        c.deregister("web", purge);
        let out = c.run("web");

        assert!(placed(&out.plan).is_empty());
        let stops = stopped(&out.plan);
        assert_eq!(stops.len(), 6);
        assert!(stops
            .iter()
            .all(|a| a.desired_status == AllocDesiredStatus::Stop as i32
                && a.desired_description == "job deregistered"));
        // A purged job is gone: the plan takes the evaluation's priority.
        assert_eq!(out.plan.priority, if purge { 50 } else { 60 });
        assert!(c.live("web").is_empty());
        assert!(plan_is_empty(&c.schedule("web").plan));
    }
}

#[test]
fn a_new_version_replaces_each_allocation_at_its_index() {
    let mut c = Cluster::default();
    c.add_nodes(4, 4000, 4000);
    c.register(job(
        "web",
        JobType::Service,
        vec![group("app", 4, 100, 100)],
    ));
    c.run("web");
    let old: Vec<String> = c.live("web").iter().map(|a| a.id.clone()).collect();
    c.register(job(
        "web",
        JobType::Service,
        vec![group("app", 4, 200, 100)],
    ));
    let out = c.run("web");

    let stops = stopped(&out.plan);
    assert_eq!(indexes(stops.iter().copied()), vec![0, 1, 2, 3]);
    assert!(stops
        .iter()
        .all(|a| a.desired_description == "replaced by job version 1"));
    let new = placed(&out.plan);
    assert_eq!(indexes(new.iter().copied()), vec![0, 1, 2, 3]);
    assert!(new
        .iter()
        .all(|a| a.job_version == 1 && a.resources.unwrap().cpu_mhz == 200));
    let live = c.live("web");
    assert_eq!(live.len(), 4);
    assert!(live
        .iter()
        .all(|a| a.job_version == 1 && !old.contains(&a.id)));
}

fn rolling(count: u32, max_parallel: u32, canary: u32, cpu: u64) -> Job {
    let mut g = group("app", count, cpu, 100);
    g.update = Some(UpdateStrategy {
        max_parallel,
        canary,
        auto_promote: true,
        ..Default::default()
    });
    job("web", JobType::Service, vec![g])
}

#[test]
fn a_rolling_update_replaces_max_parallel_per_round() {
    let mut c = Cluster::default();
    c.add_nodes(10, 8000, 8000);
    c.register(rolling(20, 5, 0, 100));
    let first = c.run("web");
    let d0 = first
        .plan
        .deployment
        .clone()
        .expect("a first version deploys too");
    assert_eq!(placed(&first.plan).len(), 20, "new work is placed at once");
    for a in c.live("web") {
        c.healthy(&a.id);
    }
    c.watch(&d0.id);
    assert_eq!(
        c.state.deployment(&d0.id).unwrap().status,
        DeploymentStatus::Successful as i32
    );

    c.register(rolling(20, 5, 0, 200));
    let mut rounds = Vec::new();
    let mut d1 = None;
    for _ in 0..10 {
        let out = c.run("web");
        if let Some(d) = &out.plan.deployment {
            d1 = Some(d.id.clone());
        }
        let d1 = d1.clone().expect("the new version has a deployment");
        assert!(placed(&out.plan).iter().all(|a| a.deployment_id == d1));
        assert_eq!(placed(&out.plan).len(), stopped(&out.plan).len());
        if placed(&out.plan).is_empty() {
            break;
        }
        rounds.push(placed(&out.plan).len());
        assert!(
            c.run("web").plan.node_allocation.is_empty(),
            "nothing more until healthy"
        );
        for a in placed(&out.plan) {
            c.healthy(&a.id);
        }
        let status = c.state.deployment(&d1).unwrap().status;
        assert_eq!(status, DeploymentStatus::Running as i32);
        c.watch(&d1);
    }
    assert_eq!(rounds, vec![5, 5, 5, 5]);
    let d1 = c.state.deployment(&d1.unwrap()).unwrap();
    assert_eq!(d1.status, DeploymentStatus::Successful as i32);
    assert_eq!(d1.task_groups["app"].healthy, 20);
    assert!(c.live("web").iter().all(|a| a.job_version == 1));
}

#[test]
fn a_deployment_fails_on_an_unhealthy_allocation_or_a_missed_deadline() {
    let mut c = Cluster::default();
    c.add_nodes(4, 8000, 8000);
    let mut j = rolling(2, 1, 0, 100);
    j.task_groups[0]
        .update
        .as_mut()
        .unwrap()
        .progress_deadline_ms = 60_000;
    c.register(j.clone());
    let d = c.run("web").plan.deployment.unwrap();
    let assess = |c: &Cluster, at: u64| {
        let d = c.state.deployment(&d.id).unwrap();
        super::deployment::assess(&c.state, &d, at).0
    };
    let now = now_ms();
    assert_eq!(assess(&c, now).status, DeploymentStatus::Running as i32);
    let late = assess(&c, now + 61_000);
    assert_eq!(late.status, DeploymentStatus::Failed as i32);
    assert_eq!(late.status_description, "progress deadline reached");

    let a = c.live("web")[0].id.clone();
    c.apply(Msg::AllocClientUpdate(AllocClientUpdateEntry {
        allocs: vec![Allocation {
            id: a,
            client_status: AllocClientStatus::Running as i32,
            healthy: Some(false),
            ..Default::default()
        }],
        ..Default::default()
    }));
    let unhealthy = assess(&c, now);
    assert_eq!(unhealthy.status, DeploymentStatus::Failed as i32);
    assert_eq!(unhealthy.task_groups["app"].unhealthy, 1);
}

#[test]
fn canaries_run_beside_the_old_version_until_promoted() {
    let mut c = Cluster::default();
    c.add_nodes(4, 8000, 8000);
    c.register(rolling(4, 2, 1, 100));
    let d0 = c.run("web").plan.deployment.unwrap();
    for a in c.live("web") {
        c.healthy(&a.id);
    }
    c.watch(&d0.id);

    c.register(rolling(4, 2, 1, 200));
    let out = c.run("web");
    let d1 = out.plan.deployment.clone().unwrap();
    let canaries = placed(&out.plan);
    assert_eq!(canaries.len(), 1);
    assert!(canaries[0].canary && stopped(&out.plan).is_empty());
    assert_eq!(c.live("web").len(), 5, "the canary runs beside all four");
    let canary = canaries[0].id.clone();
    assert!(c.run("web").plan.node_allocation.is_empty());
    assert!(
        !c.watch(&d1.id),
        "nothing to do before the canary is healthy"
    );

    c.healthy(&canary);
    assert!(c.watch(&d1.id), "a healthy canary is promoted");
    assert!(c.state.deployment(&d1.id).unwrap().task_groups["app"].promoted);
    let out = c.run("web");
    // The canary's index is taken over, two more are replaced.
    assert_eq!(stopped(&out.plan).len(), 3);
    assert_eq!(placed(&out.plan).len(), 2);
}

/// A first version of `rolling(count, 2, 0, 100)` deployed and healthy;
/// returns its deployment's id.
fn deployed(c: &mut Cluster, count: u32) -> String {
    c.add_nodes(4, 8000, 8000);
    c.register(rolling(count, 2, 0, 100));
    let d0 = c.run("web").plan.deployment.unwrap().id;
    for a in c.live("web") {
        c.healthy(&a.id);
    }
    c.watch(&d0);
    let d = c.state.deployment(&d0).unwrap();
    assert_eq!(d.status, DeploymentStatus::Successful as i32);
    d0
}

/// The plan's allocations that the state holds already: in-place updates.
fn updated<'a>(c: &Cluster, plan: &'a Plan) -> Vec<&'a Allocation> {
    placed(plan)
        .into_iter()
        .filter(|a| c.state.has_alloc(&a.id))
        .collect()
}

#[test]
fn a_scale_up_moves_the_kept_allocations_onto_the_new_deployment() {
    let mut c = Cluster::default();
    deployed(&mut c, 3);
    let kept: Vec<String> = c.live("web").iter().map(|a| a.id.clone()).collect();
    c.apply(Msg::AllocClientUpdate(AllocClientUpdateEntry {
        allocs: vec![Allocation {
            id: kept[0].clone(),
            client_status: AllocClientStatus::Running as i32,
            client_description: "serving".into(),
            healthy: Some(true),
            ..Default::default()
        }],
        ..Default::default()
    }));

    c.register(rolling(5, 2, 0, 100));
    let out = c.schedule("web");
    let d1 = out.plan.deployment.clone().expect("a count change deploys");
    assert_eq!(d1.task_groups["app"].desired_total, 5);
    assert!(stopped(&out.plan).is_empty(), "nothing is replaced");
    let moved = updated(&c, &out.plan);
    assert_eq!(indexes(moved.iter().copied()), vec![0, 1, 2]);
    assert!(moved.iter().all(|a| kept.contains(&a.id)));
    let new: Vec<&Allocation> = placed(&out.plan)
        .into_iter()
        .filter(|a| !kept.contains(&a.id))
        .collect();
    assert_eq!(indexes(new), vec![3, 4]);
    assert!(placed(&out.plan)
        .iter()
        .all(|a| a.job_version == 1 && a.deployment_id == d1.id));
    c.commit(&out.plan);

    // Kept healthy, still counted as healthy; the job's summary counts
    // all five under the new version.
    let live = c.live("web");
    assert_eq!(live.len(), 5);
    assert!(live
        .iter()
        .filter(|a| kept.contains(&a.id))
        .all(|a| a.healthy == Some(true) && a.job_version == 1));
    let first = c.state.alloc(&kept[0]).unwrap();
    assert_eq!(
        first.client_description, "serving",
        "the client's report stays"
    );
    let summary = c.state.job_summary("web");
    assert!(summary.keys().all(|(version, _, _)| *version == 1));
    assert_eq!(summary.values().sum::<u64>(), 5);
    assert!(!c.watch(&d1.id));
    let d = c.state.deployment(&d1.id).unwrap();
    assert_eq!(
        (d.task_groups["app"].placed, d.task_groups["app"].healthy),
        (5, 3)
    );
    assert_eq!(d.status, DeploymentStatus::Running as i32);

    for a in c.live("web") {
        if !kept.contains(&a.id) {
            c.healthy(&a.id);
        }
    }
    c.watch(&d1.id);
    let d = c.state.deployment(&d1.id).unwrap();
    assert_eq!(d.status, DeploymentStatus::Successful as i32, "{d:?}");
    assert_eq!(d.task_groups["app"].healthy, 5);
    assert!(
        scheduler_is_done(&c),
        "the moved allocations are not moved again"
    );
}

/// Whether scheduling the job now changes nothing.
fn scheduler_is_done(c: &Cluster) -> bool {
    plan_is_empty(&c.schedule("web").plan)
}

#[test]
fn a_scale_down_under_an_update_block_deploys_and_ends_at_once() {
    let mut c = Cluster::default();
    let d0 = deployed(&mut c, 5);
    c.register(rolling(3, 2, 0, 100));
    let out = c.run("web");
    let d1 = out.plan.deployment.clone().expect("a count change deploys");
    assert_eq!(indexes(stopped(&out.plan)), vec![3, 4]);
    assert_eq!(indexes(placed(&out.plan)), vec![0, 1, 2], "all in place");
    c.watch(&d1.id);
    let d = c.state.deployment(&d1.id).unwrap();
    assert_eq!(d.status, DeploymentStatus::Successful as i32, "{d:?}");
    assert_eq!(d.task_groups["app"].healthy, 3);
    assert_eq!(
        c.state.deployment(&d0).unwrap().status,
        DeploymentStatus::Successful as i32,
        "the finished deployment stays as it ended"
    );
    assert!(c.live("web").iter().all(|a| a.job_version == 1));
    assert!(scheduler_is_done(&c));
}

#[test]
fn a_kept_allocation_not_yet_healthy_is_awaited_by_the_new_deployment() {
    let mut c = Cluster::default();
    c.add_nodes(4, 8000, 8000);
    c.register(rolling(3, 2, 0, 100));
    let d0 = c.run("web").plan.deployment.unwrap().id;
    let live = c.live("web");
    let late = live[2].id.clone();
    c.healthy(&live[0].id);
    c.healthy(&live[1].id);

    c.register(rolling(4, 2, 0, 100));
    let out = c.run("web");
    let d1 = out.plan.deployment.clone().unwrap().id;
    assert_eq!(
        c.state.deployment(&d0).unwrap().status,
        DeploymentStatus::Cancelled as i32,
        "superseded by the new version"
    );
    let new: Vec<String> = placed(&out.plan)
        .iter()
        .filter(|a| a.index == 3)
        .map(|a| a.id.clone())
        .collect();
    c.healthy(&new[0]);
    c.watch(&d1);
    let d = c.state.deployment(&d1).unwrap();
    assert_eq!(d.status, DeploymentStatus::Running as i32);
    assert_eq!(d.task_groups["app"].healthy, 3);

    c.healthy(&late);
    c.watch(&d1);
    let d = c.state.deployment(&d1).unwrap();
    assert_eq!(d.status, DeploymentStatus::Successful as i32, "{d:?}");
}

#[test]
fn a_destructive_change_with_a_new_count_still_rolls_by_max_parallel() {
    let mut c = Cluster::default();
    deployed(&mut c, 3);
    c.register(rolling(5, 2, 0, 200));
    let out = c.schedule("web");
    // Two missing indexes at once, two of the three outdated replaced.
    assert_eq!(indexes(stopped(&out.plan)), vec![0, 1]);
    assert_eq!(indexes(placed(&out.plan)), vec![0, 1, 3, 4]);
    assert!(updated(&c, &out.plan).is_empty());
}

#[test]
fn lost_allocations_are_replaced_on_other_nodes() {
    let mut c = Cluster::default();
    c.add_nodes(3, 4000, 4000);
    c.register(job(
        "web",
        JobType::Service,
        vec![group("app", 9, 100, 100)],
    ));
    c.run("web");
    let on_n0 = indexes(
        c.live("web")
            .iter()
            .filter(|a| a.node_id == "n00000")
            .map(|a| a.as_ref()),
    );
    assert!(
        !on_n0.is_empty(),
        "the test needs allocations on the node that goes down"
    );
    c.set_status("n00000", NodeStatus::Down);
    let out = c.run("web");

    assert!(
        stopped(&out.plan).is_empty(),
        "lost allocations are already terminal"
    );
    let new = placed(&out.plan);
    assert_eq!(indexes(new.iter().copied()), on_n0);
    assert!(new.iter().all(|a| a.node_id != "n00000"));
    assert_eq!(
        indexes(c.live("web").iter().map(|a| a.as_ref())),
        (0..9).collect::<Vec<_>>()
    );
}

#[test]
fn datacenter_and_node_class_constraints_are_honoured() {
    let mut c = Cluster::default();
    for (id, dc, class) in [
        ("a", "dc1", "gpu"),
        ("b", "dc1", "cpu"),
        ("c", "dc2", "gpu"),
        ("d", "dc3", "gpu"),
        ("e", "dc1", ""),
    ] {
        c.add_node(node(id, dc, class, 4000, 4000));
    }
    let mut gpu = group("gpu", 6, 100, 100);
    gpu.constraints = vec![Constraint {
        target: ConstraintTarget::NodeClass as i32,
        operand: ConstraintOperand::Equal as i32,
        value: "gpu".into(),
    }];
    let mut not_dc1 = group("elsewhere", 6, 100, 100);
    not_dc1.constraints = vec![Constraint {
        target: ConstraintTarget::Datacenter as i32,
        operand: ConstraintOperand::NotEqual as i32,
        value: "dc1".into(),
    }];
    let mut j = job("web", JobType::Service, vec![gpu, not_dc1]);
    j.datacenters = vec!["dc1".into(), "dc2".into()];
    c.register(j);
    let out = c.schedule("web");

    for a in placed(&out.plan) {
        let want: &[&str] = if a.task_group == "gpu" {
            &["a", "c"]
        } else {
            &["c"]
        };
        assert!(
            want.contains(&a.node_id.as_str()),
            "{} placed on {}",
            a.name,
            a.node_id
        );
    }
    assert_eq!(placed(&out.plan).len(), 12);

    // A group whose constraints match no node cannot be placed at all.
    let mut none = group("none", 2, 100, 100);
    none.constraints = vec![Constraint {
        target: ConstraintTarget::NodeClass as i32,
        operand: ConstraintOperand::Equal as i32,
        value: "tpu".into(),
    }];
    c.register(job("tpu", JobType::Service, vec![none]));
    let out = c.schedule("tpu");
    assert!(placed(&out.plan).is_empty());
    assert_eq!(out.failed["none"], 2);
}

#[test]
fn feasibility_rules() {
    let n = NodeRow::new(&node("a", "dc1", "gpu", 1, 1), None);
    let mut j = job("j", JobType::Service, vec![]);
    let tg = group("g", 1, 1, 1);
    assert!(feasible(
        &NodeRow {
            status: NodeStatus::Ready as i32,
            ..n.clone()
        },
        &j,
        &tg
    ));
    for bad in [
        NodeStatus::Down,
        NodeStatus::Initializing,
        NodeStatus::Unspecified,
    ] {
        assert!(!feasible(
            &NodeRow {
                status: bad as i32,
                ..n.clone()
            },
            &j,
            &tg
        ));
    }
    let ready = NodeRow {
        status: NodeStatus::Ready as i32,
        ..n
    };
    assert!(!feasible(
        &NodeRow {
            ineligible: true,
            ..ready.clone()
        },
        &j,
        &tg
    ));
    j.datacenters = vec!["dc2".into()];
    assert!(!feasible(&ready, &j, &tg));
    j.datacenters.push("dc1".into());
    assert!(feasible(&ready, &j, &tg));
    let unknown = TaskGroup {
        constraints: vec![Constraint::default()],
        ..tg
    };
    assert!(
        !feasible(&ready, &j, &unknown),
        "an unknown constraint does not hold"
    );
}

#[test]
fn ineligible_and_down_nodes_get_nothing() {
    let mut c = Cluster::default();
    c.add_node(node("ok", "dc1", "", 4000, 4000));
    c.add_node(Node {
        ineligible: true,
        ..node("ineligible", "dc1", "", 4000, 4000)
    });
    c.add_node(node("down", "dc1", "", 4000, 4000));
    c.set_status("down", NodeStatus::Down);
    c.register(job(
        "web",
        JobType::Service,
        vec![group("app", 10, 100, 100)],
    ));
    let out = c.schedule("web");
    assert_eq!(placed(&out.plan).len(), 10);
    assert!(placed(&out.plan).iter().all(|a| a.node_id == "ok"));

    c.register(job(
        "sys",
        JobType::System,
        vec![group("agent", 1, 100, 100)],
    ));
    let out = c.schedule("sys");
    assert_eq!(
        out.plan.node_allocation.keys().collect::<Vec<_>>(),
        vec!["ok"]
    );
}

#[test]
fn fits_checks_cpu_and_memory() {
    let n = NodeRow::new(&node("a", "dc1", "", 1000, 500), None);
    let used = Resources {
        cpu_mhz: 600,
        memory_mb: 100,
    };
    assert!(fits(
        &n,
        &used,
        &Resources {
            cpu_mhz: 400,
            memory_mb: 400
        }
    ));
    assert!(!fits(
        &n,
        &used,
        &Resources {
            cpu_mhz: 401,
            memory_mb: 1
        }
    ));
    assert!(!fits(
        &n,
        &used,
        &Resources {
            cpu_mhz: 1,
            memory_mb: 401
        }
    ));
}

#[test]
fn system_job_runs_once_per_feasible_node() {
    let mut c = Cluster::default();
    c.add_nodes(4, 1000, 1000);
    c.add_node(node("other-dc", "dc2", "", 1000, 1000));
    let mut j = job(
        "agent",
        JobType::System,
        vec![group("a", 0, 100, 100), group("b", 7, 100, 100)],
    );
    j.datacenters = vec!["dc1".into()];
    c.register(j);
    let out = c.run("agent");
    assert_eq!(
        placed(&out.plan).len(),
        8,
        "count is ignored: one per group per node"
    );
    assert!(!out.plan.node_allocation.contains_key("other-dc"));
    for n in ["n00000", "n00001", "n00002", "n00003"] {
        let mut groups: Vec<String> = c
            .state
            .node_allocs(n)
            .iter()
            .map(|a| a.task_group.clone())
            .collect();
        groups.sort();
        assert_eq!(groups, ["a", "b"], "{n}");
    }
    // Re-running on the applied state places nothing twice.
    assert!(plan_is_empty(&c.schedule("agent").plan));

    // A new node gets its own; a node made ineligible loses them.
    c.add_node(node("n00004", "dc1", "", 1000, 1000));
    let mut n1 = c.state.node("n00001").unwrap().to_proto();
    n1.ineligible = true;
    c.add_node(n1);
    let out = c.run("agent");
    let new = placed(&out.plan);
    assert_eq!(new.len(), 2);
    assert!(new.iter().all(|a| a.node_id == "n00004"));
    let stops = stopped(&out.plan);
    assert_eq!(stops.len(), 2);
    assert!(stops.iter().all(|a| a.node_id == "n00001"));
    assert_eq!(c.live("agent").len(), 8);
    assert!(plan_is_empty(&c.schedule("agent").plan));
}

#[test]
fn system_job_counts_nodes_without_room_as_failed() {
    let mut c = Cluster::default();
    c.add_node(node("small", "dc1", "", 50, 1000));
    c.add_node(node("big", "dc1", "", 1000, 1000));
    c.register(job("agent", JobType::System, vec![group("a", 1, 100, 100)]));
    let out = c.schedule("agent");
    assert_eq!(
        out.plan.node_allocation.keys().collect::<Vec<_>>(),
        vec!["big"]
    );
    assert_eq!(out.failed["a"], 1);
}

#[test]
fn batch_does_not_rerun_completed_work() {
    let mut c = Cluster::default();
    c.add_nodes(2, 4000, 4000);
    c.register(job("etl", JobType::Batch, vec![group("step", 3, 100, 100)]));
    c.run("etl");
    let live = c.live("etl");
    c.client_status(&live[0].id, AllocClientStatus::Complete);
    c.client_status(&live[1].id, AllocClientStatus::Failed);
    let out = c.schedule("etl");
    assert!(stopped(&out.plan).is_empty());
    assert_eq!(
        indexes(placed(&out.plan)),
        vec![1],
        "only the failed index runs again"
    );

    // A service job's completed allocation is replaced: services run forever.
    c.register(job(
        "svc",
        JobType::Service,
        vec![group("app", 1, 100, 100)],
    ));
    c.run("svc");
    let id = c.live("svc")[0].id.clone();
    c.client_status(&id, AllocClientStatus::Complete);
    assert_eq!(indexes(placed(&c.schedule("svc").plan)), vec![0]);
}

#[test]
fn removed_groups_and_duplicates_are_stopped() {
    let mut c = Cluster::default();
    c.add_nodes(2, 4000, 4000);
    c.register(job(
        "web",
        JobType::Service,
        vec![group("a", 2, 100, 100), group("b", 1, 100, 100)],
    ));
    c.run("web");
    // A second copy of index 0, as a stale plan could have left.
    let dup = Allocation {
        id: "dup".into(),
        // Placed, as a plan places: with no create index of its own yet.
        create_index: 0,
        ..Allocation::clone(&c.live("web")[0])
    };
    c.apply(Msg::PlanApply(PlanApplyEntry {
        allocs: vec![dup],
        ..Default::default()
    }));
    assert_eq!(c.live("web").len(), 4);
    // Same version: only the duplicate goes, and the older copy stays.
    let out = c.schedule("web");
    let stops = stopped(&out.plan);
    assert_eq!(stops.len(), 1);
    assert_eq!(stops[0].id, "dup");
    assert!(placed(&out.plan).is_empty());

    // Dropping group b stops its allocation.
    c.register(job("web", JobType::Service, vec![group("a", 2, 100, 100)]));
    let out = c.schedule("web");
    assert!(stopped(&out.plan)
        .iter()
        .any(|a| a.task_group == "b" && a.desired_description == "task group removed from job"));
    assert!(placed(&out.plan).iter().all(|a| a.task_group == "a"));
}

#[test]
fn bin_packing_prefers_the_fuller_candidate() {
    let mut c = Cluster::default();
    c.add_nodes(2, 1000, 1000);
    c.register(job(
        "other",
        JobType::Service,
        vec![group("x", 1, 500, 500)],
    ));
    let busy = c
        .run("other")
        .plan
        .node_allocation
        .keys()
        .next()
        .unwrap()
        .clone();
    // With two nodes both are candidates whatever the shuffle.
    for seed in 0..10 {
        c.register(job(
            "web",
            JobType::Service,
            vec![group("app", 1, 100, 100)],
        ));
        let out = c.schedule_seeded("web", seed);
        assert_eq!(
            out.plan.node_allocation.keys().collect::<Vec<_>>(),
            vec![&busy]
        );
    }
}

#[test]
fn two_choices_spread_a_job_when_there_is_room() {
    let mut c = Cluster::default();
    c.add_nodes(40, 100_000, 100_000);
    c.register(job(
        "web",
        JobType::Service,
        vec![group("app", 40, 100, 100)],
    ));
    let out = c.schedule("web");
    let used = out.plan.node_allocation.len();
    assert!(used > 10, "40 allocations on only {used} of 40 nodes");
}

#[test]
fn a_seeded_rng_gives_the_same_placements() {
    let mut c = Cluster::default();
    c.add_nodes(30, 1000, 1000);
    c.register(job(
        "web",
        JobType::Service,
        vec![group("app", 50, 100, 300)],
    ));
    let layout = |seed| {
        let out = c.schedule_seeded("web", seed);
        placed(&out.plan)
            .iter()
            .map(|a| (a.index, a.node_id.clone()))
            .collect::<BTreeMap<_, _>>()
    };
    assert_eq!(layout(42), layout(42));
    assert_eq!(layout(42).len(), 50);
}

#[test]
fn ten_thousand_allocations_on_ten_thousand_nodes() {
    let mut c = Cluster::default();
    c.add_nodes(10_000, 1000, 1000);
    // Two fit per node: half the cluster's room.
    c.register(job(
        "huge",
        JobType::Service,
        vec![group("app", 10_000, 400, 400)],
    ));
    let out = c.run("huge");
    assert!(out.failed.is_empty());
    assert_eq!(c.live("huge").len(), 10_000);
    c.assert_within_capacity();
}
