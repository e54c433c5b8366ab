//! What raft keeps: the log, vote and commit markers on RocksDB (with the
//! newest entries in memory beside them) and the latest snapshot on disk.
//! It knows no clients: the state machine that applies committed entries
//! (and finishes the writes waiting on them) is `raft::state_machine`,
//! beside this folder.

pub mod error;
pub mod log_store;
pub mod log_tail;
pub mod snapshot_store;
pub mod vote_recovery;
