//! loadgen's own `/metrics`: what the stream submitted and how long jobs took,
//! so a dashboard can draw placement and time-to-running percentiles beside
//! the cluster's cost, with the scenario's SLO thresholds as lines.
//!
//! The run's numbers of record are the HdrHistograms in `stream`; these
//! Prometheus histograms are coarser (fixed buckets) and exist for live views.

use std::net::SocketAddr;

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

use crate::scenario::Slo;

/// Latency buckets in seconds, from a fast placement to a stalled rollout.
const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
];

/// Cheap to clone: every field is a handle to the same metric.
#[derive(Clone)]
pub struct LoadMetrics {
    registry: Registry,
    submissions: IntCounterVec,
    pub late: IntCounter,
    /// Jobs submitted and not yet followed to running (or given up on).
    pub following: IntGauge,
    pub placement: Histogram,
    pub time_to_running: Histogram,
    slo: prometheus::GaugeVec,
}

/// How a scheduled submission ended.
#[derive(Debug, Clone, Copy)]
pub enum Outcome {
    Accepted,
    Failed,
    Dropped,
}

impl Default for LoadMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl LoadMetrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let submissions = IntCounterVec::new(
            Opts::new(
                "stampede_loadgen_submissions_total",
                "Scheduled job submissions by outcome: accepted by the cluster, failed, or dropped because too many were in flight.",
            ),
            &["outcome"],
        )
        .expect("valid metric");
        for o in [Outcome::Accepted, Outcome::Failed, Outcome::Dropped] {
            submissions.with_label_values(&[o.label()]);
        }
        let late = IntCounter::new(
            "stampede_loadgen_submissions_late_total",
            "Submissions that started more than 100 ms after their scheduled time.",
        )
        .expect("valid metric");
        let following = IntGauge::new(
            "stampede_loadgen_following",
            "Jobs submitted and still followed to placement or to running.",
        )
        .expect("valid metric");
        let latency = |name: &str, help: &str| {
            Histogram::with_opts(HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec()))
                .expect("valid metric")
        };
        let placement = latency(
            "stampede_loadgen_placement_seconds",
            "From a submission's scheduled time to its evaluation completing.",
        );
        let time_to_running = latency(
            "stampede_loadgen_time_to_running_seconds",
            "From a submission's scheduled time to all its allocations running, as the nodes report.",
        );
        let slo = prometheus::GaugeVec::new(
            Opts::new(
                "stampede_loadgen_slo_seconds",
                "The scenario's SLO thresholds, by measure; a run that breaches one fails.",
            ),
            &["measure"],
        )
        .expect("valid metric");
        for c in [
            Box::new(submissions.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(late.clone()),
            Box::new(following.clone()),
            Box::new(placement.clone()),
            Box::new(time_to_running.clone()),
            Box::new(slo.clone()),
            stampede_proto::process_collector(""),
        ] {
            registry.register(c).expect("metric names are unique");
        }
        stampede_proto::build::register(&registry, stampede_proto::this_build!());
        Self {
            registry,
            submissions,
            late,
            following,
            placement,
            time_to_running,
            slo,
        }
    }

    pub fn submitted(&self, outcome: Outcome) {
        self.submissions.with_label_values(&[outcome.label()]).inc();
    }

    pub fn submissions(&self, outcome: Outcome) -> u64 {
        self.submissions.with_label_values(&[outcome.label()]).get()
    }

    /// Publishes the scenario's thresholds (those it sets).
    pub fn set_slo(&self, slo: &Slo) {
        for (measure, ms) in [
            ("placement_p99", slo.p99_placement_ms),
            ("time_to_running_p99", slo.p99_running_ms),
        ] {
            if let Some(ms) = ms {
                self.slo.with_label_values(&[measure]).set(ms / 1000.0);
            }
        }
    }

    pub fn render(&self) -> String {
        stampede_proto::render_metrics(&self.registry)
    }

    /// Serves `/metrics` on `addr` until the process ends.
    pub async fn serve(&self, addr: SocketAddr) -> std::io::Result<SocketAddr> {
        stampede_proto::serve_metrics(addr, self.registry.clone()).await
    }
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Accepted => "accepted",
            Outcome::Failed => "failed",
            Outcome::Dropped => "dropped",
        }
    }
}
