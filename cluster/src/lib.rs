//! The stampede server under test: a Nomad-style control plane replicated with
//! openraft, its log and snapshots on RocksDB, served over tonic gRPC.
//!
//! # Layout
//!
//! Each folder is one layer; a layer imports only the layers listed above it,
//! and no module imports, through any chain, a module that imports it back
//! (`scripts/check-imports.sh` checks both). Modules are private where
//! nothing outside the crate names them; a layer re-exports what the layers
//! above it use.
//!
//! - [`model`]: pure helpers on the wire types (the clock, new evaluations,
//!   allocation and deployment predicates) and request validation.
//! - [`state`]: the in-memory state store raft applies to (O(1) `imbl`
//!   snapshots): the type and its tables, with applying entries, what a batch
//!   changed (its watch keys), reads, snapshots and the live store each in a
//!   file of its own; garbage collection and blocking queries.
//! - [`raft`]: openraft's type config and raft metrics, and in openraft's
//!   order: `raft/storage` (the RocksDB log store and the snapshot store,
//!   which know no clients), `raft/wire` (the peer network and the checks
//!   on what peers send), `raft/write` (the proposer that writes through
//!   whichever server leads, its batcher and forwarder, client writes and
//!   the tickets followers wait on), and the state machine beside them
//!   (`raft/state_machine.rs`, which applies entries, finishes forwarded
//!   writes through the write path, reports what it applied to an observer
//!   callback and knows nothing of the control plane).
//! - [`scheduler`]: the pure, seeded scheduler: an evaluation and a state
//!   snapshot in, a plan out; and how a deployment stands.
//! - [`control`]: the control plane as a composition root: it builds the parts,
//!   follows leadership, and starts and stops the leader-only mechanisms in
//!   [`control::leader`] (eval broker, blocked evaluations, heartbeats, plan
//!   applier, client-update batcher, deployment watcher), each handed a small
//!   per-term context, never the whole control plane. Scheduler workers
//!   (`control/worker.rs`) reach the leader only through its `Leader` trait;
//!   leader-only calls are routed, and sent on to the leader, by
//!   `control/routing.rs`.
//! - [`api`]: the gRPC services (the public job, node and deployment API; the
//!   server-to-server scheduling API; the raft peer service) and HTTP, the
//!   accepted connections (TLS, and who called) and who may call what. Errors
//!   of the parts become `tonic::Status` here and nowhere deeper.
//! - [`server`]: `serve(opts, listeners, shutdown)`, put together in named
//!   steps in openraft's order (security, storage, network, raft, the
//!   control plane, the servers), its listeners and how a connection gets
//!   in, the options (the one home of every default) and start-up errors.
//! - [`cli`]: the operator commands, their rendering, job files and
//!   `cluster dev`; it needs only the wire types, the client and validation.
//!
//! Start a server with [`server::serve`] (listeners and a shutdown future
//! given, for tests and benches) or [`server::run`] (what `cluster serve`
//! does). Local clusters of real processes are started by the
//! `stampede-launch` crate, which does not link this one.

/// This binary's build (its commit, and whether the checkout had changes),
/// stamped by the package's build script.
pub const BUILD: stampede_proto::build::Build = stampede_proto::this_build!();

pub mod api;
pub mod cli;
pub mod control;
pub mod model;
pub mod raft;
pub mod scheduler;
pub mod server;
pub mod state;
