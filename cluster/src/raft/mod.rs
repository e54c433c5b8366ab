//! Raft: openraft's type configuration (what a log entry carries and what
//! applying it returns), the RocksDB log store, the snapshot store, the state
//! machine, the network between servers and the proposer through which every
//! write reaches the log (with `client_write`, the entry each client write
//! becomes). What peers send is checked before openraft sees it: `inbound`
//! for terms, indexes and entries, `snapshot_receiver` for snapshots.

pub mod batcher;
pub mod client_write;
pub mod error;
pub mod inbound;
pub mod log_store;
pub mod metrics;
pub mod network;
pub mod proposer;
pub mod runtime;
pub mod snapshot_receiver;
pub mod snapshot_store;
pub mod state_machine;

use std::fmt;
use std::io::Cursor;

use openraft::BasicNode;
use prost::Message;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use stampede_proto::LogEntry;

/// A server's id in the cluster (`--id`).
pub type NodeId = u64;

openraft::declare_raft_types!(
    pub TypeConfig:
        D = Command,
        R = Applied,
        NodeId = NodeId,
        Node = BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type Raft = openraft::Raft<TypeConfig>;
pub type LogId = openraft::LogId<NodeId>;
pub type Entry = openraft::Entry<TypeConfig>;
pub type StorageError = openraft::StorageError<NodeId>;
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, BasicNode>;
pub type StoredMembership = openraft::StoredMembership<NodeId, BasicNode>;

/// A replicated command: our protobuf `LogEntry`. It travels through openraft's
/// serde as its protobuf encoding, so the raft log holds exactly the wire bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Command(pub LogEntry);

impl Command {
    /// The message type, the `type` label of raft entry metrics.
    pub fn type_name(&self) -> &'static str {
        self.0.msg.as_ref().map_or("empty", |m| m.type_name())
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.type_name())
    }
}

impl Serialize for Command {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0.encode_to_vec())
    }
}

impl<'de> Deserialize<'de> for Command {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct BytesVisitor;
        impl<'de> serde::de::Visitor<'de> for BytesVisitor {
            type Value = Command;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a protobuf-encoded LogEntry")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Command, E> {
                LogEntry::decode(v).map(Command).map_err(E::custom)
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Command, E> {
                self.visit_bytes(&v)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Command, A::Error> {
                let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(b) = seq.next_element::<u8>()? {
                    bytes.push(b);
                }
                self.visit_bytes(&bytes)
            }
        }
        d.deserialize_byte_buf(BytesVisitor)
    }
}

/// Where the leader is, as this server's raft knows it.
#[derive(Clone, Debug, PartialEq)]
pub enum LeaderView {
    /// No leader is known (an election may be on).
    Unknown,
    /// This server.
    Here,
    /// Another server, at this address.
    Elsewhere { id: NodeId, addr: String },
    /// Another server that the membership does not list.
    Unlisted(NodeId),
}

/// Reads raft's server metrics, which change with the vote and leadership
/// only, so a caller on the hot path borrows them without a copy.
pub fn leader_view(raft: &Raft) -> LeaderView {
    let metrics = raft.server_metrics();
    let m = metrics.borrow();
    match m.current_leader {
        None => LeaderView::Unknown,
        Some(l) if l == m.id => LeaderView::Here,
        Some(l) => match m.membership_config.membership().get_node(&l) {
            Some(node) => LeaderView::Elsewhere {
                id: l,
                addr: node.addr.clone(),
            },
            None => LeaderView::Unlisted(l),
        },
    }
}

/// What applying a command returns to its writer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Applied {
    pub index: u64,
}

impl fmt::Display for Applied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "applied at {}", self.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stampede_proto::{log_entry::Msg, Node, NodeRegisterEntry};

    #[test]
    fn command_round_trips_through_bincode_as_protobuf_bytes() {
        let cmd = Command(LogEntry {
            msg: Some(Msg::NodeRegister(NodeRegisterEntry {
                node: Some(Node {
                    id: "n1".into(),
                    datacenter: "dc1".into(),
                    ..Default::default()
                }),
                evals: vec![],
            })),
        });
        let bytes = bincode::serialize(&cmd).unwrap();
        // bincode frames the bytes with a u64 length: the rest is the protobuf encoding.
        assert_eq!(&bytes[8..], cmd.0.encode_to_vec().as_slice());
        let back: Command = bincode::deserialize(&bytes).unwrap();
        assert_eq!(back, cmd);
        assert_eq!(back.type_name(), "node_register");
    }

    #[test]
    fn command_rejects_bytes_that_are_not_a_log_entry() {
        let junk = bincode::serialize(&serde_bytes_like(&[0xff, 0xff, 0xff])).unwrap();
        assert!(bincode::deserialize::<Command>(&junk).is_err());
    }

    fn serde_bytes_like(b: &[u8]) -> Vec<u8> {
        b.to_vec()
    }
}
