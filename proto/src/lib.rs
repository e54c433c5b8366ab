//! Wire types shared by every stampede binary: the domain model, the raft log
//! entry and the gRPC services, generated from `proto/stampede.proto`.

#![allow(clippy::large_enum_variant)]

pub mod v1 {
    tonic::include_proto!("stampede.v1");
}

pub use v1::*;

/// Largest gRPC message any stampede binary sends or accepts. Raft batches of
/// entries and snapshot chunks are large; client reads of 10,000 nodes too.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

impl log_entry::Msg {
    /// The message type's name: the `type` label of raft entry metrics.
    pub fn type_name(&self) -> &'static str {
        match self {
            log_entry::Msg::NodeRegister(_) => "node_register",
        }
    }
}

pub mod client;
