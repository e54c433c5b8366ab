//! What only the `cluster` tests share: nodes kept alive by heartbeats,
//! allocations that count as live, and the workers' states. The cluster
//! itself, waiting and the usual builders are `stampede_launch::testing`.

#![allow(dead_code)] // each test file uses its own part

use std::time::Duration;

use stampede_launch::testing::{allocs, eventually_ok, node_with, CATCH_UP};
use stampede_proto::client::ClusterClient;
use stampede_proto::{
    AllocClientStatus, AllocDesiredStatus, Allocation, NodeStatus, NodeUpdateStatusRequest,
};
use tokio::sync::watch;

/// Keeps nodes alive: heartbeats each of them every `every` until the
/// returned sender is dropped or sends `true`.
pub fn heartbeat(client: &ClusterClient, ids: Vec<String>, every: Duration) -> watch::Sender<bool> {
    let (stop, rx) = watch::channel(false);
    let client = client.clone();
    tokio::spawn(async move {
        while !*rx.borrow() {
            for id in &ids {
                let req = NodeUpdateStatusRequest {
                    node_id: id.clone(),
                    status: NodeStatus::Ready as i32,
                };
                let _ = client.nodes().update_status(req).await;
            }
            tokio::time::sleep(every).await;
        }
    });
    stop
}

/// Registers nodes `{prefix}-0` to `{prefix}-{n-1}`, each with `cpu` MHz and
/// `mem` MB; returns their ids.
pub async fn register_nodes(
    client: &ClusterClient,
    prefix: &str,
    n: usize,
    cpu: u64,
    mem: u64,
) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let id = format!("{prefix}-{i}");
        client
            .register_node(node_with(&id, cpu, mem))
            .await
            .unwrap();
        ids.push(id);
    }
    ids
}

/// The allocations meant to run that have not ended: pending or running.
pub fn live(allocs: &[Allocation]) -> Vec<&Allocation> {
    allocs
        .iter()
        .filter(|a| {
            a.desired_status == AllocDesiredStatus::Run as i32
                && matches!(
                    AllocClientStatus::try_from(a.client_status),
                    Ok(AllocClientStatus::Pending | AllocClientStatus::Running)
                )
        })
        .collect()
}

/// Waits until `job` has exactly `n` live allocations; returns all of them.
pub async fn wait_live(client: &ClusterClient, job: &str, n: usize) -> Vec<Allocation> {
    let what = format!("job {job} has {n} live allocations");
    eventually_ok(&what, CATCH_UP, || async {
        let all = allocs(client, job).await.unwrap();
        if live(&all).len() == n {
            return Ok(all);
        }
        Err(format!(
            "{} live; (node, desired, client status): {:?}",
            live(&all).len(),
            all.iter()
                .map(|a| (&a.node_id, a.desired_status, a.client_status))
                .collect::<Vec<_>>()
        ))
    })
    .await
}

/// The state of every scheduler worker of the server at `http`, as its
/// `GET /v1/workers` lists them (`paused`, `backing_off`, ...); an error if
/// the call fails or the answer has no list of workers.
pub async fn worker_states(http: &reqwest::Client, url: &str) -> Result<Vec<String>, String> {
    let v: serde_json::Value =
        async { http.get(url).send().await?.error_for_status()?.json().await }
            .await
            .map_err(|e: reqwest::Error| e.to_string())?;
    let workers = v["workers"]
        .as_array()
        .ok_or_else(|| format!("no list of workers in {v}"))?;
    Ok(workers
        .iter()
        .map(|w| w["state"].as_str().unwrap_or_default().to_string())
        .collect())
}
