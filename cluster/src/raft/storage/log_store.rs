//! The raft log, vote and commit markers on RocksDB.
//!
//! Two column families: `logs` (key: index as big-endian u64, so byte order is
//! numeric order; value: the bincode entry) and `meta` (vote, committed,
//! purged, and the identity of the server that owns the data dir). Every append
//! is one `WriteBatch`; appends, truncations and votes are written with a synced
//! WAL, so they are durable before openraft is told they are.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{AnyError, OptionalSend, RaftLogReader, StorageIOError, Vote};
use rocksdb::{
    ColumnFamilyDescriptor, Direction, IteratorMode, Options, WriteBatch, WriteOptions, DB,
};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::raft::storage::error::StoreError;
use crate::raft::storage::log_tail::LogTail;
use crate::raft::{Entry, LogId, NodeId, StorageError, TypeConfig, APPEND_BUDGET_BYTES};

pub(super) const CF_LOGS: &str = "logs";
pub(super) const CF_META: &str = "meta";
pub(super) const KEY_VOTE: &[u8] = b"vote";
const KEY_COMMITTED: &[u8] = b"committed";
const KEY_PURGED: &[u8] = b"purged";
pub(super) const KEY_IDENTITY: &[u8] = b"identity";

/// Who a data dir belongs to, written on first start and checked on every start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub server_id: NodeId,
    pub members: BTreeSet<NodeId>,
}

/// Each column family's memtable. RocksDB's default (64 MiB) would let a
/// server's memory grow with every entry written for as long as it takes to
/// write 64 MiB of log (half an hour of a soak) before the first flush; the
/// log is written once in order and purged behind snapshots, so a small
/// memtable costs only more frequent, smaller flushes.
const WRITE_BUFFER_BYTES: usize = 4 << 20;

#[derive(Clone)]
pub struct LogStore {
    db: Arc<DB>,
    /// Syncs the WAL for appends off raft's threads (see [`WalSyncer`]).
    syncer: Arc<WalSyncer>,
    /// Whether this server leads, as last seen (see [`LogStore::set_leading`]).
    leading: Arc<AtomicBool>,
    /// The newest entries, read without the disk.
    tail: Arc<Mutex<LogTail>>,
}

impl LogStore {
    /// Opens (or creates) the store in `dir`, and refuses a dir that belongs to
    /// another server or another cluster.
    pub fn open(dir: &Path, identity: &Identity) -> Result<Self, StoreError> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        opts.set_paranoid_checks(true);
        let cfs = [CF_LOGS, CF_META].map(|n| {
            let mut cf = Options::default();
            cf.set_write_buffer_size(WRITE_BUFFER_BYTES);
            ColumnFamilyDescriptor::new(n, cf)
        });
        let db = DB::open_cf_descriptors(&opts, dir, cfs).map_err(|source| StoreError::Open {
            path: dir.to_path_buf(),
            source,
        })?;
        let db = Arc::new(db);
        let store = Self {
            syncer: Arc::new(WalSyncer::start(db.clone())),
            leading: Arc::default(),
            tail: Arc::default(),
            db,
        };
        store.check_identity(dir, identity)?;
        Ok(store)
    }

    /// The index of the last entry in the log (0 for none): at start-up,
    /// the entries this server will replay, already applied before it
    /// stopped or about to be.
    pub fn last_index(&self) -> Result<u64, StoreError> {
        let last = self.last_log_id().map_err(|e| StoreError::Corrupt {
            path: self.db.path().to_path_buf(),
            what: "raft log",
            detail: e.to_string(),
        })?;
        Ok(last.map_or(0, |id| id.index))
    }

    fn check_identity(&self, dir: &Path, want: &Identity) -> Result<(), StoreError> {
        let corrupt = |detail: String| StoreError::Corrupt {
            path: dir.to_path_buf(),
            what: "server identity",
            detail,
        };
        match self
            .get_meta::<Identity>(KEY_IDENTITY)
            .map_err(|e| corrupt(e.to_string()))?
        {
            Some(found) if found.server_id != want.server_id => Err(StoreError::OtherServer {
                path: dir.to_path_buf(),
                found: found.server_id,
                expected: want.server_id,
            }),
            Some(found) if found.members != want.members => Err(StoreError::OtherCluster {
                path: dir.to_path_buf(),
                found: found.members.into_iter().collect(),
                expected: want.members.iter().copied().collect(),
            }),
            Some(_) => Ok(()),
            None => {
                let has_log = self
                    .db
                    .iterator_cf(self.cf(CF_LOGS), IteratorMode::Start)
                    .next()
                    .is_some();
                if has_log {
                    return Err(corrupt(
                        "the raft log has entries but no owner record".into(),
                    ));
                }
                self.put_meta(KEY_IDENTITY, want, true).map_err(|e| {
                    StoreError::Io(PathBuf::from(dir), std::io::Error::other(e.to_string()))
                })
            }
        }
    }

    fn cf(&self, name: &str) -> &rocksdb::ColumnFamily {
        self.db
            .cf_handle(name)
            .expect("column families are created on open")
    }

    pub(super) fn get_meta<T: DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>, AnyError> {
        match self
            .db
            .get_cf(self.cf(CF_META), key)
            .map_err(|e| AnyError::new(&e))?
        {
            None => Ok(None),
            Some(bytes) => bincode::deserialize(&bytes)
                .map(Some)
                .map_err(|e| AnyError::new(&*e)),
        }
    }

    pub(super) fn put_meta<T: Serialize>(
        &self,
        key: &[u8],
        value: &T,
        sync: bool,
    ) -> Result<(), AnyError> {
        let bytes = bincode::serialize(value).map_err(|e| AnyError::new(&*e))?;
        self.db
            .put_cf_opt(self.cf(CF_META), key, bytes, &write_options(sync))
            .map_err(|e| AnyError::new(&e))
    }

    pub(super) fn last_log_id(&self) -> Result<Option<LogId>, AnyError> {
        match self
            .db
            .iterator_cf(self.cf(CF_LOGS), IteratorMode::End)
            .next()
        {
            None => Ok(None),
            Some(item) => {
                let (_, value) = item.map_err(|e| AnyError::new(&e))?;
                let entry: Entry = bincode::deserialize(&value).map_err(|e| AnyError::new(&*e))?;
                Ok(Some(entry.log_id))
            }
        }
    }
}

impl LogStore {
    /// Tells the store whether this server leads. A leader's appends are
    /// synced on the [`WalSyncer`]'s thread, so that it replicates while
    /// its fsync runs; a follower has nothing to do meanwhile (it answers
    /// the leader only once the entries are on disk), so it syncs in the
    /// append itself and spares two handovers between threads. Either way
    /// is safe: a stale flag around a change of leader costs only time.
    pub fn set_leading(&self, leading: bool) {
        self.leading.store(leading, Ordering::Relaxed);
    }

    /// Appends `entries` in one `WriteBatch` and returns once the WAL is synced.
    /// (openraft's error is large, so it comes boxed.)
    pub fn append_synced(
        &self,
        entries: impl IntoIterator<Item = Entry>,
    ) -> Result<(), Box<StorageIOError<NodeId>>> {
        self.append_with(entries, true)
    }

    /// Appends `entries` in one `WriteBatch`, syncing the WAL or not.
    fn append_with(
        &self,
        entries: impl IntoIterator<Item = Entry>,
        sync: bool,
    ) -> Result<(), Box<StorageIOError<NodeId>>> {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let mut batch = WriteBatch::default();
        let cf = self.cf(CF_LOGS);
        for entry in &entries {
            let bytes = bincode::serialize(&entry).map_err(|e| {
                Box::new(StorageIOError::write_log_entry(
                    entry.log_id,
                    AnyError::new(&*e),
                ))
            })?;
            batch.put_cf(cf, key(entry.log_id.index), bytes);
        }
        self.db
            .write_opt(batch, &write_options(sync))
            .map_err(|e| Box::new(StorageIOError::write_logs(AnyError::new(&e))))?;
        stampede_proto::lock(&self.tail).appended(entries);
        Ok(())
    }
}

/// Syncs the WAL on its own thread, so an append is visible (to the
/// replication that reads it) at once and durable a little later: the
/// leader sends entries to its followers while its own fsync runs, as etcd
/// does, instead of after it (openraft 0.9's core waits for the flush before
/// it replicates; our patch of it sends first: vendor/openraft/PATCHES.md).
/// Appends that arrive during one fsync share the next. openraft is told an
/// append is flushed only after its fsync.
struct WalSyncer {
    tx: Option<std::sync::mpsc::Sender<LogFlushed<TypeConfig>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl WalSyncer {
    fn start(db: Arc<DB>) -> Self {
        let (tx, rx) = std::sync::mpsc::channel::<LogFlushed<TypeConfig>>();
        let thread = std::thread::Builder::new()
            .name("wal-sync".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut waiting = vec![first];
                    waiting.extend(rx.try_iter());
                    let synced = db.flush_wal(true);
                    for callback in waiting {
                        callback.log_io_completed(
                            synced
                                .as_ref()
                                .map(|_| ())
                                .map_err(|e| std::io::Error::other(e.to_string())),
                        );
                    }
                }
            })
            .expect("the WAL sync thread starts");
        Self {
            tx: Some(tx),
            thread: Some(thread),
        }
    }

    /// Calls `callback` once everything written so far is synced.
    fn after_sync(&self, callback: LogFlushed<TypeConfig>) {
        let tx = self.tx.as_ref().expect("set until dropped");
        if let Err(std::sync::mpsc::SendError(callback)) = tx.send(callback) {
            callback.log_io_completed(Err(std::io::Error::other("the WAL sync thread ended")));
        }
    }
}

impl Drop for WalSyncer {
    /// Ends the thread once it has answered what it holds, and waits for
    /// it, so that the database is closed when the last `LogStore` is
    /// dropped (a store reopened in the same process finds it unlocked).
    fn drop(&mut self) {
        self.tx.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn write_options(sync: bool) -> WriteOptions {
    let mut o = WriteOptions::default();
    o.set_sync(sync);
    o
}

fn key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn index_of(key: &[u8]) -> u64 {
    u64::from_be_bytes(key.try_into().expect("log keys are 8 bytes"))
}

impl LogStore {
    /// The entries from `start` up to `end` (excluded; `None`: to the last),
    /// stopping before one that would take them past `budget` bytes (never
    /// before the first): from the tail of the log when it holds them all,
    /// else from RocksDB. (openraft's error is large, so it comes boxed.)
    fn read(
        &self,
        start: u64,
        end: Option<u64>,
        budget: u64,
    ) -> Result<Vec<Entry>, Box<StorageError>> {
        if let Some(entries) = stampede_proto::lock(&self.tail).get(start, end, budget) {
            return Ok(entries);
        }
        let end = end.unwrap_or(u64::MAX);
        let mut entries = Vec::new();
        let mut bytes = 0u64;
        let iter = self.db.iterator_cf(
            self.cf(CF_LOGS),
            IteratorMode::From(&key(start), Direction::Forward),
        );
        for item in iter {
            let (k, v) =
                item.map_err(|e| Box::new(StorageIOError::read_logs(AnyError::new(&e)).into()))?;
            let index = index_of(&k);
            bytes = bytes.saturating_add(v.len() as u64);
            if index >= end || (!entries.is_empty() && bytes > budget) {
                break;
            }
            let entry: Entry = bincode::deserialize(&v).map_err(|e| {
                Box::new(StorageIOError::read_log_at_index(index, AnyError::new(&*e)).into())
            })?;
            entries.push(entry);
        }
        Ok(entries)
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    /// The entries from `start` (before `end`) that one AppendEntries
    /// carries: within [`APPEND_BUDGET_BYTES`] of encoded entries, and at
    /// least one. Replication asks for up to 300 entries a message; for a
    /// follower catching up on plans of hundreds of allocations that was
    /// tens of MiB read and decoded to send a few of them.
    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, StorageError> {
        self.read(start, Some(end), APPEND_BUDGET_BYTES)
            .map_err(|e| *e)
    }

    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let start = match range.start_bound() {
            Bound::Included(i) => *i,
            Bound::Excluded(i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(i) => Some(i.saturating_add(1)),
            Bound::Excluded(i) => Some(*i),
            Bound::Unbounded => None,
        };
        self.read(start, end, u64::MAX).map_err(|e| *e)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged_log_id = self
            .get_meta::<LogId>(KEY_PURGED)
            .map_err(StorageIOError::read_logs)?;
        let last = self.last_log_id().map_err(StorageIOError::read_logs)?;
        Ok(LogState {
            last_purged_log_id,
            last_log_id: last.or(last_purged_log_id),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError> {
        self.put_meta(KEY_VOTE, vote, true)
            .map_err(StorageIOError::write_vote)?;
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError> {
        Ok(self.get_meta(KEY_VOTE).map_err(StorageIOError::read_vote)?)
    }

    /// Not synced: losing the newest commit marker in a crash only means
    /// re-applying a few entries once they are committed again.
    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        self.put_meta(KEY_COMMITTED, &committed, false)
            .map_err(StorageIOError::write)?;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self
            .get_meta::<Option<LogId>>(KEY_COMMITTED)
            .map_err(StorageIOError::read)?
            .flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let leading = self.leading.load(Ordering::Relaxed);
        match self.append_with(entries, !leading) {
            Ok(()) if leading => {
                self.syncer.after_sync(callback);
                Ok(())
            }
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(StorageError::from(*e))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(self.cf(CF_LOGS), key(log_id.index), key(u64::MAX));
        self.db
            .write_opt(batch, &write_options(true))
            .map_err(|e| StorageIOError::write_logs(AnyError::new(&e)))?;
        stampede_proto::lock(&self.tail).truncated(log_id.index);
        Ok(())
    }

    /// Records the purge point and deletes the entries up to it in one batch.
    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let mut batch = WriteBatch::default();
        let marker = bincode::serialize(&log_id)
            .map_err(|e| StorageIOError::write_logs(AnyError::new(&*e)))?;
        batch.put_cf(self.cf(CF_META), KEY_PURGED, marker);
        batch.delete_range_cf(self.cf(CF_LOGS), key(0), key(log_id.index + 1));
        self.db
            .write_opt(batch, &write_options(false))
            .map_err(|e| StorageIOError::write_logs(AnyError::new(&e)))?;
        stampede_proto::lock(&self.tail).purged(log_id.index);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, bytes: usize) -> Entry {
        Entry {
            log_id: LogId::new(openraft::CommittedLeaderId::new(1, 1), index),
            payload: openraft::EntryPayload::Normal(crate::raft::Command::from_bytes(vec![
                7u8;
                bytes
            ])),
        }
    }

    fn indexes(entries: &[Entry]) -> Vec<u64> {
        entries.iter().map(|e| e.log_id.index).collect()
    }

    #[tokio::test]
    async fn one_message_reads_entries_within_the_append_budget_from_the_tail_or_the_disk() {
        let dir = tempfile::tempdir().unwrap();
        let me = Identity {
            server_id: 1,
            members: [1].into(),
        };
        let third = APPEND_BUDGET_BYTES as usize / 3 + 1_000;
        {
            let mut store = LogStore::open(dir.path(), &me).unwrap();
            store
                .append_synced((1..=20).map(|i| entry(i, third)))
                .unwrap();
            store.append_synced([entry(21, third * 4)]).unwrap();
            // Served from the tail of what was just written.
            let read = store.limited_get_log_entries(1, 22).await.unwrap();
            assert_eq!(indexes(&read), vec![1, 2]);
            let read = store.limited_get_log_entries(21, 22).await.unwrap();
            assert_eq!(
                indexes(&read),
                vec![21],
                "one entry over the budget still goes"
            );
        }
        // Opened again, the tail is empty: read from RocksDB.
        let mut store = LogStore::open(dir.path(), &me).unwrap();
        let read = store.limited_get_log_entries(5, 22).await.unwrap();
        assert_eq!(indexes(&read), vec![5, 6]);
        let read = store.limited_get_log_entries(20, 22).await.unwrap();
        assert_eq!(indexes(&read), vec![20], "21 would go past the budget");
        let read = store.limited_get_log_entries(21, 22).await.unwrap();
        assert_eq!(indexes(&read), vec![21]);
        let read = store.limited_get_log_entries(3, 4).await.unwrap();
        assert_eq!(indexes(&read), vec![3], "never past the end asked for");
        // Everything asked for, when it fits.
        let read = store.try_get_log_entries(1..22).await.unwrap();
        assert_eq!(read.len(), 21);
    }

    #[test]
    fn refuses_a_data_dir_of_another_server_or_cluster() {
        let dir = tempfile::tempdir().unwrap();
        let one = Identity {
            server_id: 1,
            members: [1, 2, 3].into(),
        };
        drop(LogStore::open(dir.path(), &one).unwrap());
        let two = Identity {
            server_id: 2,
            ..one.clone()
        };
        let err = LogStore::open(dir.path(), &two).err().unwrap().to_string();
        assert!(err.contains("belongs to server 1"), "{err}");
        let other = Identity {
            server_id: 1,
            members: [1, 2].into(),
        };
        let err = LogStore::open(dir.path(), &other)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("cluster of servers [1, 2, 3]"), "{err}");
        assert!(LogStore::open(dir.path(), &one).is_ok());
    }
}
