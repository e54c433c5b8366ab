//! What the simulated fleet cost and how it held: how fast it registered,
//! the memory each node costs a server and nodesim while the fleet idles,
//! the queries it parks, its heartbeat rate against the TTL formula, and
//! the nodes wrongly marked down after a leader kill (`summary.fleet`).
//!
//! "Idle" is every sample taken before the first job was submitted and
//! before the state held an allocation: the fleet registered, heartbeating
//! and parked, with no work (a system job's evaluation alone holds every
//! node's placement in memory).

use serde::{Deserialize, Serialize};
use stampede_proto::metric_names;

use crate::faults::FaultReport;
use crate::sampler::{Point, Series, NODESIM_HEARTBEATS as HEARTBEATS, NODESIM_TTL as TTL, RSS};
use crate::scenario::FaultAction;

const ALLOCS: &str = "stampede_state_objects{table=\"allocs\"}";
const PARKED: &str = "stampede_blocking_queries_inflight{source=\"client_allocs\"}";
const DOWN: &str = "stampede_nodes{status=\"down\"}";
const TERM: &str = metric_names::RAFT_TERM;

/// `summary.fleet`: the fleet's registration, footprint and heartbeats.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Fleet {
    /// The scenario's nodes.
    pub nodes: u64,
    /// From nodesim's start until every node was ready, seconds; null
    /// when they never all were (or a deployed fleet was already up).
    pub ready_s: Option<f64>,
    /// `nodes / ready_s`.
    pub registrations_per_second: Option<f64>,
    /// The fullest server's resident memory at the end of the fleet's idle
    /// time, per node.
    pub server_rss_bytes_per_node: Option<f64>,
    /// Every nodesim process's resident memory at the end of the idle
    /// time, per node.
    pub nodesim_rss_bytes_per_node: Option<f64>,
    /// Nodes' allocation queries parked on the server holding the most, at
    /// the end of the idle time.
    pub parked_node_queries: Option<u64>,
    /// The same, server by server.
    pub parked_node_queries_by_server: Vec<u64>,
    /// Heartbeats the fleet sent per second while it idled.
    pub heartbeats_per_second: Option<f64>,
    /// The heartbeat TTL the servers gave the nodes, seconds.
    pub ttl_s: Option<f64>,
    /// The rate the TTL formula plans for: nodes / TTL (nodes heartbeat
    /// somewhat sooner than their TTL, so the measured rate is above it).
    pub heartbeats_per_second_by_formula: Option<f64>,
    /// Nodes the servers marked down after the first leader kill, beyond
    /// those down before it; null without a leader kill. nodesim's nodes
    /// heartbeat throughout, so each one is a node wrongly marked down.
    pub wrongly_down_after_failover: Option<u64>,
    /// Raft elections outside the injected faults: the run's elections
    /// less those the faults caused (only a fault on the leader causes
    /// any: each of them is in `elections_detail`, and one outside the
    /// faults makes the run invalid).
    pub elections_outside_faults: Option<u64>,
    /// Until every allocation of the run's jobs ran, from the first job's
    /// submission, seconds (the slowest job's time to running).
    pub all_running_s: Option<f64>,
}

/// What the fleet figures are made of.
pub struct FleetInput<'a> {
    pub nodes: u64,
    pub ready_s: Option<f64>,
    /// When the first job was submitted, seconds into the run.
    pub first_submit_s: Option<f64>,
    pub servers: &'a [&'a Series],
    /// nodesim's processes (every shard).
    pub nodesims: &'a [&'a Series],
    pub faults: &'a [FaultReport],
    pub elections: Option<u64>,
    pub slowest_running_ms: Option<f64>,
}

/// The fleet's figures.
pub fn fleet(input: &FleetInput) -> Fleet {
    let idle_until = idle_until(input.servers).min(input.first_submit_s.unwrap_or(f64::INFINITY));
    // The end of the idle time: settled, after registration's own
    // transient memory was given back.
    let settled = |s: &&Series, name: &str| idle(s, idle_until).last()?.values.get(name).copied();
    let per_node = |bytes: Option<f64>| bytes.map(|b| b / input.nodes.max(1) as f64);
    let server_rss = input
        .servers
        .iter()
        .filter_map(|s| settled(s, RSS))
        .reduce(f64::max);
    let nodesim_rss = sum(input.nodesims.iter().map(|s| settled(s, RSS)));
    let parked: Vec<u64> = input
        .servers
        .iter()
        .filter_map(|s| {
            idle(s, idle_until)
                .last()?
                .values
                .get(PARKED)
                .map(|v| *v as u64)
        })
        .collect();
    let heartbeats = sum(input
        .nodesims
        .iter()
        .map(|s| rate(&idle(s, idle_until), HEARTBEATS)));
    let ttl_s = input
        .nodesims
        .iter()
        .filter_map(|s| s.points.iter().rev().find_map(|p| p.values.get(TTL)))
        .copied()
        .reduce(f64::max)
        .filter(|t| *t > 0.0);
    let faults_elections: u64 = input.faults.iter().filter_map(|f| f.elections).sum();
    Fleet {
        nodes: input.nodes,
        ready_s: input.ready_s,
        registrations_per_second: input
            .ready_s
            .filter(|s| *s > 0.0)
            .map(|s| input.nodes as f64 / s),
        server_rss_bytes_per_node: per_node(server_rss),
        nodesim_rss_bytes_per_node: per_node(nodesim_rss),
        parked_node_queries: parked.iter().copied().max(),
        parked_node_queries_by_server: parked,
        heartbeats_per_second: heartbeats,
        ttl_s,
        heartbeats_per_second_by_formula: ttl_s.map(|t| input.nodes as f64 / t),
        wrongly_down_after_failover: wrongly_down(input.servers, input.faults),
        elections_outside_faults: input.elections.map(|e| e.saturating_sub(faults_elections)),
        all_running_s: input.slowest_running_ms.map(|ms| ms / 1000.0),
    }
}

/// Raft elections over the run: the growth of the highest term any server
/// reported, from `term_at_start` (read when the cluster first had a leader).
pub fn elections(servers: &[&Series], term_at_start: Option<u64>) -> Option<u64> {
    let end = servers
        .iter()
        .flat_map(|s| s.points.iter())
        .filter_map(|p| p.values.get(TERM))
        .fold(None, |m: Option<f64>, v| Some(m.map_or(*v, |m| m.max(*v))))?;
    Some((end as u64).saturating_sub(term_at_start?))
}

/// The sum of every value; `None` when there are none or any is missing.
fn sum(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let values: Vec<f64> = values.collect::<Option<_>>()?;
    (!values.is_empty()).then(|| values.iter().sum())
}

/// The time of the first sample in which any server held an allocation.
fn idle_until(servers: &[&Series]) -> f64 {
    servers
        .iter()
        .filter_map(|s| {
            s.points
                .iter()
                .find(|p| p.values.get(ALLOCS).is_some_and(|n| *n > 0.0))
                .map(|p| p.t)
        })
        .reduce(f64::min)
        .unwrap_or(f64::INFINITY)
}

/// The samples of `s` before `until`, or its first sample when none is.
fn idle(s: &Series, until: f64) -> Vec<&Point> {
    let points: Vec<&Point> = s.points.iter().filter(|p| p.t < until).collect();
    match points.is_empty() {
        true => s.points.iter().take(1).collect(),
        false => points,
    }
}

/// How fast counter `name` grew over `points`, per second.
fn rate(points: &[&Point], name: &str) -> Option<f64> {
    let with: Vec<(f64, f64)> = points
        .iter()
        .filter_map(|p| Some((p.t, *p.values.get(name)?)))
        .collect();
    let (first, last) = (with.first()?, with.last()?);
    (last.0 > first.0).then(|| (last.1 - first.1).max(0.0) / (last.0 - first.0))
}

/// The most nodes any server counted down after the first leader kill, less
/// the most before it. A fleet pause after the kill marks the nodes down
/// rightly: the count ends where it starts.
fn wrongly_down(servers: &[&Series], faults: &[FaultReport]) -> Option<u64> {
    let kill = faults
        .iter()
        .find(|f| f.action == FaultAction::KillLeader)?
        .at_s;
    let fleet_paused = faults
        .iter()
        .filter(|f| f.action == FaultAction::PauseFleet && f.at_s > kill)
        .map(|f| f.at_s)
        .fold(f64::INFINITY, f64::min);
    let most = |after: bool| {
        servers
            .iter()
            .flat_map(|s| s.points.iter())
            .filter(|p| p.t < fleet_paused)
            .filter(|p| (p.t >= kill) == after)
            .filter_map(|p| p.values.get(DOWN).copied())
            .fold(0.0, f64::max)
    };
    Some((most(true) - most(false)).max(0.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summary::figures::tests::series;

    fn kill_at(at_s: f64, elections: u64) -> FaultReport {
        FaultReport {
            action: FaultAction::KillLeader,
            at_s,
            scheduled_at_s: at_s,
            duration_s: 5.0,
            servers: vec![1],
            leader_before: Some(1),
            time_to_leader_s: Some(1.0),
            leader_after: Some(2),
            unavailable_s: None,
            elections: Some(elections),
            recovered_s: None,
            throughput_before: None,
            throughput_after: None,
            control_plane_recovery_s: None,
            catch_up_time_s: None,
            snapshots_installed: None,
        }
    }

    #[test]
    fn idle_figures_come_from_before_the_first_allocation() {
        // Idle until t=20, when the first allocation appears; the RSS
        // after it (the allocations' cost) does not count per node.
        let s1 = series(
            "server-1",
            &[
                // Registration's transient memory, given back by 10 s.
                (0.0, &[(RSS, 400e6), (PARKED, 500.0), (TERM, 1.0)]),
                (10.0, &[(RSS, 250e6), (PARKED, 510.0), (TERM, 1.0)]),
                // Submitted at 15 s: its evaluation's memory is not the fleet's.
                (15.0, &[(RSS, 700e6), (PARKED, 510.0), (TERM, 1.0)]),
                (20.0, &[(RSS, 900e6), (ALLOCS, 5.0), (TERM, 1.0)]),
                (30.0, &[(RSS, 900e6), (ALLOCS, 9.0), (TERM, 3.0)]),
            ],
        );
        let s2 = series(
            "server-2",
            &[
                (0.0, &[(RSS, 100e6), (PARKED, 490.0)]),
                (10.0, &[(PARKED, 480.0)]),
            ],
        );
        let nodesim = series(
            "nodesim",
            &[
                (0.0, &[(RSS, 40e6), (HEARTBEATS, 100.0), (TTL, 20.0)]),
                (10.0, &[(RSS, 50e6), (HEARTBEATS, 180.0), (TTL, 20.0)]),
                (20.0, &[(RSS, 99e6), (HEARTBEATS, 900.0), (TTL, 20.0)]),
            ],
        );
        let servers = [&s1, &s2];
        let elections = elections(&servers, Some(1));
        assert_eq!(elections, Some(2));
        let f = fleet(&FleetInput {
            nodes: 1000,
            ready_s: Some(4.0),
            first_submit_s: Some(15.0),
            servers: &servers,
            nodesims: &[&nodesim],
            faults: &[kill_at(25.0, 1)],
            elections,
            slowest_running_ms: Some(7500.0),
        });
        assert_eq!(f.registrations_per_second, Some(250.0));
        assert_eq!(f.server_rss_bytes_per_node, Some(250e3));
        assert_eq!(f.nodesim_rss_bytes_per_node, Some(50e3));
        assert_eq!(f.parked_node_queries_by_server, vec![510, 480]);
        assert_eq!(f.parked_node_queries, Some(510));
        assert_eq!(f.heartbeats_per_second, Some(8.0));
        assert_eq!(f.ttl_s, Some(20.0));
        assert_eq!(f.heartbeats_per_second_by_formula, Some(50.0));
        assert_eq!(f.elections_outside_faults, Some(1));
        assert_eq!(f.all_running_s, Some(7.5));
        assert_eq!(f.wrongly_down_after_failover, Some(0));
    }

    #[test]
    fn nodes_down_after_the_kill_count_beyond_those_down_before() {
        let s = series(
            "server-1",
            &[
                (0.0, &[(DOWN, 3.0)]),
                (10.0, &[(DOWN, 3.0)]),
                (20.0, &[(DOWN, 10.0)]),
                (30.0, &[(DOWN, 4.0)]),
            ],
        );
        let servers = [&s];
        let input = |faults| FleetInput {
            nodes: 10,
            ready_s: None,
            first_submit_s: None,
            servers: &servers,
            nodesims: &[],
            faults,
            elections: None,
            slowest_running_ms: None,
        };
        let kill = [kill_at(15.0, 1)];
        assert_eq!(fleet(&input(&kill)).wrongly_down_after_failover, Some(7));
        // A fleet pause from 18 s marks the nodes down rightly.
        let paused = [
            kill_at(15.0, 1),
            FaultReport {
                action: FaultAction::PauseFleet,
                ..kill_at(18.0, 0)
            },
        ];
        assert_eq!(fleet(&input(&paused)).wrongly_down_after_failover, Some(0));
        assert_eq!(fleet(&input(&[])).wrongly_down_after_failover, None);
        let f = fleet(&input(&[]));
        assert_eq!(f.registrations_per_second, None);
        assert_eq!(f.nodesim_rss_bytes_per_node, None);
    }
}
