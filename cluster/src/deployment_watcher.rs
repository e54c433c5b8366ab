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

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry};
use stampede_proto::{
    log_entry::Msg, AllocClientStatus, AllocDesiredStatus, Deployment, DeploymentStatus,
    DeploymentUpdateEntry, LogEntry, QueryOptions,
};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::control_plane::{new_eval, ControlPlane};
use crate::state::{deployment_done, deployment_running, State, WatchKey};

/// The blocking-query source the watcher's queries count under.
pub const SOURCE: &str = "deployment_watcher";
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
        let m = Self {
            watchers: IntGauge::new(
                "stampede_deployment_watchers",
                "Leader: running deployments being watched.",
            )
            .unwrap(),
            limiter_wait: Histogram::with_opts(
                HistogramOpts::new(
                    "stampede_deployment_watcher_limiter_wait_seconds",
                    "Time a deployment watcher query waited for the shared query rate limiter.",
                )
                .buckets(prometheus::exponential_buckets(0.0001, 4.0, 10).unwrap()),
            )
            .unwrap(),
            evals: IntCounter::new(
                "stampede_deployment_watcher_evals_total",
                "Evaluations the deployment watcher created to place a deployment's next round.",
            )
            .unwrap(),
            finished: IntCounterVec::new(
                Opts::new(
                    "stampede_deployments_finished_total",
                    "Deployments the watcher ended, by status.",
                ),
                &["status"],
            )
            .unwrap(),
        };
        registry.register(Box::new(m.watchers.clone())).unwrap();
        registry.register(Box::new(m.limiter_wait.clone())).unwrap();
        registry.register(Box::new(m.evals.clone())).unwrap();
        registry.register(Box::new(m.finished.clone())).unwrap();
        for s in ["successful", "failed"] {
            m.finished.with_label_values(&[s]);
        }
        m
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
            let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
            let at = (*next).max(now);
            *next = at + self.interval;
            at
        };
        tokio::time::sleep_until(at).await;
        at - now
    }
}

struct Shared {
    cp: Arc<ControlPlane>,
    limiter: RateLimiter,
    mode: WatcherMode,
}

impl Shared {
    /// One blocking query for a job's allocations, through the limiter.
    /// Returns the job's allocation index.
    async fn allocs_query(&self, job_id: &str, min_index: u64) -> u64 {
        let waited = self.limiter.acquire().await;
        self.cp
            .deployment_metrics
            .limiter_wait
            .observe(waited.as_secs_f64());
        let opts = QueryOptions {
            min_index: min_index.max(1),
            max_wait_ms: QUERY_WAIT.as_millis() as u64,
            source: SOURCE.into(),
        };
        let job = job_id.to_string();
        let ((), index) = self
            .cp
            .blocking
            .query(Some(&opts), &[WatchKey::JobAllocs(job.clone())], |s| {
                ((), s.job_alloc_index(&job).max(1))
            })
            .await;
        index
    }
}

/// Runs on the leader until its task is aborted (leadership lost): follows
/// the running deployments and keeps one watcher for each.
pub async fn run(cp: Arc<ControlPlane>) {
    let config = cp.config.deployments;
    let shared = Arc::new(Shared {
        limiter: RateLimiter::new(config.query_rate),
        mode: config.mode,
        cp,
    });
    let metrics = &shared.cp.deployment_metrics;
    // Dropping the set (when this task is aborted) aborts every watcher.
    let mut watchers = JoinSet::new();
    let mut notify: HashMap<String, watch::Sender<u64>> = HashMap::new();
    let mut seen: HashMap<String, u64> = HashMap::new();
    let mut min_index = 0;
    loop {
        let opts = QueryOptions {
            min_index,
            max_wait_ms: QUERY_WAIT.as_millis() as u64,
            source: SOURCE.into(),
        };
        let (running, index) = shared
            .cp
            .blocking
            .query(Some(&opts), &[WatchKey::Deployments], |s| {
                let running: Vec<(String, u64)> = s
                    .deployments()
                    .filter(|d| deployment_running(d))
                    .map(|d| (d.id.clone(), d.modify_index))
                    .collect();
                (running, s.indexes().deployments.max(1))
            })
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
        .cp
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
        let deadline = progress_deadline(&shared.cp.store.snapshot(), &id);
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

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Looks at the deployment once and writes what changed. Returns how it
/// ended, if it has.
async fn step(shared: &Shared, id: &str) -> Option<&'static str> {
    let cp = &shared.cp;
    let state = cp.store.snapshot();
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
    let n_evals = evals.len() as u64;
    let entry = LogEntry {
        msg: Some(Msg::DeploymentUpdate(DeploymentUpdateEntry {
            deployment: Some(next),
            evals,
        })),
    };
    match cp.proposer.write(entry).await {
        Ok(_) => {
            cp.deployment_metrics.evals.inc_by(n_evals);
            match status {
                DeploymentStatus::Successful => {
                    cp.deployment_metrics
                        .finished
                        .with_label_values(&["successful"])
                        .inc();
                    Some("successful")
                }
                DeploymentStatus::Failed => {
                    cp.deployment_metrics
                        .finished
                        .with_label_values(&["failed"])
                        .inc();
                    Some("failed")
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

/// The deployment as its allocations say it stands, and whether the
/// scheduler should run again (a round all healthy, or canaries promoted,
/// frees room for the next round).
pub fn assess(state: &State, d: &Deployment, now_ms: u64) -> (Deployment, bool) {
    let mut next = d.clone();
    let Some(job) = state.job(&d.job_id) else {
        next.status = DeploymentStatus::Cancelled as i32;
        next.status_description = "job purged".into();
        return (next, false);
    };
    if job.stop {
        next.status = DeploymentStatus::Cancelled as i32;
        next.status_description = "job stopped".into();
        return (next, false);
    }
    let allocs: Vec<_> = state
        .job_allocs(&d.job_id)
        .into_iter()
        .filter(|a| a.deployment_id == d.id)
        .collect();
    let mut wants_eval = false;
    let mut unhealthy = 0;
    let mut late = false;
    let mut complete = true;
    for (name, g) in next.task_groups.iter_mut() {
        let group: Vec<_> = allocs.iter().filter(|a| &a.task_group == name).collect();
        let healthy = group
            .iter()
            .filter(|a| {
                a.healthy == Some(true)
                    && a.client_status == AllocClientStatus::Running as i32
                    && a.desired_status == AllocDesiredStatus::Run as i32
            })
            .count() as u32;
        g.unhealthy = group
            .iter()
            .filter(|a| {
                a.healthy == Some(false) || a.client_status == AllocClientStatus::Failed as i32
            })
            .count() as u32;
        g.placed = group.len() as u32;
        g.placed_canaries = group
            .iter()
            .filter(|a| a.canary)
            .map(|a| a.id.clone())
            .collect();
        g.placed_canaries.sort();
        if healthy > g.healthy {
            // The next round starts once the whole current one is healthy,
            // so a rollout goes in rounds of max_parallel.
            wants_eval |= healthy >= g.placed;
            if g.progress_deadline_ms > 0 {
                g.require_progress_by_ms = now_ms + g.progress_deadline_ms;
            }
        }
        g.healthy = healthy;
        if g.desired_canaries > 0 && !g.promoted {
            let healthy_canaries = group
                .iter()
                .filter(|a| a.canary && a.healthy == Some(true))
                .count() as u32;
            if g.auto_promote && healthy_canaries >= g.desired_canaries {
                g.promoted = true;
                wants_eval = true;
            }
        }
        unhealthy += g.unhealthy;
        let promoted = g.desired_canaries == 0 || g.promoted;
        if !(promoted && g.healthy >= g.desired_total) {
            complete = false;
            late |= g.require_progress_by_ms > 0 && now_ms > g.require_progress_by_ms;
        }
    }
    if unhealthy > 0 {
        next.status = DeploymentStatus::Failed as i32;
        next.status_description = format!("{unhealthy} allocation(s) unhealthy");
        wants_eval = false;
    } else if complete {
        next.status = DeploymentStatus::Successful as i32;
        next.status_description = "every allocation is healthy".into();
        wants_eval = false;
    } else if late {
        next.status = DeploymentStatus::Failed as i32;
        next.status_description = "progress deadline reached".into();
        wants_eval = false;
    }
    (next, wants_eval)
}
