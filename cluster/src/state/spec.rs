//! Whether two versions of a job ask for the same thing.

use stampede_proto::Job;

/// Whether two versions of a job ask for the same thing (indexes, status and
/// version aside). A registration that changes nothing is not a new version.
pub fn same_spec(a: &Job, b: &Job) -> bool {
    a.r#type == b.r#type
        && a.priority == b.priority
        && a.datacenters == b.datacenters
        && a.task_groups.len() == b.task_groups.len()
        && a.task_groups
            .iter()
            .zip(&b.task_groups)
            .all(|(x, y)| same_group(x, y, true))
}

/// Whether two versions of a task group ask for the same thing, with or
/// without comparing their count (a count change alone is no reason to
/// replace running allocations).
pub fn same_group(
    a: &stampede_proto::TaskGroup,
    b: &stampede_proto::TaskGroup,
    with_count: bool,
) -> bool {
    a.name == b.name
        && (!with_count || a.count() == b.count())
        && a.resources == b.resources
        && a.constraints == b.constraints
        && a.update == b.update
        && a.meta == b.meta
}
