//! What only nodesim's tests share: a simulated fleet pointed at a
//! `stampede_launch::testing::Harness` cluster, jobs in one datacenter, and
//! waits on what the fleet's nodes and allocations report.

#![allow(dead_code)] // each test file uses its own part

use clap::Parser;
use nodesim::Opts;
use stampede_launch::testing::{allocs, eventually_ok, service_job, Harness, CATCH_UP};
use stampede_proto::client::ClusterClient;
use stampede_proto::security::{Role, TlsArgs};
use stampede_proto::{AllocClientStatus, Allocation, Job};

/// nodesim's options for the harness's servers (with the client
/// certificate and a write token, as a capacity run gives them), with flags
/// `extra` added.
pub fn opts(h: &Harness, extra: &[&str]) -> Opts {
    let mut all = vec!["nodesim".to_string()];
    all.extend(args(h, extra));
    Opts::parse_from(all)
}

/// The command-line arguments of [`opts`], as the `nodesim` binary takes them.
pub fn args(h: &Harness, extra: &[&str]) -> Vec<String> {
    let servers = h.rpc_addrs().join(",");
    let mut args: Vec<String> = vec!["--servers".into(), servers];
    if let Some(dir) = h.tls_dir() {
        args.extend(TlsArgs::in_dir(dir, Role::Client).to_args());
    }
    if let Some(token) = h.security(Role::Client).unwrap().token {
        args.extend(["--token".into(), token]);
    }
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

/// A fleet with the default mock runner, nodesim flags `args` added.
pub async fn fleet(h: &Harness, args: &[&str]) -> nodesim::Fleet {
    let opts = opts(h, args);
    let factory = nodesim::runner::mock_factory(opts.mock_config());
    nodesim::Fleet::start(opts, factory)
        .await
        .expect("the fleet starts")
}

/// A service job of `count` small allocations, in `datacenter` only (the
/// fleet's nodes are in `dc1` unless `--datacenters` says otherwise).
pub fn job(id: &str, count: u32, datacenter: &str) -> Job {
    Job {
        datacenters: vec![datacenter.into()],
        ..service_job(id, count, 100, 64)
    }
}

/// Waits until `count` allocations of the job run and are healthy, as the
/// servers see them; returns every allocation of the job.
pub async fn running(client: &ClusterClient, job_id: &str, count: usize) -> Vec<Allocation> {
    let what = format!("{count} allocations of {job_id} run healthy");
    eventually_ok(&what, CATCH_UP, || async {
        let allocs = allocs(client, job_id).await.unwrap_or_default();
        let healthy = allocs
            .iter()
            .filter(|a| {
                a.client_status == AllocClientStatus::Running as i32 && a.healthy == Some(true)
            })
            .count();
        if healthy == count {
            Ok(allocs)
        } else {
            Err(format!("{healthy} run healthy"))
        }
    })
    .await
}

/// Waits until the leader counts `count` ready nodes.
pub async fn ready_nodes(h: &Harness, count: f64) {
    let what = format!("the leader counts {count} ready nodes");
    eventually_ok(&what, CATCH_UP, || async {
        match h.leader_metric("stampede_nodes{status=\"ready\"}").await {
            Ok(ready) if ready == count => Ok(()),
            Ok(ready) => Err(format!("{ready} ready")),
            Err(e) => Err(e),
        }
    })
    .await
}
