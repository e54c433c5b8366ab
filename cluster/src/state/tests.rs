use super::allocs::summary_key;
use super::*;
use stampede_proto::log_entry::Msg;
use stampede_proto::node_secret::hash;
use stampede_proto::{
    AllocClientStatus, AllocClientUpdateEntry, AllocDesiredStatus, EvalStatus, JobRegisterEntry,
    JobType, LogEntry, NamedTaskState, Node, NodeRegisterEntry, NodeStatus, NodeStatusEntry,
    PlanApplyEntry, Resources,
};

fn node_entry(id: &str) -> LogEntry {
    node_entry_with(id, &format!("secret-of-node-{id}"))
}

/// Node `id`'s registration with `secret` (its hash, as the leader writes it).
fn node_entry_with(id: &str, secret: &str) -> LogEntry {
    LogEntry {
        msg: Some(Msg::NodeRegister(NodeRegisterEntry {
            ticket: 0,
            node: Some(Node {
                id: id.into(),
                datacenter: "dc1".into(),
                ..Default::default()
            }),
            evals: vec![],
            secret_hash: hash(secret).to_vec(),
        })),
    }
}

fn plan_entry(allocs: Vec<Allocation>) -> LogEntry {
    LogEntry {
        msg: Some(Msg::PlanApply(PlanApplyEntry {
            allocs,
            ..Default::default()
        })),
    }
}

fn node_down_entry(id: &str) -> LogEntry {
    LogEntry {
        msg: Some(Msg::NodeStatus(NodeStatusEntry {
            node_id: id.into(),
            status: NodeStatus::Down as i32,
            ..Default::default()
        })),
    }
}

fn alloc(id: &str, node: &str, job: &str) -> Allocation {
    Allocation {
        id: id.into(),
        node_id: node.into(),
        job_id: job.into(),
        desired_status: AllocDesiredStatus::Run as i32,
        resources: Some(Resources {
            cpu_mhz: 100,
            memory_mb: 64,
        }),
        ..Default::default()
    }
}

/// Clients' reports of only a status each, in one entry.
fn statuses(reports: &[(&str, AllocClientStatus)]) -> LogEntry {
    let allocs = reports
        .iter()
        .map(|&(id, status)| Allocation {
            id: id.into(),
            client_status: status as i32,
            ..Default::default()
        })
        .collect();
    LogEntry {
        msg: Some(Msg::AllocClientUpdate(AllocClientUpdateEntry {
            allocs,
            ..Default::default()
        })),
    }
}

fn apply(s: &mut State, index: u64, e: LogEntry) -> Changes {
    let mut c = Changes::default();
    s.apply(index, &e, &mut c);
    c
}

#[test]
fn ids_kept_in_the_key_and_beside_it_order_and_look_up_as_their_texts() {
    // 23 bytes fit inside an `Id`; longer ones are kept beside it.
    let ids = [
        "sim-0000abcd-10",
        "sim-0000abcd-9",
        "sim-0000abcd-1000000000",  // 23 bytes
        "sim-0000abcd-10000000000", // 24 bytes
        "sim-0000abcd-100000000000000000000",
        "",
        "d41d8cd9-8f00-3204-a980-0998ecf8427e",
        "\u{e9}",
    ];
    let mut s = State::default();
    for (i, id) in ids.iter().enumerate() {
        apply(&mut s, i as u64 + 1, node_entry(id));
    }
    let mut sorted = ids.to_vec();
    sorted.sort();
    let stored: Vec<&str> = s.nodes().map(|n| n.id.as_str()).collect();
    assert_eq!(stored, sorted);
    for id in ids {
        assert_eq!(s.node(id).map(|n| n.id.to_string()), Some(id.to_string()));
    }
    assert!(s.node("sim-0000abcd-1000000000x").is_none());
}

#[test]
fn register_keeps_create_index_and_moves_modify_index() {
    let mut s = State::default();
    let c = apply(&mut s, 5, node_entry("a"));
    assert!(c.capacity_changed, "a new ready node is new capacity");
    let c = apply(&mut s, 9, node_entry("a"));
    assert!(!c.capacity_changed);
    let a = s.node("a").unwrap();
    assert_eq!((a.create_index, a.modify_index), (5, 9));
    assert_eq!(a.status, NodeStatus::Ready as i32);
    assert_eq!(s.indexes().nodes, 9);
    assert_eq!(s.index(), 9);
}

#[test]
fn a_batch_applies_its_commands_in_order_at_its_index_and_never_a_nested_one() {
    let mut s = State::default();
    let nested = LogEntry {
        msg: Some(Msg::Batch(stampede_proto::BatchEntry {
            entries: vec![node_entry("hidden")],
        })),
    };
    let batch = LogEntry {
        msg: Some(Msg::Batch(stampede_proto::BatchEntry {
            entries: vec![node_entry("a"), nested, node_entry("b")],
        })),
    };
    let c = apply(&mut s, 7, batch);
    assert_eq!(c.index, 7);
    assert_eq!(c.objects.map(|o| o.nodes), Some(2));
    for id in ["a", "b"] {
        let n = s.node(id).unwrap();
        assert_eq!((n.create_index, n.modify_index), (7, 7));
    }
    assert!(s.node("hidden").is_none(), "a nested batch is not applied");
    assert_eq!(s.index(), 7);
}

#[test]
fn a_plan_wakes_its_job_once_and_each_of_its_nodes() {
    let mut s = State::default();
    for n in ["n1", "n2"] {
        apply(&mut s, 1, node_entry(n));
    }
    let plan = plan_entry(vec![
        alloc("a1", "n1", "web"),
        alloc("a2", "n1", "web"),
        alloc("a3", "n2", "web"),
        alloc("a4", "n2", "db"),
    ]);
    let c = apply(&mut s, 2, plan);
    let count = |k: WatchKey| c.keys.iter().filter(|x| **x == k).count();
    assert_eq!(count(WatchKey::JobAllocs("web".into())), 1);
    assert_eq!(count(WatchKey::JobAllocs("db".into())), 1);
    assert_eq!(count(WatchKey::NodeAllocs("n1".into())), 1);
    assert_eq!(count(WatchKey::NodeAllocs("n2".into())), 1);
    assert_eq!(s.job_allocs("web").len(), 3);
    assert_eq!(s.job_allocs("db").len(), 1);
}

#[test]
fn a_client_report_replaces_what_the_client_owns_and_keeps_the_rest() {
    let mut s = State::default();
    apply(&mut s, 1, node_entry("n1"));
    let placed = Allocation {
        name: "web.web[0]".into(),
        eval_id: "e1".into(),
        deployment_id: "d1".into(),
        client_description: "placed".into(),
        task_states: vec![NamedTaskState::new("old", Default::default())],
        healthy: Some(true),
        job_version: 3,
        ..alloc("a1", "n1", "web")
    };
    apply(&mut s, 2, plan_entry(vec![placed]));
    let before = s.alloc("a1").unwrap();
    let report = Allocation {
        id: "a1".into(),
        client_status: AllocClientStatus::Running as i32,
        client_description: "running".into(),
        task_states: vec![NamedTaskState::new("web", Default::default())],
        healthy: None,
        client_times: Some(stampede_proto::AllocClientTimes {
            delivered_us: 10,
            started_us: 20,
            ..Default::default()
        }),
        ..Default::default()
    };
    let update = LogEntry {
        msg: Some(Msg::AllocClientUpdate(AllocClientUpdateEntry {
            allocs: vec![report],
            updated_at_ms: 42,
            ..Default::default()
        })),
    };
    apply(&mut s, 3, update);
    let after = s.alloc("a1").unwrap();
    let expected = Allocation {
        client_status: AllocClientStatus::Running as i32,
        client_description: "running".into(),
        task_states: vec![NamedTaskState::new("web", Default::default())],
        // Health, once known, stays known when a report leaves it out.
        healthy: Some(true),
        modify_index: 3,
        modify_time_ms: 42,
        // The critical path's: the client's times, and the running report's index.
        client_times: Some(stampede_proto::AllocClientTimes {
            delivered_us: 10,
            started_us: 20,
            ..Default::default()
        }),
        running_index: 3,
        ..Allocation::clone(&before)
    };
    assert_eq!(*after, expected);

    // A later report without times keeps them, and the first running index.
    let healthy = Allocation {
        id: "a1".into(),
        client_status: AllocClientStatus::Running as i32,
        healthy: Some(true),
        ..Default::default()
    };
    let update = LogEntry {
        msg: Some(Msg::AllocClientUpdate(AllocClientUpdateEntry {
            allocs: vec![healthy],
            updated_at_ms: 43,
            ..Default::default()
        })),
    };
    apply(&mut s, 4, update);
    let later = s.alloc("a1").unwrap();
    assert_eq!(later.client_times, expected.client_times);
    assert_eq!((later.running_index, later.modify_index), (3, 4));
}

#[test]
fn times_sent_after_an_allocations_creation_are_stored_since_1970() {
    let mut s = State::default();
    apply(&mut s, 1, node_entry("n1"));
    let placed = Allocation {
        create_time_ms: 1_000,
        ..alloc("a1", "n1", "web")
    };
    apply(&mut s, 2, plan_entry(vec![placed]));
    let report = Allocation {
        id: "a1".into(),
        client_status: AllocClientStatus::Running as i32,
        client_times: Some(stampede_proto::AllocClientTimes {
            delivered_after_create_us: 300,
            started_after_create_us: 450_000,
            ..Default::default()
        }),
        ..Default::default()
    };
    let update = LogEntry {
        msg: Some(Msg::AllocClientUpdate(AllocClientUpdateEntry {
            allocs: vec![report],
            updated_at_ms: 2_000,
            ..Default::default()
        })),
    };
    apply(&mut s, 3, update);
    let times = s.alloc("a1").unwrap().client_times.unwrap();
    assert_eq!(
        (times.delivered_us, times.started_us),
        (1_000_300, 1_450_000)
    );
    assert_eq!(
        (
            times.delivered_after_create_us,
            times.started_after_create_us
        ),
        (0, 0),
        "stored once, since 1970"
    );
}

#[test]
fn allocations_are_counted_by_client_status_across_jobs() {
    let mut s = State::default();
    apply(&mut s, 1, node_entry("n1"));
    let plan = plan_entry(vec![
        alloc("a1", "n1", "web"),
        alloc("a2", "n1", "web"),
        alloc("a3", "n1", "db"),
    ]);
    apply(&mut s, 2, plan);
    let update = statuses(&[
        ("a1", AllocClientStatus::Running),
        ("a3", AllocClientStatus::Failed),
    ]);
    apply(&mut s, 3, update);
    let counted = s.alloc_client_statuses();
    let expected = BTreeMap::from([
        (AllocClientStatus::Pending as i32, 1),
        (AllocClientStatus::Running as i32, 1),
        (AllocClientStatus::Failed as i32, 1),
    ]);
    assert_eq!(counted, expected);
    // The same as counting every allocation one by one.
    let mut by_one = BTreeMap::new();
    for a in s.allocs() {
        *by_one.entry(a.client_status).or_insert(0u64) += 1;
    }
    assert_eq!(counted, by_one);
}

/// Node n1 with allocations a1 and a2 of job web, as a plan placed them
/// (indexes 1 and 2).
fn a1_and_a2_on_n1() -> State {
    let mut s = State::default();
    apply(&mut s, 1, node_entry("n1"));
    apply(
        &mut s,
        2,
        plan_entry(vec![alloc("a1", "n1", "web"), alloc("a2", "n1", "web")]),
    );
    s
}

#[test]
fn a_pending_report_applied_after_a_running_one_leaves_the_allocation_running() {
    let mut s = a1_and_a2_on_n1();
    // The node's `running` report lands first; its earlier `pending`
    // report, which timed out at the node, reaches the log after it.
    apply(&mut s, 3, statuses(&[("a1", AllocClientStatus::Running)]));
    let running = s.alloc("a1").unwrap();
    apply(&mut s, 4, statuses(&[("a1", AllocClientStatus::Pending)]));
    assert_eq!(
        s.alloc("a1").unwrap(),
        running,
        "the late report changed nothing"
    );
    let by_status = s.alloc_client_statuses();
    assert_eq!(
        by_status.get(&(AllocClientStatus::Running as i32)),
        Some(&1)
    );
    // Pending to running, and running to a final status, still go through.
    apply(&mut s, 5, statuses(&[("a2", AllocClientStatus::Pending)]));
    apply(&mut s, 6, statuses(&[("a2", AllocClientStatus::Running)]));
    assert_eq!(
        s.alloc("a2").unwrap().client_status,
        AllocClientStatus::Running as i32
    );
    apply(&mut s, 7, statuses(&[("a1", AllocClientStatus::Complete)]));
    assert_eq!(
        s.alloc("a1").unwrap().client_status,
        AllocClientStatus::Complete as i32
    );
}

#[test]
fn a_report_changed_in_place_leaves_every_copy_as_it_was_and_the_tables_as_a_copy_would() {
    // One state reported to while nothing else holds the allocation
    // (changed where it is), one while a copy of the state is alive
    // (copied): both must end the same, and the copy must not move.
    let placed = |s: &mut State| {
        apply(s, 1, node_entry("n1"));
        let plan = plan_entry(vec![alloc("a1", "n1", "web"), alloc("a2", "n1", "web")]);
        apply(s, 2, plan);
    };
    let report = |status: AllocClientStatus, healthy: Option<bool>| LogEntry {
        msg: Some(Msg::AllocClientUpdate(AllocClientUpdateEntry {
            allocs: vec![Allocation {
                id: "a1".into(),
                client_status: status as i32,
                client_description: format!("{status:?}"),
                task_states: vec![NamedTaskState::new("web", Default::default())],
                healthy,
                ..Default::default()
            }],
            updated_at_ms: 42,
            ..Default::default()
        })),
    };
    let mut alone = State::default();
    let mut copied = State::default();
    placed(&mut alone);
    placed(&mut copied);
    let mut copies = Vec::new();
    for (i, (status, healthy)) in [
        (AllocClientStatus::Running, None),
        (AllocClientStatus::Running, Some(true)),
        (AllocClientStatus::Complete, None),
    ]
    .into_iter()
    .enumerate()
    {
        let index = 3 + i as u64;
        copies.push(copied.clone());
        let at = |s: &State| Arc::as_ptr(&s.alloc("a1").unwrap());
        let (alone_at, copied_at) = (at(&alone), at(&copied));
        let c1 = apply(&mut alone, index, report(status, healthy));
        let c2 = apply(&mut copied, index, report(status, healthy));
        assert_eq!(at(&alone), alone_at, "changed where it is");
        assert_ne!(at(&copied), copied_at, "a copy holds it: copied");
        assert_eq!(
            (c1.keys, c1.capacity_changed),
            (c2.keys, c2.capacity_changed)
        );
        let a = alone.alloc("a1").unwrap();
        assert_eq!(a.client_status, status as i32);
        assert_eq!((a.modify_index, a.modify_time_ms), (index, 42));
        assert_eq!(a.create_index, 2, "what the server wrote stays");
    }
    assert_eq!(
        alone.alloc("a1").unwrap().healthy,
        Some(true),
        "health stays known"
    );
    assert_eq!(alone.to_snapshot(), copied.to_snapshot());
    assert_eq!(alone.node_alloc_map("n1"), copied.node_alloc_map("n1"));
    assert_eq!(alone.job_summary("web"), copied.job_summary("web"));
    assert_eq!(alone.job_alloc_index("web"), 5);
    assert_eq!(
        alone.node_alloc_index("n1"),
        2,
        "a report does not wake the node"
    );
    assert_eq!(
        alone.node_usage("n1").cpu_mhz,
        100,
        "the complete one frees its share"
    );
    // Each copy still sees the allocation as it was when it was taken.
    let seen: Vec<i32> = copies
        .iter()
        .map(|c| c.node_alloc_map("n1")[&AllocKey::new("a1")].client_status)
        .collect();
    let expected = [
        AllocClientStatus::Pending,
        AllocClientStatus::Running,
        AllocClientStatus::Running,
    ]
    .map(|s| s as i32);
    assert_eq!(seen, expected);
    assert_eq!(copies[0].alloc("a1").unwrap().modify_index, 2);
}

#[test]
fn a_copy_does_not_see_later_writes() {
    let store = StateStore::default();
    store.write(|s| s.apply(1, &node_entry("a"), &mut Changes::default()));
    let before = store.snapshot();
    store.write(|s| s.apply(2, &node_entry("b"), &mut Changes::default()));
    assert_eq!(before.node_count(), 1);
    assert_eq!(store.snapshot().node_count(), 2);
    assert_eq!(store.applied_index(), 2);
}

#[test]
fn allocation_writes_touch_only_their_node_and_job() {
    let mut s = State::default();
    apply(&mut s, 1, node_entry("n1"));
    apply(&mut s, 2, node_entry("n2"));
    let plan = plan_entry(vec![alloc("a1", "n1", "web")]);
    let c = apply(&mut s, 3, plan);
    assert!(c.keys.contains(&WatchKey::NodeAllocs("n1".into())));
    assert!(!c.keys.contains(&WatchKey::NodeAllocs("n2".into())));
    assert_eq!((s.node_alloc_index("n1"), s.node_alloc_index("n2")), (3, 0));
    assert_eq!(s.node_usage("n1").cpu_mhz, 100);

    let update = LogEntry {
        msg: Some(Msg::AllocClientUpdate(AllocClientUpdateEntry {
            allocs: vec![Allocation {
                id: "a1".into(),
                client_status: AllocClientStatus::Complete as i32,
                ..Default::default()
            }],
            ..Default::default()
        })),
    };
    let c = apply(&mut s, 4, update);
    assert!(
        c.capacity_changed,
        "a finished allocation frees its resources"
    );
    let a1 = s.alloc("a1").unwrap();
    assert_eq!((a1.create_index, a1.modify_index), (3, 4));
    assert_eq!(a1.node_id, "n1", "server-side fields stay");
    assert_eq!(s.node_usage("n1").cpu_mhz, 0);
    // The node sent that report itself: its query has nothing new to
    // say, so it does not wake. The job's followers do.
    assert!(!c.keys.contains(&WatchKey::NodeAllocs("n1".into())));
    assert!(c.keys.contains(&WatchKey::JobAllocs("web".into())));
    assert_eq!(s.node_alloc_index("n1"), 3);

    // A change the server makes (here: the node is down, so a2 is
    // lost) is news to the node.
    apply(&mut s, 5, plan_entry(vec![alloc("a2", "n1", "web")]));
    let c = apply(&mut s, 6, node_down_entry("n1"));
    assert!(c.keys.contains(&WatchKey::NodeAllocs("n1".into())));
    assert_eq!(s.node_alloc_index("n1"), 6);
    assert_eq!(s.alloc("a2").unwrap().alloc_modify_index, 6);
}

/// What `job_summary` must equal: the job's allocations counted now.
fn counted(s: &State, job: &str) -> AllocCounts {
    let mut counts = AllocCounts::new();
    for a in s.job_allocs(job) {
        *counts.entry(summary_key(&a)).or_default() += 1;
    }
    counts
}

#[test]
fn a_jobs_summary_follows_its_allocations_and_is_rebuilt_from_a_snapshot() {
    let mut s = State::default();
    apply(&mut s, 1, node_entry("n1"));
    apply(&mut s, 2, node_entry("n2"));
    let plan = plan_entry(vec![
        alloc("a1", "n1", "web"),
        alloc("a2", "n1", "web"),
        alloc("a3", "n2", "web"),
        alloc("b1", "n2", "batch"),
    ]);
    apply(&mut s, 3, plan);
    let pending = (
        0,
        AllocDesiredStatus::Run as i32,
        AllocClientStatus::Pending as i32,
    );
    assert_eq!(*s.job_summary("web"), AllocCounts::from([(pending, 3)]));
    let before = s.clone();

    let update = statuses(&[
        ("a1", AllocClientStatus::Running),
        ("a2", AllocClientStatus::Running),
        ("a2", AllocClientStatus::Failed),
    ]);
    apply(&mut s, 4, update);
    let down = node_down_entry("n2");
    apply(&mut s, 5, down);
    let run = AllocDesiredStatus::Run as i32;
    assert_eq!(
        *s.job_summary("web"),
        AllocCounts::from([
            ((0, run, AllocClientStatus::Running as i32), 1),
            ((0, run, AllocClientStatus::Failed as i32), 1),
            ((0, run, AllocClientStatus::Lost as i32), 1),
        ])
    );
    let restored = State::from_snapshot(s.to_snapshot(), s.index());
    for job in ["web", "batch", "none"] {
        assert_eq!(*s.job_summary(job), counted(&s, job), "{job}");
        assert_eq!(*restored.job_summary(job), counted(&s, job), "{job}");
    }
    assert_eq!(
        *before.job_summary("web"),
        AllocCounts::from([(pending, 3)]),
        "a copy keeps the counts of its version"
    );
}

#[test]
fn a_node_going_down_loses_its_running_allocations() {
    let mut s = State::default();
    apply(&mut s, 1, node_entry("n1"));
    let plan = plan_entry(vec![alloc("a1", "n1", "web"), alloc("a2", "n1", "web")]);
    apply(&mut s, 2, plan);
    let down = node_down_entry("n1");
    apply(&mut s, 3, down);
    for a in s.job_allocs("web") {
        assert_eq!(a.client_status, AllocClientStatus::Lost as i32);
        assert_eq!(a.modify_index, 3);
    }
    assert_eq!(s.node("n1").unwrap().status, NodeStatus::Down as i32);
}

/// The leader writes a node's down mark from what it saw: a plan that
/// placed on the node after it looked, but applied before the mark, loses
/// its allocation too. Its job is evaluated all the same (else nothing
/// would ever replace the allocation), and alike on every server.
#[test]
fn a_job_that_lost_an_allocation_placed_after_the_leader_looked_is_evaluated() {
    let log = |s: &mut State| {
        apply(s, 1, node_entry("n1"));
        for (i, id) in ["web", "api"].into_iter().enumerate() {
            let job = Job {
                id: id.into(),
                priority: 50,
                ..Default::default()
            };
            let reg = LogEntry {
                msg: Some(Msg::JobRegister(JobRegisterEntry {
                    ticket: 0,
                    job: Some(job),
                    eval: None,
                })),
            };
            apply(s, 2 + i as u64, reg);
        }
        apply(s, 4, plan_entry(vec![alloc("a1", "n1", "api")]));
        // Placed after the leader looked at n1's allocations.
        apply(s, 5, plan_entry(vec![alloc("a2", "n1", "web")]));
        let mut down = node_down_entry("n1");
        let Some(Msg::NodeStatus(e)) = &mut down.msg else {
            unreachable!()
        };
        // What the leader saw: only api's allocation.
        e.evals = vec![Evaluation {
            id: "from-the-leader".into(),
            job_id: "api".into(),
            status: EvalStatus::Pending as i32,
            triggered_by: "node_update".into(),
            ..Default::default()
        }];
        apply(s, 6, down)
    };
    let (mut s, mut other) = (State::default(), State::default());
    let changes = log(&mut s);
    log(&mut other);
    let web = s.job_evals("web");
    assert_eq!(web.len(), 1, "one evaluation for the job that lost a2");
    assert_eq!(web[0].status, EvalStatus::Pending as i32);
    assert_eq!(web[0].triggered_by, "node_update");
    assert_eq!(web[0].node_id, "n1");
    assert_eq!(web[0].create_index, 6);
    assert_eq!(
        other.job_evals("web")[0].id,
        web[0].id,
        "every server makes the same evaluation"
    );
    let api: Vec<_> = s.job_evals("api").iter().map(|e| e.id.clone()).collect();
    assert_eq!(
        api,
        ["from-the-leader"],
        "a job the entry covers is not evaluated twice"
    );
    assert!(
        changes.evals.iter().any(|e| e.id == web[0].id),
        "the leader's broker hears of it"
    );
}

/// A node that registers, or comes back ready, is evaluated for every live
/// system job there is where its entry applies, not for those the leader
/// saw when it wrote the entry: a system job registered in between would
/// otherwise never reach it. A service job, a stopped or purged system
/// job, and a node registering as down get none.
#[test]
fn a_ready_node_is_evaluated_for_the_system_jobs_there_are_when_it_applies() {
    let reg = |id: &str, r#type: JobType| LogEntry {
        msg: Some(Msg::JobRegister(JobRegisterEntry {
            ticket: 0,
            job: Some(Job {
                id: id.into(),
                r#type: r#type as i32,
                priority: 50,
                ..Default::default()
            }),
            eval: None,
        })),
    };
    let stop = |id: &str, purge: bool| LogEntry {
        msg: Some(Msg::JobDeregister(stampede_proto::JobDeregisterEntry {
            job_id: id.into(),
            purge,
            ..Default::default()
        })),
    };
    let mut s = State::default();
    apply(&mut s, 1, reg("agent", JobType::System));
    apply(&mut s, 2, reg("web", JobType::Service));
    apply(&mut s, 3, reg("stopped", JobType::System));
    apply(&mut s, 4, stop("stopped", false));
    apply(&mut s, 5, reg("purged", JobType::System));
    apply(&mut s, 6, stop("purged", true));
    // Registered as a service, then again as a system job.
    apply(&mut s, 7, reg("retyped", JobType::Service));
    apply(&mut s, 8, reg("retyped", JobType::System));
    let for_node = |s: &State, node: &str| -> Vec<String> {
        let mut jobs: Vec<String> = s
            .evals()
            .filter(|e| e.node_id == node)
            .map(|e| e.job_id.clone())
            .collect();
        jobs.sort();
        jobs
    };
    let changes = apply(&mut s, 9, node_entry("n1"));
    assert_eq!(for_node(&s, "n1"), ["agent", "retyped"]);
    assert_eq!(changes.evals.len(), 2, "the leader's broker hears of both");
    let restored = State::from_snapshot(s.to_snapshot(), s.index());
    let mut down = node_entry("n2");
    if let Some(Msg::NodeRegister(e)) = &mut down.msg {
        e.node.as_mut().unwrap().status = NodeStatus::Down as i32;
    }
    for s in [&mut s.clone(), &mut restored.clone()] {
        apply(s, 10, down.clone());
        assert!(for_node(s, "n2").is_empty(), "registered down: no work");
        let ready = LogEntry {
            msg: Some(Msg::NodeStatus(NodeStatusEntry {
                node_id: "n2".into(),
                status: NodeStatus::Ready as i32,
                ..Default::default()
            })),
        };
        apply(s, 11, ready);
        assert_eq!(
            for_node(s, "n2"),
            ["agent", "retyped"],
            "after a snapshot too"
        );
    }
}

#[test]
fn re_registering_an_unchanged_job_is_not_a_new_version() {
    let mut s = State::default();
    let job = Job {
        id: "web".into(),
        priority: 50,
        ..Default::default()
    };
    let reg = |job: &Job| LogEntry {
        msg: Some(Msg::JobRegister(JobRegisterEntry {
            ticket: 0,
            job: Some(job.clone()),
            eval: None,
        })),
    };
    apply(&mut s, 1, reg(&job));
    apply(&mut s, 2, reg(&job));
    let j = s.job("web").unwrap();
    assert_eq!((j.version, j.job_modify_index, j.modify_index), (0, 1, 2));
    apply(
        &mut s,
        3,
        reg(&Job {
            priority: 70,
            ..job.clone()
        }),
    );
    let j = s.job("web").unwrap();
    assert_eq!((j.version, j.job_modify_index), (1, 3));
}

#[test]
fn a_count_change_is_a_new_version_but_not_a_new_group_spec() {
    let mut s = State::default();
    let group = |count: u32, v: &str| stampede_proto::TaskGroup {
        name: "web".into(),
        count: Some(count),
        meta: [("v".to_string(), v.to_string())].into(),
        ..Default::default()
    };
    let reg = |tg| LogEntry {
        msg: Some(Msg::JobRegister(JobRegisterEntry {
            ticket: 0,
            job: Some(Job {
                id: "web".into(),
                task_groups: vec![tg],
                ..Default::default()
            }),
            eval: None,
        })),
    };
    apply(&mut s, 1, reg(group(2, "1")));
    apply(&mut s, 2, reg(group(5, "1")));
    let j = s.job("web").unwrap();
    assert_eq!((j.version, j.task_groups[0].spec_version), (1, 0));
    apply(&mut s, 3, reg(group(5, "2")));
    let j = s.job("web").unwrap();
    assert_eq!((j.version, j.task_groups[0].spec_version), (2, 2));
}

#[test]
fn snapshot_round_trip_keeps_rows_indexes_and_lookups() {
    let mut s = State::default();
    apply(&mut s, 1, node_entry("n1"));
    let plan = plan_entry(vec![alloc("a1", "n1", "web")]);
    apply(&mut s, 2, plan);
    let back = State::from_snapshot(s.to_snapshot(), 2);
    assert_eq!(back.node_count(), 1);
    assert_eq!(back.indexes(), s.indexes());
    assert_eq!(back.node_alloc_index("n1"), 2);
    assert_eq!(back.job_allocs("web").len(), 1);
    assert_eq!(back.index(), 2);
}

/// A state with a row of each table: nodes with and without a secret,
/// jobs with evaluations, allocations with task states, a deployment.
fn state_of_every_kind() -> State {
    let mut s = State::default();
    apply(&mut s, 1, node_entry("n1"));
    let mut old = node_entry("n2");
    if let Some(Msg::NodeRegister(e)) = &mut old.msg {
        e.secret_hash.clear();
    }
    apply(&mut s, 2, old);
    let job = Job {
        id: "web".into(),
        priority: 50,
        ..Default::default()
    };
    let eval = stampede_proto::Evaluation {
        id: "e1".into(),
        job_id: "web".into(),
        ..Default::default()
    };
    let reg = LogEntry {
        msg: Some(Msg::JobRegister(JobRegisterEntry {
            ticket: 0,
            job: Some(job),
            eval: Some(eval),
        })),
    };
    apply(&mut s, 3, reg);
    let mut allocs: Vec<Allocation> = (0..50)
        .map(|i| alloc(&uuid::Uuid::from_u128(i).to_string(), "n1", "web"))
        .collect();
    allocs[0].task_states = vec![NamedTaskState {
        task: "server".into(),
        state: Some(stampede_proto::TaskState {
            state: "running".into(),
            ..Default::default()
        }),
    }];
    allocs.push(alloc("not-a-uuid", "n2", "web"));
    let mut plan = plan_entry(allocs);
    if let Some(Msg::PlanApply(p)) = &mut plan.msg {
        p.deployment = Some(stampede_proto::Deployment {
            id: "d1".into(),
            job_id: "web".into(),
            ..Default::default()
        });
    }
    apply(&mut s, 4, plan);
    s
}

#[test]
fn a_snapshot_is_encoded_and_decoded_row_by_row_as_the_whole_message_would_be() {
    use prost::Message;
    let s = state_of_every_kind();
    let whole = s.to_snapshot();
    assert!(
        [
            whole.nodes.len(),
            whole.jobs.len(),
            whole.evals.len(),
            whole.deployments.len()
        ] == [2, 1, 1, 1]
            && whole.allocs.len() == 51
            && whole.node_secrets.len() == 1,
        "a row of every kind: {whole:?}"
    );
    let mut bytes = Vec::new();
    s.encode_snapshot(&mut bytes);
    assert_eq!(bytes, whole.encode_to_vec(), "the same bytes");
    let back = State::decode_snapshot(&bytes, s.index()).unwrap();
    assert_eq!(back.to_snapshot(), whole);
    assert_eq!(back.index(), s.index());
    assert_eq!(back.node_secret("n1"), s.node_secret("n1"));
    assert_eq!(back.node_secret("n2"), None);
    assert_eq!(back.job_allocs("web").len(), 51);
    assert_eq!(*back.job_summary("web"), *s.job_summary("web"));
    assert_eq!(back.node_usage("n1"), s.node_usage("n1"));
    assert_eq!(back.job_alloc_index("web"), s.job_alloc_index("web"));
    for n in ["n1", "n2"] {
        assert_eq!(back.node_alloc_index(n), s.node_alloc_index(n), "{n}");
        assert_eq!(back.node_alloc_map(n), s.node_alloc_map(n), "{n}");
        assert_eq!(back.node_usage(n), s.node_usage(n), "{n}");
    }
    // Rows in another order, and a field of a later version, decode too.
    let mut shuffled = Vec::new();
    prost::encoding::string::encode(99, &"later".to_string(), &mut shuffled);
    for a in whole.allocs.iter().rev() {
        prost::encoding::message::encode(5, a, &mut shuffled);
    }
    let rest = stampede_proto::StateSnapshot {
        allocs: Vec::new(),
        ..whole.clone()
    };
    shuffled.extend(rest.encode_to_vec());
    let back = State::decode_snapshot(&shuffled, s.index()).unwrap();
    assert_eq!(back.to_snapshot(), whole);
    // Bytes that are not a snapshot are refused, as prost refuses them.
    for bad in [
        &[0xff_u8, 0xff, 0xff][..],
        &bytes[..bytes.len() - 1],
        &[0x28, 0x01],
    ] {
        assert!(stampede_proto::StateSnapshot::decode(bad).is_err());
        assert!(State::decode_snapshot(bad, 1).is_err(), "{bad:?}");
    }
}

#[test]
fn a_nodes_secret_is_kept_beside_it_and_only_the_first_one_counts() {
    let mut s = State::default();
    apply(&mut s, 1, node_entry_with("n1", "the-first-secret-1"));
    assert_eq!(s.node_secret("n1"), Some(&hash("the-first-secret-1")));
    // A second registration with another secret that slipped past the
    // leader's check (both prepared before either applied) changes nothing.
    apply(&mut s, 2, node_entry_with("n1", "another-secret-22"));
    assert_eq!(s.node_secret("n1"), Some(&hash("the-first-secret-1")));
    assert_eq!(s.node("n1").unwrap().modify_index, 1);
    // The same secret registers again as ever.
    apply(&mut s, 3, node_entry_with("n1", "the-first-secret-1"));
    assert_eq!(s.node("n1").unwrap().modify_index, 3);
}

#[test]
fn a_registration_from_before_node_identity_keeps_no_secret_and_takes_one_later() {
    let mut s = State::default();
    let mut old = node_entry("n1");
    if let Some(Msg::NodeRegister(e)) = &mut old.msg {
        e.secret_hash.clear();
    }
    apply(&mut s, 1, old.clone());
    assert!(s.has_node("n1"));
    assert_eq!(s.node_secret("n1"), None);
    apply(&mut s, 2, node_entry_with("n1", "a-secret-at-last"));
    assert_eq!(s.node_secret("n1"), Some(&hash("a-secret-at-last")));
    // An old entry again (a log replayed) leaves it.
    apply(&mut s, 3, old);
    assert_eq!(s.node_secret("n1"), Some(&hash("a-secret-at-last")));
}

#[test]
fn secrets_survive_a_snapshot_and_an_old_snapshot_loads_without_them() {
    let mut s = State::default();
    apply(&mut s, 1, node_entry("n1"));
    apply(&mut s, 2, node_entry("n2"));
    let snap = s.to_snapshot();
    assert_eq!(snap.node_secrets.len(), 2);
    // Never in the node rows a read returns.
    let bytes = prost::Message::encode_to_vec(&snap.nodes[0]);
    let h = hash("secret-of-node-n1");
    assert!(!bytes.windows(h.len()).any(|w| w == h));
    let restored = State::from_snapshot(snap.clone(), s.index());
    assert_eq!(restored.node_secret("n2"), Some(&hash("secret-of-node-n2")));
    assert_eq!(restored.to_snapshot(), snap);
    let old = stampede_proto::StateSnapshot {
        node_secrets: Vec::new(),
        ..snap
    };
    let restored = State::from_snapshot(old, s.index());
    assert!(restored.has_node("n1"));
    assert_eq!(restored.node_secret("n1"), None);
}

#[test]
fn a_lost_or_finished_allocation_stays_so_whatever_its_client_reports() {
    let mut s = a1_and_a2_on_n1();
    apply(
        &mut s,
        3,
        statuses(&[
            ("a1", AllocClientStatus::Running),
            ("a2", AllocClientStatus::Complete),
        ]),
    );
    // The node goes down: its running allocation is lost.
    apply(&mut s, 4, node_down_entry("n1"));
    let lost = s.alloc("a1").unwrap();
    assert_eq!(lost.client_status, AllocClientStatus::Lost as i32);
    // The node wakes and reports both as running, from before it went down.
    apply(
        &mut s,
        5,
        statuses(&[
            ("a1", AllocClientStatus::Running),
            ("a2", AllocClientStatus::Running),
        ]),
    );
    assert_eq!(s.alloc("a1").unwrap(), lost, "a lost allocation came back");
    let done = s.alloc("a2").unwrap();
    assert_eq!(done.client_status, AllocClientStatus::Complete as i32);
    assert_eq!(done.modify_index, 3, "a finished allocation took a report");
    let web = s.job_summary("web");
    let running = web
        .iter()
        .filter(|((_, _, client), _)| *client == AllocClientStatus::Running as i32)
        .count();
    assert_eq!(
        running, 0,
        "the job's summary counts a revived allocation: {web:?}"
    );
}

/// What node `node_id`'s live allocations hold, each one visited.
fn walked_usage(s: &State, node_id: &str) -> Resources {
    let mut used = Resources::default();
    for a in s.node_allocs(node_id) {
        if !crate::model::alloc_terminal(&a) {
            let r = a.resources.unwrap_or_default();
            used.cpu_mhz += r.cpu_mhz;
            used.memory_mb += r.memory_mb;
        }
    }
    used
}

/// The usage kept per node follows every way an allocation is stored,
/// reported, lost, collected and restored from a snapshot: after each of
/// a few thousand random entries it is what a walk over the node's
/// allocations sums.
#[test]
fn a_nodes_usage_is_kept_as_its_allocations_change() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use stampede_proto::{GcEvalsEntry, GcJobsEntry};
    let mut rng = StdRng::seed_from_u64(40);
    let nodes = ["n0", "n1", "n2"];
    let desired = [AllocDesiredStatus::Run, AllocDesiredStatus::Stop];
    let client = [
        AllocClientStatus::Pending,
        AllocClientStatus::Running,
        AllocClientStatus::Complete,
        AllocClientStatus::Failed,
        AllocClientStatus::Lost,
    ];
    let mut s = State::default();
    for (i, n) in nodes.iter().enumerate() {
        apply(&mut s, i as u64 + 1, node_entry(n));
    }
    for index in 10..3000 {
        let id = |rng: &mut StdRng| format!("a{}", rng.gen_range(0..40));
        let entry = match rng.gen_range(0..10) {
            0..=3 => plan_entry(
                (0..rng.gen_range(1..6))
                    .map(|_| {
                        let id = id(&mut rng);
                        let node = nodes[id[1..].parse::<usize>().unwrap() % nodes.len()];
                        Allocation {
                            desired_status: desired[rng.gen_range(0..desired.len())] as i32,
                            resources: Some(Resources {
                                cpu_mhz: rng.gen_range(1..400),
                                memory_mb: rng.gen_range(1..400),
                            }),
                            ..alloc(&id, node, "web")
                        }
                    })
                    .collect(),
            ),
            4..=7 => {
                let reports: Vec<(String, AllocClientStatus)> = (0..rng.gen_range(1..6))
                    .map(|_| (id(&mut rng), client[rng.gen_range(0..client.len())]))
                    .collect();
                let reports: Vec<(&str, AllocClientStatus)> =
                    reports.iter().map(|(i, c)| (i.as_str(), *c)).collect();
                statuses(&reports)
            }
            8 if rng.gen_bool(0.3) => node_down_entry(nodes[rng.gen_range(0..nodes.len())]),
            8 => LogEntry {
                msg: Some(Msg::GcJobs(GcJobsEntry {
                    job_ids: vec!["web".into()],
                })),
            },
            _ => LogEntry {
                msg: Some(Msg::GcEvals(GcEvalsEntry {
                    eval_ids: vec![],
                    alloc_ids: (0..rng.gen_range(1..8)).map(|_| id(&mut rng)).collect(),
                })),
            },
        };
        apply(&mut s, index, entry);
        for n in nodes {
            assert_eq!(
                s.node_usage(n),
                walked_usage(&s, n),
                "{n} after entry {index}"
            );
        }
    }
    let back = State::from_snapshot(s.to_snapshot(), 3000);
    for n in nodes {
        assert_eq!(back.node_usage(n), walked_usage(&s, n), "{n} restored");
    }
}

#[test]
fn a_plan_does_not_bring_back_a_collected_allocation_with_its_stale_client_status() {
    let mut s = State::default();
    apply(&mut s, 1, node_entry("n1"));
    apply(&mut s, 2, plan_entry(vec![alloc("a1", "n1", "web")]));
    apply(&mut s, 3, statuses(&[("a1", AllocClientStatus::Running)]));
    // What a scheduler read of it, running, before it was lost and collected.
    let seen = Allocation::clone(&s.alloc("a1").unwrap());
    assert_eq!(seen.create_index, 2);
    apply(&mut s, 4, node_down_entry("n1"));
    let gc = LogEntry {
        msg: Some(Msg::GcEvals(stampede_proto::GcEvalsEntry {
            alloc_ids: vec!["a1".into()],
            ..Default::default()
        })),
    };
    apply(&mut s, 5, gc);
    assert!(s.alloc("a1").is_none(), "collected");
    // Its in-place update, made from the stale copy, arrives after.
    let stale = Allocation {
        job_version: 1,
        ..seen.clone()
    };
    let c = apply(&mut s, 6, plan_entry(vec![stale]));
    assert!(s.alloc("a1").is_none(), "brought back: {:?}", s.alloc("a1"));
    assert_eq!(c.refused.plan_collected, 1);
    // A new placement (no create index: the scheduler made it) is stored.
    let c = apply(&mut s, 7, plan_entry(vec![alloc("a2", "n1", "web")]));
    assert_eq!(c.refused, RefusedReports::default());
    assert_eq!(s.alloc("a2").unwrap().create_index, 7);
}
