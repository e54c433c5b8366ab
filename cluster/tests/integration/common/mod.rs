//! What only the `cluster` tests share: nodes kept alive by heartbeats,
//! allocations that count as live, and the workers' states. The cluster
//! itself, waiting and the usual builders are `stampede_launch::testing`.

#![allow(dead_code)] // each test file uses its own part

use std::time::Duration;

use stampede_launch::testing::{
    allocs, eventually, eventually_ok, node_with, register_job, register_node, secret_of,
    service_job, Harness, CATCH_UP,
};
use stampede_proto::client::ClusterClient;
use stampede_proto::{
    AllocClientStatus, AllocDesiredStatus, Allocation, JobListRequest, NodeGetRequest,
    NodeListRequest, NodeStatus, NodeUpdateStatusRequest,
};
use tokio::sync::watch;
use tonic::{Code, Status};

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
                    secret_id: secret_of(id),
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
        register_node(client, node_with(&id, cpu, mem))
            .await
            .unwrap();
        ids.push(id);
    }
    ids
}

/// Waits until the server(s) of `client` have node `id` registered.
pub async fn eventually_has_node(client: &ClusterClient, id: &str) {
    let what = format!("node {id} is registered here");
    eventually(&what, CATCH_UP, || async {
        let req = NodeGetRequest { node_id: id.into() };
        client.nodes().get(req).await.is_ok()
    })
    .await;
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
        // NotFound from a server that has not applied the job yet: not yet.
        let all = allocs(client, job).await.map_err(|e| e.to_string())?;
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

/// Longest error message a refusal may carry: one that quotes a value
/// quotes a short prefix of it, so the status fits a client's metadata.
pub const MAX_ERROR_LEN: usize = 512;

/// Checks that `result` was refused with `code` and a message that starts
/// with `field` (the field's path, or the message type for bytes that do
/// not decode) and stays short.
pub fn assert_refused<T: std::fmt::Debug>(
    what: &str,
    result: Result<T, Status>,
    code: Code,
    field: &str,
) {
    let status = match result {
        Ok(v) => panic!("{what}: accepted ({v:?}); expected {code:?} naming {field}"),
        Err(s) => s,
    };
    let message = status.message();
    assert_eq!(status.code(), code, "{what}: {message}");
    assert!(
        message.starts_with(field),
        "{what}: {message:?} should start with {field:?}"
    );
    assert!(
        message.len() <= MAX_ERROR_LEN,
        "{what}: a message of {} bytes: {:?}...",
        message.len(),
        message.chars().take(MAX_ERROR_LEN).collect::<String>()
    );
}

/// After a barrage of bad input: every server is still up, raft runs
/// (not `Shutdown`) and the servers agree on a leader; every node and job
/// that any server stored passes validation; and a normal job on fresh
/// nodes still gets placed.
pub async fn still_serves(c: &mut Harness, label: &str) {
    for id in c.ids() {
        assert!(c.is_running(id), "server {id} exited:\n{}", c.log(id));
    }
    c.leader().await;
    for id in c.ids() {
        let s = c.status(id).await.unwrap();
        assert_ne!(s.state, "Shutdown", "server {id}'s raft stopped");
        assert!(s.term < 1 << 32, "server {id} is at term {}", s.term);
        let one = c.client_of(&[id]);
        let nodes = one.nodes().list(NodeListRequest::default()).await.unwrap();
        for n in nodes.into_inner().nodes {
            let checked = cluster::model::validate::node(Some(&n));
            assert!(checked.is_ok(), "server {id} stored {n:?}: {checked:?}");
        }
        let jobs = one.jobs().list(JobListRequest::default()).await.unwrap();
        for j in jobs.into_inner().jobs {
            let checked = cluster::model::validate::job(Some(&j));
            assert!(checked.is_ok(), "server {id} stored {j:?}: {checked:?}");
        }
    }
    let client = c.client();
    register_nodes(&client, &format!("{label}-node"), 2, 4000, 8192).await;
    let job = format!("{label}-job");
    register_job(&client, service_job(&job, 3, 100, 64)).await;
    wait_live(&client, &job, 3).await;
}

/// Parks `n` job-list queries on `client`'s one connection (each waiting
/// for an index the cluster will not reach), and returns them running and
/// a channel of the refusals as they come.
pub fn flood(
    client: &ClusterClient,
    n: usize,
) -> (
    Vec<tokio::task::JoinHandle<()>>,
    tokio::sync::mpsc::UnboundedReceiver<tonic::Status>,
) {
    let (refused, refusals) = tokio::sync::mpsc::unbounded_channel();
    let parked = (0..n)
        .map(|_| {
            let (client, refused) = (client.clone(), refused.clone());
            tokio::spawn(async move {
                let query = stampede_proto::QueryOptions {
                    min_index: 1 << 40,
                    max_wait_ms: 120_000,
                    source: "other".into(),
                };
                let req = stampede_proto::JobListRequest { query: Some(query) };
                if let Err(status) = client.jobs().list(req).await {
                    let _ = refused.send(status);
                }
            })
        })
        .collect();
    (parked, refusals)
}
