//! Checks on what clients send, before anything is proposed to raft. Each error
//! names the field, in the path form a user sees in their request (`node.id`).

use stampede_proto::Node;

/// A request field that is missing or out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct InvalidField {
    pub field: String,
    pub reason: String,
}

impl InvalidField {
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

impl From<InvalidField> for tonic::Status {
    fn from(e: InvalidField) -> Self {
        tonic::Status::invalid_argument(e.to_string())
    }
}

/// Longest id or name we accept: ids appear in every log entry and query.
pub const MAX_ID_LEN: usize = 128;

/// An id is 1 to 128 characters of letters, digits and `-_.:`.
pub fn id(field: &str, value: &str) -> Result<(), InvalidField> {
    if value.is_empty() {
        return Err(InvalidField::new(field, "must not be empty"));
    }
    if value.len() > MAX_ID_LEN {
        return Err(InvalidField::new(
            field,
            format!(
                "is {} bytes long; at most {MAX_ID_LEN} allowed",
                value.len()
            ),
        ));
    }
    if let Some(c) = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "-_.:".contains(*c)))
    {
        return Err(InvalidField::new(
            field,
            format!("contains {c:?}; only letters, digits and -_.: are allowed"),
        ));
    }
    Ok(())
}

/// A node as sent to `NodeService.Register`.
pub fn node(node: Option<&Node>) -> Result<&Node, InvalidField> {
    let node = node.ok_or_else(|| InvalidField::new("node", "is required"))?;
    id("node.id", &node.id)?;
    id("node.datacenter", &node.datacenter)?;
    if !node.node_class.is_empty() {
        id("node.node_class", &node.node_class)?;
    }
    let res = node
        .resources
        .as_ref()
        .ok_or_else(|| InvalidField::new("node.resources", "is required"))?;
    if res.cpu_mhz == 0 {
        return Err(InvalidField::new(
            "node.resources.cpu_mhz",
            "must be above 0",
        ));
    }
    if res.memory_mb == 0 {
        return Err(InvalidField::new(
            "node.resources.memory_mb",
            "must be above 0",
        ));
    }
    Ok(node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use stampede_proto::Resources;

    fn good() -> Node {
        Node {
            id: "node-1".into(),
            datacenter: "dc1".into(),
            resources: Some(Resources {
                cpu_mhz: 4000,
                memory_mb: 8192,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn accepts_a_complete_node() {
        assert!(node(Some(&good())).is_ok());
    }

    #[test]
    fn names_the_field_that_is_wrong() {
        let cases: Vec<(Box<dyn Fn(&mut Node)>, &str)> = vec![
            (Box::new(|n| n.id.clear()), "node.id: must not be empty"),
            (Box::new(|n| n.id = "a b".into()), "node.id: contains ' '"),
            (
                Box::new(|n| n.id = "x".repeat(200)),
                "node.id: is 200 bytes",
            ),
            (Box::new(|n| n.datacenter.clear()), "node.datacenter"),
            (
                Box::new(|n| n.resources = None),
                "node.resources: is required",
            ),
            (
                Box::new(|n| n.resources.as_mut().unwrap().cpu_mhz = 0),
                "node.resources.cpu_mhz",
            ),
            (
                Box::new(|n| n.resources.as_mut().unwrap().memory_mb = 0),
                "node.resources.memory_mb",
            ),
        ];
        for (mutate, want) in cases {
            let mut n = good();
            mutate(&mut n);
            let err = node(Some(&n)).unwrap_err().to_string();
            assert!(err.starts_with(want), "{err:?} should start with {want:?}");
        }
        assert_eq!(node(None).unwrap_err().to_string(), "node: is required");
    }
}
