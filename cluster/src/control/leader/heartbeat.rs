//! Node heartbeats, tracked in the leader's memory: a heartbeat resets the
//! node's timer and is not a raft write; only a status change is. A node
//! whose timer runs out is marked down by the leader.
//!
//! The leader times every ready node, so a timer's bytes are multiplied by
//! the fleet: a node's id is the key as the state keys it (`Id`, the id
//! inside the key when it is up to 23 bytes, no allocation of its own).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use prometheus::{IntCounter, IntGauge, Registry};
use stampede_proto::metric_defs::{int_counter, int_gauge};
use tokio::time::Instant;

use crate::state::Id;

/// Heartbeat settings; the defaults are Nomad's.
#[derive(Debug, Clone, Copy)]
pub struct HeartbeatConfig {
    /// The shortest TTL handed to a node.
    pub min_ttl: Duration,
    /// Heartbeats per second the leader is willing to take: with many nodes
    /// the TTL grows so that the fleet stays under this rate.
    pub max_per_second: f64,
    /// Extra time past the TTL before a node is marked down.
    pub grace: Duration,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        Self {
            min_ttl: Duration::from_secs(10),
            max_per_second: 50.0,
            grace: Duration::from_secs(10),
        }
    }
}

#[derive(Default)]
struct Inner {
    enabled: bool,
    deadlines: HashMap<Id, Instant>,
}

pub struct Heartbeats {
    inner: Mutex<Inner>,
    config: HeartbeatConfig,
    pub tracked: IntGauge,
    pub missed: IntCounter,
}

impl Heartbeats {
    pub fn new(config: HeartbeatConfig, registry: &Registry) -> Self {
        Self {
            inner: Mutex::default(),
            config,
            tracked: int_gauge(
                registry,
                "stampede_heartbeat_timers",
                "Nodes whose heartbeat the leader is timing.",
            ),
            missed: int_counter(
                registry,
                "stampede_heartbeats_missed_total",
                "Nodes marked down because their heartbeat TTL ran out.",
            ),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        stampede_proto::lock(&self.inner)
    }

    /// The TTL for a fleet of `nodes`.
    pub fn ttl(&self, nodes: usize) -> Duration {
        let spread = Duration::from_secs_f64(nodes as f64 / self.config.max_per_second);
        spread.max(self.config.min_ttl)
    }

    /// Starts timing (on gaining leadership, every ready node gets a fresh
    /// TTL) or stops (on losing it).
    pub fn set_enabled<'a>(&self, enabled: bool, ready_nodes: impl Iterator<Item = &'a str>) {
        let mut inner = self.lock();
        inner.enabled = enabled;
        inner.deadlines.clear();
        if enabled {
            let nodes: Vec<&str> = ready_nodes.collect();
            let deadline = Instant::now() + self.ttl(nodes.len()) + self.config.grace;
            for n in nodes {
                inner.deadlines.insert(Id::from(n), deadline);
            }
        }
        self.tracked.set(inner.deadlines.len() as i64);
    }

    /// A heartbeat: resets the node's timer and returns its TTL, or `None`
    /// when this server is not timing heartbeats.
    pub fn reset(&self, node_id: &str) -> Option<Duration> {
        let mut inner = self.lock();
        if !inner.enabled {
            return None;
        }
        let ttl = self.ttl(inner.deadlines.len().max(1));
        inner
            .deadlines
            .insert(Id::from(node_id), Instant::now() + ttl + self.config.grace);
        self.tracked.set(inner.deadlines.len() as i64);
        Some(ttl)
    }

    /// A node that is no longer ready needs no timer.
    pub fn remove(&self, node_id: &str) {
        let mut inner = self.lock();
        inner.deadlines.remove(node_id);
        self.tracked.set(inner.deadlines.len() as i64);
    }

    /// Nodes whose timer ran out; they are no longer timed.
    pub fn expired(&self) -> Vec<String> {
        let mut inner = self.lock();
        let now = Instant::now();
        let gone: Vec<String> = inner
            .deadlines
            .iter()
            .filter(|(_, d)| **d <= now)
            .map(|(n, _)| n.to_string())
            .collect();
        for n in &gone {
            inner.deadlines.remove(n.as_str());
        }
        self.missed.inc_by(gone.len() as u64);
        self.tracked.set(inner.deadlines.len() as i64);
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hb(min_ttl_ms: u64) -> Heartbeats {
        Heartbeats::new(
            HeartbeatConfig {
                min_ttl: Duration::from_millis(min_ttl_ms),
                max_per_second: 50.0,
                grace: Duration::ZERO,
            },
            &Registry::new(),
        )
    }

    #[test]
    fn ttl_grows_with_the_fleet_to_cap_the_heartbeat_rate() {
        let h = hb(10_000);
        assert_eq!(h.ttl(10), Duration::from_secs(10));
        assert_eq!(h.ttl(10_000), Duration::from_secs(200));
    }

    #[tokio::test(start_paused = true)]
    async fn only_a_leader_times_nodes_and_a_missed_ttl_expires() {
        let h = Heartbeats::new(
            HeartbeatConfig {
                min_ttl: Duration::from_secs(10),
                max_per_second: 50.0,
                grace: Duration::from_secs(5),
            },
            &Registry::new(),
        );
        assert_eq!(h.reset("n1"), None, "followers do not time heartbeats");
        h.set_enabled(true, ["n1", "n2"].into_iter());
        assert_eq!(h.tracked.get(), 2);
        tokio::time::advance(Duration::from_secs(12)).await;
        assert_eq!(h.reset("n2"), Some(Duration::from_secs(10)));
        assert!(h.expired().is_empty(), "within TTL plus grace");
        tokio::time::advance(Duration::from_secs(4)).await;
        assert_eq!(h.expired(), vec!["n1".to_string()]);
        assert_eq!(h.missed.get(), 1);
        tokio::time::advance(Duration::from_secs(20)).await;
        assert_eq!(h.expired(), vec!["n2".to_string()]);
        h.set_enabled(false, std::iter::empty());
        assert_eq!(h.tracked.get(), 0);
    }
}
