//! The results model: a variant's samples of every process's `/metrics`
//! and the stream's report in, the summary's sections of them out (cost per
//! placement, cores and memory per process, raft entries by type, state
//! sizes, a soak's memory growth). Pure: no I/O, no processes, so it is
//! tested on made-up samples.

use std::collections::BTreeMap;
use std::time::Duration;

use stampede_proto::metric_names;
use stampede_proto::Binary;

use serde::{Deserialize, Serialize};

use super::delivery::Delivery;
use super::{cpu_seconds_per_1000_placements, Memory};
use crate::sampler::{label, Series, RSS};
use crate::stream::StreamReport;

/// When a soak's memory should have settled: its growth after this is what
/// `server_rss_growth_after_10m` reports.
pub const SOAK_SETTLE: Duration = Duration::from_secs(600);

const MIB: f64 = 1048576.0;

/// What the cluster did over the run, from the servers' and nodesim's
/// counters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(default)]
pub struct Traffic {
    /// Raft entries applied during the run, by message type.
    pub raft_entries_by_type: BTreeMap<String, u64>,
    /// Bytes of those entries, by message type.
    pub raft_bytes_by_type: BTreeMap<String, u64>,
    /// Blocking queries started during the run, by source, over all servers.
    pub blocking_queries_by_source: BTreeMap<String, u64>,
    /// nodesim's Node.UpdateAlloc calls, by priority.
    pub client_update_rpcs: BTreeMap<String, u64>,
    /// How long after a write's apply parked queries got their answers, by
    /// source, over all servers (`stampede_blocking_query_delivery_seconds`).
    pub blocking_delivery_ms: BTreeMap<String, Delivery>,
    /// Time deployment-watcher queries spent queued for the shared query
    /// rate limiter, summed over queries (the leader's watchers).
    pub deployment_query_wait_seconds: f64,
    /// Share of raft entries that are client allocation updates.
    pub client_update_share: f64,
    /// Share of raft bytes that are client allocation updates.
    pub client_update_byte_share: f64,
}

/// What each process used over the run, and what a placement cost it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(default)]
pub struct Processes {
    /// Average cores each process used over the run: every server, every
    /// nodesim and loadgen itself.
    pub cpu_cores: BTreeMap<String, f64>,
    /// CPU-seconds every process of the run used during the stream (the
    /// growth of each one's own CPU counter: servers, nodesim, loadgen),
    /// per 1,000 allocations placed in the same window; null when nothing
    /// was placed. Lower is better.
    pub cpu_seconds_per_1000_placements: Option<f64>,
    /// The same cost by process: each process's own CPU-seconds over the
    /// stream per 1,000 placements (`server-1` ..., `nodesim`, `loadgen`),
    /// so that a run says which process a placement's cost goes to. A fleet
    /// of several nodesim processes is listed by process too (`nodesim-0`
    /// ...), with `nodesim` their sum. Empty when nothing was placed.
    pub cpu_seconds_per_1000_placements_by_process: BTreeMap<String, f64>,
    /// Peak resident memory of each process, in MiB.
    pub rss_mib: BTreeMap<String, f64>,
    /// How fast the steepest server's resident memory grew over the second
    /// half of the run, MiB per minute (least squares over its samples);
    /// `None` with too few samples.
    pub server_rss_slope_mib_per_min: Option<f64>,
    /// The servers' memory per row of state, and the leak check, judged only
    /// when the state's rows were flat over the second half.
    pub memory: Memory,
    /// For runs of more than ten minutes: how much the most-grown server's
    /// resident memory grew from ten minutes in to the end (0.1 is 10%).
    pub server_rss_growth_after_10m: Option<f64>,
}

impl Processes {
    /// The server CPU the variant used: the sum of the servers' average cores.
    pub fn server_cpu_cores(&self) -> f64 {
        self.cpu_cores
            .iter()
            .filter(|(k, _)| k.starts_with("server"))
            // From +0.0: an empty f64 sum is -0.0, which prints as "-0.00".
            .fold(0.0, |sum, (_, c)| sum + c)
    }
}

/// The rows the servers held, and those garbage collection removed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(default)]
pub struct StateRows {
    /// Rows in the state at the end of the run, by table, and the most at
    /// any sample (the most any server held).
    pub state_objects: BTreeMap<String, u64>,
    pub state_objects_peak: BTreeMap<String, u64>,
    /// Rows garbage collection removed during the run, by kind.
    pub gc_collected: BTreeMap<String, u64>,
}

/// What a run's (or a window's) samples say, section by section.
#[derive(Debug, Clone, Default)]
pub struct Sampled {
    pub traffic: Traffic,
    pub processes: Processes,
    pub state: StateRows,
}

/// What every process's samples say over a run whose `stream` placed
/// what it placed: the cluster's traffic, each process's use and cost per
/// placement, and the state's rows.
pub fn sampled(stream: &StreamReport, series: &[Series]) -> Sampled {
    let servers: Vec<&Series> = series.iter().filter(|s| s.is(Binary::Cluster)).collect();
    let raft_entries_by_type = most_by_label(&servers, metric_names::RAFT_ENTRIES_TOTAL, "type");
    let raft_bytes_by_type = most_by_label(&servers, metric_names::RAFT_ENTRY_BYTES_TOTAL, "type");
    let deployment_query_wait_seconds = servers
        .iter()
        .map(|s| {
            s.delta(metric_names::DEPLOYMENT_WATCHER_LIMITER_WAIT_SECONDS_SUM)
                .max(0.0)
        })
        .sum();
    let (cpu_cores, cpu_by_process, rss_mib) = cpu_and_memory(series);
    let cpu_seconds: f64 = cpu_by_process.values().sum();
    let placed = stream.allocations_placed;
    let (state_objects, state_objects_peak) = state_objects(&servers);
    let slope = server_rss_slope(&servers);
    Sampled {
        traffic: Traffic {
            client_update_share: client_update_share(&raft_entries_by_type),
            client_update_byte_share: client_update_share(&raft_bytes_by_type),
            raft_entries_by_type,
            raft_bytes_by_type,
            // Queries are served by whichever server got them: added up.
            blocking_queries_by_source: sum_by_label(
                &servers,
                metric_names::BLOCKING_QUERIES_STARTED_TOTAL,
                "source",
            ),
            client_update_rpcs: sum_by_label(
                &series.iter().collect::<Vec<_>>(),
                metric_names::NODESIM_UPDATE_RPCS_TOTAL,
                "priority",
            ),
            blocking_delivery_ms: super::delivery::delivery(&servers),
            deployment_query_wait_seconds,
        },
        processes: Processes {
            cpu_cores,
            cpu_seconds_per_1000_placements: cpu_seconds_per_1000_placements(cpu_seconds, placed),
            cpu_seconds_per_1000_placements_by_process: by_process(series, &cpu_by_process, placed),
            rss_mib,
            server_rss_slope_mib_per_min: slope,
            memory: super::memory::memory(&servers, slope),
            server_rss_growth_after_10m: server_rss_growth_after(&servers, SOAK_SETTLE),
        },
        state: StateRows {
            state_objects,
            state_objects_peak,
            gc_collected: most_by_label(&servers, metric_names::GC_COLLECTED_TOTAL, "kind"),
        },
    }
}

/// A counter's growth by one label, the most any server counted: every
/// server applies every entry, so the most any server saw is the run's.
fn most_by_label(servers: &[&Series], metric: &str, key: &str) -> BTreeMap<String, u64> {
    let mut by = BTreeMap::new();
    for s in servers {
        for name in s.names_of(metric) {
            let t = label(&name, key).unwrap_or("?").to_string();
            let n = s.delta(&name).max(0.0) as u64;
            let e = by.entry(t).or_insert(0);
            *e = (*e).max(n);
        }
    }
    by
}

/// A counter's growth by one label, added up over the processes.
fn sum_by_label(series: &[&Series], metric: &str, key: &str) -> BTreeMap<String, u64> {
    let mut by = BTreeMap::new();
    for s in series {
        for name in s.names_of(metric) {
            let k = label(&name, key).unwrap_or("?").to_string();
            *by.entry(k).or_insert(0) += s.delta(&name).max(0.0) as u64;
        }
    }
    by
}

/// The share of client allocation updates in raft entries (or bytes) by type.
fn client_update_share(by_type: &BTreeMap<String, u64>) -> f64 {
    let total: u64 = by_type.values().sum();
    let updates = by_type.get("alloc_client_update").copied().unwrap_or(0);
    if total > 0 {
        updates as f64 / total as f64
    } else {
        0.0
    }
}

/// Every process's own CPU counter (servers, nodesim, loadgen), read over
/// the stream: average cores each, CPU-seconds in all, and peak memory in MiB.
/// Each process's average cores, CPU-seconds and peak memory (MiB), by its name.
type ProcessFigures = (
    BTreeMap<String, f64>,
    BTreeMap<String, f64>,
    BTreeMap<String, f64>,
);

fn cpu_and_memory(series: &[Series]) -> ProcessFigures {
    let mut cpu_cores = BTreeMap::new();
    let mut cpu_seconds = BTreeMap::new();
    let mut rss_mib = BTreeMap::new();
    for s in series {
        let span = match (s.points.first(), s.points.last()) {
            (Some(a), Some(b)) if b.t > a.t => b.t - a.t,
            _ => continue,
        };
        let cpu = s.increase("process_cpu_seconds_total");
        cpu_seconds.insert(s.target.name.clone(), cpu);
        cpu_cores.insert(s.target.name.clone(), cpu / span);
        rss_mib.insert(s.target.name.clone(), peak(s, RSS) / MIB);
    }
    (cpu_cores, cpu_seconds, rss_mib)
}

/// Each process's CPU-seconds (`cpu`, by name) per 1,000 of `placements`;
/// several nodesim processes (told by their metrics) are summed under
/// `nodesim` beside their own names.
fn by_process(
    series: &[Series],
    cpu: &BTreeMap<String, f64>,
    placements: u64,
) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = cpu
        .iter()
        .filter_map(|(name, &c)| {
            Some((
                name.clone(),
                cpu_seconds_per_1000_placements(c, placements)?,
            ))
        })
        .collect();
    let fleet: Vec<&str> = series
        .iter()
        .filter(|s| s.is(Binary::Nodesim))
        .map(|s| s.target.name.as_str())
        .filter(|name| *name != "nodesim")
        .collect();
    if !fleet.is_empty() && !out.contains_key("nodesim") {
        let sum: f64 = fleet.iter().filter_map(|name| cpu.get(*name)).sum();
        if let Some(per) = cpu_seconds_per_1000_placements(sum, placements) {
            out.insert("nodesim".into(), per);
        }
    }
    out
}

/// The highest value of `name` in any sample (0 without one).
fn peak(s: &Series, name: &str) -> f64 {
    s.peak(name).unwrap_or(0.0).max(0.0)
}

/// The steepest server's memory growth over the second half of the run, MiB
/// per minute: what a soak must keep near zero.
fn server_rss_slope(servers: &[&Series]) -> Option<f64> {
    servers
        .iter()
        .filter_map(|s| {
            let end = s.points.last()?.t;
            s.slope_per_minute(RSS, end / 2.0)
        })
        .map(|bytes| bytes / MIB)
        .reduce(f64::max)
}

/// What the state holds at the end and at its fullest, by table: every
/// server applies every entry, so the most any server saw is the cluster's.
fn state_objects(servers: &[&Series]) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
    let mut last_by = BTreeMap::new();
    let mut peak_by = BTreeMap::new();
    for s in servers {
        for name in s.names_of(metric_names::STATE_OBJECTS) {
            let table = label(&name, "table").unwrap_or("?").to_string();
            let last = s.last(&name).max(0.0) as u64;
            let e = last_by.entry(table.clone()).or_insert(0);
            *e = (*e).max(last);
            let e = peak_by.entry(table).or_insert(0);
            *e = (*e).max(peak(s, &name) as u64);
        }
    }
    (last_by, peak_by)
}

/// How much the most-grown server's memory grew from `settle` into the run
/// to its end (0.1 is 10%): a soak's check; `None` for a shorter run.
fn server_rss_growth_after(servers: &[&Series], settle: Duration) -> Option<f64> {
    let settle = settle.as_secs_f64();
    servers
        .iter()
        .filter_map(|s| {
            let end = s.points.last()?;
            if end.t < settle {
                return None;
            }
            let at = s.points.iter().find(|p| p.t >= settle)?.values.get(RSS)?;
            let last = end.values.get(RSS)?;
            (*at > 0.0).then(|| last / at - 1.0)
        })
        .reduce(f64::max)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::sampler::{Point, Target};

    const MB: f64 = MIB;

    /// A process's samples: at each time, its series' values.
    pub(in crate::summary) fn series(name: &str, points: &[(f64, &[(&str, f64)])]) -> Series {
        Series {
            target: Target {
                name: name.into(),
                url: String::new(),
                binary: None,
            },
            points: points
                .iter()
                .map(|(t, values)| Point {
                    t: *t,
                    values: values.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
                })
                .collect(),
            lost_at: None,
            last_text: None,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    const CPU: &str = "process_cpu_seconds_total";
    const ENTRIES_UPDATE: &str = "stampede_raft_entries_total{type=\"alloc_client_update\"}";
    const ENTRIES_PLAN: &str = "stampede_raft_entries_total{type=\"plan_apply\"}";
    const BYTES_UPDATE: &str = "stampede_raft_entry_bytes_total{type=\"alloc_client_update\"}";
    const BYTES_PLAN: &str = "stampede_raft_entry_bytes_total{type=\"plan_apply\"}";
    const QUERIES: &str = "stampede_blocking_queries_started_total{source=\"job\"}";
    const JOBS: &str = "stampede_state_objects{table=\"jobs\"}";
    const GC: &str = "stampede_gc_collected_total{kind=\"evals\"}";

    /// Two servers, nodesim and loadgen sampled at 0, 10 and 20 s.
    fn samples() -> Vec<Series> {
        vec![
            series(
                "server-1",
                &[
                    (
                        0.0,
                        &[
                            (CPU, 1.0),
                            (RSS, 100.0 * MB),
                            (ENTRIES_UPDATE, 10.0),
                            (ENTRIES_PLAN, 5.0),
                            (BYTES_UPDATE, 0.0),
                            (BYTES_PLAN, 0.0),
                            (QUERIES, 0.0),
                            (JOBS, 3.0),
                            (GC, 0.0),
                        ],
                    ),
                    (
                        10.0,
                        &[
                            (CPU, 3.0),
                            (RSS, 300.0 * MB),
                            (ENTRIES_UPDATE, 20.0),
                            (ENTRIES_PLAN, 10.0),
                            (JOBS, 9.0),
                        ],
                    ),
                    (
                        20.0,
                        &[
                            (CPU, 6.0),
                            (RSS, 200.0 * MB),
                            (ENTRIES_UPDATE, 40.0),
                            (ENTRIES_PLAN, 15.0),
                            (BYTES_UPDATE, 1000.0),
                            (BYTES_PLAN, 3000.0),
                            (QUERIES, 4.0),
                            (JOBS, 7.0),
                            (GC, 2.0),
                        ],
                    ),
                ],
            ),
            series(
                "server-2",
                &[
                    (
                        0.0,
                        &[
                            (CPU, 0.0),
                            (RSS, 50.0 * MB),
                            (ENTRIES_UPDATE, 0.0),
                            (ENTRIES_PLAN, 5.0),
                            (QUERIES, 1.0),
                            (JOBS, 2.0),
                        ],
                    ),
                    (10.0, &[(CPU, 1.0), (RSS, 60.0 * MB), (JOBS, 10.0)]),
                    (
                        20.0,
                        &[
                            (CPU, 2.0),
                            (RSS, 70.0 * MB),
                            (ENTRIES_UPDATE, 30.0),
                            (ENTRIES_PLAN, 12.0),
                            (QUERIES, 3.0),
                            (JOBS, 6.0),
                        ],
                    ),
                ],
            ),
            series(
                "nodesim",
                &[
                    (
                        0.0,
                        &[
                            (CPU, 0.0),
                            ("stampede_nodesim_update_rpcs_total{priority=\"high\"}", 0.0),
                            ("stampede_nodesim_update_rpcs_total{priority=\"low\"}", 2.0),
                        ],
                    ),
                    (
                        20.0,
                        &[
                            (CPU, 1.0),
                            ("stampede_nodesim_update_rpcs_total{priority=\"high\"}", 8.0),
                            ("stampede_nodesim_update_rpcs_total{priority=\"low\"}", 5.0),
                        ],
                    ),
                ],
            ),
            // loadgen's counter restarts from zero in the middle: it still grew.
            series(
                "loadgen",
                &[
                    (0.0, &[(CPU, 2.0)]),
                    (10.0, &[(CPU, 0.5)]),
                    (20.0, &[(CPU, 1.5)]),
                ],
            ),
        ]
    }

    #[test]
    fn the_figures_come_from_every_process_samples() {
        let stream = StreamReport {
            allocations_placed: 1900,
            ..Default::default()
        };
        let Sampled {
            traffic: t,
            processes: v,
            state,
        } = sampled(&stream, &samples());
        // Cores: CPU-seconds grown over the 20 s each process was sampled.
        let cores = |name: &str| v.cpu_cores[name];
        assert!(close(cores("server-1"), 5.0 / 20.0), "{:?}", v.cpu_cores);
        assert!(close(cores("server-2"), 2.0 / 20.0));
        assert!(close(cores("nodesim"), 1.0 / 20.0));
        assert!(close(cores("loadgen"), 1.5 / 20.0), "across the restart");
        assert!(close(v.server_cpu_cores(), 0.35));
        // 9.5 CPU-seconds in all over 1,900 placements.
        assert!(close(v.cpu_seconds_per_1000_placements.unwrap(), 5.0));
        // By process: each one's own CPU-seconds over the same placements.
        let by = &v.cpu_seconds_per_1000_placements_by_process;
        let names: Vec<&str> = by.keys().map(String::as_str).collect();
        assert_eq!(names, ["loadgen", "nodesim", "server-1", "server-2"]);
        for (name, cpu) in [
            ("server-1", 5.0),
            ("server-2", 2.0),
            ("nodesim", 1.0),
            ("loadgen", 1.5),
        ] {
            assert!(close(by[name], cpu * 1000.0 / 1900.0), "{name}: {by:?}");
        }
        // Peak memory, not the last sample's.
        assert!(close(v.rss_mib["server-1"], 300.0));
        assert!(close(v.rss_mib["server-2"], 70.0));
        // Entries: the most any server applied; queries: added up.
        let map = |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> {
            pairs.iter().map(|(k, n)| (k.to_string(), *n)).collect()
        };
        assert_eq!(
            t.raft_entries_by_type,
            map(&[("alloc_client_update", 30), ("plan_apply", 10)])
        );
        assert!(close(t.client_update_share, 0.75));
        assert!(close(t.client_update_byte_share, 0.25));
        assert_eq!(t.blocking_queries_by_source, map(&[("job", 6)]));
        assert_eq!(t.client_update_rpcs, map(&[("high", 8), ("low", 3)]));
        assert_eq!(state.state_objects, map(&[("jobs", 7)]));
        assert_eq!(state.state_objects_peak, map(&[("jobs", 10)]));
        assert_eq!(state.gc_collected, map(&[("evals", 2)]));
        // A 20 s run says nothing of a soak's growth after ten minutes.
        assert_eq!(v.server_rss_growth_after_10m, None);
    }

    #[test]
    fn a_fleet_of_several_nodesim_processes_is_costed_by_process_and_summed() {
        const NODES: &str = "stampede_nodesim_nodes{state=\"ready\"}";
        let shard = |name: &str, cpu: f64| {
            series(
                name,
                &[(0.0, &[(CPU, 0.0), (NODES, 5.0)]), (10.0, &[(CPU, cpu)])],
            )
        };
        let fleet = vec![
            series("server-1", &[(0.0, &[(CPU, 0.0)]), (10.0, &[(CPU, 4.0)])]),
            shard("nodesim-0", 1.0),
            shard("nodesim-1", 3.0),
        ];
        let placed = |n| StreamReport {
            allocations_placed: n,
            ..Default::default()
        };
        let v = sampled(&placed(2000), &fleet).processes;
        let by = &v.cpu_seconds_per_1000_placements_by_process;
        assert!(close(by["server-1"], 2.0), "{by:?}");
        assert!(close(by["nodesim-0"], 0.5), "{by:?}");
        assert!(close(by["nodesim-1"], 1.5), "{by:?}");
        assert!(close(by["nodesim"], 2.0), "the fleet's sum: {by:?}");
        // Nothing placed: no cost per placement, for any process.
        let v = sampled(&placed(0), &fleet).processes;
        assert!(v.cpu_seconds_per_1000_placements_by_process.is_empty());
    }

    #[test]
    fn a_soak_reports_memory_growth_after_ten_minutes_and_its_slope() {
        // Flat at 100 MiB for ten minutes, then 1 MiB more each minute.
        let points: Vec<(f64, Vec<(&str, f64)>)> = (0..=20)
            .map(|m| {
                let mib = 100.0 + (m as f64 - 10.0).max(0.0);
                (
                    m as f64 * 60.0,
                    vec![(RSS, mib * MB), (ENTRIES_PLAN, m as f64)],
                )
            })
            .collect();
        let refs: Vec<(f64, &[(&str, f64)])> =
            points.iter().map(|(t, v)| (*t, v.as_slice())).collect();
        let stream = StreamReport::default();
        let v = sampled(&stream, &[series("server-1", &refs)]).processes;
        let growth = v.server_rss_growth_after_10m.unwrap();
        assert!(close(growth, 0.1), "{growth}");
        let slope = v.server_rss_slope_mib_per_min.unwrap();
        assert!(close(slope, 1.0), "{slope}");
        // Nothing placed: no cost per placement.
        assert_eq!(v.cpu_seconds_per_1000_placements, None);
    }
}
