//! The stampede server under test: a Nomad-style control plane replicated with
//! openraft, its log and snapshots on RocksDB, served over tonic gRPC.
//!
//! Start one with [`server::serve`] (listeners and a shutdown future given, for
//! tests and benches) or [`server::run`] (what `cluster serve` does); start a
//! local cluster of real processes with [`launcher::LocalCluster`].

// tonic handlers must return `Result<_, tonic::Status>`, a large error type;
// boxing it everywhere would only add noise at every gRPC boundary.
#![allow(clippy::result_large_err)]

pub mod alloc_updates;
pub mod blocked_evals;
pub mod blocking;
pub mod broker;
pub mod config;
pub mod control_plane;
pub mod deployment_watcher;
pub mod dev;
pub mod error;
pub mod heartbeat;
pub mod http;
pub mod jobspec;
pub mod leader_rpc;
pub mod log_store;
pub mod metrics;
pub mod network;
pub mod ops;
pub mod plan_apply;
pub mod proposer;
pub mod rpc;
pub mod scheduler;
pub mod server;
pub mod snapshot_store;
pub mod state;
pub mod state_machine;
pub mod types;
pub mod validate;
pub mod worker;

/// Local clusters of real processes; its own crate so that tools which spawn
/// clusters need not link RocksDB.
pub use stampede_launch as launcher;
