//! Node identity: the secret_id each simulated node registers with and
//! sends with every call that acts for it. No node keeps its secret: each
//! is derived when a call is built from one key of the process and the
//! node's id (`stampede_proto::node_secret::NodeKey`), so it costs no memory
//! per node. With `--secret-key-file` the key outlives the process: a
//! nodesim restarted with the same `--id-prefix` acts for its nodes again.

use std::path::Path;

use stampede_proto::node_secret::{KeyFileError, NodeKey};
use stampede_proto::NodeSecret;

use crate::profile::{node_id, Shard};

/// The fleet's key, and what turns a node slot into its node's id.
pub(crate) struct Identity {
    key: NodeKey,
    id_prefix: String,
    shard: Shard,
}

impl Identity {
    /// The key in `key_file`, or a random one for this process only.
    pub(crate) fn new(
        key_file: Option<&Path>,
        id_prefix: String,
        shard: Shard,
    ) -> Result<Self, KeyFileError> {
        let key = match key_file {
            Some(path) => NodeKey::from_file(path)?,
            None => NodeKey::random(),
        };
        Ok(Self {
            key,
            id_prefix,
            shard,
        })
    }

    /// Node `node_id`'s secret_id.
    pub(crate) fn secret(&self, node_id: &str) -> String {
        self.key.secret(node_id)
    }

    /// The id and secret of the node in `slot` (this shard's `slot`th
    /// node), for its allocation updates.
    pub(crate) fn of_slot(&self, slot: u32) -> NodeSecret {
        let id = node_id(&self.id_prefix, self.shard.index_of(slot));
        NodeSecret {
            secret_id: self.secret(&id),
            node_id: id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_its_shards_node_and_a_key_file_gives_the_same_secrets() {
        let shard: Shard = "1/3".parse().unwrap();
        let dir = std::env::temp_dir().join(format!("nodesim-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("key");
        std::fs::write(&path, "a key for the whole fleet\n").unwrap();
        let one = Identity::new(Some(&path), "sim".into(), shard).unwrap();
        let two = Identity::new(Some(&path), "sim".into(), shard).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        // Slot 2 of shard 1/3 is node 1 + 2 * 3.
        let of = one.of_slot(2);
        assert_eq!(of.node_id, "sim-7");
        assert_eq!(of.secret_id, two.secret("sim-7"));
        let random = Identity::new(None, "sim".into(), shard).unwrap();
        assert_ne!(random.secret("sim-7"), of.secret_id);
        stampede_proto::node_secret::check(&of.secret_id).unwrap();
    }
}
