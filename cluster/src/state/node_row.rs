//! A node as the state keeps it: the wire type's fields in one allocation.
//!
//! Every server keeps every node, so a node's bytes are multiplied by the
//! fleet. The wire type `Node` holds five `String`s of its own and its
//! attributes in a `BTreeMap`, whose first leaf alone has room for eleven
//! entries: about a kilobyte for a node with four attributes. Here the
//! strings are `SmolStr`s, kept inside the row when they are up to 23 bytes
//! (ids, datacenters, classes, nodesim's attributes), and the attributes a
//! sorted slice of exactly their length: about 370 bytes, most nodes in two
//! allocations. The row becomes a `Node` again only at the edges (an answer,
//! a snapshot).

use smol_str::SmolStr;
use stampede_proto::{Node, Resources};

use super::Id;

/// A registered node; its fields are `Node`'s.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRow {
    pub id: Id,
    pub name: SmolStr,
    pub datacenter: SmolStr,
    pub node_class: SmolStr,
    pub resources: Option<Resources>,
    /// By key, as the wire type's map orders them.
    pub attributes: Box<[(SmolStr, SmolStr)]>,
    pub status: i32,
    pub ineligible: bool,
    pub create_index: u64,
    pub modify_index: u64,
}

impl From<Node> for NodeRow {
    fn from(n: Node) -> Self {
        Self {
            id: Id::from(n.id),
            name: SmolStr::from(n.name),
            datacenter: SmolStr::from(n.datacenter),
            node_class: SmolStr::from(n.node_class),
            resources: n.resources,
            attributes: n
                .attributes
                .into_iter()
                .map(|(k, v)| (SmolStr::from(k), SmolStr::from(v)))
                .collect(),
            status: n.status,
            ineligible: n.ineligible,
            create_index: n.create_index,
            modify_index: n.modify_index,
        }
    }
}

impl NodeRow {
    /// The node as the wire type, for an answer or a snapshot.
    pub fn to_proto(&self) -> Node {
        Node {
            id: self.id.to_string(),
            name: self.name.to_string(),
            datacenter: self.datacenter.to_string(),
            node_class: self.node_class.to_string(),
            resources: self.resources,
            attributes: self
                .attributes
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
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

    #[test]
    fn a_node_comes_back_as_it_went_in() {
        let node = Node {
            id: "n1".into(),
            name: "a name longer than twenty-three bytes, kept by reference".into(),
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
        };
        let row = NodeRow::from(node.clone());
        assert_eq!(row.to_proto(), node);
        let keys: Vec<&str> = row.attributes.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["a", "b", "unique.hostname"], "sorted by key");
    }

    #[test]
    fn a_row_is_a_third_of_the_wire_type() {
        // The row itself; its short strings and its attributes' are inside
        // it or its one slice.
        assert!(std::mem::size_of::<NodeRow>() <= 176);
    }
}
