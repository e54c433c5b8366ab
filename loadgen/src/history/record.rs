//! What the history keeps of a run: one [`RunRow`] per repetition of each
//! variant, keyed by scenario, variant, build, machine and time, with every
//! compared measure (`summary::measures`) and every stage's p50 and p99.
//! Made from a `summary.json` alone, so that a run recorded as it ends and
//! the same run imported later are the same rows.

use std::collections::BTreeMap;
use std::path::Path;

use super::error::HistoryError;
use crate::summary::{measures, BuildInfo, Machine, RunSummary, VariantSummary};

/// One repetition of one variant of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    /// What makes a row unique, so that importing a run again adds nothing:
    /// scenario, variant, the variant's start and the repetition's round.
    pub key: String,
    pub scenario: String,
    pub variant: String,
    /// The build under test: the commit `cluster` was built from.
    pub commit: String,
    pub dirty: bool,
    pub machine: Option<Machine>,
    /// The variant's stream start, in Unix seconds.
    pub started_unix: f64,
    pub round: u32,
    /// Whether the repetition measured the cluster (and the variant had no
    /// problems): `history check` leaves the others out.
    pub valid: bool,
    /// The run directory or summary.json it came from.
    pub source: String,
    pub measures: BTreeMap<String, f64>,
    pub stages: Vec<StageRow>,
}

/// One stage of the critical path, over a variant's traced jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct StageRow {
    pub stage: String,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

impl RunRow {
    /// The build as a series orders it: its commit, `+dirty` when the
    /// checkout had changes.
    pub fn build(&self) -> String {
        match self.dirty {
            true => format!("{}+dirty", self.commit),
            false => self.commit.clone(),
        }
    }
}

/// Every repetition of every variant of `summary`, read from `path`.
/// Refused, naming the file, when a variant has no build stamp or no start.
pub fn rows(summary: &RunSummary, path: &Path) -> Result<Vec<RunRow>, HistoryError> {
    let mut out = Vec::new();
    for v in rows_by_variant(summary, path) {
        out.extend(v?);
    }
    Ok(out)
}

/// Each variant's rows, or why it cannot be recorded (a run records the
/// variants it can, and says which it could not).
pub fn rows_by_variant(
    summary: &RunSummary,
    path: &Path,
) -> Vec<Result<Vec<RunRow>, HistoryError>> {
    (summary.variants.iter())
        .map(|v| variant_rows(summary, v, path))
        .collect()
}

fn variant_rows(
    summary: &RunSummary,
    v: &VariantSummary,
    path: &Path,
) -> Result<Vec<RunRow>, HistoryError> {
    let bad = |why: &str| HistoryError::Unrecordable {
        path: path.to_path_buf(),
        variant: v.name.clone(),
        why: why.into(),
    };
    let build = build_under_test(v, summary)
        .ok_or_else(|| bad("no build stamp (cluster, nodesim or loadgen commit)"))?;
    if !(v.started_unix.is_finite() && v.started_unix > 0.0) {
        return Err(bad("no start time (started_unix)"));
    }
    let stages: Vec<StageRow> = (v.critical_path.stages.iter())
        .map(|s| StageRow {
            stage: s.stage.clone(),
            p50_ms: s.p50_ms,
            p99_ms: s.p99_ms,
        })
        .collect();
    let reps: Vec<(u32, BTreeMap<String, f64>, bool)> = match v.confidence.repetitions.is_empty() {
        true => vec![(1, measures::figures(v), v.confidence.validity.valid)],
        false => (v.confidence.repetitions.iter())
            .map(|r| (r.round, r.measures.clone(), r.valid))
            .collect(),
    };
    let mut out = Vec::new();
    for (i, (round, figures, valid)) in reps.into_iter().enumerate() {
        // Rounds are 1, 2, ... in a summary; an older one without them
        // numbers its repetitions in order.
        let round = if round == 0 { i as u32 + 1 } else { round };
        out.push(RunRow {
            key: format!(
                "{}/{}/{:.6}/{round}",
                summary.scenario.name, v.name, v.started_unix
            ),
            scenario: summary.scenario.name.clone(),
            variant: v.name.clone(),
            commit: build.commit.clone(),
            dirty: build.dirty,
            machine: summary.machine.clone(),
            started_unix: v.started_unix,
            round,
            valid: valid && v.problems.is_empty(),
            source: path.display().to_string(),
            measures: figures.into_iter().filter(|(_, x)| x.is_finite()).collect(),
            stages: stages.clone(),
        });
    }
    Ok(out)
}

/// The build a variant measured: its cluster's, else its fleet's, else
/// loadgen's (a summary from before builds were read from the processes).
fn build_under_test<'a>(v: &'a VariantSummary, s: &'a RunSummary) -> Option<&'a BuildInfo> {
    [&v.build, &s.build]
        .into_iter()
        .flat_map(|b| [&b.cluster, &b.nodesim, &b.loadgen])
        .flatten()
        .filter(|b| !b.commit.is_empty())
        // A build outside a git checkout says "unknown": kept, but only
        // when no binary of the variant knows its commit.
        .min_by_key(|b| b.commit == "unknown")
}

/// This machine: its cores, memory, and a fingerprint of both with its
/// machine id and CPU model. FNV-1a, not the standard library's hasher,
/// whose output may change between Rust releases.
pub fn this_machine() -> Machine {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory_mib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024);
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = (cpuinfo.lines())
        .find_map(|l| l.strip_prefix("model name"))
        .map_or("", |m| m.trim_start_matches([' ', '\t', ':']));
    let id = std::fs::read_to_string("/etc/machine-id").unwrap_or_default();
    let identity = format!("{}|{model}|{cores}|{memory_mib}", id.trim());
    let hash = identity.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    });
    Machine {
        cores,
        memory_mib,
        fingerprint: format!("{hash:016x}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summary::intervals::Repetition;
    use crate::summary::Builds;

    fn summary_of(commit: &str, started: f64, placements: &[f64]) -> RunSummary {
        let scenario = crate::scenario::Scenario::load("default").unwrap();
        let mut v = VariantSummary {
            name: "default".into(),
            started_unix: started,
            ..Default::default()
        };
        v.confidence.validity.valid = true;
        v.build = Builds {
            cluster: Some(BuildInfo {
                commit: commit.into(),
                dirty: false,
                version: "0.1.0".into(),
            }),
            ..Default::default()
        };
        let stage = serde_json::json!({"stage": "broker", "p50_ms": 3.0, "p99_ms": 9.0});
        v.critical_path.stages = vec![serde_json::from_value(stage).unwrap()];
        v.confidence.repetitions = (placements.iter().enumerate())
            .map(|(i, p)| Repetition {
                round: i as u32 + 1,
                measures: [("placements_per_s".to_string(), *p)].into(),
                valid: true,
            })
            .collect();
        RunSummary::new(&scenario, &[v], 1, None, None, None)
    }

    #[test]
    fn a_row_per_repetition_keyed_by_scenario_variant_start_and_round() {
        let s = summary_of("abc", 1000.5, &[10.0, 11.0]);
        let rows = rows(&s, Path::new("runs/a")).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].key, "default/default/1000.500000/1");
        assert_eq!(rows[1].key, "default/default/1000.500000/2");
        assert_eq!(rows[1].measures["placements_per_s"], 11.0);
        assert_eq!(rows[0].stages[0].p99_ms, 9.0);
        assert_eq!(rows[0].commit, "abc");
        assert!(rows[0].valid);
    }

    #[test]
    fn a_variant_without_a_build_or_a_start_is_refused_naming_the_file() {
        let mut s = summary_of("abc", 1000.0, &[10.0]);
        s.variants[0].build = Builds::default();
        s.build = Builds::default();
        let e = rows(&s, Path::new("runs/x/summary.json")).unwrap_err();
        assert!(e.to_string().contains("runs/x/summary.json"), "{e}");
        assert!(e.to_string().contains("no build stamp"), "{e}");
        let mut s = summary_of("abc", 0.0, &[10.0]);
        s.variants[0].started_unix = 0.0;
        assert!(rows(&s, Path::new("s.json"))
            .unwrap_err()
            .to_string()
            .contains("no start"));
    }

    #[test]
    fn this_machine_is_the_same_machine_twice() {
        let (a, b) = (this_machine(), this_machine());
        assert_eq!(a, b);
        assert!(a.cores >= 1 && a.memory_mib > 0 && a.fingerprint.len() == 16);
    }
}
