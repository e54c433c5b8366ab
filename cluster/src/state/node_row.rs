//! A node as the state keeps it: what the server reads of it as fields,
//! the rest as its wire bytes.
//!
//! Every server keeps every node, so a node's bytes are multiplied by the
//! fleet. The wire type `Node` holds five `String`s of its own and its
//! attributes in a `BTreeMap`, whose first leaf alone has room for eleven
//! entries: about a kilobyte for a node with four attributes, and its
//! secret's hash was an entry of a table of its own beside it. Here the
//! fields the scheduler and the leader read are `SmolStr`s, kept inside the
//! row when they are up to 23 bytes (ids, datacenters, classes), and what
//! nothing on a server reads (the name and the attributes) stays
//! protobuf-encoded in one slice, decoded only when the node is answered or
//! snapshotted: about 300 bytes a node, in two allocations.

use prost::Message;
use smol_str::SmolStr;
use stampede_proto::node_secret::SecretHash;
use stampede_proto::{Node, Resources};

use super::Id;

/// A registered node: `Node`'s fields, and the hash of its secret.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRow {
    pub id: Id,
    pub datacenter: SmolStr,
    pub node_class: SmolStr,
    pub resources: Option<Resources>,
    pub status: i32,
    pub ineligible: bool,
    pub create_index: u64,
    pub modify_index: u64,
    /// The SHA-256 of the secret the node registered with (node identity;
    /// `None` for a node registered before it). Never part of the `Node`
    /// the row becomes, so no read of a node returns it.
    pub secret: Option<SecretHash>,
    /// `Node.name` and `Node.attributes`, encoded as a `Node` with only them.
    pub described: Box<[u8]>,
}

impl NodeRow {
    /// `node` as a row, with its secret's hash.
    pub fn new(node: &Node, secret: Option<SecretHash>) -> Self {
        let described = Node {
            name: node.name.clone(),
            attributes: node.attributes.clone(),
            ..Default::default()
        }
        .encode_to_vec()
        .into_boxed_slice();
        Self {
            id: Id::from(node.id.as_str()),
            datacenter: SmolStr::from(node.datacenter.as_str()),
            node_class: SmolStr::from(node.node_class.as_str()),
            resources: node.resources,
            status: node.status,
            ineligible: node.ineligible,
            create_index: node.create_index,
            modify_index: node.modify_index,
            secret,
            described,
        }
    }

    /// The node as the wire type, for an answer or a snapshot (without its
    /// secret).
    pub fn to_proto(&self) -> Node {
        // Bytes this row encoded itself.
        let described = Node::decode(&*self.described).unwrap_or_default();
        Node {
            id: self.id.to_string(),
            name: described.name,
            datacenter: self.datacenter.to_string(),
            node_class: self.node_class.to_string(),
            resources: self.resources,
            attributes: described.attributes,
            status: self.status,
            ineligible: self.ineligible,
            create_index: self.create_index,
            modify_index: self.modify_index,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> Node {
        Node {
            id: "n1".into(),
            name: "a name longer than twenty-three bytes".into(),
            datacenter: "dc1".into(),
            node_class: "".into(),
            resources: Some(Resources {
                cpu_mhz: 4000,
                memory_mb: 8192,
            }),
            attributes: [("b", "2"), ("a", "1"), ("unique.hostname", "n1")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            status: 1,
            ineligible: true,
            create_index: 3,
            modify_index: 7,
        }
    }

    #[test]
    fn a_node_comes_back_as_it_went_in_without_its_secret() {
        let row = NodeRow::new(&node(), Some([7; 32]));
        assert_eq!(row.to_proto(), node());
        assert_eq!(row.secret, Some([7; 32]));
        let bare = Node {
            id: "n2".into(),
            ..Default::default()
        };
        assert_eq!(NodeRow::new(&bare, None).to_proto(), bare);
    }

    #[test]
    fn a_row_is_small() {
        // The row itself; its short strings are inside it, the name and
        // attributes in its one slice.
        assert!(std::mem::size_of::<NodeRow>() <= 176);
    }
}
