//! Waiting for the simulated fleet: until nodesim's shards say the
//! scenario's nodes are ready.

use std::time::Duration;

use stampede_proto::metric_names;
use tokio::time::Instant;

use crate::sampler;

/// How long a fleet may take to be ready: five minutes, and a second more
/// for every 500 nodes (a quarter of a million register at about 2,000/s).
fn ready_wait(nodes: u64) -> Duration {
    Duration::from_secs(300 + nodes / 500)
}

/// Waits until nodesim's shards (one locally, every shard of a deployed
/// fleet with --inventory) together say `nodes` nodes are ready, or until
/// they say the cluster refused them all; returns how long it waited.
pub(super) async fn wait_for_fleet(
    http: &reqwest::Client,
    urls: &[String],
    nodes: u64,
) -> Result<Duration, String> {
    let started = Instant::now();
    let wait = ready_wait(nodes);
    let deadline = started + wait;
    let ready_series = format!("{}{{state=\"ready\"}}", metric_names::NODESIM_NODES);
    let refused_series = format!(
        "{}{{kind=\"register\"}}",
        metric_names::NODESIM_ERRORS_TOTAL
    );
    // Per shard: (ready, refused), or None while it does not answer.
    let mut shards: Vec<Option<(u64, u64)>> = Vec::new();
    if urls.len() > 1 {
        eprintln!(
            "loadgen: waiting for {nodes} nodes in {} nodesim shards",
            urls.len()
        );
    }
    while Instant::now() < deadline {
        shards.clear();
        for url in urls {
            let text = match http.get(url).send().await {
                Ok(r) => r.text().await.ok(),
                Err(_) => None,
            };
            shards.push(text.map(|text| {
                let values = sampler::parse(&text);
                let get = |series: &str| values.get(series).copied().unwrap_or(0.0) as u64;
                (get(&ready_series), get(&refused_series))
            }));
        }
        let (ready, refused) = shards
            .iter()
            .flatten()
            .fold((0, 0), |(r, f), (ready, refused)| (r + ready, f + refused));
        if ready >= nodes {
            return Ok(started.elapsed());
        }
        if refused >= nodes {
            return Err(
                "the cluster refused nodesim's nodes (see the nodesim logs in the run directory)"
                    .into(),
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let each: Vec<String> = urls
        .iter()
        .zip(&shards)
        .map(|(url, shard)| match shard {
            Some((ready, _)) => format!("{url}: {ready} ready"),
            None => format!("{url}: not answering"),
        })
        .collect();
    Err(format!(
        "fewer than the scenario's {nodes} nodes were ready after {} ({})",
        humantime::format_duration(wait),
        each.join(", ")
    ))
}

/// The highest raft term the servers at `urls` report (`/metrics`), or
/// `None` when none answers.
pub(super) async fn highest_term(http: &reqwest::Client, urls: &[String]) -> Option<u64> {
    let mut highest = None;
    for url in urls {
        let Ok(reply) = http.get(url).send().await else {
            continue;
        };
        let text = reply.text().await.unwrap_or_default();
        if let Some(term) = sampler::parse(&text).get(metric_names::RAFT_TERM) {
            highest = highest.max(Some(*term as u64));
        }
    }
    highest
}
