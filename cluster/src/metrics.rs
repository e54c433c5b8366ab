//! The server's Prometheus metrics: one registry per server, served at `/metrics`.
//!
//! Names start with `stampede_`, use base units, and no label carries an
//! unbounded value: `type` is a raft message type, never an id.

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

pub struct Metrics {
    registry: Registry,
    /// Entries applied to the state machine, by message type.
    pub raft_entries: IntCounterVec,
    /// Bytes of those entries as stored in the raft log.
    pub raft_entry_bytes: IntCounterVec,
    /// On the leader: from a write's submission to its being applied.
    pub raft_apply_seconds: Histogram,
    pub raft_last_log_index: IntGauge,
    pub raft_applied_index: IntGauge,
    pub raft_snapshot_index: IntGauge,
    pub raft_term: IntGauge,
    pub raft_is_leader: IntGauge,
    pub raft_leader_changes: IntCounter,
    pub raft_snapshots_built: IntCounter,
    pub raft_snapshots_installed: IntCounter,
    pub raft_snapshot_bytes: IntGauge,
    /// Writes this server received as a follower and sent on to the leader.
    pub writes_forwarded: IntCounter,
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let m = Self {
            raft_entries: IntCounterVec::new(
                Opts::new(
                    "stampede_raft_entries_total",
                    "Raft entries applied to the state machine, by message type.",
                ),
                &["type"],
            )
            .unwrap(),
            raft_entry_bytes: IntCounterVec::new(
                Opts::new(
                    "stampede_raft_entry_bytes_total",
                    "Bytes of raft entries applied to the state machine, by message type.",
                ),
                &["type"],
            )
            .unwrap(),
            raft_apply_seconds: Histogram::with_opts(
                HistogramOpts::new(
                    "stampede_raft_apply_seconds",
                    "On the leader: time from a write's submission to its being applied.",
                )
                .buckets(prometheus::exponential_buckets(0.0005, 2.0, 14).unwrap()),
            )
            .unwrap(),
            raft_last_log_index: gauge(
                "stampede_raft_last_log_index",
                "Index of the last entry in this server's raft log.",
            ),
            raft_applied_index: gauge(
                "stampede_raft_applied_index",
                "Index of the last entry applied to this server's state machine.",
            ),
            raft_snapshot_index: gauge(
                "stampede_raft_snapshot_index",
                "Last index covered by this server's current snapshot.",
            ),
            raft_term: gauge("stampede_raft_term", "Current raft term."),
            raft_is_leader: gauge(
                "stampede_raft_is_leader",
                "1 while this server is the raft leader, else 0.",
            ),
            raft_leader_changes: counter(
                "stampede_raft_leader_changes_total",
                "Times this server saw a new leader.",
            ),
            raft_snapshots_built: counter(
                "stampede_raft_snapshots_built_total",
                "Snapshots this server built from its state.",
            ),
            raft_snapshots_installed: counter(
                "stampede_raft_snapshots_installed_total",
                "Snapshots this server installed from a leader.",
            ),
            raft_snapshot_bytes: gauge(
                "stampede_raft_snapshot_bytes",
                "Size of this server's current snapshot.",
            ),
            writes_forwarded: counter(
                "stampede_raft_writes_forwarded_total",
                "Writes received as a follower and sent on to the leader.",
            ),
            registry,
        };
        let r = &m.registry;
        r.register(Box::new(m.raft_entries.clone())).unwrap();
        r.register(Box::new(m.raft_entry_bytes.clone())).unwrap();
        r.register(Box::new(m.raft_apply_seconds.clone())).unwrap();
        for g in [
            &m.raft_last_log_index,
            &m.raft_applied_index,
            &m.raft_snapshot_index,
            &m.raft_term,
            &m.raft_is_leader,
            &m.raft_snapshot_bytes,
        ] {
            r.register(Box::new(g.clone())).unwrap();
        }
        for c in [
            &m.raft_leader_changes,
            &m.raft_snapshots_built,
            &m.raft_snapshots_installed,
            &m.writes_forwarded,
        ] {
            r.register(Box::new(c.clone())).unwrap();
        }
        for t in stampede_proto::MESSAGE_TYPES {
            m.raft_entries.with_label_values(&[t]);
            m.raft_entry_bytes.with_label_values(&[t]);
        }
        #[cfg(target_os = "linux")]
        r.register(stampede_proto::process_collector("stampede"))
            .unwrap();
        m
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Counts one applied raft entry.
    pub fn entry_applied(&self, type_name: &str, bytes: u64) {
        self.raft_entries.with_label_values(&[type_name]).inc();
        self.raft_entry_bytes
            .with_label_values(&[type_name])
            .inc_by(bytes);
    }

    /// The registry in Prometheus text format.
    pub fn render(&self) -> String {
        stampede_proto::render_metrics(&self.registry)
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

fn gauge(name: &str, help: &str) -> IntGauge {
    IntGauge::new(name, help).unwrap()
}

fn counter(name: &str, help: &str) -> IntCounter {
    IntCounter::new(name, help).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counts_by_type_with_process_metrics() {
        let m = Metrics::new();
        m.entry_applied("node_register", 40);
        m.entry_applied("node_register", 2);
        let text = m.render();
        assert!(text.contains("stampede_raft_entries_total{type=\"node_register\"} 2"));
        assert!(text.contains("stampede_raft_entry_bytes_total{type=\"node_register\"} 42"));
        assert!(text.contains("stampede_process_resident_memory_bytes"));
    }
}
