//! Node identity, as Nomad's node SecretID: a node registers with a secret,
//! the servers keep only its SHA-256, and every later call that acts for
//! the node carries the secret. A client certificate and a write token
//! alone then cannot act for another node.
//!
//! Agents that run many nodes (nodesim, loadgen) keep no secret per node:
//! each is derived from one key of the process and the node's id
//! ([`NodeKey::secret`]), so it costs no memory per node, and a key kept in
//! a file lets a restarted process act for its nodes again.

use std::path::Path;

use sha2::{Digest, Sha256};

/// Shortest secret_id a server takes, in bytes.
pub const MIN_SECRET_LEN: usize = 16;
/// Longest secret_id a server takes, in bytes.
pub const MAX_SECRET_LEN: usize = 128;

/// The SHA-256 of a secret, as the servers keep it.
pub type SecretHash = [u8; 32];

/// What the servers keep of `secret_id`.
pub fn hash(secret_id: &str) -> SecretHash {
    Sha256::digest(secret_id.as_bytes()).into()
}

/// Why a secret_id is not one a server takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadSecret {
    #[error("is required: give the node's secret ({MIN_SECRET_LEN} to {MAX_SECRET_LEN} bytes of printable ASCII)")]
    Missing,
    #[error("is {0} bytes long; give {MIN_SECRET_LEN} to {MAX_SECRET_LEN}")]
    Length(usize),
    #[error("holds a byte that is not printable ASCII (at {0})")]
    NotPrintable(usize),
}

/// Checks a secret_id's form: 16 to 128 bytes of printable ASCII (space to
/// `~`), so it is as easy to keep in a file or a variable as a token.
pub fn check(secret_id: &str) -> Result<(), BadSecret> {
    let len = secret_id.len();
    if len == 0 {
        return Err(BadSecret::Missing);
    }
    if !(MIN_SECRET_LEN..=MAX_SECRET_LEN).contains(&len) {
        return Err(BadSecret::Length(len));
    }
    match secret_id.bytes().position(|b| !(b' '..=b'~').contains(&b)) {
        Some(at) => Err(BadSecret::NotPrintable(at)),
        None => Ok(()),
    }
}

/// One process's key, from which the secret of each of its nodes is
/// derived.
#[derive(Clone)]
pub struct NodeKey([u8; 32]);

/// Never printed: anyone with the key acts for every node it derives.
impl std::fmt::Debug for NodeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NodeKey(..)")
    }
}

/// A key file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: holds {len} bytes; a key needs at least {MIN_SECRET_LEN}")]
    TooShort { path: String, len: usize },
}

impl NodeKey {
    /// A new random key: the nodes' secrets last as long as the process.
    pub fn random() -> Self {
        Self(rand::random())
    }

    /// The key kept in `path` (any bytes, at least 16, surrounding
    /// whitespace ignored), so that another run acts for the same nodes.
    pub fn from_file(path: &Path) -> Result<Self, KeyFileError> {
        let shown = || path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| KeyFileError::Read {
            path: shown(),
            source,
        })?;
        let key = bytes.trim_ascii();
        if key.len() < MIN_SECRET_LEN {
            return Err(KeyFileError::TooShort {
                path: shown(),
                len: key.len(),
            });
        }
        Ok(Self(Sha256::digest(key).into()))
    }

    /// Node `node_id`'s secret_id: hex of SHA-256(key || node id), 64
    /// characters.
    pub fn secret(&self, node_id: &str) -> String {
        let mut h = Sha256::new();
        h.update(self.0);
        h.update(node_id.as_bytes());
        hex::encode(h.finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_derived_secret_is_valid_stable_and_the_nodes_own() {
        let key = NodeKey::random();
        let a = key.secret("sim-1");
        check(&a).unwrap();
        assert_eq!(a.len(), 64);
        assert_eq!(a, key.secret("sim-1"));
        assert_ne!(a, key.secret("sim-2"));
        assert_ne!(a, NodeKey::random().secret("sim-1"));
    }

    #[test]
    fn a_key_file_gives_the_same_secrets_every_time() {
        let dir = std::env::temp_dir().join(format!("node-key-{:016x}", rand::random::<u64>()));
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join("key");
        std::fs::write(&path, "0123456789abcdef0123\n").unwrap();
        let one = NodeKey::from_file(&path).unwrap().secret("n1");
        let two = NodeKey::from_file(&path).unwrap().secret("n1");
        assert_eq!(one, two);
        std::fs::write(&path, "short\n").unwrap();
        let err = NodeKey::from_file(&path).unwrap_err();
        assert!(
            matches!(err, KeyFileError::TooShort { len: 5, .. }),
            "{err}"
        );
        assert!(NodeKey::from_file(&dir.join("none")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_16_to_128_printable_bytes_are_a_secret() {
        assert_eq!(check(""), Err(BadSecret::Missing));
        assert_eq!(check("short"), Err(BadSecret::Length(5)));
        assert_eq!(check(&"x".repeat(129)), Err(BadSecret::Length(129)));
        assert_eq!(
            check("0123456789abcdef\n"),
            Err(BadSecret::NotPrintable(16))
        );
        assert_eq!(check("0123456789abcdé"), Err(BadSecret::NotPrintable(14)));
        check("0123456789abcdef").unwrap();
        check(&"~".repeat(128)).unwrap();
        check("a secret with spaces").unwrap();
    }

    #[test]
    fn the_hash_is_sha256() {
        assert_eq!(
            hex::encode(hash("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
