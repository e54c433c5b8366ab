//! The server's Prometheus registry (one per server, served at `/metrics`),
//! and the raft metrics on it. The other parts register their own metrics on
//! the same registry.
//!
//! Names start with `stampede_`, use base units, and no label carries an
//! unbounded value: `type` is a raft message type, never an id.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::{Histogram, IntCounter, IntCounterVec, IntGauge, Registry};
use stampede_proto::metric_defs::{histogram, int_counter, int_counter_vec, int_gauge};
use stampede_proto::metric_names;

/// Why a server refused a pre-vote (`raft::election`): the `reason` label
/// of `stampede_raft_prevotes_refused_total`.
pub const PREVOTE_REFUSALS: &[&str] = &["leading", "leader_heard", "log_behind", "woken", "busy"];

pub struct Metrics {
    registry: Registry,
    /// Commands applied to the state machine, by message type: one per
    /// write, whether it had a raft entry to itself or shared a batch.
    pub raft_entries: IntCounterVec,
    /// Bytes of those commands' encodings.
    pub raft_entry_bytes: IntCounterVec,
    /// Raft log entries applied: what the log actually wrote and synced.
    pub raft_log_entries: IntCounter,
    /// Commands in each applied log entry (1 unless batched).
    pub raft_commands_per_entry: Histogram,
    /// On the leader: from a write's submission to its being applied.
    pub raft_apply_seconds: Histogram,
    pub raft_last_log_index: IntGauge,
    pub raft_applied_index: IntGauge,
    pub raft_snapshot_index: IntGauge,
    pub raft_term: IntGauge,
    pub raft_is_leader: IntGauge,
    /// Elections: who led, who campaigned, which pre-votes were refused.
    pub elections: ElectionMetrics,
    /// Snapshots: built, sent, installed, and the catch-up window they size.
    pub snapshots: SnapshotMetrics,
    /// Writes this server received as a follower and sent on to the leader.
    pub writes_forwarded: IntCounter,
    /// Of those, how each was done first: `apply` when this server applied
    /// its entry (its ticket) before the leader answered, `answer` otherwise.
    pub writes_forwarded_done: IntCounterVec,
    /// On the leader: one AppendEntries to a follower, sent to answered
    /// (openraft gives up after one heartbeat interval).
    pub append_rpc_seconds: Histogram,
    /// On a follower: the part of an AppendEntries spent in raft itself
    /// (append, fsync, answer). The rest of the leader's round trip is the
    /// network and the wait for this server's gRPC threads.
    pub append_handle_seconds: Histogram,
}

impl Metrics {
    pub fn new() -> Self {
        let r = Registry::new();
        let types = stampede_proto::MESSAGE_TYPES;
        let m = Self {
            raft_entries: int_counter_vec(
                &r,
                metric_names::RAFT_ENTRIES_TOTAL,
                "Raft commands applied to the state machine, by message type (a batched log entry counts each of its commands).",
                "type",
                types,
            ),
            raft_entry_bytes: int_counter_vec(
                &r,
                metric_names::RAFT_ENTRY_BYTES_TOTAL,
                "Bytes of raft commands applied to the state machine, by message type.",
                "type",
                types,
            ),
            raft_log_entries: int_counter(
                &r,
                "stampede_raft_log_entries_total",
                "Raft log entries applied to the state machine (each written and synced once).",
            ),
            raft_commands_per_entry: histogram(
                &r,
                "stampede_raft_commands_per_entry",
                "Commands carried by each applied raft log entry (above 1 only when batched).",
                // 1 to 1024.
                (1.0, 2.0, 11),
            ),
            raft_apply_seconds: histogram(
                &r,
                "stampede_raft_apply_seconds",
                "On the leader: time from a write's submission to its being applied.",
                (0.0005, 2.0, 14),
            ),
            raft_last_log_index: int_gauge(
                &r,
                "stampede_raft_last_log_index",
                "Index of the last entry in this server's raft log.",
            ),
            raft_applied_index: int_gauge(
                &r,
                metric_names::RAFT_APPLIED_INDEX,
                "Index of the last entry applied to this server's state machine.",
            ),
            raft_snapshot_index: int_gauge(
                &r,
                "stampede_raft_snapshot_index",
                "Last index covered by this server's current snapshot.",
            ),
            raft_term: int_gauge(&r, metric_names::RAFT_TERM, "Current raft term."),
            raft_is_leader: int_gauge(
                &r,
                metric_names::RAFT_IS_LEADER,
                "1 while this server is the raft leader, else 0.",
            ),
            elections: ElectionMetrics::register(&r),
            snapshots: SnapshotMetrics::register(&r),
            append_rpc_seconds: histogram(
                &r,
                "stampede_raft_append_rpc_seconds",
                "On the leader: AppendEntries round trips to followers, answered or not.",
                (0.0005, 2.0, 14),
            ),
            append_handle_seconds: histogram(
                &r,
                "stampede_raft_append_handle_seconds",
                "On a follower: time raft took to take an AppendEntries (append, fsync, answer).",
                (0.0005, 2.0, 14),
            ),
            writes_forwarded: int_counter(
                &r,
                "stampede_raft_writes_forwarded_total",
                "Writes received as a follower and sent on to the leader.",
            ),
            writes_forwarded_done: int_counter_vec(
                &r,
                "stampede_raft_writes_forwarded_done_total",
                "Forwarded writes done, by what came first: this server's apply of the entry, or the leader's answer.",
                "first",
                &["apply", "answer"],
            ),
            registry: r,
        };
        stampede_proto::build::register(&m.registry, stampede_proto::this_build!());
        #[cfg(target_os = "linux")]
        m.registry
            .register(stampede_proto::process_collector("stampede"))
            .expect("the process collector is registered once");
        m
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Counts one applied raft log entry carrying `commands` commands.
    pub fn log_entry_applied(&self, commands: usize) {
        self.raft_log_entries.inc();
        self.raft_commands_per_entry.observe(commands as f64);
    }

    /// Counts one applied command.
    pub fn entry_applied(&self, type_name: &str, bytes: u64) {
        self.raft_entries.with_label_values(&[type_name]).inc();
        self.raft_entry_bytes
            .with_label_values(&[type_name])
            .inc_by(bytes);
    }

    /// The registry in Prometheus text format.
    pub fn render(&self) -> String {
        stampede_proto::render_metrics(&self.registry)
    }
}

/// The election metrics (`raft::election`, and the server's leader watch).
pub struct ElectionMetrics {
    pub leader_changes: IntCounter,
    /// Elections this server started (its pre-vote granted by a quorum),
    /// and the term of the last one (`raft::election`).
    pub started: IntCounter,
    pub started_term: IntGauge,
    /// Campaigns this server did not start: its pre-vote found no quorum.
    pub campaigns_stopped: IntCounter,
    /// Pre-votes this server refused, by `reason`.
    pub prevotes_refused: IntCounterVec,
    /// Times the election driver found this server had not run for a
    /// while (paused, starved): its silence counted from then.
    pub stalls: IntCounter,
}

impl ElectionMetrics {
    fn register(r: &Registry) -> Self {
        Self {
        leader_changes: int_counter(
            r,
            "stampede_raft_leader_changes_total",
            "Times this server saw a new leader.",
        ),
        started: int_counter(
            r,
            metric_names::RAFT_ELECTIONS_STARTED_TOTAL,
            "Elections this server started: a quorum granted its pre-vote, so it raised the term.",
        ),
        started_term: int_gauge(
            r,
            metric_names::RAFT_ELECTION_STARTED_TERM,
            "The term of the last election this server started (0 if none).",
        ),
        campaigns_stopped: int_counter(
            r,
            "stampede_raft_campaigns_stopped_total",
            "Campaigns this server did not start because its pre-vote found no quorum (a leader was alive, or its log was behind), or a leader was elected or heard from while it asked.",
        ),
        prevotes_refused: int_counter_vec(
            r,
            "stampede_raft_prevotes_refused_total",
            "Pre-votes this server refused, by reason: it leads, it heard from its leader within the lease, the candidate's log is behind, it had just woken from not running, or its raft core was too busy to say.",
            "reason",
            PREVOTE_REFUSALS,
        ),
        stalls: int_counter(
            r,
            "stampede_raft_stalls_total",
            "Times this server found its raft had not run for a while (paused, starved of a core, a slow fsync): it heard nothing meanwhile because it did not listen, so its silence counts from then, and it neither campaigns nor grants a pre-vote at once.",
        ),
        }
    }
}

/// The snapshot metrics (`raft::state_machine`, `raft::catch_up`).
pub struct SnapshotMetrics {
    pub built: IntCounter,
    pub installed: IntCounter,
    pub bytes: IntGauge,
    /// Each snapshot this server built: from the copy of its state to the
    /// snapshot encoded and on disk.
    pub build_seconds: Histogram,
    /// On the leader: each snapshot sent to a follower, from its first
    /// chunk to the follower's answer that it installed it.
    pub send_seconds: Histogram,
    /// On a follower: each snapshot installed from a leader, from the
    /// state machine's turn to the state in place (the check's decode on
    /// arrival before it is not counted).
    pub install_seconds: Histogram,
    /// Entries the log keeps behind its snapshot now (`raft::catch_up`).
    pub catch_up_window_entries: IntGauge,
    /// The last build's and send's times, and the snapshots being sent,
    /// which size the catch-up window (`raft::catch_up`).
    pub times: SnapshotTimes,
}

impl SnapshotMetrics {
    fn register(r: &Registry) -> Self {
        Self {
        built: int_counter(
            r,
            "stampede_raft_snapshots_built_total",
            "Snapshots this server built from its state.",
        ),
        installed: int_counter(
            r,
            metric_names::RAFT_SNAPSHOTS_INSTALLED_TOTAL,
            "Snapshots this server installed from a leader.",
        ),
        bytes: int_gauge(
            r,
            metric_names::RAFT_SNAPSHOT_BYTES,
            "Size of this server's current snapshot.",
        ),
        build_seconds: histogram(
            r,
            metric_names::RAFT_SNAPSHOT_BUILD_SECONDS,
            "Time to build a snapshot from this server's state: encode it and write it to disk, synced.",
            // 10 ms to about 5 minutes.
            (0.01, 2.0, 15),
        ),
        send_seconds: histogram(
            r,
            "stampede_raft_snapshot_send_seconds",
            "On the leader: time to send a snapshot to a follower, its install there included.",
            (0.01, 2.0, 15),
        ),
        install_seconds: histogram(
            r,
            "stampede_raft_snapshot_install_seconds",
            "On a follower: time to install a snapshot from a leader (save it, put its state in place).",
            (0.01, 2.0, 15),
        ),
        catch_up_window_entries: int_gauge(
            r,
            "stampede_raft_catch_up_window_entries",
            "Entries the raft log keeps behind its snapshot, for followers catching up: at least --keep-entries, more with the write rate.",
        ),
        times: SnapshotTimes::default(),
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// How long this server's last snapshot build and last snapshot send
/// took, and the snapshots it is sending now (the index each ends at).
#[derive(Debug, Default)]
pub struct SnapshotTimes {
    /// Milliseconds, 0 until there was one.
    last_build_ms: AtomicU64,
    last_send_ms: AtomicU64,
    sending: Mutex<Vec<u64>>,
    /// The index the last send to end ended at, and when it ended.
    last_sent: Mutex<Option<(u64, Instant)>>,
}

impl SnapshotTimes {
    pub fn last_build(&self) -> Option<Duration> {
        Some(self.last_build_ms.load(Ordering::Relaxed))
            .filter(|&ms| ms > 0)
            .map(Duration::from_millis)
    }

    pub fn last_send(&self) -> Option<Duration> {
        Some(self.last_send_ms.load(Ordering::Relaxed))
            .filter(|&ms| ms > 0)
            .map(Duration::from_millis)
    }

    /// The lowest index a snapshot being sent now ends at, or one whose
    /// send ended less than `grace` ago: its follower asks for the entries
    /// after it next.
    pub fn oldest_sending(&self, grace: Duration) -> Option<u64> {
        let ended = stampede_proto::lock(&self.last_sent)
            .filter(|(_, at)| at.elapsed() < grace)
            .map(|(index, _)| index);
        let sending = stampede_proto::lock(&self.sending).iter().copied().min();
        sending.into_iter().chain(ended).min()
    }
}

impl Metrics {
    /// A snapshot build took `took`.
    pub fn snapshot_built(&self, took: Duration) {
        let ms = took.as_millis().clamp(1, u64::MAX as u128) as u64;
        self.snapshots
            .times
            .last_build_ms
            .store(ms, Ordering::Relaxed);
    }

    /// A snapshot ending at `index` is being sent, until the guard is
    /// dropped; [`SnapshotSend::installed`] times it.
    pub fn snapshot_sending(self: &Arc<Self>, index: u64) -> SnapshotSend {
        stampede_proto::lock(&self.snapshots.times.sending).push(index);
        SnapshotSend {
            metrics: self.clone(),
            index,
            began: Instant::now(),
        }
    }
}

/// A snapshot being sent (see [`Metrics::snapshot_sending`]).
pub struct SnapshotSend {
    metrics: Arc<Metrics>,
    index: u64,
    began: Instant,
}

impl SnapshotSend {
    /// The follower installed it: its time is the last send's.
    pub fn installed(self) {
        let took = self.began.elapsed();
        self.metrics
            .snapshots
            .send_seconds
            .observe(took.as_secs_f64());
        let ms = took.as_millis().clamp(1, u64::MAX as u128) as u64;
        self.metrics
            .snapshots
            .times
            .last_send_ms
            .store(ms, Ordering::Relaxed);
    }
}

impl Drop for SnapshotSend {
    fn drop(&mut self) {
        let times = &self.metrics.snapshots.times;
        *stampede_proto::lock(&times.last_sent) = Some((self.index, Instant::now()));
        let mut sending = stampede_proto::lock(&times.sending);
        if let Some(at) = sending.iter().position(|&i| i == self.index) {
            sending.swap_remove(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counts_by_type_with_process_metrics() {
        let m = Metrics::new();
        m.entry_applied("node_register", 40);
        m.entry_applied("node_register", 2);
        let text = m.render();
        assert!(text.contains("stampede_raft_entries_total{type=\"node_register\"} 2"));
        assert!(text.contains("stampede_raft_entry_bytes_total{type=\"node_register\"} 42"));
        assert!(text.contains("stampede_process_resident_memory_bytes"));
    }

    #[test]
    fn a_snapshot_send_is_held_while_it_goes_and_timed_once_installed() {
        let m = Arc::new(Metrics::new());
        let times = &m.snapshots.times;
        assert_eq!(
            (times.last_send(), times.oldest_sending(Duration::ZERO)),
            (None, None)
        );
        m.snapshot_built(Duration::from_millis(1_500));
        assert_eq!(times.last_build(), Some(Duration::from_millis(1_500)));
        let old = m.snapshot_sending(40);
        let new = m.snapshot_sending(90);
        assert_eq!(times.oldest_sending(Duration::ZERO), Some(40));
        // Refused or failed: no time, and no longer held once the grace is past.
        drop(old);
        assert_eq!(times.oldest_sending(Duration::ZERO), Some(90));
        assert_eq!(times.last_send(), None);
        new.installed();
        assert!(times.last_send().is_some());
        assert_eq!(times.oldest_sending(Duration::ZERO), None);
        // Within the grace, the send that ended last still holds.
        assert_eq!(times.oldest_sending(Duration::from_secs(60)), Some(90));
        assert!(m
            .render()
            .contains("stampede_raft_snapshot_send_seconds_count 1"));
    }

    #[test]
    fn every_server_name_loadgen_reads_is_defined_here() {
        let text = Metrics::new().render();
        let ours = [
            metric_names::RAFT_ENTRIES_TOTAL,
            metric_names::RAFT_ENTRY_BYTES_TOTAL,
            metric_names::RAFT_IS_LEADER,
            metric_names::RAFT_TERM,
            metric_names::RAFT_APPLIED_INDEX,
            metric_names::RAFT_SNAPSHOT_BYTES,
            metric_names::RAFT_SNAPSHOT_BUILD_SECONDS,
        ];
        for name in ours {
            assert!(text.contains(&format!("# TYPE {name} ")), "{name}");
        }
    }
}
