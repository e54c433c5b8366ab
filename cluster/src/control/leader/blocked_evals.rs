//! Blocked evaluations: work that did not fit, waiting on the leader for
//! capacity to change (a node becoming ready, allocations stopping). On such
//! a change every blocked evaluation goes back to the broker; one that still
//! does not fit is blocked again by its worker. An evaluation planned on
//! state older than the last capacity change is not blocked at all: it goes
//! straight back, since what it missed may be room for it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use prometheus::{IntCounter, IntGauge, Registry};
use stampede_proto::metric_defs::{int_counter, int_gauge};
use stampede_proto::Evaluation;

use super::broker::EvalBroker;

pub struct BlockedMetrics {
    pub blocked: IntGauge,
    pub unblocked: IntCounter,
}

#[derive(Default)]
struct Inner {
    enabled: bool,
    blocked: HashMap<String, Arc<Evaluation>>,
    /// Raft index of the last capacity change.
    capacity_index: u64,
}

pub struct BlockedEvals {
    inner: Mutex<Inner>,
    broker: Arc<EvalBroker>,
    pub metrics: BlockedMetrics,
}

impl BlockedEvals {
    pub fn new(broker: Arc<EvalBroker>, registry: &Registry) -> Self {
        let metrics = BlockedMetrics {
            blocked: int_gauge(
                registry,
                "stampede_blocked_evals",
                "Evaluations waiting for capacity.",
            ),
            unblocked: int_counter(
                registry,
                "stampede_blocked_evals_unblocked_total",
                "Blocked evaluations sent back to the broker after a capacity change.",
            ),
        };
        Self {
            inner: Mutex::default(),
            broker,
            metrics,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        stampede_proto::lock(&self.inner)
    }

    pub fn set_enabled(&self, enabled: bool) {
        let mut inner = self.lock();
        inner.enabled = enabled;
        if !enabled {
            inner.blocked.clear();
        }
        self.metrics.blocked.set(inner.blocked.len() as i64);
    }

    /// Tracks a blocked evaluation (ignored when not leading).
    pub fn block(&self, eval: Arc<Evaluation>) {
        let mut inner = self.lock();
        if !inner.enabled {
            return;
        }
        if eval.snapshot_index < inner.capacity_index {
            drop(inner);
            self.metrics.unblocked.inc();
            self.broker.enqueue(eval);
            return;
        }
        inner.blocked.insert(eval.id.clone(), eval);
        self.metrics.blocked.set(inner.blocked.len() as i64);
    }

    /// Forgets an evaluation that is no longer blocked.
    pub fn untrack(&self, eval_id: &str) {
        let mut inner = self.lock();
        if inner.blocked.remove(eval_id).is_some() {
            self.metrics.blocked.set(inner.blocked.len() as i64);
        }
    }

    /// Capacity changed at raft index `index`: every blocked evaluation gets another try.
    pub fn unblock_all(&self, index: u64) {
        let evals: Vec<Arc<Evaluation>> = {
            let mut inner = self.lock();
            inner.capacity_index = inner.capacity_index.max(index);
            let evals = inner.blocked.drain().map(|(_, e)| e).collect();
            self.metrics.blocked.set(0);
            evals
        };
        self.metrics.unblocked.inc_by(evals.len() as u64);
        for e in evals {
            self.broker.enqueue(e);
        }
    }

    pub fn len(&self) -> usize {
        self.lock().blocked.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::leader::broker::BrokerConfig;
    use stampede_proto::JobType;
    use std::time::Duration;

    #[tokio::test]
    async fn capacity_change_sends_blocked_work_back_to_the_broker() {
        let registry = Registry::new();
        let broker = Arc::new(EvalBroker::new(BrokerConfig::default(), &registry));
        broker.set_enabled(true);
        let blocked = BlockedEvals::new(broker.clone(), &registry);
        blocked.set_enabled(true);
        for (id, job) in [("b1", "web"), ("b2", "api")] {
            blocked.block(Arc::new(Evaluation {
                id: id.into(),
                job_id: job.into(),
                r#type: JobType::Service as i32,
                ..Default::default()
            }));
        }
        blocked.untrack("b2");
        assert_eq!(blocked.len(), 1);
        assert_eq!(broker.stats().0, 0);
        blocked.unblock_all(10);
        assert!(blocked.is_empty());
        let (e, _) = broker
            .dequeue(&[JobType::Service], Duration::from_millis(1))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(e.id, "b1");

        // Planned on state from before the capacity change: straight back to the broker.
        blocked.block(Arc::new(Evaluation {
            id: "stale".into(),
            job_id: "db".into(),
            r#type: JobType::Service as i32,
            snapshot_index: 9,
            ..Default::default()
        }));
        assert!(blocked.is_empty());
        assert_eq!(broker.stats().0, 1);
    }
}
