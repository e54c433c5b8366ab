//! What the servers' memory means: its cost per row of state (and per node
//! and per allocation), and a leak check that is judged only when the
//! state's rows were flat. A run whose state grows (every run that places
//! more than garbage collection removes) grows its memory with its data: a
//! slope there is no leak, and the check says so instead of judging it.

use serde::{Deserialize, Serialize};
use stampede_proto::metric_names;

use crate::sampler::{label, Series, RSS};

const ROWS: &str = metric_names::STATE_OBJECTS;

/// The state's rows count as flat when they moved less than this over the
/// second half of the run.
pub const FLAT_ROWS: f64 = 0.05;
/// Memory is flat when it grew no faster than this, MiB per minute, over
/// the second half of a run whose rows were flat.
pub const FLAT_MIB_PER_MIN: f64 = 0.5;

/// The servers' memory, per row and over time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Memory {
    /// The fullest server's resident memory at the end per row of its
    /// state (every table), per node and per allocation, bytes.
    pub server_rss_bytes_per_row: Option<f64>,
    pub server_rss_bytes_per_node: Option<f64>,
    pub server_rss_bytes_per_alloc: Option<f64>,
    /// How much that server's rows grew over the second half (0.1 is 10%).
    pub state_growth_2nd_half: Option<f64>,
    pub leak_check: LeakCheck,
}

/// The leak check's verdict and why.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct LeakCheck {
    pub verdict: Leak,
    pub why: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub enum Leak {
    /// Rows flat and memory flat.
    Flat,
    /// Rows flat but memory grew: a leak, or a cost nothing explains.
    Grows,
    /// The rows grew (or were not sampled): the slope measures data.
    #[default]
    NotJudged,
}

/// The servers' memory from their samples; `slope` is the steepest
/// server's RSS slope over the second half, MiB per minute.
pub fn memory(servers: &[&Series], slope: Option<f64>) -> Memory {
    let Some(s) = servers
        .iter()
        .max_by_key(|s| rows_at(s, s.points.len().saturating_sub(1)) as u64)
    else {
        return Memory::default();
    };
    let Some(end) = s.points.last() else {
        return Memory::default();
    };
    let rows = rows_at(s, s.points.len() - 1);
    let rss = end.values.get(RSS).copied();
    let table = |name: &str| -> f64 {
        let key = s
            .names_of(ROWS)
            .into_iter()
            .find(|n| label(n, "table") == Some(name));
        key.and_then(|k| end.values.get(&k).copied()).unwrap_or(0.0)
    };
    let per = |n: f64| rss.filter(|_| n > 0.0).map(|b| b / n);
    let mid = s
        .points
        .iter()
        .position(|p| p.t >= end.t / 2.0)
        .unwrap_or(0);
    let at_mid = rows_at(s, mid);
    let growth = (at_mid > 0.0).then(|| rows / at_mid - 1.0);
    Memory {
        server_rss_bytes_per_row: per(rows),
        server_rss_bytes_per_node: per(table("nodes")),
        server_rss_bytes_per_alloc: per(table("allocs")),
        state_growth_2nd_half: growth,
        leak_check: leak_check(growth, at_mid, rows, slope, per(rows)),
    }
}

fn leak_check(
    growth: Option<f64>,
    from: f64,
    to: f64,
    slope: Option<f64>,
    per_row: Option<f64>,
) -> LeakCheck {
    let (verdict, why) = match (growth, slope) {
        (Some(g), _) if g.abs() > FLAT_ROWS => (
            Leak::NotJudged,
            format!(
                "the state's rows went from {from:.0} to {to:.0} ({:+.0}%) over the second half: memory follows the data ({} bytes per row), so no leak is judged",
                g * 100.0,
                per_row.map_or("-".into(), |b| format!("{b:.0}"))
            ),
        ),
        (Some(_), Some(m)) if m <= FLAT_MIB_PER_MIN => (
            Leak::Flat,
            format!("with the state's rows flat, the servers' memory moved {m:.2} MiB/min over the second half (flat: at most {FLAT_MIB_PER_MIN})"),
        ),
        (Some(_), Some(m)) => (
            Leak::Grows,
            format!("the servers' memory grew {m:.2} MiB/min over the second half while the state's rows stayed flat: a leak, or a cost nothing in the state explains"),
        ),
        _ => (Leak::NotJudged, "too few samples of the state or the memory to judge".into()),
    };
    LeakCheck { verdict, why }
}

/// The rows of every table a server held at its `i`th sample.
fn rows_at(s: &Series, i: usize) -> f64 {
    let Some(p) = s.points.get(i) else { return 0.0 };
    p.values
        .iter()
        .filter(|(k, _)| k.split('{').next() == Some(ROWS))
        .map(|(_, v)| v)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::{Point, Target};

    const MIB: f64 = 1048576.0;

    /// A server sampled each minute for ten minutes: its rows and RSS at each.
    fn server(rows: impl Fn(f64) -> f64, rss_mib: impl Fn(f64) -> f64) -> Series {
        let points = (0..=10)
            .map(|m| {
                let t = m as f64 * 60.0;
                Point {
                    t,
                    values: [
                        (format!("{ROWS}{{table=\"allocs\"}}"), rows(t) * 0.75),
                        (format!("{ROWS}{{table=\"nodes\"}}"), rows(t) * 0.25),
                        (RSS.to_string(), rss_mib(t) * MIB),
                    ]
                    .into(),
                }
            })
            .collect();
        Series {
            target: Target {
                name: "server-1".into(),
                url: String::new(),
                binary: None,
            },
            points,
            lost_at: None,
            last_text: None,
        }
    }

    #[test]
    fn growing_state_is_not_judged_and_says_why() {
        let s = server(|t| 1000.0 + 10.0 * t, |t| 100.0 + t / 60.0 * 8.0);
        let m = memory(&[&s], Some(8.0));
        assert_eq!(m.leak_check.verdict, Leak::NotJudged);
        assert!(
            m.leak_check.why.contains("memory follows the data"),
            "{}",
            m.leak_check.why
        );
        // 7,000 rows at the end, 180 MiB.
        let per_row = 180.0 * MIB / 7000.0;
        assert!((m.server_rss_bytes_per_row.unwrap() - per_row).abs() < 1e-6);
        assert!((m.server_rss_bytes_per_alloc.unwrap() - per_row / 0.75).abs() < 1e-6);
    }

    #[test]
    fn flat_state_with_flat_memory_passes_and_with_growing_memory_is_named() {
        let s = server(|_| 5000.0, |_| 200.0);
        assert_eq!(memory(&[&s], Some(0.1)).leak_check.verdict, Leak::Flat);
        let m = memory(&[&s], Some(1.12));
        assert_eq!(m.leak_check.verdict, Leak::Grows);
        assert!(
            m.leak_check.why.contains("1.12 MiB/min"),
            "{}",
            m.leak_check.why
        );
    }

    #[test]
    fn no_samples_no_verdict() {
        assert_eq!(memory(&[], None), Memory::default());
    }
}
