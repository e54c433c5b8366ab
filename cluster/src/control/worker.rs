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

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::{Counter, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Registry};
use rand::SeedableRng;
use serde::Serialize;
use stampede_proto::metric_defs::{
    counter, histogram_vec, int_counter, int_counter_vec, int_gauge_vec,
};
use stampede_proto::metric_names;
use stampede_proto::{
    lock, EvalAckRequest, EvalDequeueReply, EvalDequeueRequest, EvalReapRequest, EvalStatus,
    EvalUpdateRequest, Evaluation, JobType, Plan, PlanResult,
};
use stampede_proto::{unix_us, JobStage};
use tokio::sync::watch;

use crate::control::error::ControlError;
use crate::control::leader::broker::NackReason;
use crate::control::plan_split::{split, PlanBudget};
use crate::model::JobStages;
use crate::scheduler;
use crate::scheduler::core::{self, CoreJob, GcThresholds};
use crate::state::gc::Cutoffs;
use crate::state::{State, StateStore};

/// What a worker needs of the leader: the broker's deliveries, the plan
/// applier and evaluation updates. The server's implementation routes each
/// call to whichever server leads; a test can give a worker its own.
pub trait Leader: Clone + Send + Sync + 'static {
    fn dequeue(
        &self,
        req: EvalDequeueRequest,
    ) -> impl Future<Output = Result<EvalDequeueReply, ControlError>> + Send;
    fn ack(&self, req: EvalAckRequest) -> impl Future<Output = Result<(), ControlError>> + Send;
    fn nack(&self, req: EvalAckRequest) -> impl Future<Output = Result<(), ControlError>> + Send;
    fn submit_plan(
        &self,
        plan: Plan,
    ) -> impl Future<Output = Result<PlanResult, ControlError>> + Send;
    /// Records how an evaluation ended; returns the entry's index.
    fn update_evals(
        &self,
        req: EvalUpdateRequest,
    ) -> impl Future<Output = Result<u64, ControlError>> + Send;
    /// A core evaluation's garbage collection write; returns its index.
    fn reap(&self, req: EvalReapRequest) -> impl Future<Output = Result<u64, ControlError>> + Send;
    /// Resolves when the leadership moves from where it is now (another
    /// leader known, this server taking or leaving the lead): a worker
    /// whose dequeue failed in an election tries again then, not after
    /// its backoff.
    fn leadership_moved(&self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }
}

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
    /// How much one submitted plan may carry; a larger one goes in pieces.
    pub plan_budget: PlanBudget,
    /// How old objects must be before a core evaluation collects them.
    pub gc: GcThresholds,
}

impl WorkerConfig {
    /// Nomad's raftSyncLimit.
    pub const RAFT_SYNC_LIMIT: Duration = Duration::from_secs(5);
    pub const RAFT_BACKOFF_LIMIT: Duration = Duration::from_secs(30);
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            raft_sync_limit: Self::RAFT_SYNC_LIMIT,
            raft_backoff_limit: Some(Self::RAFT_BACKOFF_LIMIT),
            dequeue_timeout: Duration::from_millis(500),
            max_plan_attempts: 5,
            plan_budget: PlanBudget::default(),
            gc: GcThresholds::default(),
        }
    }
}

/// Most workers one server may be asked to run (`--workers`, `/v1/workers`).
pub const MAX_WORKERS: usize = 256;

/// Backoff after a failed dequeue: 20 ms doubling up to 1 s.
const BACKOFF_BASE: Duration = Duration::from_millis(20);
const BACKOFF_LIMIT: Duration = Duration::from_secs(1);

/// How often a raft backoff adds its time to its metric.
const RAFT_BACKOFF_STEP: Duration = Duration::from_secs(1);

/// What a worker can be doing, as `/v1/workers` and `stampede_workers{state}`
/// name it (a stopped worker leaves the list).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerState {
    Starting,
    Dequeuing,
    Working,
    BackingOff,
    Paused,
    Stopped,
}

impl WorkerState {
    /// The states a running worker can be in.
    pub const LIVE: [WorkerState; 5] = [
        WorkerState::Starting,
        WorkerState::Dequeuing,
        WorkerState::Working,
        WorkerState::BackingOff,
        WorkerState::Paused,
    ];

    pub fn label(self) -> &'static str {
        match self {
            WorkerState::Starting => "starting",
            WorkerState::Dequeuing => "dequeuing",
            WorkerState::Working => "working",
            WorkerState::BackingOff => "backing_off",
            WorkerState::Paused => "paused",
            WorkerState::Stopped => "stopped",
        }
    }
}

pub struct WorkerMetrics {
    /// Workers of this server by state.
    pub states: IntGaugeVec,
    pub seconds: HistogramVec,
    pub nacks: IntCounterVec,
    pub evals_processed: IntCounter,
    pub raft_backoff_seconds: Counter,
    pub raft_backoffs: IntCounter,
    /// `catch_up`, `schedule` and `plan_commit` of jobs' paths.
    pub stages: JobStages,
}

impl WorkerMetrics {
    fn new(registry: &Registry, stages: JobStages) -> Self {
        Self {
            stages,
            states: int_gauge_vec(
                registry,
                "stampede_workers",
                "Scheduling workers on this server by state: starting, dequeuing, working, backing_off, paused.",
                "state",
                &WorkerState::LIVE.map(WorkerState::label),
            ),
            seconds: histogram_vec(
                registry,
                "stampede_worker_seconds",
                "Time workers spend in each step: dequeue, wait_for_index, invoke_scheduler, submit_plan.",
                "step",
                (0.0001, 2.0, 18),
            ),
            // Every reason at zero from the start, so a dashboard shows "none yet".
            nacks: int_counter_vec(
                registry,
                metric_names::WORKER_NACKS_TOTAL,
                "Evaluations workers gave back, by reason.",
                "reason",
                &NackReason::ALL.map(NackReason::label),
            ),
            evals_processed: int_counter(
                registry,
                "stampede_worker_evals_processed_total",
                "Evaluations workers finished and acked.",
            ),
            raft_backoff_seconds: counter(
                registry,
                "stampede_worker_raft_backoff_seconds_total",
                "Time workers spent backing off after their state could not reach an evaluation.",
            ),
            raft_backoffs: int_counter(
                registry,
                "stampede_worker_raft_backoffs_total",
                "Backoffs workers started after their state could not reach an evaluation.",
            ),
        }
    }
}

/// What a worker is doing, as `/v1/workers` shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WorkerStatus {
    pub id: u64,
    pub state: WorkerState,
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

/// The scheduler workers of one server.
pub struct WorkerPool<L: Leader> {
    /// Where the workers' evaluations, plans and updates go.
    leader: L,
    /// The local state they wait on and schedule against.
    store: Arc<StateStore>,
    config: WorkerConfig,
    pub metrics: Arc<WorkerMetrics>,
    workers: Mutex<Vec<Worker>>,
    next_id: Mutex<u64>,
}

impl<L: Leader> WorkerPool<L> {
    pub fn new(
        leader: L,
        store: Arc<StateStore>,
        config: WorkerConfig,
        registry: &Registry,
        stages: JobStages,
    ) -> Self {
        Self {
            leader,
            store,
            config,
            metrics: Arc::new(WorkerMetrics::new(registry, stages)),
            workers: Mutex::default(),
            next_id: Mutex::new(1),
        }
    }

    /// Starts or stops workers until `n` run.
    pub fn set_count(&self, n: usize) {
        let mut workers = lock(&self.workers);
        while workers.len() > n {
            let w = workers.pop().expect("len > n");
            let _ = w.stop.send(true);
        }
        while workers.len() < n {
            let id = {
                let mut next = lock(&self.next_id);
                *next += 1;
                *next - 1
            };
            self.metrics
                .states
                .with_label_values(&[WorkerState::Starting.label()])
                .inc();
            let status = Arc::new(Mutex::new(WorkerStatus {
                id,
                state: WorkerState::Starting,
                paused: false,
                evals_processed: 0,
                evals_nacked: 0,
                current_eval: None,
            }));
            let (paused, paused_rx) = watch::channel(false);
            let (stop, stop_rx) = watch::channel(false);
            let run = WorkerRun {
                id,
                leader: self.leader.clone(),
                store: self.store.clone(),
                metrics: self.metrics.clone(),
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
        for w in lock(&self.workers).drain(..) {
            let _ = w.stop.send(true);
        }
    }

    /// Pauses or resumes worker `id`, or all when `None`. False if no such worker.
    pub fn set_paused(&self, id: Option<u64>, paused: bool) -> bool {
        let workers = lock(&self.workers);
        let mut found = false;
        for w in workers.iter() {
            let wid = lock(&w.status).id;
            if id.is_none_or(|id| id == wid) {
                w.paused.send_replace(paused);
                lock(&w.status).paused = paused;
                found = true;
            }
        }
        found || (id.is_none() && workers.is_empty())
    }

    pub fn list(&self) -> Vec<WorkerStatus> {
        lock(&self.workers)
            .iter()
            .map(|w| lock(&w.status).clone())
            .collect()
    }
}

/// One worker's loop and everything it may touch.
struct WorkerRun<L: Leader> {
    id: u64,
    leader: L,
    store: Arc<StateStore>,
    metrics: Arc<WorkerMetrics>,
    config: WorkerConfig,
    status: Arc<Mutex<WorkerStatus>>,
    paused: watch::Receiver<bool>,
    stop: watch::Receiver<bool>,
}

/// Why an evaluation was given back.
#[derive(Debug)]
struct Nack {
    reason: NackReason,
    detail: String,
    /// The index the state did not reach within the raft sync limit.
    unreached: Option<u64>,
}

impl Nack {
    fn new(reason: NackReason, detail: impl Into<String>) -> Self {
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

impl<L: Leader> WorkerRun<L> {
    fn set_state(&self, state: WorkerState, eval: Option<&str>) {
        let mut s = lock(&self.status);
        if s.state != state {
            let gauge = &self.metrics.states;
            gauge.with_label_values(&[s.state.label()]).dec();
            if state != WorkerState::Stopped {
                gauge.with_label_values(&[state.label()]).inc();
            }
        }
        s.state = state;
        s.current_eval = eval.map(str::to_string);
    }

    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    fn observe(&self, step: &str, since: Instant) {
        self.metrics
            .seconds
            .with_label_values(&[step])
            .observe(since.elapsed().as_secs_f64());
    }

    async fn run(mut self) {
        let mut backoff = BACKOFF_BASE;
        let mut rng = rand::rngs::StdRng::from_entropy();
        loop {
            if *self.paused.borrow() {
                self.set_state(WorkerState::Paused, None);
                tokio::select! {
                    _ = self.paused.wait_for(|p| !*p) => {}
                    _ = self.stop.wait_for(|s| *s) => {}
                }
            }
            if self.stopped() {
                self.set_state(WorkerState::Stopped, None);
                return;
            }
            self.set_state(WorkerState::Dequeuing, None);
            let start = Instant::now();
            let req = EvalDequeueRequest {
                schedulers: vec![
                    JobType::Service as i32,
                    JobType::Batch as i32,
                    JobType::System as i32,
                    JobType::Core as i32,
                ],
                timeout_ms: self.config.dequeue_timeout.as_millis() as u64,
            };
            let reply = tokio::select! {
                r = self.leader.dequeue(req) => r,
                _ = self.stop.wait_for(|s| *s) => continue,
            };
            self.observe("dequeue", start);
            let reply = match reply {
                Ok(r) => {
                    backoff = BACKOFF_BASE;
                    r
                }
                Err(e) => {
                    tracing::debug!("dequeue failed: {e}");
                    // Doubling up to 1 s, a worker failing through an
                    // election slept 320-640 ms past its end: 250 ms of
                    // broker wait for the jobs submitted during it.
                    // The backoff starts over once the leadership moved:
                    // the new leader may still be restoring its broker.
                    backoff = tokio::select! {
                        _ = tokio::time::sleep(backoff) => (backoff * 2).min(BACKOFF_LIMIT),
                        _ = self.leader.leadership_moved() => BACKOFF_BASE,
                    };
                    continue;
                }
            };
            let Some(mut eval) = reply.eval else { continue };
            if self.metrics.stages.on() {
                eval.times.get_or_insert_default().dequeued_us = unix_us();
            }
            self.set_state(WorkerState::Working, Some(&eval.id));
            let token = reply.token;
            match self
                .process(&mut eval, &token, reply.wait_index, &mut rng)
                .await
            {
                Ok(()) => {
                    let ack = EvalAckRequest {
                        eval_id: eval.id.clone(),
                        token,
                        reason: String::new(),
                    };
                    if let Err(e) = self.leader.ack(ack).await {
                        tracing::warn!(eval = eval.id, "ack failed: {e}");
                    }
                    self.metrics.evals_processed.inc();
                    lock(&self.status).evals_processed += 1;
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
        let shutting_down = nack.reason == NackReason::ShuttingDown;
        if shutting_down {
            tracing::info!(
                eval = eval.id,
                "worker {} stopping while waiting for its state; giving the evaluation back",
                self.id
            );
        } else {
            tracing::debug!(
                eval = eval.id,
                reason = nack.reason.label(),
                "nack: {}",
                nack.detail
            );
        }
        self.metrics
            .nacks
            .with_label_values(&[nack.reason.label()])
            .inc();
        lock(&self.status).evals_nacked += 1;
        let req = EvalAckRequest {
            eval_id: eval.id.clone(),
            token,
            reason: nack.reason.label().into(),
        };
        match self.leader.nack(req).await {
            Ok(_) => {}
            // The server (or its link to the leader) is going away; the
            // leader's nack timeout gives the evaluation to another worker.
            Err(e) if shutting_down => {
                tracing::debug!(eval = eval.id, "nack while stopping: {e}")
            }
            Err(e) => tracing::warn!(eval = eval.id, "nack failed: {e}"),
        }
    }

    /// Seed 004: after a `raft_sync_timeout` nack, waits for the state to
    /// reach `index` (or `limit`) before dequeuing again. A pause ends the
    /// wait: the worker shows `paused`, and dequeues once resumed.
    async fn raft_backoff(&mut self, index: u64, limit: Duration) {
        self.set_state(WorkerState::BackingOff, None);
        self.metrics.raft_backoffs.inc();
        let deadline = Instant::now() + limit;
        // In steps, so the seconds metric grows during a long backoff.
        let end = loop {
            let start = Instant::now();
            let step = deadline
                .saturating_duration_since(start)
                .min(RAFT_BACKOFF_STEP);
            let end =
                backoff_until(&self.store, index, step, &mut self.stop, &mut self.paused).await;
            self.metrics
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
            ok = self.store.wait_for_index(index, self.config.raft_sync_limit) => ok,
            _ = stop.wait_for(|s| *s) => {
                return Err(Nack::new(NackReason::ShuttingDown, "the server is shutting down"));
            }
        };
        self.observe("wait_for_index", start);
        if synced {
            Ok(())
        } else {
            Err(Nack {
                unreached: Some(index),
                ..Nack::new(
                    NackReason::RaftSyncTimeout,
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
        eval: &mut Evaluation,
        token: &str,
        wait_index: u64,
        rng: &mut rand::rngs::StdRng,
    ) -> Result<(), Nack> {
        self.wait_for_index(wait_index).await?;
        let stages = &self.metrics.stages;
        let (dequeued_us, caught_up_us) = if stages.on() {
            let times = eval.times.get_or_insert_default();
            times.caught_up_us = unix_us();
            (times.dequeued_us, times.caught_up_us)
        } else {
            (0, 0)
        };
        stages.observe_between(JobStage::CatchUp, dequeued_us, caught_up_us);
        let eval = &*eval;
        if let Some(job) = CoreJob::of(eval) {
            return self.collect_garbage(job, eval, token).await;
        }
        // How the evaluation ends if nothing more is written: the outcome
        // on the last state scheduled on.
        let mut evals = Vec::new();
        for attempt in 1..=self.config.max_plan_attempts {
            let start = Instant::now();
            // The copy lives only while the scheduler reads it: a copy alive
            // while entries apply makes each apply copy what it touches, and
            // a plan waits for its commit for longer than it takes to make.
            let (outcome, outcome_evals) = {
                let state = self.store.snapshot();
                let outcome = scheduler::schedule(&state, eval, rng);
                let evals = self.outcome(eval, &state, outcome.failed.clone());
                (outcome, evals)
            };
            self.observe("invoke_scheduler", start);
            evals = outcome_evals;
            if scheduler::plan_is_empty(&outcome.plan) {
                break;
            }
            let mut plan = outcome.plan;
            plan.eval_token = token.to_string();
            // How the evaluation ends if the plan is made in full: the
            // leader writes it in the plan's entry (with raft batching on).
            let submitted_us = unix_us();
            for e in evals.iter_mut().filter(|e| e.id == eval.id && stages.on()) {
                e.times.get_or_insert_default().plan_submitted_us = submitted_us;
            }
            plan.evals = evals.clone();
            let start = Instant::now();
            let result = self.submit_in_pieces(plan).await?;
            self.observe("submit_plan", start);
            if result.refresh_index == 0 {
                stages.observe_between(JobStage::Schedule, caught_up_us, submitted_us);
                stages.observe(JobStage::PlanCommit, start.elapsed().as_secs_f64());
                if result.evals_recorded {
                    return Ok(());
                }
                break;
            }
            if attempt == self.config.max_plan_attempts {
                return Err(Nack::new(
                    NackReason::PlanFailed,
                    "the leader kept refusing the plan's placements",
                ));
            }
            self.wait_for_index(result.refresh_index).await?;
        }
        self.leader
            .update_evals(EvalUpdateRequest {
                token: token.to_string(),
                evals,
            })
            .await
            .map_err(|e| Nack::new(NackReason::UpdateFailed, e.to_string()))?;
        Ok(())
    }

    /// Submits `plan` in pieces within the budget, one after another, until
    /// the last or one the leader refused in part; returns that one's result.
    async fn submit_in_pieces(&self, plan: Plan) -> Result<PlanResult, Nack> {
        let mut result = PlanResult::default();
        for piece in split(plan, self.config.plan_budget) {
            result = self
                .leader
                .submit_plan(piece)
                .await
                .map_err(|e| Nack::new(NackReason::PlanFailed, e.to_string()))?;
            if result.refresh_index != 0 {
                break;
            }
        }
        Ok(result)
    }

    /// The evaluation updates that record `eval`'s outcome on `state`.
    fn outcome(
        &self,
        eval: &Evaluation,
        state: &State,
        failed: std::collections::BTreeMap<String, u32>,
    ) -> Vec<Evaluation> {
        let classes = match state.job(&eval.job_id) {
            Some(job) if !failed.is_empty() => {
                scheduler::class_eligibility(state, &job, failed.keys().map(String::as_str))
            }
            _ => Default::default(),
        };
        outcome_evals(eval, failed, state.index(), classes)
    }
}

impl<L: Leader> WorkerRun<L> {
    /// Runs a core evaluation: finds what its kind of collection may remove
    /// on this server's state, and sends the leader one write per batch.
    /// Nothing records a core evaluation itself; the ack ends it.
    async fn collect_garbage(
        &self,
        job: CoreJob,
        eval: &Evaluation,
        token: &str,
    ) -> Result<(), Nack> {
        let start = Instant::now();
        let state = self.store.snapshot();
        let cutoffs = match job {
            CoreJob::ForceGc => Cutoffs::all(state.index()),
            _ => self.config.gc.cutoffs(&self.store),
        };
        let writes = core::collect(&state, job, &cutoffs);
        self.observe("invoke_scheduler", start);
        for collect in writes {
            self.leader
                .reap(EvalReapRequest {
                    eval_id: eval.id.clone(),
                    token: token.to_string(),
                    collect: Some(collect),
                })
                .await
                .map_err(|e| Nack::new(NackReason::UpdateFailed, e.to_string()))?;
        }
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
    class_eligibility: std::collections::BTreeMap<String, bool>,
) -> Vec<Evaluation> {
    let mut done = Evaluation {
        snapshot_index,
        failed_placements: failed.clone().into_iter().collect(),
        class_eligibility: class_eligibility.clone(),
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
        class_eligibility,
        create_index: 0,
        modify_index: 0,
        blocked_eval: String::new(),
        // Its own path starts when it is made ready.
        times: None,
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
            ..Nack::new(NackReason::RaftSyncTimeout, "")
        };
        assert_eq!(
            behind.raft_backoff(limit),
            Some((9, Duration::from_secs(30)))
        );
        assert_eq!(behind.raft_backoff(None), None);
        assert_eq!(
            Nack::new(NackReason::PlanFailed, "").raft_backoff(limit),
            None
        );
        assert_eq!(
            Nack::new(NackReason::ShuttingDown, "").raft_backoff(limit),
            None
        );
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
    fn failed_placements_block_a_new_evaluation_once() {
        let eval = Evaluation {
            id: "e1".into(),
            job_id: "web".into(),
            status: EvalStatus::Pending as i32,
            ..Default::default()
        };
        assert_eq!(
            outcome_evals(&eval, Default::default(), 7, Default::default())[0].status,
            EvalStatus::Complete as i32
        );

        let failed: std::collections::BTreeMap<String, u32> = [("web".to_string(), 3)].into();
        let evals = outcome_evals(&eval, failed.clone(), 7, Default::default());
        assert_eq!(evals.len(), 2);
        assert_eq!(evals[0].status, EvalStatus::Complete as i32);
        assert_eq!(evals[1].status, EvalStatus::Blocked as i32);
        assert_eq!(evals[0].blocked_eval, evals[1].id);
        assert_eq!(evals[1].previous_eval, "e1");

        // Processing the blocked evaluation again without room re-blocks it.
        let again = outcome_evals(&evals[1], failed, 9, Default::default());
        assert_eq!(again.len(), 1);
        assert_eq!(
            (again[0].id.as_str(), again[0].status),
            (evals[1].id.as_str(), EvalStatus::Blocked as i32)
        );
    }

    /// A leader in memory: hands out the evaluations it is given, answers
    /// plans with `plan_answer`, and records what the worker did.
    #[derive(Clone)]
    struct FakeLeader {
        queue: Arc<Mutex<Vec<Evaluation>>>,
        plan_answer: Result<PlanResult, &'static str>,
        seen: Arc<Mutex<Seen>>,
        done: Arc<tokio::sync::Notify>,
    }

    #[derive(Default, Debug)]
    struct Seen {
        plans: Vec<Plan>,
        updates: Vec<EvalUpdateRequest>,
        reaps: Vec<EvalReapRequest>,
        acks: Vec<String>,
        nacks: Vec<(String, String)>,
    }

    impl FakeLeader {
        fn new(evals: Vec<Evaluation>, plan_answer: Result<PlanResult, &'static str>) -> Self {
            Self {
                queue: Arc::new(Mutex::new(evals)),
                plan_answer,
                seen: Arc::default(),
                done: Arc::default(),
            }
        }
    }

    impl Leader for FakeLeader {
        async fn dequeue(&self, _: EvalDequeueRequest) -> Result<EvalDequeueReply, ControlError> {
            let eval = lock(&self.queue).pop();
            if eval.is_none() {
                // Nothing more: wait like a broker with an empty queue.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok(EvalDequeueReply {
                token: eval
                    .as_ref()
                    .map(|e| format!("token-{}", e.id))
                    .unwrap_or_default(),
                wait_index: eval.as_ref().map_or(0, |e| e.modify_index),
                eval,
            })
        }

        async fn ack(&self, req: EvalAckRequest) -> Result<(), ControlError> {
            lock(&self.seen).acks.push(req.eval_id);
            self.done.notify_one();
            Ok(())
        }

        async fn nack(&self, req: EvalAckRequest) -> Result<(), ControlError> {
            lock(&self.seen).nacks.push((req.eval_id, req.reason));
            self.done.notify_one();
            Ok(())
        }

        async fn submit_plan(&self, plan: Plan) -> Result<PlanResult, ControlError> {
            lock(&self.seen).plans.push(plan);
            self.plan_answer
                .clone()
                .map_err(|m| ControlError::Unavailable(m.into()))
        }

        async fn reap(&self, req: EvalReapRequest) -> Result<u64, ControlError> {
            lock(&self.seen).reaps.push(req);
            Ok(10)
        }

        async fn update_evals(&self, req: EvalUpdateRequest) -> Result<u64, ControlError> {
            lock(&self.seen).updates.push(req);
            Ok(9)
        }
    }

    /// A cluster in an election until `elected` turns true: every dequeue
    /// fails until then; each dequeue after it is timed.
    #[derive(Clone)]
    struct ElectingLeader {
        elected: watch::Receiver<bool>,
        answered: Arc<Mutex<Vec<tokio::time::Instant>>>,
    }

    impl Leader for ElectingLeader {
        async fn dequeue(&self, _: EvalDequeueRequest) -> Result<EvalDequeueReply, ControlError> {
            if !*self.elected.borrow() {
                return Err(ControlError::Unavailable(
                    "no raft leader is elected yet".into(),
                ));
            }
            lock(&self.answered).push(tokio::time::Instant::now());
            tokio::time::sleep(Duration::from_millis(5)).await;
            Ok(EvalDequeueReply::default())
        }
        async fn ack(&self, _: EvalAckRequest) -> Result<(), ControlError> {
            Ok(())
        }
        async fn nack(&self, _: EvalAckRequest) -> Result<(), ControlError> {
            Ok(())
        }
        async fn submit_plan(&self, _: Plan) -> Result<PlanResult, ControlError> {
            Ok(PlanResult::default())
        }
        async fn reap(&self, _: EvalReapRequest) -> Result<u64, ControlError> {
            Ok(0)
        }
        async fn update_evals(&self, _: EvalUpdateRequest) -> Result<u64, ControlError> {
            Ok(0)
        }
        async fn leadership_moved(&self) {
            let mut elected = self.elected.clone();
            let now = *elected.borrow_and_update();
            let _ = elected.wait_for(|&e| e != now).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_worker_failing_through_an_election_dequeues_once_a_leader_is_known() {
        let (elect, elected) = watch::channel(false);
        let leader = ElectingLeader {
            elected,
            answered: Arc::default(),
        };
        let pool = WorkerPool::new(
            leader.clone(),
            Arc::new(StateStore::default()),
            WorkerConfig::default(),
            &Registry::new(),
            JobStages::new(&Registry::new()),
        );
        pool.set_count(1);
        // A second of failed dequeues: the backoff is up to 640 ms by now.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let at = tokio::time::Instant::now();
        elect.send(true).unwrap();
        while lock(&leader.answered).is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let first = lock(&leader.answered)[0];
        assert!(
            first - at <= Duration::from_millis(5),
            "dequeued {:?} after the leader was known",
            first - at
        );
        pool.stop_all();
    }

    /// A state with one ready node of 1,000 MHz and a service job of three
    /// 100 MHz allocations, and the job's pending evaluation.
    fn one_job() -> (Arc<StateStore>, Evaluation) {
        use stampede_proto::{
            log_entry::Msg, Job, JobRegisterEntry, LogEntry, Node, NodeRegisterEntry, NodeStatus,
            Resources, TaskGroup,
        };
        let store = Arc::new(StateStore::default());
        let job = Job {
            id: "web".into(),
            r#type: JobType::Service as i32,
            priority: 50,
            task_groups: vec![TaskGroup {
                name: "web".into(),
                count: Some(3),
                resources: Some(Resources {
                    cpu_mhz: 100,
                    memory_mb: 64,
                }),
                ..Default::default()
            }],
            ..Default::default()
        };
        let eval = crate::model::new_eval(&job, "job_register", None);
        let node = Node {
            id: "n1".into(),
            status: NodeStatus::Ready as i32,
            resources: Some(Resources {
                cpu_mhz: 1_000,
                memory_mb: 1_000,
            }),
            ..Default::default()
        };
        let entries = [
            Msg::NodeRegister(NodeRegisterEntry {
                ticket: 0,
                node: Some(node),
                evals: vec![],
                secret_hash: Vec::new(),
            }),
            Msg::JobRegister(JobRegisterEntry {
                ticket: 0,
                job: Some(job),
                eval: Some(eval.clone()),
            }),
        ];
        store.write(|s| {
            for (i, msg) in entries.into_iter().enumerate() {
                let entry = LogEntry { msg: Some(msg) };
                s.apply(i as u64 + 1, &entry, &mut Default::default());
            }
        });
        let eval = store.snapshot().eval(&eval.id).unwrap();
        (store, Evaluation::clone(&eval))
    }

    async fn run_one(leader: FakeLeader, store: Arc<StateStore>) -> Seen {
        let pool = WorkerPool::new(
            leader.clone(),
            store,
            WorkerConfig::default(),
            &Registry::new(),
            JobStages::new(&Registry::new()),
        );
        let done = leader.done.notified();
        pool.set_count(1);
        done.await;
        pool.stop_all();
        std::mem::take(&mut *lock(&leader.seen))
    }

    #[tokio::test]
    async fn a_worker_plans_an_evaluation_records_it_and_acks() {
        let (store, eval) = one_job();
        let leader = FakeLeader::new(vec![eval.clone()], Ok(PlanResult::default()));
        let seen = run_one(leader, store).await;

        assert_eq!(seen.plans.len(), 1);
        let plan = &seen.plans[0];
        assert_eq!(plan.eval_token, format!("token-{}", eval.id));
        let placed: usize = plan.node_allocation.values().map(|l| l.allocs.len()).sum();
        assert_eq!(placed, 3, "three allocations fit on the one node");
        assert_eq!(seen.updates.len(), 1);
        assert_eq!(seen.updates[0].evals[0].id, eval.id);
        assert_eq!(seen.updates[0].evals[0].status, EvalStatus::Complete as i32);
        assert_eq!(seen.acks, vec![eval.id]);
        assert!(seen.nacks.is_empty());
        // The evaluation written with the plan carries the worker's steps.
        let times = plan.evals[0].times.expect("the worker's times");
        let steps = [
            times.dequeued_us,
            times.caught_up_us,
            times.plan_submitted_us,
        ];
        assert!(steps[0] != 0 && steps.is_sorted(), "{times:?}");
    }

    #[tokio::test]
    async fn a_refused_plan_is_nacked_as_plan_failed_and_not_recorded() {
        let (store, eval) = one_job();
        let leader = FakeLeader::new(vec![eval.clone()], Err("the plan queue is closed"));
        let seen = run_one(leader, store).await;

        assert_eq!(seen.plans.len(), 1);
        assert!(
            seen.updates.is_empty(),
            "nothing recorded for a failed plan"
        );
        assert!(seen.acks.is_empty());
        assert_eq!(
            seen.nacks,
            vec![(eval.id, NackReason::PlanFailed.label().to_string())]
        );
    }
}
