//! Blocking-query delivery latency by source, from the servers'
//! `stampede_blocking_query_delivery_seconds` histograms: how long after the
//! apply of a write each kind of watcher got its answer during the run.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::sampler::{label, Series, DELIVERY_BUCKETS as METRIC};

/// One source's answers to parked queries during the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Delivery {
    pub answers: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// Every source with answers, its buckets added up over the servers (each
/// answers its own queries).
pub fn delivery(servers: &[&Series]) -> BTreeMap<String, Delivery> {
    // source → upper bound → answers at or below it.
    let mut buckets: BTreeMap<String, BTreeMap<u64, f64>> = BTreeMap::new();
    for s in servers {
        for name in s.names_of(METRIC) {
            let (Some(source), Some(le)) = (label(&name, "source"), label(&name, "le")) else {
                continue;
            };
            let le = le.parse::<f64>().unwrap_or(f64::INFINITY);
            *buckets
                .entry(source.to_string())
                .or_default()
                .entry(le.to_bits())
                .or_default() += s.delta(&name).max(0.0);
        }
    }
    buckets
        .into_iter()
        .filter_map(|(source, by_le)| {
            let mut cumulative: Vec<(f64, f64)> = by_le
                .into_iter()
                .map(|(b, n)| (f64::from_bits(b), n))
                .collect();
            cumulative.sort_by(|a, b| a.0.total_cmp(&b.0));
            let answers = cumulative.last()?.1;
            (answers >= 1.0).then(|| {
                let q = |q| quantile(&cumulative, q) * 1000.0;
                let d = Delivery {
                    answers: answers as u64,
                    p50_ms: q(0.5),
                    p99_ms: q(0.99),
                };
                (source, d)
            })
        })
        .collect()
}

/// The `q` quantile of cumulative buckets `(upper bound, count)`, linear
/// within the bucket it falls in, as Prometheus's `histogram_quantile`;
/// in the open last bucket, the last finite bound.
fn quantile(cumulative: &[(f64, f64)], q: f64) -> f64 {
    let total = cumulative.last().map_or(0.0, |b| b.1);
    let rank = q * total;
    let mut lower = (0.0, 0.0);
    for &(le, n) in cumulative {
        if n >= rank {
            if le.is_infinite() {
                return lower.0;
            }
            let within = n - lower.1;
            let share = if within > 0.0 {
                (rank - lower.1) / within
            } else {
                1.0
            };
            return lower.0 + (le - lower.0) * share;
        }
        lower = (le, n);
    }
    lower.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::{Point, Target};

    fn server(counts: &[(&str, &str, f64)]) -> Series {
        let values = |scale: f64| {
            counts
                .iter()
                .map(|(source, le, n)| {
                    let name = format!("{METRIC}{{le=\"{le}\",source=\"{source}\"}}");
                    (name, n * scale)
                })
                .collect()
        };
        Series {
            target: Target {
                name: "server-1".into(),
                url: String::new(),
                binary: None,
            },
            points: vec![
                Point {
                    t: 0.0,
                    values: values(0.0),
                },
                Point {
                    t: 1.0,
                    values: values(1.0),
                },
            ],
            lost_at: None,
            last_text: None,
        }
    }

    #[test]
    fn sources_add_up_over_servers_and_quantiles_interpolate_within_buckets() {
        let a = server(&[
            ("loadgen", "0.001", 50.0),
            ("loadgen", "0.002", 90.0),
            ("loadgen", "+Inf", 100.0),
            ("cli", "0.001", 0.0),
            ("cli", "+Inf", 0.0),
        ]);
        let b = server(&[
            ("loadgen", "0.001", 50.0),
            ("loadgen", "0.002", 100.0),
            ("loadgen", "+Inf", 100.0),
        ]);
        let d = delivery(&[&a, &b]);
        assert_eq!(
            d.keys().collect::<Vec<_>>(),
            ["loadgen"],
            "no answers, no entry"
        );
        let l = &d["loadgen"];
        assert_eq!(l.answers, 200);
        // 100 of 200 at or below 1 ms: the median is 1 ms.
        assert!((l.p50_ms - 1.0).abs() < 1e-9, "{l:?}");
        // The 198th answer: in the open bucket past 2 ms, reported as 2 ms.
        assert!((l.p99_ms - 2.0).abs() < 1e-9, "{l:?}");
    }
}
