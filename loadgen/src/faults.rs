//! Faults under load: a capacity scenario's `[[faults]]` steps injected into
//! the local cluster while the job stream runs, what each cost, and the audit
//! of every acknowledged job on every server at the end.
//!
//! - [`inject`] drives the steps: at each step's time it waits until the
//!   cluster has settled (every server answers and names the same leader),
//!   picks the leader or a follower, strikes (kill -9, SIGSTOP, or cuts its
//!   peer links), and after the step's duration undoes it (starts the server
//!   again on its own data dir, SIGCONT, heals). Meanwhile it polls every
//!   server's `/v1/status` for the time to a new leader.
//! - [`measure`] turns what was injected and the stream's [`Journal`] into
//!   the summary's [`FaultReport`]s: unavailability and throughput come from
//!   the acknowledgements the stream saw, not from the servers.
//! - [`audit`] waits until every server has applied what any server had
//!   applied, then lists the jobs of each server on its own (reads are served
//!   locally) and compares them with what the stream submitted and what was
//!   acknowledged.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

use stampede_launch::{LocalCluster, NodeId, StatusReport};
use stampede_proto::client::ClusterClient;
use stampede_proto::security::Role;
use stampede_proto::JobListRequest;
use tokio::time::Instant;

use crate::scenario::{FaultAction, FaultStep};
use crate::stream::Journal;
use crate::summary::{Audit, FaultReport};

/// How long each wait of a fault run may take: deadlines for failing, not
/// measures (the measures are in the report).
#[derive(Debug, Clone)]
pub struct FaultsConfig {
    /// How often the servers' status is read around a fault.
    pub poll: Duration,
    /// How long one status read may take (a paused server never answers).
    pub status_timeout: Duration,
    /// Before a step: how long the cluster may take to settle (every server
    /// answering and naming the same leader); the step is skipped after it.
    pub settle_wait: Duration,
    /// After a step: how long, past the injection or the end of the fault
    /// (whichever is later), a leader may take to appear.
    pub leader_wait: Duration,
    /// The audit: how long the servers may take to answer and apply the same index.
    pub audit_wait: Duration,
    /// The windows before a fault and after its recovery whose
    /// acknowledgements per second are its throughput before and after.
    pub throughput_window: Duration,
}

impl Default for FaultsConfig {
    fn default() -> Self {
        Self {
            poll: Duration::from_millis(50),
            status_timeout: Duration::from_millis(500),
            settle_wait: Duration::from_secs(60),
            leader_wait: Duration::from_secs(60),
            audit_wait: Duration::from_secs(120),
            throughput_window: Duration::from_secs(10),
        }
    }
}

/// A step as it was injected: what the driver saw, before the stream's
/// acknowledgements are matched against it ([`measure`]). Times are seconds
/// from the start of the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Injected {
    pub step: FaultStep,
    pub at_s: f64,
    pub servers: Vec<NodeId>,
    pub leader_before: NodeId,
    pub term_before: u64,
    /// When a leader was named ([`FaultReport::time_to_leader_s`]).
    pub leader_s: Option<f64>,
    pub leader_after: Option<NodeId>,
    /// When the fault was undone.
    pub undone_s: f64,
    /// The highest term once the cluster settled again after it.
    pub term_after: Option<u64>,
}

/// Reads every server's `/v1/status`, all at once, each with a short timeout.
struct Probe {
    http: reqwest::Client,
    scheme: &'static str,
    servers: Vec<(NodeId, SocketAddr)>,
}

/// A cluster at rest: every server answers and names one leader, which says it leads.
#[derive(Debug)]
struct Settled {
    leader: NodeId,
    term: u64,
}

impl Probe {
    fn new(cluster: &LocalCluster, timeout: Duration) -> Result<Self, String> {
        let security = cluster
            .security(Role::Operator)
            .map_err(|e| e.to_string())?;
        Ok(Self {
            http: stampede_launch::http_client(&security, timeout).map_err(|e| e.to_string())?,
            scheme: cluster.scheme(),
            servers: cluster.servers().iter().map(|s| (s.id, s.http)).collect(),
        })
    }

    fn ids(&self) -> Vec<NodeId> {
        self.servers.iter().map(|(id, _)| *id).collect()
    }

    /// The status of every server but `skip`; `None` for one that does not answer.
    async fn statuses(&self, skip: &[NodeId]) -> Vec<(NodeId, Option<StatusReport>)> {
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
    async fn settled(&self, wait: Duration, poll: Duration) -> Result<Settled, String> {
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
fn settled(statuses: &[(NodeId, Option<StatusReport>)]) -> Result<Settled, String> {
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
fn named_leader(
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

/// Runs the steps against `cluster`, each at its `at` from `start` (the
/// start of the job stream) or, if the cluster has not settled from the
/// previous one by then, once it has. Returns the steps injected and, in
/// words, those that could not be (or not undone).
pub async fn inject(
    cluster: &mut LocalCluster,
    steps: &[FaultStep],
    start: Instant,
    cfg: &FaultsConfig,
) -> (Vec<Injected>, Vec<String>) {
    let mut done: Vec<Injected> = Vec::new();
    let mut problems = Vec::new();
    let probe = match Probe::new(cluster, cfg.status_timeout) {
        Ok(p) => p,
        Err(e) => return (done, vec![format!("no fault was injected: {e}")]),
    };
    for (i, step) in steps.iter().enumerate() {
        let name = format!("faults[{i}] ({})", step.action.name());
        tokio::time::sleep_until(start + step.at).await;
        let settled = match probe.settled(cfg.settle_wait, cfg.poll).await {
            Ok(s) => s,
            Err(e) => {
                problems.push(format!("{name} was not injected: {e}"));
                continue;
            }
        };
        if let Some(prev) = done.last_mut() {
            prev.term_after.get_or_insert(settled.term);
        }
        match strike(cluster, &probe, step, &settled, start, cfg).await {
            Ok(injected) => done.push(injected),
            Err(e) => problems.push(format!("{name}: {e}")),
        }
    }
    // The cluster at rest after the last fault: its terms, and a clean start for the audit.
    if let Some(last) = done.last_mut() {
        match probe.settled(cfg.settle_wait, cfg.poll).await {
            Ok(s) => last.term_after = Some(s.term),
            Err(e) => problems.push(format!("after the last fault, {e}")),
        }
    }
    (done, problems)
}

/// Injects one step into a settled cluster, waits for a leader while the
/// fault lasts, and undoes it after its duration.
async fn strike(
    cluster: &mut LocalCluster,
    probe: &Probe,
    step: &FaultStep,
    settled: &Settled,
    start: Instant,
    cfg: &FaultsConfig,
) -> Result<Injected, String> {
    let ids = probe.ids();
    let leader = settled.leader;
    let follower = ids.iter().copied().find(|id| *id != leader);
    let one = |id: Option<NodeId>| id.map(|id| vec![id]).ok_or("no follower to strike");
    let struck = match step.action {
        FaultAction::KillAll => ids.clone(),
        a if a.hits_leader() => vec![leader],
        _ => one(follower)?,
    };
    let any_leader_counts = step.action == FaultAction::KillAll;

    let at = Instant::now();
    apply(cluster, step.action, &struck, true)?;
    let undo_at = at + step.duration;
    let deadline = undo_at.max(at + cfg.leader_wait);
    let mut undone: Option<Instant> = None;
    let mut found: Option<(Instant, NodeId)> = None;
    loop {
        if undone.is_none() && Instant::now() >= undo_at {
            apply(cluster, step.action, &struck, false)?;
            undone = Some(Instant::now());
        }
        if found.is_none() {
            // Struck servers are not asked while struck: a paused one would
            // only make every poll wait for its timeout.
            let skip = if undone.is_none() {
                &struck[..]
            } else {
                &struck[..0]
            };
            let statuses = probe.statuses(skip).await;
            if let Some(l) = named_leader(&statuses, &struck, any_leader_counts || undone.is_some())
            {
                found = Some((Instant::now(), l));
            }
        }
        if undone.is_some() && (found.is_some() || Instant::now() >= deadline) {
            break;
        }
        let next = Instant::now() + cfg.poll;
        tokio::time::sleep_until(if undone.is_none() {
            next.min(undo_at)
        } else {
            next
        })
        .await;
    }
    let secs = |i: Instant| (i - start).as_secs_f64();
    Ok(Injected {
        step: step.clone(),
        at_s: secs(at),
        servers: struck,
        leader_before: leader,
        term_before: settled.term,
        leader_s: found.map(|(t, _)| secs(t)),
        leader_after: found.map(|(_, l)| l),
        undone_s: secs(undone.unwrap_or(at)),
        term_after: None,
    })
}

/// Strikes (`on`) or undoes a fault on `servers`.
fn apply(
    cluster: &mut LocalCluster,
    action: FaultAction,
    servers: &[NodeId],
    on: bool,
) -> Result<(), String> {
    use FaultAction::*;
    for &id in servers {
        let done = match (action, on) {
            (KillLeader | KillFollower | KillAll, true) => cluster.kill(id),
            (KillLeader | KillFollower | KillAll, false) => cluster.spawn(id),
            (PauseLeader | PauseFollower, true) => cluster.pause(id),
            (PauseLeader | PauseFollower, false) => cluster.resume(id),
            (PartitionLeader | PartitionFollower, true) => cluster.partition(id),
            (PartitionLeader | PartitionFollower, false) => cluster.heal(id),
        };
        done.map_err(|e| {
            let what = if on { "strike" } else { "undo the fault on" };
            format!("could not {what} server {id}: {e}")
        })?;
    }
    Ok(())
}

/// Acknowledgements per second of those acknowledged in `[from, to)`; `None`
/// for a window shorter than a second.
fn ack_rate(journal: &Journal, from: f64, to: f64) -> Option<f64> {
    let from = from.max(0.0);
    if to - from < 1.0 {
        return None;
    }
    let n = journal
        .acks
        .iter()
        .filter(|a| a.acked_s >= from && a.acked_s < to)
        .count();
    Some(n as f64 / (to - from))
}

/// What each injected fault cost, from the stream's acknowledgements.
/// `stream_s` is how long submissions went on (the scenario's duration).
pub fn measure(
    injected: &[Injected],
    journal: &Journal,
    stream_s: f64,
    window: Duration,
) -> Vec<FaultReport> {
    let window = window.as_secs_f64();
    let recovered = |f: &Injected| f.leader_s.map(|l| l.max(f.undone_s));
    injected
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let unavailable_s = journal
                .acks
                .iter()
                .filter(|a| a.scheduled_s >= f.at_s)
                .map(|a| a.acked_s - f.at_s)
                .min_by(f64::total_cmp);
            let recovered_s = recovered(f);
            // Each window stays clear of the faults next to it: from the
            // previous one's recovery, up to the next one's injection.
            let since_previous = match i.checked_sub(1).map(|p| &injected[p]) {
                Some(p) => recovered(p).unwrap_or(p.at_s),
                None => 0.0,
            };
            let until_next = injected
                .get(i + 1)
                .map_or(stream_s, |n| n.at_s.min(stream_s));
            FaultReport {
                action: f.step.action,
                at_s: f.at_s,
                scheduled_at_s: f.step.at.as_secs_f64(),
                duration_s: f.step.duration.as_secs_f64(),
                servers: f.servers.clone(),
                leader_before: Some(f.leader_before),
                time_to_leader_s: f.leader_s.map(|l| l - f.at_s),
                leader_after: f.leader_after,
                unavailable_s,
                elections: f.term_after.map(|t| t.saturating_sub(f.term_before)),
                recovered_s,
                throughput_before: ack_rate(journal, (f.at_s - window).max(since_previous), f.at_s),
                throughput_after: recovered_s
                    .and_then(|r| ack_rate(journal, r, (r + window).min(until_next))),
            }
        })
        .collect()
}

/// Acknowledgements in each second of the stream, up to `until_s`: what the
/// report plots under the fault marks.
pub fn acks_per_second(journal: &Journal, until_s: f64) -> Vec<(f64, f64)> {
    let bins = until_s.ceil().max(0.0) as usize;
    let mut counts = vec![0.0; bins];
    for a in &journal.acks {
        if let Some(c) = counts.get_mut(a.acked_s as usize) {
            *c += 1.0;
        }
    }
    counts
        .into_iter()
        .enumerate()
        .map(|(i, c)| (i as f64 + 1.0, c))
        .collect()
}

/// How many lost or phantom ids an audit names.
const NAMED: usize = 10;

/// Compares each server's job ids with what the stream submitted and what
/// was acknowledged.
pub fn compare(journal: &Journal, on_servers: &BTreeMap<NodeId, HashSet<String>>) -> Audit {
    let join = |ids: Vec<NodeId>| {
        ids.iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    // A job the stream stopped may have been garbage collected since.
    let acked: BTreeSet<&String> = journal
        .acked
        .iter()
        .filter(|id| !journal.stopped.contains(*id))
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
pub async fn audit(cluster: &LocalCluster, journal: &Journal, cfg: &FaultsConfig) -> Audit {
    match on_every_server(cluster, cfg).await {
        Ok((on_servers, applied_index)) => Audit {
            applied_index,
            ..compare(journal, &on_servers)
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
    let probe = Probe::new(cluster, cfg.status_timeout)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::Ack;

    fn status(id: NodeId, state: &str, leader: Option<NodeId>, term: u64) -> StatusReport {
        StatusReport {
            id,
            leader_id: leader,
            state: state.into(),
            term,
            last_log_index: 0,
            applied_index: 0,
            snapshot_index: None,
            purged_index: None,
            members: BTreeMap::new(),
        }
    }

    #[test]
    fn a_cluster_has_settled_when_every_server_names_one_leader_that_leads() {
        let all = vec![
            (1, Some(status(1, "Follower", Some(2), 3))),
            (2, Some(status(2, "Leader", Some(2), 3))),
            (3, Some(status(3, "Follower", Some(2), 4))),
        ];
        let s = settled(&all).unwrap();
        assert_eq!((s.leader, s.term), (2, 4));
        let mut down = all.clone();
        down[2].1 = None;
        assert!(settled(&down)
            .unwrap_err()
            .contains("server 3 not answering"));
        let mut split = all.clone();
        split[0].1 = Some(status(1, "Candidate", None, 5));
        assert!(settled(&split).is_err());
        let mut unconfirmed = all;
        unconfirmed[1].1 = Some(status(2, "Follower", Some(2), 3));
        assert!(settled(&unconfirmed).is_err());
    }

    #[test]
    fn only_a_leader_other_than_the_struck_server_counts_until_the_fault_is_over() {
        // Server 2 led and was struck; 1 and 3 still name it.
        let stale = vec![
            (1, Some(status(1, "Follower", Some(2), 3))),
            (3, Some(status(3, "Follower", Some(2), 3))),
        ];
        assert_eq!(named_leader(&stale, &[2], false), None);
        assert_eq!(named_leader(&stale, &[2], true), Some(2));
        let elected = vec![
            (1, Some(status(1, "Follower", None, 4))),
            (3, Some(status(3, "Leader", Some(3), 4))),
        ];
        assert_eq!(named_leader(&elected, &[2], false), Some(3));
        // The struck server's own word does not count.
        let itself = vec![(2, Some(status(2, "Leader", Some(2), 3))), (1, None)];
        assert_eq!(named_leader(&itself, &[2], false), None);
    }

    fn journal(acks: &[(f64, f64)]) -> Journal {
        Journal {
            acks: acks
                .iter()
                .map(|&(scheduled_s, acked_s)| Ack {
                    scheduled_s,
                    acked_s,
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_fault_is_measured_from_the_acknowledgements_around_it() {
        // One ack per second before the fault at 20 s; the one scheduled at
        // 19.5 s is acknowledged after it but was sent before it.
        let mut acks: Vec<(f64, f64)> = (10..20).map(|t| (t as f64, t as f64 + 0.1)).collect();
        acks.push((19.5, 21.0));
        acks.push((20.2, 23.5));
        acks.extend((24..30).map(|t| (t as f64, t as f64 + 0.1)));
        let j = journal(&acks);
        let f = Injected {
            step: FaultStep {
                at: Duration::from_secs(20),
                action: FaultAction::KillLeader,
                duration: Duration::from_secs(2),
            },
            at_s: 20.0,
            servers: vec![1],
            leader_before: 1,
            term_before: 3,
            leader_s: Some(22.5),
            leader_after: Some(2),
            undone_s: 22.0,
            term_after: Some(4),
        };
        let r = &measure(std::slice::from_ref(&f), &j, 30.0, Duration::from_secs(10))[0];
        assert_eq!(r.action, FaultAction::KillLeader);
        assert_eq!(r.time_to_leader_s, Some(2.5));
        assert_eq!(r.unavailable_s, Some(3.5));
        assert_eq!(r.elections, Some(1));
        assert_eq!(r.recovered_s, Some(22.5));
        assert_eq!(r.throughput_before, Some(1.0));
        // 22.5 to 30 (the end of the stream): 23.5 and 24.1 ... 29.1.
        assert_eq!(r.throughput_after, Some(7.0 / 7.5));

        // No leader found: no recovery, nothing after; no submission after
        // the fault: no unavailability measured.
        let lost = Injected {
            leader_s: None,
            leader_after: None,
            at_s: 29.5,
            ..f.clone()
        };
        let r = &measure(&[lost], &j, 30.0, Duration::from_secs(10))[0];
        assert_eq!(
            (r.time_to_leader_s, r.unavailable_s, r.throughput_after),
            (None, None, None)
        );
        // Two faults 6 s apart: the first one's after-window ends where the
        // second starts, whose before-window starts at the first's recovery.
        let next = Injected {
            at_s: 26.5,
            leader_s: Some(27.0),
            undone_s: 27.0,
            ..f.clone()
        };
        let both = measure(&[f, next], &j, 30.0, Duration::from_secs(10));
        // 22.5 to 26.5: 23.5, 24.1, 25.1, 26.1.
        assert_eq!(both[0].throughput_after, Some(1.0));
        assert_eq!(both[1].throughput_before, Some(1.0));
        assert_eq!(
            acks_per_second(&journal(&[(0.0, 0.5), (0.1, 0.7), (1.0, 2.2)]), 3.0),
            [(1.0, 2.0), (2.0, 0.0), (3.0, 1.0)]
        );
    }

    #[test]
    fn an_audit_counts_acknowledged_jobs_missing_anywhere_and_jobs_never_sent() {
        let mut j = Journal::default();
        for id in ["a", "b", "c", "d"] {
            j.submitted.insert(id.into());
        }
        for id in ["a", "b", "c"] {
            j.acked.insert(id.into());
        }
        let set = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<HashSet<_>>();
        // d was sent but never acknowledged: it may or may not be there.
        let clean = BTreeMap::from([
            (1, set(&["a", "b", "c", "d"])),
            (2, set(&["a", "b", "c"])),
            (3, set(&["a", "b", "c", "d"])),
        ]);
        let a = compare(&j, &clean);
        assert_eq!((a.acked, a.submitted, a.lost, a.phantom), (3, 4, 0, 0));
        assert_eq!(a.failure(), None);

        let bad = BTreeMap::from([
            (1, set(&["a", "c", "zz"])),
            (2, set(&["a", "b", "c"])),
            (3, set(&["a", "c"])),
        ]);
        let a = compare(&j, &bad);
        assert_eq!((a.lost, a.phantom), (1, 1));
        assert_eq!(a.lost_jobs, ["b (missing on server 1, 3)"]);
        assert_eq!(a.phantom_jobs, ["zz (on server 1)"]);
        assert!(a.failure().unwrap().contains("b (missing on server 1, 3)"));
    }
}
