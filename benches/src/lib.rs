//! Fixtures shared by the benchmarks in `benches/`.

use stampede_proto::{log_entry::Msg, LogEntry, Node, NodeRegisterEntry, Resources};

/// A node registration as a client would send it.
pub fn node_register(i: u64) -> LogEntry {
    LogEntry {
        msg: Some(Msg::NodeRegister(NodeRegisterEntry {
            node: Some(Node {
                id: format!("bench-node-{i}"),
                name: format!("bench-node-{i}"),
                datacenter: "dc1".into(),
                node_class: "standard".into(),
                resources: Some(Resources {
                    cpu_mhz: 4000,
                    memory_mb: 8192,
                }),
                ..Default::default()
            }),
            evals: vec![],
        })),
    }
}
