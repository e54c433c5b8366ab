//! The `cluster` tests that start real server processes: one test binary
//! (one link of the harness and its dependencies, not one per file), a
//! module per concern.

mod common;

mod bad_input;
mod blocked_evals;
mod blocking_queries;
mod catch_up;
mod cli;
mod client_updates;
mod elections;
mod eval_cancelation;
mod failover;
mod forged_raft;
mod gc;
mod heartbeats;
mod hostile_edge;
mod job_trace;
mod node_call_stream;
mod node_identity;
mod parked_flood;
mod placement;
mod plan_apply;
mod properties;
mod raft_cluster;
mod raw_bytes;
mod security;
mod worker_backoff;
mod workers;
mod write_outcomes;
