//! openraft's state machine: applies committed entries to the [`StateStore`]
//! and builds, persists and installs snapshots of it.
//!
//! The state lives in memory and is persisted only through snapshots; on start
//! it is rebuilt from the latest snapshot, and openraft re-applies the log
//! from there up to the last committed index.
//!
//! Everything here runs on raft's own runtime, often of one thread, which
//! also sends the leader's heartbeats and answers AppendEntries and votes.
//! So nothing that grows with the state runs on it: a snapshot is encoded,
//! checksummed and written on a thread of its own (`in_background`); one
//! installed or read back is decoded, written or read on the blocking pool;
//! and a state replaced by an installed one, or a snapshot's bytes openraft
//! is done with, are freed there too (`drop_off_thread`). What is left here
//! is handing them over: a copy of the state is a few reference counts.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{AnyError, EntryPayload, OptionalSend, RaftSnapshotBuilder, StorageIOError};
use prost::Message;
use stampede_proto::{log_entry::Msg, LogEntry};

use crate::raft::metrics::Metrics;
use crate::raft::storage::error::StoreError;
use crate::raft::storage::snapshot_store::{
    drop_off_thread, SnapshotData, SnapshotStore, StoredSnapshot,
};
use crate::raft::write::client_write::{self, Written};
use crate::raft::write::tickets::Tickets;
use crate::raft::{
    Applied, Command, Entry, LogId, NodeId, SnapshotMeta, StorageError, StoredMembership,
    TypeConfig,
};
use crate::state::{Changes, State, StateStore};

/// Told what each applied batch changed (wakes queries, feeds the leader's broker).
pub type Observer = Arc<dyn Fn(&Changes) + Send + Sync>;

pub struct StateMachine {
    store: Arc<StateStore>,
    observer: Observer,
    /// Writes this server forwarded, done here once their entries apply.
    tickets: Arc<Tickets>,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    snapshots: Arc<SnapshotStore>,
    metrics: Arc<Metrics>,
    /// Makes snapshot ids unique within this process.
    builds: Arc<AtomicU64>,
    /// Sleep before each applied batch (`--apply-delay`, a test knob).
    apply_delay: Duration,
}

impl StateMachine {
    /// Applies `entries` (with their decoded `commands`) in one write of
    /// the state, then tells the blocking queries and the forwarded writes.
    fn apply_slice(&mut self, entries: &[Entry], commands: &[Option<&LogEntry>]) -> Vec<Applied> {
        let store = self.store.clone();
        let mut changes = Changes::default();
        let mut forwarded: Vec<(u64, Written)> = Vec::new();
        let replies = store.write(|state| {
            let mut replies = Vec::new();
            for (entry, command) in entries.iter().zip(commands) {
                let index = entry.log_id.index;
                let commands = match (command, &entry.payload) {
                    (Some(command), EntryPayload::Normal(cmd)) => {
                        state.apply(index, command, &mut changes);
                        client_write::for_each_ticket(command, index, &mut |t, w| {
                            forwarded.push((t, w))
                        });
                        count_commands(&self.metrics, command, cmd)
                    }
                    // A command always has its decoded entry (above).
                    (_, EntryPayload::Blank | EntryPayload::Normal(_)) => {
                        self.metrics.entry_applied("blank", 0);
                        1
                    }
                    (_, EntryPayload::Membership(m)) => {
                        self.membership = StoredMembership::new(Some(entry.log_id), m.clone());
                        self.metrics.entry_applied("membership", 0);
                        1
                    }
                };
                state.set_index(index);
                self.metrics.log_entry_applied(commands);
                self.last_applied = Some(entry.log_id);
                replies.push(Applied { index });
            }
            replies
        });
        (self.observer)(&changes);
        // After the state holds them, so a forwarded write's client reads it here.
        for (ticket, written) in forwarded {
            self.tickets.applied(ticket, written);
        }
        replies
    }

    /// Opens the snapshot dir and loads the state from its snapshot, if any.
    pub fn open(
        dir: &Path,
        store: Arc<StateStore>,
        metrics: Arc<Metrics>,
        observer: Observer,
        tickets: Arc<Tickets>,
    ) -> Result<Self, StoreError> {
        let snapshots = SnapshotStore::open(dir)?;
        let mut sm = Self {
            store,
            observer,
            tickets,
            last_applied: None,
            membership: StoredMembership::default(),
            snapshots: Arc::new(snapshots),
            metrics,
            builds: Arc::default(),
            apply_delay: Duration::ZERO,
        };
        if let Some(snap) = sm.snapshots.current()? {
            let index = snap.meta.last_log_id.map_or(0, |l| l.index);
            let state =
                State::decode_snapshot(&snap.data, index).map_err(|e| StoreError::Corrupt {
                    path: dir.to_path_buf(),
                    what: "snapshot state",
                    detail: e.to_string(),
                })?;
            sm.load(&snap.meta, snap.data.len(), state);
        }
        Ok(sm)
    }

    /// Sleeps this long before applying each batch of entries, so this
    /// server's state lags the leader's commit index under load while raft
    /// itself (appends, votes, heartbeats) stays healthy.
    pub fn with_apply_delay(mut self, delay: Duration) -> Self {
        self.apply_delay = delay;
        self
    }

    /// Makes `state`, a snapshot's of `bytes` bytes, the live state, and
    /// returns the state it replaced (for the caller to free where it
    /// will: freeing a state of millions of allocations takes a while).
    fn load(&mut self, meta: &SnapshotMeta, bytes: usize, state: State) -> State {
        let old = self.store.write(|s| std::mem::replace(s, state));
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.metrics.snapshots.bytes.set(bytes as i64);
        self.metrics
            .raft_snapshot_index
            .set(meta.last_log_id.map_or(0, |l| l.index) as i64);
        old
    }
}

/// Counts an applied entry's commands by type (each command of a batch
/// on its own, so type shares read the same with batching on or off) and
/// returns how many there were. Sizes come from the bytes in the log.
/// Most bytes of commands applied in one slice (see `apply`): one plan
/// piece at its largest (`--plan-max-bytes`' default).
const APPLY_SLICE_BYTES: usize = 512 * 1024;

/// How many of `entries` make the next slice: at least one, and no more
/// than fit in [`APPLY_SLICE_BYTES`].
fn slice_len(entries: &[Entry]) -> usize {
    let mut bytes = 0;
    for (i, e) in entries.iter().enumerate() {
        bytes += match &e.payload {
            EntryPayload::Normal(cmd) => cmd.encoded_len(),
            _ => 0,
        };
        if bytes > APPLY_SLICE_BYTES {
            return i.max(1);
        }
    }
    entries.len()
}

fn count_commands(metrics: &Metrics, entry: &LogEntry, cmd: &Command) -> usize {
    match &entry.msg {
        Some(Msg::Batch(b)) => {
            let lengths = cmd.batch_lengths().filter(|l| l.len() == b.entries.len());
            for (i, e) in b.entries.iter().enumerate() {
                let len = lengths.as_ref().map_or_else(|| e.encoded_len(), |l| l[i]);
                metrics.entry_applied(command_type(e), len as u64);
            }
            b.entries.len()
        }
        _ => {
            metrics.entry_applied(command_type(entry), cmd.encoded_len() as u64);
            1
        }
    }
}

fn command_type(entry: &LogEntry) -> &'static str {
    entry.msg.as_ref().map_or("empty", |m| m.type_name())
}

/// The snapshot openraft is given: `s`'s bytes, not a copy of them when
/// no one else holds them (a snapshot just read or built).
fn to_snapshot(s: StoredSnapshot) -> Snapshot<TypeConfig> {
    let bytes = Arc::try_unwrap(s.data).unwrap_or_else(|shared| shared.as_ref().clone());
    Snapshot {
        meta: s.meta,
        snapshot: Box::new(SnapshotData::new(bytes)),
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        if !self.apply_delay.is_zero() {
            tokio::time::sleep(self.apply_delay).await;
        }
        let entries: Vec<Entry> = entries.into_iter().collect();
        // Every command is decoded before anything is applied: bytes in the
        // log that are not a LogEntry (a damaged disk; a peer's entries are
        // checked as they arrive) stop raft with a storage error, never
        // after half a batch.
        let mut commands = Vec::with_capacity(entries.len());
        for entry in &entries {
            commands.push(match &entry.payload {
                EntryPayload::Normal(cmd) => Some(cmd.entry().map_err(|e| {
                    StorageIOError::read_log_at_index(entry.log_id.index, AnyError::new(&e))
                })?),
                _ => None,
            });
        }
        // Applied a slice at a time, each of at most APPLY_SLICE_BYTES of
        // commands, with a yield between slices: raft's core shares this
        // thread, and a follower catching up on a system job's plans (a
        // hundred of them in one batch) would otherwise answer no
        // AppendEntries, and hear no heartbeat, until all were applied.
        let mut replies = Vec::with_capacity(entries.len());
        let mut at = 0;
        while at < entries.len() {
            if at > 0 {
                tokio::task::yield_now().await;
            }
            let end = at + slice_len(&entries[at..]);
            replies.extend(self.apply_slice(&entries[at..end], &commands[at..end]));
            at = end;
        }
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        SnapshotBuilder {
            state: self.store.snapshot(),
            last_applied: self.last_applied,
            membership: self.membership.clone(),
            snapshots: self.snapshots.clone(),
            metrics: self.metrics.clone(),
            builds: self.builds.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotData>, StorageError> {
        Ok(Box::default())
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<SnapshotData>,
    ) -> Result<(), StorageError> {
        // Decoded (unless the receiver's check decoded it already), written
        // to disk and measured for the queries on the blocking pool: a
        // state of a million allocations takes seconds to decode.
        let began = std::time::Instant::now();
        let index = meta.last_log_id.map_or(0, |l| l.index);
        let snapshots = self.snapshots.clone();
        let for_save = meta.clone();
        let installed = tokio::task::spawn_blocking(move || {
            let (bytes, decoded) = snapshot.into_parts();
            let state = match decoded {
                Some(state) => state,
                None => State::decode_snapshot(&bytes, index).map_err(|e| {
                    let e = AnyError::new(&e);
                    Box::new(StorageIOError::read_snapshot(Some(for_save.signature()), e))
                })?,
            };
            let stored = StoredSnapshot {
                meta: for_save,
                data: Arc::new(bytes),
            };
            snapshots.save(&stored).map_err(|e| {
                let e = AnyError::new(&e);
                Box::new(StorageIOError::write_snapshot(
                    Some(stored.meta.signature()),
                    e,
                ))
            })?;
            // Everything may have changed: every kind of query is woken.
            let changes = Changes::everything(&state);
            Ok((state, stored.data.len(), changes))
        })
        .await
        .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), AnyError::new(&e)))?;
        let (state, bytes, changes) =
            installed.map_err(|e: Box<StorageIOError<NodeId>>| StorageError::from(*e))?;
        drop_off_thread(self.load(meta, bytes, state));
        self.metrics.snapshots.installed.inc();
        self.metrics
            .snapshots
            .install_seconds
            .observe(began.elapsed().as_secs_f64());
        (self.observer)(&changes);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        // Read from its file, and handed over without a copy, off raft's
        // thread: it may be hundreds of MiB.
        let snapshots = self.snapshots.clone();
        let read =
            tokio::task::spawn_blocking(move || snapshots.current().map(|s| s.map(to_snapshot)))
                .await
                .map_err(|e| StorageIOError::read_snapshot(None, AnyError::new(&e)))?
                .map_err(|e| StorageIOError::read_snapshot(None, AnyError::new(&e)))?;
        Ok(read)
    }
}

/// Builds a snapshot from a copy of the state taken when openraft asked for
/// the builder, so applying goes on while the snapshot is encoded and written.
pub struct SnapshotBuilder {
    state: State,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    snapshots: Arc<SnapshotStore>,
    metrics: Arc<Metrics>,
    builds: Arc<AtomicU64>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let began = std::time::Instant::now();
        let n = self.builds.fetch_add(1, Ordering::Relaxed);
        let snapshot_id = match self.last_applied {
            Some(l) => format!(
                "{}-{}-{}-{n}",
                l.leader_id.term, l.leader_id.node_id, l.index
            ),
            None => format!("empty-{n}"),
        };
        let meta = SnapshotMeta {
            last_log_id: self.last_applied,
            last_membership: self.membership.clone(),
            snapshot_id,
        };
        // The builder's copy goes to the build's thread, where it is
        // freed once encoded: the rows the live state changed since are
        // this copy's alone by then.
        let state = std::mem::take(&mut self.state);
        let snapshots = self.snapshots.clone();
        let meta_for_save = meta.clone();
        // Room for about the last snapshot's bytes, so the buffer is not
        // grown (and copied) a dozen times on the way to hundreds of MB.
        let last_size = self.metrics.snapshots.bytes.get().max(0) as usize;
        let stored = in_background(move || {
            let mut bytes = Vec::with_capacity(last_size + last_size / 8);
            state.encode_snapshot(&mut bytes);
            drop(state);
            let stored = StoredSnapshot {
                meta: meta_for_save,
                data: Arc::new(bytes),
            };
            // A newer snapshot installed from the leader meanwhile stays
            // the current one; this one is still handed to openraft, which
            // keeps the newer.
            snapshots.save(&stored).map(|saved| (saved, stored))
        })
        .await
        .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), AnyError::new(&e)))?
        .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), AnyError::new(&e)))?;
        let (saved, stored) = stored;
        let took = began.elapsed();
        self.metrics.snapshots.built.inc();
        self.metrics
            .snapshots
            .build_seconds
            .observe(took.as_secs_f64());
        self.metrics.snapshot_built(took);
        // The current snapshot's figures stay the newer one's, installed
        // while this one was built.
        if saved {
            self.metrics.snapshots.bytes.set(stored.data.len() as i64);
            self.metrics
                .raft_snapshot_index
                .set(meta.last_log_id.map_or(0, |l| l.index) as i64);
        }
        Ok(to_snapshot(stored))
    }
}

/// How much less a snapshot build weighs than the server's other threads
/// (a nice value): a build of a state of a million allocations takes a core
/// for ten seconds and more, and on a machine with no core to spare it
/// delayed the leader's heartbeats past a follower's election timeout.
pub const SNAPSHOT_BUILD_NICE: i32 = 10;

/// Runs `work` on a thread of its own at [`SNAPSHOT_BUILD_NICE`]: the
/// priority of a thread cannot be raised again without privilege, so it is
/// not one of tokio's blocking threads, which are reused.
async fn in_background<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("snapshot-build".into())
        .spawn(move || {
            lower_priority(SNAPSHOT_BUILD_NICE);
            let _ = tx.send(work());
        })?;
    rx.await
        .map_err(|_| std::io::Error::other("the snapshot build's thread ended without an answer"))
}

/// Sets the calling thread's priority to the process's plus `nice`; best
/// effort (the build runs all the same if the system refuses).
fn lower_priority(nice: i32) {
    if let Err(e) = super::runtime::set_thread_nice(nice) {
        tracing::debug!("could not lower the snapshot build's priority: {e}");
    }
}

#[cfg(test)]
mod background_tests {
    use super::super::runtime::current_thread_nice as own_nice;
    use super::*;

    #[tokio::test]
    async fn a_background_build_runs_at_a_lower_priority_and_leaves_the_callers_alone() {
        let before = own_nice();
        let (nice, name) =
            in_background(|| (own_nice(), std::thread::current().name().map(String::from)))
                .await
                .unwrap();
        assert_eq!(nice, (before + SNAPSHOT_BUILD_NICE).min(19));
        assert_eq!(name.as_deref(), Some("snapshot-build"));
        assert_eq!(own_nice(), before, "the caller's thread keeps its priority");
    }
}

#[cfg(test)]
mod slice_tests {
    use openraft::{CommittedLeaderId, LogId};

    use super::*;
    use crate::raft::Command;

    fn entry(index: u64, bytes: usize) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(Command::from_bytes(vec![0u8; bytes])),
        }
    }

    #[test]
    fn a_slice_holds_what_fits_and_never_less_than_one_entry() {
        let piece = APPLY_SLICE_BYTES / 4;
        let entries: Vec<Entry> = (1..=10).map(|i| entry(i, piece)).collect();
        assert_eq!(slice_len(&entries), 4);
        assert_eq!(slice_len(&entries[8..]), 2);
        let huge = [entry(1, APPLY_SLICE_BYTES * 3), entry(2, 1)];
        assert_eq!(
            slice_len(&huge),
            1,
            "one entry larger than a slice goes alone"
        );
        assert_eq!(slice_len(&[]), 0);
    }
}

#[cfg(test)]
mod suite {
    use openraft::testing::{StoreBuilder, Suite};
    use openraft::StorageError as RaftStorageError;

    use super::StateMachine;
    use crate::raft::log_store::{Identity, LogStore};
    use crate::raft::{NodeId, TypeConfig};

    struct Builder;

    impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for Builder {
        async fn build(
            &self,
        ) -> Result<(tempfile::TempDir, LogStore, StateMachine), RaftStorageError<NodeId>> {
            let dir = tempfile::tempdir().unwrap();
            let identity = Identity {
                server_id: 1,
                members: [1].into(),
            };
            let log = LogStore::open(&dir.path().join("raft"), &identity).unwrap();
            let sm = StateMachine::open(
                &dir.path().join("snapshots"),
                Default::default(),
                Default::default(),
                std::sync::Arc::new(|_: &crate::state::Changes| {}),
                Default::default(),
            )
            .unwrap();
            Ok((dir, log, sm))
        }
    }

    /// openraft's own conformance suite for log stores and state machines.
    #[test]
    fn passes_openraft_storage_suite() {
        Suite::test_all(Builder).unwrap();
    }
}
