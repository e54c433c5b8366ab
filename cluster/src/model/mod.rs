//! Pure helpers on the wire types (`stampede_proto`): the clock every entry is
//! stamped with, new evaluations, the allocation and deployment predicates
//! every layer asks, and request validation. Nothing here touches raft, the
//! state store or the network, so every layer may use it.
//!
//! - [`validate`]: every request field against its limit (documented beside
//!   the field in `stampede.proto`), each error naming the field.
//! - [`identity`]: whether a call that acts for a node carries that node's
//!   secret.
//! - `stages`: `stampede_job_stage_seconds`, the stages of a job's path a
//!   server ends.
//! - [`planted`]: scheduler bugs planted on purpose in debug builds
//!   (`STAMPEDE_PLANTED_BUG`), which the invariant audit must catch.

pub mod identity;
pub mod planted;
mod stages;
pub mod validate;

pub use stages::JobStages;

use stampede_proto::{
    AllocClientStatus, AllocDesiredStatus, Allocation, Deployment, DeploymentStatus, EvalStatus,
    Evaluation, Job, JobType, Resources,
};

/// Milliseconds since the Unix epoch: the one clock of entries and deadlines.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A pending evaluation of `job`, for the reason `triggered_by`.
pub fn new_eval(job: &Job, triggered_by: &str, node_id: Option<&str>) -> Evaluation {
    Evaluation {
        id: uuid::Uuid::new_v4().to_string(),
        job_id: job.id.clone(),
        r#type: job.r#type,
        priority: job.priority,
        triggered_by: triggered_by.into(),
        status: EvalStatus::Pending as i32,
        job_modify_index: job.job_modify_index,
        node_id: node_id.unwrap_or_default().to_string(),
        ..Default::default()
    }
}

/// A pending evaluation of `job` that applying the entry at `index` makes
/// (for node `node_id`): its id is drawn from the entry, so that every
/// server, applying the same log, makes the same evaluation.
pub fn applied_eval(job: &Job, triggered_by: &str, node_id: &str, index: u64) -> Evaluation {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    hash.update(index.to_be_bytes());
    for part in [triggered_by, node_id, job.id.as_str()] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    let digest = hash.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    Evaluation {
        id: uuid::Builder::from_random_bytes(bytes)
            .into_uuid()
            .to_string(),
        ..new_eval(job, triggered_by, Some(node_id))
    }
}

/// Adds `r` to `total`.
pub fn add_resources(total: &mut Resources, r: Option<&Resources>) {
    if let Some(r) = r {
        total.cpu_mhz += r.cpu_mhz;
        total.memory_mb += r.memory_mb;
    }
}

/// Takes `r` out of `total`, which holds it (never below zero).
pub fn sub_resources(total: &mut Resources, r: Option<&Resources>) {
    if let Some(r) = r {
        total.cpu_mhz = total.cpu_mhz.saturating_sub(r.cpu_mhz);
        total.memory_mb = total.memory_mb.saturating_sub(r.memory_mb);
    }
}

/// Whether an allocation no longer holds resources on its node: stopped by
/// the scheduler, or complete, failed or lost on the client.
pub fn alloc_terminal(a: &Allocation) -> bool {
    statuses_terminal(a.desired_status, a.client_status)
}

/// Whether an allocation with these desired and client statuses is
/// terminal (see [`alloc_terminal`]).
pub fn statuses_terminal(desired_status: i32, client_status: i32) -> bool {
    desired_status == AllocDesiredStatus::Stop as i32
        || AllocClientStatus::is_terminal(client_status)
}

/// Running or paused: the deployment may still place work.
pub fn deployment_running(d: &Deployment) -> bool {
    d.status == DeploymentStatus::Running as i32 || d.status == DeploymentStatus::Paused as i32
}

/// Successful, failed or cancelled.
pub fn deployment_done(d: &Deployment) -> bool {
    !deployment_running(d)
}

/// Complete, failed or canceled: nothing will schedule it again.
pub fn eval_terminal(e: &Evaluation) -> bool {
    matches!(
        EvalStatus::try_from(e.status),
        Ok(EvalStatus::Complete | EvalStatus::Failed | EvalStatus::Canceled)
    )
}

/// An evaluation the leader made for its own chores (garbage collection):
/// it lives only in the broker, never in the state.
pub fn is_core(e: &Evaluation) -> bool {
    e.r#type == JobType::Core as i32
}

/// Whether garbage collection may remove an allocation (given it is old
/// enough): terminal, and not still running on its client, as Nomad's
/// `allocGCEligible` has it.
pub fn alloc_collectable(a: &Allocation) -> bool {
    alloc_terminal(a) && a.client_status != AllocClientStatus::Running as i32
}

/// A node's class for blocked evaluations: `datacenter/node_class`, the
/// two things a job's constraints can tell nodes apart by (Nomad's
/// computed class, for our constraints).
pub fn class_key(datacenter: &str, node_class: &str) -> String {
    format!("{datacenter}/{node_class}")
}
