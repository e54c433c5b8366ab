//! HTTP: `/metrics` for Prometheus and `/v1/status` for people and tests.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use crate::metrics::Metrics;
use crate::types::{NodeId, Raft};

/// The answer of `GET /v1/status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    pub id: NodeId,
    /// `None` while no leader is known.
    pub leader_id: Option<NodeId>,
    /// `Leader`, `Follower`, `Candidate`, `Learner` or `Shutdown`.
    pub state: String,
    pub term: u64,
    pub last_log_index: u64,
    pub applied_index: u64,
    pub snapshot_index: Option<u64>,
    pub purged_index: Option<u64>,
    /// Voting members: id to raft address.
    pub members: BTreeMap<NodeId, String>,
}

impl StatusReport {
    pub fn from_raft(raft: &Raft) -> Self {
        let m = raft.metrics().borrow().clone();
        let shutdown = m.running_state.is_err();
        Self {
            id: m.id,
            leader_id: m.current_leader,
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
}

#[derive(Clone)]
struct HttpState {
    raft: Raft,
    metrics: Arc<Metrics>,
}

pub fn router(raft: Raft, metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/v1/status", get(status))
        .route("/metrics", get(render_metrics))
        .with_state(HttpState { raft, metrics })
}

async fn status(State(s): State<HttpState>) -> Json<StatusReport> {
    Json(StatusReport::from_raft(&s.raft))
}

async fn render_metrics(State(s): State<HttpState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)],
        s.metrics.render(),
    )
}
