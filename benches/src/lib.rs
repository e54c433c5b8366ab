//! Fixtures shared by the benchmarks in `benches/`.
//!
//! Everything here is built the way a server builds it: states by applying
//! raft entries with [`State::apply`], plans by running the real scheduler.
//! So a bench measures the shapes the cluster really handles, not hand-made
//! approximations of them.

use cluster::scheduler;
use cluster::state::{Changes, State};
use rand::rngs::StdRng;
use rand::SeedableRng;
use stampede_proto::{
    log_entry::Msg, AllocClientStatus, AllocDesiredStatus, Allocation, EvalStatus, Evaluation, Job,
    JobRegisterEntry, JobType, LogEntry, Node, NodeRegisterEntry, NodeStatus, Plan, PlanApplyEntry,
    Resources, TaskGroup,
};

/// Capacity of every bench node: a mid-sized client (4 GHz, 8 GiB).
pub const NODE_RESOURCES: Resources = Resources {
    cpu_mhz: 4000,
    memory_mb: 8192,
};

/// What each allocation of a bench job asks for: up to 40 fit on one node,
/// so placement never runs out of room and measures the common case.
pub const ALLOC_RESOURCES: Resources = Resources {
    cpu_mhz: 100,
    memory_mb: 128,
};

/// Node ids sort in numeric order (`node-00042`), as state tables iterate them.
pub fn node_id(i: usize) -> String {
    format!("node-{i:05}")
}

/// A ready client node, as nodesim registers it.
pub fn node(i: usize) -> Node {
    Node {
        id: node_id(i),
        name: node_id(i),
        datacenter: "dc1".into(),
        node_class: "standard".into(),
        resources: Some(NODE_RESOURCES),
        status: NodeStatus::Ready as i32,
        ..Default::default()
    }
}

/// The raft entry of a node registration (no system jobs, so no evaluations).
pub fn node_register(i: usize) -> LogEntry {
    LogEntry {
        msg: Some(Msg::NodeRegister(NodeRegisterEntry {
            ticket: 0,
            node: Some(node(i)),
            evals: vec![],
            secret_hash: Vec::new(),
        })),
    }
}

/// A service job with one task group of `count` allocations and no update
/// block: placement puts all of them at once.
pub fn service_job(id: &str, count: u32) -> Job {
    Job {
        id: id.into(),
        r#type: JobType::Service as i32,
        priority: 50,
        datacenters: vec!["dc1".into()],
        task_groups: vec![TaskGroup {
            name: "web".into(),
            count: Some(count),
            resources: Some(ALLOC_RESOURCES),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The pending evaluation a job registration creates.
pub fn eval_for(job: &Job, id: &str) -> Evaluation {
    Evaluation {
        id: id.into(),
        job_id: job.id.clone(),
        r#type: job.r#type,
        priority: job.priority,
        triggered_by: "job_register".into(),
        status: EvalStatus::Pending as i32,
        ..Default::default()
    }
}

/// The raft entry of a job registration, with its evaluation.
pub fn job_register(job: &Job) -> LogEntry {
    LogEntry {
        msg: Some(Msg::JobRegister(JobRegisterEntry {
            ticket: 0,
            job: Some(job.clone()),
            eval: Some(eval_for(job, &format!("eval-{}", job.id))),
        })),
    }
}

/// A running allocation of `job`'s first group at `index` on `node`.
pub fn alloc(job: &Job, index: u32, node: &str) -> Allocation {
    Allocation {
        id: format!("{}-{index}", job.id),
        eval_id: format!("eval-{}", job.id),
        job_id: job.id.clone(),
        task_group: "web".into(),
        node_id: node.into(),
        name: format!("{}.web[{index}]", job.id),
        index,
        resources: Some(ALLOC_RESOURCES),
        desired_status: AllocDesiredStatus::Run as i32,
        client_status: AllocClientStatus::Running as i32,
        job_type: job.r#type,
        ..Default::default()
    }
}

/// The raft entry a plan applier writes for these allocations.
pub fn plan_apply(allocs: Vec<Allocation>) -> LogEntry {
    LogEntry {
        msg: Some(Msg::PlanApply(PlanApplyEntry {
            allocs,
            ..Default::default()
        })),
    }
}

/// Applies `entry` at the next raft index, as the state machine does.
pub fn apply(state: &mut State, entry: &LogEntry) -> Changes {
    let mut changes = Changes::default();
    state.apply(state.index() + 1, entry, &mut changes);
    changes
}

/// A state holding `nodes` ready nodes and nothing else: what the
/// scheduler and blocking-query benches start from.
pub fn state_with_nodes(nodes: usize) -> State {
    let mut state = State::default();
    for i in 0..nodes {
        apply(&mut state, &node_register(i));
    }
    state
}

/// Registers `job` in `state` and returns its evaluation, ready to schedule.
pub fn register(state: &mut State, job: &Job) -> Evaluation {
    apply(state, &job_register(job));
    state
        .eval(&format!("eval-{}", job.id))
        .map(|e| Evaluation::clone(&e))
        .expect("a job registration writes its evaluation")
}

/// The plan the scheduler makes for `eval` on `state`, with a fixed seed so
/// every run of a bench encodes the same placements.
pub fn scheduled_plan(state: &State, eval: &Evaluation) -> Plan {
    let outcome = scheduler::schedule(state, eval, &mut StdRng::seed_from_u64(7));
    assert!(
        outcome.failed.is_empty(),
        "the bench fleet has room for every placement: {:?}",
        outcome.failed
    );
    outcome.plan
}

/// All allocations a plan places, in one list: what its raft entry holds.
pub fn placed(plan: &Plan) -> Vec<Allocation> {
    plan.node_allocation
        .values()
        .flat_map(|l| l.allocs.iter().cloned())
        .collect()
}

/// The suite's timing: half a second of warm-up and two seconds of samples
/// per bench, which keeps a whole `cargo bench` to a few minutes on 2 cores.
pub fn criterion() -> criterion::Criterion {
    criterion::Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scheduled_plan_places_every_allocation() {
        let mut state = state_with_nodes(100);
        let job = service_job("web", 500);
        let eval = register(&mut state, &job);
        let plan = scheduled_plan(&state, &eval);
        assert_eq!(placed(&plan).len(), 500);
        assert_eq!(plan.snapshot_index, state.index());
    }
}
