//! Injecting a scenario's fault steps into the local cluster while the
//! stream runs, and undoing each after its duration.

use std::time::Duration;

use stampede_launch::{LocalCluster, NodeId};
use stampede_proto::client::ClusterClient;
use stampede_proto::security::Role;
use stampede_proto::JobTrace;
use tokio::time::Instant;

use super::{FaultsConfig, Injected};
use crate::critical_path::fetch;
use crate::scenario::{FaultAction, FaultStep};
use crate::server_status::{named_leader, Settled, StatusReader};

/// Runs the steps against `cluster` (and `fleet`, the nodesim process ids,
/// for fleet faults), each at its `at` from `start` (the
/// start of the job stream) or, if the cluster has not settled from the
/// previous one by then, once it has. Returns the steps injected and, in
/// words, those that could not be (or not undone).
pub async fn inject(
    cluster: &mut LocalCluster,
    fleet: &[u32],
    steps: &[FaultStep],
    start: Instant,
    cfg: &FaultsConfig,
) -> (Vec<Injected>, Vec<String>) {
    let mut done: Vec<Injected> = Vec::new();
    let mut problems = Vec::new();
    let probe = match StatusReader::new(cluster, cfg.status_timeout) {
        Ok(p) => p,
        Err(e) => return (done, vec![format!("no fault was injected: {e}")]),
    };
    for (i, step) in steps.iter().enumerate() {
        let name = format!("faults[{i}] ({})", step.action.name());
        tokio::time::sleep_until(start + step.at).await;
        let settled = match probe.settled(cfg.settle_wait, cfg.poll).await {
            Ok(s) => s,
            Err(e) => {
                let why = exited(cluster);
                problems.push(format!("{name} was not injected: {e}{why}"));
                continue;
            }
        };
        if let Some(prev) = done.last_mut() {
            prev.term_after.get_or_insert(settled.term);
        }
        match strike(cluster, fleet, &probe, step, &settled, start, cfg).await {
            Ok(injected) => done.push(injected),
            Err(e) => problems.push(format!("{name}: {e}")),
        }
    }
    // The cluster at rest after the last fault: its terms, and a clean start for the audit.
    if let Some(last) = done.last_mut() {
        match probe.settled(cfg.settle_wait, cfg.poll).await {
            Ok(s) => last.term_after = Some(s.term),
            Err(e) => problems.push(format!("after the last fault, {e}{}", exited(cluster))),
        }
    }
    (done, problems)
}

/// The servers whose process has exited, each with its log's last lines:
/// why a cluster did not settle, said at once rather than found later.
fn exited(cluster: &mut LocalCluster) -> String {
    let ids: Vec<NodeId> = cluster.servers().iter().map(|s| s.id).collect();
    let mut out = String::new();
    for id in ids {
        if cluster.is_running(id) {
            continue;
        }
        let log = cluster.log(id);
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(5)..].join(" | ");
        out.push_str(&format!("; server {id} has exited (its log ends: {tail})"));
    }
    out
}

/// The servers `action` strikes among `ids`, `leader` leading: a fleet
/// fault strikes none (the leader stays, and is found at once).
fn struck_servers(
    action: FaultAction,
    ids: &[NodeId],
    leader: NodeId,
) -> Result<Vec<NodeId>, &'static str> {
    Ok(match action {
        FaultAction::PauseFleet => Vec::new(),
        FaultAction::KillAll => ids.to_vec(),
        a if a.hits_leader() => vec![leader],
        _ => vec![ids
            .iter()
            .copied()
            .find(|id| *id != leader)
            .ok_or("no follower to strike")?],
    })
}

/// Injects one step into a settled cluster, waits for a leader while the
/// fault lasts, and undoes it after its duration.
async fn strike(
    cluster: &mut LocalCluster,
    fleet: &[u32],
    probe: &StatusReader,
    step: &FaultStep,
    settled: &Settled,
    start: Instant,
    cfg: &FaultsConfig,
) -> Result<Injected, String> {
    let leader = settled.leader;
    let struck = struck_servers(step.action, &probe.ids(), leader)?;
    let any_leader_counts = step.action == FaultAction::KillAll;
    let kills = matches!(
        step.action,
        FaultAction::KillLeader | FaultAction::KillFollower | FaultAction::KillAll
    );
    // A killed server comes back as a new process, whose counters start at 0.
    let installed_before = match kills {
        true => Some(vec![0; struck.len()]),
        false => installed(cluster, &struck).await,
    };
    let traces_before = match kills {
        true => traces_held(cluster, &struck).await,
        false => Vec::new(),
    };

    // A fleet pause strikes the step's share of the nodesim processes.
    let fleet = &fleet[..step.fleet_processes_paused(fleet.len())];
    let at = Instant::now();
    apply(cluster, fleet, step.action, &struck, true)?;
    let undo_at = at + step.duration;
    let deadline = undo_at.max(at + cfg.leader_wait);
    let mut undone: Option<Instant> = None;
    let mut found: Option<(Instant, NodeId)> = None;
    // What the servers not struck had applied when the fault was undone.
    let mut target: Option<u64> = None;
    loop {
        if undone.is_none() && Instant::now() >= undo_at {
            target = applied_by_others(probe, &struck).await;
            apply(cluster, fleet, step.action, &struck, false)?;
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
    let caught_up = match (target, undone) {
        (Some(target), Some(_)) => caught_up(probe, &struck, target, cfg).await,
        _ => None,
    };
    let snapshots_installed = match (installed_before, installed(cluster, &struck).await) {
        (Some(before), Some(after)) => Some(
            after
                .iter()
                .zip(&before)
                .map(|(a, b)| a.saturating_sub(*b))
                .sum(),
        ),
        _ => None,
    };
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
        caught_up_s: caught_up.map(secs),
        snapshots_installed,
        traces_before,
    })
}

/// Every trace `servers` hold, read just before they are killed: their
/// record of when they applied each entry dies with them. A server that
/// does not answer soon is killed without: its traces are a measure's aid,
/// and the fault's time is the scenario's. So is one that holds more than
/// [`TRACES_HELD_MAX_ALLOCS`] allocations: tracing every job walks them
/// all, and on a loaded machine that kept a follower holding 700,000 from
/// answering its leader until it campaigned (`c2m-follower-behind`), a
/// fault other than the one asked for.
async fn traces_held(cluster: &LocalCluster, servers: &[NodeId]) -> Vec<JobTrace> {
    let security = match cluster.security(Role::Operator) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("loadgen: traces before the kill not read: {e}");
            return Vec::new();
        }
    };
    let mut held = Vec::new();
    for s in cluster.servers().iter().filter(|s| servers.contains(&s.id)) {
        match cluster.metric(s.id, ALLOCS_HELD).await {
            Ok(n) if n <= TRACES_HELD_MAX_ALLOCS as f64 => {}
            Ok(n) => {
                eprintln!(
                    "loadgen: server {}'s traces not read before the kill: it holds {n} allocations (more than {TRACES_HELD_MAX_ALLOCS})",
                    s.id
                );
                continue;
            }
            Err(e) => {
                eprintln!(
                    "loadgen: server {}'s traces not read before the kill: {e}",
                    s.id
                );
                continue;
            }
        }
        let read = async {
            let client = ClusterClient::new(&[s.rpc.to_string()], &security)?
                .with_retry_for(TRACES_HELD_WAIT)
                .with_attempt_timeout(TRACES_HELD_WAIT);
            fetch::all_held(&client).await
        };
        match tokio::time::timeout(TRACES_HELD_WAIT, read).await {
            Ok(Ok(traces)) => held.extend(traces),
            Ok(Err(e)) => eprintln!("loadgen: server {}'s traces before the kill: {e}", s.id),
            Err(_) => eprintln!(
                "loadgen: server {}'s traces before the kill: no answer within {TRACES_HELD_WAIT:?}",
                s.id
            ),
        }
    }
    held
}

/// How long reading a server's traces may hold up its kill.
const TRACES_HELD_WAIT: Duration = Duration::from_secs(2);

/// The most allocations a server may hold for its traces to be read before
/// it is killed (the `faults` scenario's servers hold under 50,000).
const TRACES_HELD_MAX_ALLOCS: u64 = 100_000;

/// A server's count of allocations in its state.
const ALLOCS_HELD: &str = stampede_proto::metric_names::STATE_OBJECTS_ALLOCS;

/// The highest index the servers other than `struck` have applied; `None`
/// when none of them answers (or every server was struck).
async fn applied_by_others(probe: &StatusReader, struck: &[NodeId]) -> Option<u64> {
    let statuses = probe.statuses(struck).await;
    statuses
        .iter()
        .filter_map(|(_, s)| Some(s.as_ref()?.applied_index))
        .max()
}

/// Waits, up to `cfg.catch_up_wait`, until every struck server has applied
/// `target`; when they had (`None` if not within the wait).
async fn caught_up(
    probe: &StatusReader,
    struck: &[NodeId],
    target: u64,
    cfg: &FaultsConfig,
) -> Option<Instant> {
    if struck.is_empty() {
        return None;
    }
    // Only the struck servers are asked: the others are skipped.
    let skip: Vec<NodeId> = probe
        .ids()
        .into_iter()
        .filter(|id| !struck.contains(id))
        .collect();
    let deadline = Instant::now() + cfg.catch_up_wait;
    loop {
        let statuses = probe.statuses(&skip).await;
        let all = statuses
            .iter()
            .all(|(_, s)| s.as_ref().is_some_and(|s| s.applied_index >= target));
        if all {
            return Some(Instant::now());
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(cfg.poll).await;
    }
}

/// Snapshots each struck server has installed from a leader (its process's
/// count); `None` if one does not answer.
async fn installed(cluster: &LocalCluster, struck: &[NodeId]) -> Option<Vec<u64>> {
    let mut counts = Vec::with_capacity(struck.len());
    for &id in struck {
        counts.push(cluster.metric(id, SNAPSHOTS_INSTALLED).await.ok()? as u64);
    }
    Some(counts)
}

/// The servers' count of snapshots installed from a leader.
const SNAPSHOTS_INSTALLED: &str = stampede_proto::metric_names::RAFT_SNAPSHOTS_INSTALLED_TOTAL;

/// Strikes (`on`) or undoes a fault on `servers`, or on the `fleet`.
fn apply(
    cluster: &mut LocalCluster,
    fleet: &[u32],
    action: FaultAction,
    servers: &[NodeId],
    on: bool,
) -> Result<(), String> {
    use FaultAction::*;
    if action == PauseFleet {
        return signal_fleet(fleet, if on { libc::SIGSTOP } else { libc::SIGCONT });
    }
    for &id in servers {
        let done = match (action, on) {
            (KillLeader | KillFollower | KillAll, true) => cluster.kill(id),
            (KillLeader | KillFollower | KillAll, false) => cluster.spawn(id),
            (PauseLeader | PauseFollower, true) => cluster.pause(id),
            (PauseLeader | PauseFollower, false) => cluster.resume(id),
            (PartitionLeader | PartitionFollower, true) => cluster.partition(id),
            (PartitionLeader | PartitionFollower, false) => cluster.heal(id),
            (PauseFleet, _) => unreachable!("handled above"),
        };
        done.map_err(|e| {
            let what = if on { "strike" } else { "undo the fault on" };
            format!("could not {what} server {id}: {e}")
        })?;
    }
    Ok(())
}

/// Sends `sig` to every nodesim process.
fn signal_fleet(fleet: &[u32], sig: libc::c_int) -> Result<(), String> {
    if fleet.is_empty() {
        return Err("no nodesim process to pause: the fleet is not loadgen's own".into());
    }
    for &pid in fleet {
        // SAFETY: kill(2) on a child loadgen started and has not reaped.
        if unsafe { libc::kill(pid as i32, sig) } != 0 {
            let e = std::io::Error::last_os_error();
            return Err(format!("could not signal nodesim (pid {pid}): {e}"));
        }
    }
    Ok(())
}
