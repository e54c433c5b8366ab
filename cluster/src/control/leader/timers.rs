//! The leader's periodic chores: fail deliveries that were never acked,
//! mark down nodes that missed their heartbeats, and sweep cancelable
//! evaluations so none linger once the cluster is quiet (acks cancel in
//! batches as they go, the sweep catches the rest).

use std::sync::Arc;
use std::time::Duration;

use stampede_proto::NodeStatus;

use super::broker::{EvalBroker, CANCEL_BATCH, CANCEL_SWEEP_INTERVAL};
use super::context::{delivery_limit_reached, LeaderContext};
use super::heartbeat::Heartbeats;
use crate::model::is_core;

/// How often the timers look.
const TICK: Duration = Duration::from_millis(250);

/// Runs for one term, until its task is aborted.
pub(super) async fn run(ctx: LeaderContext, broker: Arc<EvalBroker>, heartbeats: Arc<Heartbeats>) {
    let mut tick = tokio::time::interval(TICK);
    let mut last_sweep = tokio::time::Instant::now();
    loop {
        tick.tick().await;
        if last_sweep.elapsed() >= CANCEL_SWEEP_INTERVAL {
            last_sweep = tokio::time::Instant::now();
            while ctx.cancel_batch(&broker).await == CANCEL_BATCH {}
        }
        let failed = broker.expire_unacked();
        if failed.iter().any(|e| !is_core(e)) {
            let evals: Vec<_> = failed
                .iter()
                .filter(|e| !is_core(e))
                .map(|e| delivery_limit_reached(e))
                .collect();
            if let Err(e) = ctx.write_evals(evals).await {
                tracing::warn!("recording failed evaluations: {e}");
            }
        }
        for node_id in heartbeats.expired() {
            if let Err(e) = ctx.set_node_status(&node_id, NodeStatus::Down).await {
                tracing::warn!(node_id, "marking node down: {e}");
            }
        }
    }
}
