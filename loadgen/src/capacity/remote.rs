//! One variant against a cluster loadgen did not start (`--address` or
//! `--inventory`): nothing is spawned; its processes are only sampled.

use std::path::Path;
use std::time::Duration;

use stampede_proto::client::ClusterClient;
use stampede_proto::metric_names;

use super::ctx::Ctx;
use super::drive::{drive, per_server, BeforeStream, Driving};
use super::error::CapacityError;
use super::fleet::{highest_term, wait_for_fleet};
use crate::sampler::Target;
use crate::scenario::{Scenario, Variant};
use crate::summary::VariantSummary;

/// Runs variant `v` against the given cluster, in `dir`.
pub(super) async fn run_remote(
    scenario: &Scenario,
    v: &Variant,
    dir: &Path,
    ctx: &Ctx<'_>,
) -> Result<VariantSummary, CapacityError> {
    let opts = ctx.opts;
    if opts.metrics.is_empty() {
        return Err(CapacityError::NoMetrics(opts.address_source()));
    }
    let servers = opts.metrics.len() - opts.fleet_metrics.len();
    let targets = opts
        .metrics
        .iter()
        .enumerate()
        .map(|(i, url)| Target {
            // An inventory says which processes are servers (its servers'
            // URLs come first), so their CPU and memory are the servers'.
            name: match opts.inventory.is_some() {
                true if i < servers => format!("server-{}", i + 1),
                true => format!("nodesim-{}", i - servers),
                false => format!("process-{}", i + 1),
            },
            url: url.clone(),
        })
        .chain([ctx.loadgen_target()])
        .collect();
    let security = opts.security.load()?;
    let http = stampede_launch::http_client(&security, Duration::from_secs(5))?;
    if let Some(p) = ctx.prometheus {
        let (nodesim, servers) = classify(&http, &opts.metrics).await;
        if let Err(e) = p.set_targets(&v.name, security.scheme(), &servers, Some(&nodesim)) {
            eprintln!("loadgen: {e}");
        }
    }
    // A deployed fleet may have been up long before: its time to ready is
    // not this run's to tell.
    let before = BeforeStream {
        term_at_start: highest_term(&http, &opts.metrics).await,
        ..BeforeStream::default()
    };
    if !opts.fleet_metrics.is_empty() {
        wait_for_fleet(&http, &opts.fleet_metrics, scenario.nodes)
            .await
            .map_err(CapacityError::FleetNotReady)?;
    }
    let client = ClusterClient::new(&opts.servers, &security)?.with_liveness();
    let driving = Driving {
        client,
        servers: per_server(&opts.servers, &security)?,
        http,
        targets,
        tls: security.tls.is_some(),
        fleet: Vec::new(),
    };
    drive(scenario, v, driving, dir, ctx, before, None).await
}

/// Splits `/metrics` URLs into nodesim shards and servers (host:port each,
/// as Prometheus targets), by what each serves; one that does not answer
/// counts as a server.
async fn classify(http: &reqwest::Client, urls: &[String]) -> (Vec<String>, Vec<String>) {
    let (mut nodesim, mut servers) = (Vec::new(), Vec::new());
    for url in urls {
        let host = url
            .split_once("://")
            .map_or(url.as_str(), |(_, rest)| rest)
            .split('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let text = match http.get(url).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        // Every nodesim shard exports its nodes; no server does.
        if text.contains(metric_names::NODESIM_NODES) {
            nodesim.push(host);
        } else {
            servers.push(host);
        }
    }
    (nodesim, servers)
}
