//! What raft keeps: the log, vote and commit markers on RocksDB (with the
//! newest entries in memory beside them), the latest snapshot on disk, and
//! the state machine that applies committed entries to the state store.

pub mod error;
pub mod log_store;
pub mod log_tail;
pub mod snapshot_store;
pub mod state_machine;
pub mod vote_recovery;
