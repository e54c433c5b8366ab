//! State-machine apply, one bench per raft message type (issue 7: "state-machine
//! apply per message type").
//!
//! Every committed entry is applied on every server under the state's write
//! lock, so apply time bounds raft throughput and holds up readers. Each bench
//! applies one typical entry of its type to a copy of a populated state (1,000
//! nodes, 100 jobs of 10 running allocations, one running deployment). Copies
//! share structure, so the first write pays for copying the touched paths;
//! that is the real cost too, since readers (blocking queries, workers) keep
//! copies of the live state almost all the time. Throughput counts entries.

use cluster::state::{Changes, State};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use stampede_benches::{alloc, apply, eval_for, node_id, node_register, placed, plan_apply};
use stampede_benches::{register, scheduled_plan, service_job, state_with_nodes};
use stampede_proto::{
    log_entry::Msg, AllocClientStatus, AllocClientUpdateEntry, Allocation, Deployment,
    DeploymentGroupState, DeploymentStatus, DeploymentUpdateEntry, EvalStatus, EvalUpdateEntry,
    Evaluation, GcDeploymentsEntry, GcEvalsEntry, GcJobsEntry, GcNodesEntry, JobDeregisterEntry,
    JobType, LogEntry, NamedTaskState, NodeStatus, NodeStatusEntry, PlanApplyEntry, TaskState,
    MESSAGE_TYPES,
};

const NODES: usize = 1_000;
const JOBS: usize = 100;
const ALLOCS_PER_JOB: u32 = 10;
/// Client updates in one `alloc_client_update` entry: the leader gathers
/// 50 ms of `Node.UpdateAlloc` calls into one entry, which under load holds
/// many allocations.
const CLIENT_UPDATES: usize = 100;
/// The finished batch job, the finished deployment and the node that went
/// down, which the `gc_*` benches collect.
const DONE_JOB: &str = "done";
const DONE_DEPLOYMENT: &str = "deployment-done";
const DOWN_NODE: usize = NODES + 1;

fn job_id(j: usize) -> String {
    format!("job-{j:03}")
}

/// The populated state every entry is applied to.
fn base_state() -> State {
    let mut state = state_with_nodes(NODES);
    for j in 0..JOBS {
        let job = service_job(&job_id(j), ALLOCS_PER_JOB);
        register(&mut state, &job);
        let allocs = (0..ALLOCS_PER_JOB)
            .map(|i| alloc(&job, i, &node_id((j * 10 + i as usize) % NODES)))
            .collect();
        apply(&mut state, &plan_apply(allocs));
    }
    let deployment = LogEntry {
        msg: Some(Msg::PlanApply(PlanApplyEntry {
            deployment: Some(deployment(0)),
            ..Default::default()
        })),
    };
    apply(&mut state, &deployment);
    // Registered but not placed yet: the `plan_apply` bench places it.
    register(&mut state, &service_job("pending", ALLOCS_PER_JOB));
    add_garbage(&mut state);
    state
}

/// What the `gc_*` benches collect: a finished batch job (its allocations
/// complete, its evaluation complete), a finished deployment that no
/// allocation refers to, and a node that went down with nothing on it.
fn add_garbage(state: &mut State) {
    let mut done = service_job(DONE_JOB, ALLOCS_PER_JOB);
    done.r#type = JobType::Batch as i32;
    let eval = register(state, &done);
    let allocs = (0..ALLOCS_PER_JOB)
        .map(|i| Allocation {
            client_status: AllocClientStatus::Complete as i32,
            ..alloc(&done, i, &node_id(i as usize))
        })
        .collect();
    apply(state, &plan_apply(allocs));
    let finished = EvalUpdateEntry {
        evals: vec![Evaluation {
            status: EvalStatus::Complete as i32,
            ..eval
        }],
    };
    apply(
        state,
        &LogEntry {
            msg: Some(Msg::EvalUpdate(finished)),
        },
    );
    let finished = Deployment {
        id: DONE_DEPLOYMENT.into(),
        job_id: job_id(3),
        status: DeploymentStatus::Successful as i32,
        ..Default::default()
    };
    apply(
        state,
        &LogEntry {
            msg: Some(Msg::PlanApply(PlanApplyEntry {
                deployment: Some(finished),
                ..Default::default()
            })),
        },
    );
    apply(state, &node_register(DOWN_NODE));
    let down = NodeStatusEntry {
        node_id: node_id(DOWN_NODE),
        status: NodeStatus::Down as i32,
        updated_at_ms: 1,
        evals: vec![],
    };
    apply(
        state,
        &LogEntry {
            msg: Some(Msg::NodeStatus(down)),
        },
    );
}

/// The running deployment of job 0, with `healthy` allocations so far.
fn deployment(healthy: u32) -> Deployment {
    Deployment {
        id: "deployment-job-000".into(),
        job_id: job_id(0),
        status: DeploymentStatus::Running as i32,
        task_groups: [(
            "web".to_string(),
            DeploymentGroupState {
                desired_total: ALLOCS_PER_JOB,
                placed: ALLOCS_PER_JOB,
                healthy,
                ..Default::default()
            },
        )]
        .into(),
        ..Default::default()
    }
}

/// An evaluation the server writes for a job in reaction to `trigger`.
fn eval(job: &str, trigger: &str) -> Evaluation {
    Evaluation {
        triggered_by: trigger.into(),
        ..eval_for(
            &service_job(job, ALLOCS_PER_JOB),
            &format!("eval-{trigger}-{job}"),
        )
    }
}

/// A typical entry of message type `name`, against `state`; `None` for a
/// type this bench does not know yet.
fn entry(name: &str, state: &State) -> Option<LogEntry> {
    let msg = match name {
        // A new node joins the fleet.
        "node_register" => return Some(node_register(NODES)),
        // A node missed its heartbeats: it goes down, its allocations are
        // lost and each of their jobs gets an evaluation.
        "node_status" => {
            let node = node_id(0);
            let mut jobs: Vec<String> = state
                .node_allocs(&node)
                .iter()
                .map(|a| a.job_id.clone())
                .collect();
            jobs.dedup();
            Msg::NodeStatus(NodeStatusEntry {
                node_id: node,
                status: NodeStatus::Down as i32,
                updated_at_ms: 1,
                evals: jobs.iter().map(|j| eval(j, "node_update")).collect(),
            })
        }
        // A new job, with its evaluation.
        "job_register" => return Some(stampede_benches::job_register(&service_job("new", 10))),
        // A job is stopped (kept for history), with the evaluation that stops its allocations.
        "job_deregister" => Msg::JobDeregister(JobDeregisterEntry {
            ticket: 0,
            job_id: job_id(1),
            purge: false,
            eval: Some(eval(&job_id(1), "job_deregister")),
        }),
        // A worker finished an evaluation.
        "eval_update" => Msg::EvalUpdate(EvalUpdateEntry {
            evals: vec![Evaluation {
                status: EvalStatus::Complete as i32,
                ..eval(&job_id(2), "job_register")
            }],
        }),
        // The scheduler's plan for a job of 10: what the plan applier commits.
        "plan_apply" => {
            let pending = state
                .eval("eval-pending")
                .expect("the base state has a pending job");
            return Some(plan_apply(placed(&scheduled_plan(state, &pending))));
        }
        // Clients report allocations running and healthy.
        "alloc_client_update" => Msg::AllocClientUpdate(AllocClientUpdateEntry {
            allocs: state
                .allocs()
                .take(CLIENT_UPDATES)
                .map(|a| Allocation {
                    id: a.id.clone(),
                    client_status: AllocClientStatus::Running as i32,
                    client_description: "healthy".into(),
                    task_states: vec![NamedTaskState::new(
                        "web",
                        TaskState {
                            state: "running".into(),
                            started_at_ms: 1,
                            ..Default::default()
                        },
                    )],
                    healthy: Some(true),
                    ..Default::default()
                })
                .collect(),
            evals: vec![],
            updated_at_ms: 2,
        }),
        // The deployment watcher records progress and asks for the next round.
        "deployment_update" => Msg::DeploymentUpdate(DeploymentUpdateEntry {
            deployment: Some(deployment(5)),
            evals: vec![eval(&job_id(0), "deployment_watcher")],
        }),
        // The garbage collector removes a finished job's evaluations...
        "gc_evals" => Msg::GcEvals(GcEvalsEntry {
            eval_ids: state
                .job_evals(DONE_JOB)
                .iter()
                .map(|e| e.id.clone())
                .collect(),
            alloc_ids: vec![],
        }),
        // ...the finished job with its allocations...
        "gc_jobs" => Msg::GcJobs(GcJobsEntry {
            job_ids: vec![DONE_JOB.into()],
        }),
        // ...a finished deployment...
        "gc_deployments" => Msg::GcDeployments(GcDeploymentsEntry {
            deployment_ids: vec![DONE_DEPLOYMENT.into()],
        }),
        // ...and a node long down.
        "gc_nodes" => Msg::GcNodes(GcNodesEntry {
            node_ids: vec![node_id(DOWN_NODE)],
        }),
        _ => return None,
    };
    Some(LogEntry { msg: Some(msg) })
}

fn state_apply(c: &mut Criterion) {
    let base = base_state();
    let index = base.index() + 1;
    let mut group = c.benchmark_group("state_apply");
    group.throughput(Throughput::Elements(1));
    for &name in MESSAGE_TYPES {
        if matches!(name, "blank" | "membership") {
            // openraft's own entries: the state only records their index.
            continue;
        }
        let entry = entry(name, &base)
            .unwrap_or_else(|| panic!("state_apply has no bench entry for message type {name}"));
        let type_name = entry.msg.as_ref().map(|m| m.type_name());
        assert_eq!(type_name, Some(name), "the bench entry for {name}");
        if name.starts_with("gc_") {
            let mut changes = Changes::default();
            base.clone().apply(index, &entry, &mut changes);
            let collected: u64 = changes.collected.by_kind().iter().map(|(_, n)| n).sum();
            assert!(collected > 0, "the {name} bench entry collects nothing");
        }
        group.bench_function(name, |b| {
            b.iter_batched(
                || base.clone(),
                |mut state| {
                    state.apply(index, &entry, &mut Changes::default());
                    state
                },
                BatchSize::SmallInput,
            )
        });
    }
    // Clients' reports on a state that no copy shares, as on a follower
    // that no reader holds up: each report changes its allocation where it
    // is. The `alloc_client_update` bench above applies to a copy of the
    // base state, so every report there copies its allocation.
    let reports = entry("alloc_client_update", &base).expect("the reports' entry");
    let mut alone = State::from_snapshot(base.to_snapshot(), base.index());
    group.bench_function("alloc_client_update_in_place", |b| {
        b.iter(|| alone.apply(index, &reports, &mut Changes::default()))
    });
    group.finish();
}

/// A state of 100 jobs of 1,000 allocations on 10,000 nodes (`c2m-mini`'s
/// size), each allocation named by `name(job, index)`.
fn state_of_100k(name: impl Fn(usize, u32) -> String) -> State {
    let mut state = state_with_nodes(10_000);
    for j in 0..100 {
        let job = service_job(&job_id(j), 1_000);
        register(&mut state, &job);
        let allocs = (0..1_000)
            .map(|i| Allocation {
                id: name(j, i),
                ..alloc(&job, i, &node_id((j * 1_000 + i as usize) % 10_000))
            })
            .collect();
        apply(&mut state, &plan_apply(allocs));
    }
    state
}

/// Looking up 1,000 allocations by id among 100,000, as every server does
/// for each client's report: ids as the scheduler writes them (UUIDs, kept
/// in the table as their bits) against ids of any other form (kept as
/// text, as every id was before).
fn alloc_lookup(c: &mut Criterion) {
    let mut group = c.benchmark_group("alloc_lookup_100k");
    group.throughput(Throughput::Elements(1_000));
    let uuids = state_of_100k(|_, _| uuid::Uuid::new_v4().to_string());
    let texts = state_of_100k(|j, i| format!("{}-{i:04}", job_id(j)));
    for (name, state) in [("uuid_ids", uuids), ("text_ids", texts)] {
        // Every 100th allocation, in table order: spread over the table.
        let ids: Vec<String> = state.allocs().step_by(100).map(|a| a.id.clone()).collect();
        assert_eq!(ids.len(), 1_000);
        group.bench_function(name, |b| {
            b.iter(|| ids.iter().filter(|id| state.alloc(id).is_some()).count())
        });
    }
    group.finish();
}

/// A snapshot of 100,000 running allocations (UUID ids, a task state
/// each, as nodesim reports them) on 10,000 nodes: built (encoded) and
/// installed (decoded into a state), row by row as the servers do
/// (`encode_snapshot`, `decode_snapshot`) and through a whole
/// `StateSnapshot` of copies of every row, as they did before. Throughput
/// counts allocations: the time per element is the time per allocation.
fn snapshot(c: &mut Criterion) {
    use prost::Message;
    let mut state = state_of_100k(|_, _| uuid::Uuid::new_v4().to_string());
    let running: Vec<Allocation> = state
        .allocs()
        .map(|a| Allocation {
            task_states: vec![NamedTaskState {
                task: "server".into(),
                state: Some(TaskState {
                    state: "running".into(),
                    started_at_ms: 1_700_000_000_000,
                    ..Default::default()
                }),
            }],
            ..Allocation::clone(a)
        })
        .collect();
    apply(&mut state, &plan_apply(running));
    let index = state.index();
    let mut bytes = Vec::new();
    state.encode_snapshot(&mut bytes);
    let mut group = c.benchmark_group("snapshot_100k");
    group.sample_size(10);
    group.throughput(Throughput::Elements(100_000));
    group.bench_function("build", |b| {
        b.iter(|| {
            let mut out = Vec::with_capacity(bytes.len());
            state.encode_snapshot(&mut out);
            out.len()
        })
    });
    group.bench_function("build_whole_message", |b| {
        b.iter(|| state.to_snapshot().encode_to_vec().len())
    });
    group.bench_function("install", |b| {
        b.iter(|| State::decode_snapshot(&bytes, index).unwrap().index())
    });
    group.bench_function("install_whole_message", |b| {
        b.iter(|| {
            let snap = stampede_proto::StateSnapshot::decode(bytes.as_slice()).unwrap();
            State::from_snapshot(snap, index).index()
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = stampede_benches::criterion();
    targets = state_apply, alloc_lookup, snapshot
}
criterion_main!(benches);
