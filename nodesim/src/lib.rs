//! nodesim: simulated client nodes in one process.
//!
//! What is here so far registers a fleet of nodes at a steady rate through
//! any server of the cluster; heartbeats, allocation queries and mock
//! allocation runners build on it.

pub mod runner;

use std::time::{Duration, Instant};

use clap::Args;
use futures::stream::{self, StreamExt};
use stampede_proto::client::ClusterClient;
use stampede_proto::{Node, Resources};

#[derive(Debug, Clone, Args)]
pub struct Opts {
    /// How many nodes to simulate.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub nodes: u64,
    /// Servers' gRPC addresses, comma-separated (HOST:PORT,...).
    #[arg(long, value_delimiter = ',', required = true)]
    pub servers: Vec<String>,
    /// Registrations in flight at once.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub concurrency: u64,
    /// Prefix of node ids; ids are PREFIX-0, PREFIX-1, ..., the same on every run.
    #[arg(long, default_value = "sim")]
    pub id_prefix: String,
    /// Datacenter every node reports.
    #[arg(long, default_value = "dc1")]
    pub datacenter: String,
    /// CPU each node offers, in MHz.
    #[arg(long, default_value_t = 4000, value_parser = clap::value_parser!(u64).range(1..))]
    pub cpu_mhz: u64,
    /// Memory each node offers, in MB.
    #[arg(long, default_value_t = 8192, value_parser = clap::value_parser!(u64).range(1..))]
    pub memory_mb: u64,
}

/// What a run did.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub registered: u64,
    pub failed: u64,
    pub elapsed: Duration,
    /// Highest raft index a registration was applied at.
    pub last_index: u64,
}

pub async fn run(opts: Opts) -> anyhow::Result<Summary> {
    let client = ClusterClient::new(&opts.servers)?;
    let start = Instant::now();
    let results: Vec<_> = stream::iter(0..opts.nodes)
        .map(|i| {
            let client = client.clone();
            let node = Node {
                id: format!("{}-{i}", opts.id_prefix),
                name: format!("{}-{i}", opts.id_prefix),
                datacenter: opts.datacenter.clone(),
                resources: Some(Resources {
                    cpu_mhz: opts.cpu_mhz,
                    memory_mb: opts.memory_mb,
                }),
                ..Default::default()
            };
            async move { client.register_node(node).await }
        })
        .buffer_unordered(opts.concurrency as usize)
        .collect()
        .await;
    let mut summary = Summary {
        registered: 0,
        failed: 0,
        elapsed: start.elapsed(),
        last_index: 0,
    };
    for r in results {
        match r {
            Ok(index) => {
                summary.registered += 1;
                summary.last_index = summary.last_index.max(index);
            }
            Err(e) => {
                summary.failed += 1;
                tracing::warn!("registration failed: {e}");
            }
        }
    }
    Ok(summary)
}
