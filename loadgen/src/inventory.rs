//! `loadgen capacity --inventory FILE`: the processes of a deployed run, so
//! the same scenario runs locally, in network namespaces
//! (`scripts/multihost.sh`) or on Kubernetes (`deploy/`). A TOML file:
//!
//! ```toml
//! [[servers]]
//! rpc = "10.77.0.11:4647"                       # the gRPC address clients dial
//! metrics = "https://10.77.0.11:4646/metrics"   # its /metrics
//! [[nodesim]]
//! metrics = "http://10.77.0.21:9101/metrics"    # one entry per shard
//! ```
//!
//! It stands for `--address` and `--metrics`; knowing which processes are
//! nodesim shards, loadgen also waits for the whole fleet to be ready
//! before the stream starts.

use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inventory {
    #[serde(default)]
    pub servers: Vec<ServerEntry>,
    #[serde(default)]
    pub nodesim: Vec<NodesimEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerEntry {
    /// HOST:PORT of the server's --rpc, as clients reach it.
    pub rpc: String,
    /// The URL of its /metrics (https:// for servers with TLS).
    pub metrics: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodesimEntry {
    /// The URL of the shard's /metrics (nodesim --metrics).
    pub metrics: String,
}

#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("--inventory {0}: cannot read it: {1}")]
    Read(PathBuf, std::io::Error),
    #[error("--inventory {0}: {1}")]
    Invalid(PathBuf, String),
}

impl Inventory {
    pub fn load(path: &Path) -> Result<Self, InventoryError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| InventoryError::Read(path.to_path_buf(), e))?;
        Self::parse(&text).map_err(|e| InventoryError::Invalid(path.to_path_buf(), e))
    }

    /// Parses and checks an inventory; the error names the entry and field.
    pub fn parse(text: &str) -> Result<Self, String> {
        let inv: Inventory = toml::from_str(text).map_err(|e| e.to_string())?;
        if inv.servers.is_empty() {
            return Err("no [[servers]]: list every server's rpc and metrics".into());
        }
        for (i, s) in inv.servers.iter().enumerate() {
            check_host_port(&s.rpc).map_err(|e| format!("servers[{i}].rpc: {e}"))?;
            check_url(&s.metrics).map_err(|e| format!("servers[{i}].metrics: {e}"))?;
        }
        for (i, n) in inv.nodesim.iter().enumerate() {
            check_url(&n.metrics).map_err(|e| format!("nodesim[{i}].metrics: {e}"))?;
        }
        let mut urls = inv.metrics_urls();
        urls.sort();
        if let Some(w) = urls.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("{:?} is listed twice", w[0]));
        }
        Ok(inv)
    }

    /// `--address`: every server's gRPC address.
    pub fn server_addrs(&self) -> Vec<String> {
        self.servers.iter().map(|s| s.rpc.clone()).collect()
    }

    /// `--metrics`: the servers' /metrics, then the shards'.
    pub fn metrics_urls(&self) -> Vec<String> {
        self.servers
            .iter()
            .map(|s| s.metrics.clone())
            .chain(self.fleet_urls())
            .collect()
    }

    /// The nodesim shards' /metrics.
    pub fn fleet_urls(&self) -> Vec<String> {
        self.nodesim.iter().map(|n| n.metrics.clone()).collect()
    }
}

fn check_host_port(s: &str) -> Result<(), String> {
    let bad = || format!("{s:?} is not HOST:PORT");
    if s.contains("://") || s.contains('/') {
        return Err(format!("{s:?} is not HOST:PORT (no scheme or path)"));
    }
    let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
    if host.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(bad());
    }
    Ok(())
}

fn check_url(s: &str) -> Result<(), String> {
    let rest = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"))
        .ok_or_else(|| format!("{s:?} is not an http:// or https:// URL"))?;
    let host = rest.split('/').next().unwrap_or_default();
    check_host_port(host).map_err(|_| format!("{s:?} has no HOST:PORT"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
        [[servers]]
        rpc = "10.77.0.11:4647"
        metrics = "https://10.77.0.11:4646/metrics"
        [[servers]]
        rpc = "stampede-server-2.stampede-server:4647"
        metrics = "https://stampede-server-2.stampede-server:4646/metrics"
        [[nodesim]]
        metrics = "http://10.77.0.21:9101/metrics"
    "#;

    #[test]
    fn reads_the_targets() {
        let inv = Inventory::parse(GOOD).unwrap();
        assert_eq!(
            inv.server_addrs(),
            ["10.77.0.11:4647", "stampede-server-2.stampede-server:4647"]
        );
        assert_eq!(inv.metrics_urls().len(), 3);
        assert_eq!(inv.fleet_urls(), ["http://10.77.0.21:9101/metrics"]);
    }

    #[test]
    fn a_malformed_inventory_says_what_is_wrong() {
        let err = |s: &str| Inventory::parse(s).unwrap_err();
        assert!(err("").contains("no [[servers]]"));
        assert!(err("[[servers]]\nrpc = \"a:1\"\n").contains("metrics"));
        assert!(
            err("[[servers]]\nrpc = \"a:1\"\nmetrics = \"http://a:2/metrics\"\nport = 3\n")
                .contains("unknown field")
        );
        assert!(
            err("[[servers]]\nrpc = \"http://a:1\"\nmetrics = \"http://a:2/metrics\"\n")
                .contains("servers[0].rpc")
        );
        assert!(
            err("[[servers]]\nrpc = \"a\"\nmetrics = \"http://a:2/metrics\"\n")
                .contains("not HOST:PORT")
        );
        assert!(
            err("[[servers]]\nrpc = \"a:1\"\nmetrics = \"a:2/metrics\"\n")
                .contains("servers[0].metrics")
        );
        assert!(err(
            "[[servers]]\nrpc = \"a:1\"\nmetrics = \"http://a:2/m\"\n[[nodesim]]\nmetrics = \"http://a:2/m\"\n"
        )
        .contains("listed twice"));
        assert!(err("[[servers]\n").contains("line 1"));
    }
}
