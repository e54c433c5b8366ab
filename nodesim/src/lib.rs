//! nodesim: a fleet of simulated client nodes in one process.
//!
//! Each node is a small task that talks to the cluster the way a real client
//! does (register, heartbeat, one blocking query for its allocations, batched
//! allocation updates) and runs its allocations with runners built by an
//! [`AllocRunnerFactory`](runner::AllocRunnerFactory): the scripted
//! [`MockRunner`](runner::MockRunner) by default, or your own.
//!
//! [`Fleet::start`] runs a fleet until [`Fleet::shutdown`]; [`run`] is what the
//! binary does (until Ctrl-C or `--duration`).

// tonic calls return `Result<_, tonic::Status>`, a large error type.
#![allow(clippy::result_large_err)]

/// This binary's build (its commit, and whether the checkout had changes),
/// stamped by the package's build script.
pub const BUILD: stampede_proto::build::Build = stampede_proto::this_build!();

pub mod alloc_sync;
mod calls;
mod identity;
pub mod metrics;
mod node;
pub mod profile;
pub mod runner;

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use stampede_proto::address::{ServerAddresses, ADDRESS_ARG};
use stampede_proto::client::{retryable, ClientError, ClusterClient};
use stampede_proto::{AllocClientStatus, NodeUpdateAllocRequest};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tonic::Code;

use crate::alloc_sync::{AllocSync, SendBatch, SendFailed, UpdateMode, UpdateTicks};
use crate::metrics::{Metrics, NodeState, ERROR_KINDS, PRIORITIES};
use crate::node::{rotate, Shared};
use crate::profile::{Amount, NodeProfile, Shard, Weighted};
use crate::runner::{mock_factory, AllocRunnerFactory, MockConfig};

/// The whole of `nodesim`: [`run`] on a runtime of `opts.threads`
/// threads. It is here rather than in the binary so that the fleet's
/// async code is compiled once, in this crate: an optimised build
/// compiles an async fn's body again in each crate that polls it.
pub fn run_blocking(opts: Opts) -> anyhow::Result<Summary> {
    runtime(opts.threads)?.block_on(run(opts))
}

/// The runtime a fleet of `threads` threads runs on (`Opts::threads`).
pub fn runtime(threads: u64) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads as usize);
        b
    };
    builder.enable_all().build()
}

/// `--job-times`: on, or off to measure what the node's times cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum JobTimes {
    On,
    Off,
}

/// Simulates a fleet of client nodes against a stampede cluster.
#[derive(Debug, Clone, Parser)]
#[command(name = "nodesim", version = stampede_proto::long_version!(), about)]
#[command(mut_arg(ADDRESS_ARG, |a| a.required(true).help("Servers' gRPC addresses, comma-separated (HOST:PORT,...); `cluster` and loadgen read the same flag and variable.")))]
pub struct Opts {
    /// Nodes in the whole fleet; with --shard, this process runs its share.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub nodes: u64,
    /// Servers' gRPC addresses, comma-separated (HOST:PORT,...); `cluster`
    /// and loadgen read the same flag and variable.
    #[command(flatten)]
    pub servers: ServerAddresses,
    /// TLS (the client certificate of `cluster tls init`) and the ACL token.
    #[command(flatten)]
    pub security: stampede_proto::security::ClientSecurityArgs,
    /// Which share of the fleet to run, I/N (I from 0): nodes with index % N == I.
    #[arg(long, default_value = "0/1")]
    pub shard: Shard,
    /// Prefix of node ids (PREFIX-INDEX). Give one to keep ids across restarts
    /// of nodesim; without it every run is a new fleet.
    #[arg(long)]
    pub id_prefix: Option<String>,
    /// A file whose contents (at least 16 bytes) are the key each node's
    /// secret_id is derived from, so that a nodesim restarted with the same
    /// --id-prefix can act for its nodes again; without it, a random key
    /// of this process: another process cannot act for its nodes.
    #[arg(long)]
    pub secret_key_file: Option<std::path::PathBuf>,
    /// How client allocation updates are sent.
    #[arg(long, value_enum, default_value_t = UpdateMode::Prioritized)]
    pub update_mode: UpdateMode,
    /// When in each 200 ms tick a node sends its updates: `staggered`, each
    /// node at its own phase, or `fleet`, every node at once (before issue
    /// 50; a steady job stream is phase-locked to it).
    #[arg(long, value_enum, default_value_t = UpdateTicks::default())]
    pub update_ticks: UpdateTicks,
    /// Send, with each allocation's running report, when the node got it
    /// and when its runner started (a job's critical path), and time those
    /// stages; `false` measures what that costs.
    #[arg(long, value_enum, default_value_t = JobTimes::On)]
    pub job_times: JobTimes,
    /// Serve Prometheus metrics at http://ADDR/metrics.
    #[arg(long)]
    pub metrics: Option<SocketAddr>,
    /// HTTP/2 connections to each server, shared by all nodes.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub connections: u64,
    /// Threads the fleet runs on. One by default: a fleet is many small
    /// tasks waking each other, and on one thread they do so without
    /// cross-thread wake-ups (a fifth less of nodesim's CPU in `c2m-mini`,
    /// BENCHMARKS.md). Give more if nodesim's CPU nears one core; for more
    /// than that, `--shard` the fleet over processes or machines.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub threads: u64,
    /// Nodes joining per second while the fleet ramps up.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub ramp_rate: u64,
    /// Registrations in flight at once.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub register_concurrency: u64,
    /// Stop after this long (for example 10m); without it, run until Ctrl-C.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// How long a node's allocation query waits at the server for a change.
    #[arg(long, default_value = "5m", value_parser = parse_query_wait)]
    pub query_wait: Duration,
    /// Datacenters, weighted: dc1:3,dc2:1.
    #[arg(long, default_value = "dc1")]
    pub datacenters: Weighted<String>,
    /// Node classes, weighted.
    #[arg(long, default_value = "general")]
    pub classes: Weighted<String>,
    /// CPU per node in MHz, weighted: 4000:3,16000:1.
    #[arg(long, default_value = "4000")]
    pub cpu_mhz: Weighted<Amount>,
    /// Memory per node in MB, weighted.
    #[arg(long, default_value = "8192")]
    pub memory_mb: Weighted<Amount>,
    /// Mock runner: task events an allocation reports while pending.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub task_events: u32,
    /// Mock runner: delay between task events, and before running.
    #[arg(long, default_value = "150ms", value_parser = humantime::parse_duration)]
    pub event_delay: Duration,
    /// Mock runner: how long running counts before the allocation is healthy.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub min_healthy_time: Duration,
    /// Mock runner: how long a batch allocation runs before it completes.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub batch_duration: Duration,
    /// Mock runner: chance (0 to 1) that an allocation fails to start.
    #[arg(long, default_value_t = 0.0, value_parser = parse_probability)]
    pub failure_rate: f64,
}

fn parse_query_wait(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_millis(100) || d > Duration::from_secs(600) {
        return Err("must be between 100ms and 10m (the servers' limit)".into());
    }
    Ok(d)
}

fn parse_probability(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err("must be a number from 0 to 1".into()),
    }
}

impl Opts {
    /// The scripted lifecycle these flags describe.
    pub fn mock_config(&self) -> MockConfig {
        MockConfig {
            task_events: self.task_events,
            event_delay: self.event_delay,
            min_healthy_time: self.min_healthy_time,
            batch_duration: self.batch_duration,
            failure_probability: self.failure_rate,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("--address: {0}")]
    Servers(#[from] ClientError),
    #[error(transparent)]
    Security(#[from] stampede_proto::security::SecurityError),
    #[error("--shard {shard} has no nodes in a fleet of {nodes}")]
    EmptyShard { shard: Shard, nodes: u64 },
    #[error("--secret-key-file {0}")]
    SecretKey(#[from] stampede_proto::node_secret::KeyFileError),
    #[error("--metrics {addr}: {source}")]
    Metrics {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// A running fleet.
pub struct Fleet {
    shared: Arc<Shared>,
    nodes: JoinSet<()>,
    stop: watch::Sender<bool>,
    sync_task: tokio::task::JoinHandle<()>,
    started: Instant,
    metrics_addr: Option<SocketAddr>,
    mode: UpdateMode,
    ticks: UpdateTicks,
}

impl Fleet {
    /// Starts this shard's nodes, joining at `--ramp-rate`; returns at once.
    pub async fn start(opts: Opts, factory: AllocRunnerFactory) -> Result<Fleet, Error> {
        let indexes: Vec<u64> = opts.shard.indexes(opts.nodes).collect();
        if indexes.is_empty() {
            return Err(Error::EmptyShard {
                shard: opts.shard,
                nodes: opts.nodes,
            });
        }
        let security = opts.security.load()?;
        let client =
            ClusterClient::with_connections(&opts.servers, opts.connections as usize, &security)?
                .with_liveness();
        let metrics = Metrics::new();
        let metrics_addr = match opts.metrics {
            Some(addr) => Some(
                metrics
                    .clone()
                    .serve(addr)
                    .await
                    .map_err(|source| Error::Metrics { addr, source })?,
            ),
            None => None,
        };
        let shared = Arc::new(Fleet::shared(
            &opts,
            client,
            metrics.clone(),
            factory,
            indexes.len(),
        )?);
        let sync = shared.sync.clone();
        let (stop, stopped) = watch::channel(false);
        let sync_task = tokio::spawn(sync.run(stopped));
        let started = Instant::now();
        let mut nodes = JoinSet::new();
        for (slot, index) in indexes.into_iter().enumerate() {
            let join_at = started + Duration::from_secs_f64(slot as f64 / opts.ramp_rate as f64);
            let node = node::SimNode::new(shared.clone(), slot as u32, index);
            nodes.spawn(async move {
                tokio::time::sleep_until(join_at).await;
                node.run().await;
            });
        }
        Ok(Fleet {
            shared,
            nodes,
            stop,
            sync_task,
            started,
            metrics_addr,
            mode: opts.update_mode,
            ticks: opts.update_ticks,
        })
    }

    /// What every node of the fleet shares: the calls to the cluster
    /// (each node's channel, spread over the connections), the nodes'
    /// profile and identity, the metrics, and the client-update buffers
    /// ([`AllocSync`], for `slots` nodes).
    fn shared(
        opts: &Opts,
        client: ClusterClient,
        metrics: Metrics,
        factory: AllocRunnerFactory,
        slots: usize,
    ) -> Result<Shared, Error> {
        let channels: Arc<Vec<AtomicU32>> = Arc::new(
            (0..slots)
                .map(|slot| AtomicU32::new((slot % client.channel_count()) as u32))
                .collect(),
        );
        let calls = Arc::new(calls::Calls::new(client.clone()));
        let id_prefix = opts.id_prefix.clone().unwrap_or_else(|| {
            let run: u32 = rand::random();
            format!("sim-{run:08x}")
        });
        let identity = Arc::new(identity::Identity::new(
            opts.secret_key_file.as_deref(),
            id_prefix.clone(),
            opts.shard,
        )?);
        let sync = AllocSync::with_ticks(
            opts.update_mode,
            opts.update_ticks,
            slots,
            metrics.clone(),
            update_sender(calls.clone(), channels.clone(), identity.clone()),
        );
        sync.set_job_times(opts.job_times == JobTimes::On);
        Ok(Shared {
            calls,
            profile: NodeProfile {
                id_prefix,
                datacenters: opts.datacenters.clone(),
                classes: opts.classes.clone(),
                cpu_mhz: opts.cpu_mhz.clone(),
                memory_mb: opts.memory_mb.clone(),
            },
            metrics,
            sync: sync.clone(),
            factory,
            query_wait: opts.query_wait,
            register_permits: Semaphore::new(opts.register_concurrency as usize),
            identity,
            channels,
        })
    }

    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// Where `--metrics` is served, once bound.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The id of the fleet's node `index`.
    pub fn node_id(&self, index: u64) -> String {
        self.shared.profile.id(index)
    }

    /// What the fleet has done so far.
    pub fn summary(&self) -> Summary {
        Summary::read(
            &self.shared.metrics,
            // One slot per node of this shard.
            self.shared.channels.len() as u64,
            self.started.elapsed(),
            self.mode,
            self.ticks,
        )
    }

    /// Stops every node, sends the updates still buffered, and says what ran.
    pub async fn shutdown(mut self) -> Summary {
        self.nodes.abort_all();
        while self.nodes.join_next().await.is_some() {}
        let _ = self.stop.send(true);
        let _ = (&mut self.sync_task).await;
        // Runners may still report as they are dropped; send all of it.
        if tokio::time::timeout(Duration::from_secs(10), self.shared.sync.flush())
            .await
            .is_err()
        {
            tracing::warn!("some allocation updates were not sent before shutdown");
        }
        self.summary()
    }
}

/// Sends one node's batch, with the node's secret, on that node's current
/// channel.
fn update_sender(
    calls: Arc<calls::Calls>,
    channels: Arc<Vec<AtomicU32>>,
    identity: Arc<identity::Identity>,
) -> SendBatch {
    Arc::new(move |slot, allocs| {
        let channel = node::current_channel(&channels, &calls, slot);
        let calls = calls.clone();
        let secrets = vec![identity.of_slot(slot)];
        let channels = channels.clone();
        Box::pin(async move {
            let call = calls.update_alloc(channel, NodeUpdateAllocRequest { allocs, secrets });
            let failed = match tokio::time::timeout(node::RPC_TIMEOUT, call).await {
                Ok(Ok(_)) => return Ok(()),
                // Refused `Unavailable`, or lost with the connection (a
                // transport error, a stream cut): a failover. Out of time
                // (`DeadlineExceeded`): a server behind on its work.
                Ok(Err(s)) if retryable(&s) => SendFailed {
                    failover: s.code() != Code::DeadlineExceeded,
                    message: s.message().to_string(),
                },
                Ok(Err(s)) => {
                    return Err(SendFailed {
                        message: s.message().to_string(),
                        failover: false,
                    })
                }
                Err(_) => {
                    calls.note_lost(channel);
                    SendFailed {
                        message: "no answer within the RPC timeout".into(),
                        failover: false,
                    }
                }
            };
            // The next send goes to the next server, as the node's other
            // calls do after a failure.
            rotate(&channels, &calls, slot);
            Err(failed)
        })
    })
}

/// What a fleet did, read from its metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub mode: UpdateMode,
    pub ticks: UpdateTicks,
    pub nodes: u64,
    pub ready: i64,
    pub registrations: u64,
    pub heartbeats: u64,
    pub queries: u64,
    pub runners_started: u64,
    /// Allocations by the client status last reported.
    pub allocs: Vec<(&'static str, i64)>,
    /// `Node.UpdateAlloc` calls by priority.
    pub update_rpcs: Vec<(&'static str, u64)>,
    pub alloc_updates_sent: u64,
    pub errors: Vec<(&'static str, u64)>,
    pub elapsed: Duration,
}

impl Summary {
    fn read(
        m: &Metrics,
        nodes: u64,
        elapsed: Duration,
        mode: UpdateMode,
        ticks: UpdateTicks,
    ) -> Self {
        let allocs = [
            AllocClientStatus::Pending,
            AllocClientStatus::Running,
            AllocClientStatus::Complete,
            AllocClientStatus::Failed,
        ]
        .into_iter()
        .map(AllocClientStatus::label)
        .map(|s| (s, m.allocs.with_label_values(&[s]).get()))
        .collect();
        Self {
            mode,
            ticks,
            nodes,
            ready: m.nodes.with_label_values(&[NodeState::Ready.label()]).get(),
            registrations: m.registrations.get(),
            heartbeats: m.heartbeat_seconds.get_sample_count(),
            queries: ["changed", "unchanged", "error"]
                .iter()
                .map(|o| m.query_seconds.with_label_values(&[o]).get_sample_count())
                .sum(),
            runners_started: m.runners_started.get(),
            allocs,
            update_rpcs: PRIORITIES
                .iter()
                .map(|p| (*p, m.update_rpcs.with_label_values(&[p]).get()))
                .collect(),
            alloc_updates_sent: m.updates_per_rpc.get_sample_sum() as u64,
            errors: ERROR_KINDS
                .iter()
                .map(|k| (*k, m.errors.with_label_values(&[k]).get()))
                .collect(),
            elapsed,
        }
    }

    /// Allocations whose runner last reported `client_status` (`running`, ...).
    pub fn allocs_with(&self, client_status: &str) -> i64 {
        self.allocs
            .iter()
            .find(|(s, _)| *s == client_status)
            .map_or(0, |(_, n)| *n)
    }

    /// Every `Node.UpdateAlloc` call, whatever its priority.
    pub fn update_rpcs_total(&self) -> u64 {
        self.update_rpcs.iter().map(|(_, n)| n).sum()
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pairs = |v: &[(&str, u64)]| {
            v.iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        writeln!(f, "nodesim ran {:.1}s", self.elapsed.as_secs_f64())?;
        writeln!(
            f,
            "  nodes            {} ({} ready at the end, {} registrations)",
            self.nodes, self.ready, self.registrations
        )?;
        writeln!(f, "  heartbeats       {}", self.heartbeats)?;
        writeln!(f, "  alloc queries    {}", self.queries)?;
        writeln!(
            f,
            "  runners started  {} ({})",
            self.runners_started,
            self.allocs
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        )?;
        writeln!(
            f,
            "  update RPCs      {} ({}; {} mode, {} ticks), {} allocation updates",
            self.update_rpcs_total(),
            pairs(&self.update_rpcs),
            self.mode.name(),
            self.ticks.name(),
            self.alloc_updates_sent
        )?;
        write!(f, "  errors           {}", pairs(&self.errors))
    }
}

/// What the binary does: runs the fleet with the mock runner until Ctrl-C
/// (or `--duration`), then shuts it down.
pub async fn run(opts: Opts) -> anyhow::Result<Summary> {
    let duration = opts.duration;
    let fleet = Fleet::start(opts.clone(), mock_factory(opts.mock_config())).await?;
    if let Some(addr) = fleet.metrics_addr() {
        eprintln!("nodesim: metrics at http://{addr}/metrics");
    }
    let until = async {
        match duration {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = until => {}
        _ = term.recv() => {}
        r = tokio::signal::ctrl_c() => r?,
    }
    Ok(fleet.shutdown().await)
}
