//! One variant against a cluster loadgen did not start (`--address` or
//! `--inventory`): nothing is spawned; its processes are only sampled.

use std::path::Path;
use std::time::Duration;

use stampede_proto::client::ClusterClient;
use stampede_proto::{metric_names, Binary};

use super::ctx::Ctx;
use super::drive::{drive, per_server, BeforeStream, Done, Driving};
use super::error::CapacityError;
use super::fleet::{highest_term, wait_for_fleet};
use crate::sampler::Target;
use crate::scenario::{Scenario, Variant};

/// Runs variant `v` against the given cluster, in `dir`.
pub(super) async fn run_remote(
    scenario: &Scenario,
    v: &Variant,
    dir: &Path,
    ctx: &Ctx<'_>,
) -> Result<Done, CapacityError> {
    let opts = ctx.opts;
    if opts.metrics.is_empty() {
        return Err(CapacityError::NoMetrics(opts.address_source()));
    }
    let security = opts.security.load()?;
    let http = stampede_launch::http_client(&security, Duration::from_secs(5))?;
    let servers = opts.metrics.len() - opts.fleet_metrics.len();
    // An inventory says which processes are servers (its servers' URLs come
    // first); otherwise what each serves says.
    let binaries = match opts.inventory.is_some() {
        true => (0..opts.metrics.len())
            .map(|i| match i < servers {
                true => Binary::Cluster,
                false => Binary::Nodesim,
            })
            .collect(),
        false => classify(&http, &opts.metrics).await,
    };
    // Named from their binaries, as a local run's are: server-1 ...,
    // nodesim-0 ..., so that the summary's figures by process read alike.
    let (mut server, mut shard) = (0, 0);
    let targets: Vec<Target> = opts
        .metrics
        .iter()
        .zip(&binaries)
        .map(|(url, binary)| match binary {
            Binary::Cluster => {
                server += 1;
                Target::server(server, url.clone())
            }
            _ => {
                shard += 1;
                Target::nodesim(Some(shard - 1), url.clone())
            }
        })
        .chain([ctx.loadgen_target()])
        .collect();
    if let Some(p) = ctx.prometheus {
        let host = |t: &Target| {
            let url = t.url.as_str();
            let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
            rest.split('/').next().unwrap_or_default().to_string()
        };
        let of = |b: Binary| -> Vec<String> {
            targets
                .iter()
                .filter(|t| t.binary == Some(b))
                .map(host)
                .collect()
        };
        let (nodesim, servers) = (of(Binary::Nodesim), of(Binary::Cluster));
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

/// Which binary each `/metrics` URL is, by what it serves: every nodesim
/// shard exports its nodes, no server does; one that does not answer counts
/// as a server.
async fn classify(http: &reqwest::Client, urls: &[String]) -> Vec<Binary> {
    let mut binaries = Vec::with_capacity(urls.len());
    for url in urls {
        let text = match http.get(url).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        binaries.push(match text.contains(metric_names::NODESIM_NODES) {
            true => Binary::Nodesim,
            false => Binary::Cluster,
        });
    }
    binaries
}
