//! What carrying an allocation costs (`summary.per_allocation`): the
//! servers' and nodesim's memory, the raft log's bytes, and a snapshot's
//! size and build time, each divided by allocations, so that a planner
//! can scale them to a larger run; and the snapshots built during the run
//! (`summary.snapshots`), the absolute figures beside them.
//!
//! Memory and the log are divided by the allocations the run placed and
//! saw running (`stream.allocations_placed`). A snapshot is divided by the
//! allocations its server's state held when it was built (the first
//! sample after it): snapshots are built every so many raft entries, so
//! the last one may come well before the run's end and hold fewer.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use stampede_proto::metric_names;

use crate::sampler::{Series, RSS};

const ALLOCS: &str = metric_names::STATE_OBJECTS_ALLOCS;
const BUILD_SUM: &str = metric_names::RAFT_SNAPSHOT_BUILD_SECONDS_SUM;
const BUILD_COUNT: &str = metric_names::RAFT_SNAPSHOT_BUILD_SECONDS_COUNT;
const SNAPSHOT_BYTES: &str = metric_names::RAFT_SNAPSHOT_BYTES;

/// `summary.per_allocation`: each figure per allocation, null when unknown
/// (nothing placed, or nothing sampled to divide).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct PerAllocation {
    /// The allocations memory and the log are divided by: those the run
    /// placed and saw running (`stream.allocations_placed`).
    pub allocations: u64,
    /// The fullest server's peak resident memory (the fleet's nodes and
    /// the process's own included), bytes per allocation.
    pub server_rss_bytes: Option<f64>,
    /// nodesim's peak resident memory (every nodesim process's peak, added
    /// up), bytes per allocation.
    pub nodesim_rss_bytes: Option<f64>,
    /// The raft log's growth over the run: the bytes of every command the
    /// log took (`stampede_raft_entry_bytes_total`, every message type, on
    /// the server that applied the most: registrations, jobs, plans and
    /// client updates alike), per allocation. The log on disk is compacted
    /// behind snapshots; this is what it is written.
    pub raft_log_bytes: Option<f64>,
    /// The largest snapshot built during the run, bytes per allocation
    /// its state held.
    pub snapshot_bytes: Option<f64>,
    /// The slowest snapshot build of the run (encode and write, synced),
    /// seconds per allocation its state held.
    pub snapshot_seconds: Option<f64>,
}

/// `summary.snapshots`: the snapshots the servers built during the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Snapshots {
    /// Snapshots built during the run, every server.
    pub built: u64,
    /// The slowest build, seconds (two builds of one server between
    /// samples count as their mean), and the allocations its state held.
    pub slowest_build_s: Option<f64>,
    pub slowest_build_allocations: Option<u64>,
    /// The largest snapshot built, bytes, and the allocations its state held.
    pub largest_bytes: Option<u64>,
    pub largest_allocations: Option<u64>,
}

/// One snapshot build seen between two samples of a server.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Build {
    seconds: f64,
    bytes: f64,
    allocations: f64,
}

/// The snapshots built on `servers` during the run: between each two
/// samples where the build histogram's count grew, the growth of its sum
/// over that of its count is the build's seconds (exact for one build),
/// and the snapshot's size and the state's allocations are the later
/// sample's. A count that falls is a restarted server counting from 0.
fn builds(servers: &[&Series]) -> Vec<Build> {
    let mut out = Vec::new();
    for s in servers {
        for w in s.points.windows(2) {
            let get = |i: usize, name: &str| w[i].values.get(name).copied();
            let (Some(c1), Some(s1)) = (get(1, BUILD_COUNT), get(1, BUILD_SUM)) else {
                continue;
            };
            let (c0, s0) = (get(0, BUILD_COUNT).unwrap_or(0.0), get(0, BUILD_SUM));
            let (count, sum) = match c1 >= c0 {
                true => (c1 - c0, s1 - s0.unwrap_or(0.0)),
                false => (c1, s1),
            };
            if count < 1.0 {
                continue;
            }
            out.push(Build {
                seconds: (sum / count).max(0.0),
                bytes: get(1, SNAPSHOT_BYTES).unwrap_or(0.0),
                allocations: get(1, ALLOCS).unwrap_or(0.0),
            });
            // Several builds between two samples: each counts.
            for _ in 1..count as u64 {
                out.push(*out.last().expect("just pushed"));
            }
        }
    }
    out
}

/// The per-allocation figures and the snapshots, from the servers' and
/// nodesims' samples, the raft bytes by message type (the most any server
/// applied) and the allocations the run placed and saw running.
pub fn per_allocation(
    servers: &[&Series],
    nodesims: &[&Series],
    raft_bytes_by_type: &BTreeMap<String, u64>,
    allocations: u64,
) -> (PerAllocation, Snapshots) {
    let per = |x: Option<f64>| {
        x.filter(|_| allocations > 0)
            .map(|x| x / allocations as f64)
    };
    let server_rss = servers.iter().filter_map(|s| s.peak(RSS)).reduce(f64::max);
    let nodesim_rss = nodesims
        .iter()
        .filter_map(|s| s.peak(RSS))
        .reduce(|a, b| a + b);
    let raft_bytes =
        (!raft_bytes_by_type.is_empty()).then(|| raft_bytes_by_type.values().sum::<u64>() as f64);
    let builds = builds(servers);
    let held = |b: &Build| b.allocations >= 1.0;
    let slowest = builds
        .iter()
        .filter(|b| held(b))
        .max_by(|a, b| a.seconds.total_cmp(&b.seconds));
    let largest = builds
        .iter()
        .filter(|b| held(b))
        .max_by(|a, b| a.bytes.total_cmp(&b.bytes));
    let snapshots = Snapshots {
        built: builds.len() as u64,
        slowest_build_s: builds.iter().map(|b| b.seconds).reduce(f64::max),
        slowest_build_allocations: slowest.map(|b| b.allocations as u64),
        largest_bytes: builds.iter().map(|b| b.bytes as u64).max(),
        largest_allocations: largest.map(|b| b.allocations as u64),
    };
    let figures = PerAllocation {
        allocations,
        server_rss_bytes: per(server_rss),
        nodesim_rss_bytes: per(nodesim_rss),
        raft_log_bytes: per(raft_bytes),
        snapshot_bytes: largest.map(|b| b.bytes / b.allocations),
        snapshot_seconds: slowest.map(|b| b.seconds / b.allocations),
    };
    (figures, snapshots)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::{Point, Target};

    const MIB: f64 = 1048576.0;

    fn series(name: &str, points: Vec<(f64, Vec<(&str, f64)>)>) -> Series {
        Series {
            target: Target {
                name: name.into(),
                url: String::new(),
                binary: None,
            },
            points: points
                .into_iter()
                .map(|(t, values)| Point {
                    t,
                    values: values
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect(),
                })
                .collect(),
            lost_at: None,
            last_text: None,
        }
    }

    /// A server sampled every second for 60 s while 100,000 allocations
    /// arrive (placed from 10 s to 50 s): its memory grows with them, and
    /// it builds a snapshot between 20 and 21 s (0.8 s, 30 MB; 27,500
    /// allocations at 21 s) and between 40 and 41 s (2.1 s, 60 MB; 77,500),
    /// or none.
    fn server(name: &str, base_mib: f64, snapshots: bool) -> Series {
        let points = (0..=60)
            .map(|t| {
                let t = t as f64;
                let allocs = (((t - 10.0) / 40.0).clamp(0.0, 1.0) * 100_000.0).round();
                let mut v = vec![
                    (RSS, (base_mib + allocs * 2000.0 / MIB) * MIB),
                    (ALLOCS, allocs),
                ];
                if snapshots {
                    let (count, sum, bytes) = match t {
                        t if t >= 41.0 => (2.0, 2.9, 60e6),
                        t if t >= 21.0 => (1.0, 0.8, 30e6),
                        _ => (0.0, 0.0, 0.0),
                    };
                    v.extend([(BUILD_COUNT, count), (BUILD_SUM, sum)]);
                    v.push((SNAPSHOT_BYTES, bytes));
                }
                (t, v)
            })
            .collect();
        series(name, points)
    }

    #[test]
    fn each_figure_is_divided_by_the_allocations_it_carries() {
        // The allocations at the samples after the builds (21 s and 41 s).
        let at = |t: f64| ((t - 10.0) / 40.0 * 100_000.0_f64).round();
        let (s1, s2) = (
            server("server-1", 80.0, true),
            server("server-2", 95.0, true),
        );
        let s3 = server("server-3", 90.0, false);
        let nodesim = series(
            "nodesim",
            vec![
                (0.0, vec![(RSS, 50.0 * MIB)]),
                (30.0, vec![(RSS, 250.0 * MIB)]),
                (60.0, vec![(RSS, 240.0 * MIB)]),
            ],
        );
        let bytes: BTreeMap<String, u64> = [
            ("plan_apply".to_string(), 30_000_000),
            ("alloc_client_update".to_string(), 20_000_000),
        ]
        .into();
        let (p, snaps) = per_allocation(&[&s1, &s2, &s3], &[&nodesim], &bytes, 100_000);
        assert_eq!(p.allocations, 100_000);
        // server-2 is the fullest: 95 MiB and 2,000 bytes an allocation.
        let rss = p.server_rss_bytes.unwrap();
        assert!((rss - (95.0 * MIB / 1e5 + 2000.0)).abs() < 1e-6, "{rss}");
        assert_eq!(p.nodesim_rss_bytes, Some(250.0 * MIB / 1e5));
        assert_eq!(p.raft_log_bytes, Some(500.0));
        // Each of two servers built two: the slowest took 2.1 s (the sum
        // grew by 2.1 while the count grew by one) over 77,500 allocations.
        assert_eq!(snaps.built, 4);
        let slowest = snaps.slowest_build_s.unwrap();
        assert!((slowest - 2.1).abs() < 1e-9, "{slowest}");
        assert_eq!(snaps.slowest_build_allocations, Some(at(41.0) as u64));
        let per_s = p.snapshot_seconds.unwrap();
        assert!((per_s - 2.1 / at(41.0)).abs() < 1e-12, "{per_s}");
        assert_eq!(snaps.largest_bytes, Some(60_000_000));
        assert_eq!(snaps.largest_allocations, Some(77_500));
        assert_eq!(p.snapshot_bytes, Some(60e6 / 77_500.0));
        // Read back from JSON as written.
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(serde_json::from_value::<PerAllocation>(json).unwrap(), p);
    }

    #[test]
    fn unknown_figures_are_null() {
        let s = server("server-1", 80.0, false);
        // Nothing placed: nothing to divide by.
        let (p, snaps) = per_allocation(&[&s], &[], &BTreeMap::new(), 0);
        assert_eq!(p, PerAllocation::default());
        assert_eq!(snaps, Snapshots::default());
        // Placed, but no nodesim sampled, no raft bytes, no snapshot built.
        let (p, snaps) = per_allocation(&[&s], &[], &BTreeMap::new(), 10);
        assert!(p.server_rss_bytes.is_some());
        assert_eq!(
            (p.nodesim_rss_bytes, p.raft_log_bytes, p.snapshot_bytes),
            (None, None, None)
        );
        assert_eq!((p.snapshot_seconds, snaps.built), (None, 0));
        let json = serde_json::to_value(&p).unwrap();
        assert!(
            json["snapshot_seconds"].is_null(),
            "present, as null: {json}"
        );
        // An older summary without the block reads as unknown.
        let old: PerAllocation = serde_json::from_str("{}").unwrap();
        assert_eq!(old.server_rss_bytes, None);
    }

    #[test]
    fn a_restarted_servers_builds_count_from_zero_again() {
        let points = vec![
            (
                0.0,
                vec![(BUILD_COUNT, 3.0), (BUILD_SUM, 3.0), (ALLOCS, 10.0)],
            ),
            // Killed and started again; it built one (0.5 s) since.
            (
                1.0,
                vec![(BUILD_COUNT, 1.0), (BUILD_SUM, 0.5), (ALLOCS, 10.0)],
            ),
            // Two more between samples: 1.5 s together.
            (
                2.0,
                vec![(BUILD_COUNT, 3.0), (BUILD_SUM, 2.0), (ALLOCS, 10.0)],
            ),
        ];
        let s = series("server-1", points);
        let seconds: Vec<f64> = builds(&[&s]).iter().map(|b| b.seconds).collect();
        assert_eq!(seconds, [0.5, 0.75, 0.75]);
    }
}
