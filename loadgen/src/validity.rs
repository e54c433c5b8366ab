//! Whether a run measured the cluster or the harness. On one small machine
//! loadgen, nodesim and the servers share the cores: when a generator
//! saturates the cores it can use, or the machine as a whole is saturated,
//! latencies and rates measure the generator and the machine, and the run
//! says so (`validity` in `summary.json`) instead of reporting them as the
//! cluster's. A rate search never counts such a probe as a pass.
//!
//! Pure: the sampler's series and the stream's counts in, a verdict out.

use serde::{Deserialize, Serialize};
use stampede_proto::Binary;

use crate::sampler::Series;

/// CPU is judged over windows of this many seconds: long enough that a
/// scheduling hiccup is not saturation, short enough that a saturated
/// stretch is not averaged away over the run.
pub const WINDOW_S: f64 = 10.0;
/// A generator using more than this share of the cores it can use, in any window.
pub const GENERATOR_SATURATED: f64 = 0.90;
/// Every process of the run together using this share of the machine's cores.
pub const MACHINE_SATURATED: f64 = 0.95;
/// Late submissions above this share of those scheduled.
pub const LATE_SHARE: f64 = 0.01;

const CPU: &str = "process_cpu_seconds_total";

/// The verdict, with each reason and its figure.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Validity {
    pub valid: bool,
    pub reasons: Vec<String>,
}

/// What the run had to work with.
#[derive(Debug, Clone)]
pub struct Budget {
    /// The machine's cores (infinite when the run's processes are not all on it).
    pub machine_cores: f64,
    /// The load generators (by series name: `loadgen`, `nodesim`,
    /// `nodesim-2`, ...), each with the cores it can use (its threads, at
    /// most the machine's).
    pub generators: Vec<(String, f64)>,
}

impl Budget {
    /// A run on a machine of `cores` usable cores ([`usable_cores`]):
    /// loadgen's runtime takes every core, each nodesim process its
    /// `--threads` (`nodesim_args`, default 1). `local` is false for a
    /// cluster elsewhere: then only loadgen is judged here (the machine's
    /// cores are not the other processes').
    pub fn of(cores: f64, series: &[Series], nodesim_args: &[String], local: bool) -> Budget {
        let nodesim = nodesim_threads(nodesim_args).min(cores);
        let mut generators = vec![(crate::sampler::LOADGEN_TARGET.to_string(), cores)];
        if local {
            let shards = series.iter().filter(|s| s.is(Binary::Nodesim));
            generators.extend(shards.map(|s| (s.target.name.clone(), nodesim)));
        }
        Budget {
            machine_cores: if local { cores } else { f64::INFINITY },
            generators,
        }
    }
}

/// The cores this process (and the processes it starts, which inherit its
/// CPU affinity and cgroup) can use: the CPUs it may run on, or less under
/// a CPU quota. The quota is kept as a fraction (0.3 of a core is not one
/// core, as the standard library's count rounds it).
pub fn usable_cores() -> f64 {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    cpus.min(
        cgroup_quota(&cgroups, |path| std::fs::read_to_string(path).ok()).unwrap_or(f64::INFINITY),
    )
}

/// The CPU quota, in cores, of the cgroup `/proc/self/cgroup` names
/// (`cgroups`): v2's `cpu.max`, or v1's `cpu.cfs_quota_us` over
/// `cpu.cfs_period_us`; `None` without one. `read` reads a file.
fn cgroup_quota(cgroups: &str, read: impl Fn(&str) -> Option<String>) -> Option<f64> {
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let number = |file: String| read(&file).and_then(|t| t.trim().parse::<f64>().ok());
        if controllers.is_empty() {
            let max = read(&format!("/sys/fs/cgroup{path}/cpu.max"))?;
            let mut f = max.split_whitespace();
            if let (Some(Ok(quota)), Some(Ok(period))) = (
                f.next().map(str::parse::<f64>),
                f.next().map(str::parse::<f64>),
            ) {
                return Some(quota / period);
            }
        } else if controllers.split(',').any(|c| c == "cpu") {
            let dir = format!("/sys/fs/cgroup/cpu{path}");
            let quota = number(format!("{dir}/cpu.cfs_quota_us"))?;
            let period = number(format!("{dir}/cpu.cfs_period_us"))?;
            return (quota > 0.0 && period > 0.0).then(|| quota / period);
        }
    }
    None
}

/// The threads nodesim runs on, from its flags: the last `--threads N`
/// (or `--threads=N`), else its default, one.
pub fn nodesim_threads(args: &[String]) -> f64 {
    let mut threads = 1.0;
    for (i, a) in args.iter().enumerate() {
        let value = match a.strip_prefix("--threads") {
            Some("") => args.get(i + 1).map(String::as_str),
            Some(v) => v.strip_prefix('='),
            None => None,
        };
        if let Some(n) = value.and_then(|v| v.parse::<f64>().ok()) {
            threads = n;
        }
    }
    threads
}

/// The stream's counts that say whether loadgen kept its schedule.
#[derive(Debug, Clone, Copy, Default)]
pub struct Schedule {
    pub scheduled: u64,
    pub late: u64,
    pub dropped: u64,
}

/// Judges a run (one variant's repetition).
pub fn judge(schedule: Schedule, series: &[Series], budget: &Budget) -> Validity {
    let mut reasons = Vec::new();
    if schedule.scheduled > 0 {
        let share = schedule.late as f64 / schedule.scheduled as f64;
        if share > LATE_SHARE {
            reasons.push(format!(
                "loadgen submitted {} of {} jobs late ({:.1}%, over {:.0}%)",
                schedule.late,
                schedule.scheduled,
                share * 100.0,
                LATE_SHARE * 100.0
            ));
        }
    }
    if schedule.dropped > 0 {
        reasons.push(format!("loadgen dropped {} submissions", schedule.dropped));
    }
    let grid = common_grid(series);
    for (name, cores) in &budget.generators {
        let Some(s) = series.iter().find(|s| &s.target.name == name) else {
            continue;
        };
        if let Some((from, used)) = peak(&grid, &window_cores(s, &grid)) {
            if used > GENERATOR_SATURATED * cores {
                reasons.push(format!(
                    "{name} used {used:.2} of the {cores} core(s) it can use in the {WINDOW_S:.0} s from {from:.0} s (over {:.0}%)",
                    GENERATOR_SATURATED * 100.0
                ));
            }
        }
    }
    let per_process: Vec<Vec<Option<f64>>> =
        series.iter().map(|s| window_cores(s, &grid)).collect();
    let machine: Vec<Option<f64>> = (0..grid.len().saturating_sub(1))
        .map(|w| Some(per_process.iter().filter_map(|p| p[w]).sum()))
        .collect();
    if let Some((from, used)) = peak(&grid, &machine) {
        let cores = budget.machine_cores;
        if cores.is_finite() && used >= MACHINE_SATURATED * cores {
            reasons.push(format!(
                "the run's processes used {used:.2} of the machine's {cores} cores in the {WINDOW_S:.0} s from {from:.0} s (at least {:.0}%)",
                MACHINE_SATURATED * 100.0
            ));
        }
    }
    Validity {
        valid: reasons.is_empty(),
        reasons,
    }
}

/// Window boundaries every series covers: from the latest first sample to
/// the earliest last one, every [`WINDOW_S`].
fn common_grid(series: &[Series]) -> Vec<f64> {
    let with_cpu = series
        .iter()
        .filter(|s| s.points.iter().any(|p| p.values.contains_key(CPU)));
    let (mut from, mut to) = (f64::MIN, f64::MAX);
    for s in with_cpu {
        let (Some(first), Some(last)) = (s.points.first(), s.points.last()) else {
            continue;
        };
        from = from.max(first.t);
        to = to.min(last.t);
    }
    let mut grid = Vec::new();
    let mut t = from;
    while from > f64::MIN && t <= to + 1e-9 {
        grid.push(t);
        t += WINDOW_S;
    }
    grid
}

/// A series' cores used in each window of `grid` (the growth of its CPU
/// counter between the boundaries, interpolated between samples); `None`
/// for a window it has no samples around.
fn window_cores(s: &Series, grid: &[f64]) -> Vec<Option<f64>> {
    let cpu: Vec<(f64, f64)> = s
        .points
        .iter()
        .filter_map(|p| Some((p.t, *p.values.get(CPU)?)))
        .collect();
    let at = |t: f64| cpu_at(&cpu, t);
    grid.windows(2)
        .map(|w| Some((at(w[1])? - at(w[0])?).max(0.0) / (w[1] - w[0])))
        .collect()
}

/// The CPU counter at `t` from its samples `pts` (time, value), linear
/// between the two around it.
fn cpu_at(pts: &[(f64, f64)], t: f64) -> Option<f64> {
    let i = pts.iter().position(|p| p.0 >= t)?;
    let (t1, v1) = pts[i];
    if t1 == t {
        return Some(v1);
    }
    let (t0, v0) = *pts.get(i.checked_sub(1)?)?;
    Some(v0 + (v1 - v0) * (t - t0) / (t1 - t0))
}

/// The busiest window: its start and the cores used.
fn peak(grid: &[f64], windows: &[Option<f64>]) -> Option<(f64, f64)> {
    let known = grid
        .iter()
        .zip(windows)
        .filter_map(|(t, c)| Some((*t, (*c)?)));
    known.max_by(|a, b| a.1.total_cmp(&b.1))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::sampler::{Point, Target};

    /// A process that used `cores` cores from each sample to the next, one sample a second.
    fn process(name: &str, cores: &[f64]) -> Series {
        let mut cpu = 0.0;
        let mut points = vec![Point {
            t: 0.0,
            values: BTreeMap::from([(CPU.to_string(), 0.0)]),
        }];
        for (i, c) in cores.iter().enumerate() {
            cpu += c;
            points.push(Point {
                t: (i + 1) as f64,
                values: BTreeMap::from([(CPU.to_string(), cpu)]),
            });
        }
        Series {
            target: Target {
                name: name.into(),
                url: String::new(),
                binary: None,
            },
            points,
            lost_at: None,
            last_text: None,
        }
    }

    fn budget() -> Budget {
        Budget {
            machine_cores: 2.0,
            generators: vec![("loadgen".into(), 2.0), ("nodesim".into(), 1.0)],
        }
    }

    const ON_TIME: Schedule = Schedule {
        scheduled: 1000,
        late: 3,
        dropped: 0,
    };

    #[test]
    fn a_quiet_run_is_valid() {
        let series = [
            process("server-1", &[0.3; 30]),
            process("nodesim", &[0.4; 30]),
            process("loadgen", &[0.1; 30]),
        ];
        assert_eq!(
            judge(ON_TIME, &series, &budget()),
            Validity {
                valid: true,
                reasons: vec![]
            }
        );
    }

    #[test]
    fn a_starved_nodesim_makes_the_run_invalid_naming_the_window() {
        // Ten seconds at 0.95 of its one core, from 10 s on.
        let mut cores = vec![0.3; 30];
        cores[10..20].fill(0.95);
        let series = [
            process("server-1", &[0.3; 30]),
            process("nodesim", &cores),
            process("loadgen", &[0.1; 30]),
        ];
        let v = judge(ON_TIME, &series, &budget());
        assert!(!v.valid);
        assert_eq!(
            v.reasons,
            ["nodesim used 0.95 of the 1 core(s) it can use in the 10 s from 10 s (over 90%)"]
        );
    }

    #[test]
    fn a_saturated_machine_makes_the_run_invalid() {
        let series = [
            process("server-1", &[0.7; 30]),
            process("server-2", &[0.7; 30]),
            process("nodesim", &[0.6; 30]),
        ];
        let v = judge(ON_TIME, &series, &budget());
        assert!(!v.valid);
        assert!(
            v.reasons[0].starts_with("the run's processes used 2.00 of the machine's 2 cores"),
            "{v:?}"
        );
    }

    #[test]
    fn a_cgroups_cpu_quota_counts_as_a_fraction_of_a_core() {
        let files = |path: &str| match path {
            "/sys/fs/cgroup/cpu/starve/cpu.cfs_quota_us" => Some("30000\n".to_string()),
            "/sys/fs/cgroup/cpu/starve/cpu.cfs_period_us" => Some("100000\n".to_string()),
            "/sys/fs/cgroup/run/cpu.max" => Some("150000 100000\n".to_string()),
            "/sys/fs/cgroup/free/cpu.max" => Some("max 100000\n".to_string()),
            _ => None,
        };
        assert_eq!(
            cgroup_quota("5:devices:/\n3:cpu,cpuacct:/starve\n", files),
            Some(0.3)
        );
        assert_eq!(cgroup_quota("0::/run\n", files), Some(1.5));
        assert_eq!(cgroup_quota("0::/free\n", files), None);
        assert_eq!(
            cgroup_quota("3:cpu,cpuacct:/\n", files),
            None,
            "no quota file"
        );
    }

    #[test]
    fn nodesims_threads_come_from_its_last_threads_flag() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(nodesim_threads(&args(&[])), 1.0);
        assert_eq!(nodesim_threads(&args(&["--threads", "2", "--x"])), 2.0);
        assert_eq!(
            nodesim_threads(&args(&["--threads=2", "--threads", "3"])),
            3.0
        );
    }

    #[test]
    fn late_or_dropped_submissions_make_the_run_invalid() {
        let series = [process("loadgen", &[0.1; 30])];
        let v = judge(
            Schedule {
                scheduled: 1000,
                late: 11,
                dropped: 2,
            },
            &series,
            &budget(),
        );
        assert_eq!(
            v.reasons,
            [
                "loadgen submitted 11 of 1000 jobs late (1.1%, over 1%)",
                "loadgen dropped 2 submissions"
            ]
        );
        // 1% exactly is still on time.
        assert!(
            judge(
                Schedule {
                    scheduled: 1000,
                    late: 10,
                    dropped: 0
                },
                &series,
                &budget()
            )
            .valid
        );
    }
}
