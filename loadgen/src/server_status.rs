//! Reading every server's status around a fault: whether the cluster has
//! settled on one leader, and which leader a server names.

use std::net::SocketAddr;
use std::time::Duration;

use stampede_launch::{LocalCluster, NodeId, StatusReport};
use stampede_proto::security::Role;
use tokio::time::Instant;

/// Reads every server's `/v1/status`, all at once, each with a short timeout.
pub(crate) struct StatusReader {
    http: reqwest::Client,
    scheme: &'static str,
    servers: Vec<(NodeId, SocketAddr)>,
}

/// A cluster at rest: every server answers and names one leader, which says it leads.
#[derive(Debug)]
pub(crate) struct Settled {
    pub(crate) leader: NodeId,
    pub(crate) term: u64,
}

impl StatusReader {
    pub(crate) fn new(cluster: &LocalCluster, timeout: Duration) -> Result<Self, String> {
        let security = cluster
            .security(Role::Operator)
            .map_err(|e| e.to_string())?;
        Ok(Self {
            http: stampede_launch::http_client(&security, timeout).map_err(|e| e.to_string())?,
            scheme: cluster.scheme(),
            servers: cluster.servers().iter().map(|s| (s.id, s.http)).collect(),
        })
    }

    pub(crate) fn ids(&self) -> Vec<NodeId> {
        self.servers.iter().map(|(id, _)| *id).collect()
    }

    /// The status of every server but `skip`; `None` for one that does not answer.
    pub(crate) async fn statuses(&self, skip: &[NodeId]) -> Vec<(NodeId, Option<StatusReport>)> {
        let reads = self
            .servers
            .iter()
            .filter(|(id, _)| !skip.contains(id))
            .map(|(id, addr)| async move {
                let url = format!("{}://{addr}/v1/status", self.scheme);
                let status: Option<StatusReport> = async {
                    let r = self.http.get(url).send().await.ok()?;
                    r.error_for_status().ok()?.json().await.ok()
                }
                .await;
                (*id, status)
            });
        futures::future::join_all(reads).await
    }

    /// Waits until the cluster has settled, up to `wait`; the error says what it saw last.
    pub(crate) async fn settled(&self, wait: Duration, poll: Duration) -> Result<Settled, String> {
        let deadline = Instant::now() + wait;
        loop {
            let statuses = self.statuses(&[]).await;
            let last = match settled(&statuses) {
                Ok(s) => return Ok(s),
                Err(last) => last,
            };
            if Instant::now() >= deadline {
                return Err(format!(
                    "the servers did not agree on a leader within {} (last seen: {last})",
                    humantime::format_duration(wait)
                ));
            }
            tokio::time::sleep(poll).await;
        }
    }
}

/// Whether these statuses are of a settled cluster; if not, what they show.
pub(crate) fn settled(statuses: &[(NodeId, Option<StatusReport>)]) -> Result<Settled, String> {
    let describe = || {
        statuses
            .iter()
            .map(|(id, s)| match s {
                Some(s) => format!(
                    "server {id} {} term {} leader {}",
                    s.state,
                    s.term,
                    s.leader_id.map_or("none".into(), |l| l.to_string())
                ),
                None => format!("server {id} not answering"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let answers: Vec<(NodeId, &StatusReport)> = statuses
        .iter()
        .filter_map(|(id, s)| Some((*id, s.as_ref()?)))
        .collect();
    if answers.len() != statuses.len() || answers.is_empty() {
        return Err(describe());
    }
    let leader = answers[0].1.leader_id.ok_or_else(describe)?;
    let agreed = answers.iter().all(|(_, s)| s.leader_id == Some(leader));
    let confirmed = answers
        .iter()
        .any(|(id, s)| *id == leader && s.state == "Leader");
    if !(agreed && confirmed) {
        return Err(describe());
    }
    let term = answers.iter().map(|(_, s)| s.term).max().unwrap_or(0);
    Ok(Settled { leader, term })
}

/// The leader a server other than the struck ones names, if it is not
/// struck either; with `any`, whatever leader any server names.
pub(crate) fn named_leader(
    statuses: &[(NodeId, Option<StatusReport>)],
    struck: &[NodeId],
    any: bool,
) -> Option<NodeId> {
    statuses
        .iter()
        .filter(|(id, _)| any || !struck.contains(id))
        .filter_map(|(_, s)| s.as_ref()?.leader_id)
        .find(|l| any || !struck.contains(l))
}
