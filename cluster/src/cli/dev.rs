//! `cluster dev`: a local cluster of real server processes for trying things out.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use stampede_launch::{LaunchOptions, LocalCluster};
use stampede_proto::shutdown_signal;

#[derive(Debug, Clone, Args)]
pub struct DevOpts {
    /// How many server processes to start.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=9))]
    pub servers: u64,
    /// Keep data dirs and logs here instead of a temporary dir removed on exit.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Stop after this long (e.g. `30s`, `5m`) instead of waiting for Ctrl-C.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// How long to wait for the servers to elect a leader.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub leader_timeout: Duration,
    /// Serve without TLS or ACL tokens (`cluster serve --insecure`).
    #[arg(long)]
    pub insecure: bool,
    /// Keep the cluster's CA, certificates and token here (made if missing;
    /// default: DATA_DIR/tls), e.g. where a Prometheus config points.
    #[arg(long, conflicts_with = "insecure")]
    pub tls_dir: Option<PathBuf>,
    /// Extra `cluster serve` flags for every server, after `--`.
    #[arg(last = true)]
    pub server_args: Vec<String>,
}

/// Starts the servers, waits until every one has applied the leader's
/// first entry, says how to reach them, and keeps them up until Ctrl-C or
/// `--duration`.
pub async fn run(opts: DevOpts) -> anyhow::Result<()> {
    let bin = std::env::current_exe()?;
    let mut cluster = LocalCluster::start(LaunchOptions {
        bin,
        servers: opts.servers as usize,
        root: opts.data_dir.clone(),
        server_args: opts.server_args.clone(),
        insecure: opts.insecure,
        tls_dir: opts.tls_dir.clone(),
    })?;
    println!(
        "started {} servers; data and logs in {}",
        opts.servers,
        cluster.root().display()
    );
    let (leader, index) = ready(&mut cluster, opts.leader_timeout).await?;
    println!("every server has applied index {index}; leader is server {leader}");
    println!();
    print_servers(&cluster).await?;
    println!();
    print_how_to_call(&cluster);
    match opts.duration {
        Some(d) => {
            println!("running for {}", humantime::format_duration(d));
            tokio::select! {
                _ = tokio::time::sleep(d) => {}
                _ = shutdown_signal() => {}
            }
        }
        None => {
            println!("press Ctrl-C to stop");
            shutdown_signal().await;
        }
    }
    cluster.stop_all();
    println!("stopped");
    Ok(())
}

/// Waits for a leader (printing every server's log if none comes) and
/// until every server has the leader's first entry, when the cluster is
/// ready to take writes: the leader and that entry's index.
async fn ready(cluster: &mut LocalCluster, leader_timeout: Duration) -> anyhow::Result<(u64, u64)> {
    let leader = match cluster.wait_for_leader(leader_timeout).await {
        Ok(l) => l,
        Err(e) => {
            for id in cluster.ids() {
                eprintln!("--- server {id} log ---\n{}", cluster.log(id));
            }
            return Err(e.into());
        }
    };
    let index = cluster.status(leader).await?.last_log_index;
    for id in cluster.ids() {
        cluster
            .wait_for_status(
                id,
                "it has applied the leader's first entry",
                Duration::from_secs(10),
                |s| s.applied_index >= index,
            )
            .await?;
    }
    Ok((leader, index))
}

/// One line per server: its state, addresses, term and indexes.
async fn print_servers(cluster: &LocalCluster) -> anyhow::Result<()> {
    println!(
        "{:>3}  {:<9} {:<21} {:<21} {:>5} {:>9} {:>8}",
        "id", "state", "rpc", "http", "term", "last_log", "applied"
    );
    for s in cluster.servers() {
        let st = cluster.status(s.id).await?;
        println!(
            "{:>3}  {:<9} {:<21} {:<21} {:>5} {:>9} {:>8}",
            s.id, st.state, s.rpc, s.http, st.term, st.last_log_index, st.applied_index
        );
    }
    Ok(())
}

/// The export line that points cluster, nodesim and loadgen at the
/// servers (with the operator's TLS files and token when it has TLS), and
/// how to read a server's metrics.
fn print_how_to_call(cluster: &LocalCluster) {
    let http = cluster.servers()[0].http;
    let addrs = cluster.rpc_addrs().join(",");
    match cluster.tls_dir() {
        Some(dir) => {
            let d = dir.display();
            println!(
                "to call it from cluster, nodesim or loadgen (TLS with the operator certificate, \
                 the management token):"
            );
            println!(
                "  export STAMPEDE_ADDRESS={addrs} STAMPEDE_TLS_CA={d}/ca.pem \\\n    \
                 STAMPEDE_TLS_CERT={d}/operator.pem STAMPEDE_TLS_KEY={d}/operator.key \\\n    \
                 STAMPEDE_TOKEN=$(cat {d}/token)"
            );
            println!(
                "metrics: curl --cacert {d}/ca.pem --cert {d}/operator.pem --key {d}/operator.key \
                 https://{http}/metrics"
            );
        }
        None => {
            println!(
                "to call it from cluster, nodesim or loadgen: export STAMPEDE_ADDRESS={addrs}"
            );
            println!("metrics: curl http://{http}/metrics");
        }
    }
}
