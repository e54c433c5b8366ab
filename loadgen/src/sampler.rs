//! Samples every process's `/metrics` through a run: the series a capacity
//! report plots, kept as time series per process.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use stampede_proto::{metric_names, Binary};
use tokio::sync::watch;
use tokio::time::Instant;

/// The servers' blocking-query delivery latency, by source (the summary's
/// `blocking_delivery_ms`).
pub const DELIVERY_BUCKETS: &str = metric_names::BLOCKING_QUERY_DELIVERY_SECONDS_BUCKET;

/// nodesim's heartbeats: the count of its round-trip histogram (the
/// summary's `fleet.heartbeats_per_second`).
pub const NODESIM_HEARTBEATS: &str = metric_names::NODESIM_HEARTBEAT_SECONDS_COUNT;
/// The heartbeat TTL the servers last gave nodesim's nodes (`fleet.ttl_s`).
pub const NODESIM_TTL: &str = metric_names::NODESIM_HEARTBEAT_TTL_SECONDS;

/// Series a report uses; everything else on `/metrics` is left out.
const KEEP: &[&str] = &[
    stampede_proto::build::BUILD_INFO_METRIC,
    metric_names::RAFT_ENTRIES_TOTAL,
    metric_names::RAFT_ENTRY_BYTES_TOTAL,
    metric_names::RAFT_IS_LEADER,
    metric_names::RAFT_TERM,
    metric_names::RAFT_ELECTIONS_STARTED_TOTAL,
    metric_names::RAFT_ELECTION_STARTED_TERM,
    metric_names::NODES,
    NODESIM_HEARTBEATS,
    NODESIM_TTL,
    metric_names::RAFT_APPLIED_INDEX,
    metric_names::RAFT_SNAPSHOT_BYTES,
    metric_names::RAFT_SNAPSHOT_BUILD_SECONDS_SUM,
    metric_names::RAFT_SNAPSHOT_BUILD_SECONDS_COUNT,
    metric_names::BLOCKING_QUERIES_STARTED_TOTAL,
    metric_names::BLOCKING_QUERIES_INFLIGHT,
    DELIVERY_BUCKETS,
    metric_names::BROKER_READY,
    metric_names::BROKER_UNACKED,
    metric_names::BLOCKED_EVALS,
    metric_names::BROKER_CANCELABLE,
    metric_names::EVALS_CANCELLED_TOTAL,
    metric_names::DEPLOYMENT_WATCHERS,
    metric_names::DEPLOYMENT_WATCHER_LIMITER_WAIT_SECONDS_SUM,
    metric_names::DEPLOYMENT_WATCHER_LIMITER_WAIT_SECONDS_COUNT,
    metric_names::NODESIM_UPDATE_RPCS_TOTAL,
    metric_names::NODESIM_NODES,
    metric_names::NODESIM_ALLOCS,
    metric_names::NODESIM_ERRORS_TOTAL,
    metric_names::WORKER_NACKS_TOTAL,
    metric_names::STATE_OBJECTS,
    metric_names::GC_COLLECTED_TOTAL,
    metric_names::BLOCKED_EVALS_UNBLOCKED_TOTAL,
    metric_names::BROKER_NACK_DELAYS_TOTAL,
    "process_cpu_seconds_total",
    RSS,
];

/// Every process's resident memory, bytes (the standard process metric).
pub const RSS: &str = "process_resident_memory_bytes";

/// The name loadgen's own series go by (in samples and `cpu_cores`).
pub const LOADGEN_TARGET: &str = "loadgen";

/// A process to sample.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Target {
    /// `server-1`, `nodesim`, `loadgen`, ...
    pub name: String,
    pub url: String,
    /// Which binary it runs: the run knows it (it started the process, an
    /// inventory says, or the process's metrics said when the run began).
    /// `None` only in samples from before the tag, whose binary their
    /// metrics tell ([`Series::binary`]).
    #[serde(
        default,
        with = "binary_label",
        skip_serializing_if = "Option::is_none"
    )]
    pub binary: Option<Binary>,
}

impl Target {
    /// Server `id` of a cluster: `server-ID`.
    pub fn server(id: impl std::fmt::Display, url: impl Into<String>) -> Self {
        Self::of(Binary::Cluster, format!("server-{id}"), url)
    }

    /// A nodesim process: `nodesim` alone, `nodesim-K` the K-th of several.
    pub fn nodesim(shard: Option<usize>, url: impl Into<String>) -> Self {
        let name = shard.map_or_else(|| "nodesim".to_string(), |k| format!("nodesim-{k}"));
        Self::of(Binary::Nodesim, name, url)
    }

    /// loadgen itself.
    pub fn loadgen(url: impl Into<String>) -> Self {
        Self::of(Binary::Loadgen, LOADGEN_TARGET.to_string(), url)
    }

    fn of(binary: Binary, name: String, url: impl Into<String>) -> Self {
        Self {
            name,
            url: url.into(),
            binary: Some(binary),
        }
    }
}

/// A [`Binary`] in samples as its name.
mod binary_label {
    use serde::{Deserialize, Deserializer, Serializer};
    use stampede_proto::Binary;

    pub fn serialize<S: Serializer>(b: &Option<Binary>, s: S) -> Result<S::Ok, S::Error> {
        match b {
            Some(b) => s.serialize_str(b.label()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Binary>, D::Error> {
        let label: Option<String> = Option::deserialize(d)?;
        Ok(label.as_deref().and_then(Binary::from_label))
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Point {
    /// Seconds since the run started.
    pub t: f64,
    pub values: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Series {
    pub target: Target,
    pub points: Vec<Point>,
    /// When the process stopped answering, if it did and did not answer
    /// again (a server a fault step killed or paused for a while is back).
    pub lost_at: Option<f64>,
    /// The last `/metrics` text read, kept as the process served it.
    #[serde(skip)]
    pub last_text: Option<String>,
}

impl Series {
    pub fn first(&self, name: &str) -> f64 {
        self.points
            .first()
            .and_then(|p| p.values.get(name))
            .copied()
            .unwrap_or(0.0)
    }

    /// The highest value of `name` in any sample, if one has it.
    pub fn peak(&self, name: &str) -> Option<f64> {
        self.points
            .iter()
            .filter_map(|p| p.values.get(name).copied())
            .reduce(f64::max)
    }

    pub fn last(&self, name: &str) -> f64 {
        self.points
            .last()
            .and_then(|p| p.values.get(name))
            .copied()
            .unwrap_or(0.0)
    }

    /// The counter's growth over the run.
    pub fn delta(&self, name: &str) -> f64 {
        self.last(name) - self.first(name)
    }

    /// The counter's growth over the run, counting across restarts: where it
    /// falls (a server killed and started again counts from zero), the
    /// growth goes on from the new value, as Prometheus' `increase` does.
    pub fn increase(&self, name: &str) -> f64 {
        let mut values = self.points.iter().filter_map(|p| p.values.get(name));
        let Some(mut prev) = values.next().copied() else {
            return 0.0;
        };
        let mut sum = 0.0;
        for &v in values {
            sum += if v >= prev { v - prev } else { v };
            prev = v;
        }
        sum
    }

    /// How fast gauge `name` moved from `from` seconds on, per minute: the
    /// least-squares slope of its samples; `None` with fewer than two.
    pub fn slope_per_minute(&self, name: &str, from: f64) -> Option<f64> {
        let xy: Vec<(f64, f64)> = self
            .points
            .iter()
            .filter(|p| p.t >= from)
            .filter_map(|p| Some((p.t / 60.0, *p.values.get(name)?)))
            .collect();
        let n = xy.len() as f64;
        if xy.len() < 2 {
            return None;
        }
        let (mx, my) = (
            xy.iter().map(|p| p.0).sum::<f64>() / n,
            xy.iter().map(|p| p.1).sum::<f64>() / n,
        );
        let sxx: f64 = xy.iter().map(|p| (p.0 - mx).powi(2)).sum();
        let sxy: f64 = xy.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        (sxx > 0.0).then(|| sxy / sxx)
    }

    /// Every series name seen whose name (before labels) is `metric`.
    /// Which binary this process runs: its target's tag, or for samples
    /// from before the tag, what it served: the servers' raft counters, or
    /// nodesim's nodes. The one answer to "which process is this".
    pub fn binary(&self) -> Option<Binary> {
        self.target.binary.or_else(|| {
            let served = |metric| !self.names_of(metric).is_empty();
            if served(metric_names::RAFT_TERM) || served(metric_names::RAFT_ENTRIES_TOTAL) {
                Some(Binary::Cluster)
            } else if served(metric_names::NODESIM_NODES) {
                Some(Binary::Nodesim)
            } else if self.target.name == LOADGEN_TARGET {
                Some(Binary::Loadgen)
            } else {
                None
            }
        })
    }

    /// Whether this process runs `binary`.
    pub fn is(&self, binary: Binary) -> bool {
        self.binary() == Some(binary)
    }

    pub fn names_of(&self, metric: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .points
            .iter()
            .flat_map(|p| p.values.keys())
            .filter(|k| k.split('{').next() == Some(metric))
            .cloned()
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

/// The value of label `label` in a series name such as `x{type="a"}`.
pub fn label<'a>(series: &'a str, label: &str) -> Option<&'a str> {
    let start = series.find(&format!("{label}=\""))? + label.len() + 2;
    let end = series[start..].find('"')? + start;
    Some(&series[start..end])
}

/// Keeps the interesting series of Prometheus text.
pub fn parse(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            // Servers name their process metrics stampede_process_*, nodesim process_*.
            let name = name
                .strip_prefix("stampede_")
                .filter(|n| n.starts_with("process_"))
                .unwrap_or(name);
            let metric = name.split('{').next()?;
            KEEP.contains(&metric)
                .then(|| value.parse().ok().map(|v| (name.to_string(), v)))
                .flatten()
        })
        .collect()
}

/// Samples `targets` every `every` until `stop` turns true; then once more.
/// `http` presents the cluster's certificate to servers with TLS.
pub async fn run(
    http: reqwest::Client,
    targets: Vec<Target>,
    every: Duration,
    start: Instant,
    mut stop: watch::Receiver<bool>,
) -> Vec<Series> {
    let mut series: Vec<Series> = targets
        .into_iter()
        .map(|target| Series {
            target,
            points: Vec::new(),
            lost_at: None,
            last_text: None,
        })
        .collect();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let last = tokio::select! {
            _ = tick.tick() => false,
            _ = stop.wait_for(|s| *s) => true,
        };
        let t = start.elapsed().as_secs_f64();
        let reads = series.iter().map(|s| {
            let http = http.clone();
            let url = s.target.url.clone();
            async move { http.get(&url).send().await.ok()?.text().await.ok() }
        });
        let values = futures::future::join_all(reads).await;
        for (s, v) in series.iter_mut().zip(values) {
            match v {
                Some(text) => {
                    s.lost_at = None;
                    s.points.push(Point {
                        t,
                        values: parse(&text),
                    });
                    s.last_text = Some(text);
                }
                None if s.lost_at.is_none() && !last => s.lost_at = Some(t),
                None => {}
            }
        }
        if last {
            return series;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slope_is_fitted_over_the_samples_from_a_time_on() {
        // Flat for a minute, then 2 units a second (120 a minute), with noise.
        let points = (0..240)
            .map(|i| {
                let t = i as f64 * 0.5;
                let v = if t < 60.0 {
                    100.0
                } else {
                    100.0 + 2.0 * (t - 60.0)
                };
                let noise = if i % 2 == 0 { 0.5 } else { -0.5 };
                Point {
                    t,
                    values: [("rss".to_string(), v + noise)].into(),
                }
            })
            .collect();
        let s = Series {
            target: Target {
                name: "server-1".into(),
                url: String::new(),
                binary: None,
            },
            points,
            lost_at: None,
            last_text: None,
        };
        let late = s.slope_per_minute("rss", 60.0).unwrap();
        assert!((late - 120.0).abs() < 1.0, "{late}");
        let all = s.slope_per_minute("rss", 0.0).unwrap();
        assert!(all > 10.0 && all < 120.0, "{all}");
        assert_eq!(s.slope_per_minute("rss", 1e9), None, "no samples");
        assert_eq!(s.slope_per_minute("other", 0.0), None, "no such gauge");
    }

    #[test]
    fn a_counters_increase_goes_on_across_a_restart() {
        let s = Series {
            target: Target {
                name: "server-1".into(),
                url: String::new(),
                binary: None,
            },
            // 2 s of CPU, a restart (counting from 0 again), then 1.5 s more.
            points: [10.0, 11.0, 12.0, 0.5, 2.0]
                .iter()
                .enumerate()
                .map(|(i, v)| Point {
                    t: i as f64,
                    values: [("cpu".to_string(), *v)].into(),
                })
                .collect(),
            lost_at: None,
            last_text: None,
        };
        assert_eq!(s.increase("cpu"), 4.0);
        assert_eq!(s.delta("cpu"), -8.0, "what a plain difference says");
        assert_eq!(s.increase("absent"), 0.0);
    }

    #[test]
    fn keeps_the_series_a_report_uses() {
        let text = "# HELP x\nstampede_raft_entries_total{type=\"plan_apply\"} 7\nother_total 3\nprocess_cpu_seconds_total 1.5\nstampede_process_resident_memory_bytes 9\n";
        let v = parse(text);
        assert_eq!(v.len(), 3);
        assert_eq!(
            v["process_resident_memory_bytes"], 9.0,
            "one name for every process"
        );
        assert_eq!(v["stampede_raft_entries_total{type=\"plan_apply\"}"], 7.0);
        assert_eq!(
            label("stampede_raft_entries_total{type=\"plan_apply\"}", "type"),
            Some("plan_apply")
        );
        assert_eq!(
            label("x{a=\"1\",source=\"worker\"}", "source"),
            Some("worker")
        );
    }

    #[test]
    fn a_series_says_which_binary_by_its_tag_or_for_an_untagged_one_by_what_it_served() {
        let series = |target: Target, metrics: &str| Series {
            target,
            points: vec![Point {
                t: 1.0,
                values: parse(metrics),
            }],
            lost_at: None,
            last_text: None,
        };
        // Tagged where the run made it, and named from the tag.
        let t = Target::server(2, "u");
        assert_eq!(
            (t.name.as_str(), t.binary),
            ("server-2", Some(Binary::Cluster))
        );
        assert_eq!(Target::nodesim(None, "u").name, "nodesim");
        assert_eq!(Target::nodesim(Some(1), "u").name, "nodesim-1");
        assert_eq!(Target::loadgen("u").binary, Some(Binary::Loadgen));
        // The tag wins over the name and the metrics.
        let untagged_target = || Target {
            name: "process-1".into(),
            url: "u".into(),
            binary: None,
        };
        let tagged = Target {
            binary: Some(Binary::Nodesim),
            ..untagged_target()
        };
        assert!(series(tagged, "stampede_raft_term 1\n").is(Binary::Nodesim));
        // Untagged (samples from before the tag): what it served.
        let untagged = |metrics: &str| series(untagged_target(), metrics).binary();
        assert_eq!(untagged("stampede_raft_term 1\n"), Some(Binary::Cluster));
        assert_eq!(
            untagged("stampede_nodesim_nodes{state=\"ready\"} 5\n"),
            Some(Binary::Nodesim)
        );
        assert_eq!(untagged("process_cpu_seconds_total 1\n"), None);
        // In samples.json the tag is the binary's name; older samples
        // without one still read.
        let json = serde_json::to_value(Target::server(1, "u")).unwrap();
        assert_eq!(json["binary"], "cluster");
        let old: Target = serde_json::from_str(r#"{"name":"server-1","url":"u"}"#).unwrap();
        assert_eq!(old.binary, None);
        let back: Target = serde_json::from_value(json).unwrap();
        assert_eq!(back.binary, Some(Binary::Cluster));
    }
}
