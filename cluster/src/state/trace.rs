//! A job's critical path as this server sees it (`JobService.Trace`): the
//! steps its evaluation and its last allocation to run recorded, and when
//! this server applied the entries between them (the [`ApplyClock`]).
//!
//! [`ApplyClock`]: super::ApplyClock

use stampede_proto::{AllocDesiredStatus, Allocation, JobTrace};

use super::{State, StateStore};

impl StateStore {
    /// The path of `job_id`: through the allocation of its newest version
    /// that reported running last (or, while none runs, the newest one),
    /// and the evaluation that placed it. `found` false for an unknown job.
    pub fn job_trace(&self, job_id: &str) -> JobTrace {
        let mut trace = JobTrace {
            job_id: job_id.to_string(),
            ..Default::default()
        };
        // Under the read lock, briefly: one job's allocations and one eval.
        let (found, picked) = self.read(|s| (s.job(job_id).is_some(), pick(s, job_id)));
        trace.found = found || picked.is_some();
        let Some((alloc, eval)) = picked else {
            return trace;
        };
        let applied = |index| self.applied_at_us(index).unwrap_or(0);
        if let Some(eval) = eval {
            let times = eval.times.unwrap_or_default();
            trace.eval_id = eval.id.clone();
            trace.registered_us = applied(registration_index(&eval));
            trace.eval_created_us = applied(eval.create_index);
            trace.enqueued_us = times.enqueued_us;
            trace.dequeued_us = times.dequeued_us;
            trace.caught_up_us = times.caught_up_us;
            trace.plan_submitted_us = times.plan_submitted_us;
        }
        let client = alloc.client_times.unwrap_or_default();
        trace.alloc_id = alloc.id.clone();
        trace.node_id = alloc.node_id.clone();
        trace.plan_committed_us = applied(alloc.create_index);
        trace.delivered_us = client.delivered_us;
        trace.started_us = client.started_us;
        trace.running_committed_us = applied(alloc.running_index);
        trace
    }
}

/// The index of the registration that made the version `eval` scheduled:
/// an evaluation created later (a rolling update's next step) carries the
/// job's `job_modify_index`; the registration's own carries 0 and was
/// created by that very entry.
fn registration_index(eval: &stampede_proto::Evaluation) -> u64 {
    match eval.job_modify_index {
        0 => eval.create_index,
        at => at.min(eval.create_index),
    }
}

type Picked = (
    std::sync::Arc<Allocation>,
    Option<std::sync::Arc<stampede_proto::Evaluation>>,
);

fn pick(s: &State, job_id: &str) -> Option<Picked> {
    let allocs = s.job_allocs(job_id);
    let newest = allocs.iter().map(|a| a.job_version).max()?;
    let alloc = allocs
        .into_iter()
        .filter(|a| a.job_version == newest && a.desired_status == AllocDesiredStatus::Run as i32)
        // Running last wins; then the newest placed.
        .max_by_key(|a| (a.running_index != 0, a.running_index, a.create_index))?;
    let eval = s.eval(&alloc.eval_id);
    Some((alloc, eval))
}

#[cfg(test)]
mod tests {
    use super::registration_index;
    use stampede_proto::Evaluation;

    #[test]
    fn a_later_steps_evaluation_points_back_at_the_registration_and_the_registrations_at_itself() {
        let step = Evaluation {
            job_modify_index: 7,
            create_index: 12,
            ..Default::default()
        };
        assert_eq!(registration_index(&step), 7);
        let own = Evaluation {
            create_index: 12,
            ..Default::default()
        };
        assert_eq!(registration_index(&own), 12);
    }
}
