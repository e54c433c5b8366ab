//! What raft keeps: the log, vote and commit markers on RocksDB (with the
//! newest entries in memory beside them) and the latest snapshot on disk.
//! It knows no clients: the state machine that applies committed entries
//! (and finishes the writes waiting on them) is `raft::state_machine`,
//! beside this folder.
//!
//! - `log_store`: the log on RocksDB, synced on a thread of its own
//!   (`WalSyncer`) on the leader and inside the append on a follower.
//! - `log_tail`: the log's newest entries in memory, so replication and
//!   apply read them without the disk.
//! - `snapshot_store`: the latest snapshot, one file; and `SnapshotData`,
//!   a snapshot as openraft carries it (its bytes, and the state they
//!   decode to once checked), freed off raft's threads.
//! - `vote_recovery`: `cluster recover-vote`, offline.

pub mod error;
pub mod log_store;
pub mod log_tail;
pub mod snapshot_store;
pub mod vote_recovery;
