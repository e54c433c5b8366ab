//! The stampede server under test: a Nomad-style control plane replicated with
//! openraft, its log and snapshots on RocksDB, served over tonic gRPC.
//!
//! Start one with [`server::serve`] (listeners and a shutdown future given, for
//! tests and benches) or [`server::run`] (what `cluster serve` does); start a
//! local cluster of real processes with [`launcher::LocalCluster`].

pub mod config;
pub mod dev;
pub mod error;
pub mod http;
pub mod launcher;
pub mod log_store;
pub mod metrics;
pub mod network;
pub mod proposer;
pub mod rpc;
pub mod server;
pub mod snapshot_store;
pub mod state;
pub mod state_machine;
pub mod types;
pub mod validate;
