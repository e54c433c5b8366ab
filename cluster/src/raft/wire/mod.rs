//! Raft between servers: the channels and RPC to each peer, and the checks
//! on what a peer sends before openraft sees it (`inbound` for terms,
//! indexes and entries, `snapshot_receiver` for snapshots).

pub mod inbound;
pub mod network;
pub mod snapshot_receiver;
#[cfg(test)]
pub mod stand_in;
