//! Raft between servers: the channels and RPC to each peer, and the checks
//! on what a peer sends before openraft sees it (`inbound` for terms,
//! indexes and entries, `snapshot_receiver` for snapshots).
//!
//! - `network`: each peer dialled at its membership address or its
//!   `--peer-via` override; AppendEntries on one long-lived stream per
//!   follower, each timed by its size.
//! - `inbound`: terms and indexes near overflow or far ahead of the
//!   receiver's, senders that are not members, memberships other than the
//!   configured one, entries out of order, bytes that are not a log entry.
//! - `snapshot_receiver`: snapshot chunks gathered in order and within
//!   bounds, and decoded as a check before openraft installs them.

pub mod inbound;
pub mod network;
pub mod snapshot_receiver;
#[cfg(test)]
pub mod stand_in;
