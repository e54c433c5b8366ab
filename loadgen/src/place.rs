//! `loadgen place`: scheduler throughput. Registers a fleet of nodes (kept
//! alive with heartbeats), submits jobs, and follows each through blocking
//! queries until all its allocations are placed; reports placements per
//! second from the first submission to the last placement.

use std::time::{Duration, Instant};

use clap::Args;
use futures::stream::{self, StreamExt};
use serde::Serialize;
use stampede_proto::address::{ServerAddresses, ADDRESS_ARG};
use stampede_proto::client::{ClientError, ClusterClient};
use stampede_proto::node_secret::NodeKey;
use stampede_proto::{
    AllocDesiredStatus, Job, JobAllocationsRequest, JobType, Node, NodeStatus,
    NodeUpdateStatusRequest, QueryOptions, Resources, TaskGroup,
};

/// How long one read for a job's placements blocks on the server.
const PLACE_WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Args)]
#[command(mut_arg(ADDRESS_ARG, |a| a.required(true)))]
pub struct PlaceOpts {
    /// Servers' gRPC addresses, comma-separated (HOST:PORT,...).
    #[command(flatten)]
    pub servers: ServerAddresses,
    /// TLS files and the ACL token to present (or STAMPEDE_TLS_* and STAMPEDE_TOKEN).
    #[command(flatten)]
    pub security: stampede_proto::security::ClientSecurityArgs,
    /// Nodes to register (ids place-node-RUN-0, place-node-RUN-1, ..., RUN
    /// new each run: a node's secret is derived from a key of the run).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub nodes: u64,
    /// Jobs to submit, all at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub jobs: u64,
    /// Allocations per job.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub count: u32,
    /// CPU each allocation asks for, in MHz (nodes offer 4000).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=4000))]
    pub cpu_mhz: u64,
    /// Give up after this long.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct PlaceReport {
    pub nodes: u64,
    pub jobs: u64,
    pub allocations: u64,
    pub seconds: f64,
    pub placements_per_second: f64,
}

impl std::fmt::Display for PlaceReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} allocations ({} jobs) on {} nodes in {:.2}s: {:.0} placements/s",
            self.allocations, self.jobs, self.nodes, self.seconds, self.placements_per_second
        )
    }
}

pub async fn run(opts: PlaceOpts) -> anyhow::Result<PlaceReport> {
    let client = ClusterClient::new(&opts.servers, &opts.security.load()?)?;
    // New ids each run: the nodes of an earlier run are that run's own.
    let run: u32 = rand::random();
    let ids: Vec<String> = (0..opts.nodes)
        .map(|i| format!("place-node-{run:08x}-{i}"))
        .collect();
    let key = NodeKey::random();
    let results: Vec<Result<u64, ClientError>> = stream::iter(ids.clone())
        .map(|id| {
            let client = client.clone();
            let secret = key.secret(&id);
            async move {
                client
                    .register_node(
                        Node {
                            name: id.clone(),
                            id,
                            datacenter: "dc1".into(),
                            resources: Some(Resources {
                                cpu_mhz: 4000,
                                memory_mb: 16384,
                            }),
                            ..Default::default()
                        },
                        &secret,
                    )
                    .await
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    if let Some(Err(e)) = results.into_iter().find(|r| r.is_err()) {
        anyhow::bail!("registering nodes: {e}");
    }
    let heartbeats = tokio::spawn(heartbeat_forever(client.clone(), ids, key));

    let start = Instant::now();
    let jobs: Vec<String> = (0..opts.jobs)
        .map(|j| format!("place-{}-{j}", std::process::id()))
        .collect();
    let outcome = tokio::time::timeout(
        opts.timeout,
        stream::iter(jobs.clone())
            .map(|id| place_job(client.clone(), id, opts.count, opts.cpu_mhz))
            .buffer_unordered(256)
            .collect::<Vec<_>>(),
    )
    .await;
    let seconds = start.elapsed().as_secs_f64();
    heartbeats.abort();
    let outcome = outcome
        .map_err(|_| anyhow::anyhow!("placement did not finish within {:?}", opts.timeout))?;
    for r in outcome {
        r?;
    }
    let allocations = opts.jobs * opts.count as u64;
    Ok(PlaceReport {
        nodes: opts.nodes,
        jobs: opts.jobs,
        allocations,
        seconds,
        placements_per_second: allocations as f64 / seconds,
    })
}

/// Registers one job and waits until all its allocations are placed.
async fn place_job(
    client: ClusterClient,
    id: String,
    count: u32,
    cpu_mhz: u64,
) -> anyhow::Result<()> {
    let job = Job {
        id: id.clone(),
        r#type: JobType::Service as i32,
        task_groups: vec![TaskGroup {
            name: "app".into(),
            count: Some(count),
            resources: Some(Resources {
                cpu_mhz,
                memory_mb: 16,
            }),
            ..Default::default()
        }],
        ..Default::default()
    };
    client.register_job(job).await?;
    // Each read below blocks up to PLACE_WAIT on the server.
    let client = client
        .clone()
        .with_attempt_timeout(PLACE_WAIT + stampede_proto::client::DEFAULT_ATTEMPT_TIMEOUT);
    let mut index = 0;
    loop {
        let reply = client
            .retrying(|c| {
                let req = JobAllocationsRequest {
                    job_id: id.clone(),
                    query: Some(QueryOptions {
                        min_index: index,
                        max_wait_ms: PLACE_WAIT.as_millis() as u64,
                        source: stampede_proto::QuerySource::Loadgen.label().into(),
                    }),
                };
                async move { Ok(c.jobs().allocations(req).await?.into_inner()) }
            })
            .await;
        let reply = match reply {
            // A server that has not applied the registration yet.
            Err(e) if e.code() == Some(tonic::Code::NotFound) => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
            reply => reply?,
        };
        index = reply.index;
        let placed = reply
            .allocs
            .iter()
            .filter(|a| a.desired_status == AllocDesiredStatus::Run as i32)
            .count();
        if placed >= count as usize {
            return Ok(());
        }
    }
}

/// Keeps the fleet ready while the run lasts.
async fn heartbeat_forever(client: ClusterClient, ids: Vec<String>, key: NodeKey) {
    loop {
        let mut ttl = Duration::from_secs(10);
        for id in &ids {
            let req = NodeUpdateStatusRequest {
                node_id: id.clone(),
                status: NodeStatus::Ready as i32,
                secret_id: key.secret(id),
            };
            if let Ok(r) = client.nodes().update_status(req).await {
                ttl = Duration::from_millis(r.into_inner().heartbeat_ttl_ms.max(1000));
            }
        }
        tokio::time::sleep(ttl / 3).await;
    }
}
