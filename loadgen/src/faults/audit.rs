//! The audit at the end of a run with faults: every acknowledged job on
//! every server, and nothing the stream never submitted.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde::{Deserialize, Serialize};
use stampede_launch::{LocalCluster, NodeId, StatusReport};
use stampede_proto::client::ClusterClient;
use stampede_proto::security::Role;
use stampede_proto::JobListRequest;
use tokio::time::Instant;

use super::FaultsConfig;
use crate::server_status::StatusReader;
use crate::stream::Journal;

/// The audit at the end of a run with faults: every job whose registration
/// was acknowledged must be on every server, and nothing else may be.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Audit {
    /// Job ids whose registration the cluster acknowledged.
    pub acked: u64,
    /// Job ids the stream sent a registration for (acknowledged or not).
    pub submitted: u64,
    /// Acknowledged job ids missing on at least one server.
    pub lost: u64,
    /// Job ids present on a server that the stream never submitted.
    pub phantom: u64,
    /// The first few lost ids, each with the servers missing it.
    pub lost_jobs: Vec<String>,
    /// The first few phantom ids, each with the servers holding it.
    pub phantom_jobs: Vec<String>,
    /// Servers checked, and the raft index every one had applied.
    pub servers: u64,
    pub applied_index: u64,
    /// Why the audit could not check the servers, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Audit {
    /// What failed, in words; `None` when every acknowledged job is on
    /// every server and nothing else is.
    pub fn failure(&self) -> Option<String> {
        if let Some(e) = &self.error {
            return Some(format!("the audit could not check the servers: {e}"));
        }
        let mut parts = Vec::new();
        if self.lost > 0 {
            parts.push(format!(
                "{} acknowledged job(s) lost: {}",
                self.lost,
                self.lost_jobs.join(", ")
            ));
        }
        if self.phantom > 0 {
            parts.push(format!(
                "{} job(s) present that were never submitted: {}",
                self.phantom,
                self.phantom_jobs.join(", ")
            ));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

/// How many lost or phantom ids an audit names.
const NAMED: usize = 10;

/// Compares each server's job ids with what the stream submitted and what
/// was acknowledged.
/// `dead`: the jobs seen dead during the run (a batch job whose work is
/// done), which garbage collection may have removed since.
pub fn compare(
    journal: &Journal,
    dead: &BTreeSet<String>,
    on_servers: &BTreeMap<NodeId, HashSet<String>>,
) -> Audit {
    let join = |ids: Vec<NodeId>| {
        ids.iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    // A job the stream stopped, or one seen dead, may have been garbage
    // collected since.
    let acked: BTreeSet<&String> = journal
        .acked
        .iter()
        .filter(|id| !journal.stopped.contains(*id) && !dead.contains(*id))
        .collect();
    let mut lost_jobs = Vec::new();
    let mut lost = 0;
    for id in &acked {
        let missing: Vec<NodeId> = on_servers
            .iter()
            .filter(|(_, jobs)| !jobs.contains(*id))
            .map(|(s, _)| *s)
            .collect();
        if !missing.is_empty() {
            lost += 1;
            if lost_jobs.len() < NAMED {
                lost_jobs.push(format!("{id} (missing on server {})", join(missing)));
            }
        }
    }
    let present: BTreeSet<&String> = on_servers.values().flatten().collect();
    let mut phantom_jobs = Vec::new();
    let mut phantom = 0;
    for id in present {
        if !journal.submitted.contains(id) {
            phantom += 1;
            if phantom_jobs.len() < NAMED {
                let holders = on_servers
                    .iter()
                    .filter(|(_, jobs)| jobs.contains(id))
                    .map(|(s, _)| *s)
                    .collect();
                phantom_jobs.push(format!("{id} (on server {})", join(holders)));
            }
        }
    }
    Audit {
        acked: journal.acked.len() as u64,
        submitted: journal.submitted.len() as u64,
        lost,
        phantom,
        lost_jobs,
        phantom_jobs,
        servers: on_servers.len() as u64,
        ..Default::default()
    }
}

/// The audit at the end of a run with faults: waits (up to
/// `cfg.audit_wait`) until every server answers and has applied the highest
/// index any of them had applied, which holds every acknowledged write;
/// then reads each server's jobs from that server alone and [`compare`]s.
pub async fn audit(
    cluster: &LocalCluster,
    journal: &Journal,
    dead: &BTreeSet<String>,
    cfg: &FaultsConfig,
) -> Audit {
    match on_every_server(cluster, cfg).await {
        Ok((on_servers, applied_index)) => Audit {
            applied_index,
            ..compare(journal, dead, &on_servers)
        },
        Err(error) => Audit {
            acked: journal.acked.len() as u64,
            submitted: journal.submitted.len() as u64,
            servers: cluster.servers().len() as u64,
            error: Some(error),
            ..Default::default()
        },
    }
}

async fn on_every_server(
    cluster: &LocalCluster,
    cfg: &FaultsConfig,
) -> Result<(BTreeMap<NodeId, HashSet<String>>, u64), String> {
    let probe = StatusReader::new(cluster, cfg.status_timeout)?;
    let deadline = Instant::now() + cfg.audit_wait;
    let wait = humantime::format_duration(cfg.audit_wait);
    let mut target: Option<u64> = None;
    let describe = |statuses: &[(NodeId, Option<StatusReport>)]| {
        statuses
            .iter()
            .map(|(id, s)| match s {
                Some(s) => format!("server {id} applied {}", s.applied_index),
                None => format!("server {id} not answering"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let applied = loop {
        let statuses = probe.statuses(&[]).await;
        let indexes: Vec<u64> = statuses
            .iter()
            .filter_map(|(_, s)| Some(s.as_ref()?.applied_index))
            .collect();
        if indexes.len() == statuses.len() {
            // Every acknowledged write was applied by the server that took
            // it before it answered: the highest applied index holds them all.
            let t = *target.get_or_insert(indexes.iter().copied().max().unwrap_or(0));
            if indexes.iter().all(|i| *i >= t) {
                break t;
            }
        }
        if Instant::now() >= deadline {
            return Err(match target {
                None => format!(
                    "not every server answered within {wait}: {}",
                    describe(&statuses)
                ),
                Some(t) => format!(
                    "not every server applied index {t} within {wait}: {}",
                    describe(&statuses)
                ),
            });
        }
        tokio::time::sleep(cfg.poll).await;
    };
    let mut on_servers = BTreeMap::new();
    let security = cluster
        .security(Role::Operator)
        .map_err(|e| e.to_string())?;
    for s in cluster.servers() {
        // A client of this one server: reads are served from its own state.
        let client = ClusterClient::new(&[s.rpc.to_string()], &security)
            .map_err(|e| format!("server {}: {e}", s.id))?;
        let jobs = client
            .retrying(|c| async move {
                let req = JobListRequest { query: None };
                Ok(c.jobs().list(req).await?.into_inner().jobs)
            })
            .await
            .map_err(|e| format!("listing the jobs of server {}: {e}", s.id))?;
        on_servers.insert(s.id, jobs.into_iter().map(|j| j.id).collect());
    }
    Ok((on_servers, applied))
}
