//! The pipelined plan applier on a real 3-process cluster. Plans that each
//! fit alone but not together, checked while earlier plans commit (and,
//! with raft batching on, written together), never overcommit a node,
//! including across a leader change in the middle of them, also when each
//! plan goes in pieces; and a system job on every node, in pieces, runs
//! everywhere.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{heartbeat, live, register_nodes};
use futures::future::join_all;
use stampede_launch::testing::{
    allocs, eventually_ok, register_job, service_job, Harness, CATCH_UP,
};
use stampede_proto::{AllocClientStatus, AllocDesiredStatus, Job, JobType};

/// Node capacity and the size of each job's one allocation: any node takes
/// two, never three.
const NODE_MHZ: u64 = 1000;
const ALLOC_MHZ: u64 = 400;
const NODES: usize = 3;
const JOBS: usize = 40;

async fn contended_plans_never_overcommit(args: &[&str], count: u32) {
    let mut all_args = vec!["--workers", "4"];
    all_args.extend_from_slice(args);
    let (mut c, leader) = Harness::with_leader(3, &all_args).await;
    let client = c.client();
    let nodes = register_nodes(&client, "n", NODES, NODE_MHZ, 4096).await;
    let _hb = heartbeat(&client, nodes, Duration::from_secs(1));

    let register = |ids: std::ops::Range<usize>| {
        let client = client.clone();
        async move {
            join_all(ids.map(|i| {
                let client = client.clone();
                async move {
                    let job = service_job(&format!("j{i}"), count, ALLOC_MHZ, 64);
                    register_job(&client, job).await
                }
            }))
            .await
        }
    };
    // Half the jobs, all at once: a dozen workers plan them on the same
    // few nodes at the same time.
    register(0..JOBS / 2).await;
    let rejected_before = c
        .metric(leader, "stampede_plan_nodes_rejected_total")
        .await
        .unwrap_or(0.0);
    // The leader dies with plans queued and in flight; the rest of the jobs
    // go to its successor.
    c.kill(leader).unwrap();
    let successor = c.leader().await;
    assert_ne!(successor, leader);
    register(JOBS / 2..JOBS).await;

    let slots = NODES * (NODE_MHZ / ALLOC_MHZ) as usize;
    let survivors = c.ids_except(leader);
    for id in survivors.clone() {
        let view = c.client_of(&[id]);
        let usage = eventually_ok(
            &format!("server {id} shows every slot taken and no more"),
            CATCH_UP,
            || async {
                let mut per_node: BTreeMap<String, u64> = BTreeMap::new();
                let mut placed = 0;
                for i in 0..JOBS {
                    let all = allocs(&view, &format!("j{i}"))
                        .await
                        .map_err(|e| e.to_string())?;
                    for a in live(&all) {
                        placed += 1;
                        *per_node.entry(a.node_id.clone()).or_default() +=
                            a.resources.as_ref().map_or(0, |r| r.cpu_mhz);
                    }
                }
                // Checked on every reading, not only the last: an
                // overcommit that a later stop hid would still fail here.
                if let Some((node, mhz)) = per_node.iter().find(|(_, m)| **m > NODE_MHZ) {
                    return Ok(Err(format!(
                        "node {node} holds {mhz} MHz of {NODE_MHZ}: {per_node:?}"
                    )));
                }
                if placed == slots {
                    Ok(Ok(per_node))
                } else {
                    Err(format!("{placed} of {slots} slots taken: {per_node:?}"))
                }
            },
        )
        .await;
        let usage = usage.unwrap_or_else(|e| panic!("server {id}: {e}"));
        assert_eq!(usage.len(), NODES, "every node is used: {usage:?}");
    }
    // The case was really exercised: some plans were refused because an
    // earlier one (in flight or already written) took their room.
    let mut rejected = rejected_before;
    for id in survivors {
        rejected += c
            .metric(id, "stampede_plan_nodes_rejected_total")
            .await
            .unwrap_or(0.0);
    }
    assert!(
        rejected > 0.0,
        "no plan was refused: the plans did not contend"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn contended_plans_never_overcommit_with_batching() {
    contended_plans_never_overcommit(&["--raft-batching", "on"], 1).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn contended_plans_never_overcommit_one_plan_per_entry() {
    contended_plans_never_overcommit(&["--raft-batching", "off"], 1).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn contended_plans_in_pieces_never_overcommit() {
    // Each job's plan of two allocations goes as two pieces of one.
    contended_plans_never_overcommit(&["--plan-max-allocs", "1"], 2).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_system_job_in_pieces_runs_on_every_node() {
    const NODES: usize = 20;
    let args = ["--plan-max-allocs", "3", "--raft-batching", "off"];
    let (c, leader) = Harness::with_leader(3, &args).await;
    let client = c.client();
    let nodes = register_nodes(&client, "s", NODES, 1000, 4096).await;
    let _hb = heartbeat(&client, nodes, Duration::from_secs(1));
    let plan_entries = "stampede_raft_entries_total{type=\"plan_apply\"}";
    let before = c.metric(leader, plan_entries).await.unwrap_or(0.0);
    let job = Job {
        r#type: JobType::System as i32,
        ..service_job("everywhere", 1, 100, 64)
    };
    register_job(&client, job).await;
    let placed = eventually_ok("one allocation on every node", CATCH_UP, || async {
        let all = allocs(&client, "everywhere")
            .await
            .map_err(|e| e.to_string())?;
        let on: std::collections::BTreeSet<_> =
            live(&all).iter().map(|a| a.node_id.clone()).collect();
        match (on.len(), live(&all).len()) {
            (NODES, NODES) => Ok(all.len()),
            other => Err(format!("(nodes, allocations): {other:?}")),
        }
    })
    .await;
    assert_eq!(placed, NODES, "no allocation twice");
    // Twenty placements, three a piece: at least seven plan entries.
    let pieces = c.metric(leader, plan_entries).await.unwrap_or(0.0) - before;
    assert!(pieces >= 7.0, "{pieces} plan entries");
}

/// Each server applies every entry 600 ms after it commits, and a write
/// gives up after 200 ms: every write is answered before it takes effect.
/// The plan applier must not take its own entry's time-out for a failure:
/// its worker, told the plan failed, would give the evaluation back, and
/// the next worker, scheduling on a state without the first plan, would
/// place the job's allocations a second time (the scheduler stops such
/// duplicates once it sees them, if another evaluation of the job comes).
/// The clients' own writes time out here too, and take effect all the
/// same: the test looks for their effects, not their answers.
#[tokio::test(flavor = "multi_thread")]
async fn a_plan_that_commits_after_its_write_gave_up_is_placed_once() {
    let args = [
        "--apply-delay",
        "600ms",
        "--leader-wait-ms",
        "200",
        "--eval-nack-initial-delay",
        "0s",
    ];
    let (c, leader) = Harness::with_leader(3, &args).await;
    let client = c.client();
    let node = stampede_launch::testing::node_with("n-0", NODE_MHZ, 4096);
    let _ = stampede_launch::testing::register_node(&client, node).await;
    common::eventually_has_node(&client, "n-0").await;
    let _hb = heartbeat(&client, vec!["n-0".into()], Duration::from_secs(1));
    let _ = client.register_job(service_job("web", 2, 100, 64)).await;
    common::wait_live(&client, "web", 2).await;
    // Settled: nothing left to schedule, and every plan's entry applied.
    eventually_ok("the leader's broker is empty", CATCH_UP, || async {
        let mut busy = 0.0;
        for series in [
            "stampede_broker_unacked",
            "stampede_broker_ready",
            "stampede_plan_queue_depth",
        ] {
            busy += c.metric(leader, series).await.map_err(|e| e.to_string())?;
        }
        (busy == 0.0)
            .then_some(())
            .ok_or(format!("{busy} evaluations or plans left"))
    })
    .await;
    let all = stampede_launch::testing::allocs(&client, "web")
        .await
        .unwrap();
    let mut indexes: Vec<u32> = live(&all).iter().map(|a| a.index).collect();
    indexes.sort();
    assert_eq!(indexes, [0, 1], "each index live once");
    // Nor was any placed twice and the extra stopped later: every
    // allocation stopped was lost with its node (which the slow writes
    // here may have marked down).
    let stopped: Vec<_> = all
        .iter()
        .filter(|a| {
            a.desired_status == AllocDesiredStatus::Stop as i32
                && a.client_status != AllocClientStatus::Lost as i32
        })
        .map(|a| (a.index, &a.desired_description))
        .collect();
    assert!(
        stopped.is_empty(),
        "placed twice, then stopped: {stopped:?}"
    );
}
