//! The names of the metrics that more than one crate uses: a server or
//! nodesim defines each (with [`crate::metric_defs`]) and loadgen samples,
//! sums, charts or audits it. A metric only its own crate reads keeps its
//! name where it is defined. The names are a contract with the dashboards
//! (`dashboards/*.json`) too: change one and they go blank.
//!
//! Where a reader needs a histogram's or summary's series, it has its own
//! constant (`_bucket`, `_sum`, `_count` after the histogram's name).

/// Declares each name, and each derived series of a histogram, once.
macro_rules! names {
    ($($(#[$doc:meta])* $id:ident = $name:literal $([$($series:ident = $suffix:literal),+])?;)+) => {$(
        $(#[$doc])*
        pub const $id: &str = $name;
        $($(
            #[doc = concat!("`", $name, $suffix, "`: a series of [`", stringify!($id), "`].")]
            pub const $series: &str = concat!($name, $suffix);
        )+)?
    )+};
}

// The servers' (`cluster serve`).
names! {
    /// Raft entries applied, by message `type`.
    RAFT_ENTRIES_TOTAL = "stampede_raft_entries_total";
    /// Raft entry bytes applied, by message `type`.
    RAFT_ENTRY_BYTES_TOTAL = "stampede_raft_entry_bytes_total";
    RAFT_IS_LEADER = "stampede_raft_is_leader";
    RAFT_TERM = "stampede_raft_term";
    RAFT_APPLIED_INDEX = "stampede_raft_applied_index";
    /// Elections this server started: its pre-vote was granted and it
    /// raised the term.
    RAFT_ELECTIONS_STARTED_TOTAL = "stampede_raft_elections_started_total";
    /// The term of the last election this server started; 0 if none.
    RAFT_ELECTION_STARTED_TERM = "stampede_raft_election_started_term";
    /// Bytes of the server's current raft snapshot (the latest built or
    /// installed).
    RAFT_SNAPSHOT_BYTES = "stampede_raft_snapshot_bytes";
    /// Time to build a snapshot from the state: encode it and write it to
    /// disk, synced.
    RAFT_SNAPSHOT_BUILD_SECONDS = "stampede_raft_snapshot_build_seconds"
        [
            RAFT_SNAPSHOT_BUILD_SECONDS_SUM = "_sum",
            RAFT_SNAPSHOT_BUILD_SECONDS_COUNT = "_count"
        ];
    /// Client nodes by `status`.
    NODES = "stampede_nodes";
    /// Rows of the state store by `table`.
    STATE_OBJECTS = "stampede_state_objects"
        [STATE_OBJECTS_ALLOCS = "{table=\"allocs\"}"];
    /// Snapshots this server installed from a leader.
    RAFT_SNAPSHOTS_INSTALLED_TOTAL = "stampede_raft_snapshots_installed_total";
    GC_COLLECTED_TOTAL = "stampede_gc_collected_total";
    BLOCKING_QUERIES_STARTED_TOTAL = "stampede_blocking_queries_started_total";
    BLOCKING_QUERIES_INFLIGHT = "stampede_blocking_queries_inflight";
    /// From a write's apply to the blocking query's answer, by `source`.
    BLOCKING_QUERY_DELIVERY_SECONDS = "stampede_blocking_query_delivery_seconds"
        [BLOCKING_QUERY_DELIVERY_SECONDS_BUCKET = "_bucket"];
    BROKER_READY = "stampede_broker_ready";
    BROKER_UNACKED = "stampede_broker_unacked";
    BROKER_WAITING_ON_JOB = "stampede_broker_waiting_on_job";
    BROKER_DELAYED = "stampede_broker_delayed";
    BROKER_CANCELABLE = "stampede_broker_cancelable";
    BROKER_NACK_DELAYS_TOTAL = "stampede_broker_nack_delays_total";
    EVALS_CANCELLED_TOTAL = "stampede_evals_cancelled_total";
    BLOCKED_EVALS = "stampede_blocked_evals";
    BLOCKED_EVALS_UNBLOCKED_TOTAL = "stampede_blocked_evals_unblocked_total";
    PLAN_QUEUE_DEPTH = "stampede_plan_queue_depth";
    WORKER_NACKS_TOTAL = "stampede_worker_nacks_total";
    DEPLOYMENT_WATCHERS = "stampede_deployment_watchers";
    DEPLOYMENT_WATCHER_LIMITER_WAIT_SECONDS = "stampede_deployment_watcher_limiter_wait_seconds"
        [
            DEPLOYMENT_WATCHER_LIMITER_WAIT_SECONDS_SUM = "_sum",
            DEPLOYMENT_WATCHER_LIMITER_WAIT_SECONDS_COUNT = "_count"
        ];
}

// nodesim's.
names! {
    /// Simulated nodes by `state`.
    NODESIM_NODES = "stampede_nodesim_nodes";
    /// Allocations by the client `status` last reported.
    NODESIM_ALLOCS = "stampede_nodesim_allocs";
    /// `Node.UpdateAlloc` calls by `priority`.
    NODESIM_UPDATE_RPCS_TOTAL = "stampede_nodesim_update_rpcs_total";
    NODESIM_ERRORS_TOTAL = "stampede_nodesim_errors_total";
    NODESIM_HEARTBEAT_SECONDS = "stampede_nodesim_heartbeat_seconds"
        [NODESIM_HEARTBEAT_SECONDS_COUNT = "_count"];
    /// The heartbeat TTL the servers last gave a node.
    NODESIM_HEARTBEAT_TTL_SECONDS = "stampede_nodesim_heartbeat_ttl_seconds";
}

/// Every name above that a process defines (the derived series aside).
pub const ALL: &[&str] = &[
    RAFT_ENTRIES_TOTAL,
    RAFT_ENTRY_BYTES_TOTAL,
    RAFT_IS_LEADER,
    RAFT_TERM,
    RAFT_APPLIED_INDEX,
    RAFT_ELECTIONS_STARTED_TOTAL,
    RAFT_ELECTION_STARTED_TERM,
    RAFT_SNAPSHOT_BYTES,
    RAFT_SNAPSHOT_BUILD_SECONDS,
    NODES,
    STATE_OBJECTS,
    RAFT_SNAPSHOTS_INSTALLED_TOTAL,
    GC_COLLECTED_TOTAL,
    BLOCKING_QUERIES_STARTED_TOTAL,
    BLOCKING_QUERIES_INFLIGHT,
    BLOCKING_QUERY_DELIVERY_SECONDS,
    BROKER_READY,
    BROKER_UNACKED,
    BROKER_WAITING_ON_JOB,
    BROKER_DELAYED,
    BROKER_CANCELABLE,
    BROKER_NACK_DELAYS_TOTAL,
    EVALS_CANCELLED_TOTAL,
    BLOCKED_EVALS,
    BLOCKED_EVALS_UNBLOCKED_TOTAL,
    PLAN_QUEUE_DEPTH,
    WORKER_NACKS_TOTAL,
    DEPLOYMENT_WATCHERS,
    DEPLOYMENT_WATCHER_LIMITER_WAIT_SECONDS,
    NODESIM_NODES,
    NODESIM_ALLOCS,
    NODESIM_UPDATE_RPCS_TOTAL,
    NODESIM_ERRORS_TOTAL,
    NODESIM_HEARTBEAT_SECONDS,
    NODESIM_HEARTBEAT_TTL_SECONDS,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_conventions_and_are_distinct() {
        let mut seen = std::collections::HashSet::new();
        for n in ALL {
            assert!(n.starts_with("stampede_"), "{n}");
            assert!(seen.insert(n), "{n} twice");
        }
        assert_eq!(
            BLOCKING_QUERY_DELIVERY_SECONDS_BUCKET,
            "stampede_blocking_query_delivery_seconds_bucket"
        );
        assert_eq!(
            STATE_OBJECTS_ALLOCS,
            "stampede_state_objects{table=\"allocs\"}"
        );
        assert_eq!(
            DEPLOYMENT_WATCHER_LIMITER_WAIT_SECONDS_COUNT,
            "stampede_deployment_watcher_limiter_wait_seconds_count"
        );
    }
}
