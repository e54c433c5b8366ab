//! Starts a cluster of real `cluster serve` processes on this machine, on free
//! 127.0.0.1 ports with their own data dirs: for `cluster dev`, tests and
//! capacity runs. Processes still running when the `LocalCluster` is dropped
//! are killed.
//!
//! Faults to inject: `kill` (kill -9) and `spawn` again on the same data dir,
//! `pause`/`resume` (SIGSTOP/SIGCONT), and, for a cluster started with
//! [`LocalCluster::start_with_links`], `partition`/`heal`, which cut a
//! server's peer links (the proxy in [`links`]).
//!
//! With the cargo feature `testing`, the module `testing` is the harness the
//! workspace's integration tests share.
//!
//! - [`cluster`]: [`LocalCluster`]: starting it and (re)spawning its
//!   servers ([`ServerProc`], each a process and where it lives); its faults
//!   and stops (`cluster/faults.rs`) and what its servers say over HTTP
//!   (`cluster/status.rs`);
//! - [`credentials`]: the cluster's CA, certificates and tokens, and an HTTP
//!   client that presents them;
//! - [`bins`]: finding the workspace's binaries and what a `cluster` binary
//!   takes;
//! - [`ports`]: free ports below the ephemeral range, for servers that are
//!   killed and started again on the same address;
//! - [`process`]: this machine's side: stopping a child gracefully,
//!   threads per colocated server;
//! - [`links`] and [`delay`]: proxies for partitions and link latency.

pub mod bins;
pub mod cluster;
pub mod credentials;
pub mod delay;
mod error;
pub mod links;
pub mod ports;
pub mod process;
mod server;
#[cfg(feature = "testing")]
pub mod testing;

pub use bins::sibling_bin;
pub use cluster::status::{metric_value, StatusReport};
pub use cluster::{LaunchOptions, LocalCluster};
pub use credentials::{http_client, make_tls_dir, security_in};
pub use error::LaunchError;
pub use process::{colocated_threads, terminate};
pub use server::{NodeId, ServerProc};
