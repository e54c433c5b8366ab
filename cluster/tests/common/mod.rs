//! Shared by the integration tests: a real cluster of `cluster serve`
//! processes whose logs are printed when a test fails.

#![allow(dead_code)]

use std::time::{Duration, Instant};

use cluster::launcher::{LaunchOptions, LocalCluster};
use stampede_proto::{Node, Resources};

pub const BIN: &str = env!("CARGO_BIN_EXE_cluster");
pub const ELECTION: Duration = Duration::from_secs(30);
pub const CATCH_UP: Duration = Duration::from_secs(60);

/// A cluster whose server logs are printed if the test fails.
pub struct Harness(pub LocalCluster);

impl Harness {
    pub fn start(servers: usize, args: &[&str]) -> Self {
        Harness(
            LocalCluster::start(LaunchOptions {
                bin: BIN.into(),
                servers,
                root: None,
                server_args: args.iter().map(|s| s.to_string()).collect(),
            })
            .expect("servers start"),
        )
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for id in self.0.ids() {
                eprintln!("--- server {id} log ---\n{}", self.0.log(id));
            }
        }
    }
}

impl std::ops::Deref for Harness {
    type Target = LocalCluster;
    fn deref(&self) -> &LocalCluster {
        &self.0
    }
}

impl std::ops::DerefMut for Harness {
    fn deref_mut(&mut self) -> &mut LocalCluster {
        &mut self.0
    }
}

pub fn node(id: &str) -> Node {
    node_with(id, 2000, 4096)
}

pub fn node_with(id: &str, cpu_mhz: u64, memory_mb: u64) -> Node {
    Node {
        id: id.into(),
        datacenter: "dc1".into(),
        resources: Some(Resources { cpu_mhz, memory_mb }),
        ..Default::default()
    }
}

/// Awaits `cond` (an async check), failing with `what` after `timeout`.
pub async fn eventually<F, Fut>(what: &str, timeout: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
