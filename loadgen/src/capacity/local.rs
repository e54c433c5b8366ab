//! One variant on processes loadgen starts itself: a local cluster of real
//! `cluster` servers and a `nodesim` fleet, stopped when the variant ends.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use stampede_launch::{LaunchOptions, LocalCluster};
use stampede_proto::client::ClusterClient;
use stampede_proto::security::{Role, TlsArgs};

use super::builds::bin;
use super::ctx::{id_safe, Ctx};
use super::drive::{drive, per_server, BeforeStream, Done, Driving};
use super::error::CapacityError;
use super::fleet::{highest_term, wait_for_fleet};
use crate::sampler::Target;
use crate::scenario::{Scenario, Variant};

/// Runs variant `v` on a cluster and fleet of its own, in `dir`.
pub(super) async fn run_local(
    scenario: &Scenario,
    v: &Variant,
    dir: &Path,
    ctx: &Ctx<'_>,
) -> Result<Done, CapacityError> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| CapacityError::Write(dir.into(), e))?;
    let mut cluster = start_cluster(scenario, v, dir, ctx).await?;
    let operator = cluster.security(Role::Operator)?;
    let http = stampede_launch::http_client(&operator, Duration::from_secs(5))?;
    let server_urls: Vec<String> = cluster
        .servers()
        .iter()
        .map(|s| metrics_url(&cluster, s))
        .collect();
    let mut before = BeforeStream {
        term_at_start: highest_term(&http, &server_urls).await,
        ..BeforeStream::default()
    };
    let fleet = start_fleet(scenario, v, dir, &cluster)?;
    let nodesim_urls: Vec<String> = fleet.iter().map(NodesimProc::metrics_url).collect();
    let targets = targets(&cluster, &fleet, ctx);
    if let Some(p) = ctx.prometheus {
        let servers: Vec<String> = cluster
            .servers()
            .iter()
            .map(|s| s.http.to_string())
            .collect();
        let scheme = cluster.scheme();
        let nodesims: Vec<String> = fleet
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        if let Err(e) = p.set_targets(&v.name, scheme, &servers, Some(&nodesims)) {
            eprintln!("loadgen: {e}");
        }
    }
    match wait_for_fleet(&http, &nodesim_urls, scenario.nodes).await {
        Ok(took) => before.ready_s = Some(took.as_secs_f64()),
        Err(e) => before.problems.push(e),
    }
    let client = ClusterClient::new(&cluster.rpc_addrs(), &operator)?.with_liveness();
    let driving = Driving {
        client,
        servers: per_server(&cluster.rpc_addrs(), &operator)?,
        http,
        targets,
        tls: scenario.tls,
        fleet: fleet
            .iter()
            .filter_map(|n| Some(n.child.as_ref()?.id()))
            .collect(),
    };
    let done = drive(scenario, v, driving, dir, ctx, before, Some(&mut cluster)).await?;
    drop(fleet);
    cluster.stop_all();
    Ok(done)
}

/// The variant's servers, with the run's TLS files, once they have a leader.
async fn start_cluster(
    scenario: &Scenario,
    v: &Variant,
    dir: &Path,
    ctx: &Ctx<'_>,
) -> Result<LocalCluster, CapacityError> {
    let server_args: Vec<String> = scenario
        .server_args
        .iter()
        .chain(&v.server_args)
        .cloned()
        .collect();
    let launch = LaunchOptions {
        bin: bin(v, "cluster")?,
        servers: scenario.servers as usize,
        root: Some(dir.join("cluster")),
        server_args,
        insecure: !scenario.tls,
        tls_dir: Some(ctx.tls_dir.clone()),
    };
    // Partitions cut the peer links: the servers reach each other through
    // loadgen's fault proxy.
    let mut cluster = match scenario.partitions() {
        true => LocalCluster::start_with_links(launch)?,
        false => LocalCluster::start(launch)?,
    };
    cluster.wait_for_leader(Duration::from_secs(60)).await?;
    Ok(cluster)
}

/// One nodesim process of the fleet, stopped when the run ends, early or
/// not: SIGTERM, so it flushes and prints its summary.
struct NodesimProc {
    child: Option<Child>,
    /// The port of its `/metrics`.
    port: u16,
    /// Its place in a fleet of several (`nodesim-K` among the run's
    /// processes); `None` alone (`nodesim`).
    shard: Option<usize>,
}

impl NodesimProc {
    /// Where it serves `/metrics`.
    fn metrics_url(&self) -> String {
        format!("http://127.0.0.1:{}/metrics", self.port)
    }
}

impl Drop for NodesimProc {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            stampede_launch::terminate(child);
        }
    }
}

/// The variant's fleet: `fleet_processes` nodesim processes sharing the
/// scenario's nodes out evenly, each logging to `dir/<its name>.log`.
fn start_fleet(
    scenario: &Scenario,
    v: &Variant,
    dir: &Path,
    cluster: &LocalCluster,
) -> Result<Vec<NodesimProc>, CapacityError> {
    // A variant's or a sweep's smaller fleet keeps a node per process.
    let processes = u64::from(scenario.fleet_processes.max(1)).min(scenario.nodes.max(1));
    let prefix = id_safe(&format!("{}-{}", scenario.name, v.name));
    let mut fleet = Vec::with_capacity(processes as usize);
    for k in 0..processes {
        let nodes = scenario.nodes / processes + u64::from(k < scenario.nodes % processes);
        // One process keeps the names it always had; several get their
        // own, so that their node ids differ.
        let (shard, id_prefix) = match processes {
            1 => (None, prefix.clone()),
            _ => (Some(k as usize), format!("{prefix}-f{k}")),
        };
        fleet.push(start_nodesim(
            scenario, v, dir, cluster, nodes, shard, &id_prefix,
        )?);
    }
    Ok(fleet)
}

/// One nodesim process of `nodes` nodes named from `id_prefix`.
fn start_nodesim(
    scenario: &Scenario,
    v: &Variant,
    dir: &Path,
    cluster: &LocalCluster,
    nodes: u64,
    shard: Option<usize>,
    id_prefix: &str,
) -> Result<NodesimProc, CapacityError> {
    let name = Target::nodesim(shard, "").name;
    let nodesim_bin = bin(v, "nodesim")?;
    let port = free_port().map_err(|e| CapacityError::Nodesim(nodesim_bin.clone(), e))?;
    let log_path = dir.join(format!("{name}.log"));
    let log =
        std::fs::File::create(&log_path).map_err(|e| CapacityError::Write(log_path.clone(), e))?;
    let log2 = log
        .try_clone()
        .map_err(|e| CapacityError::Write(log_path.clone(), e))?;
    // nodesim presents the client certificate and a write token (through
    // its environment, so that it does not show in `ps`).
    let mut nodesim_cmd = Command::new(&nodesim_bin);
    // Only what this cluster asks for: not the caller's own STAMPEDE_* settings.
    for var in [
        "STAMPEDE_TLS_CA",
        "STAMPEDE_TLS_CERT",
        "STAMPEDE_TLS_KEY",
        "STAMPEDE_TOKEN",
    ] {
        nodesim_cmd.env_remove(var);
    }
    if let Some(tls_dir) = cluster.tls_dir() {
        nodesim_cmd.args(TlsArgs::in_dir(tls_dir, Role::Client).to_args());
    }
    if let Some(token) = cluster.security(Role::Client)?.token {
        nodesim_cmd.env("STAMPEDE_TOKEN", token);
    }
    let child = nodesim_cmd
        .args(["--nodes", &nodes.to_string()])
        // `--servers`, `--address`'s old name: a variant's nodesim may be
        // another build's (`--variant-bin`), older than the new name.
        .args(["--servers", &cluster.rpc_addrs().join(",")])
        .args(["--metrics", &format!("127.0.0.1:{port}")])
        .args(["--id-prefix", id_prefix])
        .args(scenario.nodesim_args.iter().chain(&v.nodesim_args))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .spawn()
        .map_err(|e| CapacityError::Nodesim(nodesim_bin.clone(), e))?;
    Ok(NodesimProc {
        child: Some(child),
        port,
        shard,
    })
}

/// What to sample: every server, nodesim and loadgen itself.
fn targets(cluster: &LocalCluster, fleet: &[NodesimProc], ctx: &Ctx<'_>) -> Vec<Target> {
    let mut targets: Vec<Target> = cluster
        .servers()
        .iter()
        .map(|s| Target::server(s.id, metrics_url(cluster, s)))
        .collect();
    targets.extend(
        fleet
            .iter()
            .map(|n| Target::nodesim(n.shard, n.metrics_url())),
    );
    targets.push(ctx.loadgen_target());
    targets
}

/// Where server `s` serves `/metrics`.
fn metrics_url(cluster: &LocalCluster, s: &stampede_launch::ServerProc) -> String {
    format!("{}://{}/metrics", cluster.scheme(), s.http)
}

/// A port that was free a moment ago.
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
