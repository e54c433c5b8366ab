//! The eval broker: the leader's queue of evaluations waiting for a
//! scheduler worker.
//!
//! Ready evaluations wait in one queue per scheduler type, highest priority
//! first, oldest first within a priority. At most one evaluation per job is
//! out at a time (the rest wait behind it), so two workers never plan the same
//! job at once. A dequeued evaluation is unacked until its worker acks or
//! nacks it with the token it was given; one not answered within the nack
//! timeout is nacked for it, and one nacked `delivery_limit` times is failed.
//!
//! The broker lives only on the leader: it is enabled, and rebuilt from the
//! state's pending evaluations, when this server takes leadership, and
//! emptied when it loses it.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry};
use stampede_proto::{Evaluation, JobType};
use tokio::sync::Notify;

/// Broker settings; the defaults are Nomad's.
#[derive(Debug, Clone, Copy)]
pub struct BrokerConfig {
    /// An unacked evaluation is nacked for its worker after this long.
    pub nack_timeout: Duration,
    /// Deliveries before an evaluation is given up on and failed.
    pub delivery_limit: u32,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        Self {
            nack_timeout: Duration::from_secs(60),
            delivery_limit: 3,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrokerError {
    #[error("this server's eval broker is not running (it is not the leader)")]
    Disabled,
    #[error("eval_id: evaluation {0} is not outstanding (already acked, nacked or timed out)")]
    NotOutstanding(String),
    #[error("token: does not match the outstanding delivery of evaluation {0}")]
    TokenMismatch(String),
}

impl From<BrokerError> for tonic::Status {
    fn from(e: BrokerError) -> Self {
        match e {
            BrokerError::Disabled => tonic::Status::unavailable(e.to_string()),
            _ => tonic::Status::failed_precondition(e.to_string()),
        }
    }
}

/// What a nack did.
#[derive(Debug, Clone, PartialEq)]
pub enum NackOutcome {
    /// Back in the ready queue for another delivery.
    Requeued,
    /// Out of deliveries: the caller records the evaluation as failed.
    Failed(Arc<Evaluation>),
}

pub struct BrokerMetrics {
    pub ready: IntGauge,
    pub unacked: IntGauge,
    pub waiting_on_job: IntGauge,
    pub dequeue_wait: Histogram,
    pub acks: IntCounter,
    pub nacks: IntCounterVec,
    pub failed: IntCounter,
}

impl BrokerMetrics {
    fn new(registry: &Registry) -> Self {
        let m = Self {
            ready: IntGauge::new("stampede_broker_ready", "Evaluations ready for a worker.")
                .unwrap(),
            unacked: IntGauge::new(
                "stampede_broker_unacked",
                "Evaluations handed to a worker and not yet acked.",
            )
            .unwrap(),
            waiting_on_job: IntGauge::new(
                "stampede_broker_waiting_on_job",
                "Evaluations waiting behind another evaluation of the same job.",
            )
            .unwrap(),
            dequeue_wait: Histogram::with_opts(
                HistogramOpts::new(
                    "stampede_broker_dequeue_wait_seconds",
                    "Time an evaluation spent ready before a worker took it.",
                )
                .buckets(prometheus::exponential_buckets(0.0005, 2.0, 16).unwrap()),
            )
            .unwrap(),
            acks: IntCounter::new(
                "stampede_broker_acks_total",
                "Evaluations acked by a worker.",
            )
            .unwrap(),
            nacks: IntCounterVec::new(
                Opts::new(
                    "stampede_broker_nacks_total",
                    "Evaluations nacked, by reason.",
                ),
                &["reason"],
            )
            .unwrap(),
            failed: IntCounter::new(
                "stampede_broker_failed_total",
                "Evaluations failed after reaching the delivery limit.",
            )
            .unwrap(),
        };
        registry.register(Box::new(m.ready.clone())).unwrap();
        registry.register(Box::new(m.unacked.clone())).unwrap();
        registry
            .register(Box::new(m.waiting_on_job.clone()))
            .unwrap();
        registry.register(Box::new(m.dequeue_wait.clone())).unwrap();
        registry.register(Box::new(m.acks.clone())).unwrap();
        registry.register(Box::new(m.nacks.clone())).unwrap();
        registry.register(Box::new(m.failed.clone())).unwrap();
        m
    }
}

/// A ready evaluation, ordered for the heap: priority, then age.
struct Ready {
    eval: Arc<Evaluation>,
    since: Instant,
}

impl PartialEq for Ready {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Ready {}
impl PartialOrd for Ready {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ready {
    fn cmp(&self, other: &Self) -> Ordering {
        self.eval
            .priority
            .cmp(&other.eval.priority)
            .then_with(|| other.eval.create_index.cmp(&self.eval.create_index))
            .then_with(|| other.eval.id.cmp(&self.eval.id))
    }
}

struct Unacked {
    eval: Arc<Evaluation>,
    token: String,
    deadline: Instant,
}

#[derive(Default)]
struct Inner {
    enabled: bool,
    ready: HashMap<i32, BinaryHeap<Ready>>,
    unacked: HashMap<String, Unacked>,
    /// Job id to the id of its evaluation that is ready or unacked.
    job_outstanding: HashMap<String, String>,
    /// Evaluations waiting for their job's outstanding one to be acked.
    job_waiting: HashMap<String, VecDeque<Arc<Evaluation>>>,
    deliveries: HashMap<String, u32>,
    /// Evaluations enqueued again while a worker still holds them (a worker
    /// re-blocking an evaluation that capacity has already freed): they go
    /// back to the ready queue when that worker acks.
    requeue: HashMap<String, Arc<Evaluation>>,
}

impl Inner {
    fn tracked(&self, id: &str) -> bool {
        self.unacked.contains_key(id)
            || self.deliveries.contains_key(id)
            || self
                .job_waiting
                .values()
                .any(|q| q.iter().any(|e| e.id == id))
    }

    fn push_ready(&mut self, eval: Arc<Evaluation>) {
        self.ready.entry(eval.r#type).or_default().push(Ready {
            eval,
            since: Instant::now(),
        });
    }

    /// The job's outstanding evaluation is done: let the next one of that job go.
    fn release_job(&mut self, job_id: &str) {
        self.job_outstanding.remove(job_id);
        let next = self.job_waiting.get_mut(job_id).and_then(|q| q.pop_front());
        if self.job_waiting.get(job_id).is_some_and(|q| q.is_empty()) {
            self.job_waiting.remove(job_id);
        }
        if let Some(next) = next {
            self.job_outstanding
                .insert(job_id.to_string(), next.id.clone());
            self.deliveries.insert(next.id.clone(), 0);
            self.push_ready(next);
        }
    }
}

pub struct EvalBroker {
    inner: Mutex<Inner>,
    ready_notify: Notify,
    config: BrokerConfig,
    pub metrics: BrokerMetrics,
}

impl EvalBroker {
    pub fn new(config: BrokerConfig, registry: &Registry) -> Self {
        Self {
            inner: Mutex::default(),
            ready_notify: Notify::new(),
            config,
            metrics: BrokerMetrics::new(registry),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn update_gauges(&self, inner: &Inner) {
        self.metrics
            .ready
            .set(inner.ready.values().map(|h| h.len()).sum::<usize>() as i64);
        self.metrics.unacked.set(inner.unacked.len() as i64);
        self.metrics
            .waiting_on_job
            .set(inner.job_waiting.values().map(|q| q.len()).sum::<usize>() as i64);
    }

    /// Turns the broker on (this server leads) or off, emptying it.
    pub fn set_enabled(&self, enabled: bool) {
        let mut inner = self.lock();
        if !enabled {
            *inner = Inner::default();
        }
        inner.enabled = enabled;
        self.update_gauges(&inner);
        drop(inner);
        self.ready_notify.notify_waiters();
    }

    pub fn enabled(&self) -> bool {
        self.lock().enabled
    }

    /// Queues an evaluation; a no-op when disabled or already queued.
    pub fn enqueue(&self, eval: Arc<Evaluation>) {
        let mut inner = self.lock();
        if !inner.enabled {
            return;
        }
        if inner.unacked.contains_key(&eval.id) {
            inner.requeue.insert(eval.id.clone(), eval);
            return;
        }
        if inner.tracked(&eval.id) {
            return;
        }
        match inner.job_outstanding.entry(eval.job_id.clone()) {
            std::collections::hash_map::Entry::Occupied(_) => {
                inner
                    .job_waiting
                    .entry(eval.job_id.clone())
                    .or_default()
                    .push_back(eval);
            }
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(eval.id.clone());
                inner.deliveries.insert(eval.id.clone(), 0);
                inner.push_ready(eval);
            }
        }
        self.update_gauges(&inner);
        drop(inner);
        self.ready_notify.notify_one();
    }

    fn try_dequeue(
        &self,
        schedulers: &[i32],
    ) -> Result<Option<(Arc<Evaluation>, String)>, BrokerError> {
        let mut inner = self.lock();
        if !inner.enabled {
            return Err(BrokerError::Disabled);
        }
        // The highest-priority ready evaluation across the asked-for queues.
        let best = schedulers
            .iter()
            .filter_map(|t| {
                inner
                    .ready
                    .get(t)
                    .and_then(|h| h.peek())
                    .map(|r| (*t, r.eval.priority))
            })
            .max_by_key(|(_, p)| *p)
            .map(|(t, _)| t);
        let Some(t) = best else {
            return Ok(None);
        };
        let ready = inner
            .ready
            .get_mut(&t)
            .and_then(|h| h.pop())
            .expect("peeked above");
        self.metrics
            .dequeue_wait
            .observe(ready.since.elapsed().as_secs_f64());
        let token = uuid::Uuid::new_v4().to_string();
        *inner.deliveries.entry(ready.eval.id.clone()).or_default() += 1;
        inner.unacked.insert(
            ready.eval.id.clone(),
            Unacked {
                eval: ready.eval.clone(),
                token: token.clone(),
                deadline: Instant::now() + self.config.nack_timeout,
            },
        );
        self.update_gauges(&inner);
        Ok(Some((ready.eval, token)))
    }

    /// Takes the next ready evaluation for one of `schedulers`, waiting up to
    /// `timeout` for one. `Ok(None)` when the wait ended with nothing ready.
    pub async fn dequeue(
        &self,
        schedulers: &[JobType],
        timeout: Duration,
    ) -> Result<Option<(Arc<Evaluation>, String)>, BrokerError> {
        let schedulers: Vec<i32> = schedulers.iter().map(|t| *t as i32).collect();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.ready_notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(found) = self.try_dequeue(&schedulers)? {
                return Ok(Some(found));
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(deadline) => return Ok(None),
            }
        }
    }

    fn take_unacked(
        &self,
        inner: &mut Inner,
        eval_id: &str,
        token: &str,
    ) -> Result<Unacked, BrokerError> {
        match inner.unacked.get(eval_id) {
            None => Err(BrokerError::NotOutstanding(eval_id.to_string())),
            Some(u) if u.token != token => Err(BrokerError::TokenMismatch(eval_id.to_string())),
            Some(_) => Ok(inner.unacked.remove(eval_id).expect("checked above")),
        }
    }

    /// Whether `token` is the current delivery of `eval_id` (plans and
    /// evaluation updates from a worker that lost its delivery are refused).
    pub fn check_token(&self, eval_id: &str, token: &str) -> Result<(), BrokerError> {
        let inner = self.lock();
        if !inner.enabled {
            return Err(BrokerError::Disabled);
        }
        match inner.unacked.get(eval_id) {
            None => Err(BrokerError::NotOutstanding(eval_id.to_string())),
            Some(u) if u.token != token => Err(BrokerError::TokenMismatch(eval_id.to_string())),
            Some(_) => Ok(()),
        }
    }

    /// The worker finished the evaluation.
    pub fn ack(&self, eval_id: &str, token: &str) -> Result<(), BrokerError> {
        let mut inner = self.lock();
        if !inner.enabled {
            return Err(BrokerError::Disabled);
        }
        let u = self.take_unacked(&mut inner, eval_id, token)?;
        if let Some(again) = inner.requeue.remove(eval_id) {
            // Same job, still outstanding: straight back to the ready queue.
            inner.deliveries.insert(eval_id.to_string(), 0);
            inner.push_ready(again);
        } else {
            inner.deliveries.remove(eval_id);
            inner.release_job(&u.eval.job_id);
        }
        self.metrics.acks.inc();
        self.update_gauges(&inner);
        drop(inner);
        self.ready_notify.notify_one();
        Ok(())
    }

    /// The worker gave the evaluation back, for `reason` (a bounded label).
    pub fn nack(
        &self,
        eval_id: &str,
        token: &str,
        reason: &str,
    ) -> Result<NackOutcome, BrokerError> {
        let mut inner = self.lock();
        if !inner.enabled {
            return Err(BrokerError::Disabled);
        }
        let u = self.take_unacked(&mut inner, eval_id, token)?;
        inner.requeue.remove(eval_id);
        let outcome = self.requeue_or_fail(&mut inner, u.eval);
        self.metrics
            .nacks
            .with_label_values(&[nack_reason(reason)])
            .inc();
        self.update_gauges(&inner);
        drop(inner);
        self.ready_notify.notify_one();
        Ok(outcome)
    }

    fn requeue_or_fail(&self, inner: &mut Inner, eval: Arc<Evaluation>) -> NackOutcome {
        let deliveries = inner.deliveries.get(&eval.id).copied().unwrap_or(0);
        if deliveries >= self.config.delivery_limit {
            inner.deliveries.remove(&eval.id);
            inner.release_job(&eval.job_id);
            self.metrics.failed.inc();
            NackOutcome::Failed(eval)
        } else {
            inner.push_ready(eval);
            NackOutcome::Requeued
        }
    }

    /// Nacks every delivery past its deadline; returns those now failed.
    pub fn expire_unacked(&self) -> Vec<Arc<Evaluation>> {
        let mut inner = self.lock();
        let now = Instant::now();
        let expired: Vec<String> = inner
            .unacked
            .iter()
            .filter(|(_, u)| u.deadline <= now)
            .map(|(id, _)| id.clone())
            .collect();
        let mut failed = Vec::new();
        for id in expired {
            let u = inner.unacked.remove(&id).expect("listed above");
            inner.requeue.remove(&id);
            self.metrics.nacks.with_label_values(&["timeout"]).inc();
            if let NackOutcome::Failed(e) = self.requeue_or_fail(&mut inner, u.eval) {
                failed.push(e);
            }
        }
        self.update_gauges(&inner);
        drop(inner);
        self.ready_notify.notify_waiters();
        failed
    }

    /// Ready, unacked and waiting counts, for status and tests.
    pub fn stats(&self) -> (usize, usize, usize) {
        let inner = self.lock();
        (
            inner.ready.values().map(|h| h.len()).sum(),
            inner.unacked.len(),
            inner.job_waiting.values().map(|q| q.len()).sum(),
        )
    }
}

/// The bounded set of nack reasons used as a metric label.
pub const NACK_REASONS: &[&str] = &[
    "raft_sync_timeout",
    "plan_failed",
    "scheduler_error",
    "update_failed",
    "shutting_down",
    "timeout",
    "other",
];

pub fn nack_reason(reason: &str) -> &'static str {
    NACK_REASONS
        .iter()
        .find(|r| **r == reason)
        .copied()
        .unwrap_or("other")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(limit: u32) -> EvalBroker {
        let b = EvalBroker::new(
            BrokerConfig {
                nack_timeout: Duration::from_millis(0),
                delivery_limit: limit,
            },
            &Registry::new(),
        );
        b.set_enabled(true);
        b
    }

    fn eval(id: &str, job: &str, priority: u32, create_index: u64) -> Arc<Evaluation> {
        Arc::new(Evaluation {
            id: id.into(),
            job_id: job.into(),
            r#type: JobType::Service as i32,
            priority,
            create_index,
            ..Default::default()
        })
    }

    const SVC: &[JobType] = &[JobType::Service];

    async fn next(b: &EvalBroker) -> Option<(Arc<Evaluation>, String)> {
        b.dequeue(SVC, Duration::from_millis(1)).await.unwrap()
    }

    #[tokio::test]
    async fn higher_priority_first_then_oldest() {
        let b = broker(3);
        b.enqueue(eval("low", "a", 10, 1));
        b.enqueue(eval("high-new", "b", 90, 5));
        b.enqueue(eval("high-old", "c", 90, 2));
        let order: Vec<String> = [next(&b).await, next(&b).await, next(&b).await]
            .into_iter()
            .map(|e| e.unwrap().0.id.clone())
            .collect();
        assert_eq!(order, ["high-old", "high-new", "low"]);
        assert!(next(&b).await.is_none());
        assert!(b
            .dequeue(&[JobType::Batch], Duration::from_millis(1))
            .await
            .unwrap()
            .is_none());
    }

    #[tokio::test]
    async fn one_evaluation_per_job_at_a_time() {
        let b = broker(3);
        b.enqueue(eval("e1", "web", 50, 1));
        b.enqueue(eval("e2", "web", 50, 2));
        let (e1, token) = next(&b).await.unwrap();
        assert!(next(&b).await.is_none(), "e2 waits behind e1");
        assert_eq!(b.stats(), (0, 1, 1));
        b.ack(&e1.id, &token).unwrap();
        assert_eq!(next(&b).await.unwrap().0.id, "e2");
    }

    #[tokio::test]
    async fn ack_and_nack_check_the_token() {
        let b = broker(3);
        b.enqueue(eval("e1", "web", 50, 1));
        let (e1, token) = next(&b).await.unwrap();
        assert_eq!(
            b.ack("e1", "stale"),
            Err(BrokerError::TokenMismatch("e1".into()))
        );
        assert_eq!(
            b.nack("e1", "stale", "other"),
            Err(BrokerError::TokenMismatch("e1".into()))
        );
        assert_eq!(
            b.ack("nope", &token),
            Err(BrokerError::NotOutstanding("nope".into()))
        );
        b.ack(&e1.id, &token).unwrap();
        assert_eq!(
            b.ack(&e1.id, &token),
            Err(BrokerError::NotOutstanding("e1".into()))
        );
        assert_eq!(b.metrics.acks.get(), 1);
    }

    #[tokio::test]
    async fn nacked_evaluations_come_back_until_the_delivery_limit() {
        let b = broker(2);
        b.enqueue(eval("e1", "web", 50, 1));
        b.enqueue(eval("e2", "web", 50, 2));
        let (_, t) = next(&b).await.unwrap();
        assert_eq!(
            b.nack("e1", &t, "raft_sync_timeout").unwrap(),
            NackOutcome::Requeued
        );
        let (again, t) = next(&b).await.unwrap();
        assert_eq!(again.id, "e1");
        assert!(matches!(
            b.nack("e1", &t, "raft_sync_timeout").unwrap(),
            NackOutcome::Failed(_)
        ));
        assert_eq!(
            b.metrics
                .nacks
                .with_label_values(&["raft_sync_timeout"])
                .get(),
            2
        );
        // The job's next evaluation is released by the failure.
        assert_eq!(next(&b).await.unwrap().0.id, "e2");
    }

    #[tokio::test]
    async fn an_evaluation_enqueued_while_held_comes_back_after_its_ack() {
        let b = broker(3);
        b.enqueue(eval("b1", "web", 50, 1));
        let (held, token) = next(&b).await.unwrap();
        // Its worker re-blocks it, and capacity has changed already: enqueued again.
        b.enqueue(eval("b1", "web", 50, 1));
        assert!(next(&b).await.is_none(), "not while the worker holds it");
        b.ack(&held.id, &token).unwrap();
        assert_eq!(next(&b).await.unwrap().0.id, "b1");
    }

    #[tokio::test]
    async fn unanswered_deliveries_time_out() {
        let b = broker(1);
        b.enqueue(eval("e1", "web", 50, 1));
        next(&b).await.unwrap();
        let failed = b.expire_unacked();
        assert_eq!(failed.len(), 1);
        assert_eq!(b.metrics.nacks.with_label_values(&["timeout"]).get(), 1);
    }

    #[tokio::test]
    async fn a_waiting_dequeue_wakes_on_enqueue_and_disabled_refuses() {
        let b = Arc::new(broker(3));
        let b2 = b.clone();
        let waiter = tokio::spawn(async move { b2.dequeue(SVC, Duration::from_secs(30)).await });
        tokio::task::yield_now().await;
        b.enqueue(eval("e1", "web", 50, 1));
        assert_eq!(waiter.await.unwrap().unwrap().unwrap().0.id, "e1");
        b.set_enabled(false);
        assert_eq!(b.stats(), (0, 0, 0));
        assert_eq!(
            b.dequeue(SVC, Duration::from_millis(1)).await.unwrap_err(),
            BrokerError::Disabled
        );
        b.enqueue(eval("e2", "web", 50, 2));
        assert_eq!(b.stats(), (0, 0, 0), "a disabled broker keeps nothing");
    }
}
