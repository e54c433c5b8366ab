//! Deployments on a real cluster, run by a real simulated fleet: rolling
//! updates in rounds, deployments of a scale up and down, and what the
//! deployment watcher's two query modes cost.

use crate::common;

use std::cell::RefCell;

use common::{fleet, job, ready_nodes, running};
use stampede_launch::testing::{allocs, eventually_ok, register_job, Harness, CATCH_UP};
use stampede_proto::client::ClusterClient;
use stampede_proto::{
    AllocDesiredStatus, Deployment, DeploymentStatus, Job, JobDeploymentsRequest, UpdateStrategy,
};

const WATCHER_QUERIES: &str =
    "stampede_blocking_queries_started_total{source=\"deployment_watcher\"}";

/// A service job whose group rolls out `max_parallel` at a time, each
/// allocation healthy `min_healthy_ms` after it runs; `version` changes its spec.
fn rolling_job(id: &str, count: u32, max_parallel: u32, min_healthy_ms: u64, version: &str) -> Job {
    let mut j = job(id, count, "dc1");
    let g = &mut j.task_groups[0];
    g.update = Some(UpdateStrategy {
        max_parallel,
        min_healthy_time_ms: min_healthy_ms,
        progress_deadline_ms: 120_000,
        ..Default::default()
    });
    g.meta.insert("version".into(), version.into());
    j
}

async fn deployments(client: &ClusterClient, job_id: &str) -> Vec<Deployment> {
    client
        .retrying(|c| async move {
            Ok(c.deployments()
                .for_job(JobDeploymentsRequest {
                    job_id: job_id.into(),
                    query: None,
                })
                .await?
                .into_inner()
                .deployments)
        })
        .await
        .unwrap_or_default()
}

/// How a deployment stands, for a failure message: its version, status and
/// each group's healthy of desired.
fn standing(d: &Deployment) -> String {
    let status = DeploymentStatus::try_from(d.status).unwrap_or_default();
    let groups: Vec<String> = d
        .task_groups
        .iter()
        .map(|(name, g)| format!("{name} {}/{} healthy", g.healthy, g.desired_total))
        .collect();
    format!(
        "v{} {} ({})",
        d.job_version,
        status.label(),
        groups.join(", ")
    )
}

/// Waits until the job's deployment for `version` has ended, and returns it.
async fn finished(client: &ClusterClient, job_id: &str, version: u64) -> Deployment {
    let what = format!("the deployment of {job_id} v{version} ends");
    eventually_ok(&what, CATCH_UP, || async {
        let ds = deployments(client, job_id).await;
        let seen: Vec<String> = ds.iter().map(standing).collect();
        let seen = seen.join("; ");
        ds.into_iter()
            .find(|d| d.job_version == version && d.status != DeploymentStatus::Running as i32)
            .ok_or(seen)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_of_20_by_5_takes_4_rounds() {
    let (h, _) = Harness::with_leader(3, &[]).await;
    let client = h.client();
    let fleet = fleet(&h, &["--nodes", "10"]).await;
    ready_nodes(&h, 10.0).await;
    register_job(&client, rolling_job("web", 20, 5, 300, "1")).await;
    let first = finished(&client, "web", 0).await;
    assert_eq!(
        first.status,
        DeploymentStatus::Successful as i32,
        "{first:?}"
    );

    register_job(&client, rolling_job("web", 20, 5, 300, "2")).await;
    // Follow the deployment: every round shows as more allocations placed.
    let seen: RefCell<Vec<u32>> = RefCell::default();
    let done = eventually_ok("the rolling update ends", CATCH_UP, || async {
        let ds = deployments(&client, "web").await;
        let d = ds
            .into_iter()
            .find(|d| d.job_version == 1)
            .ok_or("no deployment of v1 yet")?;
        let placed = d.task_groups["app"].placed;
        let mut seen = seen.borrow_mut();
        // 0 until the watcher first counts the placements. Reads go to any
        // server, and a follower that has not applied the latest round yet
        // shows an older count: only a count above the highest seen is a
        // new round.
        if placed > seen.last().copied().unwrap_or(0) {
            seen.push(placed);
        }
        if d.status != DeploymentStatus::Running as i32 {
            Ok(d)
        } else {
            Err(format!("rounds so far: {seen:?}"))
        }
    })
    .await;
    let seen = seen.into_inner();
    assert_eq!(done.status, DeploymentStatus::Successful as i32, "{done:?}");
    assert_eq!(
        seen,
        vec![5, 10, 15, 20],
        "rounds as the deployment showed them"
    );
    assert_eq!(done.task_groups["app"].healthy, 20);
    let live = running(&client, "web", 20).await;
    assert_eq!(
        live.iter()
            .filter(|a| a.job_version == 1 && a.deployment_id == done.id)
            .count(),
        20
    );
    fleet.shutdown().await;
}

/// Re-registers `web` with `count` allocations, nothing else changed, and
/// waits for the deployment of `version` to end successful, counting every
/// allocation, all of them running healthy on that version and deployment.
async fn scale(client: &ClusterClient, count: u32, version: u64) {
    register_job(client, rolling_job("web", count, 2, 300, "1")).await;
    let d = finished(client, "web", version).await;
    assert_eq!(d.status, DeploymentStatus::Successful as i32, "{d:?}");
    let g = &d.task_groups["app"];
    assert_eq!(
        (g.desired_total, g.placed, g.healthy),
        (count, count, count)
    );
    // `running` waits for exactly `count` healthy: scaled-down ones may
    // still be stopping.
    let live = running(client, "web", count as usize).await;
    let current: Vec<_> = live
        .iter()
        .filter(|a| a.desired_status == AllocDesiredStatus::Run as i32)
        .collect();
    assert_eq!(current.len(), count as usize);
    for a in current {
        assert_eq!((a.job_version, &a.deployment_id), (version, &d.id), "{a:?}");
    }
}

/// Issue 48: a scale-up's deployment counted only the new allocations and
/// ran for ever. The kept ones move onto it in place, so it ends; and so
/// does a scale-down's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_after_a_scale_up_or_down_counts_the_kept_allocations() {
    let (h, _) = Harness::with_leader(3, &[]).await;
    let client = h.client();
    let fleet = fleet(&h, &["--nodes", "4"]).await;
    ready_nodes(&h, 4.0).await;
    register_job(&client, rolling_job("web", 3, 2, 300, "1")).await;
    let first = finished(&client, "web", 0).await;
    assert_eq!(
        first.status,
        DeploymentStatus::Successful as i32,
        "{first:?}"
    );
    let kept: Vec<String> = running(&client, "web", 3)
        .await
        .into_iter()
        .map(|a| a.id)
        .collect();

    scale(&client, 5, 1).await;
    // Reads go to any server: one may not have applied the latest yet.
    eventually_ok("the kept allocations run on v1", CATCH_UP, || async {
        let after = allocs(&client, "web").await.unwrap_or_default();
        let moved = kept
            .iter()
            .filter(|id| after.iter().any(|a| &&a.id == id && a.job_version == 1))
            .count();
        if moved == kept.len() {
            Ok(())
        } else {
            Err(format!("{moved} of {} kept ones on v1", kept.len()))
        }
    })
    .await;
    scale(&client, 2, 2).await;
    fleet.shutdown().await;
}

/// Deployment-watcher queries the leader started while `n` deployments ran
/// at once (each job's first version, two allocations one at a time).
async fn queries_for(h: &mut Harness, client: &ClusterClient, n: usize) -> f64 {
    let leader = h.leader().await;
    let before = h.metric(leader, WATCHER_QUERIES).await.unwrap();
    let ids: Vec<String> = (0..n).map(|i| format!("d{n}-{i}")).collect();
    let registers = ids
        .iter()
        .map(|id| register_job(client, rolling_job(id, 2, 1, 200, "1")));
    futures::future::join_all(registers).await;
    for id in &ids {
        let d = finished(client, id, 0).await;
        assert_eq!(d.status, DeploymentStatus::Successful as i32, "{d:?}");
    }
    assert_eq!(h.leader().await, leader, "no leader change");
    h.metric(leader, WATCHER_QUERIES).await.unwrap() - before
}

async fn watcher_costs(mode: &str) -> Vec<f64> {
    watcher_costs_at(mode, &[5, 10, 20], 20).await
}

/// Queries started for each number of concurrent deployments in `sizes`,
/// on a cluster whose watchers run in `mode`, with a fleet of `nodes`.
async fn watcher_costs_at(mode: &str, sizes: &[usize], nodes: u64) -> Vec<f64> {
    let (mut h, _) = Harness::with_leader(
        3,
        &[
            "--deployment-watcher",
            mode,
            // The limiter's waits are not under test here; counts are.
            "--deployment-query-rate",
            "100000",
        ],
    )
    .await;
    let client = h.client();
    let fleet = fleet(&h, &["--nodes", &nodes.to_string()]).await;
    ready_nodes(&h, nodes as f64).await;
    let mut costs = Vec::new();
    for &n in sizes {
        costs.push(queries_for(&mut h, &client, n).await);
    }
    fleet.shutdown().await;
    costs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_watchers_query_quadratically_more_than_fixed() {
    let fixed = watcher_costs("fixed").await;
    let legacy = watcher_costs("legacy").await;
    eprintln!(
        "deployment watcher queries at 5, 10, 20 deployments: fixed {fixed:?}, legacy {legacy:?}"
    );
    for i in 0..3 {
        assert!(legacy[i] > fixed[i], "legacy {legacy:?} vs fixed {fixed:?}");
    }
    // Fixed grows with the number of deployments; legacy with its square,
    // so the gap between them grows faster than linearly.
    let gap: Vec<f64> = (0..3).map(|i| legacy[i] - fixed[i]).collect();
    assert!(
        gap[2] / gap[0] > 4.0,
        "the gap grew {:.1}x from 5 to 20 deployments (gaps {gap:?})",
        gap[2] / gap[0]
    );
}

/// BENCHMARKS.md's figures: deployment-watcher queries per deployment at 10,
/// 50 and 100 concurrent deployments. Run with
/// `cargo test --release -p nodesim --test integration -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement for BENCHMARKS.md, minutes long"]
async fn measure_watcher_queries_per_deployment() {
    let sizes = [10, 50, 100];
    for mode in ["fixed", "legacy"] {
        let costs = watcher_costs_at(mode, &sizes, 100).await;
        for (n, q) in sizes.iter().zip(&costs) {
            println!(
                "{mode}: {n} deployments, {q} queries, {:.1} per deployment",
                q / *n as f64
            );
        }
    }
}
