//! Blocked evaluations: work that did not fit, waiting on the leader for
//! capacity to change (a node becoming ready, allocations stopping). An
//! evaluation planned on state older than a capacity change it could use is
//! not blocked at all: it goes straight back, since what it missed may be
//! room for it.
//!
//! By class (Nomad's way, the default): a blocked evaluation carries the
//! node classes its scheduler saw and whether its job's constraints allow
//! each (`class_eligibility`), and a capacity change in a class goes back to
//! the broker only with the evaluations that may run there (or that have
//! not seen the class). Without it, every capacity change sends every
//! blocked evaluation back, and the workers re-block what still cannot fit.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use prometheus::{IntCounter, IntGauge, Registry};
use stampede_proto::metric_defs::{int_counter, int_gauge};
use stampede_proto::metric_names;
use stampede_proto::Evaluation;

use super::broker::EvalBroker;
use crate::state::ANY_CLASS;

pub struct BlockedMetrics {
    pub blocked: IntGauge,
    pub unblocked: IntCounter,
}

#[derive(Default)]
struct Inner {
    enabled: bool,
    blocked: HashMap<String, Arc<Evaluation>>,
    /// Raft index of the last capacity change of an unknown class (or of
    /// any class, when unblocking ignores classes).
    capacity_index: u64,
    /// Raft index of the last capacity change in each class.
    class_index: HashMap<String, u64>,
}

/// Whether capacity in `class` may help `eval`: its job may run there, or
/// its scheduler did not see that class.
fn may_use(eval: &Evaluation, class: &str) -> bool {
    class == ANY_CLASS || eval.class_eligibility.get(class) != Some(&false)
}

impl Inner {
    /// Whether a capacity change newer than the state `eval` was planned on
    /// may give it room.
    fn missed_capacity(&self, eval: &Evaluation) -> bool {
        eval.snapshot_index < self.capacity_index
            || self
                .class_index
                .iter()
                .any(|(class, i)| eval.snapshot_index < *i && may_use(eval, class))
    }
}

pub struct BlockedEvals {
    inner: Mutex<Inner>,
    broker: Arc<EvalBroker>,
    /// Unblock by node class (Nomad) rather than everything on any change.
    by_class: bool,
    pub metrics: BlockedMetrics,
}

impl BlockedEvals {
    pub fn new(broker: Arc<EvalBroker>, by_class: bool, registry: &Registry) -> Self {
        let metrics = BlockedMetrics {
            blocked: int_gauge(
                registry,
                metric_names::BLOCKED_EVALS,
                "Evaluations waiting for capacity.",
            ),
            unblocked: int_counter(
                registry,
                metric_names::BLOCKED_EVALS_UNBLOCKED_TOTAL,
                "Blocked evaluations sent back to the broker after a capacity change.",
            ),
        };
        Self {
            inner: Mutex::default(),
            broker,
            by_class,
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
        if inner.missed_capacity(&eval) {
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

    /// Capacity changed at raft index `index` in `classes`: the blocked
    /// evaluations that may use it get another try (all of them when
    /// unblocking ignores classes, or a class is unknown).
    pub fn unblock(&self, index: u64, classes: &BTreeSet<String>) {
        let evals: Vec<Arc<Evaluation>> = {
            let mut inner = self.lock();
            if !self.by_class || classes.is_empty() || classes.contains(ANY_CLASS) {
                inner.capacity_index = inner.capacity_index.max(index);
                let evals = inner.blocked.drain().map(|(_, e)| e).collect();
                self.metrics.blocked.set(0);
                evals
            } else {
                for class in classes {
                    let i = inner.class_index.entry(class.clone()).or_default();
                    *i = (*i).max(index);
                }
                let ids: Vec<String> = inner
                    .blocked
                    .values()
                    .filter(|e| classes.iter().any(|c| may_use(e, c)))
                    .map(|e| e.id.clone())
                    .collect();
                let evals = ids
                    .iter()
                    .filter_map(|id| inner.blocked.remove(id))
                    .collect();
                self.metrics.blocked.set(inner.blocked.len() as i64);
                evals
            }
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
        let blocked = BlockedEvals::new(broker.clone(), true, &registry);
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
        blocked.unblock(10, &[ANY_CLASS.to_string()].into());
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

    fn blocked_eval(id: &str, snapshot_index: u64, classes: &[(&str, bool)]) -> Arc<Evaluation> {
        Arc::new(Evaluation {
            id: id.into(),
            job_id: id.into(),
            r#type: JobType::Service as i32,
            snapshot_index,
            class_eligibility: classes.iter().map(|(c, ok)| (c.to_string(), *ok)).collect(),
            ..Default::default()
        })
    }

    fn classes(c: &[&str]) -> BTreeSet<String> {
        c.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn by_class_only_evaluations_that_may_use_the_class_are_unblocked() {
        let registry = Registry::new();
        let broker = Arc::new(EvalBroker::new(BrokerConfig::default(), &registry));
        broker.set_enabled(true);
        let blocked = BlockedEvals::new(broker.clone(), true, &registry);
        blocked.set_enabled(true);
        blocked.block(blocked_eval(
            "gpu-only",
            5,
            &[("dc1/gpu", true), ("dc1/general", false)],
        ));
        blocked.block(blocked_eval(
            "anywhere",
            5,
            &[("dc1/gpu", true), ("dc1/general", true)],
        ));
        blocked.block(blocked_eval("unaware", 5, &[]));

        blocked.unblock(10, &classes(&["dc1/general"]));
        assert_eq!(blocked.len(), 1, "gpu-only stays blocked");
        assert_eq!(blocked.metrics.unblocked.get(), 2);
        assert_eq!(broker.stats().0, 2);

        // Planned before that change, but it could not use it: blocked.
        blocked.block(blocked_eval("late-gpu", 8, &[("dc1/general", false)]));
        assert_eq!(blocked.len(), 2);
        // One that could: straight back.
        blocked.block(blocked_eval("late-any", 8, &[("dc1/general", true)]));
        assert_eq!(blocked.len(), 2);

        // A class no blocked evaluation has seen: it may fit there.
        blocked.unblock(11, &classes(&["dc2/gpu"]));
        assert!(blocked.is_empty());
    }

    #[test]
    fn without_classes_any_change_unblocks_everything() {
        let registry = Registry::new();
        let broker = Arc::new(EvalBroker::new(BrokerConfig::default(), &registry));
        broker.set_enabled(true);
        let blocked = BlockedEvals::new(broker.clone(), false, &registry);
        blocked.set_enabled(true);
        blocked.block(blocked_eval("gpu-only", 5, &[("dc1/general", false)]));
        blocked.unblock(10, &classes(&["dc1/general"]));
        assert!(blocked.is_empty());
        assert_eq!(blocked.metrics.unblocked.get(), 1);
    }
}
