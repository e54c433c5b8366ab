//! The deployment watcher, on the leader: one watcher per running
//! deployment follows its allocations' health, writes the deployment's
//! progress, creates the evaluation that places the next round, promotes
//! canaries (with `auto_promote`), and ends the deployment: successful once
//! every group is healthy, failed on an unhealthy allocation or a missed
//! progress deadline.
//!
//! Two ways to watch, so a capacity run can compare them (seed 000):
//! - `fixed` (Nomad after the fix): a watcher keeps at most one blocking
//!   query for its allocations in flight and reuses it across iterations;
//!   only a change of its own deployment wakes it.
//! - `legacy` (before the fix): every iteration starts a new blocking query,
//!   and every deployment change wakes every watcher, so queries grow with
//!   the square of the number of running deployments.
//!
//! Both start their queries through one shared rate limiter.
//!
//! What it may touch: the [`LeaderContext`] of its term (the state store to
//! read, a proposer that writes `deployment_update` entries only on this
//! server), blocking queries (`source="deployment_watcher"`), its config
//! ([`WatcherConfig`], `--deployment-watcher` and `--deployment-query-rate`)
//! and its own metrics. It decides nothing itself about a deployment's
//! progress: that rule is [`crate::scheduler::deployment::assess`], shared
//! with the scheduler.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{Histogram, IntCounter, IntCounterVec, IntGauge, Registry};
use stampede_proto::metric_defs::{histogram, int_counter, int_counter_vec, int_gauge};
use stampede_proto::metric_names;
use stampede_proto::{lock, JobStage, QuerySource};
use stampede_proto::{
    log_entry::Msg, DeploymentStatus, DeploymentUpdateEntry, LogEntry, QueryOptions,
};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::context::LeaderContext;
use crate::model::{deployment_done, deployment_running, new_eval, now_ms};
use crate::scheduler::deployment::assess;
use crate::state::blocking::Blocking;
use crate::state::{State, WatchKey};

/// The blocking-query source the watcher's queries count under.
pub const SOURCE: QuerySource = QuerySource::DeploymentWatcher;
/// Nomad's deployment watcher query limit.
pub const DEFAULT_QUERY_RATE: f64 = 100.0;
/// How long one watcher query waits for a change.
const QUERY_WAIT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WatcherMode {
    /// A new allocation query every iteration; every change wakes every watcher.
    Legacy,
    /// One allocation query in flight per watcher, reused.
    Fixed,
}

#[derive(Debug, Clone, Copy)]
pub struct WatcherConfig {
    pub mode: WatcherMode,
    /// Blocking queries the watchers may start per second, together.
    pub query_rate: f64,
}

impl Default for WatcherConfig {
    fn default() -> Self {
        Self {
            mode: WatcherMode::Fixed,
            query_rate: DEFAULT_QUERY_RATE,
        }
    }
}

pub struct WatcherMetrics {
    pub watchers: IntGauge,
    pub limiter_wait: Histogram,
    pub evals: IntCounter,
    pub finished: IntCounterVec,
}

impl WatcherMetrics {
    pub fn new(registry: &Registry) -> Self {
        Self {
            watchers: int_gauge(
                registry,
                metric_names::DEPLOYMENT_WATCHERS,
                "Leader: running deployments being watched.",
            ),
            limiter_wait: histogram(
                registry,
                metric_names::DEPLOYMENT_WATCHER_LIMITER_WAIT_SECONDS,
                "Time a deployment watcher query waited for the shared query rate limiter.",
                (0.0001, 4.0, 10),
            ),
            evals: int_counter(
                registry,
                "stampede_deployment_watcher_evals_total",
                "Evaluations the deployment watcher created to place a deployment's next round.",
            ),
            finished: int_counter_vec(
                registry,
                "stampede_deployments_finished_total",
                "Deployments the watcher ended, by status.",
                "status",
                &[
                    DeploymentStatus::Successful.label(),
                    DeploymentStatus::Failed.label(),
                ],
            ),
        }
    }
}

/// Spaces query starts at least `1 / rate` apart, across all watchers.
pub struct RateLimiter {
    interval: Duration,
    next: Mutex<Instant>,
}

impl RateLimiter {
    pub fn new(per_second: f64) -> Self {
        Self {
            interval: Duration::from_secs_f64(1.0 / per_second.max(0.001)),
            next: Mutex::new(Instant::now()),
        }
    }

    /// Waits for this caller's turn; returns how long it waited.
    pub async fn acquire(&self) -> Duration {
        let now = Instant::now();
        let at = {
            let mut next = lock(&self.next);
            let at = (*next).max(now);
            *next = at + self.interval;
            at
        };
        tokio::time::sleep_until(at).await;
        at - now
    }
}

/// What every watcher of one term shares.
struct Shared {
    ctx: LeaderContext,
    blocking: Blocking,
    metrics: Arc<WatcherMetrics>,
    limiter: RateLimiter,
    mode: WatcherMode,
}

impl Shared {
    /// One blocking query for a job's allocations, through the limiter.
    /// Returns the job's allocation index.
    async fn allocs_query(&self, job_id: &str, min_index: u64) -> u64 {
        let waited = self.limiter.acquire().await;
        self.metrics.limiter_wait.observe(waited.as_secs_f64());
        let opts = QueryOptions {
            min_index: min_index.max(1),
            max_wait_ms: QUERY_WAIT.as_millis() as u64,
            source: SOURCE.label().into(),
        };
        let job = job_id.to_string();
        let ((), index) = self
            .blocking
            .query(
                Some(&opts),
                WatchKey::JobAllocs(job.clone()),
                |s| s.job_alloc_index(&job).max(1),
                |_| (),
            )
            .await;
        index
    }
}

/// Runs on the leader until its task is aborted (leadership lost): follows
/// the running deployments and keeps one watcher for each.
pub(super) async fn run(
    ctx: LeaderContext,
    blocking: Blocking,
    config: WatcherConfig,
    metrics: Arc<WatcherMetrics>,
) {
    let shared = Arc::new(Shared {
        limiter: RateLimiter::new(config.query_rate),
        mode: config.mode,
        ctx,
        blocking,
        metrics,
    });
    let metrics = &shared.metrics;
    // Dropping the set (when this task is aborted) aborts every watcher.
    let mut watchers = JoinSet::new();
    let mut notify: HashMap<String, watch::Sender<u64>> = HashMap::new();
    let mut seen: HashMap<String, u64> = HashMap::new();
    let mut min_index = 0;
    loop {
        let opts = QueryOptions {
            min_index,
            max_wait_ms: QUERY_WAIT.as_millis() as u64,
            source: SOURCE.label().into(),
        };
        let (running, index) = shared
            .blocking
            .query(
                Some(&opts),
                WatchKey::Deployments,
                |s| s.indexes().deployments.max(1),
                |s| {
                    s.deployments()
                        .filter(|d| deployment_running(d))
                        .map(|d| (d.id.clone(), d.modify_index))
                        .collect::<Vec<(String, u64)>>()
                },
            )
            .await;
        min_index = index;
        while watchers.try_join_next().is_some() {}
        let live: HashSet<&str> = running.iter().map(|(id, _)| id.as_str()).collect();
        notify.retain(|id, _| live.contains(id.as_str()));
        seen.retain(|id, _| live.contains(id.as_str()));
        let mut changed = Vec::new();
        for (id, modified) in &running {
            if !notify.contains_key(id) {
                let (tx, rx) = watch::channel(0);
                notify.insert(id.clone(), tx);
                watchers.spawn(watch_deployment(shared.clone(), id.clone(), rx));
            } else if seen.get(id) != Some(modified) {
                changed.push(id.clone());
            }
            seen.insert(id.clone(), *modified);
        }
        metrics.watchers.set(notify.len() as i64);
        let wake: Vec<&String> = match shared.mode {
            // Before the fix: any change wakes every watcher.
            WatcherMode::Legacy => notify.keys().collect(),
            WatcherMode::Fixed => changed.iter().collect(),
        };
        for id in wake {
            if let Some(tx) = notify.get(id) {
                tx.send_modify(|n| *n += 1);
            }
        }
    }
}

/// Watches one deployment until it ends.
async fn watch_deployment(shared: Arc<Shared>, id: String, mut notify: watch::Receiver<u64>) {
    let Some(job_id) = shared
        .ctx
        .store
        .snapshot()
        .deployment(&id)
        .map(|d| d.job_id.clone())
    else {
        return;
    };
    let mut alloc_index = 0;
    // Fixed: the one query in flight. Legacy: every query started, still running.
    let mut query: Option<std::pin::Pin<Box<dyn std::future::Future<Output = u64> + Send>>> = None;
    let mut legacy_queries: JoinSet<u64> = JoinSet::new();
    loop {
        if let Some(done) = step(&shared, &id).await {
            tracing::debug!(deployment = id, "deployment {done}");
            return;
        }
        let deadline = progress_deadline(&shared.ctx.store.snapshot(), &id);
        let sleep = tokio::time::sleep(deadline.unwrap_or(QUERY_WAIT));
        match shared.mode {
            WatcherMode::Fixed => {
                let q = query.get_or_insert_with(|| {
                    let shared = shared.clone();
                    let job_id = job_id.clone();
                    Box::pin(async move { shared.allocs_query(&job_id, alloc_index).await })
                });
                tokio::select! {
                    index = q => {
                        alloc_index = index;
                        query = None;
                    }
                    r = notify.changed() => if r.is_err() { return },
                    _ = sleep => {}
                }
            }
            WatcherMode::Legacy => {
                // A new query on every iteration, whether or not one is
                // already waiting (Nomad's getAllocsCh before the fix).
                let (s, j) = (shared.clone(), job_id.clone());
                legacy_queries.spawn(async move { s.allocs_query(&j, alloc_index).await });
                tokio::select! {
                    Some(Ok(index)) = legacy_queries.join_next() => {
                        alloc_index = alloc_index.max(index);
                    }
                    r = notify.changed() => if r.is_err() { return },
                    _ = sleep => {}
                }
            }
        }
    }
}

/// How long until the deployment's earliest progress deadline, if it has one.
fn progress_deadline(state: &State, id: &str) -> Option<Duration> {
    let d = state.deployment(id)?;
    let by = d
        .task_groups
        .values()
        .filter(|g| g.require_progress_by_ms > 0)
        .map(|g| g.require_progress_by_ms)
        .min()?;
    Some(Duration::from_millis(by.saturating_sub(now_ms())) + Duration::from_millis(10))
}

/// Looks at the deployment once and writes what changed. Returns how it
/// ended, if it has.
async fn step(shared: &Shared, id: &str) -> Option<&'static str> {
    let state = shared.ctx.store.snapshot();
    let d = state.deployment(id)?;
    if deployment_done(&d) {
        return Some("ended");
    }
    let (next, wants_eval) = assess(&state, &d, now_ms());
    if next == *d {
        return None;
    }
    let status = DeploymentStatus::try_from(next.status).unwrap_or_default();
    let evals = match (wants_eval, state.job(&d.job_id)) {
        (true, Some(job)) if status == DeploymentStatus::Running => {
            vec![new_eval(&job.as_ref().clone(), "deployment_watcher", None)]
        }
        _ => Vec::new(),
    };
    // The registration this step's evaluation schedules: the rollout so far
    // is from its commit to this step's.
    let registered = evals.first().map(|e| e.job_modify_index);
    let n_evals = evals.len() as u64;
    let entry = LogEntry {
        msg: Some(Msg::DeploymentUpdate(DeploymentUpdateEntry {
            deployment: Some(next),
            evals,
        })),
    };
    match shared.ctx.proposer.write(entry).await {
        Ok(index) => {
            shared.metrics.evals.inc_by(n_evals);
            if let Some(registered) = registered {
                let store = &shared.ctx.store;
                let applied = |i| store.applied_at_us(i).unwrap_or(0);
                let (from, to) = (applied(registered), applied(index));
                shared
                    .ctx
                    .stages
                    .observe_between(JobStage::Rollout, from, to);
            }
            match status {
                DeploymentStatus::Successful | DeploymentStatus::Failed => {
                    let label = status.label();
                    shared.metrics.finished.with_label_values(&[label]).inc();
                    Some(label)
                }
                _ => None,
            }
        }
        Err(e) => {
            tracing::warn!(deployment = id, "writing deployment progress: {e}");
            None
        }
    }
}
