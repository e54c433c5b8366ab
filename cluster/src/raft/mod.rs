//! Raft: openraft's type configuration (what a log entry carries and what
//! applying it returns) here, and the parts in openraft's order, each
//! importing only the parts listed above it:
//!
//! - `storage`: what raft keeps, and knows no clients: the RocksDB log
//!   store and the snapshot store.
//! - `wire`: the network between servers; what peers send is checked
//!   before openraft sees it: `inbound` for terms, indexes and entries,
//!   `snapshot_receiver` for snapshots.
//! - `write`: the proposer through which every write reaches the log (with
//!   `client_write`, the entry each client write becomes), forwarding a
//!   follower's writes over the wire.
//! - `state_machine`: applies committed entries to the state store, and
//!   through the write path's `client_write` and `tickets` finishes the
//!   writes this server forwarded; it stands on `storage` (its snapshots)
//!   and `write`.
//!
//! [`metrics`] and raft's own [`runtime`] serve them all; [`contact`] keeps
//! whether this server is in touch with the cluster, from raft's metrics;
//! [`election`] starts a campaign only when a quorum agrees the leader is
//! gone (pre-vote), in place of openraft's own election timer;
//! [`catch_up`] purges the log behind the snapshot, keeping a window sized
//! from the write rate, in place of openraft's own purge.

pub mod catch_up;
pub mod contact;
pub mod election;
pub mod metrics;
pub mod runtime;
mod state_machine;
mod storage;
mod wire;
mod write;

/// Most bytes of entries one AppendEntries carries. openraft 0.9 gives each
/// AppendEntries one heartbeat interval to complete and retries the same
/// batch when it does not, so a follower far behind on large entries (a
/// plan of 10,000 allocations is megabytes) would never catch up: the
/// network sends a prefix within this budget and reports it as a partial
/// success, and the log store reads no more than it for one message
/// (openraft asks for up to 300 entries, tens of MiB of plans, to send a
/// few of them).
pub const APPEND_BUDGET_BYTES: u64 = 256 * 1024;

pub use self::state_machine::StateMachine;
pub use self::storage::error::StoreError;
pub use self::wire::network::{
    NetworkFactory, PeerChannels, RAFT_CONNECTION_MARKER, RAFT_H2_WINDOW,
};
pub use self::wire::snapshot_receiver::{ChunkRefused, SnapshotReceiver};
pub use self::write::proposer::{LocalProposer, ProposeError, Proposer};
pub use self::write::tickets::Tickets;
// Modules whose own paths the integration tests and benches name.
pub use self::storage::log_store;
pub use self::storage::vote_recovery;
pub use self::wire::inbound;
pub use self::write::client_write;

use std::fmt;

use openraft::BasicNode;
use prost::Message;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use stampede_proto::LogEntry;

/// A server's id in the cluster (`--id`).
pub type NodeId = u64;

/// How far a peer's term may be ahead of the receiver's (checked on what
/// peers send, `inbound`, and on a vote recovered offline,
/// `vote_recovery`): a member cut off from the others campaigns about
/// twice a second, so 2^24 terms is three months of it. Far enough that no
/// genuine member is refused; near enough that no term reaches overflow.
pub const MAX_TERM_AHEAD: u64 = 1 << 24;

openraft::declare_raft_types!(
    pub TypeConfig:
        D = Command,
        R = Applied,
        NodeId = NodeId,
        Node = BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = self::storage::snapshot_store::SnapshotData,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type Raft = openraft::Raft<TypeConfig>;
pub type LogId = openraft::LogId<NodeId>;
pub type Entry = openraft::Entry<TypeConfig>;
pub type StorageError = openraft::StorageError<NodeId>;
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, BasicNode>;
pub type StoredMembership = openraft::StoredMembership<NodeId, BasicNode>;

/// A replicated command: our protobuf `LogEntry`, carried as its protobuf
/// encoding, which is what the raft log and the wire hold. openraft moves
/// an entry through serde many times: on the leader it is appended, read
/// back from the log for each follower's replication and again to apply,
/// and sent to each follower. With the bytes at hand each of those is a
/// copy; the entry is decoded once, where it is applied (and where a peer's
/// message is checked, see [`inbound`]), and a proposal is encoded once.
#[derive(Clone)]
pub struct Command {
    bytes: bytes::Bytes,
    decoded: std::sync::OnceLock<std::sync::Arc<LogEntry>>,
}

impl Command {
    /// The command for `entry`, encoded once here.
    pub fn new(entry: LogEntry) -> Self {
        Self {
            bytes: entry.encode_to_vec().into(),
            decoded: std::sync::OnceLock::from(std::sync::Arc::new(entry)),
        }
    }

    /// The command whose encoding is `bytes`, decoded when first asked for.
    pub fn from_bytes(bytes: impl Into<bytes::Bytes>) -> Self {
        Self {
            bytes: bytes.into(),
            decoded: std::sync::OnceLock::new(),
        }
    }

    /// The entry, decoded from its bytes the first time; an error when the
    /// bytes are not a `LogEntry`.
    pub fn entry(&self) -> Result<&LogEntry, prost::DecodeError> {
        if let Some(entry) = self.decoded.get() {
            return Ok(entry);
        }
        let entry = LogEntry::decode(&self.bytes[..])?;
        Ok(self.decoded.get_or_init(|| std::sync::Arc::new(entry)))
    }

    /// The length of its encoding.
    pub fn encoded_len(&self) -> usize {
        self.bytes.len()
    }

    /// For a batch, the encoded length of each of its commands, read off
    /// the bytes instead of measuring every allocation of the decoded
    /// entries again: `LogEntry.batch` (field 13) holding
    /// `BatchEntry.entries` (field 1), each length-delimited. `None` for a
    /// single command, or bytes that are not a batch.
    pub fn batch_lengths(&self) -> Option<Vec<usize>> {
        use prost::encoding::{decode_key, decode_varint, WireType};
        let mut bytes = &self.bytes[..];
        let (field, wire) = decode_key(&mut bytes).ok()?;
        if field != 13 || wire != WireType::LengthDelimited {
            return None;
        }
        let len = usize::try_from(decode_varint(&mut bytes).ok()?).ok()?;
        let mut batch = bytes.get(..len)?;
        let mut lengths = Vec::new();
        while !batch.is_empty() {
            let (field, wire) = decode_key(&mut batch).ok()?;
            if field != 1 || wire != WireType::LengthDelimited {
                return None;
            }
            let len = usize::try_from(decode_varint(&mut batch).ok()?).ok()?;
            batch = batch.get(len..)?;
            lengths.push(len);
        }
        Some(lengths)
    }

    /// The message type, the `type` label of raft entry metrics.
    pub fn type_name(&self) -> &'static str {
        match self.entry() {
            Ok(e) => e.msg.as_ref().map_or("empty", |m| m.type_name()),
            Err(_) => "undecodable",
        }
    }
}

impl PartialEq for Command {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
    }
}

impl fmt::Debug for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Command({}, {} bytes)",
            self.type_name(),
            self.bytes.len()
        )
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.type_name())
    }
}

impl Serialize for Command {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.bytes)
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
                Ok(Command::from_bytes(bytes::Bytes::copy_from_slice(v)))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Command, E> {
                Ok(Command::from_bytes(v))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Command, A::Error> {
                let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(b) = seq.next_element::<u8>()? {
                    bytes.push(b);
                }
                Ok(Command::from_bytes(bytes))
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

/// Resolves once this server names a leader other than `id` (or none):
/// what a call sent on to `id` races, since a leader that was paused or cut
/// off never answers. (Server metrics change with the leadership only.)
pub async fn leader_replaced(raft: &Raft, id: NodeId) {
    let mut leadership = raft.server_metrics();
    let _ = leadership.wait_for(|m| m.current_leader != Some(id)).await;
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
        let cmd = Command::new(LogEntry {
            msg: Some(Msg::NodeRegister(NodeRegisterEntry {
                ticket: 0,
                node: Some(Node {
                    id: "n1".into(),
                    datacenter: "dc1".into(),
                    ..Default::default()
                }),
                evals: vec![],
                secret_hash: Vec::new(),
            })),
        });
        let bytes = bincode::serialize(&cmd).unwrap();
        // bincode frames the bytes with a u64 length: the rest is the protobuf encoding.
        assert_eq!(&bytes[8..], cmd.entry().unwrap().encode_to_vec().as_slice());
        let back: Command = bincode::deserialize(&bytes).unwrap();
        assert_eq!(back, cmd);
        assert_eq!(back.entry().unwrap(), cmd.entry().unwrap());
        assert_eq!(back.type_name(), "node_register");
    }

    #[test]
    fn a_batch_reads_its_commands_lengths_off_its_bytes() {
        let node = |id: &str| LogEntry {
            msg: Some(Msg::NodeRegister(NodeRegisterEntry {
                ticket: 7,
                node: Some(Node {
                    id: id.into(),
                    datacenter: "dc1".into(),
                    ..Default::default()
                }),
                evals: vec![],
                secret_hash: Vec::new(),
            })),
        };
        // Sizes on both sides of the one-byte varint limit (127).
        let entries = vec![node("a"), node(&"b".repeat(200)), node(&"c".repeat(20_000))];
        let expected: Vec<usize> = entries.iter().map(|e| e.encoded_len()).collect();
        let batch = Command::new(LogEntry {
            msg: Some(Msg::Batch(stampede_proto::BatchEntry { entries })),
        });
        assert_eq!(batch.batch_lengths(), Some(expected));
        assert_eq!(Command::new(node("a")).batch_lengths(), None);
        assert_eq!(
            Command::from_bytes(vec![0x6a, 0x05, 0x0a]).batch_lengths(),
            None
        );
        assert_eq!(Command::from_bytes(vec![0x6a, 0xff]).batch_lengths(), None);
        assert_eq!(Command::from_bytes(Vec::new()).batch_lengths(), None);
    }

    #[test]
    fn command_refuses_bytes_that_are_not_a_log_entry_when_read() {
        let junk = bincode::serialize(&serde_bytes_like(&[0xff, 0xff, 0xff])).unwrap();
        // Carried as it came (a log read for replication does not decode);
        // reading the entry says what is wrong.
        let cmd = bincode::deserialize::<Command>(&junk).unwrap();
        assert!(cmd.entry().is_err());
        assert_eq!(cmd.type_name(), "undecodable");
    }

    fn serde_bytes_like(b: &[u8]) -> Vec<u8> {
        b.to_vec()
    }
}
