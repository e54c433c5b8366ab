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
//! With eval cancelation on (Nomad's fix), acking an evaluation keeps only
//! the newest evaluation waiting behind it for its job: the plan just made
//! already covers the older ones, so they are set aside as cancelable and
//! the leader writes them as canceled in batches (see [`CANCEL_BATCH`]).
//!
//! The broker lives only on the leader: it is enabled, and rebuilt from the
//! state's pending evaluations, when this server takes leadership, and
//! emptied when it loses it.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::{Histogram, IntCounter, IntCounterVec, IntGauge, Registry};
use stampede_proto::metric_defs::{histogram, int_counter, int_counter_vec, int_gauge};
use stampede_proto::metric_names;
use stampede_proto::{Evaluation, JobType};

use crate::model::is_core;
use tokio::sync::Notify;

/// Broker settings; the defaults are Nomad's.
#[derive(Debug, Clone, Copy)]
pub struct BrokerConfig {
    /// An unacked evaluation is nacked for its worker after this long.
    pub nack_timeout: Duration,
    /// Deliveries before an evaluation is given up on and failed.
    pub delivery_limit: u32,
    /// On an ack, set aside all but the newest evaluation waiting for the job
    /// to be canceled, rather than processing each in turn.
    pub eval_cancelation: bool,
    /// A nacked evaluation waits this long before it is ready again after
    /// its first delivery (zero: at once, the old behaviour)...
    pub nack_initial_delay: Duration,
    /// ...and this long times the deliveries past the first after later ones.
    pub nack_subsequent_delay: Duration,
}

/// Most evaluations canceled in one raft entry (Nomad's figure).
pub const CANCEL_BATCH: usize = 728;

/// How often the leader cancels what acks left behind when the cluster is quiet.
pub const CANCEL_SWEEP_INTERVAL: Duration = Duration::from_secs(5);

impl BrokerConfig {
    /// Nomad's `EvalNackInitialReenqueueDelay` and `...SubsequentReenqueueDelay`.
    pub const NACK_INITIAL_DELAY: Duration = Duration::from_secs(1);
    pub const NACK_SUBSEQUENT_DELAY: Duration = Duration::from_secs(20);

    /// How long an evaluation nacked after its `deliveries`-th delivery
    /// waits before it is ready again, as Nomad's `nackReenqueueDelay`.
    pub fn nack_delay(&self, deliveries: u32) -> Duration {
        match deliveries {
            0 => Duration::ZERO,
            1 => self.nack_initial_delay,
            n => self.nack_subsequent_delay * (n - 1),
        }
    }
}

impl Default for BrokerConfig {
    fn default() -> Self {
        Self {
            nack_timeout: Duration::from_secs(60),
            delivery_limit: 3,
            eval_cancelation: true,
            nack_initial_delay: Self::NACK_INITIAL_DELAY,
            nack_subsequent_delay: Self::NACK_SUBSEQUENT_DELAY,
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

/// What a nack did.
#[derive(Debug, Clone, PartialEq)]
pub enum NackOutcome {
    /// Back in the ready queue for another delivery, at once or after the
    /// nack delay.
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
    pub cancelable: IntGauge,
    pub cancelled: IntCounter,
    pub cancel_batches: IntCounter,
    pub nack_delayed: IntCounter,
    pub delayed: IntGauge,
}

impl BrokerMetrics {
    fn new(registry: &Registry) -> Self {
        Self {
            ready: int_gauge(
                registry,
                metric_names::BROKER_READY,
                "Evaluations ready for a worker.",
            ),
            unacked: int_gauge(
                registry,
                metric_names::BROKER_UNACKED,
                "Evaluations handed to a worker and not yet acked.",
            ),
            waiting_on_job: int_gauge(
                registry,
                metric_names::BROKER_WAITING_ON_JOB,
                "Evaluations waiting behind another evaluation of the same job.",
            ),
            dequeue_wait: histogram(
                registry,
                "stampede_broker_dequeue_wait_seconds",
                "Time an evaluation spent ready before a worker took it.",
                (0.0005, 2.0, 16),
            ),
            acks: int_counter(
                registry,
                "stampede_broker_acks_total",
                "Evaluations acked by a worker.",
            ),
            // Every reason at zero from the start, so a dashboard shows
            // "none yet" rather than "no data".
            nacks: int_counter_vec(
                registry,
                "stampede_broker_nacks_total",
                "Evaluations nacked, by reason.",
                "reason",
                &NackReason::ALL.map(NackReason::label),
            ),
            failed: int_counter(
                registry,
                "stampede_broker_failed_total",
                "Evaluations failed after reaching the delivery limit.",
            ),
            cancelable: int_gauge(
                registry,
                metric_names::BROKER_CANCELABLE,
                "Evaluations set aside by an ack of a newer one, waiting to be canceled.",
            ),
            cancelled: int_counter(
                registry,
                metric_names::EVALS_CANCELLED_TOTAL,
                "Evaluations written as canceled.",
            ),
            cancel_batches: int_counter(
                registry,
                "stampede_eval_cancel_batches_total",
                "Raft entries written to cancel evaluations.",
            ),
            nack_delayed: int_counter(
                registry,
                metric_names::BROKER_NACK_DELAYS_TOTAL,
                "Nacked evaluations held back for their nack delay before another delivery.",
            ),
            delayed: int_gauge(
                registry,
                metric_names::BROKER_DELAYED,
                "Nacked evaluations serving their nack delay.",
            ),
        }
    }
}

/// A ready evaluation, ordered for the heap: priority, then age.
struct Ready {
    eval: Arc<Evaluation>,
    since: Instant,
    /// `since` in unix µs, the evaluation's `enqueued_us`.
    since_us: u64,
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

/// A delivery a worker holds and has not answered yet.
struct Unacked {
    eval: Arc<Evaluation>,
    /// Given to the worker with the evaluation: an ack, a nack or a plan
    /// must bring it back, so a worker whose delivery timed out and went to
    /// another cannot answer for the new one.
    token: String,
    /// When the delivery is nacked for its worker (`nack_timeout`), so an
    /// evaluation held by a worker that died is delivered again.
    deadline: Instant,
    /// When it was last made ready (unix µs).
    enqueued_us: u64,
}

/// The broker's queues, under one lock: every call moves an evaluation
/// between them, and the gauges read them all at once.
#[derive(Default)]
struct Inner {
    /// Whether this server leads. Off, the queues are empty and stay so
    /// (what it is given is ignored, workers are answered `Disabled`): a
    /// follower's queues would be stale by the time it led, so a new term
    /// rebuilds them from the state instead.
    enabled: bool,
    /// Evaluations a worker may take, one heap per scheduler type (the job
    /// type), since a worker asks only for the types it runs.
    ready: HashMap<i32, BinaryHeap<Ready>>,
    /// Deliveries out with a worker, by evaluation id: what an ack or nack
    /// is checked against, and what the nack timeout sweeps.
    unacked: HashMap<String, Unacked>,
    /// Job id to the id of its evaluation that is ready or unacked: at most
    /// one per job is out, so two workers never plan the same job at once.
    job_outstanding: HashMap<String, String>,
    /// Evaluations waiting for their job's outstanding one to be acked.
    job_waiting: HashMap<String, VecDeque<Arc<Evaluation>>>,
    /// Deliveries so far of each evaluation that is ready, unacked or
    /// delayed: the delivery limit and the nack delay are counted from it,
    /// and it survives a nack, which `unacked` does not.
    deliveries: HashMap<String, u32>,
    /// Evaluations enqueued again while a worker still holds them (a worker
    /// re-blocking an evaluation that capacity has already freed): they go
    /// back to the ready queue when that worker acks.
    requeue: HashMap<String, Arc<Evaluation>>,
    /// Evaluations an ack of a newer one made moot, oldest first, waiting to
    /// be written as canceled.
    cancelable: VecDeque<Arc<Evaluation>>,
    /// Ids of the evaluations in `job_waiting` and `cancelable`, so that
    /// "already queued?" does not scan them (one job can pile up thousands).
    held: HashSet<String>,
    /// Nacked evaluations serving their nack delay, soonest first; each is
    /// still its job's outstanding one, so the job's others keep waiting.
    delayed: BinaryHeap<Delayed>,
}

/// A nacked evaluation and when it is ready again.
struct Delayed {
    until: tokio::time::Instant,
    eval: Arc<Evaluation>,
}

impl PartialEq for Delayed {
    fn eq(&self, other: &Self) -> bool {
        self.until == other.until
    }
}
impl Eq for Delayed {}
impl PartialOrd for Delayed {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Delayed {
    /// Reversed: the heap's top is the soonest.
    fn cmp(&self, other: &Self) -> Ordering {
        other.until.cmp(&self.until)
    }
}

impl Inner {
    fn tracked(&self, id: &str) -> bool {
        self.unacked.contains_key(id) || self.deliveries.contains_key(id) || self.held.contains(id)
    }

    /// Moves the delayed evaluations whose delay is over to the ready
    /// queues; returns when the next one is due.
    fn promote_delayed(&mut self, now: tokio::time::Instant) -> Option<tokio::time::Instant> {
        while self.delayed.peek().is_some_and(|d| d.until <= now) {
            let d = self.delayed.pop().expect("peeked");
            self.push_ready(d.eval);
        }
        self.delayed.peek().map(|d| d.until)
    }

    fn push_ready(&mut self, eval: Arc<Evaluation>) {
        self.ready.entry(eval.r#type).or_default().push(Ready {
            eval,
            since: Instant::now(),
            since_us: stampede_proto::unix_us(),
        });
    }

    /// The job's outstanding evaluation is done: let the next one of that job
    /// go. With `cancel_older`, that is the newest one (highest modify, then
    /// create index; the last enqueued on a tie) and the others become
    /// cancelable.
    fn release_job(&mut self, job_id: &str, cancel_older: bool) {
        self.job_outstanding.remove(job_id);
        let Some(mut waiting) = self.job_waiting.remove(job_id) else {
            return;
        };
        let next = if cancel_older {
            let newest = waiting
                .iter()
                .enumerate()
                .max_by_key(|(_, e)| (e.modify_index, e.create_index))
                .map(|(i, _)| i);
            let next = newest.and_then(|i| waiting.remove(i));
            self.cancelable.extend(waiting);
            next
        } else {
            let next = waiting.pop_front();
            if !waiting.is_empty() {
                self.job_waiting.insert(job_id.to_string(), waiting);
            }
            next
        };
        if let Some(next) = next {
            self.held.remove(&next.id);
            self.job_outstanding
                .insert(job_id.to_string(), next.id.clone());
            self.deliveries.insert(next.id.clone(), 0);
            self.push_ready(next);
        }
    }
}

/// The leader's queue of evaluations waiting for a scheduler worker (see
/// the module's documentation for its rules).
pub struct EvalBroker {
    /// The queues: a plain mutex, since no call holds it across an await
    /// and each does little under it.
    inner: Mutex<Inner>,
    /// Wakes workers waiting in `dequeue` when an evaluation becomes ready
    /// (or the broker is switched off), so a worker's long poll answers at
    /// once instead of on its next poll.
    ready_notify: Notify,
    /// The delivery limit, the nack timeout and delays, and whether an ack
    /// cancels older evaluations (`cluster serve` flags).
    config: BrokerConfig,
    /// The broker's gauges and counters, refreshed under the lock after
    /// each change; public because the leader's cancel batches
    /// (`LeaderContext::cancel_batch`) count what they write here.
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
        stampede_proto::lock(&self.inner)
    }

    fn update_gauges(&self, inner: &Inner) {
        self.metrics
            .ready
            .set(inner.ready.values().map(|h| h.len()).sum::<usize>() as i64);
        self.metrics.unacked.set(inner.unacked.len() as i64);
        self.metrics
            .waiting_on_job
            .set(inner.job_waiting.values().map(|q| q.len()).sum::<usize>() as i64);
        self.metrics.cancelable.set(inner.cancelable.len() as i64);
        self.metrics.delayed.set(inner.delayed.len() as i64);
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
        if is_core(&eval) && inner.job_outstanding.contains_key(&eval.job_id) {
            // A core job runs once at a time: this tick's run is skipped.
            return;
        }
        match inner.job_outstanding.entry(eval.job_id.clone()) {
            std::collections::hash_map::Entry::Occupied(_) => {
                inner.held.insert(eval.id.clone());
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
        inner.promote_delayed(tokio::time::Instant::now());
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
                enqueued_us: ready.since_us,
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
            // A delayed evaluation falling due wakes the wait too.
            let due = self.lock().delayed.peek().map(|d| d.until);
            let wake = due.map_or(deadline, |d| d.min(deadline));
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(wake) => {
                    if wake == deadline {
                        return Ok(None);
                    }
                }
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
    /// When an outstanding evaluation was made ready (unix µs); 0 if it is
    /// not outstanding.
    pub fn enqueued_us(&self, eval_id: &str) -> u64 {
        self.lock()
            .unacked
            .get(eval_id)
            .map_or(0, |u| u.enqueued_us)
    }

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
            inner.release_job(&u.eval.job_id, self.config.eval_cancelation);
        }
        self.metrics.acks.inc();
        self.update_gauges(&inner);
        drop(inner);
        self.ready_notify.notify_one();
        Ok(())
    }

    /// The worker gave the evaluation back, for `reason`.
    pub fn nack(
        &self,
        eval_id: &str,
        token: &str,
        reason: NackReason,
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
            .with_label_values(&[reason.label()])
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
            inner.release_job(&eval.job_id, false);
            self.metrics.failed.inc();
            NackOutcome::Failed(eval)
        } else {
            let delay = self.config.nack_delay(deliveries);
            if delay.is_zero() {
                inner.push_ready(eval);
            } else {
                inner.delayed.push(Delayed {
                    until: tokio::time::Instant::now() + delay,
                    eval,
                });
                self.metrics.nack_delayed.inc();
            }
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
            self.metrics
                .nacks
                .with_label_values(&[NackReason::Timeout.label()])
                .inc();
            if let NackOutcome::Failed(e) = self.requeue_or_fail(&mut inner, u.eval) {
                failed.push(e);
            }
        }
        self.update_gauges(&inner);
        drop(inner);
        self.ready_notify.notify_waiters();
        failed
    }

    /// Takes up to `max` cancelable evaluations, oldest first, for the caller
    /// to write as canceled.
    pub fn take_cancelable(&self, max: usize) -> Vec<Arc<Evaluation>> {
        let mut inner = self.lock();
        let n = max.min(inner.cancelable.len());
        let taken: Vec<_> = inner.cancelable.drain(..n).collect();
        for e in &taken {
            inner.held.remove(&e.id);
        }
        self.update_gauges(&inner);
        taken
    }

    /// Puts back evaluations whose cancelation could not be written, unless
    /// the broker was emptied meanwhile or already holds them again.
    pub fn restore_cancelable(&self, evals: Vec<Arc<Evaluation>>) {
        let mut inner = self.lock();
        if !inner.enabled {
            return;
        }
        for eval in evals.into_iter().rev() {
            if !inner.tracked(&eval.id) {
                inner.held.insert(eval.id.clone());
                inner.cancelable.push_front(eval);
            }
        }
        self.update_gauges(&inner);
    }

    /// Evaluations waiting to be written as canceled.
    pub fn cancelable_len(&self) -> usize {
        self.lock().cancelable.len()
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

/// Why an evaluation was given back: the `reason` of a nack, and the
/// `reason` label of the nack metrics (a worker may send any string; one
/// that is not listed here counts as `other`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NackReason {
    /// The worker's state did not reach the evaluation's index in time.
    RaftSyncTimeout,
    /// The leader refused the plan, or kept refusing its placements.
    PlanFailed,
    SchedulerError,
    /// Recording the evaluation's outcome failed.
    UpdateFailed,
    /// The worker's server is shutting down.
    ShuttingDown,
    /// No answer within the nack timeout (the broker nacks for the worker).
    Timeout,
    Other,
}

impl NackReason {
    pub const ALL: [NackReason; 7] = [
        NackReason::RaftSyncTimeout,
        NackReason::PlanFailed,
        NackReason::SchedulerError,
        NackReason::UpdateFailed,
        NackReason::ShuttingDown,
        NackReason::Timeout,
        NackReason::Other,
    ];

    pub fn label(self) -> &'static str {
        match self {
            NackReason::RaftSyncTimeout => "raft_sync_timeout",
            NackReason::PlanFailed => "plan_failed",
            NackReason::SchedulerError => "scheduler_error",
            NackReason::UpdateFailed => "update_failed",
            NackReason::ShuttingDown => "shutting_down",
            NackReason::Timeout => "timeout",
            NackReason::Other => "other",
        }
    }

    /// The reason a nack names; `Other` for anything unknown.
    pub fn parse(reason: &str) -> Self {
        Self::ALL
            .into_iter()
            .find(|r| r.label() == reason)
            .unwrap_or(NackReason::Other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(limit: u32) -> EvalBroker {
        broker_with(limit, true)
    }

    fn broker_with(limit: u32, eval_cancelation: bool) -> EvalBroker {
        let b = EvalBroker::new(
            BrokerConfig {
                nack_timeout: Duration::from_millis(0),
                delivery_limit: limit,
                eval_cancelation,
                nack_initial_delay: Duration::ZERO,
                nack_subsequent_delay: Duration::ZERO,
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

    fn eval_at(id: &str, job: &str, create_index: u64, modify_index: u64) -> Arc<Evaluation> {
        Arc::new(Evaluation {
            modify_index,
            ..Evaluation::clone(&eval(id, job, 50, create_index))
        })
    }

    const SVC: &[JobType] = &[JobType::Service];

    /// `e0` of job `web` dequeued, and `n` more evaluations of it waiting,
    /// enqueued newest-in-the-middle so that order alone does not pick it.
    async fn outstanding_with_waiting(b: &EvalBroker, n: u64) -> (Arc<Evaluation>, String) {
        b.enqueue(eval_at("e0", "web", 1, 1));
        let held = next(b).await.unwrap();
        let newest = n / 2 + 1;
        for i in 1..=n {
            let index = if i == newest { 1000 } else { i + 1 };
            b.enqueue(eval_at(&format!("e{i}"), "web", index, index));
        }
        held
    }

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
    async fn an_evaluation_already_waiting_or_cancelable_is_not_queued_twice() {
        let b = broker_with(3, true);
        b.enqueue(eval("e1", "web", 50, 1));
        b.enqueue(eval("e2", "web", 50, 2));
        b.enqueue(eval("e3", "web", 50, 3));
        b.enqueue(eval("e2", "web", 50, 2));
        assert_eq!(b.stats(), (1, 0, 2), "e2 waits once");
        let (e1, token) = next(&b).await.unwrap();
        b.ack(&e1.id, &token).unwrap();
        // e3 is the newest: it goes ready, and e2 becomes cancelable.
        assert_eq!(b.cancelable_len(), 1);
        b.enqueue(eval("e2", "web", 50, 2));
        assert_eq!((b.stats(), b.cancelable_len()), ((1, 0, 0), 1));
        // Once taken to be written as canceled, the broker no longer holds it.
        assert_eq!(b.take_cancelable(10).len(), 1);
        b.enqueue(eval("e2", "web", 50, 2));
        assert_eq!(b.stats(), (1, 0, 1), "e2 waits behind e3 again");
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
            b.nack("e1", "stale", NackReason::Other),
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
            b.nack("e1", &t, NackReason::RaftSyncTimeout).unwrap(),
            NackOutcome::Requeued
        );
        let (again, t) = next(&b).await.unwrap();
        assert_eq!(again.id, "e1");
        assert!(matches!(
            b.nack("e1", &t, NackReason::RaftSyncTimeout).unwrap(),
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

    #[tokio::test(start_paused = true)]
    async fn a_nacked_evaluation_waits_its_nack_delay_before_the_next_delivery() {
        let b = EvalBroker::new(
            BrokerConfig {
                delivery_limit: 3,
                nack_initial_delay: Duration::from_secs(1),
                nack_subsequent_delay: Duration::from_secs(20),
                ..BrokerConfig::default()
            },
            &Registry::new(),
        );
        b.set_enabled(true);
        b.enqueue(eval("e1", "web", 50, 1));
        b.enqueue(eval("e2", "web", 50, 2));
        b.enqueue(eval("other", "api", 50, 3));
        let (first, t) = next(&b).await.unwrap();
        assert_eq!(first.id, "e1");
        b.nack("e1", &t, NackReason::PlanFailed).unwrap();
        assert_eq!(b.metrics.delayed.get(), 1);

        // Other jobs go meanwhile; e1's job waits behind it.
        let start = tokio::time::Instant::now();
        assert_eq!(next(&b).await.unwrap().0.id, "other");
        let (again, t) = b
            .dequeue(SVC, Duration::from_secs(60))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(again.id, "e1");
        assert_eq!(start.elapsed(), Duration::from_secs(1), "the initial delay");

        // After the second delivery: the subsequent delay.
        b.nack("e1", &t, NackReason::PlanFailed).unwrap();
        let start = tokio::time::Instant::now();
        assert!(b
            .dequeue(SVC, Duration::from_secs(19))
            .await
            .unwrap()
            .is_none());
        let (again, _) = b
            .dequeue(SVC, Duration::from_secs(60))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(again.id, "e1");
        assert_eq!(start.elapsed(), Duration::from_secs(20));
        assert_eq!(b.metrics.nack_delayed.get(), 2);
        assert_eq!(
            b.config.nack_delay(3),
            Duration::from_secs(40),
            "Nomad's compounding"
        );
    }

    #[tokio::test]
    async fn one_core_evaluation_per_core_job_at_a_time() {
        use crate::scheduler::core::CoreJob;
        let b = broker(3);
        b.enqueue(Arc::new(CoreJob::EvalGc.eval(1)));
        b.enqueue(Arc::new(CoreJob::EvalGc.eval(2)));
        b.enqueue(Arc::new(CoreJob::JobGc.eval(2)));
        b.enqueue(eval("e1", "web", 100, 1));
        let core = [JobType::Core, JobType::Service];
        let mut got = Vec::new();
        while let Some((e, _)) = b.dequeue(&core, Duration::from_millis(1)).await.unwrap() {
            got.push(e.job_id.clone());
        }
        assert_eq!(
            got,
            ["core/eval-gc", "core/job-gc", "web"],
            "core first, the second eval-gc tick skipped"
        );
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

    #[tokio::test]
    async fn with_cancelation_an_ack_keeps_only_the_newest_waiting_evaluation() {
        let b = broker_with(3, true);
        let (e0, token) = outstanding_with_waiting(&b, 5).await;
        assert_eq!(b.stats(), (0, 1, 5));
        b.ack(&e0.id, &token).unwrap();
        assert_eq!(b.stats(), (1, 0, 0));
        assert_eq!(b.cancelable_len(), 4);
        assert_eq!(b.metrics.cancelable.get(), 4);
        assert_eq!(next(&b).await.unwrap().0.id, "e3", "the newest goes next");
        let mut canceled: Vec<String> = b
            .take_cancelable(CANCEL_BATCH)
            .iter()
            .map(|e| e.id.clone())
            .collect();
        canceled.sort();
        assert_eq!(canceled, ["e1", "e2", "e4", "e5"]);
        assert_eq!(b.metrics.cancelable.get(), 0);
    }

    #[tokio::test]
    async fn without_cancelation_every_waiting_evaluation_is_processed() {
        let b = broker_with(3, false);
        let (e0, token) = outstanding_with_waiting(&b, 5).await;
        b.ack(&e0.id, &token).unwrap();
        assert_eq!(b.stats(), (1, 0, 4));
        assert_eq!(b.cancelable_len(), 0);
        let mut order = Vec::new();
        while let Some((e, token)) = next(&b).await {
            b.ack(&e.id, &token).unwrap();
            order.push(e.id.clone());
        }
        assert_eq!(order, ["e1", "e2", "e3", "e4", "e5"]);
        assert_eq!(b.cancelable_len(), 0);
    }

    #[tokio::test]
    async fn a_tie_keeps_the_last_enqueued() {
        let b = broker_with(3, true);
        b.enqueue(eval_at("e0", "web", 1, 1));
        let (e0, token) = next(&b).await.unwrap();
        b.enqueue(eval_at("a", "web", 2, 5));
        b.enqueue(eval_at("b", "web", 2, 5));
        b.ack(&e0.id, &token).unwrap();
        assert_eq!(next(&b).await.unwrap().0.id, "b");
        assert_eq!(b.take_cancelable(CANCEL_BATCH)[0].id, "a");
    }

    #[tokio::test]
    async fn cancelable_evaluations_drain_in_batches_and_failed_writes_come_back() {
        let b = broker_with(3, true);
        let (e0, token) = outstanding_with_waiting(&b, CANCEL_BATCH as u64 + 11).await;
        b.ack(&e0.id, &token).unwrap();
        assert_eq!(b.cancelable_len(), CANCEL_BATCH + 10);
        let first = b.take_cancelable(CANCEL_BATCH);
        assert_eq!(first.len(), CANCEL_BATCH);
        // A write that failed puts its batch back, ahead of the rest.
        b.restore_cancelable(first.clone());
        assert_eq!(b.cancelable_len(), CANCEL_BATCH + 10);
        assert_eq!(b.take_cancelable(CANCEL_BATCH), first);
        assert_eq!(b.take_cancelable(CANCEL_BATCH).len(), 10);
        assert!(b.take_cancelable(CANCEL_BATCH).is_empty());
        // Nothing is put back twice: an evaluation the broker holds again stays where it is.
        let newest = next(&b).await.unwrap().0;
        b.restore_cancelable(vec![newest]);
        assert_eq!(b.cancelable_len(), 0);
    }

    #[tokio::test]
    async fn disabling_the_broker_clears_the_cancelable_set() {
        let b = broker_with(3, true);
        let (e0, token) = outstanding_with_waiting(&b, 5).await;
        b.ack(&e0.id, &token).unwrap();
        let taken = b.take_cancelable(1);
        assert_eq!(b.cancelable_len(), 3);
        b.set_enabled(false);
        assert_eq!(b.cancelable_len(), 0);
        assert_eq!(b.metrics.cancelable.get(), 0);
        b.restore_cancelable(taken);
        assert_eq!(b.cancelable_len(), 0, "a disabled broker keeps nothing");
        b.set_enabled(true);
        assert_eq!(b.cancelable_len(), 0);
    }
}
