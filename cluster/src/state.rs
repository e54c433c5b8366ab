//! The in-memory state store that raft entries are applied to.
//!
//! Tables are persistent maps (`imbl`): a copy of the whole state is an O(1)
//! clone that shares structure with the live one. Snapshot builders and readers
//! take such a copy and never hold the apply path up.

use std::sync::{Arc, RwLock};

use imbl::OrdMap;
use stampede_proto::{log_entry::Msg, LogEntry, Node, NodeStatus, StateSnapshot, TableIndexes};

/// One consistent version of every table.
#[derive(Clone, Debug, Default)]
pub struct State {
    nodes: OrdMap<String, Arc<Node>>,
    indexes: TableIndexes,
}

impl State {
    /// Applies one command at raft index `index`. Commands were validated before
    /// they were proposed, so applying never fails: every server reaches the
    /// same state from the same log.
    pub fn apply(&mut self, index: u64, entry: &LogEntry) {
        match &entry.msg {
            Some(Msg::NodeRegister(e)) => {
                if let Some(node) = &e.node {
                    self.upsert_node(index, node.clone());
                }
            }
            None => {}
        }
    }

    fn upsert_node(&mut self, index: u64, mut node: Node) {
        node.create_index = self
            .nodes
            .get(&node.id)
            .map_or(index, |old| old.create_index);
        node.modify_index = index;
        if node.status == NodeStatus::Unspecified as i32 {
            node.status = NodeStatus::Ready as i32;
        }
        self.nodes.insert(node.id.clone(), Arc::new(node));
        self.indexes.nodes = index;
    }

    pub fn node(&self, id: &str) -> Option<Arc<Node>> {
        self.nodes.get(id).cloned()
    }

    /// Every node, in id order.
    pub fn nodes(&self) -> impl Iterator<Item = &Arc<Node>> {
        self.nodes.values()
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    pub fn indexes(&self) -> &TableIndexes {
        &self.indexes
    }

    pub fn to_snapshot(&self) -> StateSnapshot {
        StateSnapshot {
            nodes: self.nodes.values().map(|n| Node::clone(n)).collect(),
            indexes: Some(self.indexes),
        }
    }

    pub fn from_snapshot(snap: StateSnapshot) -> Self {
        Self {
            nodes: snap
                .nodes
                .into_iter()
                .map(|n| (n.id.clone(), Arc::new(n)))
                .collect(),
            indexes: snap.indexes.unwrap_or_default(),
        }
    }
}

/// The live state, shared by the state machine (the one writer) and readers.
#[derive(Debug, Default)]
pub struct StateStore {
    state: RwLock<State>,
}

impl StateStore {
    /// A consistent copy of the current state; cheap, see the module docs.
    pub fn snapshot(&self) -> State {
        self.state.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Runs `f` with the state locked for writing.
    pub fn write<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut guard = self.state.write().unwrap_or_else(|e| e.into_inner());
        f(&mut guard)
    }

    pub fn replace(&self, state: State) {
        self.write(|s| *s = state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stampede_proto::NodeRegisterEntry;

    fn register(id: &str) -> LogEntry {
        LogEntry {
            msg: Some(Msg::NodeRegister(NodeRegisterEntry {
                node: Some(Node {
                    id: id.into(),
                    datacenter: "dc1".into(),
                    ..Default::default()
                }),
            })),
        }
    }

    #[test]
    fn register_keeps_create_index_and_moves_modify_index() {
        let mut s = State::default();
        s.apply(5, &register("a"));
        s.apply(9, &register("a"));
        let a = s.node("a").unwrap();
        assert_eq!((a.create_index, a.modify_index), (5, 9));
        assert_eq!(a.status, NodeStatus::Ready as i32);
        assert_eq!(s.indexes().nodes, 9);
    }

    #[test]
    fn a_copy_does_not_see_later_writes() {
        let store = StateStore::default();
        store.write(|s| s.apply(1, &register("a")));
        let before = store.snapshot();
        store.write(|s| s.apply(2, &register("b")));
        assert_eq!(before.node_count(), 1);
        assert_eq!(store.snapshot().node_count(), 2);
    }

    #[test]
    fn snapshot_round_trip_keeps_every_row_and_index() {
        let mut s = State::default();
        for (i, id) in ["a", "b", "c"].iter().enumerate() {
            s.apply(i as u64 + 1, &register(id));
        }
        let back = State::from_snapshot(s.to_snapshot());
        assert_eq!(back.node_count(), 3);
        assert_eq!(back.indexes().nodes, 3);
        assert_eq!(back.node("b").unwrap().create_index, 2);
    }
}
