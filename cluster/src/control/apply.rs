//! What reacts to every batch the state machine applies: blocking queries
//! wake, and on the leader new evaluations reach the broker or the blocked
//! set and node status changes reach the heartbeat timers. This is the one
//! seam between raft and the control plane: the state machine sees only a
//! callback.

use std::sync::Arc;

use prometheus::{Histogram, IntCounterVec, IntGaugeVec, Registry};
use stampede_proto::metric_defs::{histogram, int_counter_vec, int_gauge_vec};
use stampede_proto::metric_names;
use stampede_proto::NodeStatus;

use super::leader::blocked_evals::BlockedEvals;
use super::leader::broker::EvalBroker;
use super::leader::heartbeat::Heartbeats;
use super::leader::{route_eval, LeaderParts};
use crate::state::blocking::Watchers;
use crate::state::{gc, Changes, REFUSAL_REASONS, TABLES};

/// What the state holds and what garbage collection took from it, as every
/// server applied it.
struct StateMetrics {
    objects: IntGaugeVec,
    collected: IntCounterVec,
    refused: IntCounterVec,
    fanout: Histogram,
}

impl StateMetrics {
    fn new(registry: &Registry) -> Self {
        Self {
            objects: int_gauge_vec(
                registry,
                metric_names::STATE_OBJECTS,
                "Rows in this server's state, by table.",
                "table",
                &TABLES,
            ),
            collected: int_counter_vec(
                registry,
                metric_names::GC_COLLECTED_TOTAL,
                "Rows garbage collection removed from this server's state, by kind.",
                "kind",
                &gc::KINDS,
            ),
            refused: int_counter_vec(
                registry,
                "stampede_client_reports_refused_total",
                "Client allocation reports (and plans' writes of collected allocations, plan_collected) dropped where they were applied, by reason (terminal: the allocation's client status was already final).",
                "reason",
                &REFUSAL_REASONS,
            ),
            fanout: histogram(
                registry,
                "stampede_blocking_query_fanout",
                "Parked blocking queries each applied batch woke (one per key a query watches that the batch changed).",
                (1.0, 2.0, 16),
            ),
        }
    }
}

/// The state machine's one callback into the control plane.
pub struct ApplyHub {
    /// Parked blocking queries, woken by the keys a batch changed.
    pub watchers: Arc<Watchers>,
    /// Where new pending evaluations go (on the leader; ignored otherwise).
    broker: Arc<EvalBroker>,
    /// Where blocked evaluations wait, and what capacity changes unblock.
    blocked: Arc<BlockedEvals>,
    /// Node timers, reset or dropped as a node's status changes.
    heartbeats: Arc<Heartbeats>,
    /// The state's rows and what garbage collection took, as applied here.
    metrics: StateMetrics,
}

impl ApplyHub {
    pub fn new(leader: &LeaderParts, registry: &Registry) -> Self {
        Self {
            watchers: Arc::default(),
            broker: leader.broker.clone(),
            blocked: leader.blocked.clone(),
            heartbeats: leader.heartbeats.clone(),
            metrics: StateMetrics::new(registry),
        }
    }

    /// Called by the state machine after each applied batch. The leader-only
    /// parts ignore what they are told while switched off.
    pub fn applied(&self, changes: &Changes) {
        let woken = self.watchers.notify(&changes.keys, changes.index);
        self.metrics.fanout.observe(woken as f64);
        for (table, rows) in changes.objects.iter().flat_map(|o| o.by_table()) {
            self.metrics
                .objects
                .with_label_values(&[table])
                .set(rows as i64);
        }
        for (kind, n) in changes.collected.by_kind() {
            if n > 0 {
                self.metrics.collected.with_label_values(&[kind]).inc_by(n);
            }
        }
        for (reason, n) in changes.refused.by_reason() {
            if n > 0 {
                self.metrics.refused.with_label_values(&[reason]).inc_by(n);
            }
        }
        for eval in &changes.evals {
            route_eval(&self.broker, &self.blocked, eval);
        }
        for node in &changes.nodes {
            if node.status == NodeStatus::Ready as i32 {
                self.heartbeats.reset(&node.id);
            } else {
                self.heartbeats.remove(&node.id);
            }
        }
        if changes.capacity_changed {
            self.blocked
                .unblock(changes.index, &changes.capacity_classes);
        }
    }
}
