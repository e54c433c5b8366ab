//! HTTP: `/metrics` for Prometheus, `/v1/status` for people and tests,
//! `/v1/workers` to list, resize, pause and resume scheduler workers, and
//! `PUT /v1/system/gc` to force a garbage collection. A bad query parameter
//! is `400 Bad Request` naming it; an unknown route `404`.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use crate::control::{FleetGauges, LeaderCalls, WorkerPool, WorkerStatus, MAX_WORKERS};
use crate::model::validate::quote;
use crate::raft::metrics::Metrics;
use crate::raft::Raft;

pub use stampede_launch::StatusReport;

/// Whether raft's core has stopped: it ended on a fatal error (a storage
/// failure, say) or was shut down, which sets `running_state` to the
/// error, or its task ended without a word (a panic drops the metrics'
/// sender, and the last metrics, a follower's, stay as they were).
pub fn raft_stopped(raft: &Raft) -> bool {
    let rx = raft.metrics();
    let stopped = rx.has_changed().is_err() || rx.borrow().running_state.is_err();
    stopped
}

/// What `GET /v1/status` answers, read from raft's metrics. A server whose
/// raft has stopped is `Shutdown` and knows no leader, whatever its last
/// metrics said.
pub fn status_report(raft: &Raft) -> StatusReport {
    let shutdown = raft_stopped(raft);
    let m = raft.metrics().borrow().clone();
    StatusReport {
        id: m.id,
        leader_id: m.current_leader.filter(|_| !shutdown),
        state: if shutdown {
            "Shutdown".into()
        } else {
            format!("{:?}", m.state)
        },
        term: m.current_term,
        last_log_index: m.last_log_index.unwrap_or(0),
        applied_index: m.last_applied.map_or(0, |l| l.index),
        snapshot_index: m.snapshot.map(|l| l.index),
        purged_index: m.purged.map(|l| l.index),
        members: m
            .membership_config
            .nodes()
            .map(|(id, node)| (*id, node.addr.clone()))
            .collect(),
    }
}

/// What the HTTP endpoints may touch.
#[derive(Clone)]
pub struct HttpState {
    /// For `/v1/status`.
    pub raft: Raft,
    /// The server's registry, for `/metrics`.
    pub metrics: Arc<Metrics>,
    /// Counted again on each scrape.
    pub fleet: Arc<FleetGauges>,
    /// Listed, resized, paused and resumed by `/v1/workers`.
    pub workers: Arc<WorkerPool<LeaderCalls>>,
    /// For a forced garbage collection, which the leader's broker runs.
    pub calls: LeaderCalls,
}

type Cp = State<HttpState>;

pub fn router(cp: HttpState) -> Router {
    Router::new()
        .route("/v1/status", get(status))
        .route("/metrics", get(render_metrics))
        .route("/v1/workers", get(list_workers).put(set_workers))
        .route("/v1/workers/pause", post(pause_workers))
        .route("/v1/workers/resume", post(resume_workers))
        .route("/v1/system/gc", put(force_gc))
        .with_state(cp)
}

/// `GET /v1/status`: `503 Service Unavailable` (with the report) once
/// raft has stopped, so that health checks fail on a dead server.
async fn status(State(cp): Cp) -> (StatusCode, Json<StatusReport>) {
    let report = status_report(&cp.raft);
    let code = if raft_stopped(&cp.raft) {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (code, Json(report))
}

async fn render_metrics(State(cp): Cp) -> impl IntoResponse {
    cp.fleet.update();
    {
        let m = cp.raft.metrics();
        let m = m.borrow();
        cp.metrics
            .raft_last_log_index
            .set(m.last_log_index.unwrap_or(0) as i64);
        cp.metrics
            .raft_applied_index
            .set(m.last_applied.map_or(0, |l| l.index) as i64);
    }
    (
        [(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)],
        cp.metrics.render(),
    )
}

/// The answer of the `/v1/workers` calls.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkersReport {
    pub count: usize,
    pub workers: Vec<WorkerReport>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerReport {
    pub id: u64,
    pub state: String,
    pub paused: bool,
    pub evals_processed: u64,
    pub evals_nacked: u64,
    pub current_eval: Option<String>,
}

impl From<WorkerStatus> for WorkerReport {
    fn from(w: WorkerStatus) -> Self {
        Self {
            id: w.id,
            state: w.state.label().to_string(),
            paused: w.paused,
            evals_processed: w.evals_processed,
            evals_nacked: w.evals_nacked,
            current_eval: w.current_eval,
        }
    }
}

fn workers_report(cp: &HttpState) -> Json<WorkersReport> {
    let workers: Vec<WorkerReport> = cp.workers.list().into_iter().map(Into::into).collect();
    Json(WorkersReport {
        count: workers.len(),
        workers,
    })
}

async fn list_workers(State(cp): Cp) -> Json<WorkersReport> {
    workers_report(&cp)
}

/// What `PUT /v1/system/gc` answers.
#[derive(Debug, Serialize, Deserialize)]
pub struct ForceGcReport {
    /// The core evaluation that runs the collection on a worker.
    pub eval_id: String,
}

/// `PUT /v1/system/gc`: queues a collection of everything that is done,
/// whatever its age, on the leader (sent on there from a follower).
async fn force_gc(State(cp): Cp) -> Result<Json<ForceGcReport>, (StatusCode, String)> {
    match cp.calls.force_gc(false).await {
        Ok(eval_id) => Ok(Json(ForceGcReport { eval_id })),
        Err(e) => Err((StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
    }
}

#[derive(Deserialize)]
struct CountParam {
    count: Option<String>,
}

/// `PUT /v1/workers?count=N`: starts or stops workers until N run.
async fn set_workers(
    State(cp): Cp,
    Query(q): Query<CountParam>,
) -> Result<Json<WorkersReport>, (StatusCode, String)> {
    let bad = |msg: String| (StatusCode::BAD_REQUEST, msg);
    let raw = q
        .count
        .ok_or_else(|| bad("count: is required, e.g. /v1/workers?count=4".into()))?;
    let n: usize = raw
        .parse()
        .map_err(|_| bad(format!("count: {} is not a whole number", quote(&raw))))?;
    if n > MAX_WORKERS {
        return Err(bad(format!("count: {n} is more than {MAX_WORKERS}")));
    }
    cp.workers.set_count(n);
    Ok(workers_report(&cp))
}

#[derive(Deserialize)]
struct IdParam {
    id: Option<String>,
}

async fn pause_workers(
    State(cp): Cp,
    Query(q): Query<IdParam>,
) -> Result<Json<WorkersReport>, (StatusCode, String)> {
    set_paused(&cp, q.id, true)
}

async fn resume_workers(
    State(cp): Cp,
    Query(q): Query<IdParam>,
) -> Result<Json<WorkersReport>, (StatusCode, String)> {
    set_paused(&cp, q.id, false)
}

/// Pauses or resumes worker `id`, or every worker when no id is given.
fn set_paused(
    cp: &HttpState,
    id: Option<String>,
    paused: bool,
) -> Result<Json<WorkersReport>, (StatusCode, String)> {
    let id = match id {
        None => None,
        Some(raw) => Some(raw.parse::<u64>().map_err(|_| {
            (
                StatusCode::BAD_REQUEST,
                format!("id: {} is not a worker id (a whole number)", quote(&raw)),
            )
        })?),
    };
    if !cp.workers.set_paused(id, paused) {
        return Err((
            StatusCode::NOT_FOUND,
            format!("id: no worker {}", id.unwrap_or_default()),
        ));
    }
    Ok(workers_report(cp))
}
