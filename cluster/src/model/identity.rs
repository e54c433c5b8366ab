//! Node identity: whether a call that acts for a node carries the secret
//! the node registered with (see `stampede_proto::node_secret`). A client
//! certificate and a write token say only that the caller is some node
//! agent; the secret says which node.

use rustc_hash::FxHashSet;
use stampede_proto::node_secret::{self, SecretHash};
use stampede_proto::NodeSecret;

use super::validate::{self, InvalidField};

/// Why a node call may not act for a node, naming the node (an id, already
/// validated, so it is printed as is): `PermissionDenied`, but `NotFound`
/// for [`NodeDenied::NoSecret`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeDenied {
    /// The secret is not the one the node registered with.
    #[error("secret_id does not match node {0}")]
    Mismatch(String),
    /// The node was registered before node identity, without a secret: it
    /// must register again (any secret), and its calls carry that one. Its
    /// agent takes this as a node not registered (`NotFound`) and does.
    #[error("node_id: node {0} was registered without a secret_id; register it again with one")]
    NoSecret(String),
    /// An allocation update for a node the call gave no secret of.
    #[error("allocs[{index}]: no secret_id given for node {node} (in secrets)")]
    Unvouched { index: usize, node: String },
}

/// A secret_id's form, named as `field`: required, 16 to 128 bytes of
/// printable ASCII.
pub fn secret_field(field: &str, secret_id: &str) -> Result<(), InvalidField> {
    node_secret::check(secret_id).map_err(|e| InvalidField::new(field, e.to_string()))
}

/// Whether `secret_id` is node `node_id`'s own, given the hash `stored`
/// with the node (`None`: registered without one).
pub fn check(
    stored: Option<&SecretHash>,
    node_id: &str,
    secret_id: &str,
) -> Result<(), NodeDenied> {
    check_hash(stored, node_id, &node_secret::hash(secret_id))
}

/// [`check`] with the secret already hashed: hashed before the state's
/// lock is taken, so the lock is held for a comparison only.
pub fn check_hash(
    stored: Option<&SecretHash>,
    node_id: &str,
    given: &SecretHash,
) -> Result<(), NodeDenied> {
    match stored {
        None => Err(NodeDenied::NoSecret(node_id.to_string())),
        // Not in constant time: what leaks is how much of a SHA-256 matched,
        // which says nothing of the secret itself.
        Some(h) if h == given => Ok(()),
        Some(_) => Err(NodeDenied::Mismatch(node_id.to_string())),
    }
}

/// Whether a registration with `secret_id` may write node `node_id`, which
/// has `stored`: a new node, one registered before node identity, or one
/// registering again with its own secret.
pub fn may_register(
    stored: Option<&SecretHash>,
    node_id: &str,
    secret_id: &str,
) -> Result<(), NodeDenied> {
    match stored {
        None => Ok(()),
        Some(_) => check(stored, node_id, secret_id),
    }
}

/// What an allocation update's `secrets` vouch for, once their form is
/// checked: each node with its secret's hash, to compare with the state's.
#[derive(Debug)]
pub struct Vouched<'a> {
    pub hashes: Vec<(&'a str, SecretHash)>,
    /// The nodes named, to look each allocation's node up in (a node's own
    /// call names one; a follower's forwarded batch, many).
    pub nodes: FxHashSet<&'a str>,
}

/// Checks the form of an allocation update's `secrets` (ids and secrets)
/// and hashes them.
pub fn secrets_form(secrets: &[NodeSecret]) -> Result<Vouched<'_>, InvalidField> {
    let mut vouched = Vouched {
        hashes: Vec::with_capacity(secrets.len()),
        nodes: FxHashSet::with_capacity_and_hasher(secrets.len(), Default::default()),
    };
    for (i, s) in secrets.iter().enumerate() {
        // The position is written out only for an error: every report
        // passes here.
        if validate::id("secrets.node_id", &s.node_id).is_err() {
            validate::id(&format!("secrets[{i}].node_id"), &s.node_id)?;
        }
        if secret_field("secrets.secret_id", &s.secret_id).is_err() {
            secret_field(&format!("secrets[{i}].secret_id"), &s.secret_id)?;
        }
        vouched
            .hashes
            .push((&s.node_id, node_secret::hash(&s.secret_id)));
        vouched.nodes.insert(s.node_id.as_str());
    }
    Ok(vouched)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef-node-1";

    #[test]
    fn only_the_registered_secret_acts_for_a_node() {
        let stored = node_secret::hash(SECRET);
        check(Some(&stored), "n1", SECRET).unwrap();
        let err = check(Some(&stored), "n1", "0123456789abcdef-node-2").unwrap_err();
        assert_eq!(err.to_string(), "secret_id does not match node n1");
        let err = check(None, "n1", SECRET).unwrap_err();
        assert_eq!(err, NodeDenied::NoSecret("n1".into()));
    }

    #[test]
    fn a_node_registers_again_only_with_its_own_secret() {
        let stored = node_secret::hash(SECRET);
        may_register(None, "n1", SECRET).unwrap();
        may_register(Some(&stored), "n1", SECRET).unwrap();
        let err = may_register(Some(&stored), "n1", "another-secret-0123").unwrap_err();
        assert_eq!(err, NodeDenied::Mismatch("n1".into()));
    }

    #[test]
    fn a_secret_of_the_wrong_form_names_its_field() {
        let err = secret_field("secret_id", "").unwrap_err();
        assert_eq!(err.field, "secret_id");
        assert!(err.reason.starts_with("is required"), "{err}");
        let err = secret_field("secret_id", "short").unwrap_err();
        assert_eq!(
            err.to_string(),
            "secret_id: is 5 bytes long; give 16 to 128"
        );
        let secrets = [
            NodeSecret {
                node_id: "n1".into(),
                secret_id: SECRET.into(),
            },
            NodeSecret {
                node_id: "n2".into(),
                secret_id: "x".into(),
            },
        ];
        let err = secrets_form(&secrets).unwrap_err();
        assert_eq!(err.field, "secrets[1].secret_id");
        let bad_id = [
            secrets[0].clone(),
            NodeSecret {
                node_id: "a node".into(),
                secret_id: SECRET.into(),
            },
        ];
        let err = secrets_form(&bad_id).unwrap_err();
        assert_eq!(err.field, "secrets[1].node_id");
        let vouched = secrets_form(&secrets[..1]).unwrap();
        assert!(vouched.nodes.contains("n1"));
        assert_eq!(vouched.hashes, [("n1", node_secret::hash(SECRET))]);
    }
}
