//! Scheduler workers, on every server: each dequeues an evaluation from the
//! leader's broker, waits until its local state has caught up with it, runs
//! the scheduler on a snapshot, submits the plan, records the evaluation's
//! outcome, and acks (or nacks on any failure, so another worker retries).
//!
//! Workers can be listed, paused, resumed and their number changed at
//! runtime (`/v1/workers`).
//!
//! A worker whose state could not reach an evaluation in time backs off
//! after the nack until its state catches up (seed 004), so a server far
//! behind (restoring a snapshot, overloaded) does not keep taking
//! evaluations it cannot process from workers that could.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::{
    Counter, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry,
};
use rand::SeedableRng;
use serde::Serialize;
use stampede_proto::{
    EvalAckRequest, EvalDequeueRequest, EvalStatus, EvalUpdateRequest, Evaluation, JobType,
    PlanSubmitRequest,
};
use tokio::sync::watch;

use crate::control_plane::ControlPlane;
use crate::scheduler;
use crate::state::StateStore;

/// Worker settings; the defaults are Nomad's.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// How long a worker waits for its state to reach an evaluation's index
    /// before it nacks (Nomad's raftSyncLimit).
    pub raft_sync_limit: Duration,
    /// After a `raft_sync_timeout` nack, wait up to this long for the state
    /// to reach the index it missed before dequeuing again; `None` dequeues
    /// again at once.
    pub raft_backoff_limit: Option<Duration>,
    /// How long one dequeue call waits for work.
    pub dequeue_timeout: Duration,
    /// Plans a worker submits for one evaluation before giving up on
    /// placements the leader keeps refusing.
    pub max_plan_attempts: u32,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            raft_sync_limit: Duration::from_secs(5),
            raft_backoff_limit: Some(Duration::from_secs(30)),
            dequeue_timeout: Duration::from_millis(500),
            max_plan_attempts: 5,
        }
    }
}

/// Backoff after a failed dequeue: 20 ms doubling up to 1 s.
const BACKOFF_BASE: Duration = Duration::from_millis(20);
const BACKOFF_LIMIT: Duration = Duration::from_secs(1);

/// How often a raft backoff adds its time to its metric.
const RAFT_BACKOFF_STEP: Duration = Duration::from_secs(1);

/// What a worker can be doing, as `/v1/workers` and `stampede_workers` name it
/// (a stopped worker leaves the list).
pub const WORKER_STATES: &[&str] = &["starting", "dequeuing", "working", "backing_off", "paused"];

pub struct WorkerMetrics {
    /// Workers of this server by state.
    pub states: IntGaugeVec,
    pub seconds: HistogramVec,
    pub nacks: IntCounterVec,
    pub evals_processed: IntCounter,
    pub raft_backoff_seconds: Counter,
    pub raft_backoffs: IntCounter,
}

/// What a worker is doing, as `/v1/workers` shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WorkerStatus {
    pub id: u64,
    pub state: &'static str,
    pub paused: bool,
    pub evals_processed: u64,
    pub evals_nacked: u64,
    pub current_eval: Option<String>,
}

struct Worker {
    paused: watch::Sender<bool>,
    stop: watch::Sender<bool>,
    status: Arc<Mutex<WorkerStatus>>,
}

pub struct WorkerPool {
    workers: Mutex<Vec<Worker>>,
    next_id: Mutex<u64>,
    config: WorkerConfig,
    pub metrics: Arc<WorkerMetrics>,
}

impl WorkerPool {
    pub fn new(config: WorkerConfig, registry: &Registry) -> Self {
        let metrics = WorkerMetrics {
            states: IntGaugeVec::new(
                Opts::new(
                    "stampede_workers",
                    "Scheduling workers on this server by state: starting, dequeuing, working, backing_off, paused.",
                ),
                &["state"],
            )
            .unwrap(),
            seconds: HistogramVec::new(
                HistogramOpts::new(
                    "stampede_worker_seconds",
                    "Time workers spend in each step: dequeue, wait_for_index, invoke_scheduler, submit_plan.",
                )
                .buckets(prometheus::exponential_buckets(0.0001, 2.0, 18).unwrap()),
                &["step"],
            )
            .unwrap(),
            nacks: IntCounterVec::new(
                Opts::new("stampede_worker_nacks_total", "Evaluations workers gave back, by reason."),
                &["reason"],
            )
            .unwrap(),
            evals_processed: IntCounter::new(
                "stampede_worker_evals_processed_total",
                "Evaluations workers finished and acked.",
            )
            .unwrap(),
            raft_backoff_seconds: Counter::new(
                "stampede_worker_raft_backoff_seconds_total",
                "Time workers spent backing off after their state could not reach an evaluation.",
            )
            .unwrap(),
            raft_backoffs: IntCounter::new(
                "stampede_worker_raft_backoffs_total",
                "Backoffs workers started after their state could not reach an evaluation.",
            )
            .unwrap(),
        };
        registry
            .register(Box::new(metrics.seconds.clone()))
            .unwrap();
        registry
            .register(Box::new(metrics.raft_backoff_seconds.clone()))
            .unwrap();
        registry
            .register(Box::new(metrics.raft_backoffs.clone()))
            .unwrap();
        registry.register(Box::new(metrics.nacks.clone())).unwrap();
        registry.register(Box::new(metrics.states.clone())).unwrap();
        for state in WORKER_STATES {
            metrics.states.with_label_values(&[state]);
        }
        // Every reason at zero from the start, so a dashboard shows "none yet".
        for r in crate::broker::NACK_REASONS {
            metrics.nacks.with_label_values(&[r]);
        }
        registry
            .register(Box::new(metrics.evals_processed.clone()))
            .unwrap();
        Self {
            workers: Mutex::default(),
            next_id: Mutex::new(1),
            config,
            metrics: Arc::new(metrics),
        }
    }

    /// Starts or stops workers until `n` run.
    pub fn set_count(&self, cp: &Arc<ControlPlane>, n: usize) {
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        while workers.len() > n {
            let w = workers.pop().expect("len > n");
            let _ = w.stop.send(true);
        }
        while workers.len() < n {
            let id = {
                let mut next = self.next_id.lock().unwrap_or_else(|e| e.into_inner());
                *next += 1;
                *next - 1
            };
            self.metrics.states.with_label_values(&["starting"]).inc();
            let status = Arc::new(Mutex::new(WorkerStatus {
                id,
                state: "starting",
                paused: false,
                evals_processed: 0,
                evals_nacked: 0,
                current_eval: None,
            }));
            let (paused, paused_rx) = watch::channel(false);
            let (stop, stop_rx) = watch::channel(false);
            let run = WorkerRun {
                id,
                cp: cp.clone(),
                config: self.config.clone(),
                status: status.clone(),
                paused: paused_rx,
                stop: stop_rx,
            };
            tokio::spawn(run.run());
            workers.push(Worker {
                paused,
                stop,
                status,
            });
        }
    }

    /// Stops every worker (server shutdown).
    pub fn stop_all(&self) {
        for w in self
            .workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let _ = w.stop.send(true);
        }
    }

    /// Pauses or resumes worker `id`, or all when `None`. False if no such worker.
    pub fn set_paused(&self, id: Option<u64>, paused: bool) -> bool {
        let workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        let mut found = false;
        for w in workers.iter() {
            let wid = w.status.lock().unwrap_or_else(|e| e.into_inner()).id;
            if id.is_none_or(|id| id == wid) {
                w.paused.send_replace(paused);
                w.status.lock().unwrap_or_else(|e| e.into_inner()).paused = paused;
                found = true;
            }
        }
        found || (id.is_none() && workers.is_empty())
    }

    pub fn list(&self) -> Vec<WorkerStatus> {
        self.workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|w| w.status.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .collect()
    }
}

struct WorkerRun {
    id: u64,
    cp: Arc<ControlPlane>,
    config: WorkerConfig,
    status: Arc<Mutex<WorkerStatus>>,
    paused: watch::Receiver<bool>,
    stop: watch::Receiver<bool>,
}

/// Why an evaluation was given back.
#[derive(Debug)]
struct Nack {
    /// A bounded metric label.
    reason: &'static str,
    detail: String,
    /// The index the state did not reach within the raft sync limit.
    unreached: Option<u64>,
}

const SHUTTING_DOWN: &str = "shutting_down";

impl Nack {
    fn new(reason: &'static str, detail: impl Into<String>) -> Self {
        Self {
            reason,
            detail: detail.into(),
            unreached: None,
        }
    }

    /// The index to wait for, and for how long at most, before dequeuing
    /// again: only when the state was too far behind and backoff is on.
    fn raft_backoff(&self, limit: Option<Duration>) -> Option<(u64, Duration)> {
        Some((self.unreached?, limit?))
    }
}

/// How a raft backoff ended.
#[derive(Debug, PartialEq, Eq)]
enum BackoffEnd {
    CaughtUp,
    LimitReached,
    Stopped,
    Paused,
}

/// Waits until `store` reaches `index`, `limit` runs out, or the worker is
/// stopped or paused, whichever comes first.
async fn backoff_until(
    store: &StateStore,
    index: u64,
    limit: Duration,
    stop: &mut watch::Receiver<bool>,
    paused: &mut watch::Receiver<bool>,
) -> BackoffEnd {
    tokio::select! {
        biased;
        _ = stop.wait_for(|s| *s) => BackoffEnd::Stopped,
        _ = paused.wait_for(|p| *p) => BackoffEnd::Paused,
        synced = store.wait_for_index(index, limit) => {
            if synced { BackoffEnd::CaughtUp } else { BackoffEnd::LimitReached }
        }
    }
}

impl WorkerRun {
    fn set_state(&self, state: &'static str, eval: Option<&str>) {
        let mut s = self.status.lock().unwrap_or_else(|e| e.into_inner());
        if s.state != state {
            let gauge = &self.cp.workers.metrics.states;
            gauge.with_label_values(&[s.state]).dec();
            if state != "stopped" {
                gauge.with_label_values(&[state]).inc();
            }
        }
        s.state = state;
        s.current_eval = eval.map(str::to_string);
    }

    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    fn observe(&self, step: &str, since: Instant) {
        self.cp
            .workers
            .metrics
            .seconds
            .with_label_values(&[step])
            .observe(since.elapsed().as_secs_f64());
    }

    async fn run(mut self) {
        let mut backoff = BACKOFF_BASE;
        let mut rng = rand::rngs::StdRng::from_entropy();
        loop {
            if *self.paused.borrow() {
                self.set_state("paused", None);
                tokio::select! {
                    _ = self.paused.wait_for(|p| !*p) => {}
                    _ = self.stop.wait_for(|s| *s) => {}
                }
            }
            if self.stopped() {
                self.set_state("stopped", None);
                return;
            }
            self.set_state("dequeuing", None);
            let start = Instant::now();
            let req = EvalDequeueRequest {
                schedulers: vec![
                    JobType::Service as i32,
                    JobType::Batch as i32,
                    JobType::System as i32,
                ],
                timeout_ms: self.config.dequeue_timeout.as_millis() as u64,
            };
            let reply = tokio::select! {
                r = self.cp.dequeue(req, false) => r,
                _ = self.stop.wait_for(|s| *s) => continue,
            };
            self.observe("dequeue", start);
            let reply = match reply {
                Ok(r) => {
                    backoff = BACKOFF_BASE;
                    r
                }
                Err(e) => {
                    tracing::debug!("dequeue failed: {}", e.message());
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(BACKOFF_LIMIT);
                    continue;
                }
            };
            let Some(eval) = reply.eval else { continue };
            self.set_state("working", Some(&eval.id));
            let token = reply.token;
            match self
                .process(&eval, &token, reply.wait_index, &mut rng)
                .await
            {
                Ok(()) => {
                    let ack = EvalAckRequest {
                        eval_id: eval.id.clone(),
                        token,
                        reason: String::new(),
                    };
                    if let Err(e) = self.cp.ack(ack, false).await {
                        tracing::warn!(eval = eval.id, "ack failed: {}", e.message());
                    }
                    self.cp.workers.metrics.evals_processed.inc();
                    self.status
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .evals_processed += 1;
                }
                Err(nack) => {
                    self.give_back(&eval, token, &nack).await;
                    if let Some((index, limit)) = nack.raft_backoff(self.config.raft_backoff_limit)
                    {
                        self.raft_backoff(index, limit).await;
                    }
                }
            }
        }
    }

    /// Nacks `eval`, so that another worker (or this one, later) retries it.
    async fn give_back(&self, eval: &Evaluation, token: String, nack: &Nack) {
        let shutting_down = nack.reason == SHUTTING_DOWN;
        if shutting_down {
            tracing::info!(
                eval = eval.id,
                "worker {} stopping while waiting for its state; giving the evaluation back",
                self.id
            );
        } else {
            tracing::debug!(
                eval = eval.id,
                reason = nack.reason,
                "nack: {}",
                nack.detail
            );
        }
        self.cp
            .workers
            .metrics
            .nacks
            .with_label_values(&[nack.reason])
            .inc();
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .evals_nacked += 1;
        let req = EvalAckRequest {
            eval_id: eval.id.clone(),
            token,
            reason: nack.reason.into(),
        };
        match self.cp.nack(req, false).await {
            Ok(_) => {}
            // The server (or its link to the leader) is going away; the
            // leader's nack timeout gives the evaluation to another worker.
            Err(e) if shutting_down => {
                tracing::debug!(eval = eval.id, "nack while stopping: {}", e.message())
            }
            Err(e) => tracing::warn!(eval = eval.id, "nack failed: {}", e.message()),
        }
    }

    /// Seed 004: after a `raft_sync_timeout` nack, waits for the state to
    /// reach `index` (or `limit`) before dequeuing again. A pause ends the
    /// wait: the worker shows `paused`, and dequeues once resumed.
    async fn raft_backoff(&mut self, index: u64, limit: Duration) {
        self.set_state("backing_off", None);
        self.cp.workers.metrics.raft_backoffs.inc();
        let deadline = Instant::now() + limit;
        // In steps, so the seconds metric grows during a long backoff.
        let end = loop {
            let start = Instant::now();
            let step = deadline
                .saturating_duration_since(start)
                .min(RAFT_BACKOFF_STEP);
            let end = backoff_until(
                &self.cp.store,
                index,
                step,
                &mut self.stop,
                &mut self.paused,
            )
            .await;
            self.cp
                .workers
                .metrics
                .raft_backoff_seconds
                .inc_by(start.elapsed().as_secs_f64());
            if end != BackoffEnd::LimitReached || Instant::now() >= deadline {
                break end;
            }
        };
        match end {
            BackoffEnd::Stopped => {
                tracing::info!("worker {} stopping during raft backoff", self.id)
            }
            BackoffEnd::LimitReached => tracing::warn!(
                "worker {}: state still short of index {index} after a raft backoff of {limit:?}",
                self.id
            ),
            BackoffEnd::CaughtUp | BackoffEnd::Paused => {
                tracing::debug!("worker {}: raft backoff ended: {end:?}", self.id)
            }
        }
    }

    async fn wait_for_index(&self, index: u64) -> Result<(), Nack> {
        let start = Instant::now();
        let mut stop = self.stop.clone();
        let synced = tokio::select! {
            ok = self.cp.store.wait_for_index(index, self.config.raft_sync_limit) => ok,
            _ = stop.wait_for(|s| *s) => {
                return Err(Nack::new(SHUTTING_DOWN, "the server is shutting down"));
            }
        };
        self.observe("wait_for_index", start);
        if synced {
            Ok(())
        } else {
            Err(Nack {
                unreached: Some(index),
                ..Nack::new(
                    "raft_sync_timeout",
                    format!(
                        "state did not reach index {index} within {:?}",
                        self.config.raft_sync_limit
                    ),
                )
            })
        }
    }

    async fn process(
        &self,
        eval: &Evaluation,
        token: &str,
        wait_index: u64,
        rng: &mut rand::rngs::StdRng,
    ) -> Result<(), Nack> {
        self.wait_for_index(wait_index).await?;
        let mut failed = Default::default();
        let mut snapshot_index = 0;
        for attempt in 1..=self.config.max_plan_attempts {
            let start = Instant::now();
            let state = self.cp.store.snapshot();
            snapshot_index = state.index();
            let outcome = scheduler::schedule(&state, eval, rng);
            self.observe("invoke_scheduler", start);
            failed = outcome.failed;
            if scheduler::plan_is_empty(&outcome.plan) {
                break;
            }
            let mut plan = outcome.plan;
            plan.eval_token = token.to_string();
            let start = Instant::now();
            let result = self
                .cp
                .submit_plan(PlanSubmitRequest { plan: Some(plan) }, false)
                .await
                .map_err(|e| Nack::new("plan_failed", e.message()))?
                .result
                .unwrap_or_default();
            self.observe("submit_plan", start);
            if result.refresh_index == 0 {
                break;
            }
            if attempt == self.config.max_plan_attempts {
                return Err(Nack::new(
                    "plan_failed",
                    "the leader kept refusing the plan's placements",
                ));
            }
            self.wait_for_index(result.refresh_index).await?;
        }
        let evals = outcome_evals(eval, failed, snapshot_index);
        self.cp
            .update_evals(
                EvalUpdateRequest {
                    token: token.to_string(),
                    evals,
                },
                false,
            )
            .await
            .map_err(|e| Nack::new("update_failed", e.message()))?;
        Ok(())
    }
}

/// The evaluation updates that record how an evaluation ended: complete, or,
/// when placements failed, blocked until capacity changes (a blocked
/// evaluation that still does not fit is blocked again rather than copied).
pub fn outcome_evals(
    eval: &Evaluation,
    failed: std::collections::BTreeMap<String, u32>,
    snapshot_index: u64,
) -> Vec<Evaluation> {
    let mut done = Evaluation {
        snapshot_index,
        failed_placements: failed.clone().into_iter().collect(),
        ..eval.clone()
    };
    if failed.is_empty() {
        done.status = EvalStatus::Complete as i32;
        return vec![done];
    }
    if eval.status == EvalStatus::Blocked as i32 {
        done.status = EvalStatus::Blocked as i32;
        return vec![done];
    }
    let blocked = Evaluation {
        id: uuid::Uuid::new_v4().to_string(),
        status: EvalStatus::Blocked as i32,
        status_description: "placements did not fit; waiting for capacity".into(),
        previous_eval: eval.id.clone(),
        triggered_by: "queued_allocs".into(),
        failed_placements: failed.into_iter().collect(),
        snapshot_index,
        create_index: 0,
        modify_index: 0,
        blocked_eval: String::new(),
        ..eval.clone()
    };
    done.status = EvalStatus::Complete as i32;
    done.blocked_eval = blocked.id.clone();
    vec![done, blocked]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_raft_sync_timeout_backs_off_and_only_when_on() {
        let limit = Some(Duration::from_secs(30));
        let behind = Nack {
            unreached: Some(9),
            ..Nack::new("raft_sync_timeout", "")
        };
        assert_eq!(
            behind.raft_backoff(limit),
            Some((9, Duration::from_secs(30)))
        );
        assert_eq!(behind.raft_backoff(None), None);
        assert_eq!(Nack::new("plan_failed", "").raft_backoff(limit), None);
        assert_eq!(Nack::new(SHUTTING_DOWN, "").raft_backoff(limit), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_raft_backoff_ends_at_catch_up_limit_stop_or_pause() {
        use tokio::time::{sleep, Instant};
        const LIMIT: Duration = Duration::from_secs(30);
        async fn timed(
            store: &StateStore,
            index: u64,
            stop: &mut watch::Receiver<bool>,
            paused: &mut watch::Receiver<bool>,
        ) -> (BackoffEnd, Duration) {
            let start = Instant::now();
            let end = backoff_until(store, index, LIMIT, stop, paused).await;
            (end, start.elapsed())
        }
        let store = Arc::new(StateStore::default());
        let (stop_tx, mut stop) = watch::channel(false);
        let (pause_tx, mut paused) = watch::channel(false);

        let writer = store.clone();
        tokio::spawn(async move {
            sleep(Duration::from_secs(2)).await;
            writer.write(|s| s.set_index(5));
        });
        assert_eq!(
            timed(&store, 5, &mut stop, &mut paused).await,
            (BackoffEnd::CaughtUp, Duration::from_secs(2))
        );
        assert_eq!(
            timed(&store, 4, &mut stop, &mut paused).await,
            (BackoffEnd::CaughtUp, Duration::ZERO)
        );
        assert_eq!(
            timed(&store, 6, &mut stop, &mut paused).await,
            (BackoffEnd::LimitReached, LIMIT)
        );

        tokio::spawn(async move {
            sleep(Duration::from_secs(1)).await;
            pause_tx.send_replace(true);
            sleep(Duration::from_secs(1)).await;
            stop_tx.send_replace(true);
        });
        assert_eq!(
            timed(&store, 6, &mut stop, &mut paused).await,
            (BackoffEnd::Paused, Duration::from_secs(1))
        );
        // Stopping wins over pausing.
        sleep(Duration::from_secs(2)).await;
        assert_eq!(
            timed(&store, 6, &mut stop, &mut paused).await,
            (BackoffEnd::Stopped, Duration::ZERO)
        );
    }

    #[test]
    fn serve_options_thread_the_backoff_into_the_workers() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            opts: crate::config::ServeOpts,
        }
        let base = [
            "serve",
            "--id",
            "1",
            "--data-dir",
            "d",
            "--peers",
            "1=127.0.0.1:4647",
        ];
        let parse = |extra: &[&str]| {
            let cli = <Cli as clap::Parser>::try_parse_from(base.iter().chain(extra)).unwrap();
            cli.opts
        };
        let defaults = parse(&[]);
        assert_eq!(defaults.apply_delay, Duration::ZERO);
        assert_eq!(
            defaults.control_config().worker.raft_backoff_limit,
            WorkerConfig::default().raft_backoff_limit
        );
        let off = parse(&[
            "--worker-raft-backoff",
            "off",
            "--worker-raft-backoff-limit",
            "2s",
        ]);
        assert_eq!(off.control_config().worker.raft_backoff_limit, None);
        let on = parse(&[
            "--worker-raft-backoff",
            "on",
            "--worker-raft-backoff-limit",
            "2s",
        ]);
        assert_eq!(
            on.control_config().worker.raft_backoff_limit,
            Some(Duration::from_secs(2))
        );
        let bad = base.into_iter().chain(["--worker-raft-backoff", "maybe"]);
        assert!(<Cli as clap::Parser>::try_parse_from(bad).is_err());
    }

    #[test]
    fn failed_placements_block_a_new_evaluation_once() {
        let eval = Evaluation {
            id: "e1".into(),
            job_id: "web".into(),
            status: EvalStatus::Pending as i32,
            ..Default::default()
        };
        assert_eq!(
            outcome_evals(&eval, Default::default(), 7)[0].status,
            EvalStatus::Complete as i32
        );

        let failed: std::collections::BTreeMap<String, u32> = [("web".to_string(), 3)].into();
        let evals = outcome_evals(&eval, failed.clone(), 7);
        assert_eq!(evals.len(), 2);
        assert_eq!(evals[0].status, EvalStatus::Complete as i32);
        assert_eq!(evals[1].status, EvalStatus::Blocked as i32);
        assert_eq!(evals[0].blocked_eval, evals[1].id);
        assert_eq!(evals[1].previous_eval, "e1");

        // Processing the blocked evaluation again without room re-blocks it.
        let again = outcome_evals(&evals[1], failed, 9);
        assert_eq!(again.len(), 1);
        assert_eq!(
            (again[0].id.as_str(), again[0].status),
            (evals[1].id.as_str(), EvalStatus::Blocked as i32)
        );
    }
}
