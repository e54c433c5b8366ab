//! What a [`LocalCluster`]'s servers say over HTTP: their status, their
//! metrics, and waits on them (a leader, a status).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{LocalCluster, NodeId};
use crate::error::LaunchError;
use crate::process::POLL;

/// The answer of a server's `GET /v1/status`.
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

impl LocalCluster {
    /// An HTTP call to server `id`'s `--http` address; a non-2xx answer is an error.
    pub async fn request(
        &self,
        id: NodeId,
        method: reqwest::Method,
        path: &str,
    ) -> Result<reqwest::Response, LaunchError> {
        let addr = self.server(id)?.http;
        let http_err = |detail: String| LaunchError::Http { id, addr, detail };
        let resp = self
            .http
            .request(method.clone(), format!("{}://{addr}{path}", self.scheme()))
            .send()
            .await
            .map_err(|e| http_err(e.to_string()))?;
        if !resp.status().is_success() {
            let status = resp.status();
            let body = resp.text().await.unwrap_or_default();
            return Err(http_err(format!(
                "{method} {path} answered {status}: {body}"
            )));
        }
        Ok(resp)
    }

    async fn get(&self, id: NodeId, path: &str) -> Result<reqwest::Response, LaunchError> {
        self.request(id, reqwest::Method::GET, path).await
    }

    pub async fn status(&self, id: NodeId) -> Result<StatusReport, LaunchError> {
        let addr = self.server(id)?.http;
        self.get(id, "/v1/status")
            .await?
            .json()
            .await
            .map_err(|e| LaunchError::Http {
                id,
                addr,
                detail: e.to_string(),
            })
    }

    /// The value of one series on `/metrics`, e.g. `stampede_raft_term` or
    /// `stampede_raft_entries_total{type="node_register"}`; 0 if absent.
    pub async fn metric(&self, id: NodeId, series: &str) -> Result<f64, LaunchError> {
        let addr = self.server(id)?.http;
        let text = self
            .get(id, "/metrics")
            .await?
            .text()
            .await
            .map_err(|e| LaunchError::Http {
                id,
                addr,
                detail: e.to_string(),
            })?;
        Ok(metric_value(&text, series).unwrap_or(0.0))
    }

    /// Waits until server `id`'s status satisfies `pred`.
    pub async fn wait_for_status(
        &self,
        id: NodeId,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&StatusReport) -> bool,
    ) -> Result<StatusReport, LaunchError> {
        let start = Instant::now();
        loop {
            let last = match self.status(id).await {
                Ok(s) if pred(&s) => return Ok(s),
                Ok(s) => format!("{s:?}"),
                Err(e) => e.to_string(),
            };
            if start.elapsed() > timeout {
                return Err(LaunchError::Timeout {
                    what: format!("server {id}: {what}"),
                    after: timeout,
                    last: Some(last),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until every running server (paused ones aside) names the same
    /// leader, and that leader says it leads. Returns its id.
    pub async fn wait_for_leader(&mut self, timeout: Duration) -> Result<NodeId, LaunchError> {
        let start = Instant::now();
        let mut last = None;
        loop {
            let running: Vec<NodeId> = self
                .ids()
                .into_iter()
                .filter(|id| self.is_running(*id) && !self.is_paused(*id))
                .collect();
            let mut leaders = Vec::new();
            for id in &running {
                match self.status(*id).await {
                    Ok(s) => {
                        leaders.push((s.leader_id, s.state == "Leader" && s.leader_id == Some(*id)))
                    }
                    Err(e) => last = Some(e.to_string()),
                }
            }
            if leaders.len() == running.len() && !running.is_empty() {
                if let Some(leader) = leaders[0].0 {
                    let agreed = leaders.iter().all(|(l, _)| *l == Some(leader));
                    let confirmed = leaders.iter().any(|(_, is_leader)| *is_leader);
                    if agreed && confirmed && running.contains(&leader) {
                        return Ok(leader);
                    }
                }
                last = Some(format!(
                    "leaders seen: {:?}",
                    leaders.iter().map(|l| l.0).collect::<Vec<_>>()
                ));
            }
            if start.elapsed() > timeout {
                return Err(LaunchError::Timeout {
                    what: "the running servers agree on a leader".into(),
                    after: timeout,
                    last,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Reads one series from Prometheus text: `name` or `name{labels}` exactly as printed.
pub fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_series_by_its_exact_name() {
        let text =
            "# HELP x y\nstampede_raft_term 3\nstampede_raft_entries_total{type=\"blank\"} 2\n";
        assert_eq!(metric_value(text, "stampede_raft_term"), Some(3.0));
        assert_eq!(
            metric_value(text, "stampede_raft_entries_total{type=\"blank\"}"),
            Some(2.0)
        );
        assert_eq!(metric_value(text, "stampede_raft_entries_total"), None);
    }
}
