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

use stampede_proto::{ConstraintOperand, ConstraintTarget, Job, JobType, TaskGroup};

/// Most allocations one task group may ask for: a typo like `count: 1000000`
/// gets a clear error instead of flooding the scheduler and the raft log.
pub const MAX_GROUP_COUNT: u32 = 100_000;

/// Highest job priority; 0 on the wire means [`DEFAULT_PRIORITY`].
pub const MAX_PRIORITY: u32 = 100;

/// Priority of a job that does not give one (0 on the wire, or absent from a
/// job file).
pub const DEFAULT_PRIORITY: u32 = 50;

/// A job as sent to `JobService.Register`. Fields the server sets (status,
/// version, indexes) are not looked at.
pub fn job(job: Option<&Job>) -> Result<&Job, InvalidField> {
    let job = job.ok_or_else(|| InvalidField::new("job", "is required"))?;
    id("job.id", &job.id)?;
    let job_type = match JobType::try_from(job.r#type) {
        Ok(t) if t != JobType::Unspecified => t,
        _ => {
            return Err(InvalidField::new(
                "job.type",
                "is required: service, batch or system",
            ))
        }
    };
    if job.priority > MAX_PRIORITY {
        return Err(InvalidField::new(
            "job.priority",
            format!(
                "is {}; must be 1 to {MAX_PRIORITY} (or unset for the default)",
                job.priority
            ),
        ));
    }
    for (i, dc) in job.datacenters.iter().enumerate() {
        id(&format!("job.datacenters[{i}]"), dc)?;
    }
    if job.task_groups.is_empty() {
        return Err(InvalidField::new("job.task_groups", "must not be empty"));
    }
    for (i, group) in job.task_groups.iter().enumerate() {
        let path = format!("job.task_groups[{i}]");
        id(&format!("{path}.name"), &group.name)?;
        if let Some(first) = job.task_groups[..i]
            .iter()
            .position(|g| g.name == group.name)
        {
            return Err(InvalidField::new(
                format!("{path}.name"),
                format!(
                    "{:?} is already the name of job.task_groups[{first}]",
                    group.name
                ),
            ));
        }
        task_group(&path, job_type, group)?;
    }
    Ok(job)
}

fn task_group(path: &str, job_type: JobType, group: &TaskGroup) -> Result<(), InvalidField> {
    // A system job runs one allocation per feasible node: its count means nothing.
    let counted = job_type != JobType::System;
    if counted && group.count > MAX_GROUP_COUNT {
        return Err(InvalidField::new(
            format!("{path}.count"),
            format!(
                "is {}; at most {MAX_GROUP_COUNT} allowed per task group",
                group.count
            ),
        ));
    }
    let res = group
        .resources
        .as_ref()
        .ok_or_else(|| InvalidField::new(format!("{path}.resources"), "is required"))?;
    if res.cpu_mhz == 0 {
        return Err(InvalidField::new(
            format!("{path}.resources.cpu_mhz"),
            "must be above 0",
        ));
    }
    if res.memory_mb == 0 {
        return Err(InvalidField::new(
            format!("{path}.resources.memory_mb"),
            "must be above 0",
        ));
    }
    for (j, c) in group.constraints.iter().enumerate() {
        let path = format!("{path}.constraints[{j}]");
        if !matches!(
            ConstraintTarget::try_from(c.target),
            Ok(ConstraintTarget::Datacenter | ConstraintTarget::NodeClass)
        ) {
            return Err(InvalidField::new(
                format!("{path}.target"),
                "is required: datacenter or node_class",
            ));
        }
        if !matches!(
            ConstraintOperand::try_from(c.operand),
            Ok(ConstraintOperand::Equal | ConstraintOperand::NotEqual)
        ) {
            return Err(InvalidField::new(
                format!("{path}.operand"),
                "is required: = or !=",
            ));
        }
        id(&format!("{path}.value"), &c.value)?;
    }
    if let Some(update) = &group.update {
        if job_type != JobType::Service {
            return Err(InvalidField::new(
                format!("{path}.update"),
                "is only for service jobs",
            ));
        }
        if update.max_parallel == 0 {
            return Err(InvalidField::new(
                format!("{path}.update.max_parallel"),
                "must be at least 1",
            ));
        }
        if update.canary > group.count {
            return Err(InvalidField::new(
                format!("{path}.update.canary"),
                format!(
                    "is {}; at most the group's count ({}) allowed",
                    update.canary, group.count
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod job_tests {
    use super::*;
    use stampede_proto::{Constraint, Resources, UpdateStrategy};

    fn good() -> Job {
        Job {
            id: "web".into(),
            r#type: JobType::Service as i32,
            datacenters: vec!["dc1".into()],
            task_groups: vec![
                group("web", 3),
                TaskGroup {
                    constraints: vec![Constraint {
                        target: ConstraintTarget::NodeClass as i32,
                        operand: ConstraintOperand::NotEqual as i32,
                        value: "gpu".into(),
                    }],
                    update: Some(UpdateStrategy {
                        max_parallel: 1,
                        canary: 2,
                        ..Default::default()
                    }),
                    ..group("api", 2)
                },
            ],
            ..Default::default()
        }
    }

    fn group(name: &str, count: u32) -> TaskGroup {
        TaskGroup {
            name: name.into(),
            count,
            resources: Some(Resources {
                cpu_mhz: 100,
                memory_mb: 64,
            }),
            ..Default::default()
        }
    }

    /// A change that breaks one field of [`good`].
    type Mutation = Box<dyn Fn(&mut Job)>;

    #[test]
    fn accepts_complete_jobs() {
        assert!(job(Some(&good())).is_ok());
        let mut edge = good();
        edge.priority = MAX_PRIORITY;
        edge.task_groups[0].count = MAX_GROUP_COUNT;
        assert!(job(Some(&edge)).is_ok());
        let mut zero = good();
        zero.task_groups[0].count = 0;
        assert!(job(Some(&zero)).is_ok(), "a group may be scaled to zero");
        let mut system = good();
        system.r#type = JobType::System as i32;
        system.task_groups[0].count = MAX_GROUP_COUNT + 1;
        system.task_groups[1].update = None;
        assert!(job(Some(&system)).is_ok(), "system jobs ignore count");
    }

    #[test]
    fn names_the_field_that_is_wrong() {
        let cases: Vec<(Mutation, &str)> = vec![
            (Box::new(|j| j.id.clear()), "job.id: must not be empty"),
            (
                Box::new(|j| j.id = "web/1".into()),
                "job.id: contains '/'; only letters, digits and -_.: are allowed",
            ),
            (
                Box::new(|j| j.r#type = JobType::Unspecified as i32),
                "job.type: is required: service, batch or system",
            ),
            (
                Box::new(|j| j.r#type = 42),
                "job.type: is required: service, batch or system",
            ),
            (
                Box::new(|j| j.priority = 101),
                "job.priority: is 101; must be 1 to 100 (or unset for the default)",
            ),
            (
                Box::new(|j| j.datacenters.push(String::new())),
                "job.datacenters[1]: must not be empty",
            ),
            (
                Box::new(|j| j.task_groups.clear()),
                "job.task_groups: must not be empty",
            ),
            (
                Box::new(|j| j.task_groups[1].name = "a b".into()),
                "job.task_groups[1].name: contains ' '; only letters, digits and -_.: are allowed",
            ),
            (
                Box::new(|j| j.task_groups.push(group("web", 1))),
                "job.task_groups[2].name: \"web\" is already the name of job.task_groups[0]",
            ),
            (
                Box::new(|j| j.task_groups[0].count = 1_000_000),
                "job.task_groups[0].count: is 1000000; at most 100000 allowed per task group",
            ),
            (
                Box::new(|j| j.task_groups[0].resources = None),
                "job.task_groups[0].resources: is required",
            ),
            (
                Box::new(|j| j.task_groups[0].resources.as_mut().unwrap().cpu_mhz = 0),
                "job.task_groups[0].resources.cpu_mhz: must be above 0",
            ),
            (
                Box::new(|j| j.task_groups[0].resources.as_mut().unwrap().memory_mb = 0),
                "job.task_groups[0].resources.memory_mb: must be above 0",
            ),
            (
                Box::new(|j| j.task_groups[1].constraints[0].target = 0),
                "job.task_groups[1].constraints[0].target: is required: datacenter or node_class",
            ),
            (
                Box::new(|j| j.task_groups[1].constraints[0].operand = 9),
                "job.task_groups[1].constraints[0].operand: is required: = or !=",
            ),
            (
                Box::new(|j| j.task_groups[1].constraints[0].value.clear()),
                "job.task_groups[1].constraints[0].value: must not be empty",
            ),
            (
                Box::new(|j| j.r#type = JobType::Batch as i32),
                "job.task_groups[1].update: is only for service jobs",
            ),
            (
                Box::new(|j| j.task_groups[1].update.as_mut().unwrap().max_parallel = 0),
                "job.task_groups[1].update.max_parallel: must be at least 1",
            ),
            (
                Box::new(|j| j.task_groups[1].update.as_mut().unwrap().canary = 3),
                "job.task_groups[1].update.canary: is 3; at most the group's count (2) allowed",
            ),
        ];
        for (mutate, want) in cases {
            let mut j = good();
            mutate(&mut j);
            assert_eq!(job(Some(&j)).unwrap_err().to_string(), want);
        }
        assert_eq!(job(None).unwrap_err().to_string(), "job: is required");
    }
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
        type Mutation = Box<dyn Fn(&mut Node)>;
        let cases: Vec<(Mutation, &str)> = vec![
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
