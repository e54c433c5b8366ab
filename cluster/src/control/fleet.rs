//! The leader's view of the fleet for Prometheus: nodes by status and
//! allocations by client status, counted from the state when `/metrics` is
//! read (not on every write). Followers export none, so a sum over servers
//! counts the fleet once.

use std::collections::BTreeMap;
use std::sync::Arc;

use prometheus::{IntGaugeVec, Registry};
use stampede_proto::metric_defs::int_gauge_vec;
use stampede_proto::metric_names;
use stampede_proto::{AllocClientStatus, NodeStatus};
use tokio::sync::watch;

use crate::state::StateStore;

pub struct FleetGauges {
    store: Arc<StateStore>,
    /// True while this server leads.
    leading: watch::Receiver<bool>,
    nodes: IntGaugeVec,
    allocs: IntGaugeVec,
}

impl FleetGauges {
    pub fn new(
        store: Arc<StateStore>,
        leading: watch::Receiver<bool>,
        registry: &Registry,
    ) -> Self {
        Self {
            store,
            leading,
            nodes: int_gauge_vec(
                registry,
                metric_names::NODES,
                "Leader: client nodes by status.",
                "status",
                &[],
            ),
            allocs: int_gauge_vec(
                registry,
                "stampede_allocs",
                "Leader: allocations by client status.",
                "client_status",
                &[],
            ),
        }
    }

    /// Counts again from the current state.
    pub fn update(&self) {
        self.nodes.reset();
        self.allocs.reset();
        if !*self.leading.borrow() {
            return;
        }
        let state = self.store.snapshot();
        set_counts(
            &self.nodes,
            [
                NodeStatus::Initializing,
                NodeStatus::Ready,
                NodeStatus::Down,
            ]
            .map(|s| s as i32),
            count(state.nodes().map(|n| n.status)),
            NodeStatus::label_of,
        );
        // Every status has a series from the start, so a dashboard shows 0
        // rather than "No data" before the first allocation.
        set_counts(
            &self.allocs,
            [
                AllocClientStatus::Pending,
                AllocClientStatus::Running,
                AllocClientStatus::Complete,
                AllocClientStatus::Failed,
                AllocClientStatus::Lost,
            ]
            .map(|s| s as i32),
            state.alloc_client_statuses(),
            AllocClientStatus::label_of,
        );
    }
}

/// How many of `statuses` there are of each. Counted by value first:
/// looking a gauge up by its label for each row was a few percent of the
/// leader's CPU at every scrape.
fn count(statuses: impl Iterator<Item = i32>) -> BTreeMap<i32, u64> {
    let mut counts = BTreeMap::new();
    for status in statuses {
        *counts.entry(status).or_default() += 1;
    }
    counts
}

/// Sets `gauges` (just reset) to `counts` by status, with a series at 0
/// for each of `always`.
fn set_counts(
    gauges: &IntGaugeVec,
    always: impl IntoIterator<Item = i32>,
    counts: BTreeMap<i32, u64>,
    label_of: fn(i32) -> &'static str,
) {
    let mut all: BTreeMap<i32, u64> = always.into_iter().map(|s| (s, 0)).collect();
    all.extend(counts);
    for (status, n) in all {
        gauges.with_label_values(&[label_of(status)]).add(n as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::Encoder;

    #[test]
    fn every_status_has_a_series_before_the_first_allocation() {
        let registry = Registry::new();
        let (_tx, leading) = watch::channel(true);
        let gauges = FleetGauges::new(Arc::new(StateStore::default()), leading, &registry);
        gauges.update();
        let mut text = Vec::new();
        prometheus::TextEncoder::new()
            .encode(&registry.gather(), &mut text)
            .unwrap();
        let text = String::from_utf8(text).unwrap();
        for status in ["pending", "running", "complete", "failed", "lost"] {
            let series = format!("stampede_allocs{{client_status=\"{status}\"}} 0");
            assert!(text.contains(&series), "{series} missing from\n{text}");
        }
        assert!(text.contains("stampede_nodes{status=\"ready\"} 0"));
    }
}
