//! Waiting for the simulated fleet: until nodesim's shards say the
//! scenario's nodes are ready.

use std::time::Duration;

use tokio::time::Instant;

use crate::sampler;

/// Waits until nodesim's shards (one locally, every shard of a deployed
/// fleet with --inventory) together say `nodes` nodes are ready, or until
/// they say the cluster refused them all.
pub(super) async fn wait_for_fleet(
    http: &reqwest::Client,
    urls: &[String],
    nodes: u64,
) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(300);
    let ready_series = "stampede_nodesim_nodes{state=\"ready\"}";
    let refused_series = "stampede_nodesim_errors_total{kind=\"register\"}";
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
                let get = |series| values.get(series).copied().unwrap_or(0.0) as u64;
                (get(ready_series), get(refused_series))
            }));
        }
        let (ready, refused) = shards
            .iter()
            .flatten()
            .fold((0, 0), |(r, f), (ready, refused)| (r + ready, f + refused));
        if ready >= nodes {
            return Ok(());
        }
        if refused >= nodes {
            return Err("the cluster refused nodesim's nodes (see nodesim.log)".into());
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
        "fewer than the scenario's {nodes} nodes were ready after 5 minutes ({})",
        each.join(", ")
    ))
}
