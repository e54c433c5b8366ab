//! nodesim's Prometheus metrics: every label has a small fixed set of values,
//! so a fleet of 100,000 nodes is still a few dozen series.

use std::net::SocketAddr;

use prometheus::{
    Gauge, Histogram, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Registry,
};
use stampede_proto::metric_defs::{
    gauge, histogram, histogram_vec, int_counter, int_counter_vec, int_gauge_vec, job_stage_seconds,
};
use stampede_proto::metric_names;
use stampede_proto::{AllocClientStatus, JobStage};

/// A node's connection state, the `state` label of `stampede_nodesim_nodes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    Registering,
    Ready,
    /// Its last heartbeat failed; it keeps trying.
    Disconnected,
}

impl NodeState {
    pub const ALL: [NodeState; 3] = [Self::Registering, Self::Ready, Self::Disconnected];

    pub fn label(self) -> &'static str {
        match self {
            Self::Registering => "registering",
            Self::Ready => "ready",
            Self::Disconnected => "disconnected",
        }
    }
}

/// What went wrong, the `kind` label of `stampede_nodesim_errors_total`.
pub const ERROR_KINDS: &[&str] = &[
    "register",
    "heartbeat",
    "allocs_query",
    "get_allocs",
    "update_alloc",
];

/// The `source` nodes give their allocation queries, as the servers count them.
pub const SOURCE: stampede_proto::QuerySource = stampede_proto::QuerySource::ClientAllocs;

/// Why an update RPC was sent: `urgent` if it carried a `ClientStatus` change.
pub const PRIORITIES: &[&str] = &["urgent", "typical"];

#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    pub nodes: IntGaugeVec,
    pub allocs: IntGaugeVec,
    pub registrations: IntCounter,
    pub runners_started: IntCounter,
    pub update_rpcs: IntCounterVec,
    pub updates_per_rpc: Histogram,
    pub heartbeat_seconds: Histogram,
    /// The TTL the servers last gave a node: the fleet's heartbeat rate
    /// is planned as nodes / TTL.
    pub heartbeat_ttl_seconds: Gauge,
    pub query_seconds: HistogramVec,
    pub errors: IntCounterVec,
    /// `runner_start` and `report_running` of jobs' paths
    /// (`stampede_job_stage_seconds`, shared with the servers' stages).
    pub stages: HistogramVec,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let r = Registry::new();
        let states: Vec<&str> = NodeState::ALL.iter().map(|s| s.label()).collect();
        let statuses = [
            AllocClientStatus::Pending,
            AllocClientStatus::Running,
            AllocClientStatus::Complete,
            AllocClientStatus::Failed,
        ]
        .map(|s| s.label());
        let m = Self {
            nodes: int_gauge_vec(
                &r,
                metric_names::NODESIM_NODES,
                "Simulated nodes by connection state.",
                "state",
                &states,
            ),
            allocs: int_gauge_vec(
                &r,
                metric_names::NODESIM_ALLOCS,
                "Allocations on simulated nodes by the client status their runner last reported.",
                "client_status",
                &statuses,
            ),
            registrations: int_counter(
                &r,
                "stampede_nodesim_registrations_total",
                "Node.Register calls that succeeded (a node re-registers if the cluster lost it).",
            ),
            runners_started: int_counter(
                &r,
                "stampede_nodesim_runners_started_total",
                "Allocation runners built through the factory and started.",
            ),
            update_rpcs: int_counter_vec(
                &r,
                metric_names::NODESIM_UPDATE_RPCS_TOTAL,
                "Node.UpdateAlloc calls; urgent ones carried a ClientStatus change.",
                "priority",
                PRIORITIES,
            ),
            updates_per_rpc: histogram(
                &r,
                "stampede_nodesim_alloc_updates_per_rpc",
                "Allocation updates carried by one Node.UpdateAlloc call.",
                // 1 to 256.
                (1.0, 2.0, 9),
            ),
            heartbeat_seconds: histogram(
                &r,
                metric_names::NODESIM_HEARTBEAT_SECONDS,
                "Round trip of a successful Node.UpdateStatus heartbeat.",
                (0.0005, 2.0, 16),
            ),
            heartbeat_ttl_seconds: gauge(
                &r,
                metric_names::NODESIM_HEARTBEAT_TTL_SECONDS,
                "The heartbeat TTL the servers last gave a node.",
            ),
            query_seconds: histogram_vec(
                &r,
                "stampede_nodesim_blocking_query_seconds",
                "Round trip of a node's allocation query, by how it ended: \
                 changed (new allocation data), unchanged (the wait ran out) or error.",
                "outcome",
                (0.001, 4.0, 10),
            ),
            errors: int_counter_vec(
                &r,
                metric_names::NODESIM_ERRORS_TOTAL,
                "Failed calls by kind.",
                "kind",
                ERROR_KINDS,
            ),
            stages: job_stage_seconds(&r, &JobStage::timed_in(stampede_proto::Binary::Nodesim)),
            registry: r,
        };
        // Every outcome shows from the start, so dashboards see zeros, not gaps.
        for o in ["changed", "unchanged", "error"] {
            m.query_seconds.with_label_values(&[o]);
        }
        stampede_proto::build::register(&m.registry, stampede_proto::this_build!());
        #[cfg(target_os = "linux")]
        m.registry
            .register(stampede_proto::process_collector(""))
            .expect("the process collector is registered once");
        m
    }

    /// Observes `stage` as ending now, having started at `from_us` (unix µs).
    pub fn stage_since(&self, stage: JobStage, from_us: u64) {
        let now = stampede_proto::unix_us();
        if from_us != 0 && now >= from_us {
            self.stages
                .with_label_values(&[stage.label()])
                .observe((now - from_us) as f64 / 1e6);
        }
    }

    pub fn error(&self, kind: &'static str) {
        self.errors.with_label_values(&[kind]).inc();
    }

    /// Counts a new allocation under the client status the server gave it.
    pub fn track_alloc(&self, status: AllocClientStatus) {
        self.allocs.with_label_values(&[status.label()]).inc();
    }

    pub fn untrack_alloc(&self, status: AllocClientStatus) {
        self.allocs.with_label_values(&[status.label()]).dec();
    }

    /// Moves the count of an allocation from one status to another.
    pub fn move_alloc(&self, from: AllocClientStatus, to: AllocClientStatus) {
        if from != to {
            self.untrack_alloc(from);
            self.track_alloc(to);
        }
    }

    pub fn set_node_state(&self, from: Option<NodeState>, to: NodeState) {
        if from == Some(to) {
            return;
        }
        if let Some(from) = from {
            self.nodes.with_label_values(&[from.label()]).dec();
        }
        self.nodes.with_label_values(&[to.label()]).inc();
    }

    pub fn render(&self) -> String {
        stampede_proto::render_metrics(&self.registry)
    }

    /// Serves `/metrics` on `addr` until the process ends.
    pub async fn serve(self, addr: SocketAddr) -> std::io::Result<SocketAddr> {
        stampede_proto::serve_metrics(addr, self.registry).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_nodesim_name_loadgen_reads_is_defined_here() {
        let text = Metrics::new().render();
        let ours = metric_names::ALL
            .iter()
            .filter(|n| n.starts_with("stampede_nodesim_"));
        for name in ours {
            assert!(text.contains(&format!("# TYPE {name} ")), "{name}");
        }
    }
}
