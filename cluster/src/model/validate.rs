//! Checks on what clients (and other servers) send, before anything is
//! proposed to raft: every request field that ends up in the state has a
//! limit here, documented beside the field in `stampede.proto`, and each
//! error names the field in the path form a user sees in their request
//! (`job.task_groups[0].count`).
//!
//! An error quotes a value only through [`quote`], which keeps a short
//! prefix: echoing a 1 MiB id back would overflow the gRPC status metadata
//! a client accepts. Each check is linear in the size of what it checks.

use std::collections::{BTreeMap, HashMap};

use stampede_proto::eval_reap_request::Collect;
use stampede_proto::{
    AllocClientStatus, AllocDesiredStatus, Allocation, ConstraintOperand, ConstraintTarget,
    EvalStatus, Evaluation, Job, JobType, Node, NodeStatus, Plan, Resources, TaskGroup,
    UpdateStrategy,
};

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
/// Longest free text: a description, a node name, a meta or attribute value.
pub const MAX_TEXT_LEN: usize = 1024;
/// Most entries in a map (a group's meta, a node's attributes, an
/// allocation's task states).
pub const MAX_MAP_ENTRIES: usize = 64;
/// Most task groups in one job.
pub const MAX_TASK_GROUPS: usize = 100;
/// Most datacenters one job may name.
pub const MAX_DATACENTERS: usize = 100;
/// Most constraints on one task group.
pub const MAX_CONSTRAINTS: usize = 64;
/// Most CPU a node may offer or an allocation ask for: a thousand 1 GHz
/// cores. With [`MAX_MEMORY_MB`], sums over any number of allocations stay
/// far from overflow.
pub const MAX_CPU_MHZ: u64 = 1_000_000;
/// Most memory a node may offer or an allocation ask for: 16 TiB.
pub const MAX_MEMORY_MB: u64 = 16 * 1024 * 1024;
/// Longest duration in an update block (min healthy time, progress
/// deadline): one day. Deadlines are the clock plus these, so they never
/// overflow.
pub const MAX_DURATION_MS: u64 = 24 * 60 * 60 * 1000;
/// Most allocations one task group may ask for: a typo like `count: 1000000`
/// gets a clear error instead of flooding the scheduler and the raft log.
pub const MAX_GROUP_COUNT: u32 = 100_000;
/// Most allocations one job may ask for, its groups' counts together: a
/// job's plan is made whole in the worker's memory before it is submitted
/// in pieces (about 2 KiB an allocation), so a hundred groups of the most
/// a group may ask for would take gigabytes. A system job is bounded by
/// the nodes instead (one allocation per group per feasible node).
pub const MAX_JOB_ALLOCS: u64 = 100_000;
/// Highest job priority; 0 on the wire means [`DEFAULT_PRIORITY`].
pub const MAX_PRIORITY: u32 = 100;
/// Priority of a job that does not give one (0 on the wire, or absent from a
/// job file).
pub const DEFAULT_PRIORITY: u32 = 50;
/// Allocations of a task group that does not give a count (absent on the
/// wire, or from a job file). An explicit 0 stays 0: a group scaled to zero.
pub const DEFAULT_COUNT: u32 = 1;

/// The count a client asked for: [`DEFAULT_COUNT`] when it gave none. Only
/// for requests; a stored group always has its count set (or, written
/// before `count` had presence, absent for 0), so state reads `count()`.
pub fn requested_count(group: &TaskGroup) -> u32 {
    group.count.unwrap_or(DEFAULT_COUNT)
}

/// How much of a value an error message quotes.
pub const QUOTE_LEN: usize = 64;

/// `value` for an error message: quoted, cut to its first [`QUOTE_LEN`]
/// bytes (at a character boundary) with its length when longer.
pub fn quote(value: &str) -> String {
    if value.len() <= QUOTE_LEN {
        return format!("{value:?}");
    }
    let mut end = QUOTE_LEN;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}... ({} bytes)", &value[..end], value.len())
}

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
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':');
    if value.bytes().all(|b| allowed(b as char)) {
        return Ok(());
    }
    if let Some(c) = value.chars().find(|c| !allowed(*c)) {
        return Err(InvalidField::new(
            field,
            format!("contains {c:?}; only letters, digits and -_.: are allowed"),
        ));
    }
    Ok(())
}

/// Free text: at most `max` bytes, and no control characters (NUL, line
/// breaks, escapes), which would garble logs and terminals. May be empty.
pub fn text(field: &str, value: &str, max: usize) -> Result<(), InvalidField> {
    if value.len() > max {
        return Err(InvalidField::new(
            field,
            format!("is {} bytes long; at most {max} allowed", value.len()),
        ));
    }
    if let Some(c) = value.chars().find(|c| c.is_control()) {
        return Err(InvalidField::new(
            field,
            format!("contains the control character {c:?}"),
        ));
    }
    Ok(())
}

/// A list or map of `len` entries, at most `max`.
fn at_most(field: &str, len: usize, max: usize) -> Result<(), InvalidField> {
    if len > max {
        return Err(InvalidField::new(
            field,
            format!("has {len} entries; at most {max} allowed"),
        ));
    }
    Ok(())
}

/// A map of ids to free text (meta, attributes).
fn labels(field: &str, map: &BTreeMap<String, String>) -> Result<(), InvalidField> {
    at_most(field, map.len(), MAX_MAP_ENTRIES)?;
    for (k, v) in map {
        id(&format!("{field} key"), k)?;
        text(&format!("{field}[{k}]"), v, MAX_TEXT_LEN)?;
    }
    Ok(())
}

/// Resources a node offers or an allocation asks for: both above 0, within
/// the caps.
fn resources(field: &str, res: Option<&Resources>) -> Result<(), InvalidField> {
    let res = res.ok_or_else(|| InvalidField::new(field, "is required"))?;
    for (name, value, max) in [
        ("cpu_mhz", res.cpu_mhz, MAX_CPU_MHZ),
        ("memory_mb", res.memory_mb, MAX_MEMORY_MB),
    ] {
        if value == 0 {
            return Err(InvalidField::new(
                format!("{field}.{name}"),
                "must be above 0",
            ));
        }
        if value > max {
            return Err(InvalidField::new(
                format!("{field}.{name}"),
                format!("is {value}; at most {max} allowed"),
            ));
        }
    }
    Ok(())
}

/// Every client status, unset first (a plan's new allocation is pending
/// until its client says otherwise; a client must say).
const CLIENT_STATUSES: [AllocClientStatus; 6] = [
    AllocClientStatus::Unspecified,
    AllocClientStatus::Pending,
    AllocClientStatus::Running,
    AllocClientStatus::Complete,
    AllocClientStatus::Failed,
    AllocClientStatus::Lost,
];

/// A wire enum value that must be one of `allowed` (by their labels in the
/// message).
fn one_of<E: Copy + PartialEq + TryFrom<i32>>(
    field: &str,
    value: i32,
    allowed: &[E],
    names: &str,
) -> Result<E, InvalidField> {
    match E::try_from(value) {
        Ok(v) if allowed.contains(&v) => Ok(v),
        _ => Err(InvalidField::new(
            field,
            format!("is {value}; give one of {names}"),
        )),
    }
}

/// A node as sent to `NodeService.Register`. Its status may be unset
/// (registered as ready) but not a value outside the enum.
pub fn node(node: Option<&Node>) -> Result<&Node, InvalidField> {
    let node = node.ok_or_else(|| InvalidField::new("node", "is required"))?;
    id("node.id", &node.id)?;
    text("node.name", &node.name, MAX_ID_LEN)?;
    id("node.datacenter", &node.datacenter)?;
    if !node.node_class.is_empty() {
        id("node.node_class", &node.node_class)?;
    }
    resources("node.resources", node.resources.as_ref())?;
    labels("node.attributes", &node.attributes)?;
    one_of(
        "node.status",
        node.status,
        &[
            NodeStatus::Unspecified,
            NodeStatus::Initializing,
            NodeStatus::Ready,
            NodeStatus::Down,
        ],
        "INITIALIZING, READY or DOWN (or unset for READY)",
    )?;
    Ok(node)
}

/// The status a node reports with `NodeService.UpdateStatus`.
pub fn node_status(field: &str, status: i32) -> Result<NodeStatus, InvalidField> {
    one_of(
        field,
        status,
        &[
            NodeStatus::Initializing,
            NodeStatus::Ready,
            NodeStatus::Down,
        ],
        "READY, INITIALIZING or DOWN",
    )
}

/// The schedulers a worker dequeues for (`EvalService.Dequeue`): at least
/// one, each SERVICE, BATCH, SYSTEM or CORE.
pub fn schedulers(values: &[i32]) -> Result<Vec<JobType>, InvalidField> {
    if values.is_empty() {
        return Err(InvalidField::new(
            "schedulers",
            "name at least one of SERVICE, BATCH, SYSTEM, CORE",
        ));
    }
    values
        .iter()
        .enumerate()
        .map(|(i, t)| {
            one_of(
                &format!("schedulers[{i}]"),
                *t,
                &[
                    JobType::Service,
                    JobType::Batch,
                    JobType::System,
                    JobType::Core,
                ],
                "SERVICE, BATCH, SYSTEM or CORE",
            )
        })
        .collect()
}

/// Most node classes a blocked evaluation lists.
pub const MAX_CLASSES: usize = 1024;

/// Most ids one garbage collection write may carry.
pub const MAX_REAP_IDS: usize = 10_000;

/// A core evaluation's write (`EvalService.Reap`): one list, of ids.
pub fn reap(collect: Option<&Collect>) -> Result<&Collect, InvalidField> {
    let collect = collect.ok_or_else(|| {
        InvalidField::new("collect", "is required: evals, jobs, deployments or nodes")
    })?;
    let lists: Vec<(&str, &Vec<String>)> = match collect {
        Collect::Evals(e) => vec![
            ("evals.eval_ids", &e.eval_ids),
            ("evals.alloc_ids", &e.alloc_ids),
        ],
        Collect::Jobs(e) => vec![("jobs.job_ids", &e.job_ids)],
        Collect::Deployments(e) => vec![("deployments.deployment_ids", &e.deployment_ids)],
        Collect::Nodes(e) => vec![("nodes.node_ids", &e.node_ids)],
    };
    let total: usize = lists.iter().map(|(_, l)| l.len()).sum();
    if total == 0 {
        return Err(InvalidField::new("collect", "lists no id"));
    }
    at_most("collect", total, MAX_REAP_IDS)?;
    for (path, list) in lists {
        for (i, v) in list.iter().enumerate() {
            id(&format!("{path}[{i}]"), v)?;
        }
    }
    Ok(collect)
}

/// An evaluation's delivery (ack, nack, update): its id and token.
pub fn delivery(eval_id: &str, token: &str) -> Result<(), InvalidField> {
    id("eval_id", eval_id)?;
    id("token", token)
}

/// A job as sent to `JobService.Register`. Fields the server sets (status,
/// version, indexes) are not looked at.
pub fn job(job: Option<&Job>) -> Result<&Job, InvalidField> {
    let job = job.ok_or_else(|| InvalidField::new("job", "is required"))?;
    id("job.id", &job.id)?;
    let job_type = match JobType::try_from(job.r#type) {
        Ok(t @ (JobType::Service | JobType::Batch | JobType::System)) => t,
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
    at_most("job.datacenters", job.datacenters.len(), MAX_DATACENTERS)?;
    for (i, dc) in job.datacenters.iter().enumerate() {
        id(&format!("job.datacenters[{i}]"), dc)?;
    }
    if job.task_groups.is_empty() {
        return Err(InvalidField::new("job.task_groups", "must not be empty"));
    }
    at_most("job.task_groups", job.task_groups.len(), MAX_TASK_GROUPS)?;
    let mut names: HashMap<&str, usize> = HashMap::with_capacity(job.task_groups.len());
    for (i, group) in job.task_groups.iter().enumerate() {
        let path = format!("job.task_groups[{i}]");
        id(&format!("{path}.name"), &group.name)?;
        if let Some(first) = names.insert(&group.name, i) {
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
    if job_type != JobType::System {
        let total: u64 = job
            .task_groups
            .iter()
            .map(|g| u64::from(requested_count(g)))
            .sum();
        if total > MAX_JOB_ALLOCS {
            return Err(InvalidField::new(
                "job.task_groups",
                format!(
                    "ask for {total} allocations in all; at most {MAX_JOB_ALLOCS} allowed per job"
                ),
            ));
        }
    }
    Ok(job)
}

fn task_group(path: &str, job_type: JobType, group: &TaskGroup) -> Result<(), InvalidField> {
    // A system job runs one allocation per feasible node: its count means nothing.
    let counted = job_type != JobType::System;
    let count = requested_count(group);
    if counted && count > MAX_GROUP_COUNT {
        return Err(InvalidField::new(
            format!("{path}.count"),
            format!("is {count}; at most {MAX_GROUP_COUNT} allowed per task group"),
        ));
    }
    resources(&format!("{path}.resources"), group.resources.as_ref())?;
    at_most(
        &format!("{path}.constraints"),
        group.constraints.len(),
        MAX_CONSTRAINTS,
    )?;
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
    labels(&format!("{path}.meta"), &group.meta)?;
    if let Some(update) = &group.update {
        if job_type != JobType::Service {
            return Err(InvalidField::new(
                format!("{path}.update"),
                "is only for service jobs",
            ));
        }
        update_strategy(&format!("{path}.update"), update, count)?;
    }
    Ok(())
}

fn update_strategy(path: &str, update: &UpdateStrategy, count: u32) -> Result<(), InvalidField> {
    if update.max_parallel == 0 {
        return Err(InvalidField::new(
            format!("{path}.max_parallel"),
            "must be at least 1",
        ));
    }
    if update.canary > count {
        return Err(InvalidField::new(
            format!("{path}.canary"),
            format!(
                "is {}; at most the group's count ({count}) allowed",
                update.canary
            ),
        ));
    }
    for (name, ms) in [
        ("min_healthy_time_ms", update.min_healthy_time_ms),
        ("progress_deadline_ms", update.progress_deadline_ms),
    ] {
        if ms > MAX_DURATION_MS {
            return Err(InvalidField::new(
                format!("{path}.{name}"),
                format!("is {ms}; at most {MAX_DURATION_MS} (one day) allowed"),
            ));
        }
    }
    Ok(())
}

/// A client's update of one allocation (`NodeService.UpdateAlloc`): its id
/// and the client-side fields, the only ones the server takes from it.
pub fn alloc_update(path: &str, a: &Allocation) -> Result<(), InvalidField> {
    // Every update a client sends passes here: a field's name is only
    // written out for the error that names it.
    let at = |field: &'static str| {
        move |e: InvalidField| InvalidField::new(format!("{path}.{field}"), e.reason)
    };
    id("", &a.id).map_err(at("id"))?;
    one_of(
        "",
        a.client_status,
        &CLIENT_STATUSES[1..],
        "PENDING, RUNNING, COMPLETE, FAILED or LOST",
    )
    .map_err(at("client_status"))?;
    text("", &a.client_description, MAX_TEXT_LEN).map_err(at("client_description"))?;
    at_most("", a.task_states.len(), MAX_MAP_ENTRIES).map_err(at("task_states"))?;
    for (i, named) in a.task_states.iter().enumerate() {
        let name = &named.task;
        id("", name)
            .map_err(|e| InvalidField::new(format!("{path}.task_states[{i}].task"), e.reason))?;
        if a.task_states[..i]
            .iter()
            .any(|earlier| earlier.task == *name)
        {
            return Err(InvalidField::new(
                format!("{path}.task_states[{name}]"),
                "names a task a second time",
            ));
        }
        let state = named.state.as_ref().map_or("", |s| s.state.as_str());
        text("", state, MAX_ID_LEN).map_err(|e| {
            InvalidField::new(format!("{path}.task_states[{name}].state"), e.reason)
        })?;
    }
    if let Some(t) = &a.client_times {
        unix_us("", t.delivered_us).map_err(at("client_times.delivered_us"))?;
        unix_us("", t.started_us).map_err(at("client_times.started_us"))?;
        let after = |us: i64| match us.unsigned_abs() <= DAY_US {
            true => Ok(()),
            false => Err(InvalidField::new(
                "",
                "must be within a day of the allocation's creation, in microseconds",
            )),
        };
        after(t.delivered_after_create_us).map_err(at("client_times.delivered_after_create_us"))?;
        after(t.started_after_create_us).map_err(at("client_times.started_after_create_us"))?;
    }
    Ok(())
}

/// Most jobs one `JobService.Trace` asks for.
pub const MAX_TRACE_JOBS: usize = 1000;

/// The ids of a `JobService.Trace`: 1 to [`MAX_TRACE_JOBS`] valid ids.
pub fn trace_request(job_ids: &[String]) -> Result<(), InvalidField> {
    if job_ids.is_empty() {
        return Err(InvalidField::new("job_ids", "must name at least one job"));
    }
    at_most("job_ids", job_ids.len(), MAX_TRACE_JOBS)?;
    for (i, job_id) in job_ids.iter().enumerate() {
        id(&format!("job_ids[{i}]"), job_id)?;
    }
    Ok(())
}

/// A day in microseconds: how far a time may be ahead of this server's
/// clock, or from an allocation's creation.
const DAY_US: u64 = 86_400_000_000;

/// A step's time on a job's critical path: 0 (not taken) or unix
/// microseconds from 2017 to a day ahead of this server's clock (clocks of
/// other machines may be a little ahead; a value in seconds or
/// milliseconds, or from the far future, is a mistake).
pub fn unix_us(path: &str, us: u64) -> Result<(), InvalidField> {
    const EARLIEST: u64 = 1_483_228_800_000_000; // 2017-01-01
    if us == 0 || (EARLIEST..=stampede_proto::unix_us() + DAY_US).contains(&us) {
        return Ok(());
    }
    Err(InvalidField::new(
        path,
        "must be 0 or a time in microseconds since 1970 (from 2017 to a day ahead)",
    ))
}

/// An evaluation a worker writes (`EvalService.Update`): ids, enums and text.
pub fn eval(path: &str, e: &Evaluation) -> Result<(), InvalidField> {
    id(&format!("{path}.id"), &e.id)?;
    id(&format!("{path}.job_id"), &e.job_id)?;
    one_of(
        &format!("{path}.status"),
        e.status,
        &[
            EvalStatus::Pending,
            EvalStatus::Blocked,
            EvalStatus::Complete,
            EvalStatus::Failed,
            EvalStatus::Canceled,
        ],
        "PENDING, BLOCKED, COMPLETE, FAILED or CANCELED",
    )?;
    // Unset: the scheduler takes the job's type.
    one_of(
        &format!("{path}.type"),
        e.r#type,
        &[
            JobType::Unspecified,
            JobType::Service,
            JobType::Batch,
            JobType::System,
        ],
        "SERVICE, BATCH or SYSTEM (or unset for the job's)",
    )?;
    for (name, value) in [
        ("node_id", &e.node_id),
        ("previous_eval", &e.previous_eval),
        ("blocked_eval", &e.blocked_eval),
    ] {
        if !value.is_empty() {
            id(&format!("{path}.{name}"), value)?;
        }
    }
    text(&format!("{path}.triggered_by"), &e.triggered_by, MAX_ID_LEN)?;
    if let Some(t) = &e.times {
        for (name, us) in [
            ("enqueued_us", t.enqueued_us),
            ("dequeued_us", t.dequeued_us),
            ("caught_up_us", t.caught_up_us),
            ("plan_submitted_us", t.plan_submitted_us),
        ] {
            unix_us(&format!("{path}.times.{name}"), us)?;
        }
    }
    let classes = format!("{path}.class_eligibility");
    at_most(&classes, e.class_eligibility.len(), MAX_CLASSES)?;
    for key in e.class_eligibility.keys() {
        let ok = key.split_once('/').is_some_and(|(dc, class)| {
            id("", dc).is_ok() && (class.is_empty() || id("", class).is_ok())
        });
        if !ok {
            return Err(InvalidField::new(
                format!("{classes} key"),
                format!(
                    "is {}; must be DATACENTER/NODE_CLASS (ids; the class may be empty)",
                    quote(key)
                ),
            ));
        }
    }
    text(
        &format!("{path}.status_description"),
        &e.status_description,
        MAX_TEXT_LEN,
    )
}

/// A plan a worker submits (`PlanService.Submit`): its allocations belong
/// to its job and to the node they are listed under, with known statuses
/// and resources within the caps.
pub fn plan(plan: &Plan) -> Result<(), InvalidField> {
    id("plan.eval_id", &plan.eval_id)?;
    id("plan.job_id", &plan.job_id)?;
    for (field, by_node) in [
        ("plan.node_allocation", &plan.node_allocation),
        ("plan.node_update", &plan.node_update),
    ] {
        // A plan lists a thousand allocations: a field's path is only
        // written out for the error that names it.
        for (node_id, list) in by_node {
            id("", node_id).map_err(|e| InvalidField::new(format!("{field} key"), e.reason))?;
            for (i, a) in list.allocs.iter().enumerate() {
                planned_alloc(a, node_id, plan).map_err(|e| {
                    InvalidField::new(
                        format!("{field}[{node_id}].allocs[{i}].{}", e.field),
                        e.reason,
                    )
                })?;
            }
        }
    }
    // The evaluation's outcome: the plan's own evaluation first, then any
    // it creates, all of the plan's job.
    for (i, e) in plan.evals.iter().enumerate() {
        let path = format!("plan.evals[{i}]");
        eval(&path, e)?;
        if i == 0 && e.id != plan.eval_id {
            return Err(InvalidField::new(
                format!("{path}.id"),
                format!(
                    "is {}; the first evaluation must be the plan's own, {:?}",
                    quote(&e.id),
                    plan.eval_id
                ),
            ));
        }
        if e.job_id != plan.job_id {
            return Err(InvalidField::new(
                format!("{path}.job_id"),
                format!(
                    "is {}; a plan records only its own job's evaluations, {:?}",
                    quote(&e.job_id),
                    plan.job_id
                ),
            ));
        }
    }
    Ok(())
}

/// One allocation of a plan; a field is named from the allocation on.
fn planned_alloc(a: &Allocation, node_id: &str, plan: &Plan) -> Result<(), InvalidField> {
    id("id", &a.id)?;
    id("task_group", &a.task_group)?;
    if a.job_id != plan.job_id {
        return Err(InvalidField::new(
            "job_id",
            format!(
                "is {}; a plan places only its own job, {:?}",
                quote(&a.job_id),
                plan.job_id
            ),
        ));
    }
    if a.node_id != node_id {
        return Err(InvalidField::new(
            "node_id",
            format!(
                "is {}; the allocation is listed under node {node_id:?}",
                quote(&a.node_id)
            ),
        ));
    }
    resources("resources", a.resources.as_ref())?;
    one_of(
        "desired_status",
        a.desired_status,
        &[AllocDesiredStatus::Run, AllocDesiredStatus::Stop],
        "RUN or STOP",
    )?;
    one_of(
        "client_status",
        a.client_status,
        &CLIENT_STATUSES,
        "PENDING, RUNNING, COMPLETE, FAILED or LOST",
    )?;
    text("name", &a.name, MAX_TEXT_LEN)?;
    text("desired_description", &a.desired_description, MAX_TEXT_LEN)
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
            count: Some(count),
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
        edge.task_groups[0].count = Some(MAX_GROUP_COUNT);
        edge.task_groups.truncate(1);
        assert!(job(Some(&edge)).is_ok());
        // The job's allocations in all, split over groups, at the bound.
        let mut split = good();
        split.task_groups[0].count = Some(MAX_GROUP_COUNT / 2);
        split.task_groups[1].count = Some(MAX_GROUP_COUNT / 2);
        assert!(job(Some(&split)).is_ok());
        let mut zero = good();
        zero.task_groups[0].count = Some(0);
        assert!(job(Some(&zero)).is_ok(), "a group may be scaled to zero");
        let mut unset = good();
        unset.task_groups[1].count = None;
        unset.task_groups[1].update.as_mut().unwrap().canary = 1;
        assert!(
            job(Some(&unset)).is_ok(),
            "an unset count is the default, 1, which one canary fits"
        );
        unset.task_groups[1].update.as_mut().unwrap().canary = 2;
        assert_eq!(
            job(Some(&unset)).unwrap_err().to_string(),
            "job.task_groups[1].update.canary: is 2; at most the group's count (1) allowed"
        );
        let mut system = good();
        system.r#type = JobType::System as i32;
        system.task_groups[0].count = Some(MAX_GROUP_COUNT + 1);
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
                Box::new(|j| j.task_groups[0].count = Some(1_000_000)),
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
            (
                Box::new(|j| {
                    j.task_groups[1]
                        .update
                        .as_mut()
                        .unwrap()
                        .progress_deadline_ms = u64::MAX
                }),
                "job.task_groups[1].update.progress_deadline_ms: is 18446744073709551615; at most 86400000 (one day) allowed",
            ),
            (
                Box::new(|j| j.task_groups[0].resources.as_mut().unwrap().cpu_mhz = 1 << 63),
                "job.task_groups[0].resources.cpu_mhz: is 9223372036854775808; at most 1000000 allowed",
            ),
            (
                Box::new(|j| j.datacenters = vec!["dc".into(); MAX_DATACENTERS + 1]),
                "job.datacenters: has 101 entries; at most 100 allowed",
            ),
            (
                Box::new(|j| {
                    j.task_groups = (0..=MAX_TASK_GROUPS)
                        .map(|i| group(&format!("g{i}"), 1))
                        .collect()
                }),
                "job.task_groups: has 101 entries; at most 100 allowed",
            ),
            (
                Box::new(|j| {
                    j.task_groups[0].meta = (0..=MAX_MAP_ENTRIES)
                        .map(|i| (format!("k{i}"), String::new()))
                        .collect()
                }),
                "job.task_groups[0].meta: has 65 entries; at most 64 allowed",
            ),
            (
                Box::new(|j| {
                    j.task_groups = (0..3)
                        .map(|i| group(&format!("g{i}"), 40_000))
                        .collect()
                }),
                "job.task_groups: ask for 120000 allocations in all; at most 100000 allowed per job",
            ),
            (
                Box::new(|j| {
                    j.task_groups[0].meta = [("k".into(), "a\0b".into())].into();
                }),
                "job.task_groups[0].meta[k]: contains the control character '\\0'",
            ),
        ];
        for (mutate, want) in cases {
            let mut j = good();
            mutate(&mut j);
            assert_eq!(job(Some(&j)).unwrap_err().to_string(), want);
        }
        assert_eq!(job(None).unwrap_err().to_string(), "job: is required");
    }

    #[test]
    fn many_task_groups_are_checked_in_linear_time() {
        // Names are checked with a map, not against every earlier group.
        let mut j = good();
        j.task_groups = (0..MAX_TASK_GROUPS)
            .map(|i| group(&format!("g{i}"), 1))
            .collect();
        assert!(job(Some(&j)).is_ok());
        j.task_groups[MAX_TASK_GROUPS - 1].name = "g0".into();
        let err = job(Some(&j)).unwrap_err().to_string();
        assert!(
            err.ends_with("already the name of job.task_groups[0]"),
            "{err}"
        );
    }

    #[test]
    fn quotes_only_a_prefix_of_a_long_value() {
        assert_eq!(quote("web"), "\"web\"");
        let long = "é".repeat(1 << 19);
        let q = quote(&long);
        assert!(q.len() < 2 * QUOTE_LEN, "{q}");
        assert!(q.ends_with("... (1048576 bytes)"), "{q}");
    }

    #[test]
    fn client_updates_need_a_known_status() {
        let update = |status: i32| Allocation {
            id: "a1".into(),
            client_status: status,
            ..Default::default()
        };
        assert!(alloc_update("allocs[0]", &update(AllocClientStatus::Running as i32)).is_ok());
        for bad in [0, 6, -1, i32::MAX] {
            let err = alloc_update("allocs[0]", &update(bad)).unwrap_err();
            assert_eq!(err.field, "allocs[0].client_status");
        }
    }

    #[test]
    fn a_clients_times_are_microseconds_of_now_or_zero() {
        let update = |delivered_us: u64| Allocation {
            id: "a1".into(),
            client_status: AllocClientStatus::Running as i32,
            client_times: Some(stampede_proto::AllocClientTimes {
                delivered_us,
                ..Default::default()
            }),
            ..Default::default()
        };
        for ok in [0, stampede_proto::unix_us()] {
            assert!(alloc_update("allocs[0]", &update(ok)).is_ok());
        }
        let seconds = stampede_proto::unix_us() / 1_000_000;
        for bad in [seconds, seconds * 1000, u64::MAX] {
            let err = alloc_update("allocs[0]", &update(bad)).unwrap_err();
            assert_eq!(err.field, "allocs[0].client_times.delivered_us");
        }
        // After the allocation's creation: within a day either way.
        let after = |started_after_create_us: i64| Allocation {
            client_times: Some(stampede_proto::AllocClientTimes {
                started_after_create_us,
                ..Default::default()
            }),
            ..update(0)
        };
        for ok in [0, 600_000, -5_000, DAY_US as i64] {
            assert!(alloc_update("allocs[0]", &after(ok)).is_ok(), "{ok}");
        }
        for bad in [DAY_US as i64 + 1, i64::MIN] {
            let err = alloc_update("allocs[0]", &after(bad)).unwrap_err();
            assert_eq!(err.field, "allocs[0].client_times.started_after_create_us");
        }
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
            (
                Box::new(|n| n.resources.as_mut().unwrap().memory_mb = u64::MAX),
                "node.resources.memory_mb: is 18446744073709551615; at most",
            ),
            (Box::new(|n| n.status = 9), "node.status: is 9; give one of"),
            (Box::new(|n| n.name = "a\0".into()), "node.name: contains"),
            (
                Box::new(|n| {
                    n.attributes
                        .insert("k".into(), "v".repeat(MAX_TEXT_LEN + 1));
                }),
                "node.attributes[k]: is 1025 bytes long",
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

    #[test]
    fn a_plan_names_the_field_of_the_allocation_that_is_wrong() {
        let alloc = Allocation {
            id: "a1".into(),
            job_id: "web".into(),
            node_id: "node-1".into(),
            task_group: "web".into(),
            resources: Some(Resources {
                cpu_mhz: 100,
                memory_mb: 64,
            }),
            desired_status: AllocDesiredStatus::Run as i32,
            ..Default::default()
        };
        let plan_with = |a: Allocation, node: &str| Plan {
            eval_id: "e1".into(),
            job_id: "web".into(),
            node_allocation: [(
                node.to_string(),
                stampede_proto::AllocList {
                    allocs: vec![alloc.clone(), a],
                },
            )]
            .into(),
            ..Default::default()
        };
        assert_eq!(plan(&plan_with(alloc.clone(), "node-1")), Ok(()));
        let cases: Vec<(Allocation, &str, &str)> = vec![
            (
                Allocation {
                    id: String::new(),
                    ..alloc.clone()
                },
                "node-1",
                "plan.node_allocation[node-1].allocs[1].id: must not be empty",
            ),
            (
                Allocation {
                    name: "x\0".into(),
                    ..alloc.clone()
                },
                "node-1",
                "plan.node_allocation[node-1].allocs[1].name: contains",
            ),
            (
                Allocation {
                    resources: None,
                    ..alloc.clone()
                },
                "node-1",
                "plan.node_allocation[node-1].allocs[1].resources: is required",
            ),
            (
                Allocation {
                    desired_description: "d".repeat(MAX_TEXT_LEN + 1),
                    ..alloc.clone()
                },
                "node-1",
                "plan.node_allocation[node-1].allocs[1].desired_description: is 1025 bytes long",
            ),
            (
                alloc.clone(),
                "",
                "plan.node_allocation key: must not be empty",
            ),
        ];
        for (a, node, want) in cases {
            let err = plan(&plan_with(a, node)).unwrap_err().to_string();
            assert!(err.starts_with(want), "{err:?} should start with {want:?}");
        }
    }
}
